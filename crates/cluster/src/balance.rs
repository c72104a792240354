//! The load manager: one broker, elected through the coordination layer,
//! decides which bundle moves where (the leader part of Pulsar's extensible
//! load manager); the bundle's owner carries the move out as a transfer
//! (PIP-307), so clients follow without a lookup.
//!
//! A broker's load is the message rate (in plus out) of the bundles it owns,
//! which every broker reports in its registration. Every
//! `load_balancer_interval_secs` the leader looks for one move:
//! - **by rate** (Pulsar's threshold shedding): from the most loaded broker
//!   to the least loaded, the bundle whose move lowers the higher of the two
//!   loads the most, if that is by at least [`SHED_FRACTION`] of the most
//!   loaded broker's load (so equal loads never swap bundles back and forth),
//!   and only once the most loaded broker carries [`MIN_RATE`];
//! - **by count**, when rates call for nothing: when the broker owning the
//!   most bundles owns more than `load_balancer_bundle_threshold` beyond the
//!   one owning the fewest (a broker that just joined owns none), its coldest
//!   bundle moves there, unless that would leave the receiver busier than the
//!   giver.
//!
//! A bundle a transfer brought to its owner within the shedding grace
//! period (Pulsar's `loadBalancerSheddingGracePeriodMinutes`) is not moved:
//! an operator's placement stands, and no bundle moves back and forth. And a
//! move is made only once the same broker was found overloaded in
//! `hits` rounds in a row (Pulsar's
//! `loadBalancerSheddingConditionHitCountThreshold`), so a passing burst
//! moves nothing.
//!
//! The move is a request under `/loadbalance/transfer-requests/`, fenced by
//! the leadership and bound to the leader's lease. One move is in flight at a
//! time: the owner executes the request and deletes it. This file holds the
//! decisions, pure and property-tested; `load_manager` runs them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::registry::{OWNERSHIP, parse_bundle_path};

/// Where the leader asks owners to move bundles.
pub const REQUESTS: &str = "/loadbalance/transfer-requests";
/// The load manager's election.
pub const LEADER: &str = "/loadbalance/leader";

/// A request to move a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveRequest {
    pub bundle: String,
    pub from: String,
    pub to: String,
}

/// Below this load (messages per second) a broker's rates are noise: only
/// bundle counts are balanced.
pub const MIN_RATE: u64 = 100;
/// A move by rate must lower the busier side's load by this share of the
/// most loaded broker's load (Pulsar's threshold shedder uses 10%).
pub const SHED_FRACTION: f64 = 0.1;

/// The bundles a broker owns, with their message rates.
pub type Owned = BTreeMap<String, Vec<(String, u64)>>;

fn load(bundles: &[(String, u64)]) -> u64 {
    bundles.iter().map(|(_, r)| r).sum()
}

/// How the load manager sheds (its configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShedPolicy {
    /// Between rounds.
    pub interval: Duration,
    /// Bundle counts may differ by this much.
    pub threshold: usize,
    /// A transferred bundle stays put this long.
    pub grace: Duration,
    /// Rounds in a row a broker must be found overloaded.
    pub hits: u32,
}

/// Which bundle should move where, if any (see the module docs). `owned`
/// maps every live broker (including those owning nothing) to its bundles
/// and their rates; bundles in `settled` (moved within the grace period)
/// count for their owner's load but do not move. Pure, for tests.
pub fn shed(owned: &Owned, threshold: usize, settled: &BTreeSet<String>) -> Option<MoveRequest> {
    shed_by_rate(owned, settled).or_else(|| shed_by_count(owned, threshold, settled))
}

/// The bundles of `owned` a transfer brought within `grace` of `now_ms`,
/// from each bundle's transfer time. Pure, for tests.
pub fn settled<'a>(
    moved: impl IntoIterator<Item = (&'a str, Option<u64>)>,
    now_ms: u64,
    grace: Duration,
) -> BTreeSet<String> {
    moved
        .into_iter()
        .filter_map(|(b, at)| {
            let at = at?;
            (now_ms.saturating_sub(at) < grace.as_millis() as u64).then(|| b.to_owned())
        })
        .collect()
}

/// Rounds in a row the load manager found the same broker overloaded.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Streak {
    from: Option<String>,
    hits: u32,
}

