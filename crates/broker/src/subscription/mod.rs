//! One subscription and its dispatcher: Pulsar's `PersistentSubscription`
//! with its dispatcher, one per kind behind one interface ([`kind`]):
//! `PersistentDispatcherSingleActiveConsumer` (Exclusive, Failover),
//! `PersistentDispatcherMultipleConsumers` (Shared) and
//! `PersistentStickyKeyDispatcherMultipleConsumers` (Key_Shared).
//!
//! Each subscription is an actor task ([`actor`]) that owns its cursor and
//! consumers; the connections talk to it through a bounded channel
//! ([`SubscriptionHandle`]). Every entry read passes one filter
//! ([`filter`]: markers, unreadable entries, delayed delivery) before a
//! dispatcher hands it to one delivery function, and every acknowledgement
//! takes one path ([`acks`]). The decisions (who is active, who is next,
//! which key goes where) and the trackers come from `strobe-dispatch`. The
//! subscription sees its topic only through [`TopicView`], so the topic
//! depends on it and not the other way round.

mod acks;
mod actor;
mod api;
mod dispatch;
mod filter;
mod handle;
mod kind;
mod throttle;
mod turns;
mod txn;

pub(crate) use actor::Subscription;
pub use api::{
    AdminOp, AdminReply, ConsumerInfo, ConsumerSpec, DispatchSettings, KeySharedSpec, SeekTarget,
    StartPosition, SubscriptionInfo, TopicView, find_by_publish_time,
};
pub use handle::{ClosingConsumer, SubscriptionHandle};
