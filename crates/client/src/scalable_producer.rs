//! Pulsar 5's V5 producer on a scalable topic: one v4 producer per active
//! segment (named `<name>-seg-<id>`, as the Java client names them), a
//! keyed message routed to the segment owning the high 16 bits of its
//! key's Murmur3 hash, a keyless one round robin over the active segments.
//!
//! Per-key order across a split or merge: one task routes every message in
//! send order. When a segment's producer reports its topic terminated, the
//! task stops routing, collects that message and every later one in flight
//! on that segment (the broker refused them all: a topic is terminated at
//! a position), waits for the layout that seals the segment (pushed by the
//! broker, no polling), and sends them to the children before anything
//! sent after them. A layout that seals a segment with messages in flight
//! is applied only once those settled, for the same reason. Pulsar's Java
//! producer retries each send on its own after 100-500 ms of backoff,
//! which neither keeps a key's order nor bounds the pause.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use strobe_model::MessageId;
use strobe_wire::proto::ServerError;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::client::Client;
use crate::consumer::SeekTo;
use crate::dag::{Dag, DagWatch};
use crate::error::{Error, Result};
use crate::message::{BatchingType, ProducerMessage};
use crate::producer::{Producer, SendFuture};
use crate::txn::Transaction;

/// Where a message of a scalable topic was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalableMessageId {
    pub segment_id: u64,
    pub id: MessageId,
}

/// Builds a [`ScalableProducer`].
#[derive(Debug)]
pub struct ScalableProducerBuilder {
    client: Client,
    topic: String,
    name: Option<String>,
    batching: Option<(Duration, u32, usize)>,
    entry_buckets: bool,
    max_pending: usize,
    create_if_missing: bool,
    layout_wait: Duration,
}

impl ScalableProducerBuilder {
    /// Batches by PIP-486 entry bucket (one open batch per bucket of the
    /// segment, as Pulsar's V5 producer does), so a Key_Shared consumer
    /// with entry-bucket dispatch routes whole entries. Not with broker-side
    /// deduplication: each bucket's batch carries its own run of sequence
    /// ids, interleaved with the others', and the broker keeps one highest
    /// sequence id per producer, so it would drop batches as duplicates.
    pub fn entry_bucket_batching(mut self, on: bool) -> Self {
        self.entry_buckets = on;
        self
    }

    /// The producer's name; its segment producers are `<name>-seg-<id>`
    /// (a fixed name is what broker-side deduplication keys on).
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// Batching of each segment producer (default: 1 ms, 1,000 messages, 128 KiB).
    pub fn batching(mut self, delay: Duration, max_messages: u32, max_bytes: usize) -> Self {
        self.batching = Some((delay, max_messages, max_bytes));
        self
    }

    pub fn no_batching(mut self) -> Self {
        self.batching = None;
        self
    }

    /// Messages sent and not yet stored, at most (default 10,000).
    pub fn max_pending_messages(mut self, n: usize) -> Self {
        self.max_pending = n.max(1);
        self
    }

    /// Whether the lookup may create a missing topic (default true).
    pub fn create_if_missing(mut self, b: bool) -> Self {
        self.create_if_missing = b;
        self
    }

    /// How long a send waits for the layout that replaces a terminated
    /// segment before it fails (default 30 s).
    pub fn layout_wait(mut self, d: Duration) -> Self {
        self.layout_wait = d;
        self
    }

    pub async fn create(self) -> Result<ScalableProducer> {
        let watch = self
            .client
            .watch_scalable_topic(&self.topic, self.create_if_missing)
            .await?;
        let topic = watch.current().topic.clone();
        let name = match self.name {
            Some(n) => n,
            None => format!("v5-{}", self.client.next_id()),
        };
        let (tx, rx) = mpsc::channel(self.max_pending);
        let router = Router {
            client: self.client,
            name,
            batching: self.batching,
            entry_buckets: self.entry_buckets,
            layout: watch.current(),
            dag: watch,
            producers: HashMap::new(),
            rr: 0,
            layout_wait: self.layout_wait,
            sent: 0,
            last_stored: HashMap::new(),
            txns: HashMap::new(),
        };
        let task = tokio::spawn(router.run(rx, self.max_pending));
        Ok(ScalableProducer { tx, topic, task })
    }
}

