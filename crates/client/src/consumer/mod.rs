//! Consumers and readers (Pulsar's `ConsumerImpl`, `ReaderImpl`,
//! `PersistentAcknowledgmentsGroupingTracker`, `NegativeAcksTracker`).
//!
//! The connection's reader hands whole MESSAGE frames to the consumer; the
//! consumer verifies, decompresses and splits them only when the application
//! asks for the next message, so one channel hop costs one entry, not one
//! message. Flow control follows the Java client: `receiver_queue_size`
//! permits at subscribe, then more each time half of them have been consumed.
//! Acks are grouped and sent every `ack_group_time` (or at 1000 ids); a batch
//! message is acked by index (batch-index acks) until its whole entry is.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use strobe_model::{MessageId, Position, SubType};
use strobe_wire::proto::{
    self, CommandSeek, KeySharedMeta, KeySharedMode, MessageIdData, command_subscribe,
};
use strobe_wire::{Command, commands};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::client::Client;
use crate::connection::{Connection, ConsumerEvent};
use crate::epoch::Epoch;
use crate::error::{Error, Result};
use crate::util::{Backoff, full_topic_name};

mod acks;
mod grouping;
mod unpack;

use grouping::AckState;
pub(crate) use grouping::GiveBack;

/// Where a new subscription starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialPosition {
    #[default]
    Latest,
    Earliest,
}

/// Where [`Consumer::seek`] moves the subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTo {
    Id(MessageId),
    /// The first message published at or after this time (ms since the epoch).
    PublishTime(u64),
    Earliest,
    Latest,
}

/// A received message.
#[derive(Debug, Clone)]
pub struct Message {
    pub id: MessageId,
    pub topic: Arc<str>,
    pub payload: Bytes,
    pub key: Option<String>,
    pub ordering_key: Option<Bytes>,
    pub properties: Vec<(String, String)>,
    pub publish_time: u64,
    pub event_time: Option<u64>,
    pub producer_name: Arc<str>,
    pub sequence_id: u64,
    pub redelivery_count: u32,
    /// The entry's PIP-486 stamp, when the producer set one.
    pub entry_hash_range: Option<(u32, u32)>,
}

pub(crate) fn earliest_id() -> MessageIdData {
    commands::message_id(u64::MAX, u64::MAX)
}

pub(crate) fn latest_id() -> MessageIdData {
    commands::message_id(i64::MAX as u64, i64::MAX as u64)
}

pub(crate) fn id_data(id: &MessageId) -> MessageIdData {
    MessageIdData {
        ledger_id: id.position.ledger_id,
        entry_id: id.position.entry_id,
        partition: (id.partition >= 0).then_some(id.partition),
        batch_index: (id.batch_index >= 0).then_some(id.batch_index),
        batch_size: (id.batch_size > 0).then_some(id.batch_size),
        ..Default::default()
    }
}

fn sub_type_wire(t: SubType) -> command_subscribe::SubType {
    match t {
        SubType::Exclusive => command_subscribe::SubType::Exclusive,
        SubType::Shared => command_subscribe::SubType::Shared,
        SubType::Failover => command_subscribe::SubType::Failover,
        SubType::KeyShared => command_subscribe::SubType::KeyShared,
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) sub_type: SubType,
    pub(crate) initial_position: InitialPosition,
    pub(crate) name: Option<String>,
    pub(crate) receiver_queue_size: u32,
    pub(crate) durable: bool,
    pub(crate) start_message_id: Option<MessageIdData>,
    pub(crate) start_inclusive: bool,
    pub(crate) ack_group_time: Duration,
    pub(crate) nack_delay: Duration,
    pub(crate) batch_index_ack: bool,
    pub(crate) key_shared: Option<KeySharedMeta>,
    pub(crate) read_compacted: bool,
    pub(crate) priority: Option<i32>,
    /// The consumer's metadata (SUBSCRIBE's `metadata`).
    pub(crate) properties: Vec<(String, String)>,
}

/// Builds a [`Consumer`].
#[derive(Debug, Clone)]
pub struct ConsumerBuilder {
    pub(crate) client: Client,
    pub(crate) topic: String,
    pub(crate) subscription: String,
    pub(crate) cfg: Config,
}

