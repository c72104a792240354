//! Draining hashes (PIP-379's `DrainingHashesTracker`): a hash that moved away
//! from a consumer with unacked entries of it stays "draining" for that consumer
//! (its owner) until those entries are acked or redelivered; meanwhile the new
//! owner is blocked for that hash.
//!
//! Where Pulsar counts with increments and decrements that must pair up, Strobe
//! keeps the count exact: an entry is created with the owner's pending count for
//! the hash when the hash moves away, is decremented only when one of those
//! pending entries leaves, and is deleted outright when the hash comes back to
//! its owner. A join → leave → rejoin cycle therefore cannot leave a count that
//! never reaches zero (the drain that could never complete).

use std::collections::HashMap;

use super::consumer_id::ConsumerId;

/// One draining hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainingEntry {
    /// The consumer still holding unacked entries of the hash.
    pub owner: ConsumerId,
    /// How many of its entries are unacked.
    pub ref_count: u32,
    /// How often dispatch to another consumer was refused because of it.
    pub blocked_attempts: u64,
}

/// One draining hash in a consumer's stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainingHashStat {
    pub hash: u32,
    pub unacked_entries: u32,
    pub blocked_attempts: u64,
}

/// Per-consumer draining stats, the fields of Pulsar's `ConsumerStats`
/// (`drainingHashesCount`, `drainingHashesClearedTotal`,
/// `drainingHashesUnackedMessages`, `drainingHashes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerDrainingStats {
    pub draining_hashes_count: usize,
    pub draining_hashes_cleared_total: u64,
    pub draining_hashes_unacked: u64,
    pub draining_hashes: Vec<DrainingHashStat>,
}

#[derive(Debug, Clone, Default)]
pub struct DrainingHashesTracker {
    entries: HashMap<u32, DrainingEntry>,
    cleared_total: HashMap<ConsumerId, u64>,
}

impl DrainingHashesTracker {
    pub fn new() -> DrainingHashesTracker {
        DrainingHashesTracker::default()
    }

    /// One more unacked entry of `hash` at `owner` (`addEntry`). A hash already
    /// draining for another consumer is left alone: two consumers never hold the
    /// same hash, so that would be a bug upstream (debug assertion).
    pub fn add_entry(&mut self, owner: ConsumerId, hash: u32) {
        let e = self.entries.entry(hash).or_insert(DrainingEntry {
            owner,
            ref_count: 0,
            blocked_attempts: 0,
        });
        debug_assert_eq!(e.owner, owner, "hash {hash} draining for two consumers");
        if e.owner == owner {
            e.ref_count += 1;
        }
    }

    /// Starts (or restarts) draining `hash` for `owner`, which holds exactly
    /// `unacked` entries of it. Setting rather than adding keeps the count exact
    /// even if the same hash is registered twice.
    pub fn start_draining(&mut self, owner: ConsumerId, hash: u32, unacked: u32) {
        if unacked == 0 {
            return;
        }
        match self.entries.get_mut(&hash) {
            Some(e) if e.owner == owner => e.ref_count = unacked,
            Some(e) => debug_assert!(false, "hash {hash} draining for {} and {owner}", e.owner),
            None => {
                self.entries.insert(
                    hash,
                    DrainingEntry {
                        owner,
                        ref_count: unacked,
                        blocked_attempts: 0,
                    },
                );
            }
        }
    }

    /// One of `owner`'s entries of `hash` was acked or taken back
    /// (`reduceRefCount`). Returns `Some(hash)` when the hash stops draining and
    /// had blocked someone, unless the owner is closing (its removal reschedules
    /// dispatch anyway).
    pub fn reduce_ref_count(&mut self, owner: ConsumerId, hash: u32, closing: bool) -> Option<u32> {
        let e = self.entries.get_mut(&hash)?;
        if e.owner != owner {
            return None;
        }
        e.ref_count = e.ref_count.saturating_sub(1);
        if e.ref_count > 0 {
            return None;
        }
        let e = self.entries.remove(&hash).expect("present");
        *self.cleared_total.entry(owner).or_default() += 1;
        (e.blocked_attempts > 0 && !closing).then_some(hash)
    }

    /// Whether dispatching `hash` to `consumer` must wait
    /// (`shouldBlockStickyKeyHash`). Counts the attempt when it must. A hash
    /// draining for `consumer` itself came back to it: the entry is dropped.
    pub fn should_block(&mut self, consumer: ConsumerId, hash: u32) -> bool {
        let Some(e) = self.entries.get_mut(&hash) else {
            return false;
        };
        if e.owner == consumer {
            self.entries.remove(&hash);
            return false;
        }
        e.blocked_attempts += 1;
        true
    }

