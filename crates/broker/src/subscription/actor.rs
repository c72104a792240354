//! The subscription's actor: one task per subscription owns its cursor,
//! consumers and dispatcher, and takes the connections' commands in order.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use strobe_dispatch::key_shared::{
    ConsumerId, ConsumerSpec as KsConsumer, KeySharedConfig, KeySharedDispatcher, KeySharedMode,
};
use strobe_dispatch::{DelayedDeliveryTracker, RedeliveryTracker};
use strobe_ledger::{ManagedCursor, Position};
use strobe_model::SubType;
use strobe_wire::{OutFrame, commands, payload};
use tokio::sync::mpsc;
use tracing::{Instrument, debug, info_span, warn};

use super::api::{
    AdminOp, AdminReply, ConsumerInfo, ConsumerSpec, DispatchSettings, KeySharedSpec, SeekTarget,
    SubscriptionInfo, TopicView, find_by_publish_time, now_ms, sleep_until_ms,
};
use super::handle::{Cmd, SubscriptionHandle};
use super::kind::Kind;
use crate::BrokerError;

/// Commands queued for one subscription before senders wait.
const COMMAND_QUEUE: usize = 256;

pub(super) struct Consumer {
    pub(super) conn_id: u64,
    pub(super) consumer_id: u64,
    pub(super) name: String,
    pub(super) priority_level: i32,
    /// Order of arrival (the Key_Shared dispatcher's consumer id).
    pub(super) seq: u64,
    pub(super) tx: mpsc::Sender<OutFrame>,
    pub(super) keep_entry_metadata: bool,
    pub(super) protocol_version: i32,
    pub(super) closed_by_broker: Arc<AtomicBool>,
    pub(super) permits: i64,
    /// Delivered, not yet acknowledged: position -> messages in the entry.
    pub(super) unacked: BTreeMap<Position, u32>,
    pub(super) unacked_messages: u64,
    /// REACHED_END_OF_TOPIC was sent (the topic is terminated and read to its end).
    pub(super) told_end: bool,
    pub(super) v5_managed: bool,
    /// PIP-84: stamped on every message sent; raised by a redeliver-all
    /// that carries a higher one.
    pub(super) epoch: Option<u64>,
}

/// The actor.
pub(crate) struct Subscription {
    pub(super) topic: Arc<dyn TopicView>,
    pub(super) name: String,
    pub(super) durable: bool,
    pub(super) cursor: ManagedCursor,
    /// The dispatcher of the subscription's kind (see [`Kind`]).
    pub(super) kind: Kind,
    /// What the handles see of the kind and the consumers.
    shared_type: Arc<Mutex<Option<SubType>>>,
    consumer_count: Arc<std::sync::atomic::AtomicUsize>,
    v5_consumer_count: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) consumers: Vec<Consumer>,
    next_seq: u64,
    pub(super) redelivery: RedeliveryTracker,
    /// Delayed messages (Shared and Key_Shared).
    pub(super) delayed: DelayedDeliveryTracker,
    pub(super) settings: DispatchSettings,
    pub(super) max_read: usize,
    pub(super) max_unacked: u32,
    /// Moving average of messages per entry delivered (batches): turns the
    /// consumers' permits, counted in messages, into entries to read. None
    /// until an entry was delivered (the first read then takes one entry).
    pub(super) avg_msgs_per_entry: Option<f64>,
    /// The subscription reads the topic's compacted view (set by its first consumer).
    pub(super) read_compacted: bool,
    /// Acks held by open transactions.
    pub(super) pending: strobe_txn::pending_ack::PendingAcks,
    /// The consumer (connection id, consumer id) that made the pending
    /// cumulative ack, with its transaction; None for one restored from
    /// the store (made on another broker).
    pub(super) cumulative_by: Option<(strobe_model::TxnId, u64, u64)>,
    /// Transactions whose outcome was applied here but whose pending-ack record could not be
    /// deleted: the next check deletes it. (Only these: every outcome reaches every
    /// subscription of a topic, and a delete for each was a metadata write per subscription
    /// per transaction.)
    pub(super) records_left: std::collections::HashSet<strobe_model::TxnId>,
    /// The subscription's own dispatch rate (`throttle.rs`).
    pub(super) sub_dispatch: strobe_tenancy::RateLimiter,
    /// Paused by a dispatch rate until then.
    pub(super) throttled_until: Option<tokio::time::Instant>,
}

