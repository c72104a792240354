//! Pulsar 5's queue consumer on a scalable topic: no controller, no
//! assignment. It follows the topic's DAG and holds one Shared v4 consumer
//! per segment, active or sealed (a sealed one until its backlog is read
//! and the segment leaves the DAG), so each message goes to one of the
//! subscription's consumers, as Pulsar's `QueueConsumer` does. Order is not
//! promised (it is a queue); nothing is lost across a split or merge: a
//! segment that appears after the subscription did is read from its start.

use std::collections::HashMap;
use std::sync::Arc;

use std::sync::Mutex;
use strobe_model::MessageId;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::SubType;
use crate::client::Client;
use crate::consumer::{InitialPosition, Message};
use crate::dag::DagWatch;
use crate::error::{Error, Result};

/// A message of a scalable topic: which segment it came from, and itself.
#[derive(Debug, Clone)]
pub struct ScalableMessage {
    pub segment_id: u64,
    pub message: Message,
}

/// Builds a [`ScalableQueueConsumer`].
#[derive(Debug)]
pub struct ScalableQueueConsumerBuilder {
    client: Client,
    topic: String,
    subscription: String,
    consumer_name: Option<String>,
    receiver_queue: u32,
    initial_position: InitialPosition,
}

impl ScalableQueueConsumerBuilder {
    pub fn consumer_name(mut self, n: &str) -> Self {
        self.consumer_name = Some(n.to_owned());
        self
    }

    /// Permits of each segment's consumer.
    pub fn receiver_queue_size(mut self, n: u32) -> Self {
        self.receiver_queue = n.max(1);
        self
    }

    /// Where a new subscription starts on the segments the topic has when
    /// it subscribes (default Latest, as Pulsar's); segments made later are
    /// read from their start.
    pub fn initial_position(mut self, p: InitialPosition) -> Self {
        self.initial_position = p;
        self
    }

    pub async fn subscribe(self) -> Result<ScalableQueueConsumer> {
        let watch = self.client.watch_scalable_topic(&self.topic, false).await?;
        let (tx, rx) = mpsc::channel(self.receiver_queue as usize);
        let acks = Arc::new(Mutex::new(HashMap::new()));
        let mut state = Segments {
            client: self.client,
            subscription: self.subscription,
            consumer_name: self.consumer_name,
            receiver_queue: self.receiver_queue,
            tx,
            acks: acks.clone(),
            tasks: HashMap::new(),
        };
        state.follow(&watch, Some(self.initial_position)).await?;
        let task = tokio::spawn(state.run(watch));
        Ok(ScalableQueueConsumer { rx, acks, task })
    }
}

impl Client {
    /// A queue consumer on scalable topic `topic`: Shared on every segment.
    pub fn scalable_queue_consumer(
        &self,
        topic: &str,
        subscription: &str,
    ) -> ScalableQueueConsumerBuilder {
        ScalableQueueConsumerBuilder {
            client: self.clone(),
            topic: topic.to_owned(),
            subscription: subscription.to_owned(),
            consumer_name: None,
            receiver_queue: 1000,
            initial_position: InitialPosition::Latest,
        }
    }
}

/// Acknowledgements on their way to each segment's consumer.
type Acks = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<MessageId>>>>;

/// A queue consumer on a scalable topic.
#[derive(Debug)]
pub struct ScalableQueueConsumer {
    rx: mpsc::Receiver<ScalableMessage>,
    acks: Acks,
    task: JoinHandle<()>,
}

impl Drop for ScalableQueueConsumer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScalableQueueConsumer {
    /// The next message from any segment.
    pub async fn recv(&mut self) -> Result<ScalableMessage> {
        self.rx.recv().await.ok_or(Error::Closed)
    }

    /// The next message, or `None` after `timeout`.
    pub async fn recv_timeout(
        &mut self,
        timeout: std::time::Duration,
    ) -> Result<Option<ScalableMessage>> {
        match tokio::time::timeout(timeout, self.rx.recv()).await {
            Ok(Some(m)) => Ok(Some(m)),
            Ok(None) => Err(Error::Closed),
            Err(_) => Ok(None),
        }
    }

    /// Acknowledges a message on its segment.
    pub fn ack(&self, m: &ScalableMessage) -> Result<()> {
        let acks = self.acks.lock().expect("acks lock");
        let tx = acks.get(&m.segment_id).ok_or(Error::Closed)?;
        tx.send(m.message.id).map_err(|_| Error::Closed)
    }
}

/// The per-segment consumers and where their messages go.
struct Segments {
    client: Client,
    subscription: String,
    consumer_name: Option<String>,
    receiver_queue: u32,
    tx: mpsc::Sender<ScalableMessage>,
    acks: Acks,
    tasks: HashMap<u64, JoinHandle<()>>,
}

impl Segments {
    async fn run(mut self, mut watch: DagWatch) {
        loop {
            if let Err(e) = watch.changed().await {
                warn!(error = %e, "the queue consumer's DAG watch ended");
                return;
            }
            if let Err(e) = self.follow(&watch, None).await {
                warn!(error = %e, "a segment consumer could not subscribe");
            }
        }
    }

    /// Subscribes to the DAG's segments it does not read yet (at `first`
    /// for those there at the start, else from their start) and drops the
    /// segments that left it.
    async fn follow(&mut self, watch: &DagWatch, first: Option<InitialPosition>) -> Result<()> {
        let dag = watch.current();
        self.tasks.retain(|id, t| {
            let keep = dag.segments.contains_key(id) && !t.is_finished();
            if !keep {
                t.abort();
            }
            keep
        });
        self.acks
            .lock()
            .expect("acks lock")
            .retain(|id, _| dag.segments.contains_key(id));
        for s in dag.segments.values() {
            if self.tasks.contains_key(&s.id) {
                continue;
            }
            let mut b = self
                .client
                .consumer(&s.topic, &self.subscription)
                .sub_type(SubType::Shared)
                .receiver_queue_size(self.receiver_queue)
                .initial_position(first.unwrap_or(InitialPosition::Earliest));
            if let Some(n) = &self.consumer_name {
                b = b.consumer_name(n);
            }
            let mut consumer = b.subscribe().await?;
            debug!(segment = s.id, "queue consumer attached");
            let (ack_tx, mut ack_rx) = mpsc::unbounded_channel::<MessageId>();
            self.acks.lock().expect("acks lock").insert(s.id, ack_tx);
            let (tx, id) = (self.tx.clone(), s.id);
            self.tasks.insert(
                s.id,
                tokio::spawn(async move {
                    loop {
                        tokio::select! {
                            m = consumer.recv() => match m {
                                Ok(message) => {
                                    if tx.send(ScalableMessage { segment_id: id, message }).await.is_err() {
                                        return;
                                    }
                                }
                                Err(e) => {
                                    debug!(segment = id, error = %e, "segment consumer ended");
                                    return;
                                }
                            },
                            a = ack_rx.recv() => match a {
                                Some(mid) => {
                                    let _ = consumer.ack_id(&mid);
                                }
                                None => return,
                            },
                        }
                    }
                }),
            );
        }
        Ok(())
    }
}
