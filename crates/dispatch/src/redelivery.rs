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
        self.counts.remove(&p);
    }

    pub fn clear(&mut self) {
        self.counts.clear();
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
