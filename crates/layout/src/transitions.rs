//! The layout's transitions (Pulsar's `ScalableTopicController`'s metadata
//! steps): create, split, merge and prune, each a function from a layout to
//! the next. They decide only the document; the controller creates the
//! children's topics and cursors before it writes the result, and seals the
//! parents, as PIP-468 orders it. Every result passes [`Layout::validate`].

use std::collections::BTreeMap;

use strobe_model::scalable::{HashRange, RING_SIZE};

use crate::buckets;
use crate::error::LayoutError;
use crate::layout::Layout;
use crate::segment::{Segment, SegmentState};

/// The most segments a topic is created with (one hash each at most).
pub const MAX_INITIAL_SEGMENTS: u32 = RING_SIZE;

/// How many legacy topics a synthetic or migrated layout has: 1 to 65,536.
fn legacy_count(legacy: &[String]) -> Result<u32, LayoutError> {
    match u32::try_from(legacy.len()) {
        Ok(n) if (1..=MAX_INITIAL_SEGMENTS).contains(&n) => Ok(n),
        _ => Err(LayoutError::Invalid(format!(
            "a v4 topic maps to 1 to {MAX_INITIAL_SEGMENTS} segments, not {}",
            legacy.len()
        ))),
    }
}

fn new_segment(id: u64, range: HashRange, epoch: u64, now_ms: u64, buckets: u32) -> Segment {
    Segment {
        segment_id: id,
        hash_range: range,
        state: SegmentState::Active,
        parent_ids: Vec::new(),
        child_ids: Vec::new(),
        created_at_epoch: epoch,
        sealed_at_epoch: None,
        created_at_ms: now_ms,
        sealed_at_ms: None,
        legacy_topic_name: None,
        entry_bucket_splits: buckets::equal_width(buckets),
    }
}

impl Layout {
    /// A new topic: epoch 0, `segments` active segments tiling the ring with
    /// ids `0..segments`, each with its share of `bucket_budget` buckets.
    pub fn create(
        segments: u32,
        bucket_budget: u32,
        properties: BTreeMap<String, String>,
        now_ms: u64,
    ) -> Result<Layout, LayoutError> {
        if !(1..=MAX_INITIAL_SEGMENTS).contains(&segments) {
            return Err(LayoutError::Invalid(format!(
                "a topic has 1 to {MAX_INITIAL_SEGMENTS} initial segments, not {segments}"
            )));
        }
        let per = buckets::initial(bucket_budget, segments);
        let segments: BTreeMap<u64, Segment> = HashRange::tiles(segments)
            .into_iter()
            .enumerate()
            .map(|(i, r)| (i as u64, new_segment(i as u64, r, 0, now_ms, per)))
            .collect();
        Ok(Layout {
            epoch: 0,
            next_segment_id: segments.len() as u64,
            segments,
            properties,
            auto_scale_policy: None,
        })
    }

    /// PIP-475's synthetic layout of a v4 topic with no layout: one active
    /// segment per partition (`legacy`: the partitions' names, or the
    /// topic's own for a non-partitioned one), ids `0..n`, equal tiles that
    /// are only cosmetic (keys go to partitions as v4 routes them), epoch 0,
    /// one bucket each. Served to V5 clients, never stored.
    pub fn synthetic(legacy: &[String], now_ms: u64) -> Result<Layout, LayoutError> {
        let n = legacy_count(legacy)?;
        let segments = HashRange::tiles(n)
            .into_iter()
            .zip(legacy)
            .enumerate()
            .map(|(i, (r, name))| {
                let mut s = new_segment(i as u64, r, 0, now_ms, 1);
                s.legacy_topic_name = Some(name.clone());
                (i as u64, s)
            })
            .collect();
        Ok(Layout {
            epoch: 0,
            next_segment_id: u64::from(n),
            segments,
            properties: BTreeMap::new(),
            auto_scale_policy: None,
        })
    }

