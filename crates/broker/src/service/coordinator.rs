//! The coordinator of one subscription of a scalable topic (Pulsar's
//! `SubscriptionCoordinator`), on the broker leading the topic's
//! controller. Consumers register by name (SCALABLE_TOPIC_SUBSCRIBE); the
//! registration is kept at `…/subscriptions/{sub}/consumers/{name}`, so a
//! new leader restores the members (each gets a fresh grace period to come
//! back). Whenever the members, the layout or the segments the
//! subscription has drained change, the assignment is computed again
//! (`strobe_layout::assign`, pure) and pushed to every connected member
//! whose part changed (SCALABLE_TOPIC_ASSIGNMENT_UPDATE).
//!
//! A session is its (connection, consumer id): a disconnect of an old
//! connection does not touch a member that re-attached on another (Pulsar's
//! reviewers' finding). A disconnected member keeps its segments for the
//! grace period; SCALABLE_TOPIC_UNSUBSCRIBE (82) lets it go at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use strobe_layout::{AssignedSegment, Layout, ReaderKind, assign};
use strobe_model::TopicName;
use strobe_resources::{Resources, ScalableSubscription};
use strobe_wire::proto::{self, IntRange};
use strobe_wire::{Command, OutFrame};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::BrokerError;

/// A connected member: where its updates go.
#[derive(Debug, Clone)]
pub struct Session {
    pub conn_id: u64,
    pub consumer_id: u64,
    pub tx: mpsc::Sender<OutFrame>,
}

#[derive(Default)]
struct Members {
    /// Every registered name; `None` while disconnected.
    sessions: BTreeMap<String, Option<Session>>,
    /// Grace timers of the disconnected.
    timers: HashMap<String, JoinHandle<()>>,
    /// What each connected member was last told.
    told: BTreeMap<String, Vec<AssignedSegment>>,
}

/// One subscription's coordinator.
pub struct Coordinator {
    topic: TopicName,
    sub: String,
    kind: ReaderKind,
    resources: Arc<Resources>,
    grace: Duration,
    members: Mutex<Members>,
    /// One rebalance at a time, in order.
    rebalancing: tokio::sync::Mutex<()>,
    stop: CancellationToken,
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.stop.cancel();
        for (_, t) in self.members.get_mut().timers.drain() {
            t.abort();
        }
    }
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("topic", &self.topic.to_string())
            .field("subscription", &self.sub)
            .finish_non_exhaustive()
    }
}

fn kind_name(kind: ReaderKind) -> &'static str {
    match kind {
        ReaderKind::Stream => "STREAM",
        ReaderKind::Checkpoint => "CHECKPOINT",
    }
}

/// An assignment as the wire carries it.
pub fn to_proto(
    topic: &TopicName,
    epoch: u64,
    segments: &[AssignedSegment],
) -> proto::ScalableConsumerAssignment {
    proto::ScalableConsumerAssignment {
        layout_epoch: epoch,
        segments: segments
            .iter()
            .map(|s| proto::ScalableAssignedSegment {
                segment_id: s.segment_id,
                hash_start: u32::from(s.range.start),
                hash_end: u32::from(s.range.end),
                segment_topic: match &s.legacy_topic_name {
                    Some(legacy) => legacy.clone(),
                    None => topic
                        .segment_name(strobe_model::scalable::SegmentDescriptor {
                            range: s.range,
                            id: s.segment_id,
                        })
                        .map(|n| n.to_string())
                        .unwrap_or_default(),
                },
                bucket_ranges: s
                    .bucket_ranges
                    .iter()
                    .map(|(a, b)| IntRange {
                        start: i32::from(*a),
                        end: i32::from(*b),
                    })
                    .collect(),
            })
            .collect(),
    }
}

