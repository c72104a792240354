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
//! The move is a request under `/loadbalance/transfer-requests/`, fenced by
//! the leadership and bound to the leader's lease. One move is in flight at a
//! time: the owner executes the request and deletes it. This file holds the
//! decisions, pure and property-tested; `load_manager` runs them.

use std::collections::BTreeMap;

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

/// Which bundle should move where, if any (see the module docs). `owned`
/// maps every live broker (including those owning nothing) to its bundles
/// and their rates. Pure, for tests.
pub fn shed(owned: &Owned, threshold: usize) -> Option<MoveRequest> {
    shed_by_rate(owned).or_else(|| shed_by_count(owned, threshold))
}

fn shed_by_rate(owned: &Owned) -> Option<MoveRequest> {
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
        .filter(|(_, r)| gain(*r) >= need.max(1))
        .max_by_key(|(b, r)| (gain(*r), std::cmp::Reverse(b.clone())))?;
    tracing::debug!(bundle, rate = r, from = %most, to = %least, hi, lo, "shedding by rate");
    Some(MoveRequest {
        bundle: bundle.clone(),
        from: most.clone(),
        to: least.clone(),
    })
}

fn shed_by_count(owned: &Owned, threshold: usize) -> Option<MoveRequest> {
    let (most, most_bundles) = owned
        .iter()
        .max_by_key(|(id, b)| (b.len(), std::cmp::Reverse(*id)))?;
    let (least, least_bundles) = owned.iter().min_by_key(|(id, b)| (b.len(), *id))?;
    if most_bundles.len() <= least_bundles.len() + threshold {
        return None;
    }
    let (bundle, r) = most_bundles.iter().min_by_key(|(b, r)| (*r, b.clone()))?;
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
        assert_eq!(shed(&map(&[("a", 2), ("b", 1), ("c", 1)]), 1), None);
        let r = shed(&map(&[("a", 4), ("b", 1), ("c", 2)]), 1).unwrap();
        assert_eq!((r.from.as_str(), r.to.as_str()), ("a", "b"));
        assert!(r.bundle.starts_with("/namespace/t/n/a"));
        // A broker that just joined owns nothing: it gets a bundle.
        let r = shed(&map(&[("a", 2), ("b", 2), ("new", 0)]), 1).unwrap();
        assert_eq!(r.to, "new");
        assert_eq!(shed(&map(&[("a", 2), ("b", 2), ("new", 0)]), 2), None);
        assert_eq!(shed(&BTreeMap::new(), 1), None);
        assert_eq!(shed(&map(&[("solo", 9)]), 0), None);
    }

    #[test]
    fn busy_brokers_shed_by_rate_and_equal_loads_stay_put() {
        // Bundle counts are even, but a's bundles carry the traffic: the move
        // that lowers the busier side most goes to b (a 3000, b 3000 after).
        let r = shed(&rates(&[("a", &[3000, 2000, 1000]), ("b", &[0, 0])]), 1).unwrap();
        assert_eq!((r.from.as_str(), r.to.as_str()), ("a", "b"));
        assert_eq!(r.bundle, "/namespace/t/n/a0");
        assert_eq!(
            shed(&rates(&[("a", &[2000, 1000]), ("b", &[0, 0, 3000])]), 1),
            None
        );
        // a 3000 against b 2800: no move gains 10% of the load.
        assert_eq!(
            shed(&rates(&[("a", &[3000]), ("b", &[2800, 0, 0])]), 1),
            None
        );
        // One hot bundle alone cannot be balanced by moving it.
        assert_eq!(shed(&rates(&[("a", &[5000]), ("b", &[10])]), 1), None);
        // Below MIN_RATE the rates are noise: counts decide.
        assert_eq!(shed(&rates(&[("a", &[50, 10]), ("b", &[0, 0])]), 1), None);
        // The count rule moves the coldest bundle, and never onto a broker
        // that would end up busier than the giver.
        let r = shed(&rates(&[("a", &[60, 5, 30]), ("b", &[])]), 1).unwrap();
        assert_eq!(r.bundle, "/namespace/t/n/a1");
        assert_eq!(
            shed(&rates(&[("a", &[300, 300, 300]), ("b", &[1000])]), 1),
            None
        );
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
