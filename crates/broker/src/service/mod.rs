//! Pulsar's `BrokerService`: the topics this broker has loaded, loading them
//! (concurrently, one load per topic name at a time), and the broker-wide
//! services a connection or the admin API reaches through it (security,
//! schemas, the metadata documents in [`Resources`]).
//!
//! The rest of the service is split by what it administers: namespaces and
//! tenants ([`namespaces`]), topics and partitioned topics ([`topics`]),
//! compaction runs ([`compaction`]) and the periodic work ([`background`]).

mod background;
mod compaction;
mod controller_slots;
pub mod controllers;
pub mod coordinator;
mod counters;
pub mod disk;
mod disk_guard;
pub(crate) mod keyed;
pub mod lookup;
mod namespaces;
mod ns_bundles;
pub mod segments;
mod tenancy;
mod topics;
mod transfer;
mod walks;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use strobe_ledger::{LedgerBackend, LedgerConfig};
use strobe_metadata::MetadataStore;
use strobe_model::{Domain, TopicName};
use tracing::info;

use crate::BrokerError;
use crate::config::BrokerConfig;
use crate::schemas::SchemaRegistry;
use crate::security::Operation;
use crate::topic::{DispatchSettings, Topic};
use strobe_cluster::Cluster;
use strobe_resources::Resources;
use strobe_resources::policies::NamespacePolicies;

pub use counters::ClusterCounters;

/// The broker's topics and namespaces.
pub struct BrokerService {
    pub config: BrokerConfig,
    /// Authentication providers, authorizer and TLS configuration.
    pub security: crate::security::Security,
    /// The schema registry (Pulsar's `SchemaRegistryService`).
    pub schemas: SchemaRegistry,
    /// The port clients reach the binary protocol on.
    pub broker_port: u16,
    /// Every metadata document the broker reads or writes.
    pub resources: Arc<Resources>,
    backend: Arc<dyn LedgerBackend>,
    ledger_config: LedgerConfig,
    /// Loaded topics. Loads happen outside this lock, under the topic name's
    /// entry in `topic_locks`.
    topics: Mutex<HashMap<String, Arc<Topic>>>,
    /// One lock per topic name being loaded, unloaded or deleted: a topic is
    /// opened once, and other topics load meanwhile.
    topic_locks: keyed::KeyedLocks,
    /// The ledger the health check writes to (opened on first use).
    health: tokio::sync::OnceCell<strobe_ledger::ManagedLedger>,
    /// Storage of non-persistent topics: memory, trimmed as it rolls over.
    non_persistent: strobe_ledger::MemoryBackend,
    next_producer: AtomicU64,
    next_conn: AtomicU64,
    /// The fencing token of the next ledger open: every open of a topic's
    /// log carries a higher one than the opens before it, so storage refuses
    /// a stale opener (see [`LedgerConfig::fence`]). A cluster broker uses
    /// its bundle locks' versions instead (see [`crate::cluster`]).
    next_fence: AtomicU64,
    /// Membership and bundle ownership, for a cluster broker.
    cluster: Option<Arc<Cluster>>,
    /// Lookups served and bundles moved, for `/metrics`.
    pub cluster_counters: ClusterCounters,
    /// Transactions, once started (see [`crate::txn`]).
    txn: std::sync::OnceLock<Arc<crate::txn::TxnService>>,
    /// This service itself, for the tasks and handles it gives out (the
    /// controllers' segment operations) without owning itself.
    me: std::sync::Weak<BrokerService>,
    /// The scalable topics' controllers this broker takes part in.
    controllers: controller_slots::Controllers,
    /// Subscriptions already recorded as having drained each terminated
    /// segment loaded here (see `segments::mark_drained_segments`).
    drained_marked: Mutex<HashMap<String, std::collections::BTreeSet<String>>>,
    /// The load last recorded for each active segment loaded here.
    load_reported: Mutex<HashMap<String, strobe_layout::SegmentLoad>>,
    /// Whether the data directory's disk is too full to take writes (see `disk`).
    pub disk: disk::DiskState,
    /// Permits for topic loads running at once (`max_concurrent_topic_load_request`).
    topic_loads: tokio::sync::Semaphore,
    /// Topic loads waiting for a permit now.
    topic_loads_waiting: AtomicU64,
    /// Each namespace's bundles, parsed, while its policies stay as they
    /// were (see `ns_bundles`).
    ns_bundles: Mutex<HashMap<String, Arc<ns_bundles::NsBundles>>>,
    /// When the once-a-second walks over every loaded topic may be skipped.
    walks: walks::Walks,
}

