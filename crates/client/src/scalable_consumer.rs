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
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::SubType;
use crate::client::Client;
use crate::consumer::{InitialPosition, Message};
use crate::dag::DagWatch;
use crate::error::{Error, Result};
use crate::txn::Transaction;

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
        let mut state = Segments::new(
            self.client,
            self.subscription,
            self.consumer_name,
            self.receiver_queue,
            tx,
            acks.clone(),
        );
        state.follow(&watch, Some(self.initial_position)).await?;
        let task = tokio::spawn(state.run(watch));
        Ok(ScalableQueueConsumer {
            inbox: Inbox { rx, acks },
            task,
        })
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
pub(crate) type Acks = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<SegmentAck>>>>;

/// An acknowledgement on its way to a segment's consumer.
pub(crate) enum SegmentAck {
    Plain(MessageId),
    /// In a transaction: answered once the broker holds it for the
    /// transaction.
    InTxn(Transaction, Box<Message>, oneshot::Sender<Result<()>>),
}

/// Messages from the segments' consumers, and the way back for acks.
#[derive(Debug)]
pub(crate) struct Inbox {
    pub(crate) rx: mpsc::Receiver<ScalableMessage>,
    pub(crate) acks: Acks,
}

impl Inbox {
    pub(crate) async fn recv(&mut self) -> Result<ScalableMessage> {
        self.rx.recv().await.ok_or(Error::Closed)
    }

    pub(crate) async fn recv_timeout(
        &mut self,
        timeout: std::time::Duration,
    ) -> Result<Option<ScalableMessage>> {
        match tokio::time::timeout(timeout, self.rx.recv()).await {
            Ok(Some(m)) => Ok(Some(m)),
            Ok(None) => Err(Error::Closed),
            Err(_) => Ok(None),
        }
    }

    pub(crate) fn ack(&self, m: &ScalableMessage) -> Result<()> {
        // A segment no longer read here (its assignment moved, or it
        // ended): the ack is dropped, as a closed consumer's are, and the
        // message comes again to whoever reads the segment.
        let acks = self.acks.lock().expect("acks lock");
        if let Some(tx) = acks.get(&m.segment_id) {
            let _ = tx.send(SegmentAck::Plain(m.message.id));
        }
        Ok(())
    }

    /// Acknowledges `m` in transaction `txn` (its segment joins the
    /// transaction's subscriptions): real if it commits, delivered again if
    /// it aborts.
    pub(crate) async fn ack_in(&self, txn: &Transaction, m: &ScalableMessage) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        {
            let acks = self.acks.lock().expect("acks lock");
            let tx = acks.get(&m.segment_id).ok_or(Error::Closed)?;
            tx.send(SegmentAck::InTxn(
                txn.clone(),
                Box::new(m.message.clone()),
                reply,
            ))
            .map_err(|_| Error::Closed)?;
        }
        answer.await.map_err(|_| Error::Closed)?
    }
}

/// A queue consumer on a scalable topic.
#[derive(Debug)]
pub struct ScalableQueueConsumer {
    inbox: Inbox,
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
        self.inbox.recv().await
    }

    /// The next message, or `None` after `timeout`.
    pub async fn recv_timeout(
        &mut self,
        timeout: std::time::Duration,
    ) -> Result<Option<ScalableMessage>> {
        self.inbox.recv_timeout(timeout).await
    }

    /// Acknowledges a message on its segment.
    pub fn ack(&self, m: &ScalableMessage) -> Result<()> {
        self.inbox.ack(m)
    }

    /// Acknowledges a message in transaction `txn`.
    pub async fn ack_in(&self, txn: &Transaction, m: &ScalableMessage) -> Result<()> {
        self.inbox.ack_in(txn, m).await
    }
}

/// How one segment is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A queue: Shared, a new subscription starting here.
    Shared(InitialPosition),
    /// A stream segment read alone: Exclusive.
    Alone(InitialPosition),
    /// A stream segment shared: Key_Shared with entry-bucket dispatch over
    /// these bucket boundaries.
    Buckets(InitialPosition, Vec<u32>),
    /// A checkpoint consumer's segment: a reader (no cursor), from here.
    Read(StartAt),
}

/// Where a segment reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartAt {
    Earliest,
    Latest,
    After(MessageId),
}

/// A message id per segment.
pub(crate) type Positions = Arc<Mutex<HashMap<u64, MessageId>>>;

struct Reader {
    mode: Mode,
    task: JoinHandle<()>,
}

/// The per-segment consumers and where their messages go.
pub(crate) struct Segments {
    pub(crate) client: Client,
    pub(crate) subscription: String,
    pub(crate) consumer_name: Option<String>,
    pub(crate) receiver_queue: u32,
    pub(crate) tx: mpsc::Sender<ScalableMessage>,
    pub(crate) acks: Acks,
    readers: HashMap<u64, Reader>,
    /// Segment readers only: the last message each passed on, where it
    /// reads again from if closed and opened again.
    pub(crate) forwarded: Positions,
    /// Segment readers only: where a reader started at Latest found the
    /// segment's end (a checkpoint taken before its first message resumes
    /// there, not at the segment's start).
    pub(crate) baseline: Positions,
    /// Segment readers only: the segments read to their sealed end.
    pub(crate) ended: Arc<Mutex<std::collections::HashSet<u64>>>,
}

