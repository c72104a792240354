//! PIP-473's transaction-coordinator elections: the first user of the coordination layer.
//!
//! The coordinator is split into `parallelism` partitions (default 16), a value fixed cluster-wide
//! at `/txn/tc/parallelism`: a broker configured with another value refuses to start. Every broker
//! campaigns for every partition at `/txn/tc/leader/<N>` with its [`TcLeader`] value, and the
//! [`TcAssignmentsView`] turns the leader keys into the partition → leader table that
//! `WATCH_TC_ASSIGNMENTS_UPDATE` carries: a complete snapshot on every change, derived only from
//! complete cache snapshots (see [`crate::PrefixCache`]), so a partition with a live leader is
//! never reported leaderless because of a cache miss.
//!
//! Mirrors `TransactionCoordinatorV5`'s election part, `TcLeader` and `TxnPaths` in Pulsar.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::cache::{CacheSnapshot, PrefixCache};
use crate::election::{LeaderElection, LeaderState};
use crate::error::{MetadataError, Result};
use crate::session::{Session, SessionOptions};
use crate::store::{MetadataStore, Revision};

/// The default number of coordinator partitions
/// (`transactionCoordinatorScalableTopicsParallelism`).
pub const DEFAULT_PARALLELISM: u32 = 16;
/// Where the cluster-wide parallelism is fixed.
pub const PARALLELISM_PATH: &str = "/txn/tc/parallelism";
/// The prefix of the per-partition election keys.
pub const LEADER_PREFIX: &str = "/txn/tc/leader/";
/// Largest accepted parallelism (bounds the per-broker election count).
pub const MAX_PARALLELISM: u32 = 4096;

/// The election key of partition `n`.
pub fn leader_path(n: u32) -> String {
    format!("{LEADER_PREFIX}{n}")
}

/// The election value: who leads a partition and where to reach it (Pulsar's `TcLeader`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcLeader {
    /// The broker's id.
    pub broker_id: String,
    /// `pulsar://host:port`.
    pub broker_service_url: String,
    /// `pulsar+ssl://host:port`, if the broker serves TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_service_url_tls: Option<String>,
    /// The broker's advertised listeners (Pulsar's `advertisedListeners`), for clients that name
    /// one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<TcListener>,
}

/// One named listener of a coordinator leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcListener {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_service_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_service_url_tls: Option<String>,
}

impl TcLeader {
    /// The URLs a client of `listener` reaches this leader at (`None`: the default ones).
    /// A listener this leader does not have gives its default URLs too.
    pub fn urls_for(&self, listener: Option<&str>) -> (String, Option<String>) {
        if let Some(l) = listener.and_then(|n| self.listeners.iter().find(|l| l.name == n))
            && let Some(url) = &l.broker_service_url
        {
            return (url.clone(), l.broker_service_url_tls.clone());
        }
        (
            self.broker_service_url.clone(),
            self.broker_service_url_tls.clone(),
        )
    }
}

/// Fixes the parallelism at [`PARALLELISM_PATH`] if unset, or checks that the fixed value equals
/// `configured`. A mismatch is [`MetadataError::ParallelismMismatch`], naming both values.
pub async fn ensure_parallelism(store: &dyn MetadataStore, configured: u32) -> Result<u32> {
    if configured == 0 || configured > MAX_PARALLELISM {
        return Err(MetadataError::InvalidTxn(format!(
            "transaction coordinator parallelism must be in 1..={MAX_PARALLELISM}, got {configured}"
        )));
    }
    loop {
        match store.get(PARALLELISM_PATH).await? {
            None => {
                if crate::create_once(store, PARALLELISM_PATH, configured.to_string().as_bytes())
                    .await?
                {
                    return Ok(configured);
                }
                // Another broker was first (or our own earlier attempt): read it.
            }
            Some(v) => {
                let stored = std::str::from_utf8(&v.value)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok())
                    .ok_or_else(|| MetadataError::Codec {
                        key: PARALLELISM_PATH.to_string(),
                        reason: "not a number".into(),
                    })?;
                if stored != configured {
                    return Err(MetadataError::ParallelismMismatch {
                        configured,
                        stored,
                        path: PARALLELISM_PATH.to_string(),
                    });
                }
                return Ok(stored);
            }
        }
    }
}

