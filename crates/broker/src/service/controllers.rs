//! The scalable topics' controllers this broker takes part in. A topic's
//! controller is created when something touches the topic here (an admin
//! call, a DAG watch session); in a cluster every broker that touched it
//! campaigns at `…/controller` with its broker id, and the one elected acts.
//! A broker that wins first finishes whatever resize the previous leader
//! left ([`Controller::recover`]); while it leads, a task retries that
//! until it succeeds and prunes drained sealed segments on a tick.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use strobe_metadata::{LeaderElection, LeaderState};
use strobe_model::TopicName;
use strobe_scalable::{Controller, Failpoint};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, warn};

use super::BrokerService;
pub use super::controller_slots::ControllerAt;
use super::controller_slots::{Slot, ensure_recovered};
use super::coordinator::Coordinator;
use crate::BrokerError;
use std::collections::HashMap;

impl BrokerService {
    fn controller_slot(&self, topic: &TopicName) -> Result<Arc<Slot>, BrokerError> {
        let key = topic.to_string();
        let mut slots = self.controllers.slots.lock();
        if let Some(s) = slots.get(&key) {
            return Ok(s.clone());
        }
        let election = match self.cluster() {
            None => None,
            Some(c) => {
                let path = strobe_resources::paths::scalable_controller(
                    topic.namespace(),
                    topic.local_name(),
                );
                let e = Arc::new(LeaderElection::new(c.session(), &path, c.broker_id())?);
                e.campaign();
                Some(e)
            }
        };
        let controller = Arc::new(Controller::new(
            topic.clone(),
            self.resources.clone(),
            self.segment_topics(),
            election.clone(),
        ));
        controller.set_failpoint(
            Failpoint::parse(&self.config.scalable_topic_failpoint),
            true,
        );
        let slot = Arc::new(Slot {
            controller,
            election,
            recovered: tokio::sync::Mutex::new(None),
            stop: CancellationToken::new(),
            coordinators: tokio::sync::Mutex::new(HashMap::new()),
        });
        slots.insert(key, slot.clone());
        let span = tracing::info_span!("controller", topic = %topic);
        tokio::spawn(tend(self.me.clone(), Arc::downgrade(&slot)).instrument(span));
        Ok(slot)
    }

    /// Where `topic`'s controller acts, electing one if nobody leads. Here
    /// means recovered: a resize a previous leader left is finished first.
    pub async fn scalable_controller(
        &self,
        topic: &TopicName,
    ) -> Result<ControllerAt, BrokerError> {
        if self
            .resources
            .layout(topic.namespace(), topic.local_name())
            .await?
            .is_none()
        {
            return Err(BrokerError::TopicNotFound(format!(
                "scalable topic {topic} does not exist"
            )));
        }
        let slot = self.controller_slot(topic)?;
        let version = match &slot.election {
            None => 0,
            Some(e) => {
                let state = e
                    .wait_for(Duration::from_secs(10), |s| {
                        !matches!(s, LeaderState::NoLeader)
                    })
                    .await?;
                match state {
                    LeaderState::Leading { version, .. } => version,
                    LeaderState::Following {
                        leader: Some(id), ..
                    } => {
                        let web_url = self
                            .broker_info(&id)
                            .map(|b| b.web_service_url)
                            .ok_or_else(|| {
                                BrokerError::ServiceNotReady(format!(
                                    "the controller of {topic} is on broker {id}, which is not registered"
                                ))
                            })?;
                        return Ok(ControllerAt::Elsewhere {
                            broker_id: id,
                            web_url,
                        });
                    }
                    _ => {
                        return Err(BrokerError::ServiceNotReady(format!(
                            "the controller of {topic} has no leader"
                        )));
                    }
                }
            }
        };
        ensure_recovered(&slot, version).await?;
        Ok(ControllerAt::Here(slot.controller.clone()))
    }