impl std::fmt::Debug for BrokerService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerService")
            .field("storage", &self.backend.kind())
            .field("metadata", &self.resources.store().backend_name())
            .finish()
    }
}

impl BrokerService {
    /// Opens the service on its storage and metadata, creating the `public`
    /// tenant and `public/default` namespace on the first start.
    pub async fn open(
        config: BrokerConfig,
        broker_port: u16,
        backend: Arc<dyn LedgerBackend>,
        metadata: Arc<dyn MetadataStore>,
        cluster: Option<Arc<Cluster>>,
    ) -> Result<Arc<BrokerService>, BrokerError> {
        let ledger_config = LedgerConfig {
            max_entry_bytes: config.max_message_size + strobe_wire::FRAME_PADDING,
            ..LedgerConfig::default()
        };
        let security = crate::security::Security::from_config(&config)?;
        let resources = Arc::new(Resources::load(metadata).await?);
        let service = Arc::new_cyclic(|me| BrokerService {
            me: me.clone(),
            controllers: controller_slots::Controllers::default(),
            drained_marked: Mutex::new(HashMap::new()),
            load_reported: Mutex::new(HashMap::new()),
            disk: disk::DiskState::default(),
            topic_loads: tokio::sync::Semaphore::new(config.max_concurrent_topic_load_request),
            topic_loads_waiting: AtomicU64::new(0),
            ns_bundles: Mutex::new(HashMap::new()),
            walks: walks::Walks::default(),
            security,
            schemas: SchemaRegistry::new(resources.clone()),
            resources,
            config,
            broker_port,
            backend,
            ledger_config,
            topics: Mutex::new(HashMap::new()),
            topic_locks: keyed::KeyedLocks::default(),
            non_persistent: strobe_ledger::MemoryBackend::new(),
            health: tokio::sync::OnceCell::new(),
            next_producer: AtomicU64::new(0),
            next_conn: AtomicU64::new(0),
            next_fence: AtomicU64::new(1),
            cluster,
            cluster_counters: ClusterCounters::default(),
            txn: std::sync::OnceLock::new(),
        });
        if let Some(c) = service.cluster() {
            // Bundles moving here are taken as the loads of those before settle.
            let me = Arc::downgrade(&service);
            c.set_topic_loads(Arc::new(move || {
                me.upgrade().map_or(0, |s| {
                    let (running, waiting) = s.topic_loads();
                    running + waiting as usize
                })
            }));
        }
        Ok(service)
    }

    /// The broker's ledger configuration with fencing token `fence`.
    fn fenced_ledger_config(&self, fence: u64) -> LedgerConfig {
        LedgerConfig {
            fence,
            ..self.ledger_config.clone()
        }
    }

    /// The transaction services, when `transaction_coordinator_enabled`.
    pub fn txn(&self) -> Option<&Arc<crate::txn::TxnService>> {
        self.txn.get()
    }

    pub(crate) fn set_txn(&self, txn: Arc<crate::txn::TxnService>) {
        let _ = self.txn.set(txn);
    }

    /// The metadata store.
    pub fn metadata(&self) -> &Arc<dyn MetadataStore> {
        self.resources.store()
    }

    /// A cluster broker's membership and ownership; `None` in standalone.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    /// The path of the ownership lock of `topic`'s bundle.
    pub fn bundle_path(&self, topic: &TopicName) -> Result<String, BrokerError> {
        let b = self.ns_bundles(topic.namespace())?;
        Ok(b.path_of(topic).to_string())
    }

