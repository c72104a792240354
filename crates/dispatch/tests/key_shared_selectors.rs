//! Selectors, snapshots and hashing: Pulsar's constants and algorithms, checked
//! against hand-computed vectors and properties.

use std::collections::BTreeSet;

use proptest::prelude::*;
use strobe_dispatch::key_shared::{
    AssignmentSnapshot, AutoSplitSelector, ConsistentHashingSelector, ConsumerAssignError,
    ConsumerId, ConsumerSpec, EntryBucketSelector, ExclusiveRangeSelector, HashRange,
    KeySharedConfig, KeySharedDispatcher, KeySharedMode, StickyKeyConsumerSelector,
    equal_width_boundaries, resolve_sticky_key, validate_boundaries,
};

fn c(id: u64) -> ConsumerId {
    ConsumerId(id)
}

fn spec(id: u64, name: &str) -> ConsumerSpec {
    ConsumerSpec::new(id, name)
}

fn dispatcher(mode: KeySharedMode) -> KeySharedDispatcher {
    KeySharedDispatcher::new(KeySharedConfig::new(mode)).unwrap()
}

/// The table of pulsar-protocol.md §5.2, through each mode's entry hash.
#[test]
fn hash_vectors_per_mode() {
    let consistent = dispatcher(KeySharedMode::auto_split());
    let ranges = dispatcher(KeySharedMode::auto_split_ranges());
    let sticky = dispatcher(KeySharedMode::Sticky);
    let one_bucket = dispatcher(KeySharedMode::EntryBuckets {
        boundaries: equal_width_boundaries(1),
    });
    let four = dispatcher(KeySharedMode::EntryBuckets {
        boundaries: equal_width_boundaries(4),
    });
    for (key, cons, low16) in [
        ("key-0", 23544, 63679),
        ("key-1", 11858, 5536),
        ("a", 42456, 27058),
        ("user-42", 5188, 56016),
        ("NONE_KEY", 56505, 48803),
    ] {
        let k = key.as_bytes();
        assert_eq!(consistent.entry_hash(k, None), cons, "{key}");
        assert_eq!(ranges.entry_hash(k, None), low16, "{key}");
        assert_eq!(sticky.entry_hash(k, None), low16, "{key}");
        // Plain Key_Shared ignores PIP-486 stamps.
        assert_eq!(sticky.entry_hash(k, Some(7)), low16, "{key}");
        assert_eq!(one_bucket.entry_hash(k, None), 1);
        assert_eq!(four.entry_hash(k, None), (low16 / 16384 * 16384).max(1));
    }
    // Stamped entries route by entry_hash_min; keyless stamps (0) land in bucket 0.
    assert_eq!(four.entry_hash(b"key-0", Some(5)), 1);
    assert_eq!(four.entry_hash(b"", Some(0)), 1);
    assert_eq!(four.entry_hash(b"key-1", Some(40000)), 32768);
    // The NONE_KEY fallback hashes like the literal key.
    let none = resolve_sticky_key(None, None, false, None, None);
    assert_eq!(consistent.entry_hash(&none, None), 56505);
}

#[test]
fn consistent_hashing_points_and_snapshot() {
    let mut s = ConsistentHashingSelector::new(100);
    assert_eq!(s.select(5), None);
    s.add_consumer(&spec(1, "alpha")).unwrap();
    assert_eq!(s.ring_points().count(), 100);
    // The point hash is makeStickyKeyHash(name \0 index \0 i).
    let p0 = ConsistentHashingSelector::point_hash("alpha", 0, 0);
    assert_eq!(p0, strobe_model::sticky_hash_consistent(b"alpha\x000\x000"));
    assert!(s.ring_points().any(|(h, _)| h == p0));
    s.add_consumer(&spec(2, "beta")).unwrap();
    // select = ceiling point, wrapping to the first.
    let points: Vec<(u32, ConsumerId)> = s.ring_points().collect();
    let (last, _) = *points.last().unwrap();
    if last < 65535 {
        assert_eq!(s.select(last + 1), Some(points[0].1));
    }
    assert_eq!(s.select(points[3].0), Some(points[3].1));
    let below = points[3].0 - 1;
    let expected = if points[2].0 == below {
        points[2].1
    } else {
        points[3].1
    };
    assert_eq!(s.select(below), Some(expected));
    // The snapshot covers [1, 65535] and agrees with select everywhere.
    let snap = s.snapshot();
    assert_eq!(snap.assignments().first().unwrap().range.start, 1);
    assert_eq!(snap.assignments().last().unwrap().range.end, 65535);
    for h in 1..=65535 {
        assert_eq!(snap.owner_of(h), s.select(h), "hash {h}");
    }
}

