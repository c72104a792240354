//! Assignment snapshots (`ConsumerHashAssignmentsSnapshot`) and their diff
//! (`ImpactedConsumersResult`): which hash ranges each consumer owns, and which
//! ranges moved when a consumer joined or left. The dispatcher uses the diff to
//! start draining the hashes a consumer gave up.

use std::collections::BTreeMap;
use std::fmt;

use super::consumer_id::ConsumerId;

/// The largest sticky-key hash: hashes live in `[0, 65535]` (`DEFAULT_RANGE_SIZE`
/// is 65536), and 0 is reserved as "not set".
pub const MAX_HASH: u32 = 0xffff;

/// An inclusive range of sticky-key hashes, Pulsar's `Range`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HashRange {
    pub start: u32,
    pub end: u32,
}

impl HashRange {
    pub const fn new(start: u32, end: u32) -> HashRange {
        HashRange { start, end }
    }
    /// The whole 16-bit ring, `[0, 65535]`.
    pub const FULL: HashRange = HashRange::new(0, MAX_HASH);
    pub fn contains(&self, hash: u32) -> bool {
        self.start <= hash && hash <= self.end
    }
    /// Number of hashes in the range (`end - start + 1`).
    pub fn size(&self) -> u32 {
        self.end - self.start + 1
    }
    pub fn overlaps(&self, other: &HashRange) -> bool {
        self.start <= other.end && other.start <= self.end
    }
}

impl fmt::Display for HashRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {}]", self.start, self.end)
    }
}

/// One consumer's range in a snapshot (`HashRangeAssignment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashRangeAssignment {
    pub range: HashRange,
    pub consumer: ConsumerId,
}

/// Sorted, non-overlapping ranges with their owners; adjacent ranges of one
/// consumer are merged, so two snapshots of the same ownership compare equal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssignmentSnapshot {
    assignments: Vec<HashRangeAssignment>,
}

impl AssignmentSnapshot {
    /// Builds a snapshot from assignments in any order. Overlapping input is a
    /// bug in the selector (debug assertion); adjacent ranges of one consumer merge.
    pub fn from_assignments(mut list: Vec<HashRangeAssignment>) -> AssignmentSnapshot {
        list.sort_by_key(|a| a.range.start);
        let mut out: Vec<HashRangeAssignment> = Vec::with_capacity(list.len());
        for a in list {
            if let Some(last) = out.last_mut() {
                debug_assert!(last.range.end < a.range.start, "overlapping assignments");
                if last.consumer == a.consumer && last.range.end + 1 == a.range.start {
                    last.range.end = a.range.end;
                    continue;
                }
            }
            out.push(a);
        }
        AssignmentSnapshot { assignments: out }
    }

    pub fn assignments(&self) -> &[HashRangeAssignment] {
        &self.assignments
    }

    pub fn is_empty(&self) -> bool {
        self.assignments.is_empty()
    }

    /// The owner of `hash` according to this snapshot.
    pub fn owner_of(&self, hash: u32) -> Option<ConsumerId> {
        let i = self.assignments.partition_point(|a| a.range.end < hash);
        self.assignments
            .get(i)
            .filter(|a| a.range.contains(hash))
            .map(|a| a.consumer)
    }

    /// The ranges one consumer owns, ascending.
    pub fn ranges_of(&self, consumer: ConsumerId) -> Vec<HashRange> {
        self.assignments
            .iter()
            .filter(|a| a.consumer == consumer)
            .map(|a| a.range)
            .collect()
    }

    /// Every consumer with its ranges.
    pub fn by_consumer(&self) -> BTreeMap<ConsumerId, Vec<HashRange>> {
        let mut map: BTreeMap<ConsumerId, Vec<HashRange>> = BTreeMap::new();
        for a in &self.assignments {
            map.entry(a.consumer).or_default().push(a.range);
        }
        map
    }

