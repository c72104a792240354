//! Dispatch rates: before each read a dispatcher asks how much the topic's
//! bucket (shared by its subscriptions) and its own let it send, reads no
//! more than that, and pays for what it sent; an empty bucket pauses it
//! until the bucket has tokens again (Pulsar's `DispatchRateLimiter`).
//! Without limits this is one atomic load per read.

use std::time::{Duration, Instant};

use super::actor::Subscription;

impl Subscription {
    /// Entries this pass may read: None without dispatch limits, Some(0)
    /// when a bucket is empty (the dispatcher then waits: `throttled_until`).
    pub(super) fn dispatch_allowance(&mut self) -> Option<usize> {
        let limits = self.topic.limits();
        if !limits.dispatch_limited() {
            return None;
        }
        let now = Instant::now();
        let l = limits.get();
        let rates = l.subscription_dispatch.rates_at(limits.publish_rate());
        if self.sub_dispatch.rates() != rates {
            self.sub_dispatch.set_rates(rates, now);
        }
        let (topic_msgs, topic_bytes, topic_wait) = {
            let mut t = limits.topic_dispatch();
            let (m, b) = t.allowance(now);
            (m, b, t.wait(now))
        };
        let (sub_msgs, sub_bytes) = self.sub_dispatch.allowance(now);
        let msgs = topic_msgs.min(sub_msgs);
        if msgs == 0 || topic_bytes.min(sub_bytes) == 0 {
            let wait = topic_wait
                .max(self.sub_dispatch.wait(now))
                .max(Duration::from_millis(1));
            self.throttled_until = Some(tokio::time::Instant::now() + wait);
            limits
                .dispatch_throttled
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Some(0);
        }
        let entries = if self.settings.dispatch_throttling_on_batch_messages {
            let avg = self.avg_msgs_per_entry.unwrap_or(1.0).max(1.0);
            (msgs as f64 / avg).ceil() as usize
        } else {
            usize::try_from(msgs).unwrap_or(usize::MAX)
        };
        Some(entries.max(1))
    }

    /// Pays for an entry of `msgs` messages and `bytes` bytes sent.
    pub(super) fn charge_dispatch(&mut self, msgs: u32, bytes: u64) {
        let limits = self.topic.limits();
        if !limits.dispatch_limited() {
            return;
        }
        let counted = if self.settings.dispatch_throttling_on_batch_messages {
            u64::from(msgs)
        } else {
            1
        };
        let now = Instant::now();
        limits.topic_dispatch().consume(counted, bytes, now);
        self.sub_dispatch.consume(counted, bytes, now);
    }

    /// Paused by a dispatch rate.
    pub(super) fn dispatch_throttled(&self) -> bool {
        self.throttled_until
            .is_some_and(|t| t > tokio::time::Instant::now())
    }
}
