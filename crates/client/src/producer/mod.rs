//! Producers (Pulsar's `ProducerImpl` with `BatchMessageContainerImpl`,
//! `BatchMessageKeyBasedContainer` and PIP-486's `EntryBucketBatchContainer`).
//!
//! `send` appends to an open batch under a lock and returns at once with a
//! future of the receipt; a batch is closed when it reaches its message count
//! or byte size, or when the batching delay ticks. Every closed batch becomes
//! one SEND frame that stays in the pending map until its receipt arrives, so
//! that a reconnect can resend it in order. The pending-message limit is a
//! semaphore: one permit per message, returned with its receipt.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use strobe_model::{MessageId, Position};
use strobe_wire::proto::{CommandProducer, CommandSendError, KeyValue, SingleMessageMetadata};
use strobe_wire::{Command, OutFrame};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::client::Client;
use crate::compression::Compression;
use crate::connection::{Connection, ProducerEvent, server_error};
use crate::error::{Error, Result};
use crate::message::{BatchingType, ProducerMessage, entry_bucket_of, entry_hash};
use crate::util::{Backoff, full_topic_name};

mod frames;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum BatchKey {
    All,
    Key(Option<Bytes>),
    Bucket(u32),
}

type Reply = oneshot::Sender<Result<MessageId>>;

#[derive(Debug)]
struct Batch {
    messages: Vec<(SingleMessageMetadata, Bytes)>,
    replies: Vec<Reply>,
    bytes: usize,
    /// When it was opened, among the producer's batches: the order they
    /// flush in at a tick. (Sequence ids are given at the flush, so that
    /// each frame's run of them follows the previous frame's, whichever
    /// key or bucket it holds: the broker's deduplication drops a frame
    /// whose highest id is not above the last one it took.)
    opened: u64,
    key: Option<String>,
    ordering_key: Option<Bytes>,
    hash_min: u32,
    hash_max: u32,
}

#[derive(Debug)]
struct PendingMessage {
    frame: OutFrame,
    replies: Vec<Reply>,
    batched: bool,
    sent_at: Instant,
}

#[derive(Debug)]
struct State {
    conn: Option<Arc<Connection>>,
    name: String,
    next_seq: u64,
    batches: HashMap<BatchKey, Batch>,
    /// Batches opened so far (see [`Batch::opened`]).
    opened: u64,
    pending: BTreeMap<u64, PendingMessage>,
    closed: Option<Error>,
}

#[derive(Debug, Clone)]
struct Config {
    name: Option<String>,
    batching: Option<(Duration, u32, usize)>,
    batching_type: BatchingType,
    compression: Compression,
    send_timeout: Option<Duration>,
    max_pending: usize,
    block_if_full: bool,
    properties: Vec<(String, String)>,
}

#[derive(Debug)]
struct ProducerShared {
    client: Client,
    topic: String,
    id: u64,
    cfg: Config,
    state: Mutex<State>,
    permits: Semaphore,
    idle: Notify,
    /// Told when a message is queued, so an idle producer's ticker wakes.
    work: Notify,
    events: mpsc::UnboundedSender<ProducerEvent>,
    /// A connection was lost while messages were pending: some of them may
    /// be stored without a receipt (see [`Producer::in_doubt`]).
    in_doubt: std::sync::atomic::AtomicBool,
}

/// Builds a [`Producer`]. Batching is on by default (1 ms, 1000 messages,
/// 128 KiB), as in the Java client.
#[derive(Debug, Clone)]
pub struct ProducerBuilder {
    client: Client,
    topic: String,
    cfg: Config,
}

impl ProducerBuilder {
    pub(crate) fn new(client: Client, topic: &str) -> Self {
        ProducerBuilder {
            client,
            topic: topic.to_owned(),
            cfg: Config {
                name: None,
                batching: Some((Duration::from_millis(1), 1000, 128 * 1024)),
                batching_type: BatchingType::Default,
                compression: Compression::None,
                send_timeout: Some(Duration::from_secs(30)),
                max_pending: 1000,
                block_if_full: true,
                properties: Vec::new(),
            },
        }
    }