    /// What changed from `self` to `after` (`resolveImpactedConsumers`): every
    /// sub-range whose owner changed is REMOVED from its old owner and ADDED to
    /// its new one. Ranges in each list are merged and ascending.
    pub fn diff(&self, after: &AssignmentSnapshot) -> ImpactedConsumers {
        // Elementary intervals between every boundary of either snapshot.
        let mut cuts: Vec<u32> = Vec::new();
        for a in self.assignments.iter().chain(after.assignments.iter()) {
            cuts.push(a.range.start);
            cuts.push(a.range.end + 1);
        }
        cuts.sort_unstable();
        cuts.dedup();
        let mut out = ImpactedConsumers::default();
        for w in cuts.windows(2) {
            let range = HashRange::new(w[0], w[1] - 1);
            let (b, a) = (self.owner_of(range.start), after.owner_of(range.start));
            if b == a {
                continue;
            }
            if let Some(b) = b {
                push_merged(out.removed.entry(b).or_default(), range);
            }
            if let Some(a) = a {
                push_merged(out.added.entry(a).or_default(), range);
            }
        }
        out
    }
}

fn push_merged(list: &mut Vec<HashRange>, range: HashRange) {
    if let Some(last) = list.last_mut()
        && last.end + 1 >= range.start
    {
        last.end = last.end.max(range.end);
        return;
    }
    list.push(range);
}

/// The ranges each consumer lost (`removed`) and gained (`added`) in one change
/// of membership, Pulsar's `ImpactedConsumersResult`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImpactedConsumers {
    pub removed: BTreeMap<ConsumerId, Vec<HashRange>>,
    pub added: BTreeMap<ConsumerId, Vec<HashRange>>,
}

impl ImpactedConsumers {
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.added.is_empty()
    }
    /// Whether `consumer` lost `hash` in this change.
    pub fn removed_from(&self, consumer: ConsumerId, hash: u32) -> bool {
        contains(self.removed.get(&consumer), hash)
    }
    /// Whether `consumer` gained `hash` in this change.
    pub fn added_to(&self, consumer: ConsumerId, hash: u32) -> bool {
        contains(self.added.get(&consumer), hash)
    }
}

fn contains(ranges: Option<&Vec<HashRange>>, hash: u32) -> bool {
    ranges.is_some_and(|rs| {
        let i = rs.partition_point(|r| r.end < hash);
        rs.get(i).is_some_and(|r| r.contains(hash))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(start: u32, end: u32, c: u64) -> HashRangeAssignment {
        HashRangeAssignment {
            range: HashRange::new(start, end),
            consumer: ConsumerId(c),
        }
    }

    #[test]
    fn merges_adjacent_ranges_of_one_consumer() {
        let s = AssignmentSnapshot::from_assignments(vec![a(11, 20, 1), a(0, 10, 1), a(21, 30, 2)]);
        assert_eq!(s.assignments(), &[a(0, 20, 1), a(21, 30, 2)]);
        assert_eq!(s.owner_of(20), Some(ConsumerId(1)));
        assert_eq!(s.owner_of(21), Some(ConsumerId(2)));
        assert_eq!(s.owner_of(31), None);
    }

    #[test]
    fn diff_reports_moved_subranges() {
        let before = AssignmentSnapshot::from_assignments(vec![a(0, 99, 1)]);
        let after = AssignmentSnapshot::from_assignments(vec![a(0, 49, 2), a(50, 99, 1)]);
        let d = before.diff(&after);
        assert_eq!(d.removed[&ConsumerId(1)], vec![HashRange::new(0, 49)]);
        assert_eq!(d.added[&ConsumerId(2)], vec![HashRange::new(0, 49)]);
        assert!(d.removed_from(ConsumerId(1), 49));
        assert!(!d.removed_from(ConsumerId(1), 50));
        let back = after.diff(&before);
        assert_eq!(back.added[&ConsumerId(1)], vec![HashRange::new(0, 49)]);
        assert!(before.diff(&before).is_empty());
    }
}
