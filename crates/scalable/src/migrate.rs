//! PIP-475's migration of a v4 topic to a scalable topic of the same name:
//! its partitions (or itself) become sealed legacy parents of as many new
//! segments, so what they hold is read first, then the children. The
//! steps, each safe to repeat:
//! 1. refuse if the scalable topic exists; load every partition (a
//!    partition never written gets its topic now, so a reader of the sealed
//!    parent finds it);
//! 2. unless forced, refuse while v4 clients (not marked
//!    `__pulsar.v5.managed`) use a partition;
//! 3. create the children, each with a cursor at its start for every
//!    subscription a partition has (Pulsar gives them none: a consumer
//!    attaching later with Latest would skip what came between);
//! 4. create the layout (create-only): the commit point, so a failure
//!    before it leaves the v4 topic as it was;
//! 5. terminate the partitions. A failure after the commit is finished by
//!    the controller's recovery, which terminates every sealed legacy
//!    segment.

use std::collections::BTreeSet;

use strobe_layout::Layout;
use strobe_model::TopicName;
use strobe_resources::{Resources, ResourcesError};
use tracing::info;

use crate::error::ScalableError;
use crate::segments::SegmentTopics;

/// What a migration needs.
#[derive(Debug)]
pub struct Migration<'a> {
    /// The scalable topic (`topic://`) the v4 topic becomes.
    pub topic: &'a TopicName,
    /// The v4 topics: its partitions in order, or the topic itself.
    pub legacy: Vec<String>,
    /// Whether the v4 topic is partitioned (its partitions may not have
    /// topics yet; a non-partitioned one must exist).
    pub partitioned: bool,
    pub bucket_budget: u32,
    pub force: bool,
    pub now_ms: u64,
}

/// Migrates; returns the new layout.
pub async fn migrate(
    m: Migration<'_>,
    resources: &Resources,
    segments: &dyn SegmentTopics,
) -> Result<Layout, ScalableError> {
    let (ns, local) = (m.topic.namespace(), m.topic.local_name());
    let exists = || {
        ScalableError::Resources(ResourcesError::AlreadyExists(format!(
            "{} is already a scalable topic",
            m.topic
        )))
    };
    if resources.layout(ns, local).await?.is_some() {
        return Err(exists());
    }
    let legacy: Vec<TopicName> = m
        .legacy
        .iter()
        .map(|n| TopicName::parse(n).map_err(|e| ScalableError::NotFound(format!("{n}: {e}"))))
        .collect::<Result<_, _>>()?;
    let mut subscriptions = BTreeSet::new();
    let mut v4_clients = 0;
    for name in &legacy {
        let stats = match segments.stats(name).await? {
            Some(s) => s,
            None if m.partitioned => {
                segments.create(name, &[]).await?;
                segments.stats(name).await?.unwrap_or_default()
            }
            None => {
                return Err(ScalableError::NotFound(format!(
                    "topic {name} does not exist"
                )));
            }
        };
        v4_clients += stats.v4_clients;
        subscriptions.extend(stats.backlogs.into_keys());
    }
    if v4_clients > 0 && !m.force {
        return Err(ScalableError::Busy(format!(
            "{v4_clients} producer(s) or consumer(s) that are not a V5 client's use {}: stop them, or migrate with force",
            m.legacy.join(", ")
        )));
    }
    let layout = Layout::migrated(&m.legacy, m.bucket_budget, m.now_ms)?;
    let subscriptions: Vec<String> = subscriptions.into_iter().collect();
    for s in layout.active() {
        let child = s
            .topic_name(m.topic)
            .ok_or_else(|| ScalableError::NotFound(format!("{} has no segment names", m.topic)))?;
        segments.create(&child, &subscriptions).await?;
    }
    match resources.create_layout(ns, local, &layout).await {
        Ok(_) => {}
        Err(ResourcesError::AlreadyExists(_)) => return Err(exists()),
        Err(e) => return Err(e.into()),
    }
    info!(topic = %m.topic, partitions = legacy.len(), ?subscriptions, "migrated a v4 topic: its layout is written");
    for name in &legacy {
        segments.terminate(name).await?;
    }
    Ok(layout)
}
