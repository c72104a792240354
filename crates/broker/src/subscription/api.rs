//! What a subscription's users and its parts share: the view of its topic
//! ([`TopicView`]), the consumer and Key_Shared specs, the admin operations
//! and their replies, stats, and the time helpers. Nothing here depends on
//! the subscription's actor, so every part of it can.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use strobe_dispatch::key_shared::HashRange;
use strobe_ledger::{Entry, ManagedLedger, Position};
use strobe_model::{SubType, TopicName};
use strobe_wire::proto::MessageIdData;
use strobe_wire::{OutFrame, payload};
use tokio::sync::mpsc;

use crate::BrokerError;
use crate::compaction::CompactedView;

/// What a subscription needs of its topic. The topic implements it; the
/// subscription never sees the topic's producers or other subscriptions.
pub trait TopicView: Send + Sync + 'static {
    fn name(&self) -> &TopicName;
    fn ledger(&self) -> &ManagedLedger;
    /// The compacted view, for `read_compacted` subscriptions.
    fn compacted_view(&self) -> Option<Arc<CompactedView>>;
    /// Whether the topic was terminated (no more entries will come).
    fn is_terminated(&self) -> bool;
    /// The namespace's message TTL (0: none).
    fn message_ttl_secs(&self) -> u64;
    /// What the dispatcher follows of the topic's policies (delivery times,
    /// unacknowledged limits); `None`: the broker's settings alone.
    fn dispatch_policy(&self) -> Option<&crate::topic::DispatchPolicy> {
        None
    }
    /// Where the next appended entry will go (non-persistent topics drop
    /// what no consumer can take by moving the read position there).
    fn next_position(&self) -> Position;
    /// Entries the dispatcher read from storage, for the topic's stats.
    fn count_read(&self, entries: u64);
    /// Messages and bytes delivered, for the topic's stats.
    fn count_out(&self, messages: u64, bytes: u64);
    /// The subscription's actor stopped.
    fn subscription_ended(&self, name: &str);
    /// Whether entries of transaction `t` are to be skipped (it aborted).
    fn txn_aborted(&self, _t: strobe_model::TxnId) -> bool {
        false
    }
    /// The transaction context, when the broker takes transactions (persistent topics).
    fn txn_context(&self) -> Option<Arc<crate::txn::TxnContext>> {
        None
    }
    /// The topic's tenancy limits and dispatch bucket.
    fn limits(&self) -> &crate::limits::TopicLimits;
    /// The checks the subscription's transaction records are written with
    /// (see [`crate::txn::OwnerCheck`]).
    fn fence(&self) -> Result<Vec<strobe_metadata::Op>, BrokerError> {
        Ok(Vec::new())
    }
}

/// How a subscription reads and dispatches, from the broker's settings.
#[derive(Debug, Clone, Copy)]
pub struct DispatchSettings {
    /// Entries read at most at once.
    pub max_read_entries: usize,
    /// A consumer holding this many unacknowledged messages gets no more (0: no limit).
    pub max_unacked_messages: u32,
    /// Key_Shared AUTO_SPLIT uses consistent hashing (else hash ranges).
    pub key_shared_consistent_hashing: bool,
    /// Dispatch message rates count the messages in a batch (else entries).
    pub dispatch_throttling_on_batch_messages: bool,
}

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
    /// A V5 client's consumer of a legacy segment (its metadata has
    /// `__pulsar.v5.managed=true`): migrating the topic need not wait for it.
    pub v5_managed: bool,
    /// The consumer epoch it subscribed with (PIP-84), if any: its messages
    /// carry it, so the client can tell those sent before its latest
    /// redeliver-all from those after.
    pub epoch: Option<u64>,
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
    /// Acknowledge everything stored (Pulsar's clear backlog, `skip_all`).
    ClearBacklog,
    /// Acknowledge every message up to this position: including it, or
    /// (`false`) only those before it (Pulsar's expire by message id).
    AckUpTo(strobe_ledger::Position, bool),
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

/// The first entry published at or after `t` (ms), or the end of the topic.
pub async fn find_by_publish_time(ledger: &ManagedLedger, t: u64) -> Result<Position, BrokerError> {
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

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(super) async fn sleep_until_ms(t: u64) {
    let now = now_ms();
    if t > now {
        tokio::time::sleep(Duration::from_millis(t - now)).await;
    }
}
