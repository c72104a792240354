//! [`ManagedCursor`]: a subscription's position in a [`crate::ManagedLedger`],
//! over the ledger's shared state.

use std::collections::BTreeMap;
use std::sync::Arc;

use strobe_model::Position;

use crate::Result;
use crate::cursor_state::{CursorState, LedgerView};
use crate::ledger_state::{CursorShared, Entry, Inner, State, encode_snapshot};

/// A subscription's (or reader's) position in a [`ManagedLedger`]: Pulsar's
/// `ManagedCursor`. Tracks the mark-delete position, individually deleted
/// entries and batch-index acks, and a read position.
///
/// Durability window: a durable cursor is persisted every
/// `cursor_flush_interval` (default 1 s) when changed, on `close`, and at once
/// on `reset`. A crash forgets at most the acknowledgements of that last
/// interval (plus the group commit in flight); they are redelivered. It never
/// forgets an unacknowledged entry: the persisted state is always an older
/// subset of the acknowledgements.
#[derive(Debug, Clone)]
pub struct ManagedCursor {
    pub(crate) ledger: Arc<Inner>,
    pub(crate) shared: Arc<CursorShared>,
}

impl ManagedCursor {
    pub fn name(&self) -> &str {
        &self.shared.name
    }
    pub fn is_durable(&self) -> bool {
        self.shared.durable
    }

    fn with<R>(&self, f: impl FnOnce(&mut CursorState, &State) -> R) -> R {
        let mut cs = self.shared.state.lock();
        let st = self.ledger.state.lock();
        let r = f(&mut cs, &st);
        if cs.dirty && self.shared.durable {
            self.ledger.cursors_dirty.notify_one();
        }
        r
    }

    /// Pulsar's mark-delete position: the last entry of the acknowledged
    /// prefix, `None` if nothing stored is acknowledged yet.
    pub fn mark_delete_position(&self) -> Option<Position> {
        self.with(|cs, st| {
            let floor = st.normalize(cs.floor);
            if floor.entry_id > 0 {
                return Some(Position::new(floor.ledger_id, floor.entry_id - 1));
            }
            let i = st.ledgers.partition_point(|l| l.id < floor.ledger_id);
            st.ledgers[..i]
                .iter()
                .rev()
                .find(|l| l.entries > 0)
                .map(|l| Position::new(l.id, l.entries - 1))
        })
    }

    /// The first position that is not acknowledged cumulatively (the one
    /// after the mark-delete position).
    pub fn first_unacked_floor(&self) -> Position {
        self.with(|cs, st| st.normalize(cs.floor))
    }

    /// The next position [`ManagedCursor::read`] looks at.
    pub fn read_position(&self) -> Position {
        self.with(|cs, st| st.normalize(cs.read_pos.max(cs.floor)))
    }

    /// The read position as set, not moved onto a stored entry (it may lie
    /// in a trimmed ledger: the compacted view still has entries there).
    pub fn read_position_unmoved(&self) -> Position {
        self.with(|cs, _| cs.read_pos.max(cs.floor))
    }

    /// Moves the read position to `p` as given (see
    /// [`ManagedCursor::read_position_unmoved`]).
    pub fn seek_read_unmoved(&self, p: Position) {
        self.with(|cs, _| cs.read_pos = p);
    }

    /// Moves the read position (dispatch bookkeeping; acks are unchanged).
    pub fn seek_read(&self, p: Position) {
        self.with(|cs, st| cs.read_pos = st.normalize(p));
    }

    /// Moves the read position back to the first unacknowledged entry
    /// (after a consumer reconnects, everything unacked is delivered again).
    pub fn rewind(&self) {
        self.with(|cs, _| cs.read_pos = cs.floor);
    }

    /// Reads up to `max` unacknowledged confirmed entries from the read
    /// position on, skipping individually deleted ones, and advances it.
    pub async fn read(&self, max: usize) -> Result<Vec<Entry>> {
        let (from, runs, to) = self.with(|cs, st| {
            let from = cs.read_pos;
            let runs = cs.next_runs(st, max);
            (from, runs, cs.read_pos)
        });
        match self.ledger.read_runs(runs).await {
            Ok(entries) => Ok(entries),
            Err(e) => {
                // Not read, so not delivered: the read position goes back
                // (unless it was moved meanwhile), or a failed read (the
                // store cut off for a moment) would skip these entries
                // until a rewind, on every subscription that read them.
                self.with(|cs, _| {
                    if cs.read_pos == to {
                        cs.read_pos = from;
                    }
                });
                Err(e)
            }
        }
    }

    /// Whether confirmed entries exist at or after the read position.
    pub fn has_more(&self) -> bool {
        self.with(|cs, st| {
            st.visible()
                .is_some_and(|l| st.normalize(cs.read_pos.max(cs.floor)) <= l)
        })
    }

    /// Cumulative ack of every entry up to and including `p`.
    pub fn mark_delete(&self, p: Position) {
        self.with(|cs, st| cs.mark_delete(st, p));
    }

