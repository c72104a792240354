//! The per-topic transaction buffer (Pulsar's `TopicTransactionBuffer`), as pure state.
//!
//! A transactional SEND is appended to the topic's log like any other entry; the buffer remembers
//! the first position of every ongoing transaction, and the topic withholds from every reader the
//! entries from the oldest ongoing transaction's first position on (Pulsar's `maxReadPosition`:
//! later non-transactional entries wait too, which keeps the log's order the delivery order).
//! When the outcome arrives the topic appends a TXN_COMMIT or TXN_ABORT marker; once that marker is
//! durable the transaction leaves the ongoing set, and an aborted one joins the aborted set, whose
//! entries dispatchers skip.
//!
//! Why markers in the log rather than state in the metadata store (PIP-473's
//! `MetadataTransactionBuffer`): the log already orders every entry, so replaying it rebuilds the
//! buffer exactly, including entries whose SEND was never acknowledged, and a transactional send
//! costs no extra metadata write on the hot path. A [`BufferSnapshot`] in the metadata store bounds
//! that replay. (PIP-473 moved state out of the log because its scalable topics seal segments;
//! ours take a marker until the topic is deleted.)

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use strobe_model::{Position, TxnId};

/// Pulsar's `MarkerType.TXN_COMMIT`.
pub const MARKER_TXN_COMMIT: i32 = 21;
/// Pulsar's `MarkerType.TXN_ABORT`.
pub const MARKER_TXN_ABORT: i32 = 22;

/// One topic's transactions.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TxnBuffer {
    /// Ongoing transactions and their first entry.
    ongoing: HashMap<TxnId, Position>,
    by_first: BTreeSet<(Position, TxnId)>,
    /// Aborted transactions whose entries may still be in the log, with their marker's position.
    aborted: HashMap<TxnId, Position>,
}

/// What the buffer knows, persisted so a new owner replays only the log after `next`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferSnapshot {
    /// Replay from here: every entry before it is reflected below.
    pub next: (u64, u64),
    /// `(most, least, ledger, entry)`: ongoing transactions and their first entry.
    pub ongoing: Vec<(u64, u64, u64, u64)>,
    /// `(most, least, ledger, entry)`: aborted transactions and their marker.
    pub aborted: Vec<(u64, u64, u64, u64)>,
}

fn txn(m: u64, l: u64) -> TxnId {
    TxnId {
        most_sig_bits: m,
        least_sig_bits: l,
    }
}

impl TxnBuffer {
    /// True while `t` has entries here and no outcome.
    pub fn is_ongoing(&self, t: TxnId) -> bool {
        self.ongoing.contains_key(&t)
    }

    /// True if `t` was aborted and its entries are to be skipped.
    pub fn is_aborted(&self, t: TxnId) -> bool {
        self.aborted.contains_key(&t)
    }

    /// The first entry of ongoing transaction `t`.
    pub fn first_position(&self, t: TxnId) -> Option<Position> {
        self.ongoing.get(&t).copied()
    }

