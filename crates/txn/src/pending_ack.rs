//! A subscription's pending acks (Pulsar's `PendingAckHandleImpl`), as pure state.
//!
//! An ack made in a transaction is held here until the outcome: the message is hidden from
//! redelivery meanwhile, commit turns the acks into real ones, abort releases them. The conflict
//! rules are Pulsar's: a message acked in one transaction cannot be acked in another (for batches,
//! the same index), a message the subscription already acked cannot be acked in a transaction, and
//! one transaction at a time may hold a cumulative ack.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use strobe_model::{Position, TxnId};

/// One acked message of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckedEntry {
    pub ledger: u64,
    pub entry: u64,
    /// For a part of a batch: the batch size and a bit set of the ACKED indexes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<(u32, Vec<u64>)>,
}

impl AckedEntry {
    pub fn position(&self) -> Position {
        Position::new(self.ledger, self.entry)
    }

    /// From the wire: `unacked` is CommandAck's `ack_set` (the bits still unacked after this
    /// ack); empty means the whole entry.
    pub fn from_wire(p: Position, batch_size: u32, unacked: &[i64]) -> AckedEntry {
        let batch = (!unacked.is_empty()).then(|| {
            let words = (batch_size as usize).div_ceil(64).max(1);
            let mut acked = vec![0u64; words];
            for i in 0..batch_size as usize {
                let w = unacked.get(i / 64).copied().unwrap_or(0) as u64;
                if w & (1 << (i % 64)) == 0 {
                    acked[i / 64] |= 1 << (i % 64);
                }
            }
            (batch_size, acked)
        });
        AckedEntry {
            ledger: p.ledger_id,
            entry: p.entry_id,
            batch,
        }
    }

    /// The `ack_set` (unacked bits) to give the cursor for a batch part.
    pub fn unacked_set(&self) -> Option<(u32, Vec<i64>)> {
        let (size, acked) = self.batch.as_ref()?;
        let words = (*size as usize).div_ceil(64).max(1);
        let mut out = vec![0i64; words];
        for i in 0..*size as usize {
            if acked.get(i / 64).copied().unwrap_or(0) & (1 << (i % 64)) == 0 {
                out[i / 64] |= 1 << (i % 64);
            }
        }
        Some((*size, out))
    }
}

/// Everything one transaction acked on one subscription (also the persisted record).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnAcks {
    #[serde(default)]
    pub individual: Vec<AckedEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cumulative: Option<(u64, u64)>,
    /// When the cumulative ack ends inside a batch: the batch size and the
    /// ACKED indexes of that entry (the ack covers the entries before it and
    /// these indexes; the rest of the batch is still to acknowledge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cumulative_batch: Option<(u32, Vec<u64>)>,
}

impl TxnAcks {
    /// The cumulative ack as an entry: its position and, within a batch,
    /// its acked indexes.
    pub fn cumulative_entry(&self) -> Option<AckedEntry> {
        let (ledger, entry) = self.cumulative?;
        Some(AckedEntry {
            ledger,
            entry,
            batch: self.cumulative_batch.clone(),
        })
    }
}

/// Who holds a position.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    /// The whole entry, by one transaction.
    Whole(TxnId),
    /// Parts of a batch: each transaction's acked-index bits.
    Parts(Vec<(TxnId, Vec<u64>)>),
}

/// One subscription's pending acks.
#[derive(Debug, Default, Clone)]
pub struct PendingAcks {
    by_position: BTreeMap<Position, Holder>,
    cumulative: Option<(TxnId, Position)>,
    by_txn: HashMap<TxnId, TxnAcks>,
}

fn overlaps(a: &[u64], b: &[u64]) -> bool {
    a.iter().zip(b).any(|(x, y)| x & y != 0)
}