    /// Calls `f` with every loaded topic and the path of its bundle (None:
    /// its namespace or its boundaries are gone), under the lock of the
    /// loaded topics: `f` must not wait or take that lock. Runs twice a
    /// second in a cluster broker; placing each topic with boundaries
    /// parsed anew, and copying the list of topics first, were a tenth of a
    /// broker's CPU while it reloaded a lost broker's topics (issue 47).
    pub(crate) fn for_each_loaded_with_bundle(
        &self,
        mut f: impl FnMut(&Arc<Topic>, Option<(&Arc<ns_bundles::NsBundles>, usize)>),
    ) {
        let mut by_ns: HashMap<String, Option<Arc<ns_bundles::NsBundles>>> = HashMap::new();
        // Topics of one namespace mostly follow each other.
        let mut last: Option<(String, Option<Arc<ns_bundles::NsBundles>>)> = None;
        let topics = self.topics.lock();
        for t in topics.values() {
            let ns = t.name.namespace();
            if last.as_ref().is_none_or(|(n, _)| n != ns) {
                let b = by_ns
                    .entry(ns.to_string())
                    .or_insert_with(|| self.ns_bundles(ns).ok())
                    .clone();
                last = Some((ns.to_string(), b));
            }
            let at = last
                .as_ref()
                .and_then(|(_, b)| b.as_ref())
                .map(|b| (b, b.index.position_of(&t.name)));
            f(t, at);
        }
    }

    /// The fencing token for opening `topic`'s storage: standalone, a fresh
    /// one per open; in a cluster, the version of this broker's lock on the
    /// topic's bundle, taken now if the bundle is free (refused with
    /// `ServiceNotReady` when another broker owns it).
    async fn fence_for(&self, topic: &TopicName) -> Result<u64, BrokerError> {
        match &self.cluster {
            None => Ok(self.next_fence.fetch_add(1, Ordering::Relaxed)),
            Some(c) => Ok(c.acquire(&self.bundle_path(topic)?).await?),
        }
    }

    /// A token for storage this broker alone writes (its health check).
    async fn own_fence(&self) -> Result<u64, BrokerError> {
        match &self.cluster {
            None => Ok(self.next_fence.fetch_add(1, Ordering::Relaxed)),
            Some(c) => Ok(c.registration_fence().await?),
        }
    }

    pub fn next_conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// A unique producer name, as Pulsar generates them: `<cluster>-<n>`.
    pub fn generate_producer_name(&self) -> String {
        let n = self.next_producer.fetch_add(1, Ordering::Relaxed);
        format!("{}-{}-{n}", self.config.cluster_name, self.broker_port)
    }

    pub fn service_url(&self) -> String {
        self.config.broker_service_url(self.broker_port)
    }

    /// `pulsar+ssl://…` when the TLS listener is on.
    pub fn service_url_tls(&self) -> Option<String> {
        self.config
            .broker_service_url_tls(self.config.broker_port_tls)
    }

    /// Whether `role` may do `op`; a refusal is AuthorizationError (403 on HTTP).
    pub async fn authorize(
        &self,
        role: Option<&str>,
        op: Operation<'_>,
    ) -> Result<(), BrokerError> {
        self.security.authorize(&self.resources, role, op).await
    }

    pub fn namespace_exists(&self, ns: &str) -> bool {
        self.resources.namespace_exists(ns)
    }

    pub fn namespace_policies(&self, ns: &str) -> Option<NamespacePolicies> {
        self.resources.namespace_policies(ns)
    }

    /// Pulsar's broker health check, for real: the metadata store takes a
    /// write, and storage takes an entry and gives it back. Returns how long it took.
    pub async fn health_check(&self) -> Result<std::time::Duration, BrokerError> {
        let started = std::time::Instant::now();
        let stamp = format!(
            "{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0)
        );
        self.resources
            .touch_health(self.broker_port, &stamp)
            .await?;
        let ledger = self
            .health
            .get_or_try_init(|| async {
                let config = LedgerConfig {
                    max_entries_per_ledger: 100,
                    trim_interval: Some(std::time::Duration::from_secs(60)),
                    ..self.fenced_ledger_config(self.own_fence().await?)
                };
                // Brokers of a cluster share storage: each checks its own ledger.
                let name = match &self.cluster {
                    None => "__health/check".to_string(),
                    Some(c) => format!("__health/{}", c.broker_id().replace(['/', ':'], "_")),
                };
                Ok::<_, BrokerError>(
                    strobe_ledger::ManagedLedger::open(self.backend.as_ref(), &name, config)
                        .await?,
                )
            })
            .await?;
        let p = ledger.append(bytes::Bytes::from(stamp.clone())).await?;
        let back = ledger.read(p, 1).await?;
        match back.first() {
            Some(e) if e.position == p && e.data == stamp.as_bytes() => Ok(started.elapsed()),
            _ => Err(BrokerError::Persistence(
                "the health-check entry did not read back".into(),
            )),
        }
    }

