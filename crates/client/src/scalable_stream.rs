//! Pulsar 5's stream consumer on a scalable topic: it registers by name
//! with its subscription's coordinator (SCALABLE_TOPIC_SUBSCRIBE, on the
//! broker the DAG names as the controller's) and reads the segments it is
//! assigned: alone (Exclusive) or, when consumers outnumber segments,
//! shared (Key_Shared with PIP-486 entry-bucket dispatch, the segment's
//! full bucket list). Each assignment update replaces the readers: a
//! segment no longer assigned is closed, one whose mode changed is read
//! again in the new mode once the broker lets the previous reader go. A
//! child segment is assigned only after the subscription has acknowledged
//! everything of its parents, so a key's messages arrive in order as long
//! as the application acknowledges what it processed. `close` leaves the
//! subscription at once (SCALABLE_TOPIC_UNSUBSCRIBE); a consumer whose
//! connection drops keeps its place for the broker's grace period and
//! re-attaches by name.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strobe_wire::Command;
use strobe_wire::proto::{
    self, CommandScalableTopicSubscribe, CommandScalableTopicUnsubscribe, ScalableConsumerType,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::checkpoint::Checkpoint;
use crate::client::Client;
use crate::connection::{Connection, server_error, socket_addr};
use crate::consumer::InitialPosition;
use crate::error::{Error, Result};
use crate::scalable_consumer::{Inbox, Mode, ScalableMessage, Segments};
use crate::util::Backoff;

/// Builds a [`ScalableStreamConsumer`].
#[derive(Debug)]
pub struct ScalableStreamConsumerBuilder {
    client: Client,
    topic: String,
    subscription: String,
    consumer_name: String,
    receiver_queue: u32,
    initial_position: InitialPosition,
}

impl ScalableStreamConsumerBuilder {
    /// The name the coordinator knows this consumer by (it re-attaches by it).
    pub fn consumer_name(mut self, n: &str) -> Self {
        self.consumer_name = n.to_owned();
        self
    }

    pub fn receiver_queue_size(mut self, n: u32) -> Self {
        self.receiver_queue = n.max(1);
        self
    }

    /// Where a new subscription starts on the segments of its first
    /// assignment (default Latest); later segments are read from their start.
    pub fn initial_position(mut self, p: InitialPosition) -> Self {
        self.initial_position = p;
        self
    }

    pub async fn subscribe(self) -> Result<ScalableStreamConsumer> {
        let (tx, rx) = mpsc::channel(self.receiver_queue as usize);
        let acks = Arc::new(Mutex::new(HashMap::new()));
        let segments = Segments::new(
            self.client.clone(),
            self.subscription.clone(),
            Some(self.consumer_name.clone()),
            self.receiver_queue,
            tx,
            acks.clone(),
        );
        let session = Session {
            client: self.client,
            topic: self.topic,
            subscription: self.subscription,
            name: self.consumer_name,
            segments,
            reading: Reading::Cursors(Some(self.initial_position)),
            epoch: 0,
        };
        let (registered, task) = session.start().await?;
        Ok(ScalableStreamConsumer {
            inbox: Inbox { rx, acks },
            registered,
            task,
        })
    }
}

impl Client {
    /// A stream consumer named `consumer_name` of `subscription` on
    /// scalable topic `topic`.
    pub fn scalable_stream_consumer(
        &self,
        topic: &str,
        subscription: &str,
        consumer_name: &str,
    ) -> ScalableStreamConsumerBuilder {
        ScalableStreamConsumerBuilder {
            client: self.clone(),
            topic: topic.to_owned(),
            subscription: subscription.to_owned(),
            consumer_name: consumer_name.to_owned(),
            receiver_queue: 1000,
            initial_position: InitialPosition::Latest,
        }
    }
}

/// Where this consumer is registered: the controller's connection and its id there.
pub(crate) type Registered = Arc<Mutex<Option<(Arc<Connection>, u64)>>>;

/// A stream consumer on a scalable topic.
#[derive(Debug)]
pub struct ScalableStreamConsumer {
    inbox: Inbox,
    registered: Registered,
    task: JoinHandle<()>,
}

impl Drop for ScalableStreamConsumer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScalableStreamConsumer {
    pub async fn recv(&mut self) -> Result<ScalableMessage> {
        self.inbox.recv().await
    }

    pub async fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<ScalableMessage>> {
        self.inbox.recv_timeout(timeout).await
    }

    /// Acknowledges a message on its segment.
    pub fn ack(&self, m: &ScalableMessage) -> Result<()> {
        self.inbox.ack(m)
    }

    /// Acknowledges a message in transaction `txn`: real if it commits,
    /// delivered again if it aborts.
    pub async fn ack_in(&self, txn: &crate::Transaction, m: &ScalableMessage) -> Result<()> {
        self.inbox.ack_in(txn, m).await
    }

    /// Leaves the subscription now: its segments go to the others at once.
    pub async fn close(self) -> Result<()> {
        self.task.abort();
        unregister(&self.registered).await
    }
}

/// Leaves the coordinator's subscription (SCALABLE_TOPIC_UNSUBSCRIBE).
pub(crate) async fn unregister(registered: &Registered) -> Result<()> {
    let registered = registered.lock().expect("registration lock").take();
    if let Some((conn, consumer_id)) = registered {
        conn.unregister_watcher(consumer_id);
        let rid = conn.next_request_id();
        match conn
            .request(
                rid,
                CommandScalableTopicUnsubscribe {
                    request_id: rid,
                    consumer_id,
                },
            )
            .await?
        {
            Command::Success(_) => {}
            Command::Error(e) => return Err(server_error(e.error, e.message)),
            other => return Err(Error::Unexpected(format!("{:?}", other.kind()))),
        }
    }
    Ok(())
}

/// How a member reads its segments.
pub(crate) enum Reading {
    /// A stream consumer: the subscription's cursors, a new subscription
    /// starting here on the first assignment's segments.
    Cursors(Option<InitialPosition>),
    /// A checkpoint group's member: readers, from the application's
    /// checkpoint (segments it does not name, from their start).
    Readers(Checkpoint),
}

/// A member of a stream or checkpoint subscription, registered with its
/// coordinator.
pub(crate) struct Session {
    pub(crate) client: Client,
    pub(crate) topic: String,
    pub(crate) subscription: String,
    pub(crate) name: String,
    pub(crate) segments: Segments,
    pub(crate) reading: Reading,
    pub(crate) epoch: u64,
}

impl Session {
    /// Registers and follows the coordinator's assignments in a task.
    pub(crate) async fn start(mut self) -> Result<(Registered, JoinHandle<()>)> {
        let (conn, consumer_id, updates) = self.register().await?;
        let registered = Arc::new(Mutex::new(Some((conn, consumer_id))));
        let task = tokio::spawn(self.run(updates, registered.clone()));
        Ok((registered, task))
    }

    /// Registers with the coordinator (on the controller's broker) and
    /// applies the first assignment.
    async fn register(
        &mut self,
    ) -> Result<(Arc<Connection>, u64, mpsc::UnboundedReceiver<Command>)> {
        let dag = self
            .client
            .watch_scalable_topic(&self.topic, false)
            .await?
            .current();
        let conn = match &dag.controller_url {
            Some(url) => {
                self.client
                    .inner
                    .pool
                    .get(&socket_addr(url)?, &self.client.inner.opts)
                    .await?
            }
            None => self.client.service_connection().await?,
        };
        let consumer_id = self.client.next_id();
        let (tx, updates) = mpsc::unbounded_channel();
        conn.register_watcher(consumer_id, tx);
        let rid = conn.next_request_id();
        let reply = conn
            .request(
                rid,
                CommandScalableTopicSubscribe {
                    request_id: rid,
                    topic: dag.topic.clone(),
                    subscription: self.subscription.clone(),
                    consumer_name: self.name.clone(),
                    consumer_id,
                    consumer_type: match self.reading {
                        Reading::Cursors(_) => ScalableConsumerType::Stream,
                        Reading::Readers(_) => ScalableConsumerType::Checkpoint,
                    } as i32,
                },
            )
            .await;
        let assignment = match reply {
            Ok(Command::ScalableTopicSubscribeResponse(r)) => match (r.error, r.assignment) {
                (Some(code), _) => Err(server_error(code, r.message.unwrap_or_default())),
                (None, Some(a)) => Ok(a),
                (None, None) => Err(Error::Unexpected(
                    "a subscribe response without an assignment".into(),
                )),
            },
            Ok(other) => Err(Error::Unexpected(format!("{:?}", other.kind()))),
            Err(e) => Err(e),
        };
        let assignment = match assignment {
            Ok(a) => a,
            Err(e) => {
                conn.unregister_watcher(consumer_id);
                return Err(e);
            }
        };
        self.epoch = 0;
        self.apply(assignment).await;
        Ok((conn, consumer_id, updates))
    }

    /// Reads what `a` assigns, in the modes it says, and nothing else.
    async fn apply(&mut self, a: proto::ScalableConsumerAssignment) {
        if a.layout_epoch < self.epoch {
            debug!(
                epoch = a.layout_epoch,
                current = self.epoch,
                "an older assignment, ignored"
            );
            return;
        }
        self.epoch = a.layout_epoch;
        let ids: BTreeSet<u64> = a.segments.iter().map(|s| s.segment_id).collect();
        self.segments.retain(|id| ids.contains(&id));
        let position = match &mut self.reading {
            Reading::Cursors(first) => first.take().unwrap_or(InitialPosition::Earliest),
            Reading::Readers(_) => InitialPosition::Earliest,
        };
        for s in a.segments {
            let mode = if let Reading::Readers(cp) = &self.reading {
                Mode::Read(cp.start_of(s.segment_id, &self.segments))
            } else if s.bucket_ranges.is_empty() {
                Mode::Alone(position)
            } else {
                // The boundaries are the starts of every bucket but the first.
                let splits = s
                    .bucket_ranges
                    .iter()
                    .skip(1)
                    .map(|r| r.start as u32)
                    .collect();
                Mode::Buckets(position, splits)
            };
            if let Err(e) = self
                .segments
                .ensure(s.segment_id, &s.segment_topic, mode)
                .await
            {
                warn!(segment = s.segment_id, error = %e, "cannot read an assigned segment");
            }
        }
    }

    async fn run(mut self, mut updates: mpsc::UnboundedReceiver<Command>, registered: Registered) {
        let mut backoff = Backoff::new();
        loop {
            match updates.recv().await {
                Some(Command::ScalableTopicAssignmentUpdate(u)) => self.apply(u.assignment).await,
                Some(_) => {}
                None => {
                    // The controller's connection is gone: register again
                    // (by name, within the grace period, it re-attaches).
                    loop {
                        tokio::time::sleep(backoff.next().min(Duration::from_secs(5))).await;
                        match self.register().await {
                            Ok((conn, id, u)) => {
                                *registered.lock().expect("registration lock") = Some((conn, id));
                                updates = u;
                                backoff = Backoff::new();
                                break;
                            }
                            Err(e) => warn!(error = %e, "cannot register again; retrying"),
                        }
                    }
                }
            }
        }
    }
}
