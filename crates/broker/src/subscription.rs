//! One subscription and its dispatcher: Pulsar's `PersistentSubscription`
//! with `PersistentDispatcherSingleActiveConsumer` (Exclusive, Failover) and
//! `PersistentDispatcherMultipleConsumers` (Shared).
//!
//! Each subscription is an actor task that owns its cursor and consumers; the
//! connections talk to it through a bounded channel. The decisions (who is
//! active, who is next) come from `strobe-dispatch`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use strobe_dispatch::key_shared::{
    ConsumerId, ConsumerSpec as KsConsumer, Decision, HashRange, KeySharedConfig,
    KeySharedDispatcher, KeySharedMode, NextRead, ReadType, resolve_sticky_key,
};
use strobe_dispatch::{ConsumerKey, SharedSelector, failover_active, permits_for_entry};
use strobe_ledger::{Entry, ManagedCursor, ManagedLedger, Position};
use strobe_model::SubType;
use strobe_wire::proto::{CommandAck, MessageIdData, MessageMetadata, command_ack::AckType};
use strobe_wire::{OutFrame, commands, payload};
use tokio::sync::{mpsc, oneshot};
use tracing::{Instrument, debug, info_span, warn};

use crate::BrokerError;
use crate::topic::Topic;

/// Commands queued for one subscription before senders wait.
const COMMAND_QUEUE: usize = 1024;

/// Where a reader starts, from SUBSCRIBE.start_message_id.
#[derive(Debug, Clone, Copy)]
pub struct StartPosition {
    pub ledger_id: u64,
    pub entry_id: u64,
    pub batch_index: i32,
}

impl StartPosition {
    pub fn from_id(id: &MessageIdData) -> StartPosition {
        StartPosition {
            ledger_id: id.ledger_id,
            entry_id: id.entry_id,
            batch_index: id.batch_index.unwrap_or(-1),
        }
    }

    /// The first position to read. `MessageId.earliest` is (-1, -1) and
    /// `MessageId.latest` is (i64::MAX, i64::MAX) on the wire.
    pub fn resolve(&self, ledger: &ManagedLedger) -> Position {
        if self.ledger_id == u64::MAX {
            return Position::EARLIEST;
        }
        if self.ledger_id >= i64::MAX as u64 {
            return match ledger.last_confirmed() {
                Some(p) => Position::new(p.ledger_id, p.entry_id + 1),
                None => ledger.first_position(),
            };
        }
        // Pulsar starts a reader at the entry it names (its broker steps one
        // entry back from every start id); the client then drops the messages
        // before its start, and the start itself unless it asked for an
        // inclusive start.
        Position::new(
            self.ledger_id,
            if self.entry_id == u64::MAX {
                0
            } else {
                self.entry_id
            },
        )
    }
}

/// A consumer as the connection describes it when subscribing.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    pub conn_id: u64,
    pub consumer_id: u64,
    pub name: String,
    pub priority_level: i32,
    pub sub_type: SubType,
    pub tx: mpsc::Sender<OutFrame>,
    /// The client accepts broker entry metadata before the payload.
    pub keep_entry_metadata: bool,
    /// ACTIVE_CONSUMER_CHANGE needs protocol v12.
    pub protocol_version: i32,
    /// The client takes REACHED_END_OF_TOPIC.
    pub end_of_topic_ok: bool,
    /// Read the compacted view up to its horizon, then the topic.
    pub read_compacted: bool,
    /// Set when the broker closes the consumer (seek, topic close), so the
    /// connection lets the client subscribe again with the same id.
    pub closed_by_broker: Arc<AtomicBool>,
    /// Key_Shared only: the consumer's KeySharedMeta.
    pub key_shared: Option<KeySharedSpec>,
}

/// A Key_Shared consumer's `KeySharedMeta` (AUTO_SPLIT when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySharedSpec {
    pub sticky: bool,
    /// STICKY: the ranges claimed; entry buckets: the full boundary list.
    pub ranges: Vec<HashRange>,
    pub allow_out_of_order: bool,
    /// PIP-486: `entryBucketDispatch`.
    pub entry_buckets: bool,
}

/// Where SEEK goes.
#[derive(Debug, Clone, Copy)]
pub enum SeekTarget {
    Message(StartPosition),
    PublishTime(u64),
}

type Reply<T> = oneshot::Sender<Result<T, BrokerError>>;

enum Cmd {
    Add(ConsumerSpec, Reply<()>),
    Remove {
        conn_id: u64,
        consumer_id: u64,
        reply: Option<oneshot::Sender<()>>,
    },
    Flow {
        conn_id: u64,
        consumer_id: u64,
        permits: u32,
    },
    Ack {
        conn_id: u64,
        consumer_id: u64,
        ack: CommandAck,
        /// None when the client asked for no receipt (the ack is not awaited).
        reply: Option<Reply<()>>,
    },
    Redeliver {
        conn_id: u64,
        consumer_id: u64,
        ids: Vec<MessageIdData>,
    },
    Seek {
        conn_id: u64,
        consumer_id: u64,
        request_id: u64,
        target: SeekTarget,
    },
    Unsubscribe {
        conn_id: u64,
        consumer_id: u64,
        reply: Reply<()>,
    },
    Admin(AdminOp, Reply<AdminReply>),
    Close(oneshot::Sender<()>),
    /// Something outside changed (the topic was terminated): look again.
    Wake,
}

/// What the admin API asks of a subscription.
#[derive(Debug, Clone)]
pub enum AdminOp {
    /// Reset the cursor (consumers are disconnected and reconnect there).
    Reset(SeekTarget),
    /// Acknowledge the next `n` unacknowledged messages.
    Skip(u64),
    /// Acknowledge every message published more than this many seconds ago.
    ExpireOlderThan(u64),
    /// The `n`th (1-based) unacknowledged message, without delivering it.
    Peek(u64),
    /// Consumers and their state.
    Info,
}

/// The admin API's answer.
#[derive(Debug, Clone)]
pub enum AdminReply {
    Done,
    Peeked(Option<Entry>),
    Info(SubscriptionInfo),
}

/// A subscription as the stats endpoints show it.
#[derive(Debug, Clone, Default)]
pub struct SubscriptionInfo {
    pub sub_type: Option<SubType>,
    pub backlog: u64,
    pub consumers: Vec<ConsumerInfo>,
}

