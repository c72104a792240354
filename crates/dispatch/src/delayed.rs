//! Messages held back until their delivery time (Pulsar's
//! `InMemoryDelayedDeliveryTracker`), for Shared and Key_Shared
//! subscriptions. Time is passed in (milliseconds since the epoch): the
//! tracker never reads a clock.

use std::collections::BTreeMap;

use strobe_model::Position;

/// An entry waiting for its time, with what a Key_Shared dispatcher needs
/// to put it back in its replay queue (0 for other kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayedEntry {
    pub position: Position,
    /// The entry's sticky-key hash.
    pub hash: u32,
    /// Messages in the entry.
    pub messages: u32,
}

/// Delayed entries by due time.
#[derive(Debug, Default, Clone)]
pub struct DelayedDeliveryTracker {
    by_time: BTreeMap<u64, Vec<DelayedEntry>>,
}

impl DelayedDeliveryTracker {
    /// Holds `entry` until `due_ms`.
    pub fn add(&mut self, due_ms: u64, entry: DelayedEntry) {
        self.by_time.entry(due_ms).or_default().push(entry);
    }

    /// When the next entry falls due.
    pub fn next_due(&self) -> Option<u64> {
        self.by_time.keys().next().copied()
    }

    /// Takes every entry due at or before `now_ms`, earliest first.
    pub fn take_due(&mut self, now_ms: u64) -> Vec<DelayedEntry> {
        let later = self.by_time.split_off(&(now_ms.saturating_add(1)));
        let due = std::mem::replace(&mut self.by_time, later);
        due.into_values().flatten().collect()
    }

    pub fn clear(&mut self) {
        self.by_time.clear();
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.by_time.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_time.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::{DelayedDeliveryTracker, DelayedEntry};
    use strobe_model::Position;

    fn entry(e: u64) -> DelayedEntry {
        DelayedEntry {
            position: Position::new(1, e),
            hash: e as u32,
            messages: 1,
        }
    }

    #[test]
    fn entries_come_out_when_due_earliest_first() {
        let mut t = DelayedDeliveryTracker::default();
        t.add(300, entry(3));
        t.add(100, entry(1));
        t.add(100, entry(2));
        assert_eq!(t.next_due(), Some(100));
        assert!(t.take_due(99).is_empty());
        assert_eq!(t.take_due(100), vec![entry(1), entry(2)]);
        assert_eq!((t.next_due(), t.len()), (Some(300), 1));
        assert_eq!(t.take_due(u64::MAX), vec![entry(3)]);
        assert!(t.is_empty());
        assert_eq!(t.next_due(), None);
    }
}
