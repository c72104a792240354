//! Token buckets, as Pulsar's rate limiters since PIP-322 keep them: a bucket
//! holds at most one period's worth of tokens, refills continuously at the
//! configured rate, and may go negative. A negative bucket throttles (a
//! connection stops reading, a dispatcher stops reading entries) until it is
//! back to zero, so a burst is paid for afterwards, never dropped, and the
//! long-run rate is the configured one whatever the sizes of the batches.
//!
//! No clock: every call takes the time as an [`Instant`] the caller read.

use std::time::{Duration, Instant};

/// `tokens` per `period` (messages or bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub tokens: u64,
    pub period: Duration,
}

impl Rate {
    /// `tokens` per second.
    pub fn per_second(tokens: u64) -> Rate {
        Rate {
            tokens,
            period: Duration::from_secs(1),
        }
    }

    fn per_nano(&self) -> f64 {
        self.tokens as f64 / self.period.as_nanos().max(1) as f64
    }
}

/// One bucket.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: Rate,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket (one period's tokens), as a new limiter starts.
    pub fn new(rate: Rate, now: Instant) -> TokenBucket {
        TokenBucket {
            rate,
            tokens: rate.tokens as f64,
            at: now,
        }
    }

    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes a new rate, keeping the tokens it has (capped at the new capacity).
    pub fn set_rate(&mut self, rate: Rate, now: Instant) {
        self.refill(now);
        self.rate = rate;
        self.tokens = self.tokens.min(rate.tokens as f64);
    }

    fn refill(&mut self, now: Instant) {
        // An `at` later than `now` (callers read the clock at different
        // points) adds nothing rather than underflowing.
        let elapsed = now.saturating_duration_since(self.at).as_nanos() as f64;
        self.tokens = (self.tokens + elapsed * self.rate.per_nano()).min(self.rate.tokens as f64);
        self.at = self.at.max(now);
    }

    /// Spends `n` tokens, going negative if it must.
    pub fn consume(&mut self, n: u64, now: Instant) {
        self.refill(now);
        self.tokens -= n as f64;
    }

    /// Whole tokens left now (0 when the bucket is empty or in debt).
    pub fn available(&mut self, now: Instant) -> u64 {
        self.refill(now);
        self.tokens.max(0.0).floor() as u64
    }

    /// How long until the bucket is out of debt and holds at least one
    /// token; zero when it has one now.
    pub fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 1.0 {
            return Duration::ZERO;
        }
        let nanos = (1.0 - self.tokens) / self.rate.per_nano();
        Duration::from_nanos(nanos.ceil().min(u64::MAX as f64) as u64)
    }
}

/// A limit in messages and one in bytes (either may be absent), as every
/// Pulsar rate policy has.
#[derive(Debug, Clone, Default)]
pub struct RateLimiter {
    msgs: Option<TokenBucket>,
    bytes: Option<TokenBucket>,
}

/// The rates a [`RateLimiter`] enforces; `None`: that dimension is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rates {
    pub msgs: Option<Rate>,
    pub bytes: Option<Rate>,
}

impl Rates {
    pub fn is_unlimited(&self) -> bool {
        self.msgs.is_none() && self.bytes.is_none()
    }
}

impl RateLimiter {
    pub fn new(rates: Rates, now: Instant) -> RateLimiter {
        RateLimiter {
            msgs: rates.msgs.map(|r| TokenBucket::new(r, now)),
            bytes: rates.bytes.map(|r| TokenBucket::new(r, now)),
        }
    }

    pub fn rates(&self) -> Rates {
        Rates {
            msgs: self.msgs.as_ref().map(TokenBucket::rate),
            bytes: self.bytes.as_ref().map(TokenBucket::rate),
        }
    }

    pub fn is_unlimited(&self) -> bool {
        self.msgs.is_none() && self.bytes.is_none()
    }

    /// Follows a policy change: a dimension that keeps a limit keeps its
    /// tokens, a new one starts full, a removed one goes.
    pub fn set_rates(&mut self, rates: Rates, now: Instant) {
        fn one(b: &mut Option<TokenBucket>, r: Option<Rate>, now: Instant) {
            match (b.as_mut(), r) {
                (_, None) => *b = None,
                (Some(bucket), Some(r)) => {
                    if bucket.rate() != r {
                        bucket.set_rate(r, now)
                    }
                }
                (None, Some(r)) => *b = Some(TokenBucket::new(r, now)),
            }
        }
        one(&mut self.msgs, rates.msgs, now);
        one(&mut self.bytes, rates.bytes, now);
    }