    pub fn name(mut self, name: &str) -> Self {
        self.cfg.name = Some(name.to_owned());
        self
    }

    /// Batch messages: close a batch after `delay`, or at `max_messages`, or
    /// at `max_bytes` of payload, whichever comes first.
    pub fn batching(mut self, delay: Duration, max_messages: u32, max_bytes: usize) -> Self {
        self.cfg.batching = Some((
            delay.max(Duration::from_micros(100)),
            max_messages.max(1),
            max_bytes.max(1),
        ));
        self
    }

    /// One SEND per message.
    pub fn no_batching(mut self) -> Self {
        self.cfg.batching = None;
        self
    }

    pub fn batching_type(mut self, t: BatchingType) -> Self {
        self.cfg.batching_type = t;
        self
    }

    pub fn compression(mut self, c: Compression) -> Self {
        self.cfg.compression = c;
        self
    }

    /// Fail a send whose receipt has not come back within `t` (`None`: never).
    pub fn send_timeout(mut self, t: Option<Duration>) -> Self {
        self.cfg.send_timeout = t;
        self
    }

    /// At most `n` messages sent and not yet acknowledged by the broker.
    pub fn max_pending_messages(mut self, n: usize) -> Self {
        self.cfg.max_pending = n.max(1);
        self
    }

    /// When the pending queue is full: wait (true, the default) or fail with
    /// [`Error::QueueFull`] (false).
    pub fn block_if_queue_full(mut self, b: bool) -> Self {
        self.cfg.block_if_full = b;
        self
    }

    pub fn property(mut self, k: &str, v: &str) -> Self {
        self.cfg.properties.push((k.to_owned(), v.to_owned()));
        self
    }

