//! How long a journal fdatasync waits after the previous one started
//! ([`FileBackendConfig::min_sync_interval`] up to
//! [`FileBackendConfig::max_sync_interval`]): the pure decision, fed with
//! the duration of every journal sync of `sync = always`.
//!
//! A short interval gives the lowest latency on a quiet host; a longer one
//! costs up to its length in latency but fewer syncs, and on a VM each sync
//! costs the host CPU time. When the host runs short of it a device flush
//! stalls for milliseconds, and fewer syncs are what stops the stalls. So the
//! pacer starts at the minimum (0 by default: a quiet host keeps the disk's
//! own latency) and doubles the interval (up to the maximum) whenever a small
//! sync stalls, which on a quiet host never happens; after [`HOLD`] without
//! a stall it steps back down by a quarter, to the minimum at the most. The
//! measurements behind the defaults are in `docs/storage.md`.
//!
//! [`FileBackendConfig::min_sync_interval`]: super::FileBackendConfig::min_sync_interval
//! [`FileBackendConfig::max_sync_interval`]: super::FileBackendConfig::max_sync_interval

use std::time::{Duration, Instant};

/// A journal fdatasync taking at least this long is a stall: ten times and
/// more the p99 of a small sync on the disk measured (0.2-0.5 ms), and below
/// the 8-15 ms of the host's stalls.
pub const STALL: Duration = Duration::from_millis(5);

/// Only a sync covering less than this counts as a stall: a large group
/// commit's sync is slow because of its bytes.
pub const STALL_MAX_BYTES: usize = 256 << 10;

/// How long the interval stays put after a change before it steps down.
pub const HOLD: Duration = Duration::from_secs(2);

/// A raise from an interval of zero (`min_sync_interval` 0) starts here.
const FIRST_RAISE: Duration = Duration::from_micros(150);

/// The current interval between journal syncs and what moves it.
#[derive(Debug, Clone)]
pub struct SyncPacer {
    min: Duration,
    max: Duration,
    interval: Duration,
    /// When the last journal sync started (`None`: none yet).
    last_start: Option<Instant>,
    /// When the interval last changed (`None`: never).
    changed: Option<Instant>,
    raises: u64,
}

impl SyncPacer {
    /// An interval of `min`, free to rise up to `max` (a `max` at or below
    /// `min` keeps it at `min`).
    pub fn new(min: Duration, max: Duration) -> SyncPacer {
        SyncPacer {
            min,
            max: max.max(min),
            interval: min,
            last_start: None,
            changed: None,
            raises: 0,
        }
    }

    /// How long after a journal sync started the next may start.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// A journal sync starts at `at`.
    pub fn sync_started(&mut self, at: Instant) {
        self.last_start = Some(at);
    }

    /// What is left at `now` of the interval since the last sync started:
    /// how long the next sync still has to wait (`None`: it need not).
    pub fn pause(&self, now: Instant) -> Option<Duration> {
        let since = now.saturating_duration_since(self.last_start?);
        (since < self.interval).then(|| self.interval - since)
    }

    /// How many times a stall raised the interval.
    pub fn raises(&self) -> u64 {
        self.raises
    }

