//! One persistent topic: Pulsar's `PersistentTopic`. It owns the topic's
//! managed ledger, its producers (access modes, deduplication) and its
//! subscriptions.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use strobe_ledger::{
    AppendFuture, InitialPosition, LedgerBackend, LedgerConfig, ManagedLedger, Position,
};
use strobe_model::{SubType, TopicName};
use strobe_wire::proto::ProducerAccessMode;
use strobe_wire::{OutFrame, commands};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use crate::BrokerError;
pub use crate::enforce::{BacklogQuota, BacklogQuotas, RetentionPolicy};
pub use crate::subscription::DispatchSettings;
use crate::subscription::{
    ConsumerSpec, StartPosition, Subscription, SubscriptionHandle, TopicView,
};

/// A producer's identity on the broker: (connection, producer id).
pub type ProducerKey = (u64, u64);

#[derive(Debug)]
struct ProducerEntry {
    name: String,
    mode: ProducerAccessMode,
    /// The connection's writer, to close the producer from the broker side.
    tx: mpsc::Sender<OutFrame>,
    /// A V5 client's producer of a legacy segment (PIP-475).
    v5_managed: bool,
}

/// What a new producer gets.
#[derive(Debug)]
pub struct ProducerGrant {
    pub name: String,
    pub last_sequence_id: i64,
    pub topic_epoch: Option<u64>,
    /// For WaitForExclusive: resolves when the producer holds the topic.
    pub wait: Option<oneshot::Receiver<Result<u64, BrokerError>>>,
}

#[derive(Debug)]
pub struct AddProducer<'a> {
    pub key: ProducerKey,
    pub name: String,
    pub user_named: bool,
    pub mode: ProducerAccessMode,
    pub topic_epoch: Option<u64>,
    pub tx: &'a mpsc::Sender<OutFrame>,
    /// Its metadata has `__pulsar.v5.managed=true`.
    pub v5_managed: bool,
}

/// How long a resend waits for its first copy's outcome before the client
/// is told to send it again (an append outlives this only when the store
/// hangs; the send that follows is decided afresh).
const RESEND_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A WaitForExclusive producer: told the topic epoch once it holds the topic.
type Waiter = (
    ProducerKey,
    ProducerEntry,
    oneshot::Sender<Result<u64, BrokerError>>,
);

#[derive(Debug, Default)]
struct TopicState {
    producers: HashMap<ProducerKey, ProducerEntry>,
    /// The producer holding exclusive access, if any.
    exclusive: Option<ProducerKey>,
    /// WaitForExclusive producers, in arrival order.
    waiting: VecDeque<Waiter>,
    topic_epoch: u64,
    dedup: Option<Dedup>,
    subscriptions: HashMap<String, SubscriptionHandle>,
    closed: bool,
    /// The topic is being handed to another broker: sends are held (never
    /// answered: the client resends them to the new owner).
    handing_off: bool,
    /// Set once the topic is terminated: the last message it will ever hold
    /// (None inside: terminated while empty).
    terminated: Option<Option<Position>>,
}

mod dedup;
mod dispatch_policy;
pub mod handoff;
mod producers;
mod txn;
mod txn_buffer;
mod view;

pub use dispatch_policy::DispatchPolicy;

pub(crate) use dedup::CURSOR as DEDUP_CURSOR;
use dedup::Dedup;
pub use txn_buffer::TxnBufferStats;
pub(crate) use txn_buffer::txn_of;