impl Client {
    /// A V5 producer on scalable topic `topic` (`topic://t/ns/x`, or a
    /// `persistent://` name of the same topic).
    pub fn scalable_producer(&self, topic: &str) -> ScalableProducerBuilder {
        ScalableProducerBuilder {
            client: self.clone(),
            topic: topic.to_owned(),
            name: None,
            batching: Some((Duration::from_millis(1), 1000, 128 * 1024)),
            entry_buckets: false,
            max_pending: 10_000,
            create_if_missing: true,
            layout_wait: Duration::from_secs(30),
        }
    }
}

/// A producer on a scalable topic; `send` takes `&self`.
#[derive(Debug)]
pub struct ScalableProducer {
    tx: mpsc::Sender<Request>,
    topic: String,
    task: JoinHandle<()>,
}

impl Drop for ScalableProducer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

enum Request {
    Send(ProducerMessage, oneshot::Sender<Result<ScalableMessageId>>),
    /// A send in a transaction (the message carries its id).
    SendIn(
        Transaction,
        ProducerMessage,
        oneshot::Sender<Result<ScalableMessageId>>,
    ),
    Flush(oneshot::Sender<()>),
}

/// The receipt of one message sent with [`ScalableProducer::send`].
#[derive(Debug)]
pub struct ScalableSendFuture(oneshot::Receiver<Result<ScalableMessageId>>);

impl std::future::Future for ScalableSendFuture {
    type Output = Result<ScalableMessageId>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Closed)))
    }
}

impl ScalableProducer {
    /// The `topic://` name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Queues a message (waiting for room among the pending ones); the
    /// future resolves once it is stored.
    pub async fn send(&self, msg: impl Into<ProducerMessage>) -> Result<ScalableSendFuture> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Send(msg.into(), tx))
            .await
            .map_err(|_| Error::Closed)?;
        Ok(ScalableSendFuture(rx))
    }

    /// Sends `msg` in transaction `txn`: stored now, visible once it
    /// commits. Each segment it reaches becomes one of the transaction's
    /// partitions, so a message sent again to a child after a split (its
    /// parent sealed meanwhile) still commits or aborts with the rest.
    pub async fn send_in(
        &self,
        txn: &Transaction,
        msg: impl Into<ProducerMessage>,
    ) -> Result<ScalableSendFuture> {
        let mut msg = msg.into();
        msg.txn = Some(txn.id());
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::SendIn(txn.clone(), msg, tx))
            .await
            .map_err(|_| Error::Closed)?;
        Ok(ScalableSendFuture(rx))
    }

    /// Sends and waits for the receipt.
    pub async fn send_and_wait(
        &self,
        msg: impl Into<ProducerMessage>,
    ) -> Result<ScalableMessageId> {
        self.send(msg).await?.await
    }

    /// Waits until every message sent before has its receipt (or its error).
    pub async fn flush(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Flush(tx))
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)
    }

    /// Flushes, then closes every segment producer.
    pub async fn close(self) -> Result<()> {
        self.flush().await?;
        Ok(())
    }
}

/// A message sent to a segment and not yet stored.
struct InFlight {
    segment: u64,
    msg: ProducerMessage,
    receipt: SendFuture,
    reply: oneshot::Sender<Result<ScalableMessageId>>,
}

/// Whether `e` means the segment takes no more messages (it was sealed).
fn is_sealed(e: &Error) -> bool {
    match e {
        Error::Server { code, message } => {
            *code == ServerError::TopicTerminatedError
                || (*code == ServerError::TopicNotFound && message.contains("segment"))
        }
        _ => false,
    }
}

