//! What a topic enforces of the tenancy policies (`strobe_tenancy`): its
//! resolved [`Limits`], the buckets its producers' connections and its
//! subscriptions' dispatchers draw from, the subscribe rate per consumer,
//! and when it was last in use (for the inactive-topic check).
//!
//! A topic without limits costs its hot paths one relaxed atomic load
//! each (`publish_limited`, `dispatch_limited`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use strobe_tenancy::subscribe::{ConsumerKey, SubscribeLimiter};
use strobe_tenancy::{Limits, RateLimiter};

/// Consumers whose subscribe rate a topic tracks at most.
const SUBSCRIBE_KEYS: usize = 10_000;

#[derive(Debug)]
pub struct TopicLimits {
    limits: Mutex<Limits>,
    /// The topic's publish rate (messages, bytes per second), for dispatch
    /// limits relative to it.
    publish_rate: Mutex<(f64, f64)>,
    publish: Mutex<RateLimiter>,
    publish_limited: AtomicBool,
    /// All subscriptions of the topic together.
    dispatch: Mutex<RateLimiter>,
    /// A topic or a subscription dispatch limit is set.
    dispatch_limited: AtomicBool,
    subscribe: Mutex<SubscribeLimiter>,
    /// When the topic was loaded or last seen in use.
    last_active: Mutex<Instant>,
    /// Times a producer's connection paused for this topic's publish rate.
    pub publish_throttled: AtomicU64,
    /// Times a dispatcher of this topic paused for a dispatch rate.
    pub dispatch_throttled: AtomicU64,
    /// Subscribes refused by the subscribe rate.
    pub subscribe_throttled: AtomicU64,
}

impl Default for TopicLimits {
    fn default() -> Self {
        let now = Instant::now();
        TopicLimits {
            limits: Mutex::new(Limits::default()),
            publish_rate: Mutex::new((0.0, 0.0)),
            publish: Mutex::new(RateLimiter::default()),
            publish_limited: AtomicBool::new(false),
            dispatch: Mutex::new(RateLimiter::default()),
            dispatch_limited: AtomicBool::new(false),
            subscribe: Mutex::new(SubscribeLimiter::new(SUBSCRIBE_KEYS)),
            last_active: Mutex::new(now),
            publish_throttled: AtomicU64::new(0),
            dispatch_throttled: AtomicU64::new(0),
            subscribe_throttled: AtomicU64::new(0),
        }
    }
}

impl TopicLimits {
    /// Takes newly resolved limits (a policy changed, or the topic loaded);
    /// buckets whose rate stays keep their tokens.
    pub fn set(&self, limits: Limits) {
        let now = Instant::now();
        *self.limits.lock() = limits;
        self.publish.lock().set_rates(limits.publish, now);
        self.publish_limited
            .store(!limits.publish.is_unlimited(), Ordering::Relaxed);
        let publish = *self.publish_rate.lock();
        self.dispatch
            .lock()
            .set_rates(limits.dispatch.rates_at(publish), now);
        self.dispatch_limited.store(
            !limits.dispatch.rates.is_unlimited()
                || !limits.subscription_dispatch.rates.is_unlimited(),
            Ordering::Relaxed,
        );
    }

    pub fn get(&self) -> Limits {
        *self.limits.lock()
    }

    /// The topic's publish rate changed (the stats tick): dispatch limits
    /// relative to it follow.
    pub fn follow_publish_rate(&self, msgs: f64, bytes: f64) {
        *self.publish_rate.lock() = (msgs, bytes);
        let l = self.get();
        if l.dispatch.relative_to_publish_rate {
            self.dispatch
                .lock()
                .set_rates(l.dispatch.rates_at((msgs, bytes)), Instant::now());
        }
    }

    pub fn publish_rate(&self) -> (f64, f64) {
        *self.publish_rate.lock()
    }

    pub fn publish_limited(&self) -> bool {
        self.publish_limited.load(Ordering::Relaxed)
    }

    /// Spends a SEND's messages and bytes; Some: the producer's connection
    /// reads nothing more until then (Pulsar pauses the connection's reads,
    /// never drops).
    pub fn charge_publish(&self, msgs: u64, bytes: u64) -> Option<Instant> {
        let now = Instant::now();
        let mut p = self.publish.lock();
        p.consume(msgs, bytes, now);
        let wait = p.wait(now);
        drop(p);
        (wait > Duration::ZERO).then(|| {
            self.publish_throttled.fetch_add(1, Ordering::Relaxed);
            now + wait
        })
    }

    pub fn dispatch_limited(&self) -> bool {
        self.dispatch_limited.load(Ordering::Relaxed)
    }

    /// The topic-wide dispatch bucket, for a subscription's dispatcher.
    pub fn topic_dispatch(&self) -> parking_lot::MutexGuard<'_, RateLimiter> {
        self.dispatch.lock()
    }

    /// Takes one subscribe of `key` under the subscribe rate; false: refused.
    pub fn try_subscribe(&self, key: &ConsumerKey) -> bool {
        let Some(rate) = self.get().subscribe else {
            return true;
        };
        let ok = self.subscribe.lock().try_acquire(key, rate, Instant::now());
        if !ok {
            self.subscribe_throttled.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    pub fn last_active(&self) -> Instant {
        *self.last_active.lock()
    }

    pub fn mark_active(&self, now: Instant) {
        *self.last_active.lock() = now;
    }
}
