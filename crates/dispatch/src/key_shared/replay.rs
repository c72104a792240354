//! Entries waiting to be (re)dispatched (`redeliveryMessages`), in position
//! order, indexed by hash so "is an earlier entry of this hash waiting?" is cheap.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use strobe_model::Position;

/// One waiting entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayEntry {
    pub hash: u32,
    pub batch_size: u32,
}

#[derive(Debug, Clone, Default)]
pub struct ReplayQueue {
    entries: BTreeMap<Position, ReplayEntry>,
    by_hash: HashMap<u32, BTreeSet<Position>>,
}

impl ReplayQueue {
    pub fn new() -> ReplayQueue {
        ReplayQueue::default()
    }

    /// Adds (or keeps) a position.
    pub fn add(&mut self, position: Position, entry: ReplayEntry) {
        if let Some(old) = self.entries.insert(position, entry) {
            self.unindex(position, old.hash);
        }
        self.by_hash.entry(entry.hash).or_default().insert(position);
    }

    pub fn remove(&mut self, position: Position) -> Option<ReplayEntry> {
        let e = self.entries.remove(&position)?;
        self.unindex(position, e.hash);
        Some(e)
    }

    fn unindex(&mut self, position: Position, hash: u32) {
        if let Some(set) = self.by_hash.get_mut(&hash) {
            set.remove(&position);
            if set.is_empty() {
                self.by_hash.remove(&hash);
            }
        }
    }

    pub fn contains(&self, position: Position) -> bool {
        self.entries.contains_key(&position)
    }

    pub fn get(&self, position: Position) -> Option<ReplayEntry> {
        self.entries.get(&position).copied()
    }

    /// Whether any entry of `hash` waits (`containsStickyKeyHash`).
    pub fn contains_hash(&self, hash: u32) -> bool {
        self.by_hash.contains_key(&hash)
    }

    /// The first waiting entry of `hash`.
    pub fn earliest_of_hash(&self, hash: u32) -> Option<Position> {
        self.by_hash.get(&hash).and_then(|s| s.first().copied())
    }

    /// Waiting entries per hash.
    pub fn hashes(&self) -> impl Iterator<Item = (u32, usize)> + '_ {
        self.by_hash.iter().map(|(h, s)| (*h, s.len()))
    }

    pub fn iter(&self) -> impl Iterator<Item = (Position, ReplayEntry)> + '_ {
        self.entries.iter().map(|(p, e)| (*p, *e))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
