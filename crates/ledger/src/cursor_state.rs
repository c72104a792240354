//! The acknowledgement state of one cursor, as plain data: no I/O, no locks.
//! [`crate::ManagedCursor`] wraps it; the property tests drive it directly.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use strobe_model::Position;

/// What a cursor needs to know about the ledger it walks.
pub(crate) trait LedgerView {
    /// The first position at or after `p` that holds an entry or is the next
    /// one to be written (positions in trimmed or finished ledgers move on).
    fn normalize(&self, p: Position) -> Position;
    /// The last confirmed (durable) entry.
    fn lac(&self) -> Option<Position>;
    /// Whether `p` holds a confirmed entry.
    fn exists(&self, p: Position) -> bool;
    /// Confirmed entries in `[from, ..]` up to the last confirmed.
    fn count_from(&self, from: Position) -> u64;
    /// How many confirmed entries ledger `id` holds (0 if unknown).
    fn confirmed_in(&self, id: u64) -> u64;
    /// The last confirmed entry before `p`, across ledgers (`None` if the
    /// ledgers kept hold none).
    fn before(&self, p: Position) -> Option<Position>;
}

/// Disjoint, non-adjacent half-open ranges `[start, end)` of entry ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RangeSet {
    map: BTreeMap<u64, u64>,
}

impl RangeSet {
    pub fn insert(&mut self, mut start: u64, mut end: u64) {
        if start >= end {
            return;
        }
        // Merge with a range that starts before and reaches `start`.
        if let Some((&s, &e)) = self.map.range(..=start).next_back()
            && e >= start
        {
            start = s;
            end = end.max(e);
            self.map.remove(&s);
        }
        // Merge with ranges that start inside [start, end].
        while let Some((&s, &e)) = self.map.range(start..=end).next() {
            end = end.max(e);
            self.map.remove(&s);
        }
        self.map.insert(start, end);
    }
    /// The end of the range containing `x`.
    pub fn covering(&self, x: u64) -> Option<u64> {
        self.map
            .range(..=x)
            .next_back()
            .and_then(|(_, &e)| (e > x).then_some(e))
    }
    pub fn remove_below(&mut self, x: u64) {
        let keep = self.map.split_off(&x);
        if let Some((_, &e)) = self.map.iter().next_back()
            && e > x
        {
            self.map = keep;
            self.map.insert(x, e);
            return;
        }
        self.map = keep;
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map.iter().map(|(&s, &e)| (s, e))
    }
    /// Entries of the set inside `[from, to)`.
    pub fn count_within(&self, from: u64, to: u64) -> u64 {
        self.iter()
            .map(|(s, e)| e.min(to).saturating_sub(s.max(from)))
            .sum()
    }
}

/// Acked indexes of one batch entry (bit `i` set: index `i` acknowledged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BatchAck {
    pub size: u32,
    pub acked: Vec<u64>,
}

impl BatchAck {
    fn new(size: u32) -> BatchAck {
        BatchAck {
            size,
            acked: vec![0; (size as usize).div_ceil(64)],
        }
    }
    fn set(&mut self, i: u32) {
        if i < self.size {
            self.acked[(i / 64) as usize] |= 1 << (i % 64);
        }
    }
    /// The bits of word `w` that are indexes of the batch.
    pub fn mask(&self, w: usize) -> u64 {
        let valid = u64::from(self.size).saturating_sub(64 * w as u64).min(64);
        if valid == 64 {
            u64::MAX
        } else {
            (1u64 << valid) - 1
        }
    }
    /// Word by word: a consumer acks a batch of n messages one by one, so a
    /// bit-by-bit check made that O(n^2) per batch.
    fn all(&self) -> bool {
        self.acked
            .iter()
            .enumerate()
            .all(|(w, &bits)| bits & self.mask(w) == self.mask(w))
    }
}

/// The persisted form of a durable cursor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CursorSnapshot {
    /// Every entry before this position is acknowledged.
    pub floor: (u64, u64),
    /// Individually deleted `(ledger, start, end_exclusive)`.
    pub ranges: Vec<(u64, u64, u64)>,
    /// Batch-index acks: `(ledger, entry, batch_size, acked words)`.
    pub batch: Vec<(u64, u64, u32, Vec<u64>)>,
    /// Named numbers stored with the mark-delete position (Pulsar's cursor
    /// properties), which describe the log up to it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, i64>,
    /// The broker's own cursor (deduplication's), not a subscription's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub internal: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CursorState {
    /// Every entry before `floor` is acknowledged (the position after Pulsar's
    /// mark-delete position).
    pub floor: Position,
    /// Individually deleted entries at or after `floor`, per ledger.
    pub ranges: BTreeMap<u64, RangeSet>,
    /// Partially acknowledged batches at or after `floor`.
    pub batch: BTreeMap<Position, BatchAck>,
    /// Stored with the floor (see [`CursorSnapshot::properties`]).
    pub properties: BTreeMap<String, i64>,
    /// See [`CursorSnapshot::internal`].
    pub internal: bool,
    /// The next position `read` looks at (not persisted).
    pub read_pos: Position,
    /// Changed since the last persisted snapshot.
    pub dirty: bool,
}

