//! A cluster broker's membership and bundle ownership (Pulsar's
//! `BrokerRegistry`, `OwnershipCache` and the lookup half of
//! `NamespaceService`).
//!
//! - **Membership.** A broker registers `/loadbalance/brokers/<id>` under its
//!   session's lease, with its URLs and load. The key vanishes when the lease
//!   expires (the broker died or lost etcd), so the set of keys *is* the set of
//!   live brokers. Every broker follows it through one watch.
//! - **Ownership.** A bundle's owner holds `/namespace/<tenant>/<ns>/<range>`
//!   (Pulsar's path) as an ephemeral lock under its lease: at most one owner,
//!   and none once the owner's lease is gone. The lock's version (its store
//!   revision) is the *fencing token* of every ledger the owner opens in that
//!   bundle: a later owner always has a higher one, so shared storage refuses a
//!   stale writer (see `strobe_ledger`'s object backend).
//! - **Assignment.** A lookup of an unowned bundle names the least loaded
//!   live broker (fewest owned bundles; ties broken by a hash of bundle and
//!   broker, so brokers agree). If that is this broker it takes the lock at
//!   once; otherwise the client connects there and that broker takes it when
//!   the topic is first used. Two brokers racing for one bundle: one lock wins,
//!   the other refuses the topic with `ServiceNotReady` and the client looks up
//!   again.
//! - **Loss.** When the session is lost every lock goes with it: the broker
//!   closes all its topics (clients look up again) and, once the session has a
//!   new lease, registers again and owns nothing until assigned.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use strobe_metadata::{
    MetadataError, MetadataStore, PrefixCache, ResourceLock, Session, SessionOptions, SessionState,
};
use tracing::{info, warn};

use crate::BrokerError;
use crate::config::AdvertisedListener;

pub mod balance;
mod ownership;
mod split;
pub mod state;

pub use state::OwnerState;

/// The most often a broker rewrites its bundles' rates in its registration.
pub const RATE_REPORT_EVERY: Duration = Duration::from_secs(5);

/// Where the live brokers register.
pub const BROKERS: &str = "/loadbalance/brokers";
/// Where bundle owners hold their locks.
pub const OWNERSHIP: &str = "/namespace";
/// Where brokers announce the non-persistent topics they have loaded (these
/// exist only while loaded, so a namespace's list asks the store).
pub const NON_PERSISTENT: &str = "/loadbalance/non-persistent";

/// What a broker publishes of itself (Pulsar's `BrokerLookupData`, trimmed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerInfo {
    pub broker_id: String,
    pub service_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_url_tls: Option<String>,
    pub web_service_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_service_url_tls: Option<String>,
    /// Its named addresses (`advertised_listeners`); `service_url` is the internal one's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advertised_listeners: Vec<AdvertisedListener>,
    /// Bundles owned when the registration was last written.
    #[serde(default)]
    pub bundles: u32,
    /// Topics loaded when the registration was last written.
    #[serde(default)]
    pub topics: u32,
    /// Messages per second in and out of each owned bundle's topics (by
    /// bundle path), as last reported: the load the load manager balances.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bundle_rates: BTreeMap<String, u64>,
}

/// A broker as an ownership record names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerRef {
    pub broker_id: String,
    pub service_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_url_tls: Option<String>,
    pub web_service_url: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advertised_listeners: Vec<AdvertisedListener>,
}

impl From<&BrokerInfo> for BrokerRef {
    fn from(b: &BrokerInfo) -> BrokerRef {
        BrokerRef {
            broker_id: b.broker_id.clone(),
            service_url: b.service_url.clone(),
            service_url_tls: b.service_url_tls.clone(),
            web_service_url: b.web_service_url.clone(),
            advertised_listeners: b.advertised_listeners.clone(),
        }
    }
}