    /// A journal fdatasync covering `bytes` took `took`, and ended at `now`.
    /// Returns whether the interval rose.
    pub fn on_sync(&mut self, took: Duration, bytes: usize, now: Instant) -> bool {
        if self.max == self.min {
            return false;
        }
        if took >= STALL && bytes < STALL_MAX_BYTES {
            let up = (self.interval * 2).max(FIRST_RAISE).min(self.max);
            self.changed = Some(now);
            if up > self.interval {
                self.interval = up;
                self.raises += 1;
                return true;
            }
            return false;
        }
        let held = self
            .changed
            .is_none_or(|t| now.saturating_duration_since(t) >= HOLD);
        if self.interval > self.min && held {
            let down = self.interval * 3 / 4;
            // From a zero minimum, the last step goes to zero.
            self.interval = if down < FIRST_RAISE / 2 {
                self.min
            } else {
                down.max(self.min)
            };
            self.changed = Some(now);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);
    const FAST: Duration = Duration::from_micros(200);
    const SLOW: Duration = Duration::from_millis(10);

    #[test]
    fn quiet_host_stays_at_the_minimum() {
        let mut p = SyncPacer::new(300 * US, 1000 * US);
        let t0 = Instant::now();
        for i in 0..10_000u32 {
            assert!(!p.on_sync(FAST, 4096, t0 + i * 300 * US));
        }
        // Slow syncs of large groups are not stalls.
        for i in 0..100u32 {
            assert!(!p.on_sync(SLOW, 1 << 20, t0 + i * 10 * SLOW));
        }
        assert_eq!(p.interval(), 300 * US);
        assert_eq!(p.raises(), 0);
    }

    #[test]
    fn stalls_double_the_interval_up_to_the_maximum() {
        let mut p = SyncPacer::new(300 * US, 1000 * US);
        let t0 = Instant::now();
        assert!(p.on_sync(SLOW, 4096, t0));
        assert_eq!(p.interval(), 600 * US);
        assert!(p.on_sync(STALL, 4096, t0 + SLOW));
        assert_eq!(p.interval(), 1000 * US);
        assert!(!p.on_sync(SLOW, 4096, t0 + 2 * SLOW));
        assert_eq!(p.interval(), 1000 * US);
        assert_eq!(p.raises(), 2);
    }

    #[test]
    fn steps_down_after_a_quiet_hold() {
        let mut p = SyncPacer::new(300 * US, 1000 * US);
        let t0 = Instant::now();
        p.on_sync(SLOW, 0, t0);
        p.on_sync(SLOW, 0, t0);
        assert_eq!(p.interval(), 1000 * US);
        // Within the hold nothing moves, however many fast syncs.
        p.on_sync(FAST, 0, t0 + HOLD - US);
        assert_eq!(p.interval(), 1000 * US);
        // Then a quarter down per hold, to the minimum and no lower.
        let mut t = t0;
        let mut seen = vec![];
        for _ in 0..10 {
            t += HOLD;
            p.on_sync(FAST, 0, t);
            p.on_sync(FAST, 0, t + US);
            seen.push(p.interval().as_micros());
        }
        assert_eq!(seen, [750, 562, 421, 316, 300, 300, 300, 300, 300, 300]);
        // A stall during the hold restarts it.
        p.on_sync(SLOW, 0, t);
        assert_eq!(p.interval(), 600 * US);
        p.on_sync(FAST, 0, t + HOLD / 2);
        p.on_sync(SLOW, 0, t + HOLD / 2);
        p.on_sync(FAST, 0, t + HOLD + HOLD / 4);
        assert_eq!(p.interval(), 1000 * US);
    }

    #[test]
    fn pause_is_what_is_left_of_the_interval() {
        let mut p = SyncPacer::new(300 * US, 1000 * US);
        let t0 = Instant::now();
        assert_eq!(p.pause(t0), None, "no sync yet");
        p.sync_started(t0);
        assert_eq!(p.pause(t0 + 100 * US), Some(200 * US));
        assert_eq!(p.pause(t0 + 300 * US), None);
        p.on_sync(SLOW, 0, t0 + 100 * US);
        assert_eq!(p.pause(t0 + 100 * US), Some(500 * US));
        let off = SyncPacer::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(off.pause(t0), None);
    }

    #[test]
    fn fixed_when_the_maximum_is_not_above_the_minimum() {
        for max in [Duration::ZERO, 300 * US] {
            let mut p = SyncPacer::new(300 * US, max);
            assert!(!p.on_sync(SLOW, 0, Instant::now()));
            assert_eq!(p.interval(), 300 * US);
        }
        let mut off = SyncPacer::new(Duration::ZERO, Duration::ZERO);
        assert!(!off.on_sync(SLOW, 0, Instant::now()));
        assert_eq!(off.interval(), Duration::ZERO);
    }

    #[test]
    fn from_a_zero_minimum_it_rises_and_returns_to_zero() {
        let mut p = SyncPacer::new(Duration::ZERO, 1000 * US);
        let t0 = Instant::now();
        assert!(p.on_sync(SLOW, 0, t0));
        assert_eq!(p.interval(), 150 * US);
        assert!(p.on_sync(SLOW, 0, t0));
        assert_eq!(p.interval(), 300 * US);
        let mut t = t0;
        for _ in 0..10 {
            t += HOLD;
            p.on_sync(FAST, 0, t);
        }
        assert_eq!(p.interval(), Duration::ZERO);
    }
}