impl Coordinator {
    /// Starts the coordinator of `sub`: restores the registered members
    /// (disconnected, each with a fresh grace period) and follows the
    /// topic's layout and drained segments.
    pub async fn start(
        topic: TopicName,
        sub: String,
        kind: ReaderKind,
        resources: Arc<Resources>,
        grace: Duration,
    ) -> Result<Arc<Coordinator>, BrokerError> {
        let (ns, local) = (topic.namespace().to_owned(), topic.local_name().to_owned());
        let info = ScalableSubscription {
            kind: kind_name(kind).to_owned(),
        };
        match resources
            .create_scalable_subscription(&ns, &local, &sub, &info)
            .await
        {
            Ok(()) | Err(strobe_resources::ResourcesError::AlreadyExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let names = resources.scalable_consumers(&ns, &local, &sub).await?;
        let c = Arc::new(Coordinator {
            topic,
            sub,
            kind,
            resources,
            grace,
            members: Mutex::new(Members::default()),
            rebalancing: tokio::sync::Mutex::new(()),
            stop: CancellationToken::new(),
        });
        for name in names {
            c.members.lock().sessions.insert(name.clone(), None);
            c.start_grace(&name);
        }
        let (_, watch) = c.resources.watch_scalable_tree(&ns, &local).await?;
        tokio::spawn(follow(Arc::downgrade(&c), watch, c.stop.clone()));
        Ok(c)
    }

    pub fn subscription(&self) -> &str {
        &self.sub
    }

    /// Registered members, connected or within their grace period.
    pub fn member_count(&self) -> usize {
        self.members.lock().sessions.len()
    }

    /// Registers (or re-attaches) `name` on `session`; returns its
    /// assignment, after the others were told theirs.
    pub async fn register(
        self: &Arc<Self>,
        name: &str,
        session: Session,
    ) -> Result<proto::ScalableConsumerAssignment, BrokerError> {
        let (ns, local) = (self.topic.namespace(), self.topic.local_name());
        self.resources
            .register_scalable_consumer(ns, local, &self.sub, name)
            .await?;
        {
            let mut m = self.members.lock();
            if let Some(t) = m.timers.remove(name) {
                t.abort();
            }
            m.sessions.insert(name.to_owned(), Some(session));
            // A new session is told everything again.
            m.told.remove(name);
        }
        let (epoch, mine) = self.rebalance(Some(name)).await?;
        info!(topic = %self.topic, subscription = %self.sub, consumer = name, segments = mine.len(), "consumer registered");
        Ok(to_proto(&self.topic, epoch, &mine))
    }

    /// `name`'s session on (conn, consumer) ended: it keeps its place for
    /// the grace period, unless it already re-attached elsewhere.
    pub fn disconnect(self: &Arc<Self>, name: &str, conn_id: u64, consumer_id: u64) {
        let mut m = self.members.lock();
        let ours = matches!(
            m.sessions.get(name),
            Some(Some(s)) if s.conn_id == conn_id && s.consumer_id == consumer_id
        );
        if !ours {
            return;
        }
        m.sessions.insert(name.to_owned(), None);
        m.told.remove(name);
        drop(m);
        self.start_grace(name);
    }

    /// `name` leaves now (SCALABLE_TOPIC_UNSUBSCRIBE), if (conn, consumer) is its session.
    pub async fn unsubscribe(
        self: &Arc<Self>,
        name: &str,
        conn_id: u64,
        consumer_id: u64,
    ) -> Result<(), BrokerError> {
        let ours = matches!(
            self.members.lock().sessions.get(name),
            Some(Some(s)) if s.conn_id == conn_id && s.consumer_id == consumer_id
        );
        if !ours {
            return Err(BrokerError::ConsumerNotFound(format!(
                "consumer {consumer_id} is not registered on {} {}",
                self.topic, self.sub
            )));
        }
        self.evict(name).await
    }

    fn start_grace(self: &Arc<Self>, name: &str) {
        let (me, n, grace) = (Arc::downgrade(self), name.to_owned(), self.grace);
        let timer = tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if let Some(c) = me.upgrade() {
                info!(topic = %c.topic, subscription = %c.sub, consumer = %n, "grace period over: evicted");
                if let Err(e) = c.evict(&n).await {
                    warn!(error = %e, "evicting a consumer failed");
                }
            }
        });
        if let Some(old) = self.members.lock().timers.insert(name.to_owned(), timer) {
            old.abort();
        }
    }

    async fn evict(self: &Arc<Self>, name: &str) -> Result<(), BrokerError> {
        {
            let mut m = self.members.lock();
            m.sessions.remove(name);
            m.told.remove(name);
            if let Some(t) = m.timers.remove(name) {
                t.abort();
            }
        }
        let (ns, local) = (self.topic.namespace(), self.topic.local_name());
        self.resources
            .unregister_scalable_consumer(ns, local, &self.sub, name)
            .await?;
        self.rebalance(None).await?;
        Ok(())
    }

    /// Computes the assignment and tells every connected member whose part
    /// changed (except `quiet`, answered by its SUBSCRIBE_RESPONSE); returns
    /// the epoch and `quiet`'s part.
    async fn rebalance(
        &self,
        quiet: Option<&str>,
    ) -> Result<(u64, Vec<AssignedSegment>), BrokerError> {
        let _one = self.rebalancing.lock().await;
        let (ns, local) = (self.topic.namespace(), self.topic.local_name());
        let Some(layout) = self.resources.layout(ns, local).await? else {
            return Err(BrokerError::TopicNotFound(format!(
                "{} does not exist",
                self.topic
            )));
        };
        let drained = self.resources.drained(ns, local, &self.sub).await?;
        let names: Vec<String> = self.members.lock().sessions.keys().cloned().collect();
        let mut all = assign(&layout.value, &names, self.kind, &drained);
        let epoch = layout.value.epoch;
        let mut sends = Vec::new();
        let mine = quiet.and_then(|q| all.get(q).cloned()).unwrap_or_default();
        {
            let mut m = self.members.lock();
            for (name, session) in m.sessions.clone() {
                let Some(s) = session else { continue };
                let part = all.remove(&name).unwrap_or_default();
                if m.told.get(&name) == Some(&part) {
                    continue;
                }
                m.told.insert(name.clone(), part.clone());
                if Some(name.as_str()) != quiet {
                    sends.push((s, part));
                }
            }
        }
        for (s, part) in sends {
            let update = Command::ScalableTopicAssignmentUpdate(
                proto::CommandScalableTopicAssignmentUpdate {
                    consumer_id: s.consumer_id,
                    assignment: to_proto(&self.topic, epoch, &part),
                },
            );
            if s.tx.send(OutFrame::command(update)).await.is_err() {
                debug!(conn = s.conn_id, "a member's connection is gone");
            }
        }
        Ok((epoch, mine))
    }

    /// The layout this coordinator last used (for tests and stats).
    pub async fn current_layout(&self) -> Option<Layout> {
        let (ns, local) = (self.topic.namespace(), self.topic.local_name());
        self.resources
            .layout(ns, local)
            .await
            .ok()
            .flatten()
            .map(|v| v.value)
    }
}

/// Rebalances on every change under the topic's document (the layout, a
/// drained marker); stops with the coordinator.
async fn follow(
    c: Weak<Coordinator>,
    mut watch: strobe_resources::TreeWatch,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            ev = watch.next() => match ev {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    warn!(error = %e, "a coordinator's watch failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                None => return,
            },
        }
        let Some(c) = c.upgrade() else { return };
        if let Err(e) = c.rebalance(None).await {
            debug!(error = %e, "rebalance failed");
        }
    }
}
