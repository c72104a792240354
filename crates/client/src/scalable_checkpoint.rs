//! Pulsar 5's checkpoint consumer on a scalable topic: it reads with
//! readers (no subscription, no cursor, no acknowledgements) and the
//! application keeps the positions, taking a [`Checkpoint`] when it has
//! processed what it received and starting from one after a restart, as a
//! stream processor (Flink) does. Without a group it reads every segment
//! of the DAG, active and sealed; with a group (`consumer_group`) it
//! registers as a CHECKPOINT member with the group's coordinator and reads
//! the segments it is assigned. There is no drain gating: a key's messages
//! in a child may arrive before its parent's last ones, and a checkpoint
//! names a position in every segment, so resuming loses nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strobe_model::MessageId;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::checkpoint::{Checkpoint, CheckpointKind};
use crate::client::Client;
use crate::consumer::rand_u64;
use crate::dag::DagWatch;
use crate::error::Result;
use crate::scalable_consumer::{Inbox, Mode, Positions, ScalableMessage, Segments};
use crate::scalable_stream::{Reading, Registered, Session, unregister};

/// Builds a [`ScalableCheckpointConsumer`].
#[derive(Debug)]
pub struct ScalableCheckpointConsumerBuilder {
    client: Client,
    topic: String,
    group: Option<String>,
    consumer_name: Option<String>,
    receiver_queue: u32,
    start: Checkpoint,
}

impl ScalableCheckpointConsumerBuilder {
    /// Share the segments with the group's other members (each reads the
    /// segments the coordinator assigns it; a segment is never shared).
    pub fn consumer_group(mut self, g: &str) -> Self {
        self.group = Some(g.to_owned());
        self
    }

    /// The name the group's coordinator knows this member by.
    pub fn consumer_name(mut self, n: &str) -> Self {
        self.consumer_name = Some(n.to_owned());
        self
    }

    pub fn receiver_queue_size(mut self, n: u32) -> Self {
        self.receiver_queue = n.max(1);
        self
    }

    /// Where to start (default: [`Checkpoint::latest`]).
    pub fn start_from(mut self, c: Checkpoint) -> Self {
        self.start = c;
        self
    }

    pub async fn create(self) -> Result<ScalableCheckpointConsumer> {
        let (tx, rx) = mpsc::channel(self.receiver_queue as usize);
        let acks = Arc::new(Mutex::new(std::collections::HashMap::new()));
        let name = self
            .consumer_name
            .unwrap_or_else(|| format!("checkpoint-{:08x}", rand_u64() as u32));
        let segments = Segments::new(
            self.client.clone(),
            String::new(),
            Some(name.clone()),
            self.receiver_queue,
            tx,
            acks.clone(),
        );
        let baseline = segments.baseline.clone();
        let watch = self.client.watch_scalable_topic(&self.topic, false).await?;
        let mut start = self.start;
        if start.kind == CheckpointKind::Latest {
            start.at_start = watch.current().segments.keys().copied().collect();
        }
        let (registered, task) = match self.group {
            Some(group) => {
                drop(watch);
                let session = Session {
                    client: self.client,
                    topic: self.topic,
                    subscription: group,
                    name,
                    segments,
                    reading: Reading::Readers(start.clone()),
                    epoch: 0,
                };
                let (registered, task) = session.start().await?;
                (Some(registered), task)
            }
            None => (
                None,
                tokio::spawn(follow_dag(segments, watch, start.clone())),
            ),
        };
        Ok(ScalableCheckpointConsumer {
            inbox: Inbox { rx, acks },
            received: BTreeMap::new(),
            start,
            baseline,
            registered,
            task,
        })
    }
}

impl Client {
    /// A checkpoint consumer of scalable topic `topic`.
    pub fn scalable_checkpoint_consumer(&self, topic: &str) -> ScalableCheckpointConsumerBuilder {
        ScalableCheckpointConsumerBuilder {
            client: self.clone(),
            topic: topic.to_owned(),
            group: None,
            consumer_name: None,
            receiver_queue: 1000,
            start: Checkpoint::latest(),
        }
    }
}

/// Without a group: a reader on every segment of the DAG, each opened once
/// (until it leaves the DAG or is read to its sealed end).
async fn follow_dag(mut segments: Segments, mut watch: DagWatch, start: Checkpoint) {
    loop {
        let dag = watch.current();
        segments.retain(|id| dag.segments.contains_key(&id));
        for s in dag.segments.values() {
            let mode = Mode::Read(start.start_of(s.id, &segments));
            if let Err(e) = segments.ensure(s.id, &s.topic, mode).await {
                warn!(segment = s.id, error = %e, "cannot read a segment");
            }
        }
        if let Err(e) = watch.changed().await {
            warn!(error = %e, "the checkpoint consumer's DAG watch ended");
            return;
        }
    }
}

/// A checkpoint consumer on a scalable topic.
#[derive(Debug)]
pub struct ScalableCheckpointConsumer {
    inbox: Inbox,
    /// The last message the application received from each segment.
    received: BTreeMap<u64, MessageId>,
    start: Checkpoint,
    baseline: Positions,
    registered: Option<Registered>,
    task: JoinHandle<()>,
}

impl Drop for ScalableCheckpointConsumer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScalableCheckpointConsumer {
    pub async fn recv(&mut self) -> Result<ScalableMessage> {
        let m = self.inbox.recv().await?;
        self.received.insert(m.segment_id, m.message.id);
        Ok(m)
    }

    pub async fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<ScalableMessage>> {
        let m = self.inbox.recv_timeout(timeout).await?;
        if let Some(m) = &m {
            self.received.insert(m.segment_id, m.message.id);
        }
        Ok(m)
    }

    /// Where everything received so far ends: a consumer started from it
    /// reads each segment after the last message this one returned.
    pub fn checkpoint(&self) -> Checkpoint {
        let mut positions = self.start.positions.clone();
        for (id, m) in self.baseline.lock().expect("positions lock").iter() {
            positions.entry(*id).or_insert(*m);
        }
        positions.extend(self.received.iter().map(|(id, m)| (*id, *m)));
        Checkpoint::of(CheckpointKind::Regular, positions)
    }

    /// Stops reading; a group member leaves its group at once.
    pub async fn close(self) -> Result<()> {
        self.task.abort();
        match &self.registered {
            Some(r) => unregister(r).await,
            None => Ok(()),
        }
    }
}
