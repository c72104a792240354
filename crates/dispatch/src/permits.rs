//! Permits and the Shared subscription's round robin.

/// Permits an entry consumes: one per message in it (a batch of n takes n),
/// as Pulsar counts them. At least one, so an entry always costs something.
pub fn permits_for_entry(messages_in_entry: u32) -> u32 {
    messages_in_entry.max(1)
}

/// Round robin over the consumers of a Shared subscription that have permits,
/// starting after the last one served, so no consumer starves another.
#[derive(Debug, Default, Clone)]
pub struct SharedSelector {
    next: usize,
}

impl SharedSelector {
    /// Picks a consumer index given each consumer's available permits; `None`
    /// when no consumer has any.
    pub fn pick(&mut self, permits: &[u32]) -> Option<usize> {
        let n = permits.len();
        if n == 0 {
            return None;
        }
        for step in 0..n {
            let i = (self.next + step) % n;
            if permits[i] > 0 {
                self.next = (i + 1) % n;
                return Some(i);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn batches_cost_their_size() {
        assert_eq!(permits_for_entry(0), 1);
        assert_eq!(permits_for_entry(1), 1);
        assert_eq!(permits_for_entry(10), 10);
    }

    #[test]
    fn skips_consumers_without_permits() {
        let mut s = SharedSelector::default();
        assert_eq!(s.pick(&[0, 3, 0, 2]), Some(1));
        assert_eq!(s.pick(&[0, 3, 0, 2]), Some(3));
        assert_eq!(s.pick(&[0, 3, 0, 2]), Some(1));
        assert_eq!(s.pick(&[0, 0]), None);
        assert_eq!(s.pick(&[]), None);
    }

    proptest! {
        /// With equal permits, every consumer gets within one of every other.
        #[test]
        fn fair_spread(n in 1usize..8, rounds in 1usize..200) {
            let mut s = SharedSelector::default();
            let mut counts = vec![0usize; n];
            let permits = vec![1u32; n];
            for _ in 0..rounds {
                counts[s.pick(&permits).unwrap()] += 1;
            }
            let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            prop_assert!(max - min <= 1);
        }
    }
}