    /// The coordinator of `sub` on `topic` (started here if need be; the
    /// subscription recorded with `kind`), which needs this broker to lead
    /// the topic's controller: a client elsewhere is told where it is.
    pub async fn scalable_coordinator(
        &self,
        topic: &TopicName,
        sub: &str,
        kind: strobe_layout::ReaderKind,
    ) -> Result<Arc<Coordinator>, BrokerError> {
        if let ControllerAt::Elsewhere { broker_id, .. } = self.scalable_controller(topic).await? {
            return Err(BrokerError::ServiceNotReady(format!(
                "the controller of {topic} is on broker {broker_id}: subscribe there (the DAG's controller_broker_url)"
            )));
        }
        let slot = self.controller_slot(topic)?;
        let mut cs = slot.coordinators.lock().await;
        if let Some(c) = cs.get(sub) {
            return Ok(c.clone());
        }
        let c = Coordinator::start(
            topic.clone(),
            sub.to_owned(),
            kind,
            self.resources.clone(),
            Duration::from_secs(
                self.config
                    .scalable_topic_consumer_session_grace_period_secs,
            ),
        )
        .await?;
        cs.insert(sub.to_owned(), c.clone());
        Ok(c)
    }

    /// Makes sure a controller for `topic` exists here (campaigning, in a
    /// cluster), so a resize a dead leader left gets finished without
    /// waiting for an admin call.
    pub(crate) fn touch_controller(&self, topic: &TopicName) {
        if let Err(e) = self.controller_slot(topic) {
            warn!(%topic, error = %e, "no controller for the scalable topic");
        }
    }

    /// Touches the controller of every scalable topic with a resize in
    /// progress, so a broker that starts (after a crash mid-split, say)
    /// finishes it, or takes part in electing who does.
    pub async fn resume_resizes(&self) {
        match self.resources.pending_resizes().await {
            Ok(pending) => {
                for (ns, local) in pending {
                    match TopicName::parse(&format!("topic://{ns}/{local}")) {
                        Ok(t) => {
                            info!(topic = %t, "a resize is in progress: its controller finishes it");
                            self.touch_controller(&t);
                        }
                        Err(e) => warn!(ns, local, error = %e, "a pending resize names no topic"),
                    }
                }
            }
            Err(e) => warn!(error = %e, "could not list the scalable topics' pending resizes"),
        }
    }

    /// Starts the coordinator of every subscription with registered
    /// consumers, so each gets its grace period to come back to this
    /// leader (and is evicted if it does not).
    async fn restore_coordinators(&self, topic: &TopicName) {
        let (ns, local) = (topic.namespace(), topic.local_name());
        let subs = match self.resources.scalable_subscriptions(ns, local).await {
            Ok(s) => s,
            Err(e) => {
                warn!(%topic, error = %e, "cannot list subscriptions to restore");
                return;
            }
        };
        for (sub, info) in subs {
            let kind = match info.kind.as_str() {
                "STREAM" => strobe_layout::ReaderKind::Stream,
                "CHECKPOINT" => strobe_layout::ReaderKind::Checkpoint,
                _ => continue,
            };
            match self.resources.scalable_consumers(ns, local, &sub).await {
                Ok(names) if !names.is_empty() => {
                    if let Err(e) = self.scalable_coordinator(topic, &sub, kind).await {
                        warn!(%topic, sub, error = %e, "cannot restore a coordinator");
                    }
                }
                _ => {}
            }
        }
    }

    /// Stops taking part in `topic`'s controller (the topic is deleted).
    pub(crate) async fn drop_controller(&self, topic: &TopicName) {
        let slot = self.controllers.slots.lock().remove(&topic.to_string());
        if let Some(slot) = slot {
            slot.stop.cancel();
            if let Some(e) = &slot.election {
                let _ = e.resign().await;
            }
        }
    }

