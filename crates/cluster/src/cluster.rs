//! [`Cluster`]: one broker's handle on the cluster, the state its parts
//! share: its registration and session, the watch-fed caches of brokers,
//! owners and move requests, and the bundles it holds. What it does is in
//! the files beside this one: `membership` (joining, the registry, leaving),
//! `ownership` (taking, serving and moving bundles), `split` and
//! `load_manager`.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use strobe_metadata::{PrefixCache, ResourceLock, Session};

use crate::registry::{BrokerInfo, Held};

/// This broker's membership and the bundles it owns.
pub struct Cluster {
    pub(crate) me: Mutex<BrokerInfo>,
    pub(crate) session: Arc<Session>,
    pub(crate) brokers: PrefixCache,
    pub(crate) owners: PrefixCache,
    /// The load manager's move requests, followed by watch.
    pub(crate) requests: PrefixCache,
    /// The ownership records this broker holds, by path.
    pub(crate) owned: Mutex<HashMap<String, Held>>,
    /// Serialises acquisitions of one bundle on this broker.
    pub(crate) acquiring: tokio::sync::Mutex<()>,
    pub(crate) registration: tokio::sync::Mutex<Option<ResourceLock<BrokerInfo>>>,
    /// Set when the broker starts shutting down: lookups send clients to the
    /// other brokers while this one closes its topics and releases them.
    pub(crate) leaving: std::sync::atomic::AtomicBool,
    /// When the bundle rates were last written to the registration.
    pub(crate) rates_reported: Mutex<Option<std::time::Instant>>,
    /// The advertised listener each connection's lookups named, by
    /// connection id, so a handoff tells its clients the destination's URL
    /// on their network (see [`Cluster::remember_listener`]).
    pub(crate) conn_listeners: Mutex<ConnListeners>,
    /// Free bundles this broker sent clients to another broker for, not yet taken there:
    /// the broker picked and when (see `Cluster::place`).
    pub(crate) picks: Mutex<HashMap<String, (String, std::time::Instant)>>,
    /// The broker's topic loads running and waiting (see [`Cluster::set_topic_loads`]).
    pub(crate) topic_loads: Mutex<Option<TopicLoads>>,
}

/// Counts the topic loads a broker has running and waiting.
pub type TopicLoads = std::sync::Arc<dyn Fn() -> usize + Send + Sync>;

/// Connection id → listener name, with the connection's queue held weakly
/// so that entries of closed connections can be dropped.
#[derive(Default)]
pub(crate) struct ConnListeners {
    pub(crate) by_conn: HashMap<
        u64,
        (
            Arc<str>,
            tokio::sync::mpsc::WeakSender<strobe_wire::OutFrame>,
        ),
    >,
    /// Size at which closed connections are swept next.
    pub(crate) sweep_at: usize,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("broker_id", &self.me.lock().broker_id)
            .field("owned", &self.owned.lock().len())
            .finish_non_exhaustive()
    }
}