impl ConsumerBuilder {
    pub(crate) fn new(client: Client, topic: &str, subscription: &str) -> Self {
        ConsumerBuilder {
            client,
            topic: topic.to_owned(),
            subscription: subscription.to_owned(),
            cfg: Config {
                sub_type: SubType::Exclusive,
                initial_position: InitialPosition::Latest,
                name: None,
                receiver_queue_size: 1000,
                durable: true,
                start_message_id: None,
                start_inclusive: false,
                ack_group_time: Duration::from_millis(100),
                nack_delay: Duration::from_secs(60),
                batch_index_ack: true,
                key_shared: None,
                read_compacted: false,
                priority: None,
                properties: Vec::new(),
            },
        }
    }

    /// A key and value of the consumer's metadata (shown in topic stats).
    pub fn property(mut self, k: &str, v: &str) -> Self {
        self.cfg.properties.push((k.to_owned(), v.to_owned()));
        self
    }

    pub fn sub_type(mut self, t: SubType) -> Self {
        self.cfg.sub_type = t;
        self
    }

    pub fn initial_position(mut self, p: InitialPosition) -> Self {
        self.cfg.initial_position = p;
        self
    }

    pub fn consumer_name(mut self, n: &str) -> Self {
        self.cfg.name = Some(n.to_owned());
        self
    }

    /// Permits granted to the broker (messages it may push ahead of `recv`).
    pub fn receiver_queue_size(mut self, n: u32) -> Self {
        self.cfg.receiver_queue_size = n.max(1);
        self
    }

    /// Acks are sent at most this long after they are made (0: at once).
    pub fn ack_group_time(mut self, d: Duration) -> Self {
        self.cfg.ack_group_time = d;
        self
    }

    /// How long a negatively acked message waits before redelivery.
    pub fn negative_ack_delay(mut self, d: Duration) -> Self {
        self.cfg.nack_delay = d;
        self
    }

    /// Ack batch messages one by one (true, the default) or only whole entries.
    pub fn batch_index_ack(mut self, b: bool) -> Self {
        self.cfg.batch_index_ack = b;
        self
    }

    pub fn read_compacted(mut self, b: bool) -> Self {
        self.cfg.read_compacted = b;
        self
    }

    pub fn priority(mut self, p: i32) -> Self {
        self.cfg.priority = Some(p);
        self
    }

    /// Key_Shared with explicit settings (mode, ranges, out-of-order delivery).
    pub fn key_shared(mut self, meta: KeySharedMeta) -> Self {
        self.cfg.sub_type = SubType::KeyShared;
        self.cfg.key_shared = Some(meta);
        self
    }

    /// PIP-486: subscribe Key_Shared STICKY with `entryBucketDispatch = true`
    /// and `hashRanges` = the segment's full bucket-boundary list built from
    /// `splits` (see [`equal_width_splits`]); the broker spreads whole buckets
    /// over the consumers.
    pub fn entry_bucket_dispatch(mut self, splits: &[u32]) -> Self {
        self.cfg.sub_type = SubType::KeyShared;
        self.cfg.key_shared = Some(KeySharedMeta {
            key_shared_mode: KeySharedMode::Sticky as i32,
            hash_ranges: crate::entry_bucket_ranges(splits),
            allow_out_of_order_delivery: Some(false),
            entry_bucket_dispatch: Some(true),
        });
        self
    }

    pub async fn subscribe(self) -> Result<Consumer> {
        Consumer::open(self.client, &self.topic, self.subscription, self.cfg).await
    }
}

pub(crate) fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// A subscription's consumer. `recv` takes `&mut self`: one task reads it.
#[derive(Debug)]
pub struct Consumer {
    client: Client,
    topic: Arc<str>,
    subscription: String,
    id: u64,
    cfg: Config,
    acks: Arc<Mutex<AckState>>,
    rx: mpsc::UnboundedReceiver<ConsumerEvent>,
    tx: mpsc::UnboundedSender<ConsumerEvent>,
    conn: Arc<Connection>,
    pub(crate) queue: VecDeque<Message>,
    consumed: u32,
    trackers: HashMap<Position, Vec<u64>>,
    needs_reconnect: bool,
    /// A SUBSCRIBE sent on this connection whose answer was not taken (the
    /// caller's timeout dropped the reconnect midway): the broker may hold
    /// that consumer, so it is closed before subscribing again.
    half_subscribed: Option<Arc<Connection>>,
    pub(crate) last_dequeued: Option<MessageId>,
    skip: Option<(MessageId, bool)>,
    end_of_topic: bool,
    active: Option<bool>,
    ticker: JoinHandle<()>,
    closed: bool,
    /// PIP-84 (see `epoch`): raised by a redeliver-all, here or by a
    /// transaction that aborted.
    epoch: Epoch,
    /// The epoch the queued messages belong to: once the epoch is raised,
    /// they are dropped (the broker sends them again).
    queue_epoch: u64,
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.ticker.abort();
        if !self.closed {
            self.acks.lock().expect("ack lock").flush(self.id);
            self.conn.unregister_consumer(self.id);
            let _ = self.conn.send_command(commands::close_consumer_request(
                self.conn.next_request_id(),
                self.id,
            ));
        }
    }
}