/// The partition → leader table at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcAssignments {
    /// The number of partitions.
    pub parallelism: u32,
    /// The store revision of the leader keys this table was derived from.
    pub revision: Revision,
    /// `leaders[n]` is partition `n`'s leader, `None` while it has none.
    pub leaders: Vec<Option<TcLeader>>,
}

impl TcAssignments {
    /// Derives the table from a complete snapshot of [`LEADER_PREFIX`].
    pub fn from_snapshot(snap: &CacheSnapshot, parallelism: u32) -> TcAssignments {
        let leaders = (0..parallelism)
            .map(|n| {
                let v = snap.entries.get(&leader_path(n))?;
                match serde_json::from_slice(&v.value) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        tracing::warn!(partition = n, error = %e, "undecodable TC leader value");
                        None
                    }
                }
            })
            .collect();
        TcAssignments {
            parallelism,
            revision: snap.revision,
            leaders,
        }
    }

    /// Partitions without a leader (to be re-pushed after `TC_ASSIGNMENTS_REPUSH_DELAY_MS`).
    pub fn missing(&self) -> Vec<u32> {
        (0..self.parallelism)
            .filter(|n| self.leaders[*n as usize].is_none())
            .collect()
    }

    /// True when every partition has a leader.
    pub fn is_complete(&self) -> bool {
        self.leaders.iter().all(Option::is_some)
    }

    /// How many partitions `broker_id` leads.
    pub fn count_led_by(&self, broker_id: &str) -> usize {
        self.leaders
            .iter()
            .flatten()
            .filter(|l| l.broker_id == broker_id)
            .count()
    }
}

/// The assignments view: a complete [`TcAssignments`] published on every leader change.
#[derive(Debug)]
pub struct TcAssignmentsView {
    rx: watch::Receiver<Arc<TcAssignments>>,
    _cache: PrefixCache,
    _task: DropGuard,
}

impl TcAssignmentsView {
    /// Loads the leader keys and follows them.
    pub async fn start(store: Arc<dyn MetadataStore>, parallelism: u32) -> Result<Self> {
        let cache = PrefixCache::start(store, LEADER_PREFIX).await?;
        let mut snaps = cache.subscribe();
        let first = TcAssignments::from_snapshot(&snaps.borrow_and_update(), parallelism);
        let (tx, rx) = watch::channel(Arc::new(first));
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    r = snaps.changed() => if r.is_err() { return },
                }
                let next = TcAssignments::from_snapshot(&snaps.borrow_and_update(), parallelism);
                tx.send_if_modified(|cur| {
                    if cur.leaders == next.leaders {
                        false
                    } else {
                        *cur = Arc::new(next);
                        true
                    }
                });
            }
        });
        Ok(TcAssignmentsView {
            rx,
            _cache: cache,
            _task: cancel.drop_guard(),
        })
    }

    /// The newest table.
    pub fn current(&self) -> Arc<TcAssignments> {
        self.rx.borrow().clone()
    }

    /// Follows the tables; each one is complete.
    pub fn subscribe(&self) -> watch::Receiver<Arc<TcAssignments>> {
        self.rx.clone()
    }

    /// Waits until a table satisfies `pred`, at most `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&TcAssignments) -> bool,
    ) -> Result<Arc<TcAssignments>> {
        let mut rx = self.rx.clone();
        let fut = async {
            loop {
                let cur = rx.borrow_and_update().clone();
                if pred(&cur) {
                    return Ok(cur);
                }
                if rx.changed().await.is_err() {
                    return Err(MetadataError::Closed);
                }
            }
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| MetadataError::Backend("TC assignments wait timed out".into()))?
    }
}