    /// The layout a v4 topic migrates to (PIP-475): its partitions as
    /// sealed legacy parents `0..n`, each spanning the ring (a key's
    /// partition is not its hash range), sealed at epoch 0; children
    /// `n..2n`, active equal tiles, each with every parent, sharing
    /// `bucket_budget`. Epoch 1, unlike Pulsar's 0: the synthetic layout a
    /// client holds has epoch 0, and a client that applies only greater
    /// epochs would keep it forever.
    pub fn migrated(
        legacy: &[String],
        bucket_budget: u32,
        now_ms: u64,
    ) -> Result<Layout, LayoutError> {
        let n = legacy_count(legacy)?;
        let parents: Vec<u64> = (0..u64::from(n)).collect();
        let children: Vec<u64> = (u64::from(n)..2 * u64::from(n)).collect();
        let mut segments = BTreeMap::new();
        for (i, name) in legacy.iter().enumerate() {
            let mut s = new_segment(i as u64, HashRange::FULL, 0, now_ms, 1);
            s.state = SegmentState::Sealed;
            s.sealed_at_epoch = Some(0);
            s.sealed_at_ms = Some(now_ms);
            s.legacy_topic_name = Some(name.clone());
            s.child_ids = children.clone();
            segments.insert(i as u64, s);
        }
        let per = buckets::initial(bucket_budget, n);
        for (r, id) in HashRange::tiles(n).into_iter().zip(&children) {
            let mut s = new_segment(*id, r, 1, now_ms, per);
            s.parent_ids = parents.clone();
            segments.insert(*id, s);
        }
        let layout = Layout {
            epoch: 1,
            next_segment_id: 2 * u64::from(n),
            segments,
            properties: BTreeMap::new(),
            auto_scale_policy: None,
        };
        layout.validate()?;
        Ok(layout)
    }

    /// The next epoch and `n` fresh ids, or an error if either would overflow.
    fn advance(&self, n: u64) -> Result<(u64, u64), LayoutError> {
        let epoch = self
            .epoch
            .checked_add(1)
            .ok_or_else(|| LayoutError::Invalid("the layout's epoch is exhausted".into()))?;
        self.next_segment_id
            .checked_add(n)
            .ok_or_else(|| LayoutError::Invalid("segment ids are exhausted".into()))?;
        Ok((epoch, self.next_segment_id))
    }

    fn active_segment(&self, id: u64) -> Result<&Segment, LayoutError> {
        let s = self.get(id)?;
        if !s.is_active() {
            return Err(LayoutError::NotActive(id));
        }
        Ok(s)
    }

    fn seal(&mut self, id: u64, children: &[u64], epoch: u64, now_ms: u64) {
        let s = self
            .segments
            .get_mut(&id)
            .expect("sealing a segment of the layout");
        s.state = SegmentState::Sealed;
        s.child_ids = children.to_vec();
        s.sealed_at_epoch = Some(epoch);
        s.sealed_at_ms = Some(now_ms);
    }

    /// Splits active segment `id` at its range's midpoint into two children
    /// (ids `next`, `next + 1`, lower half first), each with half its
    /// buckets; the parent is sealed. Returns the layout and the children.
    pub fn split(&self, id: u64, now_ms: u64) -> Result<(Layout, [u64; 2]), LayoutError> {
        let parent = self.active_segment(id)?;
        let (lo, hi) = parent
            .hash_range
            .halves()
            .ok_or(LayoutError::TooNarrow(id))?;
        let per = buckets::after_split(parent.buckets());
        let (epoch, first) = self.advance(2)?;
        let ids = [first, first + 1];
        let mut next = self.clone();
        next.epoch = epoch;
        next.next_segment_id = first + 2;
        next.seal(id, &ids, epoch, now_ms);
        for (child, range) in ids.into_iter().zip([lo, hi]) {
            let mut s = new_segment(child, range, epoch, now_ms, per);
            s.parent_ids = vec![id];
            next.segments.insert(child, s);
        }
        Ok((next, ids))
    }

    /// Merges two adjacent active segments (in either order) into one (id
    /// `next`) with their union for range and their buckets together; both
    /// are sealed. Returns the layout and the merged segment's id.
    pub fn merge(&self, a: u64, b: u64, now_ms: u64) -> Result<(Layout, u64), LayoutError> {
        if a == b {
            return Err(LayoutError::SameSegment(a));
        }
        let (sa, sb) = (self.active_segment(a)?, self.active_segment(b)?);
        let range = sa
            .hash_range
            .join(&sb.hash_range)
            .ok_or(LayoutError::NotAdjacent(a, b))?;
        let per = buckets::after_merge(sa.buckets(), sb.buckets());
        let (epoch, id) = self.advance(1)?;
        let mut next = self.clone();
        next.epoch = epoch;
        next.next_segment_id = id + 1;
        next.seal(a, &[id], epoch, now_ms);
        next.seal(b, &[id], epoch, now_ms);
        let mut s = new_segment(id, range, epoch, now_ms, per);
        s.parent_ids = vec![a, b];
        next.segments.insert(id, s);
        Ok((next, id))
    }