    /// Creates scalable topic `topic` with `segments` segments tiling the
    /// ring and `properties`; the segments' topics are made by its
    /// controller as it starts (here, or at the broker elected).
    pub async fn create_scalable_topic(
        &self,
        topic: &TopicName,
        segments: u32,
        properties: std::collections::BTreeMap<String, String>,
    ) -> Result<strobe_layout::Layout, BrokerError> {
        if topic.domain() != strobe_model::Domain::Topic {
            return Err(BrokerError::NotAllowed(format!(
                "{topic} is not a topic:// name"
            )));
        }
        if !self.namespace_exists(topic.namespace()) {
            return Err(BrokerError::TopicNotFound(format!(
                "namespace {} does not exist",
                topic.namespace()
            )));
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let layout = strobe_layout::Layout::create(
            segments,
            self.config.scalable_topic_entry_bucket_budget,
            properties,
            now_ms,
        )
        .map_err(|e| BrokerError::Precondition(e.to_string()))?;
        self.resources
            .create_layout(topic.namespace(), topic.local_name(), &layout)
            .await?;
        info!(%topic, segments, "created scalable topic");
        // Its segments are made now if the controller is here; a controller
        // elsewhere makes them as it notices (its DAG sessions, its tick).
        if let Err(e) = self.scalable_controller(topic).await {
            warn!(%topic, error = %e, "the new topic's controller is not ready yet");
        }
        Ok(layout)
    }

    /// Deletes scalable topic `topic` through its controller here (see
    /// [`Controller::delete_topic`]), and stops taking part in its election.
    pub async fn delete_scalable_topic(
        &self,
        controller: &Controller,
        force: bool,
    ) -> Result<(), BrokerError> {
        controller.delete_topic(force).await?;
        self.drop_controller(controller.topic()).await;
        Ok(())
    }

    /// The controller's binary URLs (plain, TLS) for clients that named
    /// `listener`: this broker in standalone; in a cluster the broker whose
    /// id the election key holds (none while nobody leads).
    pub async fn controller_urls(
        &self,
        topic: &TopicName,
        listener: Option<&str>,
    ) -> Option<(String, Option<String>)> {
        let Some(cluster) = self.cluster() else {
            return Some((self.service_url(), self.service_url_tls()));
        };
        let path =
            strobe_resources::paths::scalable_controller(topic.namespace(), topic.local_name());
        let kv = self.resources.store().get(&path).await.ok()??;
        let id: String = serde_json::from_slice(&kv.value).ok()?;
        let info = cluster
            .live_brokers()
            .into_iter()
            .find(|b| b.broker_id == id)?;
        strobe_cluster::BrokerRef::from(&info)
            .urls_for(listener)
            .ok()
    }

    fn broker_info(&self, id: &str) -> Option<strobe_cluster::BrokerInfo> {
        self.cluster()?
            .live_brokers()
            .into_iter()
            .find(|b| b.broker_id == id)
    }

    /// The autoscale policy of namespace `ns`'s scalable topics: the
    /// broker's keys with the namespace's override (a topic's own applies
    /// on top, at its controller).
    pub fn autoscale_policy(&self, ns: &str) -> strobe_layout::AutoScalePolicy {
        let base = self.broker_autoscale_policy();
        match self
            .namespace_policies(ns)
            .and_then(|p| p.scalable_topic_auto_scale_policy)
        {
            Some(o) => o.apply(&base),
            None => base,
        }
    }

    /// The autoscale policy from the broker's configuration.
    pub fn broker_autoscale_policy(&self) -> strobe_layout::AutoScalePolicy {
        let c = &self.config;
        strobe_layout::AutoScalePolicy {
            enabled: c.scalable_topic_auto_scale_enabled,
            min_segments: c.scalable_topic_min_segments,
            max_segments: c.scalable_topic_max_segments,
            max_dag_depth: c.scalable_topic_max_dag_depth,
            split_cooldown_ms: c.scalable_topic_split_cooldown_secs * 1000,
            merge_cooldown_ms: c.scalable_topic_merge_cooldown_secs * 1000,
            merge_window_ms: c.scalable_topic_merge_window_secs * 1000,
            split: strobe_layout::Rates {
                msg_rate_in: c.scalable_topic_split_msg_rate_in_threshold,
                bytes_rate_in: c.scalable_topic_split_bytes_rate_in_threshold,
                msg_rate_out: c.scalable_topic_split_msg_rate_out_threshold,
                bytes_rate_out: c.scalable_topic_split_bytes_rate_out_threshold,
            },
            merge: strobe_layout::Rates {
                msg_rate_in: c.scalable_topic_merge_msg_rate_in_threshold,
                bytes_rate_in: c.scalable_topic_merge_bytes_rate_in_threshold,
                msg_rate_out: c.scalable_topic_merge_msg_rate_out_threshold,
                bytes_rate_out: c.scalable_topic_merge_bytes_rate_out_threshold,
            },
        }
    }

    /// The retention of sealed segments: the namespace's retention time
    /// (`None`: keep them; Pulsar's default retention is 0 minutes).
    fn segment_retention(&self, ns: &str) -> Option<Duration> {
        match self
            .namespace_policies(ns)
            .and_then(|p| p.retention_policies)
        {
            None => Some(Duration::ZERO),
            Some(r) if r.retention_time_in_minutes < 0 => None,
            Some(r) => Some(Duration::from_secs(r.retention_time_in_minutes as u64 * 60)),
        }
    }
}

/// While this broker leads the slot's controller: recover (retried every
/// few seconds until it works) and prune on the GC tick.
async fn tend(service: Weak<BrokerService>, slot: Weak<Slot>) {
    let (stop, mut changes) = match slot.upgrade() {
        Some(s) => (s.stop.clone(), s.election.as_ref().map(|e| e.subscribe())),
        None => return,
    };
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_prune = Instant::now();
    let mut last_scale = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
            changed = async {
                match &mut changes {
                    Some(c) => c.changed().await,
                    None => std::future::pending().await,
                }
            } => if changed.is_err() { return },
        }
        let (Some(s), Some(slot)) = (service.upgrade(), slot.upgrade()) else {
            return;
        };
        let version = match &slot.election {
            None => 0,
            Some(e) => match e.state() {
                LeaderState::Leading { version, .. } if e.is_leader() => version,
                _ => {
                    // Not leading: the coordinators are the leader's.
                    slot.coordinators.lock().await.clear();
                    continue;
                }
            },
        };
        let fresh = slot.recovered.lock().await.is_none_or(|v| v != version);
        if let Err(e) = ensure_recovered(&slot, version).await {
            warn!(error = %e, "the controller could not finish recovering; retrying");
            continue;
        }
        if fresh {
            s.restore_coordinators(slot.controller.topic()).await;
        }
        // Whether autoscaling is on is the policy's to say: a namespace or
        // a topic may turn it on where the broker's key has it off.
        if last_scale.elapsed()
            >= Duration::from_secs(s.config.scalable_topic_auto_scale_interval_secs)
        {
            last_scale = Instant::now();
            let max_consumers = slot
                .coordinators
                .lock()
                .await
                .values()
                .map(|c| c.member_count() as u32)
                .max()
                .unwrap_or(0);
            if let Err(e) = slot
                .controller
                .autoscale(
                    &s.autoscale_policy(slot.controller.topic().namespace()),
                    max_consumers,
                )
                .await
            {
                warn!(error = %e, "autoscaling failed");
            }
        }
        let every = s.config.scalable_topic_gc_interval_secs;
        if every == 0 || last_prune.elapsed() < Duration::from_secs(every) {
            continue;
        }
        last_prune = Instant::now();
        let topic = slot.controller.topic().clone();
        match slot
            .controller
            .prune(s.segment_retention(topic.namespace()))
            .await
        {
            Ok(pruned) if !pruned.is_empty() => info!(?pruned, "pruned drained sealed segments"),
            Ok(_) => {}
            Err(e) => warn!(error = %e, "pruning failed"),
        }
    }
}
