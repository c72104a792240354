//! A topic's transaction state (its transaction buffer, Pulsar's
//! `TopicTransactionBuffer`): what the topic holds of each transaction and
//! the outcomes it applied. `txn` acts on it for the topic.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use strobe_ledger::Position;
use strobe_model::TxnId;
use strobe_txn::buffer::{MARKER_TXN_ABORT, MARKER_TXN_COMMIT, TxnBuffer};
use strobe_wire::proto::MessageMetadata;

use crate::txn::TxnContext;

/// Transactions remembered as ended, to refuse their late sends (bounded).
const ENDED_KEPT: usize = 10_000;

/// The topic's transaction state.
#[derive(Debug, Default)]
pub(crate) struct TopicTxn {
    pub(crate) ctx: Option<Arc<TxnContext>>,
    pub(crate) buffer: TxnBuffer,
    /// The metadata store has a buffer record for this topic (its log is replayed on load).
    pub(super) recorded: bool,
    /// Changed since the last snapshot.
    pub(super) dirty: bool,
    /// Outcomes being written (a marker in flight): a second caller waits on its receiver for
    /// the first's result (true: written).
    pub(super) ending: HashMap<TxnId, tokio::sync::watch::Receiver<Option<bool>>>,
    pub(super) ended: HashSet<TxnId>,
    pub(super) ended_order: VecDeque<TxnId>,
    pub(super) committed_total: u64,
    pub(super) aborted_total: u64,
}

/// A topic's transaction buffer, for the admin API and metrics (Pulsar's
/// `TransactionBufferStats`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnBufferStats {
    /// Transactions with entries here and no outcome yet.
    pub ongoing: usize,
    /// Aborted transactions whose entries are still in the log (skipped by readers).
    pub aborted_kept: usize,
    /// Outcomes applied since the topic loaded.
    pub committed_total: u64,
    pub aborted_total: u64,
    /// Readers see nothing from here on (the oldest ongoing transaction's first entry).
    pub max_read_position: Option<Position>,
}

impl TopicTxn {
    pub(super) fn mark_ended(&mut self, t: TxnId) {
        if self.ended.insert(t) {
            self.ended_order.push_back(t);
            if self.ended_order.len() > ENDED_KEPT
                && let Some(old) = self.ended_order.pop_front()
            {
                self.ended.remove(&old);
            }
        }
    }
}

/// The TXN_COMMIT / TXN_ABORT marker entry of `t`.
pub(super) fn marker(t: TxnId, commit: bool) -> Bytes {
    let meta = MessageMetadata {
        producer_name: "strobe-txn-marker".into(),
        sequence_id: 0,
        publish_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        marker_type: Some(if commit {
            MARKER_TXN_COMMIT
        } else {
            MARKER_TXN_ABORT
        }),
        txnid_most_bits: Some(t.most_sig_bits),
        txnid_least_bits: Some(t.least_sig_bits),
        ..Default::default()
    };
    strobe_wire::payload::encode(&meta, &[], true)
}

/// The transaction an entry's metadata names, if any.
pub(crate) fn txn_of(meta: &MessageMetadata) -> Option<TxnId> {
    match (meta.txnid_most_bits, meta.txnid_least_bits) {
        (Some(m), Some(l)) => Some(TxnId {
            most_sig_bits: m,
            least_sig_bits: l,
        }),
        _ => None,
    }
}