#[derive(Debug, Clone, Default)]
pub struct ConsumerInfo {
    pub name: String,
    /// The connection it came on, and the id the client gave it there.
    pub conn_id: u64,
    pub consumer_id: u64,
    pub permits: i64,
    pub unacked_messages: u64,
    /// Key_Shared: owned hash ranges (start, end) or bucket indexes.
    pub key_hash_ranges: Vec<(u32, u32)>,
    pub buckets: Vec<usize>,
    /// Key_Shared: hashes this consumer still holds after they moved away,
    /// as (hash, unacked entries, blocked attempts).
    pub draining_hashes: Vec<(u32, u32, u64)>,
    pub draining_hashes_cleared_total: u64,
    /// Key_Shared: hashes it owns but waits for, with the consumer still draining them.
    pub waiting_for: Vec<(u32, String)>,
}

/// The connections' side of a subscription.
#[derive(Clone)]
pub struct SubscriptionHandle {
    pub name: String,
    pub durable: bool,
    pub cursor: ManagedCursor,
    tx: mpsc::Sender<Cmd>,
    closed: Arc<AtomicBool>,
    sub_type: Arc<Mutex<Option<SubType>>>,
    consumer_count: Arc<std::sync::atomic::AtomicUsize>,
}

impl std::fmt::Debug for SubscriptionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriptionHandle")
            .field("name", &self.name)
            .finish()
    }
}

fn gone() -> BrokerError {
    BrokerError::ServiceNotReady("the subscription is closing".into())
}

impl SubscriptionHandle {
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn sub_type(&self) -> Option<SubType> {
        *self.sub_type.lock()
    }

    /// Consumers connected now.
    pub fn consumer_count(&self) -> usize {
        self.consumer_count.load(Ordering::Acquire)
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Cmd) -> Result<T, BrokerError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    pub async fn add_consumer(&self, spec: ConsumerSpec) -> Result<(), BrokerError> {
        self.call(|r| Cmd::Add(spec, r)).await
    }

    /// The consumer closed or its connection ended; waits until its messages are back in the queue.
    pub async fn remove_consumer(&self, conn_id: u64, consumer_id: u64) {
        let (tx, rx) = oneshot::channel();
        if self
            .tx
            .send(Cmd::Remove {
                conn_id,
                consumer_id,
                reply: Some(tx),
            })
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
    }

    pub async fn flow(&self, conn_id: u64, consumer_id: u64, permits: u32) {
        let _ = self
            .tx
            .send(Cmd::Flow {
                conn_id,
                consumer_id,
                permits,
            })
            .await;
    }

    pub async fn ack(
        &self,
        conn_id: u64,
        consumer_id: u64,
        ack: CommandAck,
    ) -> Result<(), BrokerError> {
        self.call(|reply| Cmd::Ack {
            conn_id,
            consumer_id,
            ack,
            reply: Some(reply),
        })
        .await
    }

    /// An ack the client wants no receipt for: queued, not awaited (errors
    /// are dropped, as Pulsar drops them without a request id).
    pub async fn ack_no_reply(&self, conn_id: u64, consumer_id: u64, ack: CommandAck) {
        let _ = self
            .tx
            .send(Cmd::Ack {
                conn_id,
                consumer_id,
                ack,
                reply: None,
            })
            .await;
    }

    pub async fn redeliver(&self, conn_id: u64, consumer_id: u64, ids: Vec<MessageIdData>) {
        let _ = self
            .tx
            .send(Cmd::Redeliver {
                conn_id,
                consumer_id,
                ids,
            })
            .await;
    }

    /// The subscription answers the seek itself (SUCCESS or ERROR to the
    /// requesting consumer), then disconnects its consumers so they reconnect
    /// from the new position.
    pub async fn seek(
        &self,
        conn_id: u64,
        consumer_id: u64,
        request_id: u64,
        target: SeekTarget,
    ) -> bool {
        self.tx
            .send(Cmd::Seek {
                conn_id,
                consumer_id,
                request_id,
                target,
            })
            .await
            .is_ok()
    }

    pub async fn unsubscribe(&self, conn_id: u64, consumer_id: u64) -> Result<(), BrokerError> {
        self.call(|reply| Cmd::Unsubscribe {
            conn_id,
            consumer_id,
            reply,
        })
        .await
    }

    /// An admin operation (see [`AdminOp`]).
    pub async fn admin(&self, op: AdminOp) -> Result<AdminReply, BrokerError> {
        self.call(|reply| Cmd::Admin(op, reply)).await
    }

    /// Deletes the subscription; refused while consumers are connected.
    pub async fn delete(&self) -> Result<(), BrokerError> {
        self.unsubscribe(u64::MAX, u64::MAX).await
    }