impl Subscription {
    pub fn start(
        topic: Arc<dyn TopicView>,
        settings: DispatchSettings,
        name: String,
        durable: bool,
        cursor: ManagedCursor,
    ) -> SubscriptionHandle {
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let closed = Arc::new(AtomicBool::new(false));
        let shared_type = Arc::new(Mutex::new(None));
        let consumer_count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let v5_consumer_count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handle = SubscriptionHandle {
            consumer_count: consumer_count.clone(),
            v5_consumer_count: v5_consumer_count.clone(),
            name: name.clone(),
            durable,
            cursor: cursor.clone(),
            tx,
            closed: closed.clone(),
            sub_type: shared_type.clone(),
        };
        let span = info_span!("subscription", topic = %topic.name(), subscription = %name);
        let sub = Subscription {
            topic,
            name,
            durable,
            cursor,
            kind: Kind::Idle,
            shared_type,
            consumer_count,
            v5_consumer_count,
            consumers: Vec::new(),
            next_seq: 0,
            redelivery: RedeliveryTracker::default(),
            delayed: DelayedDeliveryTracker::default(),
            settings,
            max_read: settings.max_read_entries.max(1),
            max_unacked: settings.max_unacked_messages,
            avg_msgs_per_entry: None,
            read_compacted: false,
            pending: Default::default(),
            cumulative_by: None,
            records_left: Default::default(),
            sub_dispatch: Default::default(),
            throttled_until: None,
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
        self.load_pending_acks().await;
        let mut lac = self.topic.ledger().watch_last_confirmed();
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
            self.v5_consumer_count.store(
                self.consumers.iter().filter(|c| c.v5_managed).count(),
                Ordering::Release,
            );
            let next_due = self.delayed.next_due();
            // Only with a TTL (set later, the topic nudges the actor): a tick
            // every 5 s for each of 100,000 idle subscriptions was 20,000
            // wake-ups a second (issue 47).
            let ttl_on = self.durable && self.topic.message_ttl_secs() > 0;
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
                _ = tokio::time::sleep_until(self.throttled_until.unwrap_or_else(tokio::time::Instant::now)),
                    if self.throttled_until.is_some() =>
                {
                    self.throttled_until = None;
                }
                _ = sleep_until_ms(next_due.unwrap_or(0)), if next_due.is_some() => {
                    let due = self.delayed.take_due(now_ms());
                    self.replay_due(due);
                }
                _ = ttl_tick.tick(), if ttl_on => {
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
                let r = self.add(*spec);
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
                let ack = *ack;
                if let (Some(m), Some(l)) = (ack.txnid_most_bits, ack.txnid_least_bits) {
                    let t = strobe_model::TxnId {
                        most_sig_bits: m,
                        least_sig_bits: l,
                    };
                    self.txn_ack(conn_id, consumer_id, ack, t, reply);
                    return Continue(());
                }
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
                epoch,
            } => self.redeliver(conn_id, consumer_id, ids, epoch),
            Cmd::EndTxn {
                txn,
                commit,
                listed,
                reply,
            } => {
                let _ = reply.send(self.end_txn(txn, commit, listed).await);
            }
            Cmd::Seek {
                conn_id,
                consumer_id,
                request_id,
                target,
            } => {
                self.seek(conn_id, consumer_id, request_id, *target).await;
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
                    && let Err(e) = self.topic.ledger().delete_cursor(&self.name).await
                {
                    let _ = reply.send(Err(e.into()));
                    return Continue(());
                }
                self.consumers.clear();
                let _ = reply.send(Ok(()));
                return Break(());
            }
            Cmd::Admin(op, reply) => {
                let r = self.admin(*op).await;
                let _ = reply.send(r);
            }
            Cmd::Wake => {}
            Cmd::Close { tell, done } => {
                let mut closing = Vec::new();
                for c in self.consumers.drain(..) {
                    c.closed_by_broker.store(true, Ordering::Release);
                    if tell {
                        crate::tell::tell(
                            &c.tx,
                            OutFrame::command(commands::close_consumer(c.consumer_id, None, None)),
                        );
                    } else {
                        closing.push(super::handle::ClosingConsumer {
                            consumer_id: c.consumer_id,
                            tx: c.tx,
                        });
                    }
                }
                if self.durable
                    && let Err(e) = self.cursor.flush().await
                {
                    warn!(error = %e, "flushing the cursor failed");
                }
                let _ = done.send(closing);
                return Break(());
            }
        }
        Continue(())
    }

    pub(super) fn find_mut(&mut self, conn_id: u64, consumer_id: u64) -> Option<&mut Consumer> {
        self.consumers
            .iter_mut()
            .find(|c| c.conn_id == conn_id && c.consumer_id == consumer_id)
    }

    /// The kind and its dispatcher are set by the first consumer; later ones must match.
    fn set_sub_type(&mut self, sub_type: Option<SubType>) {
        *self.shared_type.lock() = sub_type;
    }

