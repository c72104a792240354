//! A topic's part in transactions: its transaction buffer (see `strobe_txn::buffer`), restored
//! from the snapshot and the log when the topic loads, and the outcome applied to the buffer and
//! to every subscription's pending acks.

use std::sync::Arc;

use bytes::Bytes;
use strobe_ledger::{AppendFuture, Position};
use strobe_metadata::{Expect, MetadataError};
use strobe_model::TxnId;
use strobe_txn::buffer::TxnBuffer;
use strobe_txn::participant;
use strobe_txn::paths::{self, Participant};
use tracing::{debug, info, warn};

use super::Topic;
use super::txn_buffer::{TxnBufferStats, marker, txn_of};
use crate::BrokerError;
use crate::txn::TxnContext;

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
        if tx.ended.contains(&t) || tx.ending.contains_key(&t) {
            return Err(strobe_txn::TxnError::InvalidStatus(format!(
                "transaction {t} has already ended on topic {}",
                self.name
            ))
            .into());
        }
        Ok(())
    }

    /// Appends a transactional entry (called under the publish lock, after
    /// [`Topic::txn_may_append`]): the first entry of a transaction moves the hold. With it,
    /// this topic's registration in `t` if that is still being written.
    pub(super) fn append_txn(
        &self,
        t: TxnId,
        section: Bytes,
        crc: u32,
    ) -> (AppendFuture, Option<crate::txn::Registration>) {
        let mut tx = self.txn.lock();
        let registration = tx.ctx.as_ref().and_then(|c| c.registration(t, &self.name));
        if tx.buffer.is_ongoing(t) {
            return (self.ledger.append_with_crc(section, crc), registration);
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
        (fut, registration)
    }

    /// Applies `t`'s outcome here: the marker in the log (if the buffer holds `t`), then every
    /// subscription's pending acks; each participant says it is done once its part is durable.
    /// `listed`: this topic's participants registered with the coordinator. `told_directly`:
    /// by this broker's coordinator, which waits for nobody's record (see below).
    pub async fn end_txn(
        &self,
        ctx: &Arc<TxnContext>,
        t: TxnId,
        commit: bool,
        listed: &[Participant],
        told_directly: bool,
    ) -> Result<(), BrokerError> {
        let name = self.name.to_string();
        let (holds, done, first) = {
            let mut tx = self.txn.lock();
            if let Some(first) = tx.ending.get(&t).cloned() {
                (true, None, Some(first))
            } else if tx.buffer.is_ongoing(t) {
                let (done, rx) = tokio::sync::watch::channel(None);
                tx.ending.insert(t, rx);
                (true, Some(done), None)
            } else {
                tx.mark_ended(t);
                (false, None, None)
            }
        };
        if let Some(mut first) = first {
            // Another caller (the coordinator's direct word, or the decision watch) is writing
            // the marker: this one goes on once it is written, not before (an END_TXN waiting
            // on it would answer before the commit is visible).
            if first.wait_for(Option::is_some).await.map(|v| *v).ok() != Some(Some(true)) {
                return Err(BrokerError::Txn(strobe_txn::TxnError::Metadata(
                    strobe_metadata::MetadataError::Backend(format!(
                        "the marker of transaction {t} was not written"
                    )),
                )));
            }
        }
        if let Some(done) = done {
            let fut = {
                let _order = self.publish_lock.lock();
                self.ledger.append(marker(t, commit))
            };
            let res = fut.await;
            let mut tx = self.txn.lock();
            tx.ending.remove(&t);
            let _ = done.send(Some(res.is_ok()));
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
            // The outcome is durable here (the marker): the record saying this partition
            // still had to apply it is deleted in the background (awaited, its metadata write
            // was a third of a commit's time). Tried for a minute through a failing store;
            // after that it stays, and so does the header, which is collected only once every
            // such record is gone: a leak in the store, never a wrong outcome.
            let (store, me) = (ctx.store.clone(), Participant::Partition(name.clone()));
            // Moving elsewhere, this instance leaves the record to the next owner.
            let fence = self.fence();
            tokio::spawn(async move {
                let Ok(fence) = fence else {
                    return;
                };
                if told_directly {
                    // Nobody waits for this record (the coordinator that told it here got the
                    // answer in process): deleted on a tick common to every such record, the
                    // store writes them as a few transactions, one flush, rather than a flush
                    // each competing with the flushes commits wait for.
                    on_common_tick(DEFERRED_RECORDS_EVERY).await;
                }
                let mut left = 20;
                while let Err(e) = participant::applied(&*store, t, &me, &fence).await {
                    left -= 1;
                    if left == 0 {
                        warn!(txn_id = %t, error = %e, "the partition's record of a transaction stays");
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
                }
            });
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

/// How often the records of outcomes told directly are deleted (see `Topic::end_txn`).
const DEFERRED_RECORDS_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

/// Sleeps until the next multiple of `every` since a process-wide epoch: tasks that wait for
/// the same tick wake together.
async fn on_common_tick(every: std::time::Duration) {
    static EPOCH: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(tokio::time::Instant::now);
    let period = every.as_nanos().max(1);
    let ticks = epoch.elapsed().as_nanos() / period + 1;
    let at = epoch + std::time::Duration::from_nanos((ticks * period) as u64);
    tokio::time::sleep_until(at).await;
}