struct Router {
    client: Client,
    name: String,
    batching: Option<(Duration, u32, usize)>,
    entry_buckets: bool,
    dag: DagWatch,
    layout: Arc<Dag>,
    producers: HashMap<u64, Producer>,
    rr: usize,
    layout_wait: Duration,
    /// Messages taken so far (each is tagged with its number, see [`TAG`]).
    sent: u64,
    /// Per segment, where its last acknowledged message was stored: a
    /// message in doubt there, if stored, is after it.
    last_stored: HashMap<u64, MessageId>,
    /// The transactions of messages sent with [`ScalableProducer::send_in`],
    /// to add a segment to one when a message of it goes there.
    txns: HashMap<(u64, u64), Transaction>,
}

/// Transactions the router remembers before it forgets those with no
/// message in flight.
const MAX_TXNS: usize = 1024;

/// A message not yet handed to a segment producer.
type Queued = (ProducerMessage, oneshot::Sender<Result<ScalableMessageId>>);

/// What became of routing one message.
enum Routed {
    Sent(InFlight),
    /// Its segment is sealed: it waits for the layout that replaces it.
    Sealed(u64, Queued),
    /// Answered with an error.
    Failed,
}

impl Router {
    /// Keeps `txn` for its messages; past [`MAX_TXNS`], forgets those with
    /// no message in flight (a later send brings its transaction again).
    fn remember(&mut self, txn: Transaction, in_flight: &VecDeque<InFlight>) {
        if self.txns.len() >= MAX_TXNS {
            let live: std::collections::HashSet<(u64, u64)> =
                in_flight.iter().filter_map(|f| f.msg.txn).collect();
            self.txns.retain(|id, _| live.contains(id));
        }
        self.txns.insert(txn.id(), txn);
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Request>, max_in_flight: usize) {
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
        let mut open = true;
        loop {
            if in_flight.is_empty() {
                for f in flushes.drain(..) {
                    let _ = f.send(());
                }
                if !open {
                    return;
                }
            }
            tokio::select! {
                biased;
                done = async {
                    match in_flight.front_mut() {
                        Some(f) => (&mut f.receipt).await,
                        None => std::future::pending().await,
                    }
                } => {
                    let f = in_flight.pop_front().expect("a front");
                    match done {
                        Ok(id) => {
                            self.stored_at(f.segment, id);
                            let _ = f.reply.send(Ok(ScalableMessageId { segment_id: f.segment, id }));
                        }
                        Err(e) if is_sealed(&e) => {
                            // It and every later message on its segment were
                            // refused: they go first, in order, once the
                            // layout that seals the segment is here.
                            let segment = f.segment;
                            let mut refused = vec![(f.msg, f.reply)];
                            refused.extend(self.settle(&mut in_flight, segment).await);
                            let refused = self.confirm(segment, refused).await;
                            let mut queue: VecDeque<Queued> = refused.into();
                            self.producers.remove(&segment);
                            if self.await_sealed(segment, &mut in_flight, &mut queue).await {
                                self.send_all(queue, &mut in_flight).await;
                            } else {
                                fail(queue, &e);
                            }
                        }
                        Err(e) => {
                            let _ = f.reply.send(Err(e));
                        }
                    }
                }
                changed = self.dag.changed() => match changed {
                    Ok(dag) => {
                        let refused = self.switch(dag, &mut in_flight).await;
                        self.send_all(refused, &mut in_flight).await;
                    }
                    Err(e) => {
                        warn!(error = %e, "the DAG watch ended");
                        fail(in_flight.drain(..).map(|f| (f.msg, f.reply)), &e);
                        return;
                    }
                },
                req = rx.recv(), if open && in_flight.len() < max_in_flight => match req {
                    Some(Request::SendIn(txn, mut msg, reply)) => {
                        self.remember(txn, &in_flight);
                        self.sent += 1;
                        msg.properties.push((TAG.to_owned(), format!("{}:{}", self.sent, wall_ms())));
                        self.send_all(VecDeque::from([(msg, reply)]), &mut in_flight).await;
                    }
                    Some(Request::Send(mut msg, reply)) => {
                        self.sent += 1;
                        msg.properties.push((TAG.to_owned(), format!("{}:{}", self.sent, wall_ms())));
                        self.send_all(VecDeque::from([(msg, reply)]), &mut in_flight).await;
                    }
                    Some(Request::Flush(tx)) => flushes.push(tx),
                    None => open = false,
                },
            }
        }
    }