impl Segments {
    pub(crate) fn new(
        client: Client,
        subscription: String,
        consumer_name: Option<String>,
        receiver_queue: u32,
        tx: mpsc::Sender<ScalableMessage>,
        acks: Acks,
    ) -> Segments {
        Segments {
            client,
            subscription,
            consumer_name,
            receiver_queue,
            tx,
            acks,
            readers: HashMap::new(),
            forwarded: Positions::default(),
            baseline: Positions::default(),
            ended: Arc::default(),
        }
    }

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
        self.retain(|id| dag.segments.contains_key(&id));
        for s in dag.segments.values() {
            let mode = Mode::Shared(first.unwrap_or(InitialPosition::Earliest));
            if self.readers.contains_key(&s.id) {
                continue;
            }
            self.ensure(s.id, &s.topic, mode).await?;
        }
        Ok(())
    }

    /// Stops reading the segments `keep` refuses (their consumers close;
    /// what was not acknowledged goes back to the subscription).
    pub(crate) fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        self.readers.retain(|id, r| {
            let k = keep(*id) && !r.task.is_finished();
            if !k {
                r.task.abort();
            }
            k
        });
        let readers: std::collections::HashSet<u64> = self.readers.keys().copied().collect();
        self.acks
            .lock()
            .expect("acks lock")
            .retain(|id, _| readers.contains(id));
    }

    /// Reads segment `id` (`topic`) in `mode`: a reader in another mode is
    /// closed first; a subscribe the broker refuses for a moment (the
    /// previous Exclusive owner not gone yet, overlapping ranges) is
    /// retried for up to 30 s.
    pub(crate) async fn ensure(&mut self, id: u64, topic: &str, mode: Mode) -> Result<()> {
        let reading = matches!(mode, Mode::Read(_));
        if reading && self.ended.lock().expect("ended lock").contains(&id) {
            // Read to its end: nothing will ever come.
            return Ok(());
        }
        if let Some(r) = self.readers.get(&id) {
            // A reader's start matters only when it opens.
            let same = r.mode == mode || (reading && matches!(r.mode, Mode::Read(_)));
            if same && !r.task.is_finished() {
                return Ok(());
            }
            r.task.abort();
            self.readers.remove(&id);
        }
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut consumer = loop {
            let mut b = match &mode {
                Mode::Read(at) => {
                    let r = self
                        .client
                        .reader(topic)
                        .receiver_queue_size(self.receiver_queue);
                    match at {
                        StartAt::Earliest => r.start_earliest(),
                        StartAt::Latest => r.start_latest(),
                        StartAt::After(mid) => r.start_at(*mid, false),
                    }
                    .into_consumer_builder()
                }
                _ => self
                    .client
                    .consumer(topic, &self.subscription)
                    .receiver_queue_size(self.receiver_queue),
            };
            b = match &mode {
                Mode::Shared(p) => b.sub_type(SubType::Shared).initial_position(*p),
                Mode::Alone(p) => b.sub_type(SubType::Exclusive).initial_position(*p),
                Mode::Buckets(p, splits) => b.entry_bucket_dispatch(splits).initial_position(*p),
                Mode::Read(_) => b,
            };
            if let Some(n) = &self.consumer_name {
                b = b.consumer_name(n);
            }
            if !topic.starts_with("segment://") {
                // A legacy segment (a v4 topic, PIP-475).
                b = b.property(crate::dag::V5_MANAGED, "true");
            }
            match b.subscribe().await {
                Ok(c) => break c,
                Err(e) if tokio::time::Instant::now() < deadline && passing(&e) => {
                    debug!(segment = id, error = %e, "segment busy; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e),
            }
        };
        debug!(segment = id, ?mode, "segment consumer attached");
        let (ack_tx, mut ack_rx) = mpsc::unbounded_channel::<SegmentAck>();
        self.acks.lock().expect("acks lock").insert(id, ack_tx);
        if mode == Mode::Read(StartAt::Latest)
            && !self
                .baseline
                .lock()
                .expect("positions lock")
                .contains_key(&id)
        {
            // A topic with nothing in it answers an id before any entry.
            if let Ok(last) = consumer.last_message_id().await
                && last.position.ledger_id < i64::MAX as u64
                && last.position.entry_id < i64::MAX as u64
            {
                self.baseline
                    .lock()
                    .expect("positions lock")
                    .insert(id, last);
            }
        }
        let tx = self.tx.clone();
        let forwarded = reading.then(|| self.forwarded.clone());
        let ended = self.ended.clone();
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    m = consumer.recv() => match m {
                        Ok(message) => {
                            let mid = message.id;
                            if tx.send(ScalableMessage { segment_id: id, message }).await.is_err() {
                                return;
                            }
                            if let Some(f) = &forwarded {
                                f.lock().expect("positions lock").insert(id, mid);
                            }
                        }
                        Err(e) => {
                            debug!(segment = id, error = %e, "segment consumer ended");
                            return;
                        }
                    },
                    a = ack_rx.recv() => match a {
                        Some(SegmentAck::Plain(mid)) => {
                            let _ = consumer.ack_id(&mid);
                        }
                        Some(SegmentAck::InTxn(txn, m, reply)) => {
                            let _ = reply.send(txn.ack(&consumer, &m, false).await);
                        }
                        None => return,
                    },
                    _ = tick.tick(), if reading => {
                        // A reader has no cursor for the broker to call
                        // drained: it learns the end from the broker's
                        // REACHED_END_OF_TOPIC once it has read everything.
                        if consumer.reached_end_of_topic() {
                            debug!(segment = id, "segment read to its end");
                            ended.lock().expect("ended lock").insert(id);
                            return;
                        }
                    }
                }
            }
        });
        self.readers.insert(id, Reader { mode, task });
        Ok(())
    }
}

/// Whether a subscribe refusal passes once the previous reader is gone.
fn passing(e: &Error) -> bool {
    matches!(
        e,
        Error::Server { code, .. } if matches!(
            code,
            strobe_wire::proto::ServerError::ConsumerBusy
                | strobe_wire::proto::ServerError::ConsumerAssignError
        )
    ) || e.is_retriable()
}
