//! Which consumers of a scalable topic's subscription read which segments
//! (Pulsar's `SubscriptionCoordinator.computeAssignment`), as a pure,
//! deterministic function of the layout, the consumers' names and what the
//! subscription has already read to its end.
//!
//! - **Assignable**, for a stream subscription: a segment whose every parent
//!   still in the layout is drained (read to its sealed end) and which is not
//!   drained itself; so a key's messages in a child are read only after its
//!   parent's. Unlike Pulsar, a drained sealed segment leaves the assignment
//!   (nothing is left to read in it). A checkpoint group reads every segment
//!   (its positions are the application's: no gating).
//! - Segments are taken by `(start, end, id)`, consumers by name.
//! - **Consumers ≤ segments**: segment `i` goes to consumer `i % k`, alone
//!   (read Exclusive).
//! - **Consumers > segments**: every segment gets one consumer, then the
//!   surplus goes round robin over the segments that have fewer readers than
//!   PIP-486 buckets; every reader of a shared segment gets the segment's
//!   full bucket list (as the later Pulsar, #26208) and reads it Key_Shared
//!   with entry-bucket dispatch, so the broker spreads whole buckets among
//!   them. Consumers left over read nothing. A checkpoint group's readers
//!   have no subscription to share, so its segments are never shared.

use std::collections::{BTreeMap, BTreeSet};

use strobe_model::scalable::{HashRange, RING_SIZE};

use crate::layout::Layout;
use crate::segment::Segment;

/// What kind of reader a subscription has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReaderKind {
    /// Ordered per key: children wait for their parents to be drained.
    Stream,
    /// Positions kept by the application: every segment, no gating.
    Checkpoint,
}

/// One segment given to one consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignedSegment {
    pub segment_id: u64,
    pub range: HashRange,
    /// Empty: this consumer reads the segment alone. Otherwise the
    /// segment's buckets (inclusive ranges of the 16-bit bucket hash),
    /// the same list for every consumer sharing it.
    pub bucket_ranges: Vec<(u16, u16)>,
    /// The v4 topic of a legacy segment (PIP-475).
    pub legacy_topic_name: Option<String>,
}

/// The buckets of a segment as inclusive ranges of the bucket hash.
pub fn bucket_ranges(splits: &[u32]) -> Vec<(u16, u16)> {
    let mut bounds = vec![0u32];
    bounds.extend(splits.iter().copied().filter(|s| *s > 0 && *s < RING_SIZE));
    bounds.push(RING_SIZE);
    bounds
        .windows(2)
        .filter(|w| w[0] < w[1])
        .map(|w| (w[0] as u16, (w[1] - 1) as u16))
        .collect()
}

impl Layout {
    /// The segments a subscription of `kind` may be given now, in
    /// assignment order; `drained` are those it has read to their end.
    pub fn assignable(&self, kind: ReaderKind, drained: &BTreeSet<u64>) -> Vec<&Segment> {
        let mut out: Vec<&Segment> = self
            .segments
            .values()
            .filter(|s| match kind {
                ReaderKind::Checkpoint => true,
                ReaderKind::Stream => {
                    !drained.contains(&s.segment_id)
                        && s.parent_ids
                            .iter()
                            .all(|p| drained.contains(p) || !self.segments.contains_key(p))
                }
            })
            .collect();
        out.sort_by_key(|s| (s.hash_range.start, s.hash_range.end, s.segment_id));
        out
    }
}

