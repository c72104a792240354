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
use crate::failpoint::Failpoint;
use crate::segments::{SegmentStats, SegmentTopics, SubscriptionOp};

/// The controller of one `topic://`.
pub struct Controller {
    topic: TopicName,
    resources: Arc<Resources>,
    segments: Arc<dyn SegmentTopics>,
    /// `None` in standalone, where this broker is the only candidate.
    leadership: Option<Arc<LeaderElection<String>>>,
    /// One resize at a time on this broker; the record serializes brokers.
    running: tokio::sync::Mutex<()>,
    /// Where to stop, and whether by aborting the process (a kill -9 at
    /// that step, for tests with real brokers) or with an error.
    failpoint: parking_lot::Mutex<Option<(Failpoint, bool)>>,
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

    /// Stops the next resize at `step` (tests of recovery): with
    /// `ScalableError::Failpoint`, or with `abort` by aborting the process.
    pub fn set_failpoint(&self, step: Option<Failpoint>, abort: bool) {
        *self.failpoint.lock() = step.map(|s| (s, abort));
    }

    fn reached(&self, step: Failpoint) -> Result<(), ScalableError> {
        match *self.failpoint.lock() {
            Some((s, true)) if s == step => {
                tracing::error!(topic = %self.topic, ?step, "failpoint reached: aborting");
                std::process::abort();
            }
            Some((s, false)) if s == step => Err(ScalableError::Failpoint(step)),
            _ => Ok(()),
        }
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
        layout
            .get(id)?
            .topic_name(&self.topic)
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
        // A migration that wrote its layout and died before sealing the
        // v4 topics it replaced (PIP-475): seal them now.
        for s in layout
            .segments
            .values()
            .filter(|s| s.is_legacy() && !s.is_active())
        {
            let name = self.segment_topic(&layout, s.segment_id)?;
            self.segments.terminate(&name).await?;
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
        let mut prunable = Vec::new();
        for s in layout.segments.values() {
            let Some(sealed_at) = s.sealed_at_ms.filter(|_| !s.is_active()) else {
                continue;
            };
            if now.saturating_sub(sealed_at) < retention.as_millis() as u64 {
                continue;
            }
            let name = self.segment_topic(&layout, s.segment_id)?;
            // Every cursor the segment has must have read it to its end. A
            // subscription the metadata lists that the segment lacks (made
            // after it was sealed) has nothing of it to read.
            let stats = self.segments.stats(&name).await?.unwrap_or_default();
            let drained = stats.backlogs.values().all(|b| *b == 0);
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

    /// PIP-483: asks `strobe_layout::decide` what to do now with the
    /// segments' load records, and does it. The last split and merge are
    /// read from the layout (the newest child with one parent, with two),
    /// so a new leader keeps the cooldowns. `max_consumers`: the most
    /// consumers a stream or checkpoint subscription has.
    pub async fn autoscale(
        &self,
        base: &strobe_layout::AutoScalePolicy,
        max_consumers: u32,
    ) -> Result<strobe_layout::Decision, ScalableError> {
        use strobe_layout::Decision;
        let (ns, local) = self.names();
        let layout = self.layout().await?.value;
        // The topic's own override wins over `base` (the broker's policy
        // with the namespace's override) field by field.
        let policy = match &layout.auto_scale_policy {
            Some(o) => o.apply(base),
            None => base.clone(),
        };
        if let Some(why) = policy.invalid() {
            warn!(topic = %self.topic, %why, "the autoscale policy is invalid: not autoscaling");
            return Ok(Decision::Nothing);
        }
        if !policy.enabled {
            return Ok(Decision::Nothing);
        }
        let policy = &policy;
        let loads = self.resources.segment_loads(ns, local).await?;
        let newest = |parents: fn(usize) -> bool| {
            layout
                .segments
                .values()
                .filter(|s| parents(s.parent_ids.len()))
                .map(|s| s.created_at_ms)
                .max()
                .unwrap_or(0)
        };
        let clock = strobe_layout::Clock {
            now_ms: now_ms(),
            last_split_ms: newest(|n| n == 1),
            last_merge_ms: newest(|n| n >= 2),
            max_consumers,
        };
        let decision = strobe_layout::decide(&layout, &loads, policy, clock);
        match decision {
            Decision::Split(id) => {
                info!(topic = %self.topic, segment = id, "autoscale: split");
                self.split(id).await?;
            }
            Decision::Merge(a, b) => {
                info!(topic = %self.topic, a, b, "autoscale: merge");
                self.merge(a, b).await?;
            }
            Decision::Nothing => {}
        }
        Ok(decision)
    }

    /// Sets the topic's override of the autoscale policy (`None` or an
    /// empty one removes it). The epoch stays: no segment changed, and DAG
    /// watchers apply an update of the same epoch whose content differs.
    pub async fn set_autoscale_policy(
        &self,
        policy: Option<strobe_layout::AutoScalePolicyOverride>,
    ) -> Result<Layout, ScalableError> {
        let _one = self.running.lock().await;
        let (ns, local) = self.names();
        let current = self.layout().await?;
        let mut layout = current.value;
        layout.auto_scale_policy = policy.filter(|p| !p.is_empty());
        self.resources
            .commit_layout(ns, local, &layout, current.version, None, self.fence()?)
            .await?;
        Ok(layout)
    }

    /// Records subscription `sub` and gives every active segment a cursor
    /// at its start (sealed ones are not read by a subscription made after
    /// them, as Pulsar's `createSubscription`).
    pub async fn create_subscription(&self, sub: &str, kind: &str) -> Result<(), ScalableError> {
        let _one = self.running.lock().await;
        let (ns, local) = self.names();
        self.resources
            .create_scalable_subscription(
                ns,
                local,
                sub,
                &strobe_resources::ScalableSubscription {
                    kind: kind.to_owned(),
                },
            )
            .await?;
        let layout = self.layout().await?.value;
        for s in layout.active() {
            let name = self.segment_topic(&layout, s.segment_id)?;
            self.segments.create(&name, &[sub.to_owned()]).await?;
        }
        Ok(())
    }

    /// Deletes subscription `sub` everywhere: its cursors on every segment
    /// that has one, then its record.
    pub async fn delete_subscription(&self, sub: &str) -> Result<(), ScalableError> {
        let _one = self.running.lock().await;
        let (ns, local) = self.names();
        let layout = self.layout().await?.value;
        let with = self.segments_with(&layout, sub).await?;
        for (_, name) in &with {
            self.segments
                .subscription(name, sub, SubscriptionOp::Delete)
                .await?;
        }
        let found = !with.is_empty();
        let recorded = self
            .resources
            .delete_scalable_subscription(ns, local, sub)
            .await?;
        if !(found || recorded) {
            return Err(ScalableError::NotFound(format!(
                "subscription {sub} of {} does not exist",
                self.topic
            )));
        }
        Ok(())
    }

    /// Acknowledges everything `sub` has on every segment.
    pub async fn skip_all(&self, sub: &str) -> Result<(), ScalableError> {
        self.on_segments_with(sub, |_| SubscriptionOp::SkipAll)
            .await
    }

    /// Moves `sub` to time `ts_ms` on every segment, as Pulsar does: a
    /// segment sealed before it is skipped to its end, one created at or
    /// after it is read from its start, the others are sought by time.
    pub async fn seek(&self, sub: &str, ts_ms: u64) -> Result<(), ScalableError> {
        self.on_segments_with(sub, |s| {
            if s.sealed_at_ms.is_some_and(|t| t < ts_ms) {
                SubscriptionOp::SkipAll
            } else if s.created_at_ms >= ts_ms {
                SubscriptionOp::SeekEarliest
            } else {
                SubscriptionOp::SeekTime(ts_ms)
            }
        })
        .await
    }

    async fn on_segments_with(
        &self,
        sub: &str,
        op: impl Fn(&strobe_layout::Segment) -> SubscriptionOp,
    ) -> Result<(), ScalableError> {
        let layout = self.layout().await?.value;
        let with = self.segments_with(&layout, sub).await?;
        for (s, name) in &with {
            self.segments.subscription(name, sub, op(s)).await?;
        }
        let found = !with.is_empty();
        if !found {
            return Err(ScalableError::NotFound(format!(
                "subscription {sub} of {} does not exist",
                self.topic
            )));
        }
        Ok(())
    }

    /// The segments (and their topics) that have a cursor for `sub`.
    async fn segments_with<'l>(
        &self,
        layout: &'l Layout,
        sub: &str,
    ) -> Result<Vec<(&'l strobe_layout::Segment, TopicName)>, ScalableError> {
        let mut out = Vec::new();
        for s in layout.segments.values() {
            let name = self.segment_topic(layout, s.segment_id)?;
            if let Some(st) = self.segments.stats(&name).await?
                && st.backlogs.contains_key(sub)
            {
                out.push((s, name));
            }
        }
        Ok(out)
    }

    /// Every segment's topic as it is now, by segment id (`None`: no topic).
    pub async fn stats(&self) -> Result<(Layout, Vec<(u64, Option<SegmentStats>)>), ScalableError> {
        let layout = self.layout().await?.value;
        let mut out = Vec::new();
        for s in layout.segments.values() {
            let name = self.segment_topic(&layout, s.segment_id)?;
            out.push((s.segment_id, self.segments.stats(&name).await?));
        }
        Ok((layout, out))
    }

    /// Deletes the topic: with `force`, whoever is connected is
    /// disconnected; without, a segment with producers or consumers refuses
    /// it before anything is deleted. Segment topics go first, the
    /// metadata last, so a delete cut short is found and done again.
    pub async fn delete_topic(&self, force: bool) -> Result<(), ScalableError> {
        let _one = self.running.lock().await;
        let (layout, stats) = self.stats().await?;
        if !force
            && let Some((id, st)) = stats.iter().find_map(|(id, st)| {
                st.as_ref()
                    .filter(|s| s.producers + s.consumers > 0)
                    .map(|s| (id, s))
            })
        {
            return Err(ScalableError::Busy(format!(
                "segment {id} of {} has {} producer(s) and {} consumer(s) connected",
                self.topic, st.producers, st.consumers
            )));
        }
        for s in layout.segments.values() {
            let name = self.segment_topic(&layout, s.segment_id)?;
            self.segments.delete(&name).await?;
        }
        let (ns, local) = self.names();
        self.resources.delete_scalable_topic(ns, local).await?;
        info!(topic = %self.topic, "scalable topic deleted");
        Ok(())
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
            if let Some(stats) = self.segments.stats(&name).await? {
                subscriptions.extend(stats.backlogs.into_keys());
            }
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
            if let Resize::Prune { segments } = &p.resize {
                for id in segments {
                    self.resources.delete_segment_load(ns, local, *id).await?;
                }
            }
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
