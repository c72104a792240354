//! One scalable topic's controller. A resize runs as: record it (with the
//! epoch it was computed against), create the new segments' topics with a
//! cursor for every subscription, terminate the old ones, then write the
//! layout and forget the record in one compare-and-set, fenced by the
//! leadership. A prune writes the layout first and deletes the topics
//! after, forgetting its record last. Replaying a record from the start is
//! what recovery does: every step is idempotent, and a layout past the
//! record's epoch means the write happened.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use strobe_layout::{Layout, PendingResize, Resize};
use strobe_metadata::{LeaderElection, Op};
use strobe_model::TopicName;
use strobe_resources::{Resources, Versioned};
use tracing::{info, warn};

use crate::error::ScalableError;
use crate::segments::SegmentTopics;

/// A step after which a test makes the controller stop as if its broker
/// died there (`ScalableError::Failpoint`; the broker aborts on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// The resize is recorded; nothing else happened.
    AfterRecord,
    /// The new segments' topics exist.
    AfterCreate,
    /// The old segments are terminated; the layout still lists them active.
    AfterTerminate,
    /// The layout is written (a prune's topics are not deleted yet).
    AfterCommit,
}

impl Failpoint {
    /// `after-record`, `after-create`, `after-terminate`, `after-commit`.
    pub fn parse(s: &str) -> Option<Failpoint> {
        Some(match s {
            "after-record" => Failpoint::AfterRecord,
            "after-create" => Failpoint::AfterCreate,
            "after-terminate" => Failpoint::AfterTerminate,
            "after-commit" => Failpoint::AfterCommit,
            _ => return None,
        })
    }
}