impl Streak {
    /// Counts this round's proposal; returns it once its broker was found
    /// overloaded `threshold` rounds in a row (and starts counting again).
    pub fn confirm(
        &mut self,
        proposal: Option<MoveRequest>,
        threshold: u32,
    ) -> Option<MoveRequest> {
        let Some(req) = proposal else {
            *self = Streak::default();
            return None;
        };
        if self.from.as_deref() == Some(req.from.as_str()) {
            self.hits += 1;
        } else {
            self.from = Some(req.from.clone());
            self.hits = 1;
        }
        if self.hits >= threshold.max(1) {
            *self = Streak::default();
            Some(req)
        } else {
            None
        }
    }
}

fn shed_by_rate(owned: &Owned, settled: &BTreeSet<String>) -> Option<MoveRequest> {
    let (most, most_bundles) = owned
        .iter()
        .max_by_key(|(id, b)| (load(b), std::cmp::Reverse(*id)))?;
    let (least, least_bundles) = owned.iter().min_by_key(|(id, b)| (load(b), *id))?;
    let (hi, lo) = (load(most_bundles), load(least_bundles));
    if most == least || hi < MIN_RATE {
        return None;
    }
    let need = (SHED_FRACTION * hi as f64).ceil() as u64;
    // How much a move of a bundle at rate r lowers the busier side.
    let gain = |r: u64| hi.saturating_sub((hi - r).max(lo + r));
    let (bundle, r) = most_bundles
        .iter()
        .filter(|(b, r)| gain(*r) >= need.max(1) && !settled.contains(b))
        .max_by_key(|(b, r)| (gain(*r), std::cmp::Reverse(b.clone())))?;
    tracing::debug!(bundle, rate = r, from = %most, to = %least, hi, lo, "shedding by rate");
    Some(MoveRequest {
        bundle: bundle.clone(),
        from: most.clone(),
        to: least.clone(),
    })
}

fn shed_by_count(
    owned: &Owned,
    threshold: usize,
    settled: &BTreeSet<String>,
) -> Option<MoveRequest> {
    let (most, most_bundles) = owned
        .iter()
        .max_by_key(|(id, b)| (b.len(), std::cmp::Reverse(*id)))?;
    let (least, least_bundles) = owned.iter().min_by_key(|(id, b)| (b.len(), *id))?;
    if most_bundles.len() <= least_bundles.len() + threshold {
        return None;
    }
    let (bundle, r) = most_bundles
        .iter()
        .filter(|(b, _)| !settled.contains(b))
        .min_by_key(|(b, r)| (*r, b.clone()))?;
    let (giver, receiver) = (load(most_bundles) - r, load(least_bundles) + r);
    if receiver > giver && receiver >= MIN_RATE {
        return None;
    }
    Some(MoveRequest {
        bundle: bundle.clone(),
        from: most.clone(),
        to: least.clone(),
    })
}

/// Limits past which a bundle's owner splits it (Pulsar's
/// `loadBalancerNamespaceBundleMax*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitLimits {
    pub max_topics: u32,
    pub max_msg_rate: u64,
    pub max_bundles: u32,
}