    /// Cumulative ack of every entry before `p`, not `p` itself (an ack that
    /// ends inside the batch at `p`); the entry before may be in an earlier
    /// ledger.
    pub fn mark_delete_before(&self, p: Position) {
        self.with(|cs, st| cs.mark_delete_before(st, p));
    }

    /// The last confirmed entry before `p`, in this or an earlier ledger.
    pub fn position_before(&self, p: Position) -> Option<Position> {
        self.with(|_, st| st.before(p))
    }

    /// Cumulative ack up to and including `p`, with `properties` that
    /// describe the log up to it (kept with the position, persisted with
    /// it, and read back by [`Self::properties`] after a restart). Pulsar's
    /// deduplication stores its producers' sequence ids this way.
    pub fn mark_delete_with(&self, p: Position, properties: BTreeMap<String, i64>) {
        self.with(|cs, st| {
            cs.mark_delete(st, p);
            cs.properties = properties;
            cs.dirty = true;
        });
    }

    /// The properties of the last [`Self::mark_delete_with`] (empty if none).
    pub fn properties(&self) -> BTreeMap<String, i64> {
        self.with(|cs, _| cs.properties.clone())
    }

    /// Individual acks.
    pub fn delete(&self, positions: &[Position]) {
        self.with(|cs, st| cs.delete(st, positions));
    }

    /// Acknowledges `indexes` of the batch of `batch_size` messages stored at
    /// `p`; once all are acknowledged the entry is deleted.
    pub fn ack_batch_indexes(&self, p: Position, batch_size: u32, indexes: &[u32]) {
        self.with(|cs, st| cs.ack_batch(st, p, batch_size, indexes));
    }

    /// Pulsar's ack-set form: `unacked` is a bit set of i64 words in which a
    /// set bit is an index still unacknowledged (as in `CommandAck.ack_set`).
    pub fn ack_batch_set(&self, p: Position, batch_size: u32, unacked: &[i64]) {
        self.with(|cs, st| cs.ack_batch_words(st, p, batch_size, unacked));
    }

    /// Acked indexes of a partially acknowledged batch at `p` (bit `i` of
    /// word `i / 64` set: index `i` acked).
    pub fn batch_acked_indexes(&self, p: Position) -> Option<Vec<u64>> {
        self.with(|cs, _| cs.batch_acked(p).map(|b| b.acked.clone()))
    }

    /// The ack set to put in `MessageIdData.ack_set` when (re)delivering the
    /// batch at `p`: set bits are indexes still to deliver. `None` when no
    /// index of the batch is acknowledged yet.
    pub fn batch_unacked_set(&self, p: Position) -> Option<Vec<i64>> {
        self.with(|cs, _| {
            cs.batch_acked(p).map(|b| {
                b.acked
                    .iter()
                    .enumerate()
                    .map(|(w, &bits)| (!bits & b.mask(w)) as i64)
                    .collect()
            })
        })
    }

    /// Whether `p` is acknowledged (cumulatively or individually).
    pub fn is_acked(&self, p: Position) -> bool {
        self.with(|cs, _| cs.is_deleted(p))
    }

    /// Acknowledges the next `n` unacknowledged entries.
    pub fn skip(&self, n: u64) {
        self.with(|cs, st| cs.skip(st, n));
    }

    /// Unacknowledged confirmed entries (Pulsar's backlog in entries).
    pub fn backlog(&self) -> u64 {
        self.with(|cs, st| cs.backlog(st))
    }

    /// Individually deleted ranges as inclusive `(first, last)` positions.
    pub fn individually_deleted(&self) -> Vec<(Position, Position)> {
        self.with(|cs, _| {
            cs.ranges
                .iter()
                .flat_map(|(&l, r)| {
                    r.iter()
                        .map(move |(s, e)| (Position::new(l, s), Position::new(l, e - 1)))
                })
                .collect()
        })
    }

    /// Reset (seek): every entry before `p` counts as acknowledged and every
    /// entry from `p` on as unacknowledged; reading restarts at `p`.
    /// Persisted before this returns (a crash must not undo a rewind).
    pub async fn reset(&self, p: Position) -> Result<()> {
        let fut = {
            let mut cs = self.shared.state.lock();
            {
                let st = self.ledger.state.lock();
                cs.reset(&*st, p);
            }
            if !self.shared.durable {
                cs.dirty = false;
                return Ok(());
            }
            cs.dirty = false;
            let snap = encode_snapshot(&cs.snapshot(self.ledger.config.max_persisted_ranges));
            self.ledger
                .storage
                .persist_cursor(&self.shared.name, Some(snap))
        };
        fut.await
    }

    /// Persists this cursor now if it changed (no-op for non-durable cursors).
    pub async fn flush(&self) -> Result<()> {
        match self.ledger.persist_if_dirty(&self.shared) {
            Some(f) => f.await,
            None => Ok(()),
        }
    }
}
