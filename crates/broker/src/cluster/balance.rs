//! The load manager: one broker, elected through the coordination layer,
//! decides which bundle moves where (the leader part of Pulsar's extensible
//! load manager, shedding by bundle count); the bundle's owner carries the
//! move out as a transfer (PIP-307), so clients follow without a lookup.
//!
//! The leader compares the live brokers' owned bundles every
//! `load_balancer_interval_secs`. When the most loaded broker owns more than
//! `load_balancer_bundle_threshold` bundles beyond the least loaded (a broker
//! that just joined owns none), it asks for one of its bundles to move there
//! by writing a request under `/loadbalance/transfer-requests/`, fenced by
//! its leadership and bound to its lease. One move is in flight at a time:
//! the owner executes the request and deletes it.

use std::collections::BTreeMap;
use std::sync::Weak;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use strobe_metadata::{Expect, LeaderElection, Op};
use tracing::{info, warn};

use super::{Cluster, OWNERSHIP, OwnerState};
use crate::BrokerError;

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

/// Which bundle should move where, if any: from the broker owning the most
/// bundles to the one owning the fewest, when they differ by more than
/// `threshold`. `owned` maps every live broker (including those owning
/// nothing) to its bundles. Pure, for tests.
pub fn shed(owned: &BTreeMap<String, Vec<String>>, threshold: usize) -> Option<MoveRequest> {
    let (most, most_bundles) = owned
        .iter()
        .max_by_key(|(id, b)| (b.len(), std::cmp::Reverse(*id)))?;
    let (least, least_bundles) = owned.iter().min_by_key(|(id, b)| (b.len(), *id))?;
    if most_bundles.len() <= least_bundles.len() + threshold {
        return None;
    }
    Some(MoveRequest {
        bundle: most_bundles.iter().min()?.clone(),
        from: most.clone(),
        to: least.clone(),
    })
}

fn request_path(bundle_path: &str) -> String {
    let rest = bundle_path
        .strip_prefix(OWNERSHIP)
        .unwrap_or(bundle_path)
        .trim_start_matches('/');
    format!("{REQUESTS}/{rest}")
}

impl Cluster {
    /// Moves asked of this broker: requests whose bundle it owns.
    /// (Read from the watch-fed cache: every broker checks each second.)
    pub fn move_requests(&self) -> Vec<(String, MoveRequest)> {
        let me = self.broker_id();
        self.pending_requests()
            .into_iter()
            .filter_map(|(key, r)| Some((key, r.ok()?)))
            .filter(|(_, r)| r.from == me)
            .collect()
    }

    /// Every pending request by key; `Err` for one that does not decode.
    fn pending_requests(&self) -> Vec<(String, Result<MoveRequest, serde_json::Error>)> {
        self.requests
            .snapshot()
            .entries
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::from_slice(&v.value)))
            .collect()
    }

    /// Deletes a request once handled (moved, or no longer possible).
    pub async fn done_with(&self, key: &str) {
        if let Err(e) = self.session.store().delete(key, None).await
            && !matches!(e, strobe_metadata::MetadataError::NotFound(_))
        {
            warn!(key, error = %e, "deleting a move request failed");
        }
    }

    /// The leader's view: every live broker and the bundles it owns (moving
    /// bundles count for no one).
    fn ownership_map(&self) -> BTreeMap<String, Vec<String>> {
        let mut map: BTreeMap<String, Vec<String>> = self
            .live_brokers()
            .into_iter()
            .map(|b| (b.broker_id, Vec::new()))
            .collect();
        for (path, o) in self.owners() {
            if o.state == OwnerState::Owned
                && let Some(v) = map.get_mut(&o.broker.broker_id)
            {
                v.push(path);
            }
        }
        map
    }
}

/// Campaigns for the load manager's leadership and, while leading, sheds.
pub(super) async fn run(cluster: Weak<Cluster>, interval: Duration, threshold: usize) {
    let election = {
        let Some(c) = cluster.upgrade() else { return };
        match LeaderElection::new(c.session(), LEADER, c.broker_id()) {
            Ok(e) => e,
            Err(e) => {
                warn!(error = %e, "the load manager cannot campaign");
                return;
            }
        }
    };
    election.campaign();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(c) = cluster.upgrade() else { return };
        if c.is_leaving() {
            return;
        }
        if !election.is_leader() {
            continue;
        }
        if let Err(e) = lead_once(&c, &election, threshold).await {
            warn!(error = %e, "the load manager's round failed");
        }
    }
}

async fn lead_once(
    c: &Cluster,
    election: &LeaderElection<String>,
    threshold: usize,
) -> Result<(), BrokerError> {
    let store = c.session().store().clone();
    let owners = c.owners();
    let mut in_flight = false;
    for (key, req) in c.pending_requests() {
        // A request whose bundle is no longer its source's is done or moot.
        let stale = req.map_or(true, |r| {
            !owners
                .iter()
                .any(|(p, o)| *p == r.bundle && o.broker.broker_id == r.from)
        });
        if stale {
            let _ = store.delete(&key, None).await;
        } else {
            in_flight = true;
        }
    }
    if in_flight {
        return Ok(());
    }
    let Some(req) = shed(&c.ownership_map(), threshold) else {
        return Ok(());
    };
    let Some((lease, _)) = c.session().lease() else {
        return Ok(());
    };
    let fence = election.fence()?;
    let op = Op::Put {
        key: request_path(&req.bundle),
        value: serde_json::to_vec(&req).expect("a move request serialises"),
        expect: Expect::Absent,
        lease: Some(lease),
    };
    store.txn(vec![fence, op]).await?;
    info!(bundle = %req.bundle, from = %req.from, to = %req.to, "load manager: moving a bundle");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(counts: &[(&str, usize)]) -> BTreeMap<String, Vec<String>> {
        counts
            .iter()
            .map(|(id, n)| {
                (
                    id.to_string(),
                    (0..*n).map(|i| format!("/namespace/t/n/{id}{i}")).collect(),
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
    fn requests_mirror_the_bundle_path() {
        assert_eq!(
            request_path("/namespace/t/n/0x00000000_0x40000000"),
            "/loadbalance/transfer-requests/t/n/0x00000000_0x40000000"
        );
    }
}