/// #10750: consumers sharing a name get distinct name indexes, hence distinct
/// points, and a consumer rejoining under its name gets its points back.
#[test]
fn same_name_consumers_get_their_own_points() {
    let mut s = ConsistentHashingSelector::new(100);
    s.add_consumer(&spec(1, "worker")).unwrap();
    s.add_consumer(&spec(2, "worker")).unwrap();
    let by = s.snapshot().by_consumer();
    assert_eq!(by.len(), 2, "both same-name consumers own ranges");
    let before: Vec<_> = s.ring_points().collect();
    s.remove_consumer(c(1));
    s.add_consumer(&spec(3, "worker")).unwrap();
    let after: Vec<(u32, ConsumerId)> = s
        .ring_points()
        .map(|(h, x)| (h, if x == c(3) { c(1) } else { x }))
        .collect();
    assert_eq!(before, after, "the rejoiner takes index 0's points again");
}

#[test]
fn auto_split_splits_the_biggest_range_and_merges_on_leave() {
    let mut s = AutoSplitSelector::new();
    s.add_consumer(&spec(1, "a")).unwrap();
    assert_eq!(s.snapshot().ranges_of(c(1)), vec![HashRange::new(0, 65535)]);
    let d = s.add_consumer(&spec(2, "b")).unwrap();
    assert_eq!(s.snapshot().ranges_of(c(2)), vec![HashRange::new(0, 32768)]);
    assert_eq!(d.removed[&c(1)], vec![HashRange::new(0, 32768)]);
    assert_eq!(d.added[&c(2)], vec![HashRange::new(0, 32768)]);
    s.add_consumer(&spec(3, "c")).unwrap();
    // Both halves are equally big; the first found (the lower) is split and
    // the joiner takes its lower half.
    assert_eq!(s.snapshot().ranges_of(c(3)), vec![HashRange::new(0, 16384)]);
    assert_eq!(s.select(0), Some(c(3)));
    assert_eq!(s.select(16385), Some(c(2)));
    assert_eq!(s.select(32769), Some(c(1)));
    // Leaving merges into the upper neighbour...
    let d = s.remove_consumer(c(3));
    assert_eq!(d.added[&c(2)], vec![HashRange::new(0, 16384)]);
    // ...or, for the top range, the lower neighbour grows.
    let d = s.remove_consumer(c(1));
    assert_eq!(d.added[&c(2)], vec![HashRange::new(32769, 65535)]);
    assert_eq!(s.snapshot().ranges_of(c(2)), vec![HashRange::new(0, 65535)]);
}

#[test]
fn sticky_ranges_are_validated_and_exclusive() {
    let mut s = ExclusiveRangeSelector::new();
    let bad = |r: Vec<HashRange>| ConsumerSpec::new(9, "bad").with_ranges(r);
    for r in [
        vec![],
        vec![HashRange::new(5, 4)],
        vec![HashRange::new(0, 65536)],
        vec![HashRange::new(0, 10), HashRange::new(10, 20)],
    ] {
        assert!(matches!(
            s.add_consumer(&bad(r)),
            Err(ConsumerAssignError::InvalidRanges(_))
        ));
    }
    s.add_consumer(&ConsumerSpec::new(1, "left").with_ranges(vec![HashRange::new(0, 99)]))
        .unwrap();
    let err = s
        .add_consumer(
            &ConsumerSpec::new(2, "right")
                .with_ranges(vec![HashRange::new(200, 300), HashRange::new(99, 150)]),
        )
        .unwrap_err();
    assert!(matches!(err, ConsumerAssignError::RangeConflict { consumer, .. } if consumer == c(1)));
    assert!(
        err.to_string()
            .contains("Range conflict with consumer left"),
        "{err}"
    );
    // Nothing of the failed join stuck.
    assert_eq!(s.select(250), None);
    s.add_consumer(&ConsumerSpec::new(2, "right").with_ranges(vec![HashRange::new(100, 65535)]))
        .unwrap();
    assert_eq!(s.select(99), Some(c(1)));
    assert_eq!(s.select(100), Some(c(2)));
    s.remove_consumer(c(1));
    assert_eq!(s.select(0), None, "uncovered hashes have no consumer");
}

