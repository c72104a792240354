//! The load manager at work: every broker reads the move requests asked of
//! it; the elected leader, each round, drops stale requests and writes the
//! one move [`crate::balance::shed`] chooses, fenced by its leadership.

use std::sync::{Arc, Weak};
use std::time::Duration;

use strobe_metadata::{Expect, LeaderElection, Op};
use tracing::{info, warn};

use crate::ClusterError;
use crate::balance::{LEADER, MoveRequest, Owned, ShedPolicy, Streak, request_path, settled, shed};
use crate::cluster::Cluster;
use crate::state::OwnerState;

impl Cluster {
    /// Starts the load manager (see [`crate::balance`]): this broker campaigns for
    /// its leadership and, while leading, moves bundles off the most loaded
    /// broker as `policy` says.
    pub fn start_load_manager(self: &Arc<Self>, policy: ShedPolicy) {
        tokio::spawn(run(Arc::downgrade(self), policy));
    }

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
    pub(crate) fn pending_requests(&self) -> Vec<(String, Result<MoveRequest, serde_json::Error>)> {
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

    /// The leader's view: every live broker and the bundles it owns, with
    /// the rates it reported for them (moving bundles count for no one).
    pub(crate) fn ownership_map(&self) -> Owned {
        let brokers = self.live_brokers();
        let mut map: Owned = brokers
            .iter()
            .map(|b| (b.broker_id.clone(), Vec::new()))
            .collect();
        let rate = |broker: &str, path: &str| {
            brokers
                .iter()
                .find(|b| b.broker_id == broker)
                .and_then(|b| b.bundle_rates.get(path).copied())
                .unwrap_or(0)
        };
        for (path, o) in self.owners() {
            if o.state == OwnerState::Owned
                && let Some(v) = map.get_mut(&o.broker.broker_id)
            {
                let r = rate(&o.broker.broker_id, &path);
                v.push((path, r));
            }
        }
        map
    }
}

/// Campaigns for the load manager's leadership and, while leading, sheds.
async fn run(cluster: Weak<Cluster>, policy: ShedPolicy) {
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
    let mut tick = tokio::time::interval(policy.interval.max(Duration::from_millis(100)));
    // Counted by this leader only: a new one starts counting afresh.
    let mut streak = Streak::default();
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(c) = cluster.upgrade() else { return };
        if c.is_leaving() {
            return;
        }
        if !election.is_leader() {
            streak = Streak::default();
            continue;
        }
        if let Err(e) = lead_once(&c, &election, &policy, &mut streak).await {
            warn!(error = %e, "the load manager's round failed");
        }
    }
}

async fn lead_once(
    c: &Cluster,
    election: &LeaderElection<String>,
    policy: &ShedPolicy,
    streak: &mut Streak,
) -> Result<(), ClusterError> {
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
    let settled = settled(
        owners.iter().map(|(p, o)| (p.as_str(), o.moved_at)),
        now_ms(),
        policy.grace,
    );
    let proposal = shed(&c.ownership_map(), policy.threshold, &settled);
    let Some(req) = streak.confirm(proposal, policy.hits) else {
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

/// The wall clock in ms since the epoch, as ownership records keep it.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
