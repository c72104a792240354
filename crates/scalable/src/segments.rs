use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use strobe_model::TopicName;

use crate::error::ScalableError;

/// The segment topics as the controller acts on them; the broker implements
/// it (at the segment's owner). Every step is idempotent, because a resize
/// is replayed from its start after a crash.
#[async_trait::async_trait]
pub trait SegmentTopics: Send + Sync + std::fmt::Debug {
    /// Creates `segment`'s topic if it does not exist, and a cursor at its
    /// start for each of `subscriptions` it lacks.
    async fn create(
        &self,
        segment: &TopicName,
        subscriptions: &[String],
    ) -> Result<(), ScalableError>;

    /// What `segment`'s topic holds and who uses it; `None` if it has no topic.
    async fn stats(&self, segment: &TopicName) -> Result<Option<SegmentStats>, ScalableError>;

    /// Terminates `segment`'s topic: producers get TopicTerminated, and its
    /// consumers reach its end. A terminated or missing topic is left as it is.
    async fn terminate(&self, segment: &TopicName) -> Result<(), ScalableError>;

    /// `op` on subscription `subscription` of `segment`'s topic (which exists).
    async fn subscription(
        &self,
        segment: &TopicName,
        subscription: &str,
        op: SubscriptionOp,
    ) -> Result<(), ScalableError>;

    /// Deletes `segment`'s topic, its consumers and producers with it; a
    /// missing topic is fine.
    async fn delete(&self, segment: &TopicName) -> Result<(), ScalableError>;
}

/// A segment topic as the controller (and the admin API's stats) see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SegmentStats {
    pub producers: u64,
    pub consumers: u64,
    pub terminated: bool,
    /// Entries it stores (a batch is one).
    pub entries: u64,
    /// Its durable subscriptions and their backlogs.
    pub backlogs: BTreeMap<String, u64>,
    /// Its producers and consumers that are not a V5 client's (PIP-475).
    #[serde(default)]
    pub v4_clients: u64,
}

/// What the admin API does to one subscription on one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionOp {
    /// A cursor at the segment's start, if it has none.
    Create,
    /// The cursor deleted, its consumers disconnected.
    Delete,
    /// Everything acknowledged (the cursor moved to the end).
    SkipAll,
    /// The cursor moved to the segment's start.
    SeekEarliest,
    /// The cursor moved to the first message published at or after this
    /// time (ms since the epoch).
    SeekTime(u64),
}