#[test]
fn bucket_boundaries_are_validated() {
    let ok = equal_width_boundaries(4);
    assert_eq!(
        ok,
        vec![
            HashRange::new(0, 16383),
            HashRange::new(16384, 32767),
            HashRange::new(32768, 49151),
            HashRange::new(49152, 65535)
        ]
    );
    validate_boundaries(&ok).unwrap();
    validate_boundaries(&equal_width_boundaries(3)).unwrap();
    validate_boundaries(&equal_width_boundaries(32768)).unwrap();
    for bad in [
        vec![],
        vec![HashRange::new(1, 65535)],
        vec![HashRange::new(0, 0), HashRange::new(1, 65535)],
        vec![HashRange::new(0, 10), HashRange::new(12, 65535)],
        vec![HashRange::new(0, 10), HashRange::new(11, 65534)],
        vec![
            HashRange::new(0, 10),
            HashRange::new(11, 10),
            HashRange::new(11, 65535),
        ],
    ] {
        assert!(
            matches!(
                validate_boundaries(&bad),
                Err(ConsumerAssignError::InvalidBoundaries(_))
            ),
            "{bad:?}"
        );
        assert!(EntryBucketSelector::new(bad).is_err());
    }
}

#[test]
fn buckets_spread_over_consumers_sorted_by_name_then_id() {
    let b = equal_width_boundaries(8);
    let mut s = EntryBucketSelector::new(b.clone()).unwrap();
    assert_eq!(s.canonical_hash(0), 1);
    assert_eq!(s.canonical_hash(8191), 1);
    assert_eq!(s.canonical_hash(8192), 8192);
    assert_eq!(s.bucket_of(65535), 7);
    let join = |s: &mut EntryBucketSelector, id, name: &str| {
        s.add_consumer(&ConsumerSpec::new(id, name).with_ranges(b.clone()))
    };
    join(&mut s, 10, "b").unwrap();
    assert_eq!(s.buckets_of(c(10)), (0..8).collect::<Vec<_>>());
    join(&mut s, 11, "a").unwrap();
    // "a" sorts first: buckets [0, 4).
    assert_eq!(s.buckets_of(c(11)), vec![0, 1, 2, 3]);
    assert_eq!(s.buckets_of(c(10)), vec![4, 5, 6, 7]);
    join(&mut s, 5, "b").unwrap();
    // (a,11), (b,5), (b,10): [0,2), [2,5), [5,8).
    assert_eq!(s.buckets_of(c(11)), vec![0, 1]);
    assert_eq!(s.buckets_of(c(5)), vec![2, 3, 4]);
    assert_eq!(s.buckets_of(c(10)), vec![5, 6, 7]);
    // A stale layout is refused.
    let err = s
        .add_consumer(&ConsumerSpec::new(6, "z").with_ranges(equal_width_boundaries(4)))
        .unwrap_err();
    assert!(matches!(err, ConsumerAssignError::BoundaryMismatch { .. }));
    assert_eq!(s.consumer_count(), 3);
}

#[test]
fn more_consumers_than_buckets() {
    let b = equal_width_boundaries(2);
    let mut s = EntryBucketSelector::new(b.clone()).unwrap();
    for id in 0..5 {
        s.add_consumer(&ConsumerSpec::new(id, format!("c{id}")).with_ranges(b.clone()))
            .unwrap();
    }
    let owners: Vec<usize> = (0..5).map(|id| s.buckets_of(c(id)).len()).collect();
    assert_eq!(owners.iter().sum::<usize>(), 2);
    assert!(owners.iter().all(|n| *n <= 1));
    assert!(s.select(1).is_some() && s.select(40000).is_some());
    for id in 0..4 {
        s.remove_consumer(c(id));
    }
    assert_eq!(s.buckets_of(c(4)), vec![0, 1]);
}