/// The outcome of a publish.
#[derive(Debug)]
pub enum Published {
    /// Resolves to the stored position once it is durable; a transaction's entry on a topic
    /// whose registration in it is still being written (see `TxnService::add_partitions`) is
    /// answered once that is durable too.
    Stored(AppendFuture, Option<crate::txn::Registration>),
    /// A sequence id at or below the producer's highest stored: not stored
    /// again.
    Duplicate,
    /// A sequence id at or below the producer's highest accepted but above
    /// its highest stored: a resend whose first copy is still being stored
    /// (the client reconnected and sent its pending messages again). It is
    /// answered once the first copy's outcome is known ([`Topic::settled`]):
    /// answered at once as a duplicate, it would acknowledge a message whose
    /// append may still fail.
    InFlight,
    /// Not stored and not answered: the topic is moving to another broker,
    /// or it closed the producer; the client sends it again once its
    /// producer is registered again (at the new owner).
    Held,
}

pub struct Topic {
    pub name: TopicName,
    pub ledger: ManagedLedger,
    pub settings: DispatchSettings,
    pub counters: TopicCounters,
    /// Message TTL in seconds (0: none), from the namespace's policy.
    message_ttl_secs: std::sync::atomic::AtomicU64,
    /// What its subscriptions' dispatchers follow of its policies.
    pub dispatch_policy: DispatchPolicy,
    /// The namespace's backlog quotas.
    backlog_quota: Mutex<BacklogQuotas>,
    /// Appends queued and not yet answered (terminate waits for them).
    in_flight: std::sync::atomic::AtomicU64,
    /// The last finished compaction, read by `read_compacted` subscriptions.
    pub compacted: crate::compaction::SharedView,
    pub compaction_status: Mutex<crate::compaction::CompactionStatus>,
    /// Held by a publish from its checks through queuing the append, so
    /// positions follow the order of the dedup decisions; the state lock is
    /// held only for the checks (an append can run a group commit, and
    /// subscriptions and connections read the state meanwhile).
    publish_lock: Mutex<()>,
    /// Mirrors `state.dedup.is_some()` (a completed publish skips the state
    /// lock when deduplication is off).
    dedup_on: std::sync::atomic::AtomicBool,
    /// Woken whenever a publish's outcome is recorded with deduplication on
    /// (resends of sends in flight wait for it: [`Topic::settled`]).
    dedup_settled: tokio::sync::Notify,
    /// Mirrors `state.terminated.is_some()` (subscriptions ask on every pass).
    is_terminated: std::sync::atomic::AtomicBool,
    state: Mutex<TopicState>,
    /// The transaction buffer (see `topic/txn.rs`).
    txn: Mutex<txn_buffer::TopicTxn>,
    /// Rates and limits from the tenancy policies (see `crate::limits`).
    pub limits: crate::limits::TopicLimits,
    /// In a cluster: what this instance's transaction records check (its
    /// bundle still served here).
    owner_check: Mutex<Option<Arc<dyn crate::txn::OwnerCheck>>>,
}

/// Totals since the topic was loaded, for stats and metrics.
#[derive(Debug, Default)]
pub struct TopicCounters {
    pub msg_in: std::sync::atomic::AtomicU64,
    pub bytes_in: std::sync::atomic::AtomicU64,
    pub msg_out: std::sync::atomic::AtomicU64,
    pub bytes_out: std::sync::atomic::AtomicU64,
    /// Entries the subscriptions' dispatchers read from storage (re-reads
    /// included: far above the entries dispatched means reads are wasted).
    pub entries_read: std::sync::atomic::AtomicU64,
    /// Publish-to-durable latency, in Pulsar's storage write latency buckets.
    pub write_latency: LatencyBuckets,
    /// Rates over the last stats interval, updated by the broker's stats task.
    pub rates: Mutex<Rates>,
}

/// Messages and bytes per second in and out, over the last stats interval.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rates {
    pub msg_in: f64,
    pub bytes_in: f64,
    pub msg_out: f64,
    pub bytes_out: f64,
    /// The counters at the start of the interval, and when it started.
    last: Totals,
    last_at: Option<std::time::Instant>,
}

/// The in and out counters read at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    msg_in: u64,
    bytes_in: u64,
    msg_out: u64,
    bytes_out: u64,
}

