//! What a topic's subscriptions' dispatchers follow of its policies
//! (`strobe_broker::enforce::Effective`), changed while they run: whether
//! delivery times are honoured, and the unacknowledged messages a Shared or
//! Key_Shared consumer, and a whole subscription, may hold.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};

/// See the module docs. `u32::MAX` stands for "no value of the topic's own".
#[derive(Debug)]
pub struct DispatchPolicy {
    delayed_delivery: AtomicBool,
    per_consumer: AtomicU32,
    per_subscription: AtomicU32,
}

impl Default for DispatchPolicy {
    fn default() -> Self {
        DispatchPolicy {
            delayed_delivery: AtomicBool::new(true),
            per_consumer: AtomicU32::new(u32::MAX),
            per_subscription: AtomicU32::new(0),
        }
    }
}

impl DispatchPolicy {
    pub fn set(&self, e: &crate::enforce::Effective) {
        self.delayed_delivery.store(e.delayed_delivery, Relaxed);
        self.per_consumer
            .store(e.max_unacked_per_consumer.unwrap_or(u32::MAX), Relaxed);
        self.per_subscription
            .store(e.max_unacked_per_subscription, Relaxed);
    }

    /// Whether messages with a delivery time wait for it.
    pub fn delayed_delivery(&self) -> bool {
        self.delayed_delivery.load(Relaxed)
    }

    /// The policy's limit per consumer (0: none), if it sets one; else the
    /// broker's `max_unacked_messages_per_consumer` applies.
    pub fn max_unacked_per_consumer(&self) -> Option<u32> {
        let v = self.per_consumer.load(Relaxed);
        (v != u32::MAX).then_some(v)
    }

    /// The limit per subscription (0: none).
    pub fn max_unacked_per_subscription(&self) -> u32 {
        self.per_subscription.load(Relaxed)
    }
}
