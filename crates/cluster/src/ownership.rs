//! Bundle ownership records in the store: taking a free bundle, lookups,
//! and moving a bundle to another broker (PIP-307's transfer), every change a
//! compare-and-set on the record's version (see `state.rs` for the states).
//!
//! A record lives under its holder's session lease. During a transfer the
//! source writes Releasing{dst} and then Assigning{dst} under its own lease;
//! the destination, which follows the records by watch, takes an Assigning
//! record addressed to it by rewriting it as Owned under *its* lease (one
//! compare-and-set: the record moves from one lease to the other). Its
//! version, a store revision, is then above every version the source held, so
//! it fences the source's ledgers.

use std::collections::HashMap;
use std::sync::Weak;
use std::time::Duration;

use strobe_metadata::{Expect, MetadataError, Op, OpResult};
use tracing::{info, warn};

use crate::cluster::Cluster;
use crate::error::{ClusterError, not_served, split_away};
use crate::registry::{
    BrokerInfo, BrokerRef, Held, OwnerInfo, Placement, parse_bundle_path, pick_broker,
};
use crate::state::OwnerState;

/// How long a free bundle's pick stands (see [`Cluster::place_as`]): the client's connect and
/// first command at the picked broker take well under it; a client that never goes is forgotten
/// after it, and the bundle is decided again.
const PICK_STANDS: Duration = Duration::from_secs(10);
/// Picks kept at most (free bundles picked within [`PICK_STANDS`]).
const PICKS_KEPT: usize = 10_000;

impl Cluster {
    /// The fencing token of `path` if this broker serves it now (Owned, or
    /// Splitting: the owner serves on while it splits). A topic loaded under
    /// another token is stale: the bundle went away and came back, and
    /// another broker wrote its log meanwhile.
    pub fn holds(&self, path: &str) -> Option<u64> {
        let mut owned = self.owned.lock();
        let h = owned.get(path)?;
        if !self.session.is_alive_in(h.epoch) {
            owned.remove(path);
            return None;
        }
        matches!(h.info.state, OwnerState::Owned | OwnerState::Splitting).then_some(h.fence)
    }

    /// Whether this broker is handing `path` over (Releasing or Assigning, under its live
    /// session): the transfer closes the bundle's topics and tells their clients where to
    /// go, so nothing else may close them meanwhile.
    pub fn handing_over(&self, path: &str) -> bool {
        let owned = self.owned.lock();
        owned.get(path).is_some_and(|h| {
            self.session.is_alive_in(h.epoch)
                && matches!(h.info.state, OwnerState::Releasing | OwnerState::Assigning)
        })
    }

    /// The version of this broker's record of `path` as it last wrote it,
    /// while it serves the bundle: a metadata write about one of the
    /// bundle's topics that checks it fails once the bundle began moving or
    /// another broker took it (a transactional ack of a topic instance
    /// about to close, stored after the next owner read the acks).
    pub fn held_version(&self, path: &str) -> Option<u64> {
        let owned = self.owned.lock();
        let h = owned.get(path)?;
        (self.session.is_alive_in(h.epoch)
            && matches!(h.info.state, OwnerState::Owned | OwnerState::Splitting))
        .then_some(h.version)
    }

    /// The paths of the bundles this broker serves (Owned or Splitting; not
    /// those it is handing over).
    pub fn owned_bundles(&self) -> Vec<String> {
        self.held_fences().into_iter().map(|(p, _)| p).collect()
    }

    /// Each bundle this broker serves with its fencing token ([`Cluster::holds`] of every
    /// held path), sorted: while this stays the same, no loaded topic's ownership changed.
    pub fn held_fences(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = self
            .owned
            .lock()
            .iter()
            .filter(|(_, h)| {
                matches!(h.info.state, OwnerState::Owned | OwnerState::Splitting)
                    && self.session.is_alive_in(h.epoch)
            })
            .map(|(p, h)| (p.clone(), h.fence))
            .collect();
        v.sort();
        v
    }

