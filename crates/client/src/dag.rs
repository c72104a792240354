//! The DAG watch session of Pulsar 5's scalable topics, from the client's
//! side: SCALABLE_TOPIC_LOOKUP on any broker, then every
//! SCALABLE_TOPIC_UPDATE the broker pushes. A lost connection opens a new
//! session (with backoff), so a watcher always converges on the current
//! layout. Updates are applied when their epoch is at least the current one
//! and their content differs (Pulsar's reviewers' advice: a strict `>`
//! never leaves an epoch-0 synthetic layout, and property writes re-push
//! the same epoch).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use strobe_model::TopicName;
use strobe_model::scalable::{HashRange, SegmentDescriptor};
use strobe_wire::Command;
use strobe_wire::proto::{self, CommandScalableTopicClose, CommandScalableTopicLookup};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::client::Client;
use crate::connection::{Connection, server_error};
use crate::error::{Error, Result};
use crate::util::Backoff;

/// The metadata key by which a V5 client's producers and consumers on a
/// legacy segment (a v4 topic, PIP-475) tell the broker so.
pub const V5_MANAGED: &str = "__pulsar.v5.managed";

/// One segment of a layout, as a client uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DagSegment {
    pub id: u64,
    pub range: HashRange,
    pub active: bool,
    pub parents: Vec<u64>,
    pub children: Vec<u64>,
    /// PIP-486 bucket boundaries of the segment.
    pub entry_bucket_splits: Vec<u32>,
    /// Its `segment://` name, or the v4 topic of a legacy segment (PIP-475).
    pub topic: String,
    /// Whether it stands for a v4 topic (PIP-475): a synthetic layout's
    /// segments are all legacy, and keys go to them as v4 routes them.
    pub legacy: bool,
    /// The broker the DAG says serves it (active segments).
    pub broker_url: Option<String>,
}

/// A scalable topic's layout as the broker last pushed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dag {
    /// The `topic://` name the lookup resolved to.
    pub topic: String,
    pub epoch: u64,
    pub segments: BTreeMap<u64, DagSegment>,
    /// The broker leading the topic's controller, if one leads.
    pub controller_url: Option<String>,
}

impl Dag {
    fn from_update(resolved: &str, dag: proto::ScalableTopicDag) -> Result<Dag> {
        let topic = TopicName::parse(resolved).map_err(|e| Error::Invalid(e.to_string()))?;
        let brokers: BTreeMap<u64, String> = dag
            .segment_brokers
            .into_iter()
            .map(|b| (b.segment_id, b.broker_url))
            .collect();
        let mut segments = BTreeMap::new();
        for s in dag.segments {
            let bad = || Error::Unexpected(format!("segment {} has a bad range", s.segment_id));
            let range = HashRange::new(
                u16::try_from(s.hash_start).map_err(|_| bad())?,
                u16::try_from(s.hash_end).map_err(|_| bad())?,
            )
            .map_err(|_| bad())?;
            // A legacy segment (PIP-475) is the v4 topic it names.
            let name = match &s.legacy_topic_name {
                Some(legacy) => TopicName::parse(legacy)
                    .map_err(|e| Error::Invalid(format!("segment {}: {e}", s.segment_id)))?,
                None => topic
                    .segment_name(SegmentDescriptor {
                        range,
                        id: s.segment_id,
                    })
                    .ok_or_else(|| Error::Invalid(format!("{resolved} is not a topic:// name")))?,
            };
            segments.insert(
                s.segment_id,
                DagSegment {
                    id: s.segment_id,
                    range,
                    active: s.state == proto::SegmentState::Active as i32,
                    parents: s.parent_ids,
                    children: s.child_ids,
                    entry_bucket_splits: s.entry_bucket_splits,
                    legacy: s.legacy_topic_name.is_some(),
                    topic: name.to_string(),
                    broker_url: brokers.get(&s.segment_id).cloned(),
                },
            );
        }
        Ok(Dag {
            topic: topic.to_string(),
            epoch: dag.epoch,
            segments,
            controller_url: dag.controller_broker_url,
        })
    }

    /// The active segments in ring order.
    pub fn active(&self) -> Vec<&DagSegment> {
        let mut out: Vec<&DagSegment> = self.segments.values().filter(|s| s.active).collect();
        out.sort_by_key(|s| s.range.start);
        out
    }

    /// The active segment owning `hash`.
    pub fn segment_of(&self, hash: u16) -> Option<&DagSegment> {
        self.segments
            .values()
            .find(|s| s.active && s.range.contains(hash))
    }