/// The one bundle to split this round, if any, from each owned bundle's
/// (loaded topics, message rate) and its namespace's bundle count: the one
/// furthest over a limit. A bundle with one topic is never split (both halves
/// would not share its load), nor one whose namespace is at the maximum.
/// Pure, for tests.
pub fn to_split(
    bundles: &BTreeMap<String, (u32, u64)>,
    namespace_bundles: impl Fn(&str) -> u32,
    limits: SplitLimits,
) -> Option<String> {
    bundles
        .iter()
        .filter(|(path, (topics, _))| {
            *topics >= 2
                && parse_bundle_path(path)
                    .is_some_and(|(ns, _)| namespace_bundles(ns) < limits.max_bundles)
        })
        .filter_map(|(path, (topics, rate))| {
            let over = (*topics as f64 / limits.max_topics.max(1) as f64)
                .max(*rate as f64 / limits.max_msg_rate.max(1) as f64);
            (*topics > limits.max_topics || *rate > limits.max_msg_rate).then_some((path, over))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(p, _)| p.clone())
}

/// Whether reported rates moved enough to report again: a bundle came or
/// went, or one's rate changed by more than a fifth and more than
/// [`MIN_RATE`] / 10.
pub fn rates_moved(old: &BTreeMap<String, u64>, new: &BTreeMap<String, u64>) -> bool {
    if old.len() != new.len() || old.keys().zip(new.keys()).any(|(a, b)| a != b) {
        return true;
    }
    old.values().zip(new.values()).any(|(&a, &b)| {
        let d = a.abs_diff(b);
        d > MIN_RATE / 10 && d * 5 > a.max(b)
    })
}

pub(crate) fn request_path(bundle_path: &str) -> String {
    let rest = bundle_path
        .strip_prefix(OWNERSHIP)
        .unwrap_or(bundle_path)
        .trim_start_matches('/');
    format!("{REQUESTS}/{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(counts: &[(&str, usize)]) -> Owned {
        counts
            .iter()
            .map(|(id, n)| {
                (
                    id.to_string(),
                    (0..*n)
                        .map(|i| (format!("/namespace/t/n/{id}{i}"), 0))
                        .collect(),
                )
            })
            .collect()
    }

    fn none() -> BTreeSet<String> {
        BTreeSet::new()
    }

    fn rates(brokers: &[(&str, &[u64])]) -> Owned {
        brokers
            .iter()
            .map(|(id, rs)| {
                (
                    id.to_string(),
                    rs.iter()
                        .enumerate()
                        .map(|(i, r)| (format!("/namespace/t/n/{id}{i}"), *r))
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn the_most_loaded_sheds_to_the_least_beyond_the_threshold() {
        assert_eq!(
            shed(&map(&[("a", 2), ("b", 1), ("c", 1)]), 1, &none()),
            None
        );
        let r = shed(&map(&[("a", 4), ("b", 1), ("c", 2)]), 1, &none()).unwrap();
        assert_eq!((r.from.as_str(), r.to.as_str()), ("a", "b"));
        assert!(r.bundle.starts_with("/namespace/t/n/a"));
        // A broker that just joined owns nothing: it gets a bundle.
        let r = shed(&map(&[("a", 2), ("b", 2), ("new", 0)]), 1, &none()).unwrap();
        assert_eq!(r.to, "new");
        assert_eq!(
            shed(&map(&[("a", 2), ("b", 2), ("new", 0)]), 2, &none()),
            None
        );
        assert_eq!(shed(&BTreeMap::new(), 1, &none()), None);
        assert_eq!(shed(&map(&[("solo", 9)]), 0, &none()), None);
    }

    #[test]
    fn busy_brokers_shed_by_rate_and_equal_loads_stay_put() {
        // Bundle counts are even, but a's bundles carry the traffic: the move
        // that lowers the busier side most goes to b (a 3000, b 3000 after).
        let r = shed(
            &rates(&[("a", &[3000, 2000, 1000]), ("b", &[0, 0])]),
            1,
            &none(),
        )
        .unwrap();
        assert_eq!((r.from.as_str(), r.to.as_str()), ("a", "b"));
        assert_eq!(r.bundle, "/namespace/t/n/a0");
        assert_eq!(
            shed(
                &rates(&[("a", &[2000, 1000]), ("b", &[0, 0, 3000])]),
                1,
                &none()
            ),
            None
        );
        // a 3000 against b 2800: no move gains 10% of the load.
        assert_eq!(
            shed(&rates(&[("a", &[3000]), ("b", &[2800, 0, 0])]), 1, &none()),
            None
        );
        // One hot bundle alone cannot be balanced by moving it.
        assert_eq!(
            shed(&rates(&[("a", &[5000]), ("b", &[10])]), 1, &none()),
            None
        );
        // Below MIN_RATE the rates are noise: counts decide.
        assert_eq!(
            shed(&rates(&[("a", &[50, 10]), ("b", &[0, 0])]), 1, &none()),
            None
        );
        // The count rule moves the coldest bundle, and never onto a broker
        // that would end up busier than the giver.
        let r = shed(&rates(&[("a", &[60, 5, 30]), ("b", &[])]), 1, &none()).unwrap();
        assert_eq!(r.bundle, "/namespace/t/n/a1");
        assert_eq!(
            shed(
                &rates(&[("a", &[300, 300, 300]), ("b", &[1000])]),
                1,
                &none()
            ),
            None
        );
    }

    #[test]
    fn a_bundle_moved_within_the_grace_period_stays() {
        // An operator put a0 on a (at t = 1,000 s); with a 30-minute grace
        // it is not moved back though counts are uneven: the other one is.
        let grace = Duration::from_secs(1800);
        let owned = map(&[("a", 2), ("b", 0)]);
        let moved = [
            ("/namespace/t/n/a0", Some(1_000_000)),
            ("/namespace/t/n/a1", None),
        ];
        let settled_now = settled(moved, 1_000_500, grace);
        assert_eq!(
            settled_now,
            BTreeSet::from(["/namespace/t/n/a0".to_owned()])
        );
        let r = shed(&owned, 0, &settled_now).unwrap();
        assert_eq!(r.bundle, "/namespace/t/n/a1");
        // Both settled: nothing moves, by count or by rate.
        let both = BTreeSet::from([
            "/namespace/t/n/a0".to_owned(),
            "/namespace/t/n/a1".to_owned(),
        ]);
        assert_eq!(shed(&owned, 0, &both), None);
        let busy = rates(&[("a", &[3000, 2000]), ("b", &[0])]);
        assert_eq!(shed(&busy, 1, &both), None);
        assert_eq!(shed(&busy, 1, &none()).unwrap().bundle, "/namespace/t/n/a0");
        // After the grace period it may move again.
        assert!(settled(moved, 1_000_000 + 1_800_000, grace).is_empty());
        assert!(settled(moved, 1_000_500, Duration::ZERO).is_empty());
    }

    #[test]
    fn a_move_waits_until_its_condition_held_enough_rounds() {
        let req = |from: &str| MoveRequest {
            bundle: format!("/namespace/t/n/{from}0"),
            from: from.into(),
            to: "z".into(),
        };
        let mut s = Streak::default();
        assert_eq!(s.confirm(Some(req("a")), 3), None);
        assert_eq!(s.confirm(Some(req("a")), 3), None);
        assert_eq!(s.confirm(Some(req("a")), 3), Some(req("a")));
        // It counts again after a move, and a round without the condition,
        // or with another broker overloaded, starts over.
        assert_eq!(s.confirm(Some(req("a")), 3), None);
        assert_eq!(s.confirm(None, 3), None);
        assert_eq!(s.confirm(Some(req("a")), 3), None);
        assert_eq!(s.confirm(Some(req("b")), 3), None);
        assert_eq!(s.confirm(Some(req("b")), 3), None);
        assert_eq!(s.confirm(Some(req("b")), 3), Some(req("b")));
        // A threshold of 0 or 1 moves at once.
        assert_eq!(s.confirm(Some(req("a")), 1), Some(req("a")));
        assert_eq!(s.confirm(Some(req("a")), 0), Some(req("a")));
    }

    #[test]
    fn bundles_over_a_limit_split_one_at_a_time() {
        let limits = SplitLimits {
            max_topics: 10,
            max_msg_rate: 1000,
            max_bundles: 8,
        };
        let b = |v: &[(&str, u32, u64)]| -> BTreeMap<String, (u32, u64)> {
            v.iter()
                .map(|(k, t, r)| (format!("/namespace/t/n/{k}"), (*t, *r)))
                .collect()
        };
        let four = |_: &str| 4;
        assert_eq!(to_split(&b(&[("x", 10, 1000)]), four, limits), None);
        // The one furthest over a limit: y has 3x the rate limit, x 1.2x the topics.
        assert_eq!(
            to_split(&b(&[("x", 12, 0), ("y", 2, 3000)]), four, limits).as_deref(),
            Some("/namespace/t/n/y")
        );
        // One topic alone is never split, nor a namespace at the maximum.
        assert_eq!(to_split(&b(&[("y", 1, 9000)]), four, limits), None);
        assert_eq!(to_split(&b(&[("x", 50, 0)]), |_| 8, limits), None);
    }

    #[test]
    fn rates_are_reported_again_only_when_they_moved() {
        let m = |v: &[(&str, u64)]| -> BTreeMap<String, u64> {
            v.iter().map(|(k, r)| (k.to_string(), *r)).collect()
        };
        assert!(!rates_moved(&m(&[("x", 1000)]), &m(&[("x", 1100)])));
        assert!(rates_moved(&m(&[("x", 1000)]), &m(&[("x", 1500)])));
        assert!(!rates_moved(&m(&[("x", 1)]), &m(&[("x", 5)])), "noise");
        assert!(rates_moved(&m(&[("x", 1)]), &m(&[("x", 1), ("y", 0)])));
        assert!(rates_moved(&m(&[("x", 1)]), &m(&[("y", 1)])));
    }

    #[test]
    fn requests_mirror_the_bundle_path() {
        assert_eq!(
            request_path("/namespace/t/n/0x00000000_0x40000000"),
            "/loadbalance/transfer-requests/t/n/0x00000000_0x40000000"
        );
    }
}