/// The controller of one `topic://`.
pub struct Controller {
    topic: TopicName,
    resources: Arc<Resources>,
    segments: Arc<dyn SegmentTopics>,
    /// `None` in standalone, where this broker is the only candidate.
    leadership: Option<Arc<LeaderElection<String>>>,
    /// One resize at a time on this broker; the record serializes brokers.
    running: tokio::sync::Mutex<()>,
    failpoint: parking_lot::Mutex<Option<Failpoint>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("topic", &self.topic.to_string())
            .field("segments", &self.segments)
            .finish_non_exhaustive()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Controller {
    pub fn new(
        topic: TopicName,
        resources: Arc<Resources>,
        segments: Arc<dyn SegmentTopics>,
        leadership: Option<Arc<LeaderElection<String>>>,
    ) -> Controller {
        Controller {
            topic,
            resources,
            segments,
            leadership,
            running: tokio::sync::Mutex::new(()),
            failpoint: parking_lot::Mutex::new(None),
        }
    }

    pub fn topic(&self) -> &TopicName {
        &self.topic
    }

    /// Stops the next resize at `step` (tests of recovery).
    pub fn set_failpoint(&self, step: Option<Failpoint>) {
        *self.failpoint.lock() = step;
    }

    fn reached(&self, step: Failpoint) -> Result<(), ScalableError> {
        if *self.failpoint.lock() == Some(step) {
            return Err(ScalableError::Failpoint(step));
        }
        Ok(())
    }

    /// Whether this controller may act: it leads (always, in standalone).
    pub fn is_leader(&self) -> bool {
        self.leadership.as_ref().is_none_or(|l| l.is_leader())
    }

    /// The check that goes into every write: the leader key still at the
    /// version this broker won it with.
    fn fence(&self) -> Result<Option<Op>, ScalableError> {
        match &self.leadership {
            None => Ok(None),
            Some(l) => l
                .fence()
                .map(Some)
                .map_err(|_| ScalableError::NotLeader(self.topic.to_string())),
        }
    }

    fn names(&self) -> (&str, &str) {
        (self.topic.namespace(), self.topic.local_name())
    }

    /// The layout now, with its version.
    pub async fn layout(&self) -> Result<Versioned<Layout>, ScalableError> {
        let (ns, local) = self.names();
        self.resources.layout(ns, local).await?.ok_or_else(|| {
            ScalableError::NotFound(format!("scalable topic {} does not exist", self.topic))
        })
    }

    fn segment_topic(&self, layout: &Layout, id: u64) -> Result<TopicName, ScalableError> {
        let d = layout.get(id)?.descriptor();
        self.topic
            .segment_name(d)
            .ok_or_else(|| ScalableError::NotFound(format!("{} has no segment names", self.topic)))
    }

    /// Finishes a resize a previous leader (or this one, failing) left, and
    /// makes sure every active segment's topic exists with the topic's
    /// subscriptions (Pulsar re-creates missing ones at leadership too).
    pub async fn recover(&self) -> Result<Layout, ScalableError> {
        let _one = self.running.lock().await;
        self.finish_pending().await?;
        let layout = self.layout().await?.value;
        let subs = self.metadata_subscriptions().await?;
        for s in layout.active() {
            let name = self.segment_topic(&layout, s.segment_id)?;
            self.segments.create(&name, &subs).await?;
        }
        Ok(layout)
    }

    /// Splits active segment `id` at the middle of its range.
    pub async fn split(&self, id: u64) -> Result<Layout, ScalableError> {
        self.resize(Resize::Split { segment: id }).await
    }

    /// Merges two adjacent active segments.
    pub async fn merge(&self, a: u64, b: u64) -> Result<Layout, ScalableError> {
        self.resize(Resize::Merge { segments: [a, b] }).await
    }

    /// Prunes every sealed segment sealed at least `retention` ago whose
    /// topic every subscription has drained (`None`: keep forever). Returns
    /// what it pruned.
    pub async fn prune(&self, retention: Option<Duration>) -> Result<Vec<u64>, ScalableError> {
        let Some(retention) = retention else {
            return Ok(Vec::new());
        };
        let layout = self.layout().await?.value;
        let now = now_ms();
        let metadata_subs = self.metadata_subscriptions().await?;
        let mut prunable = Vec::new();
        for s in layout.segments.values() {
            let Some(sealed_at) = s.sealed_at_ms.filter(|_| !s.is_active()) else {
                continue;
            };
            if now.saturating_sub(sealed_at) < retention.as_millis() as u64 {
                continue;
            }
            let name = self.segment_topic(&layout, s.segment_id)?;
            // Every cursor the segment has, and every subscription the
            // metadata lists, must have read it to its end. A subscription
            // the segment never had (created after it was sealed) has
            // nothing of it to read.
            let mut subs = self.segments.subscriptions(&name).await?;
            subs.extend(metadata_subs.iter().cloned());
            subs.sort();
            subs.dedup();
            let mut drained = true;
            for sub in &subs {
                if self
                    .segments
                    .backlog(&name, sub)
                    .await?
                    .is_some_and(|b| b > 0)
                {
                    drained = false;
                    break;
                }
            }
            if drained {
                prunable.push(s.segment_id);
            }
        }
        if prunable.is_empty() {
            return Ok(prunable);
        }
        self.resize(Resize::Prune {
            segments: prunable.clone(),
        })
        .await?;
        Ok(prunable)
    }

    /// The subscriptions the topic's metadata lists.
    async fn metadata_subscriptions(&self) -> Result<Vec<String>, ScalableError> {
        let (ns, local) = self.names();
        Ok(self
            .resources
            .scalable_subscriptions(ns, local)
            .await?
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }

    async fn resize(&self, resize: Resize) -> Result<Layout, ScalableError> {
        let _one = self.running.lock().await;
        if !self.is_leader() {
            return Err(ScalableError::NotLeader(self.topic.to_string()));
        }
        self.finish_pending().await?;
        let current = self.layout().await?;
        let at_ms = now_ms();
        // Refused here, before anything is recorded, if it cannot apply.
        let plan = current.value.plan(&resize, at_ms)?;
        // The new segments get a cursor for every subscription the metadata
        // lists and for every one the old segments have (subscriptions only
        // consumers made, which Pulsar's controller leaves without one).
        let mut subscriptions = self.metadata_subscriptions().await?;
        for id in &plan.sealed {
            let name = self.segment_topic(&current.value, *id)?;
            subscriptions.extend(self.segments.subscriptions(&name).await?);
        }
        subscriptions.sort();
        subscriptions.dedup();
        let removed_topics = plan
            .removed
            .iter()
            .map(|id| {
                self.segment_topic(&current.value, *id)
                    .map(|t| t.to_string())
            })
            .collect::<Result<_, _>>()?;
        let pending = PendingResize {
            resize,
            base_epoch: current.value.epoch,
            at_ms,
            subscriptions,
            removed_topics,
        };
        let (ns, local) = self.names();
        let version = self
            .resources
            .begin_resize(ns, local, &pending, self.fence()?)
            .await?;
        info!(topic = %self.topic, resize = ?pending.resize, epoch = pending.base_epoch, "resize recorded");
        self.reached(Failpoint::AfterRecord)?;
        self.run(&pending, version).await
    }

    /// Replays the recorded resize, if there is one.
    async fn finish_pending(&self) -> Result<(), ScalableError> {
        let (ns, local) = self.names();
        if let Some(p) = self.resources.pending_resize(ns, local).await? {
            info!(topic = %self.topic, resize = ?p.value.resize, "finishing a recorded resize");
            match self.run(&p.value, p.version).await {
                Ok(_) => {}
                // A record that no longer applies (its segment pruned, the
                // topic deleted and made again) is dropped, not retried forever.
                Err(ScalableError::Layout(e)) => {
                    warn!(topic = %self.topic, error = %e, "dropping a recorded resize that no longer applies");
                    self.resources.end_resize(ns, local, p.version).await?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Runs a recorded resize from its first step (any of which may have
    /// been done before).
    async fn run(&self, p: &PendingResize, version: u64) -> Result<Layout, ScalableError> {
        let (ns, local) = self.names();
        let current = self.layout().await?;
        if current.value.epoch != p.base_epoch {
            // The layout was written: only a prune has steps after that.
            self.delete_removed(p).await?;
            self.resources.end_resize(ns, local, version).await?;
            return Ok(current.value);
        }
        let plan = current.value.plan(&p.resize, p.at_ms)?;
        for id in &plan.created {
            let name = self.segment_topic(&plan.layout, *id)?;
            self.segments.create(&name, &p.subscriptions).await?;
        }
        self.reached(Failpoint::AfterCreate)?;
        for id in &plan.sealed {
            let name = self.segment_topic(&current.value, *id)?;
            self.segments.terminate(&name).await?;
        }
        self.reached(Failpoint::AfterTerminate)?;
        let prune = matches!(p.resize, Resize::Prune { .. });
        self.resources
            .commit_layout(
                ns,
                local,
                &plan.layout,
                current.version,
                (!prune).then_some(version),
                self.fence()?,
            )
            .await?;
        info!(topic = %self.topic, epoch = plan.layout.epoch, resize = ?p.resize, "layout written");
        self.reached(Failpoint::AfterCommit)?;
        if prune {
            self.delete_removed(p).await?;
            self.resources.end_resize(ns, local, version).await?;
        }
        Ok(plan.layout)
    }

    /// Deletes a prune's segment topics (named in its record).
    async fn delete_removed(&self, p: &PendingResize) -> Result<(), ScalableError> {
        for t in &p.removed_topics {
            let name = TopicName::parse(t).map_err(|e| ScalableError::Segment {
                segment: t.clone(),
                reason: e.to_string(),
            })?;
            self.segments.delete(&name).await?;
        }
        Ok(())
    }
}