    /// The storage engine's own figures, for metrics (none on the memory backend).
    pub fn storage_engine_stats(&self) -> Vec<strobe_ledger::EngineMetric> {
        self.backend.engine_stats()
    }

    /// Stops the storage backend once every topic is closed (see [`Self::shutdown`]).
    pub fn close_storage(&self) -> Result<(), strobe_ledger::LedgerError> {
        self.backend.close()
    }

    /// Every loaded topic.
    pub fn loaded_topics(&self) -> Vec<Arc<Topic>> {
        self.topics.lock().values().cloned().collect()
    }

    /// How many topics are loaded.
    pub fn loaded_topic_count(&self) -> usize {
        self.topics.lock().len()
    }

    /// A loaded topic, without loading it.
    pub fn loaded_topic(&self, name: &TopicName) -> Option<Arc<Topic>> {
        self.topics.lock().get(&name.to_string()).cloned()
    }

    /// The loaded topics of a namespace.
    fn loaded_topics_of(&self, ns: &str) -> Vec<Arc<Topic>> {
        self.topics
            .lock()
            .values()
            .filter(|t| t.name.namespace() == ns)
            .cloned()
            .collect()
    }

    fn dispatch_settings(&self) -> DispatchSettings {
        DispatchSettings {
            max_read_entries: self.config.dispatcher_max_read_batch,
            max_unacked_messages: self.config.max_unacked_messages_per_consumer,
            key_shared_consistent_hashing: self.config.key_shared_use_consistent_hashing,
            dispatch_throttling_on_batch_messages: self
                .config
                .dispatch_throttling_on_batch_message_enabled,
        }
    }

    /// The loaded topic, loading (and with `create`, creating) it if needed.
    /// Loads of different topics run concurrently; callers asking for a topic
    /// that is loading wait for that one load.
    pub async fn topic(&self, name: &TopicName, create: bool) -> Result<Arc<Topic>, BrokerError> {
        self.load_topic(name, create, false).await
    }

    /// A segment's topic, created if missing whatever the layout says: its
    /// controller makes a resize's new segments before the layout lists them.
    pub(crate) async fn segment_topic_for_controller(
        &self,
        name: &TopicName,
    ) -> Result<Arc<Topic>, BrokerError> {
        self.load_topic(name, true, true).await
    }