    /// Notes where `segment` stored a message (a duplicate's receipt,
    /// -1:-1, says nothing).
    fn stored_at(&mut self, segment: u64, id: MessageId) {
        if id.position.ledger_id != u64::MAX {
            self.last_stored.insert(segment, id);
        }
    }

    /// Waits for every message in flight on `segment`: those stored are
    /// answered, those refused as sealed are returned in order.
    async fn settle(&mut self, in_flight: &mut VecDeque<InFlight>, segment: u64) -> Vec<Queued> {
        let mut keep = VecDeque::with_capacity(in_flight.len());
        let mut refused = Vec::new();
        for mut f in in_flight.drain(..) {
            if f.segment != segment {
                keep.push_back(f);
                continue;
            }
            match (&mut f.receipt).await {
                Ok(id) => {
                    self.stored_at(segment, id);
                    let _ = f.reply.send(Ok(ScalableMessageId {
                        segment_id: segment,
                        id,
                    }));
                }
                Err(e) if is_sealed(&e) => refused.push((f.msg, f.reply)),
                Err(e) => {
                    let _ = f.reply.send(Err(e));
                }
            }
        }
        *in_flight = keep;
        refused
    }

    /// Of `refused` (refused by sealed `segment`), those not stored there.
    /// A refusal is certain unless the segment's producer lost a connection
    /// with messages pending: those may have been stored without a receipt
    /// before the segment was sealed, and sending them to the children
    /// would store them twice. Then the segment's tail is read from the
    /// last message acknowledged there (the pending ones follow it; only
    /// the in-flight window of the segment's producers is read, not its
    /// history), or without one from the oldest refused one's send time,
    /// and a message found there (by its tag) is answered with where it
    /// was stored.
    async fn confirm(&mut self, segment: u64, refused: Vec<Queued>) -> Vec<Queued> {
        let Some(p) = self.producers.get(&segment) else {
            return refused;
        };
        if refused.is_empty() || !p.in_doubt() {
            return refused;
        }
        let (topic, name) = (p.topic().to_owned(), p.name());
        let from = match self.last_stored.get(&segment) {
            Some(id) => SeekTo::Id(*id),
            // A publish time is stamped after the tag, by the same clock;
            // the margin is for that clock stepping back.
            None => SeekTo::PublishTime(
                refused
                    .iter()
                    .filter_map(|(m, _)| tag_of(m).map(|(_, ms)| ms))
                    .min()
                    .unwrap_or(0)
                    .saturating_sub(10_000),
            ),
        };
        let stored = match self.tags_in(&topic, &name, from).await {
            Ok(t) => t,
            Err(e) => {
                warn!(segment, error = %e, "cannot check a sealed segment for messages in doubt; sending them on");
                HashMap::new()
            }
        };
        let mut left = Vec::with_capacity(refused.len());
        for (m, reply) in refused {
            match tag_of(&m).and_then(|(n, _)| stored.get(&n)) {
                Some(id) => {
                    let _ = reply.send(Ok(ScalableMessageId {
                        segment_id: segment,
                        id: *id,
                    }));
                }
                // A message of a transaction still open is invisible to a
                // reader, stored or not: sent again it could be stored
                // twice in the transaction. Its send fails instead, and
                // the application aborts (as after any failed send in a
                // transaction).
                None if m.txn.is_some() => {
                    let _ = reply.send(Err(Error::InDoubt(format!(
                        "a transactional message on sealed segment {segment} lost its receipt; abort the transaction"
                    ))));
                }
                None => left.push((m, reply)),
            }
        }
        left
    }