    pub async fn create(self) -> Result<Producer> {
        let topic = full_topic_name(&self.topic)?;
        if let BatchingType::EntryBucket { splits } = &self.cfg.batching_type
            && (splits.windows(2).any(|w| w[0] >= w[1])
                || splits.iter().any(|s| *s == 0 || *s > 0xffff))
        {
            return Err(Error::Invalid(
                "entry bucket splits must be increasing, in 1..=65535".into(),
            ));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.client.next_id();
        let shared = Arc::new(ProducerShared {
            client: self.client,
            topic,
            id,
            permits: Semaphore::new(self.cfg.max_pending),
            cfg: self.cfg,
            state: Mutex::new(State {
                conn: None,
                name: String::new(),
                next_seq: 0,
                opened: 0,
                batches: HashMap::new(),
                pending: BTreeMap::new(),
                closed: None,
            }),
            idle: Notify::new(),
            work: Notify::new(),
            events: tx,
            in_doubt: std::sync::atomic::AtomicBool::new(false),
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let (conn, name, last_seq) = shared.register(Some(deadline)).await?;
        {
            let mut st = shared.state.lock().expect("producer lock");
            st.conn = Some(conn);
            st.name = name;
            st.next_seq = if last_seq >= 0 {
                last_seq as u64 + 1
            } else {
                0
            };
        }
        let tasks = vec![
            tokio::spawn(event_loop(shared.clone(), rx)),
            tokio::spawn(ticker(shared.clone())),
        ];
        Ok(Producer { shared, tasks })
    }
}

/// A producer on one topic. `send` takes `&self`, so one producer may be
/// shared between tasks (wrap it in an `Arc`).
#[derive(Debug)]
pub struct Producer {
    shared: Arc<ProducerShared>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Producer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        let st = self.shared.state.lock().expect("producer lock");
        if let Some(c) = &st.conn {
            c.unregister_producer(self.shared.id);
            if st.closed.is_none() {
                let _ = c.send_command(strobe_wire::commands::close_producer_request(
                    c.next_request_id(),
                    self.shared.id,
                ));
            }
        }
    }
}

/// The receipt of one message: resolves to its [`MessageId`] once the broker
/// has stored it.
#[derive(Debug)]
pub struct SendFuture(oneshot::Receiver<Result<MessageId>>);

impl Future for SendFuture {
    type Output = Result<MessageId>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Closed)))
    }
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Producer {
    pub fn topic(&self) -> &str {
        &self.shared.topic
    }

    /// The name the broker gave (or accepted for) this producer.
    pub fn name(&self) -> String {
        self.shared
            .state
            .lock()
            .expect("producer lock")
            .name
            .clone()
    }

    /// Whether a connection was lost while messages were pending. Those are
    /// sent again after reconnecting (and deduplicated by the broker), but
    /// if the producer can no longer reconnect (its topic was terminated
    /// meanwhile) they fail although some may have been stored: a caller
    /// that sends them elsewhere must first check the topic for them.
    pub fn in_doubt(&self) -> bool {
        self.shared
            .in_doubt
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Messages sent and not yet acknowledged by the broker (including open batches).
    pub fn pending(&self) -> usize {
        self.shared.cfg.max_pending - self.shared.permits.available_permits()
    }

    /// Queues a message. Waits only for room in the pending queue; the
    /// returned future resolves when the broker has stored the message.
    pub async fn send(&self, msg: impl Into<ProducerMessage>) -> Result<SendFuture> {
        let r = self.queue(msg.into()).await;
        // After the message is in a batch or pending (never before: the
        // ticker could look, find nothing and sleep past it).
        self.shared.work.notify_one();
        r
    }

    async fn queue(&self, msg: ProducerMessage) -> Result<SendFuture> {
        let sh = &self.shared;
        if sh.cfg.block_if_full {
            sh.permits
                .acquire()
                .await
                .map_err(|_| Error::Closed)?
                .forget();
        } else {
            sh.permits
                .try_acquire()
                .map_err(|_| Error::QueueFull)?
                .forget();
        }
        let (tx, rx) = oneshot::channel();
        let mut st = sh.state.lock().expect("producer lock");
        if let Some(e) = &st.closed {
            let e = e.clone();
            drop(st);
            sh.permits.add_permits(1);
            return Err(e);
        }
        let max = st
            .conn
            .as_ref()
            .map_or(strobe_wire::DEFAULT_MAX_MESSAGE_SIZE, |c| {
                c.max_message_size
            });
        if msg.payload.len() > max {
            drop(st);
            sh.permits.add_permits(1);
            return Err(Error::Invalid(format!(
                "message of {} bytes exceeds the broker's {max}",
                msg.payload.len()
            )));
        }
        if msg.txn.is_some() {
            // A transaction's message goes alone, after whatever is batched before it.
            let mut keys: Vec<(u64, BatchKey)> = st
                .batches
                .iter()
                .map(|(k, b)| (b.opened, k.clone()))
                .collect();
            keys.sort_by_key(|(o, _)| *o);
            for (_, k) in keys {
                sh.flush_batch(&mut st, &k)?;
            }
            let seq = st.next_seq;
            st.next_seq += 1;
            sh.send_single(&mut st, seq, msg, tx)?;
            return Ok(SendFuture(rx));
        }
        match sh.cfg.batching {
            None => {
                let seq = st.next_seq;
                st.next_seq += 1;
                sh.send_single(&mut st, seq, msg, tx)?
            }
            Some((_, max_messages, max_bytes)) => {
                let hash = entry_hash(msg.routing_key());
                let key = match &sh.cfg.batching_type {
                    BatchingType::Default => BatchKey::All,
                    BatchingType::KeyBased => {
                        BatchKey::Key(msg.ordering_key.clone().or_else(|| {
                            msg.key
                                .as_ref()
                                .map(|k| Bytes::copy_from_slice(k.as_bytes()))
                        }))
                    }
                    BatchingType::EntryBucket { splits } => {
                        BatchKey::Bucket(entry_bucket_of(splits, hash))
                    }
                };
                // A message that would overflow the open batch closes it first.
                if st
                    .batches
                    .get(&key)
                    .is_some_and(|b| b.bytes + msg.payload.len() > max_bytes)
                {
                    sh.flush_batch(&mut st, &key)?;
                }
                let opened = st.opened;
                let b = st.batches.entry(key.clone()).or_insert_with(|| Batch {
                    messages: Vec::with_capacity(max_messages.min(4096) as usize),
                    replies: Vec::with_capacity(max_messages.min(4096) as usize),
                    bytes: 0,
                    opened,
                    key: msg.key.clone(),
                    ordering_key: msg.ordering_key.clone(),
                    hash_min: hash,
                    hash_max: hash,
                });
                let fresh = b.messages.is_empty();
                b.hash_min = b.hash_min.min(hash);
                b.hash_max = b.hash_max.max(hash);
                b.bytes += msg.payload.len();
                let single = SingleMessageMetadata {
                    properties: kvs(&msg.properties),
                    partition_key: msg.key,
                    payload_size: msg.payload.len() as i32,
                    event_time: msg.event_time,
                    ordering_key: msg.ordering_key,
                    // Given at the flush.
                    sequence_id: None,
                    ..Default::default()
                };
                b.messages.push((single, msg.payload));
                b.replies.push(tx);
                let full = b.messages.len() >= max_messages as usize || b.bytes >= max_bytes;
                if fresh {
                    st.opened += 1;
                }
                if full {
                    sh.flush_batch(&mut st, &key)?;
                }
            }
        }
        Ok(SendFuture(rx))
    }

    /// Sends and waits for the receipt.
    pub async fn send_and_wait(&self, msg: impl Into<ProducerMessage>) -> Result<MessageId> {
        let f = self.send(msg).await?;
        self.shared.flush_all();
        f.await
    }

    /// Closes the open batches and waits until every pending message has its receipt.
    pub async fn flush(&self) -> Result<()> {
        self.shared.flush_all();
        loop {
            let notified = self.shared.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = self.shared.state.lock().expect("producer lock");
                if st.pending.is_empty() && st.batches.is_empty() {
                    return Ok(());
                }
                if let Some(e) = &st.closed {
                    return Err(e.clone());
                }
            }
            notified.await;
        }
    }

    /// Flushes (bounded by the send timeout), then closes the producer on the broker.
    pub async fn close(mut self) -> Result<()> {
        let wait = self
            .shared
            .cfg
            .send_timeout
            .unwrap_or(Duration::from_secs(30));
        let flushed = tokio::time::timeout(wait, self.flush()).await;
        let conn = {
            let mut st = self.shared.state.lock().expect("producer lock");
            st.closed = Some(Error::Closed);
            fail_pending(&self.shared, &mut st, &Error::Closed);
            st.conn.take()
        };
        for t in self.tasks.drain(..) {
            t.abort();
        }
        if let Some(c) = conn {
            c.unregister_producer(self.shared.id);
            let rid = c.next_request_id();
            let _ = c
                .request(
                    rid,
                    strobe_wire::commands::close_producer_request(rid, self.shared.id),
                )
                .await;
        }
        match flushed {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout("flush on close")),
        }
    }
}

