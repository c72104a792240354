//! PIP-483's automatic split and merge: which resize, if any, a scalable
//! topic's controller makes now, as a pure function of the layout, each
//! active segment's load, the policy, the clock and the last resizes
//! (Pulsar's `AutoScalePolicyEvaluator`).
//!
//! - **Split** (never at `max_segments` or within `split_cooldown`): when a
//!   subscription has more consumers than there are active segments, the
//!   busiest segment by messages in; otherwise the segment most over a
//!   split threshold (rate / threshold, the largest of its four), if over 1.
//! - **Merge** (only without a split, above `min_segments`, outside
//!   `merge_cooldown`): two adjacent active segments both under all four
//!   merge thresholds and cold (their load unchanged) for `merge_window`,
//!   each with fewer than `max_dag_depth` merges in its lineage; of those,
//!   the pair with the least load. Pulsar sums msg/s and B/s to rank pairs,
//!   so bytes decide alone; here each rate counts as a share of its
//!   threshold.

use std::collections::{BTreeMap, BTreeSet};

use crate::layout::Layout;
use crate::policy::{AutoScalePolicy, SegmentLoad};

/// What the controller does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Split(u64),
    Merge(u64, u64),
    Nothing,
}

/// The evaluator's inputs besides the layout and the loads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Clock {
    pub now_ms: u64,
    /// When the topic was last split / merged (ms; 0: never).
    pub last_split_ms: u64,
    pub last_merge_ms: u64,
    /// The most consumers any stream or checkpoint subscription has.
    pub max_consumers: u32,
}

impl Layout {
    /// Merges in the lineage of segment `id`: its ancestors (itself
    /// included) with two or more parents.
    pub fn merge_depth(&self, id: u64) -> u32 {
        let mut seen = BTreeSet::new();
        let mut todo = vec![id];
        let mut depth = 0;
        while let Some(s) = todo.pop() {
            if !seen.insert(s) {
                continue;
            }
            let Some(seg) = self.segments.get(&s) else {
                continue;
            };
            if seg.parent_ids.len() >= 2 {
                depth += 1;
            }
            todo.extend(seg.parent_ids.iter().copied());
        }
        depth
    }
}

