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

    /// The durable subscriptions (cursors) of `segment`'s topic; none if it
    /// does not exist.
    async fn subscriptions(&self, segment: &TopicName) -> Result<Vec<String>, ScalableError>;

    /// Terminates `segment`'s topic: producers get TopicTerminated, and its
    /// consumers reach its end. A terminated or missing topic is left as it is.
    async fn terminate(&self, segment: &TopicName) -> Result<(), ScalableError>;

    /// The backlog of `subscription` on `segment`; `None` when the segment
    /// has no such subscription (or no topic).
    async fn backlog(
        &self,
        segment: &TopicName,
        subscription: &str,
    ) -> Result<Option<u64>, ScalableError>;

    /// Deletes `segment`'s topic, its consumers and producers with it; a
    /// missing topic is fine.
    async fn delete(&self, segment: &TopicName) -> Result<(), ScalableError>;
}