/// A broker's TC membership settings.
#[derive(Debug, Clone)]
pub struct TcMemberConfig {
    /// This broker's id and URLs.
    pub leader: TcLeader,
    /// The configured parallelism; must equal the cluster's.
    pub parallelism: u32,
    /// The session used for all of this broker's elections.
    pub session: SessionOptions,
    /// The partitions this broker campaigns for (`None`: all). A broker left out of a partition
    /// never leads it: placement, or an operator keeping a partition off a broker.
    pub campaign: Option<Vec<u32>>,
}

/// One broker's part in the TC elections: a session, one candidate per partition, and the view.
pub struct TcMember {
    session: Arc<Session>,
    elections: Vec<LeaderElection<TcLeader>>,
    view: TcAssignmentsView,
}

impl fmt::Debug for TcMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcMember")
            .field("parallelism", &self.elections.len())
            .field("led", &self.led_partitions())
            .finish_non_exhaustive()
    }
}

impl TcMember {
    /// Checks the parallelism (refusing to start on a mismatch), opens a session and campaigns
    /// for every partition.
    pub async fn start(store: Arc<dyn MetadataStore>, config: TcMemberConfig) -> Result<TcMember> {
        let parallelism = ensure_parallelism(&*store, config.parallelism).await?;
        let view = TcAssignmentsView::start(store.clone(), parallelism).await?;
        let session = Arc::new(Session::start(store, config.session).await?);
        let mut elections = Vec::with_capacity(parallelism as usize);
        for n in 0..parallelism {
            let e = LeaderElection::new(&session, &leader_path(n), config.leader.clone())?;
            if config.campaign.as_ref().is_none_or(|c| c.contains(&n)) {
                e.campaign();
            }
            elections.push(e);
        }
        Ok(TcMember {
            session,
            elections,
            view,
        })
    }

    /// True if this broker leads partition `n` right now.
    pub fn is_leader(&self, n: u32) -> bool {
        self.elections
            .get(n as usize)
            .is_some_and(LeaderElection::is_leader)
    }

    /// The partitions this broker leads right now.
    pub fn led_partitions(&self) -> Vec<u32> {
        (0..self.elections.len() as u32)
            .filter(|n| self.is_leader(*n))
            .collect()
    }

    /// The election of partition `n`.
    pub fn election(&self, n: u32) -> Option<&LeaderElection<TcLeader>> {
        self.elections.get(n as usize)
    }

    /// The state of partition `n`'s election.
    pub fn state(&self, n: u32) -> Option<LeaderState<TcLeader>> {
        self.election(n).map(LeaderElection::state)
    }

    /// The assignments view.
    pub fn view(&self) -> &TcAssignmentsView {
        &self.view
    }

    /// The session all elections run in.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Resigns every partition and closes the session.
    pub async fn shutdown(self) -> Result<()> {
        self.resign_all().await
    }

    /// [`TcMember::shutdown`] for a member that is shared: resigns every partition and closes
    /// the session, so the others take over at once rather than after the session TTL.
    pub async fn resign_all(&self) -> Result<()> {
        for e in &self.elections {
            e.resign().await?;
        }
        self.session.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_is_reached_on_the_clients_listener() {
        let l = TcLeader {
            broker_id: "b1".into(),
            broker_service_url: "pulsar://b1:6650".into(),
            broker_service_url_tls: None,
            listeners: vec![TcListener {
                name: "external".into(),
                broker_service_url: Some("pulsar://localhost:6652".into()),
                broker_service_url_tls: None,
            }],
        };
        assert_eq!(l.urls_for(None).0, "pulsar://b1:6650");
        assert_eq!(l.urls_for(Some("external")).0, "pulsar://localhost:6652");
        assert_eq!(l.urls_for(Some("other")).0, "pulsar://b1:6650");
        // Values written before listeners existed still decode.
        let old = br#"{"brokerId":"b1","brokerServiceUrl":"pulsar://b1:6650"}"#;
        let back: TcLeader = serde_json::from_slice(old).unwrap();
        assert!(back.listeners.is_empty());
        assert_eq!(
            serde_json::from_slice::<TcLeader>(&serde_json::to_vec(&l).unwrap()).unwrap(),
            l
        );
    }
}