/// Upper bounds (ms) of Pulsar's `pulsar_storage_write_latency_le_*` buckets;
/// the last bucket is the overflow.
pub const LATENCY_BOUNDS_MS: [f64; 9] = [0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0];

/// [`LATENCY_BOUNDS_MS`] as a histogram's bounds.
#[derive(Debug)]
pub struct WriteLatencyBounds;

impl strobe_ledger::LatencyBounds for WriteLatencyBounds {
    const MS: &'static [f64] = &LATENCY_BOUNDS_MS;
}

/// Publish-to-durable latency of a topic's appends.
pub type LatencyBuckets = strobe_ledger::LatencyBuckets<WriteLatencyBounds>;

impl TopicCounters {
    pub fn add_in(&self, messages: u64, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.msg_in.fetch_add(messages, Relaxed);
        self.bytes_in.fetch_add(bytes, Relaxed);
    }
    pub fn add_out(&self, messages: u64, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.msg_out.fetch_add(messages, Relaxed);
        self.bytes_out.fetch_add(bytes, Relaxed);
    }

    /// Recomputes the rates from the counters' change since the last call.
    pub fn update_rates(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let now = std::time::Instant::now();
        let cur = Totals {
            msg_in: self.msg_in.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            msg_out: self.msg_out.load(Relaxed),
            bytes_out: self.bytes_out.load(Relaxed),
        };
        let mut r = self.rates.lock();
        if let Some(at) = r.last_at {
            let secs = now.duration_since(at).as_secs_f64().max(1e-3);
            let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
            r.msg_in = rate(cur.msg_in, r.last.msg_in);
            r.bytes_in = rate(cur.bytes_in, r.last.bytes_in);
            r.msg_out = rate(cur.msg_out, r.last.msg_out);
            r.bytes_out = rate(cur.bytes_out, r.last.bytes_out);
        }
        r.last = cur;
        r.last_at = Some(now);
    }
}

impl std::fmt::Debug for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic")
            .field("name", &self.name.to_string())
            .finish()
    }
}

impl Topic {
    pub async fn open(
        name: TopicName,
        backend: &dyn LedgerBackend,
        config: LedgerConfig,
        dedup: bool,
        settings: DispatchSettings,
    ) -> Result<Arc<Topic>, BrokerError> {
        let ledger = ManagedLedger::open(backend, &name.to_string(), config).await?;
        let mut state = TopicState::default();
        if dedup {
            state.dedup = Some(dedup::recover(&ledger).await?);
        }
        let dedup_on = std::sync::atomic::AtomicBool::new(state.dedup.is_some());
        let topic = Arc::new(Topic {
            name,
            ledger,
            settings,
            counters: TopicCounters::default(),
            message_ttl_secs: std::sync::atomic::AtomicU64::new(0),
            dispatch_policy: DispatchPolicy::default(),
            backlog_quota: Mutex::new(BacklogQuotas::default()),
            in_flight: std::sync::atomic::AtomicU64::new(0),
            compacted: Arc::new(Mutex::new(None)),
            compaction_status: Mutex::new(crate::compaction::CompactionStatus::NotRun),
            publish_lock: Mutex::new(()),
            dedup_on,
            dedup_settled: tokio::sync::Notify::new(),
            is_terminated: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(state),
            txn: Mutex::new(txn_buffer::TopicTxn::default()),
            limits: crate::limits::TopicLimits::default(),
            owner_check: Mutex::new(None),
        });
        Ok(topic)
    }

    /// Makes this instance's transaction records check `c` (a cluster's
    /// topics, at load).
    pub fn set_owner_check(&self, c: Arc<dyn crate::txn::OwnerCheck>) {
        *self.owner_check.lock() = Some(c);
    }

    /// The checks this instance's transaction records are written with.
    pub fn fence(&self) -> Result<Vec<strobe_metadata::Op>, BrokerError> {
        let c = self.owner_check.lock().clone();
        match c {
            Some(c) => c.fence(),
            None => Ok(Vec::new()),
        }
    }

