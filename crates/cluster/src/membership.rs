//! Joining the cluster and leaving it (Pulsar's `BrokerRegistry`): the
//! registration under the session's lease, the registry of live brokers and
//! owners as the watches show them, non-persistent topics announced, the
//! load reported, and the session followed (a lost lease drops every bundle;
//! the broker registers again under the next).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use strobe_metadata::{
    MetadataError, MetadataStore, PrefixCache, ResourceLock, Session, SessionOptions, SessionState,
};
use tracing::{info, warn};

use crate::ClusterError;
use crate::balance;
use crate::cluster::{Cluster, ConnListeners};
use crate::ownership;
use crate::registry::{
    BROKERS, BrokerInfo, NON_PERSISTENT, OWNERSHIP, OwnerInfo, RATE_REPORT_EVERY,
};
use crate::state::OwnerState;

impl Cluster {
    /// Starts a session on `store`, registers `me` and follows the brokers
    /// and owners. A registration left by an earlier run of this broker id
    /// (killed before its lease expired) is waited out, up to twice the TTL.
    pub async fn join(
        store: Arc<dyn MetadataStore>,
        session: SessionOptions,
        me: BrokerInfo,
    ) -> Result<Arc<Cluster>, ClusterError> {
        let ttl = session.ttl;
        let session = Arc::new(Session::start(store.clone(), session).await?);
        let brokers = PrefixCache::start(store.clone(), &format!("{BROKERS}/")).await?;
        let owners = PrefixCache::start(store.clone(), &format!("{OWNERSHIP}/")).await?;
        let requests =
            PrefixCache::start(store.clone(), &format!("{}/", balance::REQUESTS)).await?;
        let cluster = Arc::new(Cluster {
            me: Mutex::new(me),
            session,
            brokers,
            owners,
            requests,
            owned: Mutex::new(HashMap::new()),
            acquiring: tokio::sync::Mutex::new(()),
            registration: tokio::sync::Mutex::new(None),
            leaving: std::sync::atomic::AtomicBool::new(false),
            rates_reported: Mutex::new(None),
            conn_listeners: Mutex::new(ConnListeners::default()),
            picks: Mutex::new(HashMap::new()),
            topic_loads: Mutex::new(None),
        });
        let deadline = tokio::time::Instant::now() + ttl * 2;
        loop {
            match cluster.register().await {
                Ok(()) => break,
                Err(ClusterError::Metadata(MetadataError::LockBusy(path)))
                    if tokio::time::Instant::now() < deadline =>
                {
                    info!(
                        path,
                        "an earlier registration of this broker id is still alive; waiting for its lease to expire"
                    );
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(ClusterError::Metadata(MetadataError::LockBusy(path))) => {
                    return Err(ClusterError::Config(format!(
                        "broker id {:?} is registered by a live broker ({path}): give each broker its own broker_id",
                        cluster.broker_id()
                    )));
                }
                Err(e) => return Err(e),
            }
        }
        tokio::spawn(follow_session(Arc::downgrade(&cluster)));
        tokio::spawn(ownership::adopt_moving(Arc::downgrade(&cluster)));
        Ok(cluster)
    }

    pub fn broker_id(&self) -> String {
        self.me.lock().broker_id.clone()
    }

    pub fn me(&self) -> BrokerInfo {
        self.me.lock().clone()
    }

    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    pub(crate) async fn register(&self) -> Result<(), ClusterError> {
        let me = self.me();
        let path = format!("{BROKERS}/{}", me.broker_id);
        let lock = ResourceLock::acquire(&self.session, &path, me).await?;
        info!(path, "registered");
        *self.registration.lock().await = Some(lock);
        Ok(())
    }

    /// The fencing token of what this broker writes outside any bundle (its
    /// health-check ledger): its registration's version.
    pub async fn registration_fence(&self) -> Result<u64, ClusterError> {
        match &*self.registration.lock().await {
            Some(l) if l.is_held() => Ok(l.version()),
            _ => Err(ClusterError::NotReady(
                "this broker is not registered in the cluster (its metadata session was lost)"
                    .into(),
            )),
        }
    }

    /// The load manager's leader (`balance::LEADER`), if one is elected
    /// and registered.
    pub async fn load_manager_leader(&self) -> Result<Option<BrokerInfo>, ClusterError> {
        let Some(v) = self.session.store().get(crate::balance::LEADER).await? else {
            return Ok(None);
        };
        let Ok(id) = serde_json::from_slice::<String>(&v.value) else {
            return Ok(None);
        };
        Ok(self.live_brokers().into_iter().find(|b| b.broker_id == id))
    }

    /// The live brokers, by id.
    pub fn live_brokers(&self) -> Vec<BrokerInfo> {
        self.brokers
            .snapshot()
            .entries
            .iter()
            .filter_map(
                |(key, v)| match serde_json::from_slice::<BrokerInfo>(&v.value) {
                    Ok(b) => Some(b),
                    Err(e) => {
                        warn!(key, error = %e, "a broker registration does not decode");
                        None
                    }
                },
            )
            .collect()
    }

    /// Every owned bundle's path and owner (a split's Deleted parent is no
    /// bundle any more).
    pub fn owners(&self) -> Vec<(String, OwnerInfo)> {
        self.owners
            .snapshot()
            .entries
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), serde_json::from_slice(&v.value).ok()?)))
            .filter(|(_, o): &(String, OwnerInfo)| o.state != OwnerState::Deleted)
            .collect()
    }

    /// Wakes on every change of any bundle's ownership record.
    pub fn ownership_changes(
        &self,
    ) -> tokio::sync::watch::Receiver<Arc<strobe_metadata::CacheSnapshot>> {
        self.owners.subscribe()
    }

    /// The owner of a bundle as the cache sees it.
    pub fn owner_of(&self, path: &str) -> Option<OwnerInfo> {
        let snap = self.owners.snapshot();
        let v = snap.entries.get(path)?;
        serde_json::from_slice(&v.value).ok()
    }

    /// Announces a loaded non-persistent topic (`key`: its
    /// `<tenant>/<ns>/non-persistent/<local>`), under this broker's lease.
    pub async fn announce(&self, key: &str) {
        let Some((lease, _)) = self.session.lease() else {
            return;
        };
        let path = format!("{NON_PERSISTENT}/{key}");
        if let Err(e) = self
            .session
            .store()
            .put_ephemeral(
                &path,
                self.broker_id().as_bytes(),
                strobe_metadata::Expect::Any,
                lease,
            )
            .await
        {
            warn!(path, error = %e, "announcing a non-persistent topic failed");
        }
    }

    /// Withdraws [`Cluster::announce`].
    pub async fn retract(&self, key: &str) {
        let path = format!("{NON_PERSISTENT}/{key}");
        match self.session.store().delete(&path, None).await {
            Ok(()) | Err(MetadataError::NotFound(_)) => {}
            Err(e) => warn!(path, error = %e, "withdrawing a non-persistent topic failed"),
        }
    }

    /// The non-persistent topics loaded anywhere in the cluster under
    /// `prefix` (`<tenant>/<ns>/non-persistent/`), as topic keys.
    pub async fn announced(&self, prefix: &str) -> Result<Vec<String>, ClusterError> {
        let root = format!("{NON_PERSISTENT}/");
        Ok(self
            .session
            .store()
            .list_keys(&format!("{root}{prefix}"))
            .await?
            .into_iter()
            .map(|k| k[root.len()..].to_string())
            .collect())
    }

    /// Updates this broker's registration with its load: bundles and topics
    /// when their counts change, the bundles' message rates when they moved
    /// noticeably (at most every [`RATE_REPORT_EVERY`], so a busy broker does
    /// not write to the store each second).
    pub async fn report_load(&self, topics: u32, rates: BTreeMap<String, u64>) {
        let bundles = self.owned_bundles().len() as u32;
        let info = {
            let mut me = self.me.lock();
            let mut reported = self.rates_reported.lock();
            let counts_changed = me.bundles != bundles || me.topics != topics;
            let rates_due = reported.is_none_or(|at| at.elapsed() >= RATE_REPORT_EVERY)
                && balance::rates_moved(&me.bundle_rates, &rates);
            if !counts_changed && !rates_due {
                return;
            }
            me.bundles = bundles;
            me.topics = topics;
            // Written anyway: the rates go along.
            me.bundle_rates = rates;
            *reported = Some(std::time::Instant::now());
            me.clone()
        };
        if let Some(lock) = self.registration.lock().await.as_mut()
            && let Err(e) = lock.update(info).await
        {
            warn!(error = %e, "updating this broker's registration failed");
        }
    }

    pub(crate) fn is_leaving(&self) -> bool {
        self.leaving.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Starts leaving: from now on lookups name other brokers and no bundle
    /// is taken here.
    pub fn begin_leave(&self) {
        self.leaving
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Leaves the cluster: bundles released, registration removed, lease revoked.
    pub async fn leave(&self) {
        self.begin_leave();
        let paths: Vec<String> = self.owned.lock().keys().cloned().collect();
        for p in paths {
            self.release(&p).await;
        }
        if let Some(lock) = self.registration.lock().await.take()
            && let Err(e) = lock.release().await
        {
            warn!(error = %e, "removing this broker's registration failed");
        }
        if let Err(e) = self.session.close().await {
            warn!(error = %e, "closing the metadata session failed");
        }
        info!("left the cluster");
    }

    /// Remembers that connection `conn` named `listener` in a lookup (the C++
    /// client names the same one in every lookup): a handoff then sends its
    /// producers and consumers the destination's URL for that listener.
    pub fn remember_listener(
        &self,
        conn: u64,
        queue: &tokio::sync::mpsc::Sender<strobe_wire::OutFrame>,
        listener: &str,
    ) {
        let mut m = self.conn_listeners.lock();
        if m.by_conn.get(&conn).is_some_and(|(l, _)| &**l == listener) {
            return;
        }
        m.by_conn.insert(conn, (listener.into(), queue.downgrade()));
        if m.by_conn.len() >= m.sweep_at {
            m.by_conn.retain(|_, (_, q)| q.upgrade().is_some());
            m.sweep_at = (m.by_conn.len() * 2).max(64);
        }
    }

    /// The listener connection `conn` named in its lookups, if it did.
    pub fn listener_of(&self, conn: u64) -> Option<Arc<str>> {
        self.conn_listeners
            .lock()
            .by_conn
            .get(&conn)
            .map(|(l, _)| l.clone())
    }

    /// Waits until the session loses its lease; returns the epoch that ended.
    pub async fn lost(&self) -> Option<u64> {
        let mut rx = self.session.subscribe();
        loop {
            if let SessionState::Lost { epoch } = *rx.borrow_and_update() {
                return Some(epoch);
            }
            if matches!(*rx.borrow(), SessionState::Closed) {
                return None;
            }
            rx.changed().await.ok()?;
        }
    }
}

/// Drops the locks of a lost session and registers again under the next one.
async fn follow_session(cluster: std::sync::Weak<Cluster>) {
    let Some(mut rx) = cluster.upgrade().map(|c| c.session.subscribe()) else {
        return;
    };
    let mut current = 0;
    while rx.changed().await.is_ok() {
        let state = *rx.borrow_and_update();
        let Some(c) = cluster.upgrade() else { return };
        match state {
            SessionState::Lost { epoch } => {
                let n = c.owned.lock().drain().count();
                warn!(
                    epoch,
                    bundles = n,
                    "metadata session lost: this broker owns nothing now"
                );
            }
            SessionState::Alive { epoch, .. } if epoch != current => {
                current = epoch;
                c.registration.lock().await.take();
                // The lost lease's registration may outlive it briefly on the
                // server: retry until it is gone or the session changes again.
                loop {
                    match c.register().await {
                        Ok(()) => break,
                        Err(e) => {
                            warn!(error = %e, "registering again after the session came back failed; retrying");
                            if !c.session.is_alive_in(epoch) {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
            }
            SessionState::Closed => return,
            SessionState::Alive { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::bundle_path;
    use crate::testing::pair;

    #[tokio::test]
    async fn one_owner_per_bundle_and_ownership_goes_with_the_session() {
        let (a, b) = pair().await;
        let path = bundle_path("public/default", "0x00000000_0x40000000");
        let fa = a.acquire(&path).await.unwrap();
        assert_eq!(a.acquire(&path).await.unwrap(), fa, "holding is idempotent");
        match b.acquire(&path).await {
            Err(ClusterError::NotReady(m)) => assert!(m.contains("owned by a"), "{m}"),
            other => panic!("expected ServiceNotReady, got {other:?}"),
        }
        // Both see a as the owner; a lookup through b sends the client to a.
        let wait = |c: &Arc<Cluster>| {
            let c = c.clone();
            let path = path.clone();
            async move {
                for _ in 0..100 {
                    if c.owner_of(&path).is_some() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("the owner never showed in the cache");
            }
        };
        wait(&b).await;
        let p = b.place(&path).await.unwrap();
        assert_eq!(p.owner.broker_id, "a");
        assert!(!p.local);
        // a leaves: b can take the bundle, with a higher fencing token.
        a.leave().await;
        let fb = b.acquire(&path).await.unwrap();
        assert!(fb > fa, "{fb} > {fa}");
        assert_eq!(b.owned_bundles(), vec![path.clone()]);
        b.leave().await;
    }
}