impl Consumer {
    async fn open(
        client: Client,
        topic: &str,
        subscription: String,
        cfg: Config,
    ) -> Result<Consumer> {
        let topic: Arc<str> = full_topic_name(topic)?.into();
        let (tx, rx) = mpsc::unbounded_channel();
        let id = client.next_id();
        let skip = cfg
            .start_message_id
            .as_ref()
            .filter(|s| s.ledger_id < i64::MAX as u64)
            .map(|s| (from_data(s), cfg.start_inclusive));
        let mut c = Consumer {
            conn: client.service_connection().await?,
            client,
            topic,
            subscription,
            id,
            acks: Arc::new(Mutex::new(AckState::default())),
            rx,
            tx,
            queue: VecDeque::new(),
            consumed: 0,
            trackers: HashMap::new(),
            needs_reconnect: false,
            half_subscribed: None,
            last_dequeued: None,
            skip,
            end_of_topic: false,
            active: None,
            ticker: tokio::spawn(async {}),
            closed: false,
            epoch: Epoch::default(),
            queue_epoch: 0,
            cfg,
        };
        c.connect(Some(Instant::now() + Duration::from_secs(60)))
            .await?;
        let (acks, period, cid) = (c.acks.clone(), c.cfg.ack_group_time, c.id);
        let wake = acks.lock().expect("ack lock").wake.clone();
        c.ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(period.max(Duration::from_millis(1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // Nothing to send: no timer until an ack is queued (100,000
                // idle consumers ticking ten times a second kept a client's
                // core busy, issue 47).
                if acks.lock().expect("ack lock").is_idle() {
                    wake.notified().await;
                    tick.reset();
                    continue;
                }
                tick.tick().await;
                let mut a = acks.lock().expect("ack lock");
                a.flush(cid);
                a.redeliver_due(cid, Instant::now());
            }
        });
        Ok(c)
    }