    async fn load_topic(
        &self,
        name: &TopicName,
        create: bool,
        by_controller: bool,
    ) -> Result<Arc<Topic>, BrokerError> {
        if !self.namespace_exists(name.namespace()) {
            return Err(BrokerError::TopicNotFound(format!(
                "namespace {} does not exist",
                name.namespace()
            )));
        }
        let create = match name.domain() {
            Domain::Topic => {
                return Err(BrokerError::NotAllowed(format!(
                    "{name} is a scalable topic: clients produce to and consume from its segments, found with SCALABLE_TOPIC_LOOKUP (a V5 client)"
                )));
            }
            Domain::Segment => create && (by_controller || self.segment_is_active(name).await?),
            Domain::Persistent | Domain::NonPersistent => create,
        };
        if name.is_persistent()
            && name.partition().is_none()
            && self.resources.partitions(name).is_some()
        {
            return Err(BrokerError::NotAllowed(format!(
                "{name} is a partitioned topic: produce to and consume from its partitions"
            )));
        }
        let key = name.to_string();
        if self.cluster.is_none()
            && let Some(t) = self.topics.lock().get(&key)
        {
            return Ok(t.clone());
        }
        let fence = match &self.cluster {
            None => None,
            Some(_) => Some(self.fence_for(name).await?),
        };
        if let Some(t) = self.current(&key, fence) {
            return Ok(t);
        }
        let _loading = self.topic_locks.lock(&key).await;
        if let Some(t) = self.current(&key, fence) {
            return Ok(t);
        }
        let stale = self.topics.lock().remove(&key);
        if let Some(stale) = stale {
            // Loaded under a bundle lock this broker no longer holds, or its
            // log was sealed by another broker: its clients start over.
            info!(topic = %name, "closing a topic loaded under a lost ownership");
            stale.close().await;
        }
        // Bounded: a broker taking over a lost broker's bundles gets requests for
        // all their topics at once (Pulsar: maxConcurrentTopicLoadRequest).
        let _permit = self.load_permit().await?;
        let fence = match fence {
            Some(f) => f,
            None => self.fence_for(name).await?,
        };
        let started = std::time::Instant::now();
        let loaded = if name.is_persistent() {
            self.load_persistent(name, create, fence).await
        } else {
            self.load_non_persistent(name, create, fence).await
        };
        let topic = match loaded {
            Ok(t) => t,
            Err(e) => {
                crate::accept::log_load_failure(name, &e);
                return Err(e);
            }
        };
        // The bundle may have moved while the topic loaded (a transfer's
        // snapshot of the loaded topics missed this one): served under its
        // old token, its consumers would wait for entries another broker
        // writes. Checked and inserted with no wait between, so a transfer
        // starting after the check finds the topic in the map.
        if let Some(c) = &self.cluster
            && c.holds(&self.bundle_path(name)?) != Some(fence)
        {
            topic.close().await;
            return Err(BrokerError::ServiceNotReady(format!(
                "the bundle of {name} moved while the topic loaded; look it up again"
            )));
        }
        self.topics.lock().insert(key, topic.clone());
        info!(topic = %name, fence, load_ms = started.elapsed().as_millis() as u64, "topic loaded");
        Ok(topic)
    }

    /// A permit to load a topic, waiting while `max_concurrent_topic_load_request` loads run.
    async fn load_permit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, BrokerError> {
        if let Ok(p) = self.topic_loads.try_acquire() {
            return Ok(p);
        }
        self.topic_loads_waiting.fetch_add(1, Ordering::Relaxed);
        let p = self.topic_loads.acquire().await;
        self.topic_loads_waiting.fetch_sub(1, Ordering::Relaxed);
        p.map_err(|_| BrokerError::ServiceNotReady("the broker is shutting down".into()))
    }

    /// Topic loads running now and waiting for their turn.
    pub fn topic_loads(&self) -> (usize, u64) {
        (
            self.config.max_concurrent_topic_load_request - self.topic_loads.available_permits(),
            self.topic_loads_waiting.load(Ordering::Relaxed),
        )
    }

    /// The loaded topic `key` if it may still serve: in a cluster, loaded
    /// under the current bundle lock (`fence`) and not fenced out of its log.
    fn current(&self, key: &str, fence: Option<u64>) -> Option<Arc<Topic>> {
        let t = self.topics.lock().get(key).cloned()?;
        match fence {
            None => Some(t),
            Some(f) if t.ledger.config().fence == f && t.ledger.failure().is_none() => Some(t),
            Some(_) => None,
        }
    }