pub(super) fn kvs(props: &[(String, String)]) -> Vec<KeyValue> {
    props
        .iter()
        .map(|(k, v)| KeyValue {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

/// Fails every open batch and pending message with `e`.
fn fail_pending(sh: &ProducerShared, st: &mut State, e: &Error) {
    let mut n = 0;
    for (_, b) in st.batches.drain() {
        n += b.replies.len();
        for r in b.replies {
            let _ = r.send(Err(e.clone()));
        }
    }
    for (_, p) in std::mem::take(&mut st.pending) {
        n += p.replies.len();
        for r in p.replies {
            let _ = r.send(Err(e.clone()));
        }
    }
    sh.permits.add_permits(n);
    sh.idle.notify_waiters();
}

impl ProducerShared {
    /// Looks the topic up and registers the producer (PRODUCER → PRODUCER_SUCCESS).
    async fn register(&self, deadline: Option<Instant>) -> Result<(Arc<Connection>, String, i64)> {
        let mut backoff = Backoff::new();
        loop {
            let attempt = async {
                let conn = self
                    .client
                    .lookup_with_backoff(&self.topic, deadline)
                    .await?;
                conn.register_producer(self.id, self.events.clone());
                let rid = conn.next_request_id();
                let name = self.state.lock().expect("producer lock").name.clone();
                let name = if name.is_empty() {
                    self.cfg.name.clone()
                } else {
                    Some(name)
                };
                let cmd = CommandProducer {
                    topic: self.topic.clone(),
                    producer_id: self.id,
                    request_id: rid,
                    user_provided_producer_name: Some(self.cfg.name.is_some()),
                    producer_name: name,
                    metadata: kvs(&self.cfg.properties),
                    ..Default::default()
                };
                match conn.request(rid, cmd).await {
                    Ok(Command::ProducerSuccess(s)) => {
                        Ok((conn, s.producer_name, s.last_sequence_id.unwrap_or(-1)))
                    }
                    Ok(other) => Err(Error::Unexpected(format!("{:?} to PRODUCER", other.kind()))),
                    Err(e) => {
                        conn.unregister_producer(self.id);
                        Err(e)
                    }
                }
            };
            match attempt.await {
                Ok(r) => return Ok(r),
                Err(e) if e.is_retriable() => {
                    let wait = backoff.next();
                    if deadline.is_some_and(|d| Instant::now() + wait > d) {
                        return Err(e);
                    }
                    debug!(topic = %self.topic, error = %e, "producer registration failed, retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A SEND frame whose metadata-and-payload section is `[0x0e01][crc]
    /// [size][metadata]` (small, in the frame head) followed by `body`, which is
    /// shared, not copied. Same bytes as `payload::encode(metadata, body, true)`.
    fn on_receipt(&self, seq: u64, ledger_id: u64, entry_id: u64) {
        let mut st = self.state.lock().expect("producer lock");
        let Some(p) = st.pending.remove(&seq) else {
            debug!(topic = %self.topic, seq, "receipt for nothing pending");
            return;
        };
        let n = p.replies.len();
        let position = Position::new(ledger_id, entry_id);
        for (i, r) in p.replies.into_iter().enumerate() {
            let mut id = MessageId::new(position);
            if p.batched {
                id.batch_index = i as i32;
                id.batch_size = n as i32;
            }
            let _ = r.send(Ok(id));
        }
        let idle = st.pending.is_empty() && st.batches.is_empty();
        drop(st);
        self.permits.add_permits(n);
        if idle {
            self.idle.notify_waiters();
        }
    }

    fn on_send_error(&self, e: CommandSendError) {
        let err = server_error(e.error, e.message);
        let mut st = self.state.lock().expect("producer lock");
        if let Some(p) = st.pending.remove(&e.sequence_id) {
            let n = p.replies.len();
            for r in p.replies {
                let _ = r.send(Err(err.clone()));
            }
            self.permits.add_permits(n);
        }
        if st.pending.is_empty() {
            self.idle.notify_waiters();
        }
    }

    /// Fails pending messages older than the send timeout.
    fn expire(&self) {
        let Some(timeout) = self.cfg.send_timeout else {
            return;
        };
        let now = Instant::now();
        let mut st = self.state.lock().expect("producer lock");
        let expired: Vec<u64> = st
            .pending
            .iter()
            .take_while(|(_, p)| p.sent_at + timeout <= now)
            .map(|(s, _)| *s)
            .collect();
        if expired.is_empty() {
            return;
        }
        let mut n = 0;
        for s in expired {
            if let Some(p) = st.pending.remove(&s) {
                n += p.replies.len();
                for r in p.replies {
                    let _ = r.send(Err(Error::Timeout("send")));
                }
            }
        }
        let idle = st.pending.is_empty();
        drop(st);
        self.permits.add_permits(n);
        if idle {
            self.idle.notify_waiters();
        }
    }
}

async fn ticker(sh: Arc<ProducerShared>) {
    let period = sh
        .cfg
        .batching
        .map(|(d, _, _)| d)
        .unwrap_or(Duration::from_millis(100));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_expire = Instant::now();
    loop {
        let busy = {
            let st = sh.state.lock().expect("producer lock");
            !st.batches.is_empty() || !st.pending.is_empty()
        };
        if !busy {
            // Idle: no timer until a send (100,000 idle producers ticking
            // every millisecond kept a client's core busy, issue 47).
            sh.work.notified().await;
            tick.reset();
            continue;
        }
        tick.tick().await;
        let has_batches = !sh.state.lock().expect("producer lock").batches.is_empty();
        if has_batches {
            sh.flush_all();
        }
        if last_expire.elapsed() >= Duration::from_millis(100) {
            last_expire = Instant::now();
            sh.expire();
        }
    }
}

async fn event_loop(sh: Arc<ProducerShared>, mut rx: mpsc::UnboundedReceiver<ProducerEvent>) {
    while let Some(ev) = rx.recv().await {
        match ev {
            ProducerEvent::Receipt(r) => {
                let id = r.message_id.unwrap_or_default();
                sh.on_receipt(r.sequence_id, id.ledger_id, id.entry_id);
            }
            ProducerEvent::SendError(e) => sh.on_send_error(e),
            ProducerEvent::Closed => {
                {
                    let mut st = sh.state.lock().expect("producer lock");
                    if st.closed.is_some() {
                        return;
                    }
                    st.conn = None;
                    if !st.pending.is_empty() {
                        sh.in_doubt
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                debug!(topic = %sh.topic, "producer disconnected, reconnecting");
                match sh.register(None).await {
                    Ok((conn, name, _)) => {
                        let mut st = sh.state.lock().expect("producer lock");
                        st.name = name;
                        // Resend in sequence order what the broker has not acknowledged.
                        for p in st.pending.values_mut() {
                            let _ = conn.send(p.frame.clone());
                            p.sent_at = Instant::now();
                        }
                        st.conn = Some(conn);
                    }
                    Err(e) => {
                        // A terminated topic (a scalable topic's sealed
                        // segment) is an expected end, not a warning.
                        let terminated = matches!(
                            &e,
                            Error::Server { code, .. }
                                if *code == strobe_wire::proto::ServerError::TopicTerminatedError
                        );
                        if terminated {
                            debug!(topic = %sh.topic, "producer closed: its topic is terminated");
                        } else {
                            warn!(topic = %sh.topic, error = %e, "producer cannot reconnect");
                        }
                        let mut st = sh.state.lock().expect("producer lock");
                        fail_pending(&sh, &mut st, &e);
                        st.closed = Some(e);
                        return;
                    }
                }
            }
        }
    }
}

impl Client {
    pub fn producer(&self, topic: &str) -> ProducerBuilder {
        ProducerBuilder::new(self.clone(), topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        let splits = crate::equal_width_splits(4);
        assert_eq!(splits, vec![16384, 32768, 49152]);
        assert_eq!(entry_bucket_of(&splits, 0), 0);
        assert_eq!(entry_bucket_of(&splits, 16383), 0);
        assert_eq!(entry_bucket_of(&splits, 16384), 1);
        assert_eq!(entry_bucket_of(&splits, 65535), 3);
        assert_eq!(entry_hash(None), 0);
        assert!(entry_hash(Some(b"k")) <= 0xffff);
    }
}