    /// Looks up, subscribes (with retries) and grants the first permits.
    async fn connect(&mut self, deadline: Option<Instant>) -> Result<()> {
        let mut backoff = Backoff::new();
        loop {
            match self.subscribe_once(deadline).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_retriable() => {
                    let wait = backoff.next();
                    if deadline.is_some_and(|d| Instant::now() + wait > d) {
                        return Err(e);
                    }
                    debug!(topic = %self.topic, error = %e, "subscribe failed, retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn subscribe_once(&mut self, deadline: Option<Instant>) -> Result<()> {
        let conn = self
            .client
            .lookup_with_backoff(&self.topic, deadline)
            .await?;
        conn.register_consumer(self.id, self.tx.clone());
        self.half_subscribed = Some(conn.clone());
        let rid = conn.next_request_id();
        let mut cmd = commands::subscribe(
            rid,
            self.id,
            &self.topic,
            &self.subscription,
            sub_type_wire(self.cfg.sub_type),
        );
        cmd.consumer_name = self.cfg.name.clone();
        cmd.durable = Some(self.cfg.durable);
        cmd.start_message_id = self.cfg.start_message_id.clone();
        cmd.read_compacted = Some(self.cfg.read_compacted);
        cmd.priority_level = self.cfg.priority;
        cmd.key_shared_meta = self.cfg.key_shared.clone();
        cmd.consumer_epoch = Some(self.epoch.current());
        cmd.metadata = self
            .cfg
            .properties
            .iter()
            .map(|(k, v)| strobe_wire::proto::KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect();
        cmd.initial_position = Some(match self.cfg.initial_position {
            InitialPosition::Latest => command_subscribe::InitialPosition::Latest,
            InitialPosition::Earliest => command_subscribe::InitialPosition::Earliest,
        } as i32);
        match conn.request(rid, cmd).await {
            Ok(Command::Success(_)) => {}
            Ok(other) => {
                return Err(Error::Unexpected(format!(
                    "{:?} to SUBSCRIBE",
                    other.kind()
                )));
            }
            Err(e) => {
                conn.unregister_consumer(self.id);
                self.half_subscribed = None;
                return Err(e);
            }
        }
        conn.send_command(commands::flow(self.id, self.cfg.receiver_queue_size))?;
        self.half_subscribed = None;
        self.acks.lock().expect("ack lock").conn = Some(conn.clone());
        self.conn = conn;
        self.consumed = 0;
        Ok(())
    }

    async fn reconnect(&mut self) -> Result<()> {
        // An earlier reconnect dropped midway may have left a consumer on the
        // broker: closed, it gives back what it was sent (redelivered to
        // the new one, in order), and nothing it sent is taken.
        if let Some(c) = self.half_subscribed.clone() {
            c.unregister_consumer(self.id);
            let rid = c.next_request_id();
            let _ = c
                .request(rid, commands::close_consumer_request(rid, self.id))
                .await;
            self.half_subscribed = None;
        }
        // What was queued or handed over will be redelivered; a reader
        // restarts after what it returned.
        while self.rx.try_recv().is_ok() {}
        self.queue.clear();
        self.trackers.clear();
        if !self.cfg.durable
            && let Some(last) = self.last_dequeued
        {
            self.cfg.start_message_id = Some(id_data(&last));
            self.cfg.start_inclusive = false;
            self.skip = Some((last, false));
        }
        self.acks.lock().expect("ack lock").conn = None;
        self.connect(None).await?;
        self.needs_reconnect = false;
        Ok(())
    }

    /// What gives back this consumer's unacknowledged messages from outside it.
    /// The connection and consumer id, for requests made on the consumer's behalf.
    pub(crate) fn wire(&self) -> (Arc<Connection>, u64) {
        (self.conn.clone(), self.id)
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn subscription(&self) -> &str {
        &self.subscription
    }

    /// For Failover: whether this consumer is the active one, as last told.
    pub fn is_active(&self) -> Option<bool> {
        self.active
    }

    /// Whether the broker said the topic is terminated and everything was delivered.
    pub fn reached_end_of_topic(&self) -> bool {
        self.end_of_topic && self.queue.is_empty()
    }

    /// The next message. Cancel-safe.
    pub async fn recv(&mut self) -> Result<Message> {
        loop {
            self.drop_stale();
            if let Some(m) = self.queue.pop_front() {
                self.consumed += 1;
                self.maybe_flow();
                self.last_dequeued = Some(m.id);
                return Ok(m);
            }
            if self.closed {
                return Err(Error::Closed);
            }
            if self.needs_reconnect {
                // Boxed: the reconnect state machine (lookup, subscribe) is
                // large, and `recv` is called once per message.
                Box::pin(self.reconnect()).await?;
                continue;
            }
            match self.rx.recv().await {
                Some(ev) => self.on_event(ev),
                None => return Err(Error::Closed),
            }
        }
    }

    /// The next message if one is already here (queued, or in frames the
    /// connection has handed over); never waits. Reconnecting is left to `recv`.
    pub fn try_recv(&mut self) -> Result<Option<Message>> {
        loop {
            self.drop_stale();
            if let Some(m) = self.queue.pop_front() {
                self.consumed += 1;
                self.maybe_flow();
                self.last_dequeued = Some(m.id);
                return Ok(Some(m));
            }
            if self.closed {
                return Err(Error::Closed);
            }
            if self.needs_reconnect {
                return Ok(None);
            }
            match self.rx.try_recv() {
                Ok(ev) => self.on_event(ev),
                Err(_) => return Ok(None),
            }
        }
    }

    /// The next message, or `None` after `timeout`.
    pub async fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<Message>> {
        match tokio::time::timeout(timeout, self.recv()).await {
            Ok(r) => r.map(Some),
            Err(_) => Ok(None),
        }
    }

    fn on_event(&mut self, ev: ConsumerEvent) {
        match ev {
            ConsumerEvent::Message(cmd, data) => {
                if let Err(e) = self.unpack(cmd, data) {
                    warn!(topic = %self.topic, error = %e, "dropping an entry that cannot be read");
                    self.consumed += 1;
                    self.maybe_flow();
                }
            }
            ConsumerEvent::Closed => self.needs_reconnect = true,
            ConsumerEvent::ActiveChange(a) => self.active = Some(a),
            ConsumerEvent::EndOfTopic => self.end_of_topic = true,
        }
    }

    fn maybe_flow(&mut self) {
        if self.consumed >= (self.cfg.receiver_queue_size / 2).max(1) {
            let _ = self
                .conn
                .send_command(commands::flow(self.id, self.consumed));
            self.consumed = 0;
        }
    }

    /// Moves the subscription. Messages already queued are dropped; the
    /// broker closes the consumer, which resubscribes on the next `recv`.
    pub async fn seek(&mut self, to: SeekTo) -> Result<()> {
        let rid = self.conn.next_request_id();
        let (message_id, message_publish_time) = match to {
            SeekTo::Id(id) => (Some(id_data(&id)), None),
            SeekTo::PublishTime(t) => (None, Some(t)),
            SeekTo::Earliest => (Some(earliest_id()), None),
            SeekTo::Latest => (Some(latest_id()), None),
        };
        let cmd = CommandSeek {
            consumer_id: self.id,
            request_id: rid,
            message_id: message_id.clone(),
            message_publish_time,
        };
        self.conn.request(rid, cmd).await?;
        {
            let mut a = self.acks.lock().expect("ack lock");
            a.individual.clear();
            a.cumulative = None;
            a.nacks.clear();
        }
        self.queue.clear();
        self.trackers.clear();
        self.last_dequeued = None;
        self.skip = None;
        if !self.cfg.durable {
            self.cfg.start_message_id = message_id.or(Some(earliest_id()));
            self.cfg.start_inclusive = true;
            if let SeekTo::Id(id) = to {
                self.skip = Some((id, true));
            }
        }
        // Everything queued before the broker's answer predates the seek.
        while let Ok(ev) = self.rx.try_recv() {
            if let ConsumerEvent::Closed = ev {
                self.needs_reconnect = true;
            }
        }
        if !self.needs_reconnect {
            // A broker that keeps the consumer open after a seek: make sure it has permits.
            self.consumed = 0;
        }
        Ok(())
    }

    /// The id of the last message stored on the topic.
    pub async fn last_message_id(&self) -> Result<MessageId> {
        Ok(self.last_and_mark_delete().await?.0)
    }

    /// The topic's last message id and the subscription's mark-delete
    /// position (the last entry before where its cursor reads), if any.
    pub(crate) async fn last_and_mark_delete(&self) -> Result<(MessageId, Option<MessageId>)> {
        let rid = self.conn.next_request_id();
        let cmd = proto::CommandGetLastMessageId {
            consumer_id: self.id,
            request_id: rid,
        };
        match self.conn.request(rid, cmd).await? {
            Command::GetLastMessageIdResponse(r) => Ok((
                from_data(&r.last_message_id),
                r.consumer_mark_delete_position.as_ref().map(from_data),
            )),
            other => Err(Error::Unexpected(format!("{:?}", other.kind()))),
        }
    }

    /// Removes the subscription (the consumer must be its only one).
    pub async fn unsubscribe(mut self) -> Result<()> {
        let rid = self.conn.next_request_id();
        self.conn
            .request(
                rid,
                proto::CommandUnsubscribe {
                    consumer_id: self.id,
                    request_id: rid,
                    force: None,
                },
            )
            .await?;
        self.closed = true;
        self.conn.unregister_consumer(self.id);
        Ok(())
    }

    /// Sends pending acks and closes the consumer on the broker.
    pub async fn close(mut self) -> Result<()> {
        self.acks.lock().expect("ack lock").flush(self.id);
        self.closed = true;
        self.ticker.abort();
        self.conn.unregister_consumer(self.id);
        let rid = self.conn.next_request_id();
        self.conn
            .request(rid, commands::close_consumer_request(rid, self.id))
            .await
            .map(|_| ())
    }
}

fn from_data(d: &MessageIdData) -> MessageId {
    MessageId {
        position: Position::new(d.ledger_id, d.entry_id),
        partition: d.partition.unwrap_or(-1),
        batch_index: d.batch_index.unwrap_or(-1),
        batch_size: d.batch_size.unwrap_or(0),
    }
}

impl Client {
    pub fn consumer(&self, topic: &str, subscription: &str) -> ConsumerBuilder {
        ConsumerBuilder::new(self.clone(), topic, subscription)
    }
}