impl CursorState {
    pub fn new(floor: Position) -> CursorState {
        CursorState {
            floor,
            ranges: BTreeMap::new(),
            batch: BTreeMap::new(),
            properties: BTreeMap::new(),
            internal: false,
            read_pos: floor,
            dirty: true,
        }
    }

    pub fn is_deleted(&self, p: Position) -> bool {
        p < self.floor
            || self
                .ranges
                .get(&p.ledger_id)
                .is_some_and(|r| r.covering(p.entry_id).is_some())
    }

    /// Moves `floor` over the contiguous acknowledged prefix and drops state below it.
    fn advance(&mut self, v: &impl LedgerView) {
        loop {
            self.floor = v.normalize(self.floor);
            match self
                .ranges
                .get(&self.floor.ledger_id)
                .and_then(|r| r.covering(self.floor.entry_id))
            {
                Some(end) => self.floor.entry_id = end,
                None => break,
            }
        }
        let floor = self.floor;
        self.ranges = self.ranges.split_off(&floor.ledger_id);
        if let Some(r) = self.ranges.get_mut(&floor.ledger_id) {
            r.remove_below(floor.entry_id);
            if r.is_empty() {
                self.ranges.remove(&floor.ledger_id);
            }
        }
        self.batch = self.batch.split_off(&floor);
        if self.read_pos < floor {
            self.read_pos = floor;
        }
    }

    /// Cumulative ack: everything at or before `p`.
    pub fn mark_delete(&mut self, v: &impl LedgerView, p: Position) {
        if p < self.floor {
            return;
        }
        let lac = match v.lac() {
            Some(l) => l,
            None => return,
        };
        let p = p.min(lac);
        self.floor = Position::new(p.ledger_id, p.entry_id + 1);
        self.dirty = true;
        self.advance(v);
    }

    /// Cumulative ack of everything before `p`, not `p` itself: a cumulative
    /// ack that ends inside the batch at `p`, or Pulsar clients' `(ledger,
    /// -1)`. The entry before may be in an earlier ledger: taken as
    /// `(ledger, entry - 1)`, an ack inside the batch at a ledger's first
    /// entry acked nothing before it, and the earlier ledger's last entries
    /// came again after a reconnect (a transaction's input transformed twice
    /// in the fault campaign).
    pub fn mark_delete_before(&mut self, v: &impl LedgerView, p: Position) {
        if let Some(b) = v.before(p) {
            self.mark_delete(v, b);
        }
    }

    /// Individual acks. Positions that hold no confirmed entry are ignored.
    pub fn delete(&mut self, v: &impl LedgerView, positions: &[Position]) {
        for &p in positions {
            if p < self.floor || !v.exists(p) {
                continue;
            }
            self.ranges
                .entry(p.ledger_id)
                .or_default()
                .insert(p.entry_id, p.entry_id + 1);
            self.batch.remove(&p);
            self.dirty = true;
        }
        self.advance(v);
    }

    /// Acknowledges `indexes` of the batch stored at `p`; the entry counts as
    /// deleted once every index of the batch is.
    pub fn ack_batch(&mut self, v: &impl LedgerView, p: Position, size: u32, indexes: &[u32]) {
        self.ack_batch_with(v, p, size, |b| {
            for &i in indexes {
                b.set(i);
            }
        });
    }

    /// Pulsar's ack-set form of [`CursorState::ack_batch`]: `unacked` is a
    /// bit set of words in which a set bit is an index still unacknowledged
    /// (missing words: all acknowledged). Applied word by word.
    pub fn ack_batch_words(
        &mut self,
        v: &impl LedgerView,
        p: Position,
        size: u32,
        unacked: &[i64],
    ) {
        self.ack_batch_with(v, p, size, |b| {
            for w in 0..b.acked.len() {
                let still = unacked.get(w).copied().unwrap_or(0) as u64;
                b.acked[w] |= !still & b.mask(w);
            }
        });
    }

    /// Marks indexes of the batch at `p` with `set`; the entry counts as
    /// deleted once every index is.
    fn ack_batch_with(
        &mut self,
        v: &impl LedgerView,
        p: Position,
        size: u32,
        set: impl FnOnce(&mut BatchAck),
    ) {
        if size == 0 || self.is_deleted(p) || !v.exists(p) {
            return;
        }
        let b = self.batch.entry(p).or_insert_with(|| BatchAck::new(size));
        set(b);
        self.dirty = true;
        if b.all() {
            self.delete(v, &[p]);
        }
    }

    /// Acked indexes of a partially acknowledged batch.
    pub fn batch_acked(&self, p: Position) -> Option<&BatchAck> {
        self.batch.get(&p)
    }

    /// Seek: everything before `p` acknowledged, nothing at or after it.
    pub fn reset(&mut self, v: &impl LedgerView, p: Position) {
        self.floor = v.normalize(p);
        self.ranges.clear();
        self.batch.clear();
        self.read_pos = self.floor;
        self.dirty = true;
    }