    /// A TTL where there was none wakes the subscriptions, whose expiry
    /// check only ticks while there is one.
    pub fn set_message_ttl(&self, secs: u64) {
        let old = self
            .message_ttl_secs
            .swap(secs, std::sync::atomic::Ordering::Relaxed);
        if old == 0 && secs > 0 {
            self.state
                .lock()
                .subscriptions
                .values()
                .for_each(|s| s.nudge());
        }
    }

    pub fn message_ttl_secs(&self) -> u64 {
        self.message_ttl_secs
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stores one entry (the metadata-and-payload bytes as received, whose
    /// CRC-32C is `crc`) for
    /// producer `key`, if it is still registered (not fenced or closed by the
    /// broker). With deduplication on, a sequence id at or below the
    /// producer's highest is dropped. An entry of transaction `txn` goes to the
    /// transaction buffer.
    pub fn publish(
        &self,
        key: ProducerKey,
        producer: &str,
        highest_sequence_id: i64,
        section: Bytes,
        crc: u32,
        txn: Option<strobe_model::TxnId>,
    ) -> Result<Published, BrokerError> {
        let _order = self.publish_lock.lock();
        if let Some(t) = txn {
            self.txn_may_append(t)?;
        }
        {
            let mut st = self.state.lock();
            if st.handing_off {
                return Ok(Published::Held);
            }
            // Termination first: a terminated topic drops its producers, and
            // what they still send must read as refused for that reason (a
            // scalable topic's producer sends it on to the next segments).
            if st.terminated.is_some() {
                return Err(BrokerError::TopicTerminated(format!(
                    "topic {} is terminated",
                    self.name
                )));
            }
            // Closed by the broker (its topic closed, moved or fenced it):
            // CLOSE_PRODUCER is on its way, and the client sends what it
            // has pending again once it re-registers. Answering an error
            // here would make a client fail a message it is about to send
            // again; Pulsar drops these sends too.
            if !st.producers.contains_key(&key) {
                return Ok(Published::Held);
            }
            if let Some(d) = st.dedup.as_mut() {
                let last = d.pushed.get(producer).copied().unwrap_or(-1);
                if highest_sequence_id <= last {
                    let stored = d.persisted.get(producer).copied().unwrap_or(-1);
                    return Ok(if highest_sequence_id <= stored {
                        Published::Duplicate
                    } else {
                        Published::InFlight
                    });
                }
                d.pushed.insert(producer.to_owned(), highest_sequence_id);
            }
            // Counted under the state lock: terminate, once it has set
            // `terminated`, waits for every publish that got past the check.
            self.in_flight
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        match txn {
            None => Ok(Published::Stored(
                self.ledger.append_with_crc(section, crc),
                None,
            )),
            Some(t) => {
                let (fut, registration) = self.append_txn(t, section, crc);
                Ok(Published::Stored(fut, registration))
            }
        }
    }

    /// After a publish completes: record the persisted sequence id, or on
    /// failure forget what was pushed but not stored.
    pub fn published(&self, producer: &str, highest_sequence_id: i64, ok: bool) {
        self.in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        if !self.dedup_on.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let mut st = self.state.lock();
        if let Some(d) = st.dedup.as_mut() {
            if ok {
                // The highest: a connection that lost its client may still
                // record an earlier send after its successor's later ones.
                let persisted = d.persisted.entry(producer.to_owned()).or_insert(-1);
                *persisted = (*persisted).max(highest_sequence_id);
                d.snapshots.stored();
            } else {
                let persisted = d.persisted.get(producer).copied().unwrap_or(-1);
                d.pushed.insert(producer.to_owned(), persisted);
            }
            self.dedup_settled.notify_waiters();
        }
    }

    /// For a resend answered [`Published::InFlight`]: waits until its first
    /// copy's outcome is known. True once it is stored; false once it
    /// failed (or was not known within [`RESEND_WAIT`]): the client is told
    /// to send it again.
    pub async fn settled(&self, producer: &str, highest_sequence_id: i64) -> bool {
        let wait = async {
            loop {
                let changed = self.dedup_settled.notified();
                tokio::pin!(changed);
                // Registered before the check: an outcome recorded after it
                // wakes this wait.
                changed.as_mut().enable();
                {
                    let st = self.state.lock();
                    let Some(d) = st.dedup.as_ref() else {
                        return false;
                    };
                    if d.persisted.get(producer).copied().unwrap_or(-1) >= highest_sequence_id {
                        return true;
                    }
                    if d.pushed.get(producer).copied().unwrap_or(-1) < highest_sequence_id {
                        return false;
                    }
                }
                changed.await;
            }
        };
        tokio::time::timeout(RESEND_WAIT, wait)
            .await
            .unwrap_or(false)
    }

    /// Starts subscription `name`'s actor; it sees this topic as a [`TopicView`].
    fn start_subscription(
        self: &Arc<Self>,
        name: &str,
        durable: bool,
        cursor: strobe_ledger::ManagedCursor,
    ) -> SubscriptionHandle {
        let view: Arc<dyn TopicView> = self.clone();
        Subscription::start(view, self.settings, name.to_owned(), durable, cursor)
    }

    /// Adds a consumer to subscription `name`, creating the subscription if needed.
    pub async fn subscribe(
        self: &Arc<Self>,
        name: &str,
        durable: bool,
        initial: InitialPosition,
        start: Option<StartPosition>,
        consumer: ConsumerSpec,
    ) -> Result<SubscriptionHandle, BrokerError> {
        if name == DEDUP_CURSOR {
            return Err(BrokerError::NotAllowed(format!(
                "{DEDUP_CURSOR} is deduplication's cursor, not a subscription"
            )));
        }
        // Non-persistent topics keep no subscription state: readers' cursors only.
        let durable = durable && self.name.is_persistent();
        let limits = self.limits.get();
        let kind = consumer.sub_type.as_str();
        if strobe_tenancy::subscription_type_bit(kind)
            .is_some_and(|bit| limits.subscription_types_refused & bit != 0)
        {
            return Err(BrokerError::NotAllowed(format!(
                "Topic {} does not allow {kind} subscriptions (subscriptionTypesEnabled)",
                self.name
            )));
        }
        let existing = {
            let st = self.state.lock();
            let existing = st
                .subscriptions
                .get(name)
                .filter(|h| !h.is_closed())
                .cloned();
            if let Some(max) = limits.max_consumers {
                let consumers: usize = st.subscriptions.values().map(|s| s.consumer_count()).sum();
                if consumers >= max as usize {
                    return Err(BrokerError::ConsumerBusy(format!(
                        "Topic reached max consumers limit: {} has {max}",
                        self.name
                    )));
                }
            }
            if existing.is_none()
                && durable
                && limits.auto_subscription_refused
                && !self.ledger.cursor_names().iter().any(|c| c == name)
            {
                return Err(BrokerError::SubscriptionNotFound(format!(
                    "Subscription {name} does not exist on {} and creating subscriptions on \
                     subscribe is off (autoSubscriptionCreation)",
                    self.name
                )));
            }
            if existing.is_none()
                && let Some(max) = limits.max_subscriptions
                && st.subscriptions.values().filter(|h| !h.is_closed()).count() >= max as usize
            {
                return Err(BrokerError::NotAllowed(format!(
                    "Exceed the maximum number of subscriptions of the topic: {}",
                    self.name
                )));
            }
            existing
        };
        let handle = match existing {
            Some(h) if !h.is_closed() => h,
            _ => {
                let cursor = if durable {
                    self.ledger.open_cursor(name, initial).await?
                } else {
                    let start = match start {
                        Some(s) => s.resolve(&self.ledger),
                        None => match initial {
                            InitialPosition::Earliest => Position::EARLIEST,
                            InitialPosition::Latest => self.next_position(),
                        },
                    };
                    if consumer.read_compacted {
                        self.ledger.new_non_durable_cursor_unmoved(start)
                    } else {
                        self.ledger.new_non_durable_cursor(start)
                    }
                };
                let h = self.start_subscription(name, durable, cursor);
                let mut st = self.state.lock();
                if st.closed {
                    h.shutdown();
                    return Err(BrokerError::ServiceNotReady(format!(
                        "topic {} is closing",
                        self.name
                    )));
                }
                // Another subscribe may have raced us; keep the first.
                match st.subscriptions.get(name) {
                    Some(other) if !other.is_closed() && durable => {
                        h.shutdown();
                        other.clone()
                    }
                    _ => {
                        st.subscriptions.insert(name.to_owned(), h.clone());
                        h
                    }
                }
            }
        };
        handle.add_consumer(consumer).await?;
        Ok(handle)
    }

    /// The position a reader starting at "latest" reads first.
    pub fn next_position(&self) -> Position {
        match self.ledger.last_confirmed() {
            Some(p) => Position::new(p.ledger_id, p.entry_id + 1),
            None => self.ledger.first_position(),
        }
    }

    pub fn subscription_type_of(&self, name: &str) -> Option<SubType> {
        self.state
            .lock()
            .subscriptions
            .get(name)
            .and_then(|s| s.sub_type())
    }

    /// Forgets a subscription whose actor has stopped.
    pub fn subscription_ended(&self, name: &str) {
        let mut st = self.state.lock();
        if st.subscriptions.get(name).is_some_and(|s| s.is_closed()) {
            st.subscriptions.remove(name);
        }
    }

    pub fn subscription_names(&self) -> Vec<String> {
        self.state.lock().subscriptions.keys().cloned().collect()
    }

    pub fn subscription(&self, name: &str) -> Option<SubscriptionHandle> {
        self.state
            .lock()
            .subscriptions
            .get(name)
            .filter(|s| !s.is_closed())
            .cloned()
    }

    /// Creates a durable subscription with no consumer (admin API), starting
    /// at `start` (None: the end of the topic). 409 if it exists.
    pub async fn create_subscription(
        self: &Arc<Self>,
        name: &str,
        start: Option<Position>,
    ) -> Result<(), BrokerError> {
        if !self.name.is_persistent() {
            return Err(BrokerError::NotAllowed(
                "non-persistent topics have no durable subscriptions".into(),
            ));
        }
        if name == DEDUP_CURSOR
            || self.subscription(name).is_some()
            || self.ledger.cursor_names().iter().any(|c| c == name)
        {
            return Err(BrokerError::AlreadyExists(format!(
                "subscription {name} already exists"
            )));
        }
        let cursor = self
            .ledger
            .open_cursor(name, InitialPosition::Latest)
            .await?;
        if let Some(p) = start {
            cursor.reset(p).await?;
        }
        let h = self.start_subscription(name, true, cursor);
        self.state.lock().subscriptions.insert(name.to_owned(), h);
        Ok(())
    }

    /// A durable subscription that has no actor yet (no consumer since the
    /// topic loaded) is started so the admin API can act on it.
    pub async fn subscription_for_admin(
        self: &Arc<Self>,
        name: &str,
    ) -> Result<SubscriptionHandle, BrokerError> {
        if let Some(h) = self.subscription(name) {
            return Ok(h);
        }
        if !self.durable_subscription_names().iter().any(|c| c == name) {
            return Err(BrokerError::SubscriptionNotFound(format!(
                "subscription {name} does not exist"
            )));
        }
        let cursor = self
            .ledger
            .open_cursor(name, InitialPosition::Latest)
            .await?;
        let h = self.start_subscription(name, true, cursor);
        let mut st = self.state.lock();
        // One opened meanwhile is used; one closed meanwhile is replaced.
        match st.subscriptions.get(name) {
            Some(current) if !current.is_closed() => Ok(current.clone()),
            _ => {
                st.subscriptions.insert(name.to_owned(), h.clone());
                Ok(h)
            }
        }
    }

    /// Names of the durable subscriptions in storage (its cursors but
    /// deduplication's).
    pub fn durable_subscription_names(&self) -> Vec<String> {
        let mut names = self.ledger.cursor_names();
        names.retain(|c| c != DEDUP_CURSOR);
        names
    }

    /// Names of every subscription: durable ones from storage, plus readers.
    pub fn all_subscription_names(&self) -> Vec<String> {
        let mut names = self.durable_subscription_names();
        names.extend(self.subscription_names());
        names.sort();
        names.dedup();
        names
    }

    /// Subscription handles, for stats.
    pub fn subscriptions(&self) -> Vec<SubscriptionHandle> {
        self.state.lock().subscriptions.values().cloned().collect()
    }

    /// Connected producers' names.
    /// Producers and consumers connected now that are not a V5 client's
    /// (PIP-475: a topic migrates only without them, unless forced).
    pub fn v4_clients(&self) -> usize {
        let producers = self
            .state
            .lock()
            .producers
            .values()
            .filter(|p| !p.v5_managed)
            .count();
        let consumers: usize = self
            .subscriptions()
            .iter()
            .map(|s| s.v4_consumer_count())
            .sum();
        producers + consumers
    }

    pub fn set_backlog_quota(&self, q: BacklogQuotas) {
        *self.backlog_quota.lock() = q;
    }

    pub fn backlog_quota(&self) -> BacklogQuotas {
        *self.backlog_quota.lock()
    }

    /// The estimated backlog in bytes of the subscription furthest behind
    /// (entries not acknowledged × the topic's mean entry size), as Pulsar
    /// estimates it for its size quota.
    pub fn backlog_bytes(&self) -> u64 {
        let ls = self.ledger.stats();
        let mean = ls.bytes.checked_div(ls.entries).unwrap_or(0);
        let worst = self
            .subscriptions()
            .iter()
            .filter(|s| s.durable)
            .map(|s| s.cursor.backlog())
            .max()
            .unwrap_or(0);
        worst * mean
    }

    /// A new producer's refusal when the size quota is exceeded and its policy
    /// holds or refuses producers.
    fn quota_refusal(&self) -> Option<BrokerError> {
        let q = self.backlog_quota().size?;
        if q.limit < 0 || q.policy == RetentionPolicy::ConsumerBacklogEviction {
            return None;
        }
        let backlog = self.backlog_bytes();
        (backlog > q.limit as u64).then(|| BrokerError::BacklogQuotaExceeded {
            message: format!(
                "cannot create producer on topic {}: backlog of {backlog} bytes exceeds the quota of {} bytes",
                self.name, q.limit
            ),
            exception: q.policy == RetentionPolicy::ProducerException,
        })
    }

    /// The terminated state: `None` if the topic takes messages; `Some(last)`
    /// once terminated (`last` is the final message, None if there is none).
    pub fn terminated(&self) -> Option<Option<Position>> {
        if !self
            .is_terminated
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return None;
        }
        self.state.lock().terminated
    }

    /// Restores the terminated state recorded in the metadata store.
    pub fn restore_terminated(&self, last: Option<Position>) {
        self.state.lock().terminated = Some(last);
        self.is_terminated
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Pulsar's terminate: no more messages are accepted, producers are
    /// disconnected (re-creating them fails with TopicTerminatedError), and
    /// consumers that reach the end get REACHED_END_OF_TOPIC. Waits for the
    /// appends in flight, then returns the last message's position.
    pub async fn terminate(&self) -> Option<Position> {
        let subs = {
            let mut st = self.state.lock();
            if let Some(last) = st.terminated {
                return last;
            }
            st.terminated = Some(None);
            self.is_terminated
                .store(true, std::sync::atomic::Ordering::Release);
            st.exclusive = None;
            for (_, _, w) in st.waiting.drain(..) {
                let _ = w.send(Err(BrokerError::TopicTerminated("topic terminated".into())));
            }
            st.subscriptions.values().cloned().collect::<Vec<_>>()
        };
        // Appends already queued finish (bounded: they complete or fail).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while self.in_flight.load(std::sync::atomic::Ordering::Acquire) > 0
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        let last = self.ledger.last_confirmed();
        // Producers are closed only now: the receipts of the appends that
        // got in are queued on their connections first, so a client never
        // takes a stored message for a refused one (and sends it again to a
        // scalable topic's next segment). Sends meanwhile were refused as
        // terminated, in order.
        {
            let mut st = self.state.lock();
            st.terminated = Some(last);
            for ((_, pid), p) in st.producers.drain() {
                crate::tell::tell(
                    &p.tx,
                    OutFrame::command(commands::close_producer(pid, None, None)),
                );
            }
        }
        info!(topic = %self.name, last = ?last, "topic terminated");
        for s in subs {
            s.wake().await;
        }
        last
    }

    /// The last finished compaction, if any.
    pub fn compacted_view(&self) -> Option<Arc<crate::compaction::CompactedView>> {
        self.compacted.lock().clone()
    }

    /// Closes the topic: producers get CLOSE_PRODUCER, subscriptions close
    /// their consumers, and storage is flushed.
    /// What the inactive-topic check looks at.
    pub fn usage(&self) -> strobe_tenancy::inactive::Usage {
        usage_of(&self.state.lock())
    }

    /// Closes the topic for deletion if it is still unused as `check`
    /// judged it, atomically with the producers and consumers joining
    /// (they find it closed and load it again, after the deletion).
    pub fn close_if_unused(&self, mode: strobe_tenancy::InactiveTopicDeleteMode) -> bool {
        let mut st = self.state.lock();
        let usage = usage_of(&st);
        if st.closed || strobe_tenancy::inactive::is_active(mode, &usage) {
            return false;
        }
        st.closed = true;
        true
    }

    pub async fn close(&self) {
        if let Err(e) = self.snapshot_txn().await {
            warn!(topic = %self.name, error = %e, "transaction buffer snapshot failed");
        }
        let subs: Vec<SubscriptionHandle> = {
            let mut st = self.state.lock();
            st.closed = true;
            for ((_, pid), p) in st.producers.drain() {
                crate::tell::tell(
                    &p.tx,
                    OutFrame::command(commands::close_producer(pid, None, None)),
                );
            }
            for (_, _, w) in st.waiting.drain(..) {
                let _ = w.send(Err(BrokerError::ServiceNotReady("topic closing".into())));
            }
            st.subscriptions.drain().map(|(_, s)| s).collect()
        };
        for s in subs {
            s.close().await;
        }
        if let Err(e) = self.ledger.close().await {
            warn!(topic = %self.name, error = %e, "closing the ledger failed");
        }
        let view = self.compacted.lock().take();
        if let Some(v) = view {
            v.close().await;
        }
    }
}

/// Producers (waiting ones too), consumers, durable subscriptions and
/// whether any of them has a backlog.
fn usage_of(st: &TopicState) -> strobe_tenancy::inactive::Usage {
    let live = || st.subscriptions.values().filter(|s| !s.is_closed());
    strobe_tenancy::inactive::Usage {
        producers: st.producers.len() + st.waiting.len(),
        consumers: live().map(|s| s.consumer_count()).sum(),
        subscriptions: live().filter(|s| s.durable).count(),
        backlog: live().any(|s| s.durable && s.cursor.backlog() > 0),
    }
}