    /// The record as the store has it now (not the cache), with its version.
    pub(crate) async fn read_record(
        &self,
        path: &str,
    ) -> Result<Option<(OwnerInfo, u64)>, ClusterError> {
        match self.session.store().get(path).await? {
            None => Ok(None),
            Some(v) => {
                let info = serde_json::from_slice(&v.value).map_err(|e| ClusterError::Corrupt {
                    path: path.to_string(),
                    reason: e.to_string(),
                })?;
                Ok(Some((info, v.stat.version)))
            }
        }
    }

    /// This broker's lease and its session epoch.
    pub(crate) fn lease(&self) -> Result<(strobe_metadata::LeaseId, u64), ClusterError> {
        self.session.lease().ok_or_else(|| {
            ClusterError::NotReady(
                "this broker lost its metadata session; look the topic up again".into(),
            )
        })
    }

    /// Writes `info` at `path` under this broker's lease if the record is at
    /// `expect` (and every check of `also` holds, in the same transaction),
    /// and remembers it as held. The fencing token stays what it was while
    /// this broker goes on holding the record (a transfer's or split's
    /// steps); a record written anew starts with its own version.
    pub(crate) async fn write_checked(
        &self,
        path: &str,
        info: OwnerInfo,
        expect: Expect,
        also: Vec<Op>,
    ) -> Result<u64, ClusterError> {
        let (lease, epoch) = self.lease()?;
        let bytes = serde_json::to_vec(&info).expect("an ownership record serialises");
        let written = if also.is_empty() {
            self.session
                .store()
                .put_ephemeral(path, &bytes, expect, lease)
                .await
                .map(|stat| stat.version)
                .map_err(ClusterError::from)
        } else {
            let n = also.len();
            let mut ops = also;
            ops.push(Op::Put {
                key: path.to_string(),
                value: bytes.clone(),
                expect,
                lease: Some(lease),
            });
            match self.session.store().txn(ops).await {
                Ok(r) => match r.results.get(n) {
                    Some(OpResult::Put(stat)) => Ok(stat.version),
                    other => {
                        return Err(ClusterError::Corrupt {
                            path: path.to_string(),
                            reason: format!("a transaction's put answered {other:?}"),
                        });
                    }
                },
                Err(e) => Err(e.into()),
            }
        };
        let version = match written {
            Ok(v) => v,
            Err(ClusterError::Metadata(e)) if e.is_retriable() => {
                match self.landed(path, &bytes, lease, expect).await {
                    Some(v) => {
                        info!(bundle = path, error = %e, "an ownership write whose answer was lost had landed");
                        v
                    }
                    None => return Err(ClusterError::Metadata(e)),
                }
            }
            Err(e) => return Err(e),
        };
        let mut owned = self.owned.lock();
        let fence = match (owned.get(path), expect) {
            (Some(h), Expect::Version(v)) if h.version == v && h.epoch == epoch => h.fence,
            _ => version,
        };
        owned.insert(
            path.to_string(),
            Held {
                version,
                epoch,
                fence,
                info,
            },
        );
        Ok(fence)
    }

    /// After a write the store failed under (an etcd member died with it
    /// in flight; it may have been applied): the record's version if it
    /// holds what was written, under this broker's lease, and is not the
    /// version the write expected to replace. Without this, a transfer
    /// whose first step landed unbeknown to its source left the bundle
    /// Releasing in the store and Owned here: lookups sent clients to a
    /// destination that waited for a handover that never came, for as long
    /// as the source lived.
    async fn landed(
        &self,
        path: &str,
        bytes: &[u8],
        lease: strobe_metadata::LeaseId,
        expect: Expect,
    ) -> Option<u64> {
        let found = self.session.store().get(path).await.ok()??;
        let replaced = matches!(expect, Expect::Version(v) if v == found.stat.version);
        (found.value == bytes && found.stat.lease == Some(lease) && !replaced)
            .then_some(found.stat.version)
    }

    pub(crate) async fn write(
        &self,
        path: &str,
        info: OwnerInfo,
        expect: Expect,
    ) -> Result<u64, ClusterError> {
        self.write_checked(path, info, expect, Vec::new()).await
    }