impl PendingAcks {
    /// Adds `t`'s acks if none conflicts; on a conflict nothing is added and the error says why.
    /// `is_acked(p)`: the subscription already acked `p` (whole entry).
    pub fn add(
        &mut self,
        t: TxnId,
        entries: &[AckedEntry],
        cumulative: bool,
        is_acked: impl Fn(Position) -> bool,
    ) -> Result<(), String> {
        if cumulative {
            let Some(e) = entries.last() else {
                return Ok(());
            };
            let p = e.position();
            if let Some((other, _)) = self.cumulative
                && other != t
            {
                return Err(format!(
                    "transaction {other} holds a pending cumulative ack on this subscription"
                ));
            }
            if is_acked(p) {
                return Err(format!("{p} is already acknowledged"));
            }
            if let Some((pos, h)) = self.by_position.range(..=p).find(|(_, h)| match h {
                Holder::Whole(o) => *o != t,
                Holder::Parts(v) => v.iter().any(|(o, _)| *o != t),
            }) {
                let _ = h;
                return Err(format!(
                    "{pos} is pending in another transaction; a cumulative ack cannot cover it"
                ));
            }
            let old = self.cumulative.map(|(_, old)| old);
            let keep = old.map_or(p, |old| old.max(p));
            self.cumulative = Some((t, keep));
            let acks = self.by_txn.entry(t).or_default();
            acks.cumulative = Some((keep.ledger_id, keep.entry_id));
            if old.is_none_or(|old| p > old) {
                acks.cumulative_batch = e.batch.clone();
            } else if old == Some(p) {
                // A second ack into the same batch: the union (a whole-entry
                // ack covers every index).
                acks.cumulative_batch = match (acks.cumulative_batch.take(), &e.batch) {
                    (Some((size, mut a)), Some((_, b))) => {
                        for (x, y) in a.iter_mut().zip(b) {
                            *x |= y;
                        }
                        Some((size, a))
                    }
                    _ => None,
                };
            }
            return Ok(());
        }
        for e in entries {
            let p = e.position();
            if is_acked(p) {
                return Err(format!("{p} is already acknowledged"));
            }
            if let Some((other, c)) = self.cumulative
                && other != t
                && p <= c
            {
                return Err(format!(
                    "{p} is covered by transaction {other}'s pending cumulative ack"
                ));
            }
            match (self.by_position.get(&p), &e.batch) {
                (None, _) => {}
                (Some(Holder::Whole(o)), _) if *o == t => {}
                (Some(Holder::Whole(o)), _) => {
                    return Err(format!("{p} is pending in transaction {o}"));
                }
                (Some(Holder::Parts(v)), None) => {
                    if let Some((o, _)) = v.iter().find(|(o, _)| *o != t) {
                        return Err(format!("{p} has indexes pending in transaction {o}"));
                    }
                }
                (Some(Holder::Parts(v)), Some((_, bits))) => {
                    if let Some((o, _)) = v.iter().find(|(o, b)| *o != t && overlaps(b, bits)) {
                        return Err(format!(
                            "{p} has the same indexes pending in transaction {o}"
                        ));
                    }
                }
            }
        }
        for e in entries {
            let p = e.position();
            match &e.batch {
                None => {
                    self.by_position.insert(p, Holder::Whole(t));
                }
                Some((_, bits)) => {
                    let h = self
                        .by_position
                        .entry(p)
                        .or_insert_with(|| Holder::Parts(Vec::new()));
                    if let Holder::Parts(v) = h {
                        match v.iter_mut().find(|(o, _)| *o == t) {
                            Some((_, b)) => {
                                for (x, y) in b.iter_mut().zip(bits) {
                                    *x |= y;
                                }
                            }
                            None => v.push((t, bits.clone())),
                        }
                    }
                }
            }
            self.by_txn.entry(t).or_default().individual.push(e.clone());
        }
        Ok(())
    }

    /// True if a pending ack hides `p` from delivery (the whole entry is pending, or a pending
    /// cumulative ack covers it).
    pub fn hides(&self, p: Position) -> bool {
        matches!(self.by_position.get(&p), Some(Holder::Whole(_)))
            || self
                .cumulative
                .is_some_and(|(_, c)| p < c || (p == c && !self.cumulative_is_partial()))
    }

    /// Whether the pending cumulative ack ends inside its entry's batch,
    /// leaving later messages of that entry unacknowledged: the entry is
    /// not hidden (it still has messages to deliver), only held back.
    pub fn cumulative_is_partial(&self) -> bool {
        let Some((t, _)) = self.cumulative else {
            return false;
        };
        self.by_txn
            .get(&t)
            .and_then(TxnAcks::cumulative_entry)
            .and_then(|e| e.unacked_set())
            .is_some_and(|(_, unacked)| unacked.iter().any(|w| *w != 0))
    }

    /// The pending cumulative ack, if a transaction holds one: its
    /// transaction and position.
    pub fn cumulative(&self) -> Option<(TxnId, Position)> {
        self.cumulative
    }

    /// What `t` holds, as persisted.
    pub fn of(&self, t: TxnId) -> Option<&TxnAcks> {
        self.by_txn.get(&t)
    }

    /// Transactions holding acks here.
    pub fn txns(&self) -> Vec<TxnId> {
        self.by_txn.keys().copied().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.by_txn.is_empty()
    }

    /// Removes and returns `t`'s acks (on its outcome).
    pub fn take(&mut self, t: TxnId) -> Option<TxnAcks> {
        let acks = self.by_txn.remove(&t)?;
        for e in &acks.individual {
            let p = e.position();
            let empty = match self.by_position.get_mut(&p) {
                Some(Holder::Whole(o)) => *o == t,
                Some(Holder::Parts(v)) => {
                    v.retain(|(o, _)| *o != t);
                    v.is_empty()
                }
                None => false,
            };
            if empty {
                self.by_position.remove(&p);
            }
        }
        if self.cumulative.is_some_and(|(o, _)| o == t) {
            self.cumulative = None;
        }
        Some(acks)
    }