    /// Closes every consumer (CLOSE_CONSUMER) and stops the subscription.
    pub async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Cmd::Close(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// Makes the subscription look at its topic again (it was terminated).
    pub async fn wake(&self) {
        let _ = self.tx.send(Cmd::Wake).await;
    }

    /// Stops an unused subscription actor without waiting.
    pub fn shutdown(&self) {
        let (tx, _) = oneshot::channel();
        let _ = self.tx.try_send(Cmd::Close(tx));
    }
}

struct Consumer {
    conn_id: u64,
    consumer_id: u64,
    name: String,
    priority_level: i32,
    seq: u64,
    tx: mpsc::Sender<OutFrame>,
    keep_entry_metadata: bool,
    protocol_version: i32,
    closed_by_broker: Arc<AtomicBool>,
    permits: i64,
    /// Delivered, not yet acknowledged: position -> messages in the entry.
    unacked: BTreeMap<Position, u32>,
    unacked_messages: u64,
    /// REACHED_END_OF_TOPIC was sent (the topic is terminated and read to its end).
    told_end: bool,
}

/// The actor.
pub(crate) struct Subscription {
    topic: Arc<Topic>,
    name: String,
    durable: bool,
    cursor: ManagedCursor,
    sub_type: Option<SubType>,
    shared_type: Arc<Mutex<Option<SubType>>>,
    consumer_count: Arc<std::sync::atomic::AtomicUsize>,
    consumers: Vec<Consumer>,
    next_seq: u64,
    selector: SharedSelector,
    /// Entries to deliver again before reading on (redelivered, or left by a consumer).
    replay: BTreeSet<Position>,
    redelivery_counts: HashMap<Position, u32>,
    /// Delayed messages (Shared only): due time (ms) -> positions.
    delayed: BTreeMap<u64, Vec<(Position, u32, u32)>>,
    /// Failover/Exclusive: index of the active consumer.
    active: Option<usize>,
    /// Key_Shared: the dispatcher (selector, draining, pending acks, replay),
    /// and the first consumer's KeySharedMeta, which later ones must match.
    ks: Option<KeySharedDispatcher>,
    ks_meta: Option<KeySharedSpec>,
    ks_consistent_hashing: bool,
    max_read: usize,
    /// Moving average of messages per entry delivered (batches): turns the
    /// consumers' permits, counted in messages, into entries to read. None
    /// until an entry was delivered (the first read then takes one entry).
    avg_msgs_per_entry: Option<f64>,
    max_unacked: u32,
    /// The subscription reads the topic's compacted view (set by its first consumer).
    read_compacted: bool,
}

impl Subscription {
    pub fn start(
        topic: Arc<Topic>,
        name: String,
        durable: bool,
        cursor: ManagedCursor,
    ) -> SubscriptionHandle {
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let closed = Arc::new(AtomicBool::new(false));
        let shared_type = Arc::new(Mutex::new(None));
        let consumer_count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handle = SubscriptionHandle {
            consumer_count: consumer_count.clone(),
            name: name.clone(),
            durable,
            cursor: cursor.clone(),
            tx,
            closed: closed.clone(),
            sub_type: shared_type.clone(),
        };
        let span = info_span!("subscription", topic = %topic.name, subscription = %name);
        let settings = topic.settings;
        let sub = Subscription {
            topic,
            name,
            durable,
            cursor,
            sub_type: None,
            shared_type,
            consumer_count,
            consumers: Vec::new(),
            next_seq: 0,
            selector: SharedSelector::default(),
            replay: BTreeSet::new(),
            redelivery_counts: HashMap::new(),
            delayed: BTreeMap::new(),
            active: None,
            ks: None,
            ks_meta: None,
            ks_consistent_hashing: settings.key_shared_consistent_hashing,
            max_read: settings.max_read_entries.max(1),
            avg_msgs_per_entry: None,
            max_unacked: settings.max_unacked_messages,
            read_compacted: false,
        };
        tokio::spawn(
            async move {
                let topic = sub.topic.clone();
                let name = sub.name.clone();
                sub.run(rx).await;
                closed.store(true, Ordering::Release);
                topic.subscription_ended(&name);
            }
            .instrument(span),
        );
        handle
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Cmd>) {
        let mut lac = self.topic.ledger.watch_last_confirmed();
        // Message TTL is enforced on this period (Pulsar: messageExpiryCheckIntervalInMinutes).
        let mut ttl_tick = tokio::time::interval(Duration::from_secs(5));
        ttl_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ledger_open = true;
        loop {
            if let Err(e) = self.dispatch().await {
                warn!(error = %e, "dispatch failed; retrying shortly");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            self.tell_end_of_topic();
            self.consumer_count
                .store(self.consumers.len(), Ordering::Release);
            let next_due = self.delayed.keys().next().copied();
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    None => break,
                    Some(cmd) => {
                        if self.handle(cmd).await.is_break() {
                            break;
                        }
                    }
                },
                r = lac.changed(), if ledger_open => {
                    if r.is_err() {
                        ledger_open = false;
                    }
                }
                _ = sleep_until_ms(next_due.unwrap_or(0)), if next_due.is_some() => {
                    self.release_due_delayed();
                }
                _ = ttl_tick.tick() => {
                    if let Err(e) = self.expire_by_ttl().await {
                        warn!(error = %e, "message expiry failed");
                    }
                }
            }
        }
    }

    async fn handle(&mut self, cmd: Cmd) -> std::ops::ControlFlow<()> {
        use std::ops::ControlFlow::{Break, Continue};
        match cmd {
            Cmd::Add(spec, reply) => {
                let r = self.add(spec);
                let _ = reply.send(r);
            }
            Cmd::Remove {
                conn_id,
                consumer_id,
                reply,
            } => {
                self.remove(conn_id, consumer_id);
                if let Some(r) = reply {
                    let _ = r.send(());
                }
                if self.consumers.is_empty() && !self.durable {
                    return Break(());
                }
            }
            Cmd::Flow {
                conn_id,
                consumer_id,
                permits,
            } => {
                if let Some(c) = self.find_mut(conn_id, consumer_id) {
                    c.permits = c.permits.saturating_add(i64::from(permits));
                }
            }
            Cmd::Ack {
                conn_id,
                consumer_id,
                ack,
                reply,
            } => {
                let r = self.ack(conn_id, consumer_id, ack);
                if let Some(reply) = reply {
                    let _ = reply.send(r);
                } else if let Err(e) = r {
                    debug!(error = %e, "ack without a request id refused");
                }
            }
            Cmd::Redeliver {
                conn_id,
                consumer_id,
                ids,
            } => self.redeliver(conn_id, consumer_id, ids),
            Cmd::Seek {
                conn_id,
                consumer_id,
                request_id,
                target,
            } => {
                self.seek(conn_id, consumer_id, request_id, target).await;
            }
            Cmd::Unsubscribe {
                conn_id,
                consumer_id,
                reply,
            } => {
                if self
                    .consumers
                    .iter()
                    .any(|c| (c.conn_id, c.consumer_id) != (conn_id, consumer_id))
                {
                    let _ = reply.send(Err(BrokerError::ConsumerBusy(format!(
                        "subscription {} has other connected consumers",
                        self.name
                    ))));
                    return Continue(());
                }
                if self.durable
                    && let Err(e) = self.topic.ledger.delete_cursor(&self.name).await
                {
                    let _ = reply.send(Err(e.into()));
                    return Continue(());
                }
                self.consumers.clear();
                let _ = reply.send(Ok(()));
                return Break(());
            }
            Cmd::Admin(op, reply) => {
                let r = self.admin(op).await;
                let _ = reply.send(r);
            }
            Cmd::Wake => {}
            Cmd::Close(done) => {
                for c in self.consumers.drain(..) {
                    c.closed_by_broker.store(true, Ordering::Release);
                    let _ = c.tx.try_send(OutFrame::command(commands::close_consumer(
                        c.consumer_id,
                        None,
                        None,
                    )));
                }
                if self.durable
                    && let Err(e) = self.cursor.flush().await
                {
                    warn!(error = %e, "flushing the cursor failed");
                }
                let _ = done.send(());
                return Break(());
            }
        }
        Continue(())
    }

    fn find_mut(&mut self, conn_id: u64, consumer_id: u64) -> Option<&mut Consumer> {
        self.consumers
            .iter_mut()
            .find(|c| c.conn_id == conn_id && c.consumer_id == consumer_id)
    }

