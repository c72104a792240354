//! The subscribe rate (Pulsar's `SubscribeRateLimiter`): how often one
//! consumer — its client host and consumer name — may subscribe to a topic,
//! so a client stuck in a subscribe/close loop cannot keep a topic's owner
//! busy. Pulsar's key also holds the consumer id, which a client renews at
//! every subscribe: a loop of new consumers escaped it.

use std::collections::HashMap;
use std::time::Instant;

use crate::rate::{Rate, TokenBucket};

/// Who subscribes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConsumerKey {
    pub host: String,
    pub consumer_name: String,
}

/// Buckets by consumer; at most `capacity` of them, so a flood of distinct
/// consumers costs bounded memory (a full table forgets refilled buckets,
/// then the oldest).
#[derive(Debug)]
pub struct SubscribeLimiter {
    buckets: HashMap<ConsumerKey, TokenBucket>,
    capacity: usize,
}

impl SubscribeLimiter {
    pub fn new(capacity: usize) -> SubscribeLimiter {
        SubscribeLimiter {
            buckets: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Takes one subscribe for `key` at `rate`; false: refused.
    pub fn try_acquire(&mut self, key: &ConsumerKey, rate: Rate, now: Instant) -> bool {
        if !self.buckets.contains_key(key) && self.buckets.len() >= self.capacity {
            self.make_room(now);
        }
        let bucket = self
            .buckets
            .entry(key.clone())
            .or_insert_with(|| TokenBucket::new(rate, now));
        if bucket.rate() != rate {
            bucket.set_rate(rate, now);
        }
        if bucket.available(now) == 0 {
            return false;
        }
        bucket.consume(1, now);
        true
    }

    fn make_room(&mut self, now: Instant) {
        // A full bucket is the same as no bucket.
        self.buckets
            .retain(|_, b| b.available(now) < b.rate().tokens);
        while self.buckets.len() >= self.capacity {
            let Some(k) = self.buckets.keys().next().cloned() else {
                break;
            };
            self.buckets.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(id: u64) -> ConsumerKey {
        ConsumerKey {
            host: "10.0.0.1".into(),
            consumer_name: format!("c{id}"),
        }
    }

    #[test]
    fn a_consumer_gets_its_rate_and_others_are_not_charged() {
        let t0 = Instant::now();
        let rate = Rate {
            tokens: 2,
            period: Duration::from_secs(30),
        };
        let mut l = SubscribeLimiter::new(100);
        assert!(l.try_acquire(&key(1), rate, t0));
        assert!(l.try_acquire(&key(1), rate, t0));
        assert!(!l.try_acquire(&key(1), rate, t0));
        assert!(l.try_acquire(&key(2), rate, t0));
        assert!(l.try_acquire(&key(1), rate, t0 + Duration::from_secs(15)));
    }

    #[test]
    fn the_table_stays_bounded() {
        let t0 = Instant::now();
        let rate = Rate {
            tokens: 1,
            period: Duration::from_secs(30),
        };
        let mut l = SubscribeLimiter::new(10);
        for id in 0..1000 {
            assert!(l.try_acquire(&key(id), rate, t0));
        }
        assert!(l.len() <= 10);
    }
}