    /// Spends what was sent.
    pub fn consume(&mut self, msgs: u64, bytes: u64, now: Instant) {
        if let Some(b) = self.msgs.as_mut() {
            b.consume(msgs, now);
        }
        if let Some(b) = self.bytes.as_mut() {
            b.consume(bytes, now);
        }
    }

    /// How long the holder must wait before it may go on: the longer of the
    /// two buckets' waits, zero when neither is empty.
    pub fn wait(&mut self, now: Instant) -> Duration {
        let m = self.msgs.as_mut().map_or(Duration::ZERO, |b| b.wait(now));
        let b = self.bytes.as_mut().map_or(Duration::ZERO, |b| b.wait(now));
        m.max(b)
    }

    /// What may be sent now: (messages, bytes), `u64::MAX` where unlimited.
    pub fn allowance(&mut self, now: Instant) -> (u64, u64) {
        (
            self.msgs.as_mut().map_or(u64::MAX, |b| b.available(now)),
            self.bytes.as_mut().map_or(u64::MAX, |b| b.available(now)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Within a microsecond (the bucket computes in floating point).
    fn assert_near(got: Duration, want: Duration) {
        let diff = got.abs_diff(want);
        assert!(diff <= Duration::from_micros(1), "{got:?} is not {want:?}");
    }

    #[test]
    fn a_bucket_starts_full_and_refills_at_its_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(Rate::per_second(1000), t0);
        assert_eq!(b.available(t0), 1000);
        b.consume(1000, t0);
        assert_eq!(b.available(t0), 0);
        assert_eq!(b.available(t0 + ms(100)), 100);
        // Never above one period's worth.
        assert_eq!(b.available(t0 + ms(5000)), 1000);
    }

    #[test]
    fn debt_is_paid_before_anything_more_goes() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(Rate::per_second(1000), t0);
        b.consume(3000, t0); // a batch larger than a period
        assert_eq!(b.available(t0), 0);
        // 2,000 tokens of debt and one more token: 2.001 s.
        assert_near(b.wait(t0), Duration::from_millis(2001));
        assert_eq!(b.available(t0 + ms(1999)), 0);
        assert_eq!(b.wait(t0 + ms(2001)), Duration::ZERO);
    }

    #[test]
    fn a_clock_read_before_the_last_one_adds_nothing() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(Rate::per_second(10), t0 + ms(500));
        b.consume(10, t0 + ms(500));
        assert_eq!(b.available(t0), 0);
        assert_eq!(b.available(t0 + ms(600)), 1);
    }

    #[test]
    fn the_long_run_rate_is_the_configured_one_whatever_the_batches() {
        // A sender that sends a batch whenever the limiter lets it, for 10 s.
        for batch in [1u64, 7, 100, 999, 2500] {
            let t0 = Instant::now();
            let mut l = RateLimiter::new(
                Rates {
                    msgs: Some(Rate::per_second(1000)),
                    bytes: None,
                },
                t0,
            );
            let mut now = t0;
            let mut sent = 0;
            while now < t0 + Duration::from_secs(10) {
                l.consume(batch, 100 * batch, now);
                sent += batch;
                now += l.wait(now).max(Duration::from_micros(1));
            }
            // One period's burst on top of 10 s at 1,000/s, and at most one batch over.
            let expected = 11_000;
            assert!(
                sent >= 10_000 && sent <= expected + batch,
                "batch {batch}: sent {sent}"
            );
        }
    }

    #[test]
    fn the_bytes_limit_throttles_too() {
        let t0 = Instant::now();
        let mut l = RateLimiter::new(
            Rates {
                msgs: Some(Rate::per_second(1_000_000)),
                bytes: Some(Rate::per_second(1000)),
            },
            t0,
        );
        l.consume(1, 1500, t0);
        assert_eq!(l.allowance(t0).1, 0);
        assert_near(l.wait(t0), Duration::from_millis(501));
    }

    #[test]
    fn changing_a_rate_keeps_the_tokens_and_removing_it_unthrottles() {
        let t0 = Instant::now();
        let mut l = RateLimiter::new(
            Rates {
                msgs: Some(Rate::per_second(100)),
                bytes: None,
            },
            t0,
        );
        l.consume(150, 0, t0);
        l.set_rates(
            Rates {
                msgs: Some(Rate::per_second(50)),
                bytes: None,
            },
            t0,
        );
        assert!(l.wait(t0) > Duration::from_secs(1)); // -50 at 50/s
        l.set_rates(Rates::default(), t0);
        assert!(l.is_unlimited());
        assert_eq!(l.wait(t0), Duration::ZERO);
        assert_eq!(l.allowance(t0), (u64::MAX, u64::MAX));
    }
}