    fn add(&mut self, spec: ConsumerSpec) -> Result<(), BrokerError> {
        if !self.consumers.is_empty() {
            if self.sub_type != Some(spec.sub_type) {
                return Err(BrokerError::ConsumerBusy(format!(
                    "subscription {} is of type {}, not {}",
                    self.name,
                    self.sub_type.map(SubType::as_str).unwrap_or("?"),
                    spec.sub_type.as_str()
                )));
            }
            if spec.sub_type == SubType::Exclusive {
                return Err(BrokerError::ConsumerBusy(format!(
                    "exclusive consumer is already connected to subscription {}",
                    self.name
                )));
            }
        }
        if self
            .consumers
            .iter()
            .any(|c| c.conn_id == spec.conn_id && c.consumer_id == spec.consumer_id)
        {
            return Err(BrokerError::ConsumerBusy(format!(
                "consumer id {} is already subscribed",
                spec.consumer_id
            )));
        }
        if spec.sub_type == SubType::KeyShared {
            self.add_key_shared(&spec)?;
        }
        self.sub_type = Some(spec.sub_type);
        *self.shared_type.lock() = self.sub_type;
        self.next_seq += 1;
        self.consumers.push(Consumer {
            conn_id: spec.conn_id,
            consumer_id: spec.consumer_id,
            name: spec.name,
            priority_level: spec.priority_level,
            seq: self.next_seq,
            tx: spec.tx,
            keep_entry_metadata: spec.keep_entry_metadata,
            protocol_version: spec.protocol_version,
            closed_by_broker: spec.closed_by_broker,
            permits: 0,
            unacked: BTreeMap::new(),
            unacked_messages: 0,
            told_end: !spec.end_of_topic_ok,
        });
        if self.consumers.len() == 1 {
            self.read_compacted = spec.read_compacted;
            // A fresh start: everything not acknowledged is delivered again.
            self.cursor.rewind();
            self.replay.clear();
            self.delayed.clear();
        }
        self.update_active();
        debug!(consumers = self.consumers.len(), "consumer added");
        Ok(())
    }

    fn remove(&mut self, conn_id: u64, consumer_id: u64) {
        let Some(i) = self
            .consumers
            .iter()
            .position(|c| c.conn_id == conn_id && c.consumer_id == consumer_id)
        else {
            return;
        };
        let c = self.consumers.remove(i);
        if let Some(ks) = self.ks.as_mut() {
            // Its unacked entries wait in the dispatcher's replay queue, in key order.
            let out = ks.remove_consumer(ConsumerId(c.seq));
            for p in out.replay {
                *self.redelivery_counts.entry(p).or_insert(0) += 1;
            }
        } else {
            self.give_back(c.unacked.keys().copied().collect());
        }
        if self.consumers.is_empty() {
            self.sub_type = None;
            *self.shared_type.lock() = None;
            self.ks = None;
            self.ks_meta = None;
        }
        self.active = None;
        self.update_active();
        debug!(consumers = self.consumers.len(), "consumer removed");
    }

    /// Entries that must be delivered again: to the replay queue (Shared), or
    /// a rewind of the cursor (one active consumer: it gets everything unacked, in order).
    fn give_back(&mut self, positions: Vec<Position>) {
        for p in &positions {
            *self.redelivery_counts.entry(*p).or_insert(0) += 1;
        }
        if self.sub_type == Some(SubType::Shared) {
            self.replay.extend(positions);
        } else if !positions.is_empty() {
            for c in &mut self.consumers {
                c.unacked.clear();
                c.unacked_messages = 0;
            }
            self.replay.clear();
            self.delayed.clear();
            self.cursor.rewind();
        }
    }

    /// Recomputes the active consumer of Exclusive/Failover and tells the
    /// consumers when it changes.
    fn update_active(&mut self) {
        if !matches!(self.sub_type, Some(SubType::Exclusive | SubType::Failover)) {
            self.active = None;
            return;
        }
        let keys: Vec<ConsumerKey<'_>> = self
            .consumers
            .iter()
            .map(|c| ConsumerKey {
                priority_level: c.priority_level,
                name: &c.name,
                seq: c.seq,
            })
            .collect();
        let new = failover_active(&keys, self.topic.name.partition());
        let old_id = self
            .active
            .and_then(|i| self.consumers.get(i))
            .map(|c| (c.conn_id, c.consumer_id));
        let new_id = new.map(|i| (self.consumers[i].conn_id, self.consumers[i].consumer_id));
        self.active = new;
        if old_id == new_id && old_id.is_some() {
            return;
        }
        if self.sub_type == Some(SubType::Failover) {
            // The new active consumer gets everything not acknowledged.
            let all: Vec<Position> = self
                .consumers
                .iter()
                .flat_map(|c| c.unacked.keys().copied())
                .collect();
            self.give_back(all);
            for c in &self.consumers {
                if c.protocol_version >= 12 {
                    let is_active = Some((c.conn_id, c.consumer_id)) == new_id;
                    let _ =
                        c.tx.try_send(OutFrame::command(commands::active_consumer_change(
                            c.consumer_id,
                            is_active,
                        )));
                }
            }
        }
    }

    /// Whether consumer `i` can take another entry now.
    fn can_take(&self, i: usize) -> bool {
        let c = &self.consumers[i];
        c.permits > 0 && (self.max_unacked == 0 || c.unacked_messages < u64::from(self.max_unacked))
    }

    fn pick(&mut self) -> Option<usize> {
        match self.sub_type? {
            SubType::Shared => {
                let ready: Vec<u32> = (0..self.consumers.len())
                    .map(|i| u32::from(self.can_take(i)))
                    .collect();
                self.selector.pick(&ready)
            }
            _ => self.active.filter(|&i| self.can_take(i)),
        }
    }

    /// Entries to read for the consumers that can take messages now:
    /// their permits (and room under the unacked limit) over the average
    /// messages per entry, at least 1 and at most `max_read`, as Pulsar's
    /// dispatchers size a read. Entries read beyond what the consumers can
    /// take are dropped and read again later, so reading `max_read` entries
    /// of large batches for a consumer with room for one cost a catch-up read
    /// ten times its bytes (measured: copy, zeroing and CRC checks took 64%
    /// of the broker's CPU).
    fn read_budget(&self) -> usize {
        let room = |i: usize| -> i64 {
            let c = &self.consumers[i];
            if !self.can_take(i) {
                return 0;
            }
            let mut r = c.permits;
            if self.max_unacked > 0 {
                r = r.min(i64::from(self.max_unacked) - c.unacked_messages as i64);
            }
            r.max(0)
        };
        let Some(avg) = self.avg_msgs_per_entry else {
            return 1;
        };
        let messages: i64 = match self.sub_type {
            Some(SubType::Shared) => (0..self.consumers.len()).map(room).sum(),
            Some(_) => self.active.map_or(0, room),
            None => 0,
        };
        let entries = (messages as f64 / avg.max(1.0)).ceil();
        (entries as usize).clamp(1, self.max_read)
    }

    /// Up to `max` entries from the cursor's read position, counted in the
    /// topic's `entries_read`.
    async fn read_next(&self, max: usize) -> Result<Vec<Entry>, strobe_ledger::LedgerError> {
        let entries = self.cursor.read(max).await?;
        self.count_read(entries.len());
        Ok(entries)
    }

    /// The entry at `p` (a redelivery), counted in the topic's `entries_read`.
    async fn read_at(&self, p: Position) -> Result<Vec<Entry>, strobe_ledger::LedgerError> {
        let entries = self.topic.ledger.read(p, 1).await?;
        self.count_read(entries.len());
        Ok(entries)
    }