    /// Restores a persisted record.
    pub fn restore(&mut self, t: TxnId, acks: TxnAcks) {
        let _ = self.add(t, &acks.individual, false, |_| false);
        if let Some(entry) = acks.cumulative_entry() {
            let _ = self.add(t, &[entry], true, |_| false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(l: u64) -> TxnId {
        TxnId {
            most_sig_bits: 0,
            least_sig_bits: l,
        }
    }
    fn whole(e: u64) -> AckedEntry {
        AckedEntry {
            ledger: 1,
            entry: e,
            batch: None,
        }
    }

    #[test]
    fn conflicts_follow_pulsar() {
        let mut pa = PendingAcks::default();
        pa.add(t(1), &[whole(1), whole(2)], false, |_| false)
            .unwrap();
        assert!(pa.hides(Position::new(1, 1)));
        // Same transaction again: fine.
        pa.add(t(1), &[whole(1)], false, |_| false).unwrap();
        // Another transaction on the same message: conflict, and nothing of it is added.
        assert!(
            pa.add(t(2), &[whole(3), whole(2)], false, |_| false)
                .is_err()
        );
        assert!(!pa.hides(Position::new(1, 3)));
        // Already acked by the subscription: conflict.
        assert!(
            pa.add(t(2), &[whole(5)], false, |p| p.entry_id == 5)
                .is_err()
        );
        // A cumulative ack over another transaction's pending message: conflict.
        assert!(pa.add(t(2), &[whole(4)], true, |_| false).is_err());
        let acks = pa.take(t(1)).unwrap();
        assert_eq!(acks.individual.len(), 3);
        assert!(!pa.hides(Position::new(1, 1)));
        pa.add(t(2), &[whole(4)], true, |_| false).unwrap();
        assert!(pa.hides(Position::new(1, 0)) && pa.hides(Position::new(1, 4)));
        assert!(pa.add(t(3), &[whole(9)], true, |_| false).is_err());
        assert!(pa.add(t(3), &[whole(2)], false, |_| false).is_err());
        pa.take(t(2));
        assert!(pa.is_empty() && !pa.hides(Position::new(1, 0)));
    }

    #[test]
    fn batch_indexes_conflict_only_when_they_overlap() {
        let p = Position::new(1, 7);
        // Batch of 4: t1 acks indexes 0 and 1 (unacked bits 2, 3), t2 acks 2 (unacked 0, 1, 3).
        let a = AckedEntry::from_wire(p, 4, &[0b1100]);
        let b = AckedEntry::from_wire(p, 4, &[0b1011]);
        let c = AckedEntry::from_wire(p, 4, &[0b1110]);
        assert_eq!(a.batch, Some((4, vec![0b0011])));
        assert_eq!(a.unacked_set(), Some((4, vec![0b1100])));
        let mut pa = PendingAcks::default();
        pa.add(t(1), std::slice::from_ref(&a), false, |_| false)
            .unwrap();
        pa.add(t(2), &[b], false, |_| false).unwrap();
        assert!(pa.add(t(3), &[c], false, |_| false).is_err());
        assert!(!pa.hides(p), "a partly acked batch is still delivered");
        assert!(pa.add(t(3), &[whole(7)], false, |_| false).is_err());
    }

    #[test]
    fn records_round_trip() {
        let mut pa = PendingAcks::default();
        let p = Position::new(2, 3);
        pa.add(
            t(1),
            &[AckedEntry::from_wire(p, 3, &[0b100])],
            false,
            |_| false,
        )
        .unwrap();
        pa.add(t(1), &[whole(1)], true, |_| false).unwrap();
        let rec = pa.of(t(1)).unwrap().clone();
        let json = serde_json::to_vec(&rec).unwrap();
        let mut back = PendingAcks::default();
        back.restore(t(1), serde_json::from_slice(&json).unwrap());
        assert_eq!(back.of(t(1)), Some(&rec));
        assert!(back.hides(Position::new(1, 1)));
    }

    #[test]
    fn a_cumulative_ack_inside_a_batch_keeps_its_indexes() {
        let mut pa = PendingAcks::default();
        let part = AckedEntry::from_wire(Position::new(1, 5), 4, &[0b1100]);
        pa.add(t(1), std::slice::from_ref(&part), true, |_| false)
            .unwrap();
        let acks = pa.of(t(1)).cloned().unwrap();
        assert_eq!(acks.cumulative, Some((1, 5)));
        assert_eq!(acks.cumulative_entry(), Some(part.clone()));
        // Persisted and restored, the batch part is still there.
        let json = serde_json::to_string(&acks).unwrap();
        let mut again = PendingAcks::default();
        again.restore(t(1), serde_json::from_str(&json).unwrap());
        assert_eq!(
            again.of(t(1)).cloned().unwrap().cumulative_entry(),
            Some(part)
        );
        // A later entry replaces it; a whole-entry record stays whole.
        let whole = AckedEntry {
            ledger: 1,
            entry: 7,
            batch: None,
        };
        pa.add(t(1), &[whole], true, |_| false).unwrap();
        let acks = pa.of(t(1)).cloned().unwrap();
        assert_eq!(acks.cumulative, Some((1, 7)));
        assert_eq!(acks.cumulative_batch, None);
    }
}
