//! Fixed-bucket latency histograms for metrics: non-cumulative counts per
//! bucket (as Pulsar exports its `_le_*` families) and a sum; the count is
//! theirs, so it always agrees with the buckets. The
//! bounds are a type's, so a histogram is `Default` and costs no lookup.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A histogram's bucket upper bounds, in milliseconds, ascending; one more
/// bucket, the overflow, holds what is above the last.
pub trait LatencyBounds {
    const MS: &'static [f64];
}

/// Bounds (ms) of `strobe_storage_journal_fsync_latency_le_*`: a quiet disk
/// here syncs in 0.15-0.5 ms, a stalled one in 5-70 ms.
#[derive(Debug)]
pub struct JournalSyncBounds;

impl LatencyBounds for JournalSyncBounds {
    const MS: &'static [f64] = &[0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0];
}

/// The histogram (see the module docs).
#[derive(Debug)]
pub struct LatencyBuckets<B: LatencyBounds> {
    /// `B::MS.len() + 1` counts, the last the overflow.
    pub buckets: Box<[AtomicU64]>,
    pub sum_micros: AtomicU64,
    bounds: PhantomData<B>,
}

impl<B: LatencyBounds> Default for LatencyBuckets<B> {
    fn default() -> Self {
        LatencyBuckets {
            buckets: (0..=B::MS.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            bounds: PhantomData,
        }
    }
}

impl<B: LatencyBounds> LatencyBuckets<B> {
    /// Counts one duration in the first bucket whose bound is at or above it.
    pub fn record(&self, d: Duration) {
        // From whole microseconds: 100 µs is exactly the bound 0.1.
        let ms = d.as_micros() as f64 / 1000.0;
        let i = B::MS.iter().position(|b| ms <= *b).unwrap_or(B::MS.len());
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(d.as_micros() as u64, Relaxed);
    }

    /// The bucket counts now.
    pub fn counts(&self) -> Vec<u64> {
        self.buckets.iter().map(|b| b.load(Relaxed)).collect()
    }

    /// How many durations were recorded: the buckets' sum.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Relaxed)).sum()
    }

    /// The metric names of the buckets: `{prefix}_le_{bound}` with the
    /// bound's `.` as `_` (`_le_0_5`), then `{prefix}_overflow`.
    pub fn bucket_names(prefix: &str) -> Vec<String> {
        B::MS
            .iter()
            .map(|b| format!("{prefix}_le_{}", format!("{b}").replace('.', "_")))
            .chain(std::iter::once(format!("{prefix}_overflow")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_lands_in_the_first_bucket_at_or_above_it() {
        let h = LatencyBuckets::<JournalSyncBounds>::default();
        for us in [
            50, 100, 101, 250, 999, 1000, 7000, 100_000, 100_001, 3_000_000,
        ] {
            h.record(Duration::from_micros(us));
        }
        //           0.1 0.25 0.5 1  2  5  10 20 50 100 over
        assert_eq!(h.counts(), [2, 2, 0, 2, 0, 0, 1, 0, 0, 1, 2]);
        assert_eq!(h.count(), 10);
        assert_eq!(h.sum_micros.load(Relaxed), 3_209_501);
        let names = LatencyBuckets::<JournalSyncBounds>::bucket_names("x");
        assert_eq!(names.len(), 11);
        assert_eq!(
            (names[0].as_str(), names[2].as_str()),
            ("x_le_0_1", "x_le_0_5")
        );
        assert_eq!(
            (names[3].as_str(), names[10].as_str()),
            ("x_le_1", "x_overflow")
        );
    }
}