    /// The same question without side effects.
    pub fn is_blocked(&self, consumer: ConsumerId, hash: u32) -> bool {
        self.entries.get(&hash).is_some_and(|e| e.owner != consumer)
    }

    /// The hash came back to `owner`: it holds every unacked entry of it, so it
    /// may go on receiving it and nobody waits any more.
    pub fn hash_returned(&mut self, owner: ConsumerId, hash: u32) {
        if self.entries.get(&hash).is_some_and(|e| e.owner == owner) {
            self.entries.remove(&hash);
        }
    }

    /// Drops every entry owned by a consumer that is going away, without
    /// notifications. Returns the hashes it held.
    pub fn remove_owner(&mut self, owner: ConsumerId) -> Vec<u32> {
        let mut gone: Vec<u32> = self
            .entries
            .iter()
            .filter(|(_, e)| e.owner == owner)
            .map(|(h, _)| *h)
            .collect();
        gone.sort_unstable();
        for h in &gone {
            self.entries.remove(h);
        }
        self.cleared_total.remove(&owner);
        gone
    }

    pub fn get(&self, hash: u32) -> Option<&DrainingEntry> {
        self.entries.get(&hash)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All draining hashes, ascending.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &DrainingEntry)> + '_ {
        let mut v: Vec<_> = self.entries.iter().map(|(h, e)| (*h, e)).collect();
        v.sort_unstable_by_key(|(h, _)| *h);
        v.into_iter()
    }

    /// Stats for one consumer (the hashes it is draining).
    pub fn stats(&self, consumer: ConsumerId) -> ConsumerDrainingStats {
        let hashes: Vec<DrainingHashStat> = self
            .iter()
            .filter(|(_, e)| e.owner == consumer)
            .map(|(hash, e)| DrainingHashStat {
                hash,
                unacked_entries: e.ref_count,
                blocked_attempts: e.blocked_attempts,
            })
            .collect();
        ConsumerDrainingStats {
            draining_hashes_count: hashes.len(),
            draining_hashes_cleared_total: self.cleared_total.get(&consumer).copied().unwrap_or(0),
            draining_hashes_unacked: hashes.iter().map(|h| u64::from(h.unacked_entries)).sum(),
            draining_hashes: hashes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ConsumerId = ConsumerId(1);
    const B: ConsumerId = ConsumerId(2);

    #[test]
    fn unblocks_only_after_blocking_and_last_ack() {
        let mut t = DrainingHashesTracker::new();
        t.add_entry(A, 7);
        t.add_entry(A, 7);
        assert!(!t.should_block(A, 7));
        // Owner asked: the entry is gone (hash came back).
        assert!(t.is_empty());
        t.add_entry(A, 7);
        t.add_entry(A, 7);
        assert!(t.should_block(B, 7));
        assert!(t.should_block(B, 7));
        assert_eq!(t.get(7).unwrap().blocked_attempts, 2);
        assert_eq!(t.reduce_ref_count(B, 7, false), None);
        assert_eq!(t.reduce_ref_count(A, 7, false), None);
        assert_eq!(t.reduce_ref_count(A, 7, false), Some(7));
        assert!(!t.should_block(B, 7));
        assert_eq!(t.stats(A).draining_hashes_cleared_total, 1);
    }

    #[test]
    fn never_blocked_or_closing_clears_silently() {
        let mut t = DrainingHashesTracker::new();
        t.add_entry(A, 1);
        assert_eq!(t.reduce_ref_count(A, 1, false), None);
        t.add_entry(A, 2);
        assert!(t.should_block(B, 2));
        assert_eq!(t.reduce_ref_count(A, 2, true), None);
        assert!(t.is_empty());
    }

    #[test]
    fn stats_per_owner() {
        let mut t = DrainingHashesTracker::new();
        t.add_entry(A, 1);
        t.add_entry(A, 1);
        t.add_entry(A, 3);
        t.add_entry(B, 2);
        assert!(t.should_block(B, 3));
        let s = t.stats(A);
        assert_eq!(s.draining_hashes_count, 2);
        assert_eq!(s.draining_hashes_unacked, 3);
        assert_eq!(
            s.draining_hashes[1],
            DrainingHashStat {
                hash: 3,
                unacked_entries: 1,
                blocked_attempts: 1
            }
        );
        assert_eq!(t.remove_owner(A), vec![1, 3]);
        assert_eq!(t.len(), 1);
    }
}