    fn count_read(&self, n: usize) {
        self.topic
            .counters
            .entries_read
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    fn any_ready(&self) -> bool {
        match self.sub_type {
            Some(SubType::Shared) => (0..self.consumers.len()).any(|i| self.can_take(i)),
            Some(_) => self.active.is_some_and(|i| self.can_take(i)),
            None => false,
        }
    }

    /// Sends as many entries as the consumers' permits allow.
    async fn dispatch(&mut self) -> Result<(), BrokerError> {
        if self.ks.is_some() {
            return self.dispatch_key_shared().await;
        }
        loop {
            if !self.any_ready() {
                if !self.topic.name.is_persistent() {
                    // Non-persistent: what no consumer can take now is dropped.
                    self.cursor.seek_read(self.topic.next_position());
                }
                return Ok(());
            }
            // Redeliveries first, oldest first.
            if let Some(&p) = self.replay.iter().next() {
                self.replay.remove(&p);
                if self.cursor.is_acked(p) {
                    self.redelivery_counts.remove(&p);
                    continue;
                }
                let entries = match self.compacted_entry(p).await? {
                    Some(e) => vec![e],
                    None => self.read_at(p).await?,
                };
                match entries.into_iter().next() {
                    Some(e) if e.position == p => {
                        if !self.deliver(e).await {
                            self.replay.insert(p);
                            return Ok(());
                        }
                    }
                    _ => {
                        self.redelivery_counts.remove(&p);
                    }
                }
                continue;
            }
            let entries = match self.compacted_read().await? {
                Some(e) => e,
                None => self.read_next(self.read_budget()).await?,
            };
            tracing::trace!(read = entries.len(), from = %self.cursor.read_position(), "read");
            if entries.is_empty() {
                return Ok(());
            }
            let mut iter = entries.into_iter();
            while let Some(e) = iter.next() {
                let p = e.position;
                if !self.deliver(e).await {
                    // Nobody can take it now: read it again later.
                    self.cursor.seek_read(p);
                    return Ok(());
                }
                if !self.any_ready() {
                    if let Some(next) = iter.next() {
                        self.cursor.seek_read(next.position);
                    }
                    return Ok(());
                }
            }
        }
    }

    /// A `read_compacted` subscription whose read position is at or below the
    /// compaction horizon reads the compacted view: the kept entries (with
    /// their original positions) not yet acknowledged; past the last of them
    /// the read position jumps to just after the horizon. None: read the topic.
    async fn compacted_read(&mut self) -> Result<Option<Vec<Entry>>, BrokerError> {
        if !self.read_compacted {
            return Ok(None);
        }
        let Some(view) = self.topic.compacted_view() else {
            return Ok(None);
        };
        loop {
            let rp = self.cursor.read_position();
            if rp > view.horizon {
                return Ok(None);
            }
            let raw = view.read_from(rp, self.max_read).await?;
            let Some(last) = raw.last().map(|e| e.position) else {
                self.cursor.seek_read(Position::new(
                    view.horizon.ledger_id,
                    view.horizon.entry_id + 1,
                ));
                return Ok(None);
            };
            self.cursor
                .seek_read(Position::new(last.ledger_id, last.entry_id + 1));
            let fresh: Vec<Entry> = raw
                .into_iter()
                .filter(|e| !self.cursor.is_acked(e.position))
                .collect();
            if !fresh.is_empty() {
                return Ok(Some(fresh));
            }
        }
    }

    /// For redelivery on a `read_compacted` subscription: the compacted entry
    /// at `p`, when `p` is at or below the horizon.
    async fn compacted_entry(&self, p: Position) -> Result<Option<Entry>, BrokerError> {
        if !self.read_compacted {
            return Ok(None);
        }
        match self.topic.compacted_view() {
            Some(view) if p <= view.horizon => view.get(p).await,
            _ => Ok(None),
        }
    }

    /// On a terminated topic read to its end, each consumer hears
    /// REACHED_END_OF_TOPIC once (Pulsar: `Consumer.reachedEndOfTopic`).
    fn tell_end_of_topic(&mut self) {
        if self.topic.terminated().is_none()
            || self.cursor.has_more()
            || !self.replay.is_empty()
            || self.consumers.iter().all(|c| c.told_end)
        {
            return;
        }
        if let Some(ks) = &self.ks
            && !ks.replay().is_empty()
        {
            return;
        }
        for c in self.consumers.iter_mut().filter(|c| !c.told_end) {
            c.told_end = true;
            let _ =
                c.tx.try_send(OutFrame::command(commands::reached_end_of_topic(
                    c.consumer_id,
                )));
        }
    }

    /// Delivers one entry to the consumer whose turn it is. False when no
    /// consumer can take it (it stays undelivered).
    async fn deliver(&mut self, e: Entry) -> bool {
        let meta = match payload::peek_metadata(&e.data) {
            Ok(m) => m,
            Err(err) => {
                // Stored bytes we cannot read: skip them rather than wedge the subscription.
                warn!(position = %e.position, error = %err, "unreadable entry acknowledged and skipped");
                self.cursor.delete(&[e.position]);
                return true;
            }
        };
        if meta.marker_type.is_some_and(|m| m != 0) {
            self.cursor.delete(&[e.position]);
            return true;
        }
        if self.sub_type == Some(SubType::Shared)
            && let Some(at) = meta.deliver_at_time.filter(|t| *t > 0)
            && (at as u64) > now_ms()
        {
            self.delayed
                .entry(at as u64)
                .or_default()
                .push((e.position, 0, 0));
            return true;
        }
        let Some(i) = self.pick() else { return false };
        self.send_to(i, &e, &meta).await
    }

    /// Sends one entry to consumer `i` and charges its permits. False when the
    /// consumer's connection is gone (it is removed).
    async fn send_to(&mut self, i: usize, e: &Entry, meta: &MessageMetadata) -> bool {
        let n = strobe_wire::batch::message_count(meta);
        let redelivery = self
            .redelivery_counts
            .get(&e.position)
            .copied()
            .unwrap_or(0);
        let ack_set = if strobe_wire::batch::is_batch(meta) {
            self.cursor
                .batch_unacked_set(e.position)
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let c = &mut self.consumers[i];
        let mut id = commands::message_id(e.position.ledger_id, e.position.entry_id);
        // As Pulsar: the partition index rides in the id (clients read it from there).
        id.partition = self.topic.name.partition().map(|p| p as i32);
        if strobe_wire::batch::is_batch(meta) {
            id.batch_size = Some(n as i32);
        }
        let frame = match commands::message_frame(
            c.consumer_id,
            id,
            redelivery,
            ack_set,
            None,
            &e.data,
            c.keep_entry_metadata,
        ) {
            Ok(f) => f,
            Err(err) => {
                warn!(position = %e.position, error = %err, "cannot frame entry; skipped");
                self.cursor.delete(&[e.position]);
                return true;
            }
        };
        if c.tx.send(frame).await.is_err() {
            // The connection is gone; its consumers are being removed.
            let (conn, cid) = (c.conn_id, c.consumer_id);
            self.remove(conn, cid);
            return false;
        }
        tracing::trace!(position = %e.position, consumer_id = c.consumer_id, redelivery, "dispatched");
        c.permits -= i64::from(permits_for_entry(n));
        let m = f64::from(n.max(1));
        self.avg_msgs_per_entry = Some(self.avg_msgs_per_entry.map_or(m, |a| 0.9 * a + 0.1 * m));
        self.topic
            .counters
            .add_out(u64::from(n), e.data.len() as u64);
        let c = &mut self.consumers[i];
        c.unacked.insert(e.position, n);
        c.unacked_messages += u64::from(n);
        true
    }

    fn release_due_delayed(&mut self) {
        let now = now_ms();
        while let Some((&t, _)) = self.delayed.iter().next() {
            if t > now {
                break;
            }
            let ps = self.delayed.remove(&t).unwrap_or_default();
            self.replay_delayed(ps);
        }
    }

    /// Acknowledges messages older than the topic's TTL, from the oldest
    /// unacknowledged on, a bounded number per pass (Pulsar's
    /// `PersistentMessageExpiryMonitor`). Only durable subscriptions expire.
    async fn expire_by_ttl(&mut self) -> Result<(), BrokerError> {
        let ttl = self.topic.message_ttl_secs();
        if ttl == 0 || !self.durable {
            return Ok(());
        }
        self.expire_older_than(ttl).await
    }

    async fn expire_older_than(&mut self, ttl: u64) -> Result<(), BrokerError> {
        let cutoff = now_ms().saturating_sub(ttl * 1000);
        let mut from = self.cursor.first_unacked_floor();
        let mut expired = Vec::new();
        'scan: while expired.len() < 10_000 {
            let entries = self.topic.ledger.read(from, 500).await?;
            let Some(last) = entries.last() else { break };
            from = Position::new(last.position.ledger_id, last.position.entry_id + 1);
            for e in &entries {
                match payload::peek_metadata(&e.data) {
                    Ok(m) if m.publish_time < cutoff => expired.push(e.position),
                    Ok(_) => break 'scan,
                    Err(_) => expired.push(e.position),
                }
            }
        }
        if expired.is_empty() {
            return Ok(());
        }
        debug!(count = expired.len(), ttl, "messages expired");
        self.cursor.delete(&expired);
        for p in expired {
            self.forget(p);
        }
        Ok(())
    }

    /// Due delayed messages go through the replay queue; `deliver` then finds
    /// their time has passed.
    fn replay_delayed(&mut self, ps: Vec<(Position, u32, u32)>) {
        match self.ks.as_mut() {
            Some(ks) => {
                for (p, hash, n) in ps {
                    ks.add_to_replay(p, hash, n);
                }
            }
            None => self.replay.extend(ps.into_iter().map(|(p, _, _)| p)),
        }
    }

    fn forget(&mut self, p: Position) {
        if let Some(ks) = self.ks.as_mut() {
            ks.on_ack(p);
        }
        for c in &mut self.consumers {
            if let Some(n) = c.unacked.remove(&p) {
                c.unacked_messages = c.unacked_messages.saturating_sub(u64::from(n));
            }
        }
        self.replay.remove(&p);
        self.redelivery_counts.remove(&p);
    }

    fn ack(&mut self, conn_id: u64, consumer_id: u64, ack: CommandAck) -> Result<(), BrokerError> {
        // Acks from a consumer the subscription no longer has (closed by a seek,
        // say, with acks still in flight) must not touch the new position.
        if self.find_mut(conn_id, consumer_id).is_none() {
            return Err(BrokerError::ConsumerNotFound(format!(
                "consumer {consumer_id} is not connected to subscription {}",
                self.name
            )));
        }
        let cumulative = ack.ack_type() == AckType::Cumulative;
        if cumulative && matches!(self.sub_type, Some(SubType::Shared | SubType::KeyShared)) {
            return Err(BrokerError::NotAllowed(format!(
                "cumulative acknowledgement is not allowed on Shared subscription {}",
                self.name
            )));
        }
        for id in &ack.message_id {
            let p = Position::new(id.ledger_id, id.entry_id);
            let batch_size = self
                .consumers
                .iter()
                .find_map(|c| c.unacked.get(&p).copied())
                .or(id.batch_size.map(|b| b.max(0) as u32))
                .unwrap_or((id.ack_set.len() * 64) as u32);
            if cumulative {
                if id.ack_set.is_empty() {
                    self.cursor.mark_delete(p);
                } else {
                    if p.entry_id > 0 {
                        self.cursor
                            .mark_delete(Position::new(p.ledger_id, p.entry_id - 1));
                    }
                    self.cursor.ack_batch_set(p, batch_size, &id.ack_set);
                }
                let done: Vec<Position> = self
                    .consumers
                    .iter()
                    .flat_map(|c| c.unacked.range(..=p).map(|(k, _)| *k))
                    .filter(|k| self.cursor.is_acked(*k))
                    .collect();
                for k in done {
                    self.forget(k);
                }
                let replayed: Vec<Position> = self.replay.range(..=p).copied().collect();
                for k in replayed {
                    if self.cursor.is_acked(k) {
                        self.forget(k);
                    }
                }
            } else {
                if id.ack_set.is_empty() {
                    self.cursor.delete(&[p]);
                } else {
                    self.cursor.ack_batch_set(p, batch_size, &id.ack_set);
                }
                if self.cursor.is_acked(p) {
                    self.forget(p);
                }
            }
        }
        Ok(())
    }

    fn redeliver(&mut self, conn_id: u64, consumer_id: u64, ids: Vec<MessageIdData>) {
        let redeliver_all = ids.is_empty();
        if self.ks.is_some() {
            self.redeliver_key_shared(conn_id, consumer_id, ids);
            return;
        }
        let Some(c) = self.find_mut(conn_id, consumer_id) else {
            return;
        };
        let positions: Vec<Position> = if redeliver_all {
            let all: Vec<Position> = c.unacked.keys().copied().collect();
            c.unacked.clear();
            c.unacked_messages = 0;
            all
        } else {
            let mut ps = Vec::new();
            for id in ids {
                let p = Position::new(id.ledger_id, id.entry_id);
                if let Some(n) = c.unacked.remove(&p) {
                    c.unacked_messages = c.unacked_messages.saturating_sub(u64::from(n));
                    ps.push(p);
                }
            }
            ps
        };
        if self.sub_type == Some(SubType::Shared) || !redeliver_all {
            for p in &positions {
                *self.redelivery_counts.entry(*p).or_insert(0) += 1;
            }
            self.replay.extend(positions);
        } else {
            self.give_back(positions);
        }
    }

    /// Pulsar's order: disconnect every consumer, reset the cursor, then
    /// answer. Clients count on CLOSE_CONSUMER arriving before the SUCCESS,
    /// and acknowledgements still in flight then find no consumer to apply to.
    async fn seek(&mut self, conn_id: u64, consumer_id: u64, request_id: u64, target: SeekTarget) {
        let requester = self
            .consumers
            .iter()
            .find(|c| c.conn_id == conn_id && c.consumer_id == consumer_id)
            .map(|c| c.tx.clone());
        let Some(reply_tx) = requester else { return };
        let result = self.reset_to(target).await;
        let reply = match &result {
            Ok(()) => commands::success(request_id),
            Err(e) => commands::error(request_id, e.server_error(), e.to_string()),
        };
        let _ = reply_tx.send(OutFrame::command(reply)).await;
    }

    async fn reset_to(&mut self, target: SeekTarget) -> Result<(), BrokerError> {
        let p = match target {
            SeekTarget::Message(s) => s.resolve(&self.topic.ledger),
            SeekTarget::PublishTime(t) => find_by_publish_time(&self.topic.ledger, t).await?,
        };
        for c in self.consumers.drain(..) {
            c.closed_by_broker.store(true, Ordering::Release);
            let close = commands::close_consumer(c.consumer_id, None, None);
            let _ = c.tx.send(OutFrame::command(close)).await;
        }
        self.sub_type = None;
        *self.shared_type.lock() = None;
        self.active = None;
        self.ks = None;
        self.ks_meta = None;
        self.replay.clear();
        self.delayed.clear();
        self.redelivery_counts.clear();
        self.cursor.reset(p).await.map_err(BrokerError::from)
    }

    async fn admin(&mut self, op: AdminOp) -> Result<AdminReply, BrokerError> {
        match op {
            AdminOp::Reset(target) => {
                self.reset_to(target).await?;
                Ok(AdminReply::Done)
            }
            AdminOp::Skip(n) => {
                self.cursor.skip(n);
                Ok(AdminReply::Done)
            }
            AdminOp::ExpireOlderThan(secs) => {
                self.expire_older_than(secs).await?;
                Ok(AdminReply::Done)
            }
            AdminOp::Peek(n) => {
                let mut from = self.cursor.first_unacked_floor();
                let mut left = n.max(1);
                loop {
                    let entries = self.topic.ledger.read(from, 500).await?;
                    let Some(last) = entries.last() else {
                        return Ok(AdminReply::Peeked(None));
                    };
                    from = Position::new(last.position.ledger_id, last.position.entry_id + 1);
                    for e in entries {
                        if self.cursor.is_acked(e.position) {
                            continue;
                        }
                        left -= 1;
                        if left == 0 {
                            return Ok(AdminReply::Peeked(Some(e)));
                        }
                    }
                }
            }
            AdminOp::Info => Ok(AdminReply::Info(self.info())),
        }
    }

    fn info(&self) -> SubscriptionInfo {
        let names: HashMap<ConsumerId, String> = self
            .consumers
            .iter()
            .map(|c| (ConsumerId(c.seq), c.name.clone()))
            .collect();
        let consumers = self
            .consumers
            .iter()
            .map(|c| {
                let mut info = ConsumerInfo {
                    name: c.name.clone(),
                    conn_id: c.conn_id,
                    consumer_id: c.consumer_id,
                    permits: c.permits,
                    unacked_messages: c.unacked_messages,
                    ..Default::default()
                };
                if let Some(ks) = &self.ks {
                    let st = ks.consumer_stats(ConsumerId(c.seq));
                    info.key_hash_ranges = st
                        .assigned_ranges
                        .iter()
                        .map(|r| (r.start, r.end))
                        .collect();
                    info.buckets = st.assigned_buckets;
                    info.draining_hashes = st
                        .draining
                        .draining_hashes
                        .iter()
                        .map(|d| (d.hash, d.unacked_entries, d.blocked_attempts))
                        .collect();
                    info.draining_hashes_cleared_total = st.draining.draining_hashes_cleared_total;
                    info.waiting_for = st
                        .waiting_for
                        .iter()
                        .map(|(h, owner)| (*h, names.get(owner).cloned().unwrap_or_default()))
                        .collect();
                }
                info
            })
            .collect();
        SubscriptionInfo {
            sub_type: self.sub_type,
            backlog: self.cursor.backlog(),
            consumers,
        }
    }
}

/// Key_Shared: the decisions come from `strobe_dispatch::key_shared`; this
/// part reads entries, resolves their sticky keys and sends what it is told to.
impl Subscription {
    fn add_key_shared(&mut self, spec: &ConsumerSpec) -> Result<(), BrokerError> {
        let meta = spec.key_shared.clone().unwrap_or(KeySharedSpec {
            sticky: false,
            ranges: Vec::new(),
            allow_out_of_order: false,
            entry_buckets: false,
        });
        if meta.entry_buckets && !meta.sticky {
            return Err(BrokerError::ConsumerAssignError(
                "entryBucketDispatch needs the STICKY key-shared mode".into(),
            ));
        }
        match &self.ks_meta {
            Some(first) if !self.consumers.is_empty() => {
                if first.sticky != meta.sticky
                    || first.allow_out_of_order != meta.allow_out_of_order
                    || first.entry_buckets != meta.entry_buckets
                {
                    return Err(BrokerError::ConsumerBusy(format!(
                        "subscription {} is Key_Shared with mode {}, allowOutOfOrderDelivery={}, entryBucketDispatch={}; \
                         this consumer asked for mode {}, allowOutOfOrderDelivery={}, entryBucketDispatch={}",
                        self.name,
                        if first.sticky { "STICKY" } else { "AUTO_SPLIT" },
                        first.allow_out_of_order,
                        first.entry_buckets,
                        if meta.sticky { "STICKY" } else { "AUTO_SPLIT" },
                        meta.allow_out_of_order,
                        meta.entry_buckets
                    )));
                }
            }
            _ => {
                let mode = if meta.entry_buckets {
                    KeySharedMode::EntryBuckets {
                        boundaries: meta.ranges.clone(),
                    }
                } else if meta.sticky {
                    KeySharedMode::Sticky
                } else if self.ks_consistent_hashing {
                    KeySharedMode::auto_split()
                } else {
                    KeySharedMode::auto_split_ranges()
                };
                let mut config = KeySharedConfig::new(mode);
                config.allow_out_of_order_delivery = meta.allow_out_of_order;
                config.max_read_batch = self.max_read;
                let ks = KeySharedDispatcher::new(config)
                    .map_err(|e| BrokerError::ConsumerAssignError(e.to_string()))?;
                self.ks = Some(ks);
                self.ks_meta = Some(meta.clone());
            }
        }
        let ks = self.ks.as_mut().expect("created above");
        ks.add_consumer(&KsConsumer {
            id: ConsumerId(self.next_seq + 1),
            name: spec.name.clone(),
            hash_ranges: meta.ranges,
        })
        .map_err(|e| BrokerError::ConsumerAssignError(e.to_string()))?;
        Ok(())
    }

