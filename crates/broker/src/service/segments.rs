//! Scalable topics as the topic service sees them (PIP-460). A `segment://`
//! is a persistent topic like any other, but no client's connect creates one
//! unless the topic's layout lists it as active (Pulsar re-creates only
//! those), so a producer that still holds an old layout cannot bring a
//! sealed or pruned segment back. A DAG watch session (`cnx::scalable`)
//! gets its layout here: created on first lookup when auto-creation allows,
//! and told as the DAG clients read, with each active segment's broker.

use std::collections::BTreeMap;

use strobe_layout::Layout;
use strobe_model::TopicName;
use strobe_resources::{LayoutWatch, ResourcesError};
use strobe_wire::proto;
use tracing::{debug, info};

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

    /// The layout of `topic` (a `topic://`) now and its changes from then on.
    /// A topic without one gets one segment when `create` and the broker's
    /// auto-creation allow (Pulsar's `create_if_missing`); else it is not found.
    pub async fn watch_layout(
        &self,
        topic: &TopicName,
        create: bool,
    ) -> Result<(Option<Layout>, LayoutWatch), BrokerError> {
        let (ns, local) = (topic.namespace(), topic.local_name());
        if !self.namespace_exists(ns) {
            return Err(BrokerError::TopicNotFound(format!(
                "namespace {ns} does not exist"
            )));
        }
        let (current, watch) = self.resources.watch_layout(ns, local).await?;
        if let Some(l) = current {
            return Ok((Some(l), watch));
        }
        if !(create && self.config.allow_auto_topic_creation) {
            return Err(BrokerError::TopicNotFound(format!(
                "scalable topic {topic} does not exist"
            )));
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let layout = Layout::create(
            1,
            self.config.scalable_topic_entry_bucket_budget,
            BTreeMap::new(),
            now_ms,
        )
        .map_err(|e| BrokerError::NotAllowed(e.to_string()))?;
        match self.resources.create_layout(ns, local, &layout).await {
            Ok(_) => {
                info!(%topic, "created scalable topic with one segment");
                Ok((Some(layout), watch))
            }
            // Another session (or broker) created it first: its layout comes
            // through the watch, which started before either write.
            Err(ResourcesError::AlreadyExists(_)) => Ok((None, watch)),
            Err(e) => Err(e.into()),
        }
    }

    /// `layout` as clients read it (`ScalableTopicDAG`): every segment, and
    /// the broker serving each active one for `listener` (a segment whose
    /// lookup fails is left out: the client looks it up itself).
    pub async fn dag(
        &self,
        topic: &TopicName,
        layout: &Layout,
        listener: Option<&str>,
    ) -> proto::ScalableTopicDag {
        let mut brokers = Vec::new();
        for s in layout.active() {
            let Some(name) = topic.segment_name(s.descriptor()) else {
                continue;
            };
            match self.lookup_target_for(&name, listener).await {
                Ok(t) => brokers.push(proto::SegmentBrokerAddress {
                    segment_id: s.segment_id,
                    broker_url: t.service_url,
                    broker_url_tls: t.service_url_tls,
                }),
                Err(e) => {
                    debug!(segment = %name, error = %e, "no broker for the segment in the DAG")
                }
            }
        }
        proto::ScalableTopicDag {
            epoch: layout.epoch,
            segments: layout
                .segments
                .values()
                .map(|s| proto::SegmentInfoProto {
                    segment_id: s.segment_id,
                    hash_start: u32::from(s.hash_range.start),
                    hash_end: u32::from(s.hash_range.end),
                    state: (if s.is_active() {
                        proto::SegmentState::Active
                    } else {
                        proto::SegmentState::Sealed
                    }) as i32,
                    parent_ids: s.parent_ids.clone(),
                    child_ids: s.child_ids.clone(),
                    created_at_epoch: s.created_at_epoch,
                    sealed_at_epoch: s.sealed_at_epoch,
                    created_at_ms: Some(s.created_at_ms),
                    sealed_at_ms: s.sealed_at_ms,
                    legacy_topic_name: s.legacy_topic_name.clone(),
                    entry_bucket_splits: s.entry_bucket_splits.clone(),
                })
                .collect(),
            segment_brokers: brokers,
            controller_broker_url: None,
            controller_broker_url_tls: None,
        }
    }
}