    fn add(&mut self, spec: ConsumerSpec) -> Result<(), BrokerError> {
        let current = self.kind.sub_type();
        if !self.consumers.is_empty() {
            if current != Some(spec.sub_type) {
                return Err(BrokerError::ConsumerBusy(format!(
                    "subscription {} is of type {}, not {}",
                    self.name,
                    current.map(SubType::as_str).unwrap_or("?"),
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
        if let Some(max) = self.topic.limits().get().max_consumers_per_subscription
            && self.consumers.len() >= max as usize
        {
            return Err(BrokerError::ConsumerBusy(format!(
                "Subscription reached max consumers limit: {} has {max}",
                self.name
            )));
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
        } else if self.consumers.is_empty() {
            self.kind = Kind::new(spec.sub_type);
        }
        self.set_sub_type(Some(spec.sub_type));
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
            v5_managed: spec.v5_managed,
            epoch: spec.epoch,
            permits: 0,
            unacked: BTreeMap::new(),
            unacked_messages: 0,
            told_end: !spec.end_of_topic_ok,
        });
        if self.consumers.len() == 1 {
            self.read_compacted = spec.read_compacted;
            // A fresh start: everything not acknowledged is delivered again.
            self.cursor.rewind();
            if let Some(replay) = self.kind.replay_mut() {
                replay.clear();
            }
            self.delayed.clear();
        }
        self.update_active();
        debug!(consumers = self.consumers.len(), "consumer added");
        Ok(())
    }

    /// A Key_Shared consumer joins: the first one's KeySharedMeta makes the
    /// dispatcher, later ones must ask for the same mode.
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
        match &self.kind {
            Kind::KeyShared { meta: first, .. } if !self.consumers.is_empty() => {
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
                } else if self.settings.key_shared_consistent_hashing {
                    KeySharedMode::auto_split()
                } else {
                    KeySharedMode::auto_split_ranges()
                };
                let mut config = KeySharedConfig::new(mode);
                config.allow_out_of_order_delivery = meta.allow_out_of_order;
                config.max_read_batch = self.max_read;
                let ks = KeySharedDispatcher::new(config)
                    .map_err(|e| BrokerError::ConsumerAssignError(e.to_string()))?;
                self.kind = Kind::KeyShared {
                    ks: Box::new(ks),
                    meta: meta.clone(),
                };
            }
        }
        let ks = self.kind.key_shared_mut().expect("made above");
        ks.add_consumer(&KsConsumer {
            id: ConsumerId(self.next_seq + 1),
            name: spec.name.clone(),
            hash_ranges: meta.ranges,
        })
        .map_err(|e| BrokerError::ConsumerAssignError(e.to_string()))?;
        Ok(())
    }

    pub(super) fn remove(&mut self, conn_id: u64, consumer_id: u64) {
        let Some(i) = self
            .consumers
            .iter()
            .position(|c| c.conn_id == conn_id && c.consumer_id == consumer_id)
        else {
            return;
        };
        let c = self.consumers.remove(i);
        self.consumer_left(c.seq, c.unacked.keys().copied().collect());
        if self.consumers.is_empty() {
            self.set_sub_type(None);
        }
        debug!(consumers = self.consumers.len(), "consumer removed");
    }

    /// On a terminated topic read to its end, each consumer hears
    /// REACHED_END_OF_TOPIC once (Pulsar: `Consumer.reachedEndOfTopic`).
    fn tell_end_of_topic(&mut self) {
        if !self.topic.is_terminated()
            || self.cursor.has_more()
            || !self.kind.replay_is_empty()
            || self.consumers.iter().all(|c| c.told_end)
        {
            return;
        }
        for c in self.consumers.iter_mut().filter(|c| !c.told_end) {
            c.told_end = true;
            crate::tell::tell(
                &c.tx,
                OutFrame::command(commands::reached_end_of_topic(c.consumer_id)),
            );
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
            let entries = self.topic.ledger().read(from, 500).await?;
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
            SeekTarget::Message(s) => s.resolve(self.topic.ledger()),
            SeekTarget::PublishTime(t) => find_by_publish_time(self.topic.ledger(), t).await?,
        };
        for c in self.consumers.drain(..) {
            c.closed_by_broker.store(true, Ordering::Release);
            let close = commands::close_consumer(c.consumer_id, None, None);
            let _ = c.tx.send(OutFrame::command(close)).await;
        }
        self.kind = Kind::Idle;
        self.set_sub_type(None);
        self.delayed.clear();
        self.redelivery.clear();
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
            AdminOp::ClearBacklog => {
                if let Some(last) = self.topic.ledger().last_confirmed() {
                    self.cursor.mark_delete(last);
                }
                Ok(AdminReply::Done)
            }
            AdminOp::AckUpTo(p, inclusive) => {
                if inclusive {
                    self.cursor.mark_delete(p);
                } else {
                    self.cursor.mark_delete_before(p);
                }
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
                    let entries = self.topic.ledger().read(from, 500).await?;
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
                if let Some(ks) = self.kind.key_shared() {
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
            sub_type: self.kind.sub_type(),
            backlog: self.cursor.backlog(),
            consumers,
        }
    }
}
