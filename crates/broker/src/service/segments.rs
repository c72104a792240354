//! Scalable topics' segments as the topic service sees them (PIP-460): a
//! `segment://` is a persistent topic like any other, but no client's
//! connect creates one unless the topic's layout lists it as active (Pulsar
//! re-creates only those), so a producer that still holds an old layout
//! cannot bring a sealed or pruned segment back.

use strobe_model::TopicName;

use super::BrokerService;
use crate::BrokerError;

impl BrokerService {
    /// Whether the layout of `segment`'s scalable topic lists it, with the
    /// same range, as active.
    pub(crate) async fn segment_is_active(&self, segment: &TopicName) -> Result<bool, BrokerError> {
        let (Some(d), Some(parent)) = (segment.segment(), segment.scalable_parent()) else {
            return Ok(false);
        };
        let Some(layout) = self
            .resources
            .layout(parent.namespace(), parent.local_name())
            .await?
        else {
            return Ok(false);
        };
        Ok(layout
            .value
            .get(d.id)
            .is_ok_and(|s| s.is_active() && s.hash_range == d.range))
    }
}