    /// Closes every loaded topic whose bundle this broker no longer owns (its
    /// metadata session was lost, or it gave the bundle up). Their clients
    /// look the topics up again.
    pub async fn close_unowned_topics(&self) {
        let Some(c) = &self.cluster else { return };
        // Not served here, or served under another token than the one the
        // topic was loaded under: the bundle went away and came back, and
        // another broker wrote the log meanwhile. Such a topic's consumers
        // would wait for entries it never sees (its producers are moved on
        // by the next PRODUCER's load, its consumers only by this).
        let mut stale: Vec<Arc<Topic>> = Vec::new();
        // Asked once per bundle, not per topic: the token this broker holds it under, and
        // whether a transfer of it is under way here. A bundle being handed over is not
        // served any more, but its topics are the transfer's to close: closed here, their
        // clients would look the topics up instead of following the transfer, and wait for
        // the destination to take the bundle (docs/performance.md, "SIGTERM at scale").
        let mut held: HashMap<(usize, usize), (Option<u64>, bool)> = HashMap::new();
        self.for_each_loaded_with_bundle(|t, at| {
            let (fence, moving) = at.map_or((None, false), |(b, i)| {
                *held
                    .entry((Arc::as_ptr(b) as usize, i))
                    .or_insert_with(|| (c.holds(&b.paths[i]), c.handing_over(&b.paths[i])))
            });
            if !moving && (fence != Some(t.ledger.config().fence) || t.ledger.failure().is_some()) {
                stale.push(t.clone());
            }
        });
        for t in stale {
            let key = t.name.to_string();
            let _closing = self.topic_locks.lock(&key).await;
            let removed = {
                let mut topics = self.topics.lock();
                match topics.get(&key) {
                    Some(cur) if Arc::ptr_eq(cur, &t) => topics.remove(&key),
                    _ => None,
                }
            };
            if let Some(t) = removed {
                info!(topic = %t.name, "topic closed: this broker no longer owns its bundle");
                t.close().await;
                self.forget_non_persistent(&t.name).await;
            }
        }
    }

    /// Opens a persistent topic's ledger and restores what the metadata
    /// store records of it (termination, the compacted view).
    async fn load_persistent(
        &self,
        name: &TopicName,
        create: bool,
        fence: u64,
    ) -> Result<Arc<Topic>, BrokerError> {
        let stored = self.resources.topic_meta(name).await?;
        if stored.is_none() {
            let parent_is_partitioned = name.partition().is_some()
                && self
                    .resources
                    .partitions(&name.partitioned_parent())
                    .is_some();
            // A segment gets here with `create` only when its layout lists it
            // as active: the layout, not auto-creation, decides it exists.
            let authorized = parent_is_partitioned || name.segment().is_some();
            if name.domain() == Domain::Persistent {
                // Migrated to a scalable topic (PIP-475): the v4 name is
                // not made again while the layout exists.
                let v4 = name.partitioned_parent();
                if self
                    .resources
                    .layout(v4.namespace(), v4.local_name())
                    .await?
                    .is_some()
                {
                    return Err(BrokerError::TopicNotFound(format!(
                        "topic {name} does not exist: {v4} was migrated to topic://{}/{}",
                        v4.namespace(),
                        v4.local_name()
                    )));
                }
            }
            if !(create && (self.auto_topic_creation(name.namespace()).0 || authorized)) {
                return Err(BrokerError::TopicNotFound(format!(
                    "topic {name} does not exist"
                )));
            }
            if !authorized {
                self.check_topic_count(name.namespace(), 1, false).await?;
            }
            self.resources.record_topic(name).await?;
            info!(topic = %name, "created topic");
        }
        let meta = stored.map(|v| v.value).unwrap_or_default();
        let effective = self.effective_for(name);
        let ledger_config = LedgerConfig {
            retention: effective.retention,
            trim_interval: Some(std::time::Duration::from_secs(60)),
            ..self.fenced_ledger_config(fence)
        };
        let topic = Topic::open(
            name.clone(),
            self.backend.as_ref(),
            ledger_config,
            effective.deduplication,
            self.dispatch_settings(),
        )
        .await?;
        if let Some(txn) = self.txn() {
            topic.recover_txn(&txn.ctx).await?;
            for t in topic.ongoing_txns() {
                txn.ctx.check(t);
            }
        }
        topic.set_message_ttl(effective.message_ttl_secs);
        topic.dispatch_policy.set(&effective);
        topic.set_backlog_quota(effective.quotas);
        topic.limits.set(self.limits_for(name));
        if self.cluster.is_some() {
            topic.set_owner_check(Arc::new(BundleCheck {
                service: self.me.clone(),
                topic: name.clone(),
            }));
        }
        if let Some(t) = meta.terminated {
            topic.restore_terminated(t.position());
        }
        if let Some(c) = meta.compaction
            && let Some(h) = c.horizon.position()
        {
            let view = crate::compaction::CompactedView::open(
                self.backend.as_ref(),
                self.fenced_ledger_config(fence),
                &c.ledger,
                h,
            )
            .await?;
            *topic.compacted.lock() = Some(Arc::new(view));
            *topic.compaction_status.lock() = crate::compaction::CompactionStatus::Success;
        }
        Ok(topic)
    }