    /// Each consumer's permits as the dispatcher counts them (0 once it holds
    /// `max_unacked` messages).
    fn ks_permits(&self) -> HashMap<ConsumerId, u32> {
        self.consumers
            .iter()
            .map(|c| {
                let full =
                    self.max_unacked != 0 && c.unacked_messages >= u64::from(self.max_unacked);
                let p = if full {
                    0
                } else {
                    c.permits.clamp(0, i64::from(u32::MAX)) as u32
                };
                (ConsumerId(c.seq), p)
            })
            .collect()
    }

    async fn dispatch_key_shared(&mut self) -> Result<(), BrokerError> {
        loop {
            let permits = self.ks_permits();
            let Some(ks) = self.ks.as_ref() else {
                return Ok(());
            };
            match ks.next_read(|c| permits.get(&c).copied().unwrap_or(0)) {
                NextRead::Idle => return Ok(()),
                NextRead::Replay(positions) => {
                    let mut entries = Vec::with_capacity(positions.len());
                    for p in positions {
                        let found = if self.cursor.is_acked(p) {
                            None
                        } else {
                            self.read_at(p)
                                .await?
                                .into_iter()
                                .next()
                                .filter(|e| e.position == p)
                        };
                        match found {
                            Some(e) => entries.push(e),
                            // Acked meanwhile, or trimmed: it no longer waits.
                            None => {
                                if let Some(ks) = self.ks.as_mut() {
                                    ks.on_ack(p);
                                }
                            }
                        }
                    }
                    if !self.ks_deliver(ReadType::Replay, entries).await {
                        return Ok(());
                    }
                }
                NextRead::Normal { max_entries } => {
                    let entries = self.read_next(max_entries).await?;
                    if entries.is_empty() {
                        return Ok(());
                    }
                    if !self.ks_deliver(ReadType::Normal, entries).await {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Hands one read to the dispatcher, entry by entry, and sends what it
    /// dispatches. False when the subscription changed under the read (a
    /// consumer's connection went away): the caller starts over.
    async fn ks_deliver(&mut self, read_type: ReadType, entries: Vec<Entry>) -> bool {
        let mut permits = self.ks_permits();
        let Some(ks) = self.ks.as_ref() else {
            return false;
        };
        let mut pass = ks.begin_read(read_type);
        for e in entries {
            let meta = match payload::peek_metadata(&e.data) {
                Ok(m) if m.marker_type.is_none_or(|t| t == 0) => m,
                Ok(_) => {
                    self.cursor.delete(&[e.position]);
                    self.forget(e.position);
                    continue;
                }
                Err(err) => {
                    warn!(position = %e.position, error = %err, "unreadable entry acknowledged and skipped");
                    self.cursor.delete(&[e.position]);
                    self.forget(e.position);
                    continue;
                }
            };
            let Some(ks) = self.ks.as_mut() else {
                return false;
            };
            let key = resolve_sticky_key(
                meta.ordering_key.as_deref(),
                meta.partition_key.as_deref(),
                meta.partition_key_b64_encoded(),
                Some(&meta.producer_name),
                Some(meta.sequence_id),
            );
            let hash = ks.entry_hash(&key, meta.entry_hash_min);
            let n = strobe_wire::batch::message_count(&meta);
            if read_type == ReadType::Normal
                && let Some(at) = meta.deliver_at_time.filter(|t| *t > 0)
                && (at as u64) > now_ms()
            {
                self.delayed
                    .entry(at as u64)
                    .or_default()
                    .push((e.position, hash, n));
                continue;
            }
            match ks.on_entry(&mut pass, e.position, hash, n, |c| {
                permits.get(&c).copied().unwrap_or(0)
            }) {
                Decision::Dispatch(cid) => {
                    let Some(i) = self.consumers.iter().position(|c| ConsumerId(c.seq) == cid)
                    else {
                        continue;
                    };
                    if !self.send_to(i, &e, &meta).await {
                        return false;
                    }
                    if let Some(p) = permits.get_mut(&cid) {
                        *p = p.saturating_sub(permits_for_entry(n));
                    }
                }
                Decision::Hold(_) | Decision::Skip => {}
            }
        }
        true
    }

    fn redeliver_key_shared(&mut self, conn_id: u64, consumer_id: u64, ids: Vec<MessageIdData>) {
        let Some(c) = self.find_mut(conn_id, consumer_id) else {
            return;
        };
        let cid = ConsumerId(c.seq);
        let positions: Vec<Position> = if ids.is_empty() {
            c.unacked.keys().copied().collect()
        } else {
            ids.iter()
                .map(|id| Position::new(id.ledger_id, id.entry_id))
                .filter(|p| c.unacked.contains_key(p))
                .collect()
        };
        for p in &positions {
            if let Some(n) = c.unacked.remove(p) {
                c.unacked_messages = c.unacked_messages.saturating_sub(u64::from(n));
            }
        }
        for p in &positions {
            *self.redelivery_counts.entry(*p).or_insert(0) += 1;
        }
        if let Some(ks) = self.ks.as_mut() {
            ks.redeliver(cid, Some(&positions));
        }
    }
}

/// The first entry published at or after `t` (ms), or the end of the topic.
async fn find_by_publish_time(ledger: &ManagedLedger, t: u64) -> Result<Position, BrokerError> {
    let mut from = ledger.first_position();
    loop {
        let entries = ledger.read(from, 500).await?;
        let Some(last) = entries.last() else { break };
        from = Position::new(last.position.ledger_id, last.position.entry_id + 1);
        for e in &entries {
            if payload::peek_metadata(&e.data).is_ok_and(|m| m.publish_time >= t) {
                return Ok(e.position);
            }
        }
    }
    Ok(match ledger.last_confirmed() {
        Some(p) => Position::new(p.ledger_id, p.entry_id + 1),
        None => ledger.first_position(),
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

async fn sleep_until_ms(t: u64) {
    let now = now_ms();
    if t > now {
        tokio::time::sleep(Duration::from_millis(t - now)).await;
    }
}
