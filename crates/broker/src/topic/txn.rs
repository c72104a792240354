//! A topic's part in transactions: its transaction buffer (see `strobe_txn::buffer`), restored
//! from the snapshot and the log when the topic loads, and the outcome applied to the buffer and
//! to every subscription's pending acks.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use strobe_ledger::{AppendFuture, Position};
use strobe_metadata::{Expect, MetadataError};
use strobe_model::TxnId;
use strobe_txn::buffer::{MARKER_TXN_ABORT, MARKER_TXN_COMMIT, TxnBuffer};
use strobe_txn::participant;
use strobe_txn::paths::{self, Participant};
use strobe_wire::proto::MessageMetadata;
use tracing::{debug, info};

use super::Topic;
use crate::BrokerError;
use crate::txn::TxnContext;

/// Transactions remembered as ended, to refuse their late sends (bounded).
const ENDED_KEPT: usize = 10_000;

/// The topic's transaction state.
#[derive(Debug, Default)]
pub(crate) struct TopicTxn {
    pub(crate) ctx: Option<Arc<TxnContext>>,
    pub(crate) buffer: TxnBuffer,
    /// The metadata store has a buffer record for this topic (its log is replayed on load).
    recorded: bool,
    /// Changed since the last snapshot.
    dirty: bool,
    /// Outcomes being written (a marker in flight).
    ending: HashSet<TxnId>,
    ended: HashSet<TxnId>,
    ended_order: VecDeque<TxnId>,
    committed_total: u64,
    aborted_total: u64,
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
    fn mark_ended(&mut self, t: TxnId) {
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
fn marker(t: TxnId, commit: bool) -> Bytes {
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

impl Topic {
    /// Restores the transaction buffer (snapshot, then the log after it) and starts taking
    /// transactional sends. Called once, before the topic serves anyone.
    pub async fn recover_txn(&self, ctx: &Arc<TxnContext>) -> Result<(), BrokerError> {
        let name = self.name.to_string();
        let snap = participant::load_buffer(&*ctx.store, &name).await?;
        let mut recorded = false;
        let mut buffer = TxnBuffer::default();
        if let Some(snap) = snap {
            recorded = true;
            let (b, from) = TxnBuffer::restore(&snap);
            buffer = b;
            buffer.prune(self.ledger.first_position());
            let mut from = from;
            let mut replayed = 0u64;
            loop {
                let entries = self.ledger.read(from, 1000).await?;
                let Some(last) = entries.last() else { break };
                from = Position::new(last.position.ledger_id, last.position.entry_id + 1);
                for e in &entries {
                    if let Ok(m) = strobe_wire::payload::peek_metadata(&e.data)
                        && let Some(t) = txn_of(&m)
                    {
                        buffer.replay(e.position, t, m.marker_type);
                    }
                }
                replayed += entries.len() as u64;
            }
            for t in buffer.ongoing() {
                ctx.hold(t, &name);
            }
            self.ledger.set_hold(buffer.withhold_from());
            info!(topic = %name, replayed, ongoing = buffer.ongoing_count(),
                aborted = buffer.aborted_count(), "transaction buffer recovered");
        }
        let mut tx = self.txn.lock();
        tx.ctx = Some(ctx.clone());
        tx.buffer = buffer;
        tx.recorded = recorded;
        Ok(())
    }

    /// The buffer's figures; `None` when the topic takes no transactions.
    pub fn txn_stats(&self) -> Option<TxnBufferStats> {
        let tx = self.txn.lock();
        tx.ctx.as_ref()?;
        Some(TxnBufferStats {
            ongoing: tx.buffer.ongoing_count(),
            aborted_kept: tx.buffer.aborted_count(),
            committed_total: tx.committed_total,
            aborted_total: tx.aborted_total,
            max_read_position: self.ledger.last_confirmed(),
        })
    }

    /// Where transaction `t`'s entries start here, if it is ongoing.
    pub fn txn_first_position(&self, t: TxnId) -> Option<Position> {
        self.txn.lock().buffer.first_position(t)
    }

    /// The last entry a reader can be given (Pulsar's `getLastDispatchablePosition`): the last
    /// visible one, stepping back over transaction markers and aborted entries, so that
    /// `hasMessageAvailable` does not promise a message that will never come. `None`: nothing.
    pub async fn last_dispatchable(&self) -> Result<Option<Position>, BrokerError> {
        let mut p = self.ledger.last_confirmed();
        {
            let tx = self.txn.lock();
            if !tx.recorded && tx.ended.is_empty() && tx.buffer.ongoing_count() == 0 {
                return Ok(p); // never part of a transaction: no markers
            }
        }
        // Bounded: a run of markers longer than this answers the last one.
        for _ in 0..256 {
            let Some(cur) = p else { return Ok(None) };
            let entries = self.ledger.read(cur, 1).await?;
            let Some(e) = entries.first().filter(|e| e.position == cur) else {
                return Ok(p);
            };
            let skip = match strobe_wire::payload::peek_metadata(&e.data) {
                Ok(m) => {
                    m.marker_type.is_some_and(|t| t != 0)
                        || txn_of(&m).is_some_and(|t| self.txn_aborted(t))
                }
                Err(_) => false,
            };
            if !skip {
                return Ok(p);
            }
            if cur.entry_id == 0 {
                return Ok(p);
            }
            p = Some(Position::new(cur.ledger_id, cur.entry_id - 1));
        }
        Ok(p)
    }

    /// Transactions this topic holds in its buffer.
    pub fn ongoing_txns(&self) -> Vec<TxnId> {
        self.txn.lock().buffer.ongoing().collect()
    }

    /// Whether entries of `t` are to be skipped (it aborted).
    pub fn txn_aborted(&self, t: TxnId) -> bool {
        self.txn.lock().buffer.is_aborted(t)
    }

    /// Refuses a transactional send the buffer cannot take (before anything is counted).
    pub(super) fn txn_may_append(&self, t: TxnId) -> Result<(), BrokerError> {
        let tx = self.txn.lock();
        if tx.ctx.is_none() {
            return Err(BrokerError::NotAllowed(format!(
                "transactions are not enabled on this broker (topic {})",
                self.name
            )));
        }
        if tx.ended.contains(&t) || tx.ending.contains(&t) {
            return Err(strobe_txn::TxnError::InvalidStatus(format!(
                "transaction {t} has already ended on topic {}",
                self.name
            ))
            .into());
        }
        Ok(())
    }

    /// Appends a transactional entry (called under the publish lock, after
    /// [`Topic::txn_may_append`]): the first entry of a transaction moves the hold.
    pub(super) fn append_txn(&self, t: TxnId, section: Bytes, crc: u32) -> AppendFuture {
        let mut tx = self.txn.lock();
        if tx.buffer.is_ongoing(t) {
            return self.ledger.append_with_crc(section, crc);
        }
        let (pos, fut) = self.ledger.append_holding(section, crc);
        if let Some(p) = pos {
            tx.buffer.append(t, p);
            tx.dirty = true;
            if let Some(ctx) = &tx.ctx {
                ctx.hold(t, &self.name.to_string());
            }
            if !tx.recorded
                && let Some(ctx) = tx.ctx.clone()
            {
                // A client that skipped ADD_PARTITION_TO_TXN: record the buffer now so that a
                // later load replays the log for it.
                tx.recorded = true;
                let store = ctx.store.clone();
                let name = self.name.to_string();
                tokio::spawn(async move {
                    let empty = TxnBuffer::default().snapshot(None);
                    let bytes = serde_json::to_vec(&empty).expect("a snapshot serializes");
                    match store
                        .put(&paths::buffer_path(&name), &bytes, Expect::Absent)
                        .await
                    {
                        Ok(_) | Err(MetadataError::AlreadyExists(_)) => {}
                        Err(e) => debug!(topic = %name, error = %e, "buffer record not written"),
                    }
                });
            }
        }
        fut
    }

    /// Applies `t`'s outcome here: the marker in the log (if the buffer holds `t`), then every
    /// subscription's pending acks; each participant says it is done once its part is durable.
    /// `listed`: this topic's participants registered with the coordinator.
    pub async fn end_txn(
        &self,
        ctx: &Arc<TxnContext>,
        t: TxnId,
        commit: bool,
        listed: &[Participant],
    ) -> Result<(), BrokerError> {
        let name = self.name.to_string();
        let holds = {
            let mut tx = self.txn.lock();
            if tx.ending.contains(&t) {
                return Ok(()); // another caller is writing the marker
            }
            let holds = tx.buffer.is_ongoing(t);
            if holds {
                tx.ending.insert(t);
            } else {
                tx.mark_ended(t);
            }
            holds
        };
        if holds {
            let fut = {
                let _order = self.publish_lock.lock();
                self.ledger.append(marker(t, commit))
            };
            let res = fut.await;
            let mut tx = self.txn.lock();
            tx.ending.remove(&t);
            let pos = res?;
            tx.buffer.resolve(t, commit, pos);
            if commit {
                tx.committed_total += 1;
            } else {
                tx.aborted_total += 1;
            }
            tx.mark_ended(t);
            tx.dirty = true;
            self.ledger.set_hold(tx.buffer.withhold_from());
            debug!(topic = %name, txn_id = %t, commit, "transaction marker written");
        }
        if holds
            || listed
                .iter()
                .any(|p| matches!(p, Participant::Partition(_)))
        {
            participant::applied(&*ctx.store, t, &Participant::Partition(name.clone())).await?;
        }
        for sub in self.subscriptions() {
            let is_listed = listed.iter().any(|p| {
                matches!(p, Participant::Subscription { subscription, .. } if *subscription == sub.name)
            });
            sub.end_txn(t, commit, is_listed).await?;
        }
        ctx.release(t, &name);
        Ok(())
    }

    /// Writes the buffer's snapshot if it changed (periodically and on close).
    pub async fn snapshot_txn(&self) -> Result<(), BrokerError> {
        let (ctx, snap) = {
            let mut tx = self.txn.lock();
            if !tx.dirty {
                return Ok(());
            }
            let Some(ctx) = tx.ctx.clone() else {
                return Ok(());
            };
            tx.dirty = false;
            tx.buffer.prune(self.ledger.first_position());
            (ctx, tx.buffer.snapshot(self.ledger.last_stored()))
        };
        let r = participant::save_buffer(&*ctx.store, &self.name.to_string(), &snap).await;
        if r.is_err() {
            self.txn.lock().dirty = true;
        }
        Ok(r?)
    }
}