/// The resize to make now (see the module's doc). A segment without a
/// load record counts as idle since it was created.
pub fn decide(
    layout: &Layout,
    loads: &BTreeMap<u64, SegmentLoad>,
    policy: &AutoScalePolicy,
    clock: Clock,
) -> Decision {
    if !policy.enabled || policy.invalid().is_some() {
        return Decision::Nothing;
    }
    let mut active = layout.active();
    active.sort_by_key(|s| s.hash_range.start);
    let load_of = |id: u64, created: u64| {
        loads.get(&id).copied().unwrap_or(SegmentLoad {
            since_ms: created,
            ..SegmentLoad::default()
        })
    };
    let n = active.len() as u32;
    let splittable: Vec<_> = active.iter().filter(|s| s.hash_range.len() >= 2).collect();
    if n < policy.max_segments
        && clock.now_ms.saturating_sub(clock.last_split_ms) >= policy.split_cooldown_ms
    {
        if clock.max_consumers > n {
            // Busiest by messages in; the lowest id on a tie.
            let busiest = splittable.iter().max_by(|a, b| {
                let (la, lb) = (
                    load_of(a.segment_id, a.created_at_ms).msg_rate_in,
                    load_of(b.segment_id, b.created_at_ms).msg_rate_in,
                );
                la.total_cmp(&lb).then(b.segment_id.cmp(&a.segment_id))
            });
            if let Some(s) = busiest {
                return Decision::Split(s.segment_id);
            }
        }
        let hottest = splittable
            .iter()
            .map(|s| {
                (
                    policy.split.ratio(&load_of(s.segment_id, s.created_at_ms)),
                    s.segment_id,
                )
            })
            .filter(|(r, _)| *r > 1.0)
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
        if let Some((_, id)) = hottest {
            return Decision::Split(id);
        }
    }
    if n > policy.min_segments
        && clock.now_ms.saturating_sub(clock.last_merge_ms) >= policy.merge_cooldown_ms
    {
        let cold = |id: u64, created: u64| {
            let l = load_of(id, created);
            policy.merge.all_under(&l)
                && clock.now_ms.saturating_sub(l.since_ms) >= policy.merge_window_ms
                && layout.merge_depth(id) < policy.max_dag_depth
        };
        let best = active
            .windows(2)
            .filter(|w| w[0].hash_range.precedes(&w[1].hash_range))
            .filter(|w| {
                cold(w[0].segment_id, w[0].created_at_ms)
                    && cold(w[1].segment_id, w[1].created_at_ms)
            })
            .map(|w| {
                let load = policy
                    .merge
                    .share(&load_of(w[0].segment_id, w[0].created_at_ms))
                    + policy
                        .merge
                        .share(&load_of(w[1].segment_id, w[1].created_at_ms));
                (load, w[0].segment_id, w[1].segment_id)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        if let Some((_, a, b)) = best {
            return Decision::Merge(a, b);
        }
    }
    Decision::Nothing
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn hot(msgs: f64, since: u64) -> SegmentLoad {
        SegmentLoad {
            msg_rate_in: msgs,
            since_ms: since,
            ..SegmentLoad::default()
        }
    }

    #[test]
    fn splits_the_hot_and_merges_the_cold() {
        let p = AutoScalePolicy::default();
        let l = Layout::create(1, 4, BTreeMap::new(), 0).unwrap();
        let at = |now_ms| Clock {
            now_ms,
            ..Clock::default()
        };
        // Over 10k msg/s in: split, once the cooldown since the last allows.
        let loads = BTreeMap::from([(0, hot(40_000.0, 0))]);
        assert_eq!(decide(&l, &loads, &p, at(120_000)), Decision::Split(0));
        let recent = Clock {
            last_split_ms: 100_000,
            ..at(120_000)
        };
        assert_eq!(decide(&l, &loads, &p, recent), Decision::Nothing);
        // More consumers than segments: split even when cool.
        let crowded = Clock {
            max_consumers: 2,
            ..at(120_000)
        };
        assert_eq!(
            decide(&l, &BTreeMap::new(), &p, crowded),
            Decision::Split(0)
        );
        // Two cold halves: merged once cold for the window.
        let (l2, _) = l.split(0, 1).unwrap();
        let cool = BTreeMap::from([(1, hot(10.0, 1)), (2, hot(20.0, 1))]);
        assert_eq!(decide(&l2, &cool, &p, at(200_000)), Decision::Nothing);
        assert_eq!(decide(&l2, &cool, &p, at(400_000)), Decision::Merge(1, 2));
        // One warm half: no merge.
        let warm = BTreeMap::from([(1, hot(10.0, 1)), (2, hot(2_000.0, 1))]);
        assert_eq!(decide(&l2, &warm, &p, at(400_000)), Decision::Nothing);
        // Off, or invalid: nothing.
        let off = AutoScalePolicy {
            enabled: false,
            ..p.clone()
        };
        assert_eq!(decide(&l, &loads, &off, at(120_000)), Decision::Nothing);
        let bad = AutoScalePolicy {
            min_segments: 9,
            max_segments: 4,
            ..p
        };
        assert!(bad.invalid().is_some());
        assert_eq!(decide(&l, &loads, &bad, at(120_000)), Decision::Nothing);
    }

    fn layouts() -> impl Strategy<Value = Layout> {
        (
            1u32..6,
            proptest::collection::vec((any::<bool>(), any::<u16>()), 0..16),
        )
            .prop_map(|(n, ops)| {
                let mut l = Layout::create(n, 8, BTreeMap::new(), 0).unwrap();
                for (split, a) in ops {
                    let mut active = l.active();
                    active.sort_by_key(|s| s.hash_range.start);
                    let i = a as usize % active.len();
                    let next = if split || active.len() < 2 {
                        l.split(active[i].segment_id, 1).map(|(l, _)| l)
                    } else {
                        let j = (i + 1) % active.len();
                        l.merge(active[i].segment_id, active[j].segment_id, 1)
                            .map(|(l, _)| l)
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
        fn decisions_respect_bounds_cooldowns_and_depth(
            l in layouts(),
            rates in proptest::collection::vec(
                (prop_oneof![0f64..2_000.0, 0f64..100_000.0], 0u64..1_000_000),
                64,
            ),
            now in 0u64..2_000_000,
            last_split in 0u64..2_000_000,
            last_merge in 0u64..2_000_000,
            max_consumers in 0u32..8,
            min in 1u32..4,
            max in 1u32..12,
            depth in 0u32..4,
        ) {
            let policy = AutoScalePolicy {
                min_segments: min,
                max_segments: max.max(min),
                max_dag_depth: depth,
                ..AutoScalePolicy::default()
            };
            let loads: BTreeMap<u64, SegmentLoad> = l
                .segments
                .keys()
                .map(|id| {
                    let (r, since) = rates[*id as usize % rates.len()];
                    (*id, hot(r, since))
                })
                .collect();
            let clock = Clock { now_ms: now, last_split_ms: last_split, last_merge_ms: last_merge, max_consumers };
            let d = decide(&l, &loads, &policy, clock);
            prop_assert_eq!(d, decide(&l, &loads, &policy, clock));
            let n = l.active().len() as u32;
            match d {
                Decision::Split(id) => {
                    prop_assert!(n < policy.max_segments);
                    prop_assert!(now.saturating_sub(last_split) >= policy.split_cooldown_ms);
                    let s = l.get(id).unwrap();
                    prop_assert!(s.is_active());
                    prop_assert!(l.split(id, now).is_ok());
                }
                Decision::Merge(a, b) => {
                    prop_assert!(n > policy.min_segments);
                    prop_assert!(now.saturating_sub(last_merge) >= policy.merge_cooldown_ms);
                    for id in [a, b] {
                        let ld = loads[&id];
                        prop_assert!(ld.msg_rate_in < policy.merge.msg_rate_in);
                        prop_assert!(now.saturating_sub(ld.since_ms) >= policy.merge_window_ms);
                        prop_assert!(l.merge_depth(id) < policy.max_dag_depth);
                    }
                    prop_assert!(l.merge(a, b, now).is_ok());
                }
                Decision::Nothing => {}
            }
        }
    }
}