    /// The tags of the messages producer `name` stored on `topic` from
    /// `from` on, with where each was stored.
    /// A failed read is tried again (a partial one would send stored
    /// messages again) until the layout wait is over.
    async fn tags_in(
        &self,
        topic: &str,
        name: &str,
        from: SeekTo,
    ) -> Result<HashMap<u64, MessageId>> {
        let deadline = tokio::time::Instant::now() + self.layout_wait;
        loop {
            match self.read_tags(topic, name, from).await {
                Ok(t) => return Ok(t),
                Err(e) if tokio::time::Instant::now() < deadline => {
                    debug!(topic, error = %e, "reading a sealed segment's tail again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn read_tags(
        &self,
        topic: &str,
        name: &str,
        from: SeekTo,
    ) -> Result<HashMap<u64, MessageId>> {
        let mut reader = self.client.reader(topic).start_earliest().create().await?;
        reader.seek(from).await?;
        let mut out = HashMap::new();
        while reader.has_message_available().await? {
            // The broker says more is stored: silence is a failed read,
            // not the end.
            let Some(m) = reader.recv_timeout(Duration::from_secs(5)).await? else {
                let _ = reader.close().await;
                return Err(Error::Timeout("reading a sealed segment's tail"));
            };
            if &*m.producer_name != name {
                continue;
            }
            if let Some((_, v)) = m.properties.iter().find(|(k, _)| k == TAG)
                && let Some(n) = v.split_once(':').and_then(|(n, _)| n.parse().ok())
            {
                out.insert(n, m.id);
            }
        }
        let _ = reader.close().await;
        Ok(out)
    }

    /// Moves to the layout `dag`: the messages in flight on segments it
    /// seals settle first, and those refused are returned in send order
    /// (they go before anything queued after them).
    async fn switch(
        &mut self,
        dag: Arc<Dag>,
        in_flight: &mut VecDeque<InFlight>,
    ) -> VecDeque<Queued> {
        let sealed: Vec<u64> = self
            .layout
            .segments
            .values()
            .filter(|s| s.active && !dag.is_active(s.id))
            .map(|s| s.id)
            .collect();
        debug!(epoch = dag.epoch, ?sealed, "new layout");
        let mut refused = VecDeque::new();
        for s in &sealed {
            let r = self.settle(in_flight, *s).await;
            refused.extend(self.confirm(*s, r).await);
        }
        self.layout = dag;
        let layout = self.layout.clone();
        self.producers.retain(|id, _| layout.is_active(*id));
        self.last_stored.retain(|id, _| layout.is_active(*id));
        refused
    }

    /// Waits until the layout no longer has `segment` active and moves to
    /// it; what that refuses on other segments goes before `queue`. `false`
    /// if the layout did not come within the wait.
    async fn await_sealed(
        &mut self,
        segment: u64,
        in_flight: &mut VecDeque<InFlight>,
        queue: &mut VecDeque<Queued>,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + self.layout_wait;
        loop {
            let current = self.dag.current();
            if !current.is_active(segment) {
                let refused = self.switch(current, in_flight).await;
                for q in refused.into_iter().rev() {
                    queue.push_front(q);
                }
                return true;
            }
            match tokio::time::timeout_at(deadline, self.dag.changed()).await {
                Ok(Ok(_)) => continue,
                _ => return false,
            }
        }
    }

    /// Sends `queue` in order; a message whose segment turns out sealed
    /// waits (with the rest behind it) for the layout that replaces it.
    async fn send_all(&mut self, mut queue: VecDeque<Queued>, in_flight: &mut VecDeque<InFlight>) {
        while let Some((msg, reply)) = queue.pop_front() {
            match self.route(msg, reply).await {
                Routed::Sent(f) => in_flight.push_back(f),
                Routed::Failed => {}
                Routed::Sealed(segment, q) => {
                    // The segment's producer stays until the layout moves
                    // on: its messages in flight may be in doubt, and only
                    // it knows (see `confirm`, called by `switch`).
                    queue.push_front(q);
                    if !self.await_sealed(segment, in_flight, &mut queue).await {
                        let e = Error::Timeout("the layout that replaces a sealed segment");
                        fail(queue, &e);
                        return;
                    }
                }
            }
        }
    }

    /// Sends `msg` to its segment under the current layout.
    async fn route(
        &mut self,
        msg: ProducerMessage,
        reply: oneshot::Sender<Result<ScalableMessageId>>,
    ) -> Routed {
        let segment = match msg.routing_key() {
            Some(k) => self.layout.route_key(k).map(|s| s.id),
            None => {
                let active = self.layout.active();
                self.rr = self.rr.wrapping_add(1);
                active.get(self.rr % active.len().max(1)).map(|s| s.id)
            }
        };
        let Some(segment) = segment else {
            let _ = reply.send(Err(Error::Unexpected(
                "the layout has no active segment for the message".into(),
            )));
            return Routed::Failed;
        };
        if let Some(id) = msg.txn {
            // The segment joins the transaction before its message.
            let joined = match (self.txns.get(&id), self.layout.segments.get(&segment)) {
                (Some(txn), Some(s)) => txn.add_partition(&s.topic).await,
                _ => Err(Error::Unexpected(
                    "a transactional message without its transaction".into(),
                )),
            };
            if let Err(e) = joined {
                let _ = reply.send(Err(e));
                return Routed::Failed;
            }
        }
        let sent = match self.producer(segment).await {
            Ok(p) => p.send(msg.clone()).await,
            Err(e) => Err(e),
        };
        match sent {
            Ok(receipt) => Routed::Sent(InFlight {
                segment,
                msg,
                receipt,
                reply,
            }),
            Err(e) if is_sealed(&e) => Routed::Sealed(segment, (msg, reply)),
            Err(e) => {
                let _ = reply.send(Err(e));
                Routed::Failed
            }
        }
    }

    /// The producer of `segment`, created on first use.
    async fn producer(&mut self, segment: u64) -> Result<&Producer> {
        if !self.producers.contains_key(&segment) {
            let s = self
                .layout
                .segments
                .get(&segment)
                .ok_or(Error::Closed)?
                .clone();
            let mut b = self
                .client
                .producer(&s.topic)
                .name(&format!("{}-seg-{}", self.name, s.id));
            if s.legacy {
                // A v4 topic: say a V5 client uses it, so that migrating it
                // need not wait for this producer to leave.
                b = b.property(crate::dag::V5_MANAGED, "true");
            }
            b = match self.batching {
                Some((delay, n, bytes)) => {
                    let b = b.batching(delay, n, bytes);
                    if !self.entry_buckets || s.entry_bucket_splits.is_empty() {
                        b
                    } else {
                        b.batching_type(BatchingType::EntryBucket {
                            splits: s.entry_bucket_splits.clone(),
                        })
                    }
                }
                None => b.no_batching(),
            };
            let p = b.send_timeout(None).create().await?;
            self.producers.insert(segment, p);
        }
        Ok(self.producers.get(&segment).expect("just made"))
    }
}

/// The property each message carries: `<number>:<ms since the epoch>` of
/// when this producer took it, so that a message in doubt can be found on
/// a sealed segment.
const TAG: &str = "__strobe_v5_send";

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A message's tag: (number, ms).
fn tag_of(m: &ProducerMessage) -> Option<(u64, u64)> {
    let (_, v) = m.properties.iter().find(|(k, _)| k == TAG)?;
    let (n, ms) = v.split_once(':')?;
    Some((n.parse().ok()?, ms.parse().ok()?))
}

fn fail(msgs: impl IntoIterator<Item = Queued>, e: &Error) {
    for (_, reply) in msgs {
        let _ = reply.send(Err(e.clone()));
    }
}