    /// Removes sealed segment `id` (past retention, drained by every
    /// subscription: the controller's checks) and the edges naming it.
    pub fn prune(&self, id: u64) -> Result<Layout, LayoutError> {
        if self.get(id)?.is_active() {
            return Err(LayoutError::NotSealed(id));
        }
        let (epoch, _) = self.advance(0)?;
        let mut next = self.clone();
        next.epoch = epoch;
        next.segments.remove(&id);
        for s in next.segments.values_mut() {
            s.parent_ids.retain(|p| *p != id);
            s.child_ids.retain(|c| *c != id);
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;
    use strobe_model::scalable::{HashRange, MAX_HASH};

    use super::*;

    fn fresh(n: u32) -> Layout {
        let l = Layout::create(n, 4, BTreeMap::new(), 1_000).unwrap();
        l.validate().unwrap();
        l
    }

    #[test]
    fn synthetic_and_migrated_layouts_of_a_v4_topic() {
        let names: Vec<String> = (0..3)
            .map(|i| format!("persistent://t/n/x-partition-{i}"))
            .collect();
        let s = Layout::synthetic(&names, 7).unwrap();
        s.validate().unwrap();
        assert_eq!((s.epoch, s.active().len()), (0, 3));
        assert!(
            s.segments
                .values()
                .all(|g| g.is_legacy() && g.entry_bucket_splits.is_empty())
        );
        assert_eq!(
            s.get(2).unwrap().legacy_topic_name.as_deref(),
            Some(names[2].as_str())
        );
        let m = Layout::migrated(&names, 4, 7).unwrap();
        assert_eq!(m.epoch, 1, "above the synthetic layout's");
        assert_eq!(m.next_segment_id, 6);
        for p in 0..3 {
            let g = m.get(p).unwrap();
            assert!(!g.is_active() && g.is_legacy());
            assert_eq!(
                (g.hash_range, g.sealed_at_epoch),
                (HashRange::FULL, Some(0))
            );
            assert_eq!(g.child_ids, vec![3, 4, 5]);
        }
        let children = m.active();
        assert_eq!(children.len(), 3);
        assert!(
            children
                .iter()
                .all(|c| c.parent_ids == vec![0, 1, 2] && !c.is_legacy())
        );
        assert!(Layout::synthetic(&[], 7).is_err());
        assert!(Layout::migrated(&[], 4, 7).is_err());
    }

    #[test]
    fn create_split_merge_prune_as_pulsar_numbers_them() {
        let l = fresh(1);
        assert_eq!(
            l.get(0).unwrap().entry_bucket_splits,
            vec![16384, 32768, 49152]
        );
        let (l, [a, b]) = l.split(0, 2_000).unwrap();
        assert_eq!((a, b, l.epoch, l.next_segment_id), (1, 2, 1, 3));
        assert_eq!(l.get(1).unwrap().descriptor().to_string(), "0000-7fff-1");
        assert_eq!(l.get(2).unwrap().descriptor().to_string(), "8000-ffff-2");
        assert_eq!(l.get(1).unwrap().buckets(), 2);
        assert_eq!(l.get(0).unwrap().child_ids, vec![1, 2]);
        assert_eq!(l.get(0).unwrap().sealed_at_ms, Some(2_000));
        l.validate().unwrap();
        let (l, m) = l.merge(2, 1, 3_000).unwrap();
        assert_eq!((m, l.epoch), (3, 2));
        assert_eq!(l.get(3).unwrap().hash_range, HashRange::FULL);
        assert_eq!(l.get(3).unwrap().parent_ids, vec![2, 1]);
        assert_eq!(l.get(3).unwrap().buckets(), 4);
        let l = l.prune(0).unwrap();
        assert_eq!(l.epoch, 3);
        assert!(l.get(1).unwrap().parent_ids.is_empty());
        l.validate().unwrap();
    }

    #[test]
    fn refusals() {
        let l = fresh(2);
        assert_eq!(l.prune(0), Err(LayoutError::NotSealed(0)));
        assert_eq!(
            l.merge(0, 0, 1).map(|_| ()),
            Err(LayoutError::SameSegment(0))
        );
        assert_eq!(l.split(9, 1).map(|_| ()), Err(LayoutError::NotFound(9)));
        let (l, _) = l.split(0, 1).unwrap();
        assert_eq!(l.split(0, 1).map(|_| ()), Err(LayoutError::NotActive(0)));
        // 2 is [0, 0x3fff], 3 is [0x4000, 0x7fff], 1 is [0x8000, 0xffff].
        assert_eq!(
            l.merge(2, 1, 1).map(|_| ()),
            Err(LayoutError::NotAdjacent(2, 1))
        );
        assert!(Layout::create(0, 4, BTreeMap::new(), 0).is_err());
        let narrow = Layout::create(MAX_INITIAL_SEGMENTS, 4, BTreeMap::new(), 0).unwrap();
        assert_eq!(
            narrow.split(7, 1).map(|_| ()),
            Err(LayoutError::TooNarrow(7))
        );
    }

    #[test]
    fn the_json_is_pulsars() {
        let (l, _) = fresh(1).split(0, 5).unwrap();
        let v: serde_json::Value = serde_json::to_value(&l).unwrap();
        assert_eq!(v["nextSegmentId"], 3);
        let parent = &v["segments"]["0"];
        assert_eq!(parent["state"], "SEALED");
        assert_eq!(parent["hashRange"]["end"], MAX_HASH);
        assert_eq!(parent["childIds"], serde_json::json!([1, 2]));
        assert_eq!(v["segments"]["1"]["sealedAtEpoch"], -1);
        assert_eq!(v["segments"]["1"]["sealedAtMs"], -1);
        let back: Layout = serde_json::from_value(v).unwrap();
        assert_eq!(back, l);
        // A stored layout that breaks an invariant is refused by validate.
        let mut broken = l.clone();
        broken.segments.get_mut(&1).unwrap().hash_range = HashRange::new(0, 0x7ffe).unwrap();
        assert!(matches!(broken.validate(), Err(LayoutError::Corrupt(_))));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Split(usize),
        Merge(usize),
        Prune(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => any::<usize>().prop_map(Op::Split),
            2 => any::<usize>().prop_map(Op::Merge),
            1 => any::<usize>().prop_map(Op::Prune),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any run of splits, merges and prunes keeps every invariant; the
        /// epoch grows by one each time; ids are never reused; the JSON
        /// round-trips; and every hash has exactly one active segment.
        #[test]
        fn transitions_keep_the_invariants(n in 1u32..6, ops in prop::collection::vec(op(), 0..48), probe in any::<u16>()) {
            let mut l = fresh(n);
            let mut seen: BTreeSet<u64> = l.segments.keys().copied().collect();
            let mut now = 1_000;
            for op in ops {
                now += 1;
                let active: Vec<u64> = l.active().iter().map(|s| s.segment_id).collect();
                let sealed: Vec<u64> = l.segments.values().filter(|s| !s.is_active()).map(|s| s.segment_id).collect();
                let next = match op {
                    Op::Split(i) => l.split(active[i % active.len()], now).map(|(l, ids)| (l, ids.to_vec())),
                    Op::Merge(i) if active.len() >= 2 => {
                        let i = i % (active.len() - 1);
                        l.merge(active[i], active[i + 1], now).map(|(l, id)| (l, vec![id]))
                    }
                    Op::Prune(i) if !sealed.is_empty() => l.prune(sealed[i % sealed.len()]).map(|l| (l, vec![])),
                    _ => continue,
                };
                let (after, new_ids) = match next {
                    Ok(x) => x,
                    // Only a one-hash segment refuses a split here.
                    Err(LayoutError::TooNarrow(_)) => continue,
                    Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
                };
                after.validate().map_err(|e| TestCaseError::fail(format!("{e}")))?;
                prop_assert_eq!(after.epoch, l.epoch + 1);
                prop_assert!(after.next_segment_id >= l.next_segment_id);
                for id in new_ids {
                    prop_assert!(seen.insert(id), "id {} reused", id);
                }
                let json = serde_json::to_string(&after).unwrap();
                prop_assert_eq!(serde_json::from_str::<Layout>(&json).unwrap(), after.clone());
                l = after;
            }
            let owners = l.active().iter().filter(|s| s.hash_range.contains(probe)).count();
            prop_assert_eq!(owners, 1);
            prop_assert!(l.segment_of(probe).is_some());
        }
    }
}