    /// The check that the namespace's bundle boundaries, as the store has
    /// them now, still hold the bundle at `path`: a broker whose cache is a
    /// moment behind a split must not take the bundle that was split away.
    /// Goes into the transaction that takes the bundle, so a split landing
    /// between this read and that write makes the write fail.
    pub(crate) async fn boundaries_check(&self, path: &str) -> Result<Op, ClusterError> {
        let Some((ns, bundle)) = parse_bundle_path(path) else {
            return Err(ClusterError::Invalid(format!(
                "{path:?} is not a bundle's ownership path"
            )));
        };
        let key = strobe_resources::paths::namespace(ns);
        let Some(v) = self.session.store().get(&key).await? else {
            return Err(ClusterError::NotFound(format!(
                "namespace {ns} does not exist"
            )));
        };
        let policies: strobe_resources::policies::NamespacePolicies =
            serde_json::from_slice(&v.value).map_err(|e| ClusterError::Corrupt {
                path: key.clone(),
                reason: e.to_string(),
            })?;
        // Without recorded boundaries the namespace was never split (a split
        // records them); the version check still catches one landing now.
        if let Some(b) = policies.bundles
            && b.range_of(bundle).is_err()
        {
            return Err(split_away(path));
        }
        Ok(Op::check(key, Expect::Version(v.stat.version)))
    }

    /// Where a client should go for the bundle at `path`: its owner (the
    /// destination while it moves), or for a free bundle the broker picked
    /// for it; this broker takes the bundle at once if it is the one picked.
    pub async fn place(&self, path: &str) -> Result<Placement, ClusterError> {
        self.place_as(path, false).await
    }

    /// [`Cluster::place`] for a lookup that says whether it is `authoritative`: sent here by
    /// another broker's redirect (Pulsar's flag), so a free bundle is taken here, not decided
    /// again (two brokers deciding on different views would send the client back and forth).
    ///
    /// A free bundle goes to the live broker with the fewest bundles, counting those it was
    /// picked for lately and has not taken yet (a client goes there, and the broker takes the
    /// bundle when the client's PRODUCER or SUBSCRIBE arrives). Without that count a burst of
    /// lookups for a lost broker's bundles decided on stale counts, each lookup of a bundle
    /// anew, and the broker answering the lookups took most of them (docs/performance.md,
    /// "How the lost bundles are shared"). A pick stands for [`PICK_STANDS`]: further lookups
    /// of the bundle go to the same broker.
    pub async fn place_as(
        &self,
        path: &str,
        authoritative: bool,
    ) -> Result<Placement, ClusterError> {
        let leaving = self.is_leaving();
        let me = self.me();
        if let Some(owner) = self.owner_of(path) {
            if owner.state == OwnerState::Deleted {
                return Err(split_away(path));
            }
            let to = owner.serving().clone();
            let local = to.broker_id == me.broker_id;
            let settled = owner.state != OwnerState::Owned || !local;
            if settled || (self.holds(path).is_some() && !leaving) {
                return Ok(Placement { owner: to, local });
            }
        }
        let mut brokers = self.live_brokers();
        if leaving {
            brokers.retain(|b| b.broker_id != me.broker_id);
        }
        let pick = if authoritative && !leaving {
            me.clone()
        } else {
            let mut load: HashMap<String, u32> = HashMap::new();
            let owners = self.owners();
            for (_, o) in &owners {
                *load.entry(o.broker.broker_id.clone()).or_default() += 1;
            }
            let mut taken: std::collections::HashSet<&str> =
                owners.iter().map(|(p, _)| p.as_str()).collect();
            // This broker's own takings count at once, not when its watch shows them.
            let held: Vec<String> = self.owned.lock().keys().cloned().collect();
            for p in &held {
                if taken.insert(p.as_str()) {
                    *load.entry(me.broker_id.clone()).or_default() += 1;
                }
            }
            let mut picks = self.picks.lock();
            picks.retain(|p, (_, at)| at.elapsed() < PICK_STANDS && !taken.contains(p.as_str()));
            let standing = picks
                .get(path)
                .and_then(|(id, _)| brokers.iter().find(|b| b.broker_id == *id));
            match standing {
                Some(b) => Some(b.clone()),
                None => {
                    for (id, _) in picks.values() {
                        *load.entry(id.clone()).or_default() += 1;
                    }
                    let chosen = pick_broker(path, &brokers, &load).cloned();
                    // This broker's own picks too: its takings queue one at a time, and the
                    // lookups meanwhile must count them (uncounted, a burst of lookups went
                    // mostly to the broker answering them).
                    if let Some(b) = &chosen
                        && picks.len() < PICKS_KEPT
                    {
                        picks.insert(
                            path.to_owned(),
                            (b.broker_id.clone(), std::time::Instant::now()),
                        );
                    }
                    chosen
                }
            }
            .map_or_else(
                || {
                    if leaving {
                        Err(ClusterError::NotReady(
                            "this broker is shutting down and no other broker is live".into(),
                        ))
                    } else {
                        Ok(me.clone())
                    }
                },
                Ok,
            )?
        };
        if pick.broker_id != me.broker_id {
            // The picked broker takes the bundle when the client arrives.
            return Ok(Placement {
                owner: BrokerRef::from(&pick),
                local: false,
            });
        }
        match self.acquire(path).await {
            Ok(_) => Ok(Placement {
                owner: BrokerRef::from(&me),
                local: true,
            }),
            Err(e) => match self.read_record(path).await? {
                Some((owner, _)) => {
                    let to = owner.serving().clone();
                    Ok(Placement {
                        local: to.broker_id == me.broker_id,
                        owner: to,
                    })
                }
                None => Err(e),
            },
        }
    }

