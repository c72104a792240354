//! How many times each entry went out again (Pulsar's
//! `InMemoryRedeliveryTracker`): a consumer sees the count as the message's
//! `redelivery_count`, and dead-letter policies act on it.

use std::collections::HashMap;

use strobe_model::Position;

/// Redelivery counts by position; an entry without one was delivered once.
#[derive(Debug, Default, Clone)]
pub struct RedeliveryTracker {
    counts: HashMap<Position, u32>,
}

impl RedeliveryTracker {
    /// One more redelivery of `p`.
    pub fn increment(&mut self, p: Position) {
        *self.counts.entry(p).or_insert(0) += 1;
    }

    /// One more redelivery of each of `positions`.
    pub fn increment_all<'a>(&mut self, positions: impl IntoIterator<Item = &'a Position>) {
        for p in positions {
            self.increment(*p);
        }
    }

    /// How many times `p` was redelivered (0: never).
    pub fn count(&self, p: Position) -> u32 {
        self.counts.get(&p).copied().unwrap_or(0)
    }

    /// `p` was acknowledged (or is gone): its count goes.
    pub fn remove(&mut self, p: Position) {
        if self.counts.remove(&p).is_some() {
            self.release_if_sparse();
        }
    }

    pub fn clear(&mut self) {
        self.counts = HashMap::new();
    }

    /// A map keeps its largest capacity for good: a subscription that once had
    /// thousands of redeliveries in flight would hold that memory as long as it
    /// lives. Shrinking to twice the size once it falls under a quarter keeps the
    /// cost amortised.
    fn release_if_sparse(&mut self) {
        let (len, cap) = (self.counts.len(), self.counts.capacity());
        if cap > 64 && len * 4 < cap {
            self.counts.shrink_to(len * 2);
        }
    }

    /// Memory the map holds, in entries (for tests).
    pub fn capacity(&self) -> usize {
        self.counts.capacity()
    }

    /// Positions with a count (bounded by the entries delivered and not acknowledged).
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::RedeliveryTracker;
    use strobe_model::Position;

    #[test]
    fn memory_goes_back_as_counts_go() {
        let mut t = RedeliveryTracker::default();
        let ps: Vec<Position> = (0..10_000).map(|i| Position::new(1, i)).collect();
        t.increment_all(&ps);
        assert!(t.capacity() >= 10_000);
        for p in &ps[..9_990] {
            t.remove(*p);
        }
        assert_eq!(t.len(), 10);
        assert!(
            t.capacity() <= 128,
            "capacity {} for 10 counts",
            t.capacity()
        );
        assert_eq!(t.count(ps[9_995]), 1);
    }

    #[test]
    fn counts_grow_per_redelivery_and_go_on_removal() {
        let mut t = RedeliveryTracker::default();
        let (a, b) = (Position::new(1, 0), Position::new(1, 1));
        assert_eq!(t.count(a), 0);
        t.increment(a);
        t.increment_all(&[a, b]);
        assert_eq!((t.count(a), t.count(b)), (2, 1));
        t.remove(a);
        assert_eq!(t.count(a), 0);
        assert_eq!(t.len(), 1);
        t.clear();
        assert!(t.is_empty());
    }
}