    /// A non-persistent topic: messages go to the consumers connected at the
    /// time, or nowhere. It lives in memory, in ledgers that are trimmed as soon
    /// as they roll over, and exists while it is loaded.
    async fn load_non_persistent(
        &self,
        name: &TopicName,
        create: bool,
        fence: u64,
    ) -> Result<Arc<Topic>, BrokerError> {
        if !(create && self.auto_topic_creation(name.namespace()).0) {
            return Err(BrokerError::TopicNotFound(format!(
                "topic {name} does not exist"
            )));
        }
        if let Some(c) = &self.cluster {
            c.announce(&strobe_resources::paths::topic_key(name)).await;
        }
        let config = LedgerConfig {
            max_entries_per_ledger: 1000,
            max_ledger_bytes: 16 << 20,
            retention: strobe_ledger::Retention::default(),
            trim_interval: Some(std::time::Duration::from_secs(1)),
            ..self.fenced_ledger_config(fence)
        };
        Topic::open(
            name.clone(),
            &self.non_persistent,
            config,
            false,
            self.dispatch_settings(),
        )
        .await
    }

    /// Unloads a topic: its clients are closed (they reconnect and it loads
    /// again, on a new ledger). 404 if it is not loaded.
    pub async fn unload(&self, name: &TopicName) -> Result<(), BrokerError> {
        let key = name.to_string();
        let _closing = self.topic_locks.lock(&key).await;
        let topic = self
            .topics
            .lock()
            .remove(&key)
            .ok_or_else(|| BrokerError::TopicNotFound(format!("topic {name} is not loaded")))?;
        topic.close().await;
        self.forget_non_persistent(name).await;
        info!(topic = %name, "topic unloaded");
        Ok(())
    }

    /// Withdraws a cluster broker's announcement of a non-persistent topic it
    /// no longer has loaded.
    async fn forget_non_persistent(&self, name: &TopicName) {
        if let Some(c) = &self.cluster
            && !name.is_persistent()
        {
            c.retract(&strobe_resources::paths::topic_key(name)).await;
        }
    }

    /// Closes every topic: producers and consumers get CLOSE_PRODUCER and
    /// CLOSE_CONSUMER, cursors and ledgers are flushed.
    pub async fn shutdown(&self) {
        if let Some(txn) = self.txn() {
            // Others take the coordinator partitions at once, not after the session TTL.
            txn.coordinator.shutdown().await;
        }
        let topics: Vec<Arc<Topic>> = self.topics.lock().drain().map(|(_, t)| t).collect();
        for t in topics {
            t.close().await;
        }
    }
}

/// A cluster topic's transaction records are written only while this broker
/// serves its bundle at the version it last wrote (see
/// [`crate::txn::OwnerCheck`]); the bundle is looked up at each write, since
/// a split keeps the topic loaded under a new bundle.
#[derive(Debug)]
struct BundleCheck {
    service: std::sync::Weak<BrokerService>,
    topic: TopicName,
}

impl crate::txn::OwnerCheck for BundleCheck {
    fn fence(&self) -> Result<Vec<strobe_metadata::Op>, BrokerError> {
        let not_here = || {
            BrokerError::ServiceNotReady(format!(
                "topic {} is moving to another broker; try again",
                self.topic
            ))
        };
        let service = self.service.upgrade().ok_or_else(not_here)?;
        let Some(c) = service.cluster() else {
            return Ok(Vec::new());
        };
        let path = service.bundle_path(&self.topic)?;
        let version = c.held_version(&path).ok_or_else(not_here)?;
        Ok(vec![strobe_metadata::Op::check(
            path,
            strobe_metadata::Expect::Version(version),
        )])
    }
}