impl BrokerRef {
    /// The broker's binary URLs (plain, TLS) for a client that named
    /// `listener` (`None`: the internal ones). A name the broker does not
    /// advertise is refused as Pulsar refuses it.
    pub fn urls_for(
        &self,
        listener: Option<&str>,
    ) -> Result<(String, Option<String>), BrokerError> {
        listener_urls(
            &self.advertised_listeners,
            listener,
            (&self.service_url, self.service_url_tls.as_deref()),
        )
    }
}

/// `listener`'s URLs among `listeners`, or `default` when `listener` is `None`.
pub fn listener_urls(
    listeners: &[AdvertisedListener],
    listener: Option<&str>,
    default: (&str, Option<&str>),
) -> Result<(String, Option<String>), BrokerError> {
    let Some(name) = listener else {
        return Ok((default.0.to_string(), default.1.map(str::to_string)));
    };
    match listeners.iter().find(|l| l.name == name) {
        // A TLS-only listener answers its TLS URL in both fields, as Pulsar does.
        Some(l) => Ok((
            l.broker_service_url
                .clone()
                .or_else(|| l.broker_service_url_tls.clone())
                .unwrap_or_default(),
            l.broker_service_url_tls.clone(),
        )),
        None => Err(BrokerError::ServiceNotReady(format!(
            "the broker do not have {name} listener (advertised listeners: {})",
            if listeners.is_empty() {
                "none".to_string()
            } else {
                listeners
                    .iter()
                    .map(|l| l.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ))),
    }
}

/// A bundle's ownership record (Pulsar's `ServiceUnitStateData`): who holds
/// it, in which state, and during a transfer where it goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerInfo {
    #[serde(flatten)]
    pub broker: BrokerRef,
    #[serde(default)]
    pub state: OwnerState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<BrokerRef>,
}

impl OwnerInfo {
    pub fn owned_by(b: &BrokerInfo) -> OwnerInfo {
        OwnerInfo {
            broker: BrokerRef::from(b),
            state: OwnerState::Owned,
            dst: None,
        }
    }

    /// The broker clients should go to: the destination while moving.
    pub fn serving(&self) -> &BrokerRef {
        match (&self.state, &self.dst) {
            (OwnerState::Releasing | OwnerState::Assigning, Some(d)) => d,
            _ => &self.broker,
        }
    }
}

/// Where a lookup sends a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub owner: BrokerRef,
    /// This broker owns the bundle (or was just assigned it, or it is moving here).
    pub local: bool,
}

/// The path of a bundle's ownership lock.
pub fn bundle_path(namespace: &str, bundle: &str) -> String {
    format!("{OWNERSHIP}/{namespace}/{bundle}")
}

/// The namespace and bundle of an ownership lock's path.
pub fn parse_bundle_path(path: &str) -> Option<(&str, &str)> {
    path.strip_prefix(OWNERSHIP)?
        .strip_prefix('/')?
        .rsplit_once('/')
}

/// Picks the broker for an unowned bundle: the fewest owned bundles, ties
/// broken by a hash of (bundle, broker id) so every broker picks the same one
/// and equal brokers split the bundles between them. Pure, for tests.
pub fn pick_broker<'a>(
    bundle: &str,
    brokers: &'a [BrokerInfo],
    owned: &HashMap<String, u32>,
) -> Option<&'a BrokerInfo> {
    brokers.iter().min_by_key(|b| {
        let load = owned.get(&b.broker_id).copied().unwrap_or(0);
        let tiebreak = crc32fast::hash(format!("{bundle}|{}", b.broker_id).as_bytes());
        (load, tiebreak)
    })
}