/// Every consumer's segments (each consumer named once; an unnamed one
/// reads nothing).
pub fn assign(
    layout: &Layout,
    consumers: &[String],
    kind: ReaderKind,
    drained: &BTreeSet<u64>,
) -> BTreeMap<String, Vec<AssignedSegment>> {
    let names: Vec<&String> = consumers
        .iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut out: BTreeMap<String, Vec<AssignedSegment>> =
        names.iter().map(|n| ((*n).clone(), Vec::new())).collect();
    let segments = layout.assignable(kind, drained);
    let (k, n) = (names.len(), segments.len());
    if k == 0 || n == 0 {
        return out;
    }
    // A checkpoint group reads with readers: no subscription for the
    // broker to spread buckets over, so a segment is never shared and the
    // consumers beyond the segments read nothing.
    if k <= n || kind == ReaderKind::Checkpoint {
        for (i, s) in segments.iter().enumerate() {
            out.get_mut(names[i % k])
                .expect("named")
                .push(AssignedSegment {
                    segment_id: s.segment_id,
                    range: s.hash_range,
                    bucket_ranges: Vec::new(),
                    legacy_topic_name: s.legacy_topic_name.clone(),
                });
        }
        return out;
    }
    // More consumers than segments: readers per segment, then who.
    let mut readers = vec![1usize; n];
    let mut surplus = k - n;
    while surplus > 0 {
        let mut placed = false;
        for (i, s) in segments.iter().enumerate() {
            if surplus == 0 {
                break;
            }
            if readers[i] < s.buckets() as usize {
                readers[i] += 1;
                surplus -= 1;
                placed = true;
            }
        }
        if !placed {
            break;
        }
    }
    let mut next = names.iter();
    for (i, s) in segments.iter().enumerate() {
        let ranges = if readers[i] > 1 {
            bucket_ranges(&s.entry_bucket_splits)
        } else {
            Vec::new()
        };
        for _ in 0..readers[i] {
            let name = next.next().expect("as many names as readers");
            out.get_mut(*name).expect("named").push(AssignedSegment {
                segment_id: s.segment_id,
                range: s.hash_range,
                bucket_ranges: ranges.clone(),
                legacy_topic_name: s.legacy_topic_name.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i:02}")).collect()
    }

    #[test]
    fn pulsars_cases() {
        assert_eq!(
            bucket_ranges(&[16384, 32768, 49152]),
            vec![(0, 16383), (16384, 32767), (32768, 49151), (49152, 65535)]
        );
        assert_eq!(bucket_ranges(&[]), vec![(0, 65535)]);
        let l = Layout::create(1, 4, BTreeMap::new(), 1).unwrap();
        let (l, _) = l.split(0, 2).unwrap();
        // Children wait for the parent, which the two consumers share.
        let none = BTreeSet::new();
        let a = assign(&l, &names(2), ReaderKind::Stream, &none);
        assert_eq!(
            a["c00"].iter().map(|s| s.segment_id).collect::<Vec<_>>(),
            vec![0]
        );
        assert_eq!(
            a["c01"].iter().map(|s| s.segment_id).collect::<Vec<_>>(),
            vec![0]
        );
        assert_eq!(a["c01"][0].bucket_ranges.len(), 4);
        // Drained: the children, one each, alone.
        let drained = BTreeSet::from([0]);
        let a = assign(&l, &names(2), ReaderKind::Stream, &drained);
        assert_eq!(a["c00"][0].segment_id, 1);
        assert_eq!(a["c01"][0].segment_id, 2);
        assert!(a["c00"][0].bucket_ranges.is_empty());
        // Checkpoint: everything, no gating.
        let a = assign(&l, &names(1), ReaderKind::Checkpoint, &none);
        assert_eq!(a["c00"].len(), 3);
        // Five consumers on two segments of two buckets each: two each,
        // sharing the full list; the fifth reads nothing.
        let a = assign(&l, &names(5), ReaderKind::Stream, &drained);
        assert_eq!(a["c00"][0].segment_id, 1);
        assert_eq!(a["c01"][0].segment_id, 1);
        assert_eq!(a["c02"][0].segment_id, 2);
        assert_eq!(a["c00"][0].bucket_ranges, vec![(0, 32767), (32768, 65535)]);
        assert!(a["c04"].is_empty());
        // A checkpoint group of five on three segments: one each, alone;
        // two read nothing.
        let a = assign(&l, &names(5), ReaderKind::Checkpoint, &none);
        let ids: Vec<Vec<u64>> = a
            .values()
            .map(|v| v.iter().map(|s| s.segment_id).collect())
            .collect();
        assert_eq!(ids, vec![vec![1], vec![0], vec![2], vec![], vec![]]);
        assert!(a.values().flatten().all(|s| s.bucket_ranges.is_empty()));
    }

    /// A random layout from a creation and some splits and merges.
    fn layouts() -> impl Strategy<Value = Layout> {
        (
            1u32..5,
            proptest::collection::vec((any::<bool>(), any::<u16>(), any::<u16>()), 0..12),
        )
            .prop_map(|(n, ops)| {
                let mut l = Layout::create(n, 8, BTreeMap::new(), 1).unwrap();
                for (split, a, b) in ops {
                    let active: Vec<u64> = l.active().iter().map(|s| s.segment_id).collect();
                    let pick = |x: u16| active[x as usize % active.len()];
                    let next = if split {
                        l.split(pick(a), 2).map(|(l, _)| l)
                    } else {
                        l.merge(pick(a), pick(b), 2).map(|(l, _)| l)
                    };
                    if let Ok(next) = next {
                        l = next;
                    }
                }
                l
            })
    }

    proptest! {
        #[test]
        fn assignments_cover_gate_and_are_deterministic(
            l in layouts(),
            k in 1usize..12,
            drained_bits in any::<u64>(),
        ) {
            // Drain only sealed segments (an active one cannot be drained).
            let drained: BTreeSet<u64> = l
                .segments
                .values()
                .filter(|s| !s.is_active() && drained_bits & (1 << (s.segment_id % 64)) != 0)
                .map(|s| s.segment_id)
                .collect();
            let consumers = names(k);
            let a = assign(&l, &consumers, ReaderKind::Stream, &drained);
            let mut reversed = consumers.clone();
            reversed.reverse();
            prop_assert_eq!(&a, &assign(&l, &reversed, ReaderKind::Stream, &drained));
            let assignable: BTreeSet<u64> = l
                .assignable(ReaderKind::Stream, &drained)
                .iter()
                .map(|s| s.segment_id)
                .collect();
            let mut readers: BTreeMap<u64, Vec<&AssignedSegment>> = BTreeMap::new();
            for segs in a.values() {
                for s in segs {
                    readers.entry(s.segment_id).or_default().push(s);
                }
            }
            // Every assignable segment is read, nothing else is.
            prop_assert_eq!(readers.keys().copied().collect::<BTreeSet<_>>(), assignable.clone());
            for (id, rs) in &readers {
                let seg = l.get(*id).unwrap();
                // Never a child before its parents are drained.
                for p in &seg.parent_ids {
                    prop_assert!(drained.contains(p) || !l.segments.contains_key(p));
                }
                prop_assert!(rs.len() as u32 <= seg.buckets());
                if rs.len() == 1 {
                    prop_assert!(rs[0].bucket_ranges.is_empty());
                } else {
                    let full = bucket_ranges(&seg.entry_bucket_splits);
                    for r in rs {
                        prop_assert_eq!(&r.bucket_ranges, &full);
                    }
                }
            }
            if k <= assignable.len() {
                // Alone on each, spread evenly.
                prop_assert!(readers.values().all(|r| r.len() == 1));
                let counts: Vec<usize> = a.values().map(Vec::len).collect();
                let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                prop_assert!(max - min <= 1);
            } else {
                // Each consumer reads one segment at most.
                prop_assert!(a.values().all(|s| s.len() <= 1));
            }
        }
    }
}