#[test]
fn duplicate_ids_are_refused_everywhere() {
    for mode in [
        KeySharedMode::auto_split(),
        KeySharedMode::auto_split_ranges(),
        KeySharedMode::Sticky,
        KeySharedMode::EntryBuckets {
            boundaries: equal_width_boundaries(2),
        },
    ] {
        let ranges = match &mode {
            KeySharedMode::EntryBuckets { boundaries } => boundaries.clone(),
            _ => vec![HashRange::new(0, 10)],
        };
        let mut d = dispatcher(mode);
        let s = ConsumerSpec::new(1, "x").with_ranges(ranges);
        d.add_consumer(&s).unwrap();
        assert_eq!(
            d.add_consumer(&s),
            Err(ConsumerAssignError::DuplicateConsumer(c(1)))
        );
    }
}

/// Every selector's snapshot agrees with `select`, and the diff of a change
/// lists exactly the hashes whose owner changed.
fn check_selector(
    mut s: Box<dyn StickyKeyConsumerSelector>,
    ops: Vec<(bool, u8)>,
    ranges: impl Fn(u64) -> Vec<HashRange>,
) {
    let mut live: BTreeSet<u64> = BTreeSet::new();
    let mut next = 0u64;
    for (join, pick) in ops {
        let before: AssignmentSnapshot = s.snapshot().clone();
        let impacted = if join || live.is_empty() {
            next += 1;
            let sp = ConsumerSpec::new(next, format!("n{}", pick % 3)).with_ranges(ranges(next));
            match s.add_consumer(&sp) {
                Ok(i) => {
                    live.insert(next);
                    i
                }
                Err(_) => continue,
            }
        } else {
            let id = *live.iter().nth(pick as usize % live.len()).unwrap();
            live.remove(&id);
            s.remove_consumer(c(id))
        };
        let after = s.snapshot();
        // Consistent hashing works on [1, 65535]; 0 is never a sticky hash.
        for h in (1..=65535u32).step_by(97).chain([1, 65534, 65535]) {
            assert_eq!(after.owner_of(h), s.select(h), "hash {h}");
            let (b, a) = (before.owner_of(h), after.owner_of(h));
            if b == a {
                assert!(b.is_none_or(|b| !impacted.removed_from(b, h) && !impacted.added_to(b, h)));
            } else {
                if let Some(b) = b {
                    assert!(impacted.removed_from(b, h));
                }
                if let Some(a) = a {
                    assert!(impacted.added_to(a, h));
                }
            }
        }
        let mut prev_end: Option<u32> = None;
        for a in after.assignments() {
            assert!(a.range.start <= a.range.end && a.range.end <= 65535);
            assert!(prev_end.is_none_or(|e| e < a.range.start));
            prev_end = Some(a.range.end);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn consistent_snapshots_and_diffs(ops in prop::collection::vec((any::<bool>(), any::<u8>()), 1..20)) {
        check_selector(Box::new(ConsistentHashingSelector::new(20)), ops, |_| vec![]);
    }

    #[test]
    fn auto_split_snapshots_and_diffs(ops in prop::collection::vec((any::<bool>(), any::<u8>()), 1..20)) {
        check_selector(Box::new(AutoSplitSelector::new()), ops, |_| vec![]);
    }

    #[test]
    fn sticky_snapshots_and_diffs(ops in prop::collection::vec((any::<bool>(), any::<u8>()), 1..20)) {
        check_selector(Box::new(ExclusiveRangeSelector::new()), ops, |id| {
            let start = (id as u32 * 7919) % 60000;
            vec![HashRange::new(start, start + 2000)]
        });
    }

    #[test]
    fn bucket_snapshots_and_diffs(n in 1u32..20, ops in prop::collection::vec((any::<bool>(), any::<u8>()), 1..20)) {
        let b = equal_width_boundaries(n);
        check_selector(Box::new(EntryBucketSelector::new(b.clone()).unwrap()), ops, move |_| b.clone());
    }

    /// A join or leave moves whole buckets, and with k consumers sharing N
    /// buckets everyone owns floor(N/k) or ceil(N/k) of them.
    #[test]
    fn buckets_stay_balanced(n in 1u32..64, k in 1u64..12) {
        let b = equal_width_boundaries(n);
        let mut s = EntryBucketSelector::new(b.clone()).unwrap();
        for id in 0..k {
            s.add_consumer(&ConsumerSpec::new(id, format!("c{}", id % 3)).with_ranges(b.clone())).unwrap();
        }
        let (lo, hi) = (n as usize / k as usize, (n as usize).div_ceil(k as usize));
        for id in 0..k {
            let owned = s.buckets_of(c(id)).len();
            prop_assert!(lo <= owned && owned <= hi);
        }
    }
}