    /// The active segment a message with routing key `key` goes to: by
    /// the key's segment hash; on a synthetic layout (every active segment
    /// a v4 partition, PIP-475) as a v4 producer routes it, the masked
    /// Murmur3 hash modulo the partitions, matched to the segment id, so a
    /// key lands where v4 producers put it.
    pub fn route_key(&self, key: &[u8]) -> Option<&DagSegment> {
        let active: Vec<&DagSegment> = self.segments.values().filter(|s| s.active).collect();
        if !active.is_empty() && active.iter().all(|s| s.legacy) {
            let id =
                u64::from(strobe_model::murmur3_32(key, 0) & 0x7fff_ffff) % active.len() as u64;
            return active.into_iter().find(|s| s.id == id);
        }
        self.segment_of(strobe_model::scalable::segment_hash(key))
    }

    /// Whether segment `id` is active here.
    pub fn is_active(&self, id: u64) -> bool {
        self.segments.get(&id).is_some_and(|s| s.active)
    }
}

/// A DAG watch session that re-opens itself after a connection loss.
/// Dropping it closes the session.
#[derive(Debug)]
pub struct DagWatch {
    rx: watch::Receiver<Option<Arc<Dag>>>,
    task: JoinHandle<()>,
}

impl Drop for DagWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DagWatch {
    /// The layout now.
    pub fn current(&self) -> Arc<Dag> {
        self.rx
            .borrow()
            .clone()
            .expect("a DagWatch has a layout from its start")
    }

    /// Waits for the next layout; `Err(Closed)` if the session ended for good.
    pub async fn changed(&mut self) -> Result<Arc<Dag>> {
        self.rx.changed().await.map_err(|_| Error::Closed)?;
        Ok(self.current())
    }

    /// A receiver of every layout from now on.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<Dag>>> {
        self.rx.clone()
    }
}

impl Client {
    /// Opens a DAG watch session on `topic` (`topic://` or `persistent://`);
    /// `create_if_missing` lets the broker create a one-segment topic.
    /// Returns once the first layout arrived (or the broker refused).
    pub async fn watch_scalable_topic(
        &self,
        topic: &str,
        create_if_missing: bool,
    ) -> Result<DagWatch> {
        let (tx, rx) = watch::channel(None);
        let (first_tx, first_rx) = oneshot::channel();
        let task = tokio::spawn(run(
            self.clone(),
            topic.to_owned(),
            create_if_missing,
            tx,
            first_tx,
        ));
        match first_rx.await {
            Ok(Ok(())) => Ok(DagWatch { rx, task }),
            Ok(Err(e)) => {
                task.abort();
                Err(e)
            }
            Err(_) => Err(Error::Closed),
        }
    }
}

/// Closes the session on its connection when the watch task ends.
struct Session {
    conn: Arc<Connection>,
    id: u64,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.conn.unregister_watcher(self.id);
        let _ = self.conn.send_command(CommandScalableTopicClose {
            session_id: self.id,
        });
    }
}

async fn run(
    client: Client,
    topic: String,
    create: bool,
    tx: watch::Sender<Option<Arc<Dag>>>,
    first: oneshot::Sender<Result<()>>,
) {
    let mut first = Some(first);
    let mut backoff = Backoff::new();
    loop {
        match session(&client, &topic, create, &tx, &mut first).await {
            // The connection went away: a new session, at once.
            Ok(()) => backoff = Backoff::new(),
            Err(e) => {
                if let Some(f) = first.take() {
                    let _ = f.send(Err(e));
                    return;
                }
                warn!(topic, error = %e, "the DAG watch session failed; opening another");
            }
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(backoff.next().min(Duration::from_secs(5))).await;
    }
}

/// One session: until its connection closes (`Ok`) or the broker refuses it.
async fn session(
    client: &Client,
    topic: &str,
    create: bool,
    tx: &watch::Sender<Option<Arc<Dag>>>,
    first: &mut Option<oneshot::Sender<Result<()>>>,
) -> Result<()> {
    let conn = client.service_connection().await?;
    let id = client.next_id();
    let (utx, mut updates) = mpsc::unbounded_channel();
    conn.register_watcher(id, utx);
    let _session = Session {
        conn: conn.clone(),
        id,
    };
    conn.send_command(CommandScalableTopicLookup {
        session_id: id,
        topic: topic.to_owned(),
        create_if_missing: Some(create),
    })?;
    while let Some(cmd) = updates.recv().await {
        let Command::ScalableTopicUpdate(u) = cmd else {
            continue;
        };
        if let Some(code) = u.error {
            return Err(server_error(code, u.message.unwrap_or_default()));
        }
        let (Some(resolved), Some(dag)) = (u.resolved_topic_name, u.dag) else {
            return Err(Error::Unexpected(
                "a SCALABLE_TOPIC_UPDATE without a DAG or an error".into(),
            ));
        };
        let dag = Dag::from_update(&resolved, dag)?;
        let apply = tx
            .borrow()
            .as_ref()
            .is_none_or(|cur| dag.epoch >= cur.epoch && **cur != dag);
        if apply {
            debug!(topic, epoch = dag.epoch, "layout");
            tx.send_replace(Some(Arc::new(dag)));
        }
        if let Some(f) = first.take() {
            let _ = f.send(Ok(()));
        }
    }
    Ok(())
}