    /// Acknowledges the next `n` unacknowledged entries (Pulsar's skip).
    pub fn skip(&mut self, v: &impl LedgerView, n: u64) {
        let Some(lac) = v.lac() else { return };
        let mut left = n;
        let mut p = v.normalize(self.floor);
        let mut last = None;
        while left > 0 && p <= lac {
            if let Some(end) = self
                .ranges
                .get(&p.ledger_id)
                .and_then(|r| r.covering(p.entry_id))
            {
                p = v.normalize(Position::new(p.ledger_id, end));
                continue;
            }
            last = Some(p);
            left -= 1;
            p = v.normalize(Position::new(p.ledger_id, p.entry_id + 1));
        }
        if let Some(last) = last {
            self.mark_delete(v, last);
        }
    }

    /// Unacknowledged confirmed entries (a partially acked batch counts as one).
    pub fn backlog(&self, v: &impl LedgerView) -> u64 {
        let floor = v.normalize(self.floor);
        let total = v.count_from(floor);
        let acked: u64 = self
            .ranges
            .iter()
            .map(|(&l, r)| {
                let from = if l == floor.ledger_id {
                    floor.entry_id
                } else if l < floor.ledger_id {
                    u64::MAX
                } else {
                    0
                };
                r.count_within(from, v.confirmed_in(l))
            })
            .sum();
        total.saturating_sub(acked)
    }

    /// Up to `max` unacknowledged confirmed positions from the read position on,
    /// as runs `(ledger, first, last)`; moves the read position past them.
    pub fn next_runs(&mut self, v: &impl LedgerView, max: usize) -> Vec<(u64, u64, u64)> {
        let mut runs: Vec<(u64, u64, u64)> = Vec::new();
        let Some(lac) = v.lac() else { return runs };
        let mut p = v.normalize(self.read_pos.max(self.floor));
        let mut n = 0;
        while n < max && p <= lac {
            if let Some(end) = self
                .ranges
                .get(&p.ledger_id)
                .and_then(|r| r.covering(p.entry_id))
            {
                p = v.normalize(Position::new(p.ledger_id, end));
                continue;
            }
            match runs.last_mut() {
                Some((l, _, last)) if *l == p.ledger_id && *last + 1 == p.entry_id => *last += 1,
                _ => runs.push((p.ledger_id, p.entry_id, p.entry_id)),
            }
            n += 1;
            p = v.normalize(Position::new(p.ledger_id, p.entry_id + 1));
        }
        self.read_pos = p;
        runs
    }

    pub fn snapshot(&self, max_ranges: usize) -> CursorSnapshot {
        let mut ranges = Vec::new();
        'outer: for (&l, r) in &self.ranges {
            for (s, e) in r.iter() {
                if ranges.len() >= max_ranges {
                    break 'outer;
                }
                ranges.push((l, s, e));
            }
        }
        let batch = self
            .batch
            .iter()
            .take(max_ranges)
            .map(|(p, b)| (p.ledger_id, p.entry_id, b.size, b.acked.clone()))
            .collect();
        CursorSnapshot {
            floor: (self.floor.ledger_id, self.floor.entry_id),
            ranges,
            batch,
            properties: self.properties.clone(),
            internal: self.internal,
        }
    }

    pub fn from_snapshot(s: &CursorSnapshot) -> CursorState {
        let floor = Position::new(s.floor.0, s.floor.1);
        let mut st = CursorState::new(floor);
        st.properties = s.properties.clone();
        st.internal = s.internal;
        for &(l, a, b) in &s.ranges {
            st.ranges.entry(l).or_default().insert(a, b);
        }
        for (l, e, size, words) in &s.batch {
            st.batch.insert(
                Position::new(*l, *e),
                BatchAck {
                    size: *size,
                    acked: words.clone(),
                },
            );
        }
        st.dirty = false;
        st
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_set_merges_and_trims() {
        let mut r = RangeSet::default();
        r.insert(5, 6);
        r.insert(7, 8);
        assert_eq!(r.iter().count(), 2);
        r.insert(6, 7);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(5, 8)]);
        r.insert(1, 3);
        r.insert(2, 10);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(1, 10)]);
        assert_eq!(r.covering(9), Some(10));
        assert_eq!(r.covering(10), None);
        r.remove_below(4);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(4, 10)]);
        assert_eq!(r.count_within(0, 6), 2);
        r.remove_below(10);
        assert!(r.is_empty());
    }

    #[test]
    fn batch_ack_counts_only_the_batch_bits() {
        let mut b = BatchAck::new(70);
        assert_eq!(b.mask(0), u64::MAX);
        assert_eq!(b.mask(1), (1 << 6) - 1);
        b.acked[0] = u64::MAX;
        assert!(!b.all());
        for i in 64..69 {
            b.set(i);
        }
        assert!(!b.all());
        b.set(69);
        assert!(b.all());
        // Bits past the batch's size neither count nor are needed.
        let mut b = BatchAck::new(3);
        b.acked[0] = 0b111;
        assert!(b.all());
        b.acked[0] = 0b1011;
        assert!(!b.all());
    }
}