    /// Makes sure this broker owns the bundle at `path` and returns the
    /// fencing token of its ledgers there: a free bundle is taken, one moving
    /// here is waited for (up to 30 s), and one another broker owns is
    /// refused with `ServiceNotReady`, which makes the client look up again.
    pub async fn acquire(&self, path: &str) -> Result<u64, ClusterError> {
        if let Some(v) = self.holds(path) {
            return Ok(v);
        }
        if self.is_leaving() {
            return Err(ClusterError::NotReady(format!(
                "Namespace bundle {path} is being unloaded: this broker is shutting down"
            )));
        }
        let me = self.broker_id();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        // Any change of the records wakes a wait below: the bundle arriving
        // here, or the source giving it up (Free: take it then).
        let mut changes = self.owners.subscribe();
        loop {
            changes.borrow_and_update();
            {
                let _one = self.acquiring.lock().await;
                if let Some(v) = self.holds(path) {
                    return Ok(v);
                }
                match self.read_record(path).await? {
                    None => {
                        let info = OwnerInfo::owned_by(&self.me());
                        let check = self.boundaries_check(path).await?;
                        match self
                            .write_checked(path, info, Expect::Absent, vec![check])
                            .await
                        {
                            Ok(v) => {
                                info!(bundle = path, fence = v, "bundle owned");
                                return Ok(v);
                            }
                            Err(ClusterError::Metadata(MetadataError::AlreadyExists(_))) => {
                                continue;
                            }
                            // The boundaries changed since they were read: a split.
                            Err(ClusterError::Metadata(MetadataError::BadVersion { .. })) => {
                                return Err(split_away(path));
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    Some((rec, _)) if rec.state == OwnerState::Deleted => {
                        return Err(split_away(path));
                    }
                    Some((rec, version)) => {
                        let moving_here = rec.state != OwnerState::Owned
                            && rec.dst.as_ref().is_some_and(|d| d.broker_id == me);
                        if !moving_here {
                            return Err(not_served(path, &rec.broker.broker_id));
                        }
                        if rec.state == OwnerState::Assigning {
                            return self.adopt(path, rec, version).await;
                        }
                    }
                }
            }
            // Releasing towards this broker: the source is closing its topics.
            if !matches!(
                tokio::time::timeout_at(deadline, changes.changed()).await,
                Ok(Ok(()))
            ) {
                return Err(ClusterError::NotReady(format!(
                    "Namespace bundle {path} is being unloaded to this broker and did not arrive within 30 s"
                )));
            }
        }
    }

    /// Takes an Assigning record addressed to this broker.
    pub(crate) async fn adopt(
        &self,
        path: &str,
        rec: OwnerInfo,
        version: u64,
    ) -> Result<u64, ClusterError> {
        let info = OwnerInfo {
            moved_at: Some(crate::load_manager::now_ms()),
            ..OwnerInfo::owned_by(&self.me())
        };
        let v = self.write(path, info, Expect::Version(version)).await?;
        info!(bundle = path, from = %rec.broker.broker_id, fence = v, "bundle transferred here");
        Ok(v)
    }

    /// Gives up a bundle (its topics must be closed first): Free.
    pub async fn release(&self, path: &str) {
        let Some(h) = self.owned.lock().remove(path) else {
            return;
        };
        // Deleting only the version we wrote never removes a later holder's record.
        match self.session.store().delete(path, Some(h.version)).await {
            Ok(()) | Err(MetadataError::NotFound(_)) | Err(MetadataError::BadVersion { .. }) => {
                info!(bundle = path, "bundle released")
            }
            Err(e) => warn!(bundle = path, error = %e, "releasing a bundle failed"),
        }
    }

    /// A transfer's first step: Owned → Releasing{dst}. From now on lookups
    /// send clients to `dst`.
    pub async fn begin_transfer(&self, path: &str, dst: &BrokerInfo) -> Result<(), ClusterError> {
        let held = self.owned.lock().get(path).cloned();
        let Some(version) = held
            .filter(|h| h.info.state == OwnerState::Owned && self.session.is_alive_in(h.epoch))
            .map(|h| h.version)
        else {
            return Err(ClusterError::Invalid(format!(
                "bundle {path} is not owned by this broker"
            )));
        };
        if dst.broker_id == self.broker_id() {
            return Err(ClusterError::Invalid(format!(
                "bundle {path} is already owned by {}",
                dst.broker_id
            )));
        }
        let info = OwnerInfo {
            broker: BrokerRef::from(&self.me()),
            state: OwnerState::Releasing,
            dst: Some(BrokerRef::from(dst)),
            moved_at: None,
        };
        self.write(path, info, Expect::Version(version)).await?;
        Ok(())
    }

    /// The second step, once the bundle's topics are closed and their logs
    /// sealed: Releasing → Assigning{dst}. The destination takes it from here.
    pub async fn assign(&self, path: &str) -> Result<(), ClusterError> {
        let Some(h) = self.owned.lock().get(path).cloned() else {
            return Err(ClusterError::Invalid(format!(
                "bundle {path} is not held here"
            )));
        };
        if h.info.state != OwnerState::Releasing {
            return Err(ClusterError::Invalid(format!(
                "bundle {path} is not being released"
            )));
        }
        let info = OwnerInfo {
            state: OwnerState::Assigning,
            ..h.info
        };
        self.write(path, info, Expect::Version(h.version)).await?;
        Ok(())
    }

    /// Waits until `dst` owns the bundle (the cache shows its Owned record),
    /// at most `timeout`; then forgets it here.
    pub async fn wait_taken(&self, path: &str, dst: &str, timeout: Duration) -> bool {
        let mut rx = self.owners.subscribe();
        let taken = tokio::time::timeout(timeout, async {
            loop {
                let done = rx.borrow_and_update().entries.get(path).is_some_and(|v| {
                    serde_json::from_slice::<OwnerInfo>(&v.value)
                        .is_ok_and(|o| o.state == OwnerState::Owned && o.broker.broker_id == dst)
                });
                if done || rx.changed().await.is_err() {
                    return done;
                }
            }
        })
        .await
        .unwrap_or(false);
        if taken {
            self.owned.lock().remove(path);
        }
        taken
    }
}

/// A broker's topic loads (running and waiting) at which it has loaded the topics of the
/// bundles moved to it: a destination takes the next one then, and a broker shutting down
/// starts the next bundle's transfer to it then...
pub const SETTLED_TOPIC_LOADS: usize = 32;
/// ...and a destination takes one anyway after this long (the source gives up on a take after 10 s).
const ADOPT_WAIT: Duration = Duration::from_secs(4);

impl Cluster {
    /// Tells the cluster how to count the broker's topic loads (running and waiting), so
    /// that it paces the bundles moving here by them.
    pub fn set_topic_loads(&self, loads: crate::cluster::TopicLoads) {
        *self.topic_loads.lock() = Some(loads);
    }

    /// Waits, at most [`ADOPT_WAIT`], until the broker's topic loads are down to
    /// [`SETTLED_TOPIC_LOADS`].
    async fn loads_settled(&self) {
        let Some(loads) = self.topic_loads.lock().clone() else {
            return;
        };
        let deadline = tokio::time::Instant::now() + ADOPT_WAIT;
        while loads() > SETTLED_TOPIC_LOADS && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Takes every bundle moving to this broker as soon as the source assigns it
/// (Pulsar's destination writing Owned), without waiting for a client, but not
/// while the topics of the bundles taken before are still loading: a broker
/// shutting down hands its bundles over faster than the others load their
/// topics, and a bundle's producers are held from its close until their topic
/// is loaded here, so taking the next one later paces the source, whose
/// clients of the bundles not yet closed go on being served meanwhile
/// (docs/performance.md, "SIGTERM at scale").
pub(crate) async fn adopt_moving(cluster: Weak<Cluster>) {
    let Some(mut rx) = cluster.upgrade().map(|c| c.owners.subscribe()) else {
        return;
    };
    while rx.changed().await.is_ok() {
        let Some(c) = cluster.upgrade() else { return };
        let snap = rx.borrow_and_update().clone();
        let me = c.broker_id();
        for (path, v) in &snap.entries {
            let Ok(rec) = serde_json::from_slice::<OwnerInfo>(&v.value) else {
                continue;
            };
            let for_me = rec.state == OwnerState::Assigning
                && rec.dst.as_ref().is_some_and(|d| d.broker_id == me);
            if !for_me || c.is_leaving() {
                continue;
            }
            c.loads_settled().await;
            let _one = c.acquiring.lock().await;
            if let Err(e) = c.adopt(path, rec, v.stat.version).await {
                // Already taken (a client's SUBSCRIBE won), or the source gave up.
                tracing::debug!(bundle = %path, error = %e, "taking a bundle moving here");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pair;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_bundle_moves_to_its_destination_with_a_higher_token() {
        let (a, b) = pair().await;
        let path = crate::registry::bundle_path("public/default", "0x00000000_0x40000000");
        let fa = a.acquire(&path).await.unwrap();
        a.begin_transfer(&path, &b.me()).await.unwrap();
        // While it moves, lookups anywhere send clients to b.
        let p = a.place(&path).await.unwrap();
        assert_eq!((p.owner.broker_id.as_str(), p.local), ("b", false));
        // b asked now waits for the bundle instead of refusing it.
        let waiting = tokio::spawn({
            let b = b.clone();
            let path = path.clone();
            async move { b.acquire(&path).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        assert!(
            a.handing_over(&path),
            "a's walk must leave the topics to the transfer"
        );
        a.assign(&path).await.unwrap();
        assert!(a.handing_over(&path));
        assert!(a.wait_taken(&path, "b", Duration::from_secs(5)).await);
        assert!(!a.handing_over(&path));
        let fb = waiting.await.unwrap().unwrap();
        assert!(fb > fa, "{fb} > {fa}");
        assert_eq!(b.owned_bundles(), vec![path.clone()]);
        assert!(a.owned_bundles().is_empty());
        assert!(
            a.acquire(&path).await.is_err(),
            "a does not own it any more"
        );
        // Transferring to the owner itself is refused.
        assert!(b.begin_transfer(&path, &b.me()).await.is_err());
        a.leave().await;
        b.leave().await;
    }

    /// A destination still loading the topics of the bundles it took before takes the next
    /// one only once those loads settle (the source's producers of it wait meanwhile).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_destination_takes_a_moving_bundle_once_its_loads_settle() {
        let (a, b) = pair().await;
        let loads = Arc::new(std::sync::atomic::AtomicUsize::new(
            SETTLED_TOPIC_LOADS + 100,
        ));
        b.set_topic_loads(Arc::new({
            let loads = loads.clone();
            move || loads.load(std::sync::atomic::Ordering::Relaxed)
        }));
        let path = crate::registry::bundle_path("public/default", "0x40000000_0x80000000");
        a.acquire(&path).await.unwrap();
        a.begin_transfer(&path, &b.me()).await.unwrap();
        a.assign(&path).await.unwrap();
        assert!(
            !a.wait_taken(&path, "b", Duration::from_millis(500)).await,
            "taken while the destination was loading"
        );
        loads.store(SETTLED_TOPIC_LOADS, std::sync::atomic::Ordering::Relaxed);
        assert!(a.wait_taken(&path, "b", Duration::from_secs(3)).await);
        // a saw b's record; b counts the bundle once its write returned.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while b.owned_bundles() != vec![path.clone()] {
            assert!(tokio::time::Instant::now() < deadline, "b never held it");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        a.leave().await;
        b.leave().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_free_bundles_is_shared_evenly_and_each_pick_stands() {
        let (a, b) = pair().await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while a.live_brokers().len() < 2 {
            assert!(tokio::time::Instant::now() < deadline, "a never saw b join");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let path = |i: u64| {
            let end = ((i + 1) << 28).min(0xffff_ffff);
            crate::registry::bundle_path(
                "public/default",
                &format!("0x{:08x}_0x{end:08x}", i << 28),
            )
        };
        // Sixteen free bundles looked up at a at once, faster than any client reaches b:
        // each goes to the broker with fewer, counting a's takings under way and its picks
        // for b.
        let lookups: Vec<_> = (0..16)
            .map(|i| {
                let a = a.clone();
                tokio::spawn(async move { (i, a.place(&path(i)).await.unwrap()) })
            })
            .collect();
        let mut to_b = Vec::new();
        for l in lookups {
            let (i, p) = l.await.unwrap();
            if !p.local {
                assert_eq!(p.owner.broker_id, "b");
                to_b.push(path(i));
            }
        }
        assert_eq!(to_b.len(), 8, "{to_b:?}");
        assert_eq!(a.owned_bundles().len(), 8);
        // A pick stands: the bundle is still free, and asked again it goes to b again.
        for p in &to_b {
            let again = a.place(p).await.unwrap();
            assert_eq!((again.owner.broker_id.as_str(), again.local), ("b", false));
        }
        // A redirected (authoritative) lookup takes a free bundle where it lands.
        let p = b.place_as(&to_b[0], true).await.unwrap();
        assert!(p.local);
        assert_eq!(b.owned_bundles(), vec![to_b[0].clone()]);
        let p = a.place_as(&to_b[0], true).await.unwrap();
        assert_eq!(
            (p.owner.broker_id.as_str(), p.local),
            ("b", false),
            "owned: not taken"
        );
        a.leave().await;
        b.leave().await;
    }

    #[tokio::test]
    async fn a_transfer_step_whose_answer_was_lost_is_found_done() {
        let store = std::sync::Arc::new(strobe_metadata::testing::LostAnswers::new(
            strobe_metadata::EmbeddedStore::in_memory(),
        ));
        let (a, b) = crate::testing::pair_on(store.clone()).await;
        let path = crate::registry::bundle_path("public/default", "0x00000000_0x40000000");
        store.fail_next(1);
        a.acquire(&path).await.unwrap();
        store.fail_next(1);
        a.begin_transfer(&path, &b.me()).await.unwrap();
        store.fail_next(1);
        a.assign(&path).await.unwrap();
        assert_eq!(store.failing(), 0, "each step's answer was lost");
        // b takes it within moments (before, a kept it Owned while the
        // store said Releasing, and b waited 30 s to refuse it).
        let took = tokio::time::timeout(Duration::from_secs(5), b.acquire(&path))
            .await
            .expect("b took the bundle promptly");
        assert!(took.is_ok(), "{took:?}");
        assert!(a.wait_taken(&path, "b", Duration::from_secs(5)).await);
        assert_eq!(b.owned_bundles(), vec![path]);
        a.leave().await;
        b.leave().await;
    }

    #[tokio::test]
    async fn a_destination_waiting_takes_a_bundle_its_source_gave_up() {
        let (a, b) = pair().await;
        let path = crate::registry::bundle_path("public/default", "0x40000000_0x80000000");
        a.acquire(&path).await.unwrap();
        a.begin_transfer(&path, &b.me()).await.unwrap();
        let waiting = tokio::spawn({
            let b = b.clone();
            let path = path.clone();
            async move { b.acquire(&path).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The source gives up (the bundle is Free): b takes it at once, not after 30 s.
        a.release(&path).await;
        let took = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("b took the freed bundle promptly")
            .unwrap();
        assert!(took.is_ok(), "{took:?}");
        assert_eq!(b.owned_bundles(), vec![path]);
        a.leave().await;
        b.leave().await;
    }
}