    /// Ongoing transactions.
    pub fn ongoing(&self) -> impl Iterator<Item = TxnId> + '_ {
        self.ongoing.keys().copied()
    }

    pub fn ongoing_count(&self) -> usize {
        self.ongoing.len()
    }

    pub fn aborted_count(&self) -> usize {
        self.aborted.len()
    }

    /// An entry of `t` at `p`; true if `t` is new here.
    pub fn append(&mut self, t: TxnId, p: Position) -> bool {
        if self.ongoing.contains_key(&t) {
            return false;
        }
        self.ongoing.insert(t, p);
        self.by_first.insert((p, t));
        true
    }

    /// The first position readers may not see yet, if any.
    pub fn withhold_from(&self) -> Option<Position> {
        self.by_first.first().map(|(p, _)| *p)
    }

    /// `t`'s marker at `marker` is durable.
    pub fn resolve(&mut self, t: TxnId, commit: bool, marker: Position) {
        if let Some(first) = self.ongoing.remove(&t) {
            self.by_first.remove(&(first, t));
        }
        if !commit {
            self.aborted.insert(t, marker);
        }
    }

    /// Replays one stored entry: a transactional entry of `t`, or a marker of `t`.
    pub fn replay(&mut self, p: Position, t: TxnId, marker: Option<i32>) {
        match marker {
            Some(MARKER_TXN_COMMIT) => self.resolve(t, true, p),
            Some(MARKER_TXN_ABORT) => self.resolve(t, false, p),
            Some(_) => {}
            None => {
                if !self.aborted.contains_key(&t) {
                    self.append(t, p);
                }
            }
        }
    }

    /// Forgets aborted transactions whose marker is before `first` (the log was trimmed past
    /// them, so none of their entries is left).
    pub fn prune(&mut self, first: Position) {
        self.aborted.retain(|_, m| *m >= first);
    }

    /// A snapshot of everything up to and including `lac`: ongoing transactions that started
    /// after it are left to the replay.
    pub fn snapshot(&self, lac: Option<Position>) -> BufferSnapshot {
        let next = match lac {
            Some(l) => (l.ledger_id, l.entry_id + 1),
            None => (0, 0),
        };
        let mut ongoing: Vec<_> = self
            .by_first
            .iter()
            .filter(|(p, _)| lac.is_some_and(|l| *p <= l))
            .map(|(p, t)| (t.most_sig_bits, t.least_sig_bits, p.ledger_id, p.entry_id))
            .collect();
        ongoing.sort_unstable();
        let mut aborted: Vec<_> = self
            .aborted
            .iter()
            .map(|(t, p)| (t.most_sig_bits, t.least_sig_bits, p.ledger_id, p.entry_id))
            .collect();
        aborted.sort_unstable();
        BufferSnapshot {
            next,
            ongoing,
            aborted,
        }
    }

    /// The buffer a snapshot describes, and where its replay starts.
    pub fn restore(s: &BufferSnapshot) -> (TxnBuffer, Position) {
        let mut b = TxnBuffer::default();
        for &(m, l, le, e) in &s.ongoing {
            b.append(txn(m, l), Position::new(le, e));
        }
        for &(m, l, le, e) in &s.aborted {
            b.aborted.insert(txn(m, l), Position::new(le, e));
        }
        (b, Position::new(s.next.0, s.next.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(l: u64) -> TxnId {
        txn(0, l)
    }
    fn p(e: u64) -> Position {
        Position::new(1, e)
    }

    #[test]
    fn withholds_from_the_oldest_ongoing() {
        let mut b = TxnBuffer::default();
        assert_eq!(b.withhold_from(), None);
        assert!(b.append(t(1), p(3)));
        assert!(!b.append(t(1), p(5)));
        b.append(t(2), p(4));
        assert_eq!(b.withhold_from(), Some(p(3)));
        b.resolve(t(1), true, p(6));
        assert_eq!(b.withhold_from(), Some(p(4)));
        b.resolve(t(2), false, p(7));
        assert_eq!(b.withhold_from(), None);
        assert!(b.is_aborted(t(2)) && !b.is_aborted(t(1)));
        b.prune(p(7));
        assert!(b.is_aborted(t(2)));
        b.prune(p(8));
        assert!(!b.is_aborted(t(2)));
    }

    /// A log of operations: (txn, is_marker, commit).
    fn log_strategy() -> impl Strategy<Value = Vec<(u64, u8)>> {
        proptest::collection::vec((0u64..6, 0u8..4), 0..60)
    }

    /// Builds the log: kind 0/1 = entry, 2 = commit marker, 3 = abort marker (only for an
    /// ongoing transaction, as the topic writes them).
    fn build(ops: &[(u64, u8)]) -> (TxnBuffer, Vec<(Position, TxnId, Option<i32>)>) {
        let mut live = TxnBuffer::default();
        let mut log = Vec::new();
        let mut ended = std::collections::HashSet::new();
        for (i, (tx, kind)) in ops.iter().enumerate() {
            let pos = p(i as u64);
            let id = t(*tx);
            match kind {
                0 | 1 => {
                    // The topic refuses sends of a transaction it saw end.
                    if ended.contains(&id) {
                        continue;
                    }
                    live.append(id, pos);
                    log.push((pos, id, None));
                }
                k => {
                    if !live.is_ongoing(id) {
                        continue;
                    }
                    let commit = *k == 2;
                    live.resolve(id, commit, pos);
                    ended.insert(id);
                    let m = if commit {
                        MARKER_TXN_COMMIT
                    } else {
                        MARKER_TXN_ABORT
                    };
                    log.push((pos, id, Some(m)));
                }
            }
        }
        (live, log)
    }

    proptest! {
        /// Replaying the log, from scratch or from any snapshot taken along the way, rebuilds the
        /// live buffer exactly.
        #[test]
        fn replay_from_any_snapshot_rebuilds_the_buffer(ops in log_strategy(), cut in 0usize..60) {
            let (live, log) = build(&ops);
            let mut fresh = TxnBuffer::default();
            for (pos, id, m) in &log {
                fresh.replay(*pos, *id, *m);
            }
            prop_assert_eq!(&fresh, &live);

            let cut = cut.min(log.len());
            let mut partial = TxnBuffer::default();
            for (pos, id, m) in &log[..cut] {
                partial.replay(*pos, *id, *m);
            }
            let lac = if cut == 0 { None } else { Some(log[cut - 1].0) };
            let snap = partial.snapshot(lac);
            let json = serde_json::to_vec(&snap).unwrap();
            let (mut restored, from) = TxnBuffer::restore(&serde_json::from_slice(&json).unwrap());
            for (pos, id, m) in log.iter().filter(|(pos, _, _)| *pos >= from) {
                restored.replay(*pos, *id, *m);
            }
            prop_assert_eq!(&restored, &live);
        }

        /// Nothing at or after the oldest ongoing transaction's first entry is readable, and every
        /// entry of an ongoing transaction is at or after it.
        #[test]
        fn no_ongoing_entry_is_readable(ops in log_strategy()) {
            let (live, log) = build(&ops);
            if let Some(w) = live.withhold_from() {
                for (pos, id, m) in &log {
                    if m.is_none() && live.is_ongoing(*id) {
                        prop_assert!(*pos >= w);
                    }
                }
            } else {
                prop_assert_eq!(live.ongoing_count(), 0);
            }
        }
    }
}