/// This broker's membership and the bundles it owns.
pub struct Cluster {
    me: Mutex<BrokerInfo>,
    session: Arc<Session>,
    brokers: PrefixCache,
    owners: PrefixCache,
    /// The load manager's move requests, followed by watch.
    requests: PrefixCache,
    /// The ownership records this broker holds, by path.
    owned: Mutex<HashMap<String, ownership::Held>>,
    /// Serialises acquisitions of one bundle on this broker.
    acquiring: tokio::sync::Mutex<()>,
    registration: tokio::sync::Mutex<Option<ResourceLock<BrokerInfo>>>,
    /// Set when the broker starts shutting down: lookups send clients to the
    /// other brokers while this one closes its topics and releases them.
    leaving: std::sync::atomic::AtomicBool,
    /// When the bundle rates were last written to the registration.
    rates_reported: Mutex<Option<std::time::Instant>>,
    /// The advertised listener each connection's lookups named, by
    /// connection id, so a handoff tells its clients the destination's URL
    /// on their network (see [`Cluster::remember_listener`]).
    conn_listeners: Mutex<ConnListeners>,
}

/// Connection id → listener name, with the connection's queue held weakly
/// so that entries of closed connections can be dropped.
#[derive(Default)]
struct ConnListeners {
    by_conn: HashMap<
        u64,
        (
            Arc<str>,
            tokio::sync::mpsc::WeakSender<strobe_wire::OutFrame>,
        ),
    >,
    /// Size at which closed connections are swept next.
    sweep_at: usize,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("broker_id", &self.me.lock().broker_id)
            .field("owned", &self.owned.lock().len())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Starts a session on `store`, registers `me` and follows the brokers
    /// and owners. A registration left by an earlier run of this broker id
    /// (killed before its lease expired) is waited out, up to twice the TTL.
    pub async fn join(
        store: Arc<dyn MetadataStore>,
        session: SessionOptions,
        me: BrokerInfo,
    ) -> Result<Arc<Cluster>, BrokerError> {
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
        });
        let deadline = tokio::time::Instant::now() + ttl * 2;
        loop {
            match cluster.register().await {
                Ok(()) => break,
                Err(BrokerError::Metadata(MetadataError::LockBusy(path)))
                    if tokio::time::Instant::now() < deadline =>
                {
                    info!(
                        path,
                        "an earlier registration of this broker id is still alive; waiting for its lease to expire"
                    );
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(BrokerError::Metadata(MetadataError::LockBusy(path))) => {
                    return Err(BrokerError::Config(format!(
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

    async fn register(&self) -> Result<(), BrokerError> {
        let me = self.me();
        let path = format!("{BROKERS}/{}", me.broker_id);
        let lock = ResourceLock::acquire(&self.session, &path, me).await?;
        info!(path, "registered");
        *self.registration.lock().await = Some(lock);
        Ok(())
    }

    /// The fencing token of what this broker writes outside any bundle (its
    /// health-check ledger): its registration's version.
    pub async fn registration_fence(&self) -> Result<u64, BrokerError> {
        match &*self.registration.lock().await {
            Some(l) if l.is_held() => Ok(l.version()),
            _ => Err(BrokerError::ServiceNotReady(
                "this broker is not registered in the cluster (its metadata session was lost)"
                    .into(),
            )),
        }
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
    pub async fn announced(&self, prefix: &str) -> Result<Vec<String>, BrokerError> {
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

    /// Starts the load manager (see [`balance`]): this broker campaigns for
    /// its leadership and, while leading, moves bundles off the most loaded
    /// broker every `interval` when it owns more than `threshold` bundles
    /// beyond the least loaded.
    pub fn start_load_manager(self: &Arc<Self>, interval: Duration, threshold: usize) {
        tokio::spawn(balance::run(Arc::downgrade(self), interval, threshold));
    }

    fn is_leaving(&self) -> bool {
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

    pub(super) fn broker(id: &str) -> BrokerInfo {
        BrokerInfo {
            broker_id: id.into(),
            service_url: format!("pulsar://{id}"),
            service_url_tls: None,
            web_service_url: format!("http://{id}"),
            web_service_url_tls: None,
            advertised_listeners: Vec::new(),
            bundles: 0,
            topics: 0,
            bundle_rates: BTreeMap::new(),
        }
    }

    #[test]
    fn listeners_are_chosen_by_name_and_old_records_still_decode() {
        let mut b = broker("a");
        b.advertised_listeners = crate::config::parse_advertised_listeners(
            "internal:pulsar://a:6650,external:pulsar://h:7000",
        )
        .unwrap();
        let r = BrokerRef::from(&b);
        assert_eq!(r.urls_for(None).unwrap().0, "pulsar://a");
        assert_eq!(r.urls_for(Some("external")).unwrap().0, "pulsar://h:7000");
        let err = r.urls_for(Some("nope")).unwrap_err().to_string();
        assert!(err.contains("do not have nope listener"), "{err}");
        // Registrations and ownership records written before listeners existed.
        let old = r#"{"brokerId":"a","serviceUrl":"pulsar://a","webServiceUrl":"http://a"}"#;
        let info: BrokerInfo = serde_json::from_str(old).unwrap();
        assert!(info.advertised_listeners.is_empty());
        let owner: OwnerInfo = serde_json::from_str(old).unwrap();
        assert!(owner.broker.advertised_listeners.is_empty());
        // And a record with listeners round-trips.
        let json = serde_json::to_string(&OwnerInfo::owned_by(&b)).unwrap();
        let back: OwnerInfo = serde_json::from_str(&json).unwrap();
        assert_eq!(back.broker, r);
    }

    #[test]
    fn the_least_loaded_broker_is_picked_and_ties_spread() {
        let bs = vec![broker("a"), broker("b"), broker("c")];
        let mut load = HashMap::new();
        load.insert("a".to_string(), 3);
        load.insert("b".to_string(), 1);
        load.insert("c".to_string(), 2);
        assert_eq!(
            pick_broker("/namespace/t/n/0x0_0x1", &bs, &load)
                .unwrap()
                .broker_id,
            "b"
        );
        // With equal loads, different bundles go to different brokers, and
        // every caller picks the same broker for one bundle.
        let none = HashMap::new();
        let picks: std::collections::BTreeSet<String> = (0..16)
            .map(|i| {
                pick_broker(&format!("/namespace/t/n/{i}"), &bs, &none)
                    .unwrap()
                    .broker_id
                    .clone()
            })
            .collect();
        assert!(picks.len() >= 2, "{picks:?}");
        let again = pick_broker("/namespace/t/n/7", &bs, &none).unwrap();
        assert_eq!(again, pick_broker("/namespace/t/n/7", &bs, &none).unwrap());
        assert!(pick_broker("x", &[], &none).is_none());
    }

    /// Brokers "a" and "b" joined to one in-memory store.
    pub(super) async fn pair() -> (Arc<Cluster>, Arc<Cluster>) {
        let store: Arc<dyn MetadataStore> = Arc::new(strobe_metadata::EmbeddedStore::in_memory());
        // Taking a bundle checks the namespace's boundaries in the store.
        for ns in ["public/default", "t/n"] {
            store
                .put(
                    &crate::resources::paths::namespace(ns),
                    b"{}",
                    strobe_metadata::Expect::Absent,
                )
                .await
                .unwrap();
        }
        let opts = SessionOptions::with_ttl(Duration::from_secs(5));
        let a = Cluster::join(store.clone(), opts.clone(), broker("a"))
            .await
            .unwrap();
        let b = Cluster::join(store, opts, broker("b")).await.unwrap();
        (a, b)
    }

    #[tokio::test]
    async fn one_owner_per_bundle_and_ownership_goes_with_the_session() {
        let (a, b) = pair().await;
        let path = bundle_path("public/default", "0x00000000_0x40000000");
        let fa = a.acquire(&path).await.unwrap();
        assert_eq!(a.acquire(&path).await.unwrap(), fa, "holding is idempotent");
        match b.acquire(&path).await {
            Err(BrokerError::ServiceNotReady(m)) => assert!(m.contains("owned by a"), "{m}"),
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
