//! Pulsar's `BrokerService` and `NamespaceService` for one standalone broker:
//! which topics exist, loading them, partitioned-topic metadata, namespaces and
//! their policies. Everything that must survive a restart goes through the
//! metadata store.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use strobe_ledger::Position;
use strobe_ledger::{LedgerBackend, LedgerConfig};
use strobe_metadata::{Expect, MetadataStore};
use strobe_model::{Domain, TopicName};
use tracing::{info, warn};

use crate::BrokerError;
use crate::config::BrokerConfig;
use crate::topic::Topic;

/// A namespace's policies, stored as JSON at `/admin/policies/<tenant>/<ns>`
/// with Pulsar's field names.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, rename_all = "snake_case")]
pub struct NamespacePolicies {
    #[serde(
        rename = "deduplicationEnabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub deduplication_enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_ttl_in_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_policies: Option<RetentionPolicies>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_compatibility_strategy: Option<String>,
    /// May producers register new schemas (Pulsar: is_allow_auto_update_schema, default true)?
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_allow_auto_update_schema: Option<bool>,
    /// Compact a topic once this many bytes follow its last compaction
    /// (Pulsar: compaction_threshold; 0 or none: only when asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction_threshold: Option<u64>,
    /// Must producers of a topic with a schema bring one (default false)?
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_validation_enforced: Option<bool>,
    pub auth_policies: AuthPolicies,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication_clusters: Option<Vec<String>>,
    /// Quotas by type: `destination_storage` (bytes) and `message_age` (seconds).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub backlog_quota_map: BTreeMap<String, BacklogQuotaJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundles: Option<BundlesData>,
}

/// Pulsar's `AuthPolicies`: permissions by role on the namespace, on single
/// topics, and the roles allowed on each subscription.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct AuthPolicies {
    pub namespace_auth: BTreeMap<String, std::collections::BTreeSet<String>>,
    pub destination_auth: BTreeMap<String, BTreeMap<String, std::collections::BTreeSet<String>>>,
    pub subscription_auth_roles: BTreeMap<String, std::collections::BTreeSet<String>>,
}

/// The actions a role may be granted (Pulsar's `AuthAction`).
pub const AUTH_ACTIONS: &[&str] = &[
    "produce",
    "consume",
    "functions",
    "sources",
    "sinks",
    "packages",
];

/// Pulsar's `BacklogQuota` JSON.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct BacklogQuotaJson {
    /// Deprecated alias of `limitSize`, still written by older clients.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_size: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_time: Option<i64>,
    pub policy: String,
}

/// Pulsar's `BundlesData`: the hash-range boundaries of a namespace's bundles.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct BundlesData {
    pub boundaries: Vec<String>,
    pub num_bundles: u32,
}

impl BundlesData {
    /// `n` bundles of equal width over the 32-bit hash range (Pulsar's default split).
    pub fn even(n: u32) -> BundlesData {
        let n = n.max(1);
        let step = 0x1_0000_0000u64 / u64::from(n);
        let mut boundaries: Vec<String> = (0..n)
            .map(|i| format!("0x{:08x}", u64::from(i) * step))
            .collect();
        boundaries.push("0xffffffff".into());
        BundlesData {
            boundaries,
            num_bundles: n,
        }
    }

    /// The boundaries as numbers (validated: at least two, increasing, 0 to 0xffffffff).
    pub fn parsed(&self) -> Result<Vec<u64>, BrokerError> {
        let v: Result<Vec<u64>, _> = self
            .boundaries
            .iter()
            .map(|b| u64::from_str_radix(b.trim_start_matches("0x"), 16))
            .collect();
        let v = v.map_err(|_| {
            BrokerError::NotAllowed(format!("invalid bundle boundaries {:?}", self.boundaries))
        })?;
        if v.len() < 2
            || v[0] != 0
            || *v.last().unwrap_or(&0) != 0xffff_ffff
            || v.windows(2).any(|w| w[0] >= w[1])
        {
            return Err(BrokerError::NotAllowed(format!(
                "bundle boundaries must rise from 0x00000000 to 0xffffffff: {:?}",
                self.boundaries
            )));
        }
        Ok(v)
    }

    /// The bundle (`0xLOW_0xHIGH`) holding topic `name` (Pulsar hashes the
    /// topic name with CRC-32).
    pub fn bundle_of(&self, name: &str) -> Option<String> {
        let v = self.parsed().ok()?;
        let h = u64::from(crc32fast::hash(name.as_bytes()));
        let i = v
            .windows(2)
            .position(|w| h >= w[0] && (h < w[1] || w[1] == 0xffff_ffff))?;
        Some(format!("0x{:08x}_0x{:08x}", v[i], v[i + 1]))
    }
}

/// The quotas a topic enforces, from a namespace's policies.
pub fn quotas_of(p: &NamespacePolicies) -> crate::topic::BacklogQuotas {
    use crate::topic::{BacklogQuota, BacklogQuotas, RetentionPolicy};
    let one = |key: &str, size: bool| {
        p.backlog_quota_map.get(key).and_then(|q| {
            let policy = match q.policy.as_str() {
                "producer_exception" => RetentionPolicy::ProducerException,
                "consumer_backlog_eviction" => RetentionPolicy::ConsumerBacklogEviction,
                _ => RetentionPolicy::ProducerRequestHold,
            };
            let limit = if size {
                q.limit_size.or(q.limit).unwrap_or(-1)
            } else {
                q.limit_time.unwrap_or(-1)
            };
            (limit >= 0).then_some(BacklogQuota { limit, policy })
        })
    };
    BacklogQuotas {
        size: one("destination_storage", true),
        age: one("message_age", false),
    }
}

/// Pulsar's `RetentionPolicies`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RetentionPolicies {
    pub retention_time_in_minutes: i64,
    #[serde(rename = "retentionSizeInMB")]
    pub retention_size_in_mb: i64,
}

/// Pulsar's `TenantInfo`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct TenantInfo {
    pub admin_roles: Vec<String>,
    pub allowed_clusters: Vec<String>,
}

/// The broker's topics and namespaces.
pub struct BrokerService {
    pub config: BrokerConfig,
    /// Authentication providers, authorizer and TLS configuration.
    pub security: crate::security::Security,
    /// The port clients reach the binary protocol on.
    pub broker_port: u16,
    backend: Arc<dyn LedgerBackend>,
    ledger_config: LedgerConfig,
    pub(crate) metadata: Arc<dyn MetadataStore>,
    /// Serialises schema registry writes (each is also a compare-and-set).
    pub(crate) schema_lock: tokio::sync::Mutex<()>,
    /// Loaded topics. The async lock serialises loading, so a topic is opened once.
    topics: tokio::sync::Mutex<HashMap<String, Arc<Topic>>>,
    /// The ledger the health check writes to (opened on first use).
    health: tokio::sync::OnceCell<strobe_ledger::ManagedLedger>,
    /// Storage of non-persistent topics: memory, trimmed as it rolls over.
    non_persistent: strobe_ledger::MemoryBackend,
    /// Partition counts of partitioned topics, by full name.
    partitioned: Mutex<BTreeMap<String, u32>>,
    namespaces: Mutex<BTreeMap<String, NamespacePolicies>>,
    next_producer: AtomicU64,
    next_conn: AtomicU64,
}

impl std::fmt::Debug for BrokerService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerService")
            .field("storage", &self.backend.kind())
            .field("metadata", &self.metadata.backend_name())
            .finish()
    }
}

fn topic_key(t: &TopicName) -> String {
    format!(
        "{}/{}/{}",
        t.namespace(),
        t.domain().as_str(),
        t.local_name()
    )
}

pub(crate) fn meta_err(e: strobe_metadata::MetadataError) -> BrokerError {
    BrokerError::Metadata(e.to_string())
}

impl BrokerService {
    /// Opens the service on its storage and metadata, creating the `public`
    /// tenant and `public/default` namespace on the first start.
    pub async fn open(
        config: BrokerConfig,
        broker_port: u16,
        backend: Arc<dyn LedgerBackend>,
        metadata: Arc<dyn MetadataStore>,
    ) -> Result<Arc<BrokerService>, BrokerError> {
        let ledger_config = LedgerConfig {
            max_entry_bytes: config.max_message_size + strobe_wire::FRAME_PADDING,
            ..LedgerConfig::default()
        };
        let security = crate::security::Security::from_config(&config)?;
        let svc = BrokerService {
            security,
            config,
            broker_port,
            backend,
            ledger_config,
            metadata,
            schema_lock: tokio::sync::Mutex::new(()),
            topics: tokio::sync::Mutex::new(HashMap::new()),
            non_persistent: strobe_ledger::MemoryBackend::new(),
            health: tokio::sync::OnceCell::new(),
            partitioned: Mutex::new(BTreeMap::new()),
            namespaces: Mutex::new(BTreeMap::new()),
            next_producer: AtomicU64::new(0),
            next_conn: AtomicU64::new(0),
        };
        svc.load_metadata().await?;
        Ok(Arc::new(svc))
    }

    async fn load_metadata(&self) -> Result<(), BrokerError> {
        let m = &self.metadata;
        if !m.exists("/admin/policies/public").await.map_err(meta_err)? {
            m.put("/admin/policies/public", b"{}", Expect::Any)
                .await
                .map_err(meta_err)?;
        }
        if !m
            .exists("/admin/policies/public/default")
            .await
            .map_err(meta_err)?
        {
            m.put("/admin/policies/public/default", b"{}", Expect::Any)
                .await
                .map_err(meta_err)?;
            info!("created tenant public and namespace public/default");
        }
        for kv in m
            .scan_prefix("/admin/policies/")
            .await
            .map_err(meta_err)?
            .entries
        {
            let rest = &kv.key["/admin/policies/".len()..];
            if rest.matches('/').count() == 1 {
                let p: NamespacePolicies = serde_json::from_slice(&kv.value).unwrap_or_default();
                self.namespaces.lock().insert(rest.to_owned(), p);
            }
        }
        for kv in m
            .scan_prefix("/admin/partitioned-topics/")
            .await
            .map_err(meta_err)?
            .entries
        {
            #[derive(Deserialize)]
            struct Meta {
                partitions: u32,
            }
            if let Ok(meta) = serde_json::from_slice::<Meta>(&kv.value) {
                let key = &kv.key["/admin/partitioned-topics/".len()..];
                if let Some(name) = name_from_key(key) {
                    self.partitioned.lock().insert(name, meta.partitions);
                }
            }
        }
        Ok(())
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

    pub fn namespace_exists(&self, ns: &str) -> bool {
        self.namespaces.lock().contains_key(ns)
    }

    pub fn namespace_policies(&self, ns: &str) -> Option<NamespacePolicies> {
        self.namespaces.lock().get(ns).cloned()
    }

    // --- administration (the admin HTTP API calls these) -------------------

    pub async fn tenants(&self) -> Result<Vec<String>, BrokerError> {
        let mut out: Vec<String> = self
            .metadata
            .list_children("/admin/policies")
            .await
            .map_err(meta_err)?;
        out.sort();
        Ok(out)
    }

    pub async fn tenant(&self, tenant: &str) -> Result<TenantInfo, BrokerError> {
        let key = format!("/admin/policies/{tenant}");
        match self.metadata.get(&key).await.map_err(meta_err)? {
            Some(v) => Ok(serde_json::from_slice(&v.value).unwrap_or_default()),
            None => Err(BrokerError::TopicNotFound(format!(
                "tenant {tenant} does not exist"
            ))),
        }
    }

    /// Creates (`update` false, 409 if it exists) or updates (404 if it does not) a tenant.
    pub async fn put_tenant(
        &self,
        tenant: &str,
        info: &TenantInfo,
        update: bool,
    ) -> Result<(), BrokerError> {
        validate_name(tenant)?;
        let key = format!("/admin/policies/{tenant}");
        let value = serde_json::to_vec(info).expect("json");
        let expect = if update {
            match self.metadata.get(&key).await.map_err(meta_err)? {
                Some(v) => Expect::Version(v.stat.version),
                None => {
                    return Err(BrokerError::TopicNotFound(format!(
                        "tenant {tenant} does not exist"
                    )));
                }
            }
        } else {
            Expect::Absent
        };
        self.metadata
            .put(&key, &value, expect)
            .await
            .map(|_| ())
            .map_err(|e| match e {
                strobe_metadata::MetadataError::AlreadyExists(_) => {
                    BrokerError::AlreadyExists(format!("tenant {tenant} already exists"))
                }
                other => meta_err(other),
            })
    }

    pub async fn delete_tenant(&self, tenant: &str) -> Result<(), BrokerError> {
        if self
            .namespaces
            .lock()
            .keys()
            .any(|ns| ns.split('/').next() == Some(tenant))
        {
            return Err(BrokerError::Conflict(format!(
                "tenant {tenant} still has namespaces"
            )));
        }
        let key = format!("/admin/policies/{tenant}");
        if !self.metadata.exists(&key).await.map_err(meta_err)? {
            return Err(BrokerError::TopicNotFound(format!(
                "tenant {tenant} does not exist"
            )));
        }
        self.metadata.delete(&key, None).await.map_err(meta_err)
    }

    pub fn namespaces_of(&self, tenant: &str) -> Vec<String> {
        self.namespaces
            .lock()
            .keys()
            .filter(|ns| ns.split('/').next() == Some(tenant))
            .cloned()
            .collect()
    }

    /// Creates a namespace (409 if it exists, 404 if its tenant does not).
    pub async fn create_namespace(
        &self,
        ns: &str,
        policies: NamespacePolicies,
    ) -> Result<(), BrokerError> {
        let Some((tenant, local)) = ns.split_once('/') else {
            return Err(BrokerError::NotAllowed(format!(
                "namespace {ns:?} is not <tenant>/<namespace>"
            )));
        };
        validate_name(local)?;
        let mut policies = policies;
        match &policies.bundles {
            Some(b) if !b.boundaries.is_empty() => {
                b.parsed()?;
            }
            Some(b) if b.num_bundles > 0 => {
                policies.bundles = Some(BundlesData::even(b.num_bundles.min(1024)));
            }
            _ => {
                policies.bundles = Some(BundlesData::even(
                    self.config.default_number_of_namespace_bundles,
                ));
            }
        }
        for (role, actions) in &policies.auth_policies.namespace_auth {
            validate_actions(role, actions)?;
        }
        if !self
            .metadata
            .exists(&format!("/admin/policies/{tenant}"))
            .await
            .map_err(meta_err)?
        {
            return Err(BrokerError::TopicNotFound(format!(
                "tenant {tenant} does not exist"
            )));
        }
        let key = format!("/admin/policies/{ns}");
        let value = serde_json::to_vec(&policies).expect("json");
        self.metadata
            .put(&key, &value, Expect::Absent)
            .await
            .map_err(|e| match e {
                strobe_metadata::MetadataError::AlreadyExists(_) => {
                    BrokerError::AlreadyExists(format!("namespace {ns} already exists"))
                }
                other => meta_err(other),
            })?;
        self.namespaces.lock().insert(ns.to_owned(), policies);
        Ok(())
    }

    pub async fn delete_namespace(&self, ns: &str) -> Result<(), BrokerError> {
        if !self.namespace_exists(ns) {
            return Err(BrokerError::TopicNotFound(format!(
                "namespace {ns} does not exist"
            )));
        }
        if !self.topics_of_namespace(ns, true, true).await?.is_empty() {
            return Err(BrokerError::Conflict(format!(
                "namespace {ns} still has topics"
            )));
        }
        self.metadata
            .delete(&format!("/admin/policies/{ns}"), None)
            .await
            .map_err(meta_err)?;
        self.namespaces.lock().remove(ns);
        Ok(())
    }

    /// Changes a namespace's policies with `f` and stores them; topics that are
    /// loaded follow (deduplication switches at once).
    pub async fn update_policies(
        &self,
        ns: &str,
        f: impl FnOnce(&mut NamespacePolicies),
    ) -> Result<NamespacePolicies, BrokerError> {
        let mut p = self
            .namespace_policies(ns)
            .ok_or_else(|| BrokerError::TopicNotFound(format!("namespace {ns} does not exist")))?;
        f(&mut p);
        let value = serde_json::to_vec(&p).expect("json");
        self.metadata
            .put(&format!("/admin/policies/{ns}"), &value, Expect::Any)
            .await
            .map_err(meta_err)?;
        self.namespaces.lock().insert(ns.to_owned(), p.clone());
        let dedup = self.deduplication_enabled(ns);
        let ttl = self.message_ttl_secs(ns);
        let loaded: Vec<Arc<Topic>> = self
            .topics
            .lock()
            .await
            .values()
            .filter(|t| t.name.namespace() == ns)
            .cloned()
            .collect();
        let quotas = quotas_of(&p);
        for t in loaded {
            t.set_deduplication(dedup).await?;
            t.set_message_ttl(ttl);
            t.set_backlog_quota(quotas);
        }
        Ok(p)
    }

    /// Changes the partition count of a partitioned topic (only upwards, as Pulsar).
    pub async fn update_partitions(
        &self,
        topic: &TopicName,
        partitions: u32,
    ) -> Result<(), BrokerError> {
        let current = self
            .partitioned
            .lock()
            .get(&topic.to_string())
            .copied()
            .ok_or_else(|| {
                BrokerError::TopicNotFound(format!("partitioned topic {topic} does not exist"))
            })?;
        if partitions < current {
            return Err(BrokerError::NotAllowed(format!(
                "the number of partitions can only grow ({current} -> {partitions} refused)"
            )));
        }
        let key = format!("/admin/partitioned-topics/{}", topic_key(topic));
        let value =
            serde_json::to_vec(&serde_json::json!({ "partitions": partitions })).expect("json");
        self.metadata
            .put(&key, &value, Expect::Any)
            .await
            .map_err(meta_err)?;
        self.partitioned
            .lock()
            .insert(topic.to_string(), partitions);
        Ok(())
    }

    /// The partitioned topics of a namespace.
    pub fn partitioned_topics_of(&self, ns: &str) -> Vec<String> {
        self.partitioned
            .lock()
            .keys()
            .filter(|n| TopicName::parse(n).is_ok_and(|t| t.namespace() == ns))
            .cloned()
            .collect()
    }

    /// Unloads a topic: its clients are closed (they reconnect and it loads
    /// again, on a new ledger). 404 if it is not loaded.
    pub async fn unload(&self, name: &TopicName) -> Result<(), BrokerError> {
        let topic = self
            .topics
            .lock()
            .await
            .remove(&name.to_string())
            .ok_or_else(|| BrokerError::TopicNotFound(format!("topic {name} is not loaded")))?;
        topic.close().await;
        info!(topic = %name, "topic unloaded");
        Ok(())
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
        self.metadata
            .put(
                &format!("/admin/health/{}", self.broker_port),
                stamp.as_bytes(),
                Expect::Any,
            )
            .await
            .map_err(meta_err)?;
        let ledger = self
            .health
            .get_or_try_init(|| async {
                let config = LedgerConfig {
                    max_entries_per_ledger: 100,
                    trim_interval: Some(std::time::Duration::from_secs(60)),
                    ..self.ledger_config.clone()
                };
                strobe_ledger::ManagedLedger::open(self.backend.as_ref(), "__health/check", config)
                    .await
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

    /// The storage engine's counters (`None` on the memory backend).
    pub fn storage_engine_stats(&self) -> Option<strobe_ledger::FileBackendStats> {
        self.backend.engine_stats()
    }

    /// Every loaded topic.
    pub async fn loaded_topics(&self) -> Vec<Arc<Topic>> {
        self.topics.lock().await.values().cloned().collect()
    }

    /// A loaded topic, without loading it.
    pub async fn loaded_topic(&self, name: &TopicName) -> Option<Arc<Topic>> {
        self.topics.lock().await.get(&name.to_string()).cloned()
    }

    /// Message TTL in seconds for a namespace (0: messages never expire).
    pub fn message_ttl_secs(&self, ns: &str) -> u64 {
        self.namespace_policies(ns)
            .and_then(|p| p.message_ttl_in_seconds)
            .unwrap_or(self.config.message_ttl_secs)
    }

    pub fn deduplication_enabled(&self, ns: &str) -> bool {
        self.namespace_policies(ns)
            .and_then(|p| p.deduplication_enabled)
            .unwrap_or(self.config.deduplication_enabled)
    }

    /// Partitions of `topic` if it is a partitioned topic (0 otherwise). With
    /// `create`, a topic that does not exist yet is created as the broker's
    /// auto-creation settings say.
    pub async fn partitioned_metadata(
        &self,
        topic: &TopicName,
        create: bool,
    ) -> Result<u32, BrokerError> {
        if topic.partition().is_some() {
            return Ok(0);
        }
        if let Some(n) = self.partitioned.lock().get(&topic.to_string()) {
            return Ok(*n);
        }
        if !self.namespace_exists(topic.namespace()) {
            return Err(BrokerError::TopicNotFound(format!(
                "namespace {} does not exist",
                topic.namespace()
            )));
        }
        let auto_partitioned = self.config.allow_auto_topic_creation
            && self.config.auto_topic_creation_type == "partitioned"
            && topic.domain() == Domain::Persistent;
        if create && auto_partitioned && !self.topic_exists(topic).await? {
            self.create_partitioned(topic, self.config.default_num_partitions)
                .await?;
            return Ok(self.config.default_num_partitions);
        }
        Ok(0)
    }

    /// Records a partitioned topic with `partitions` partitions.
    pub async fn create_partitioned(
        &self,
        topic: &TopicName,
        partitions: u32,
    ) -> Result<(), BrokerError> {
        let key = format!("/admin/partitioned-topics/{}", topic_key(topic));
        let value =
            serde_json::to_vec(&serde_json::json!({ "partitions": partitions })).expect("json");
        match self.metadata.put(&key, &value, Expect::Absent).await {
            Ok(_) => {}
            Err(strobe_metadata::MetadataError::AlreadyExists(_)) => {
                return Err(BrokerError::NotAllowed(format!(
                    "partitioned topic {topic} already exists"
                )));
            }
            Err(e) => return Err(meta_err(e)),
        }
        self.partitioned
            .lock()
            .insert(topic.to_string(), partitions);
        info!(%topic, partitions, "created partitioned topic");
        Ok(())
    }

    async fn topic_exists(&self, topic: &TopicName) -> Result<bool, BrokerError> {
        if self.topics.lock().await.contains_key(&topic.to_string()) {
            return Ok(true);
        }
        let key = format!("/managed-ledgers/{}", topic_key(topic));
        self.metadata.exists(&key).await.map_err(meta_err)
    }

    /// The loaded topic, loading (and with `create`, creating) it if needed.
    pub async fn topic(&self, name: &TopicName, create: bool) -> Result<Arc<Topic>, BrokerError> {
        if !name.is_persistent() {
            return self.non_persistent_topic(name, create).await;
        }
        if !self.namespace_exists(name.namespace()) {
            return Err(BrokerError::TopicNotFound(format!(
                "namespace {} does not exist",
                name.namespace()
            )));
        }
        if name.partition().is_none() && self.partitioned.lock().contains_key(&name.to_string()) {
            return Err(BrokerError::NotAllowed(format!(
                "{name} is a partitioned topic: produce to and consume from its partitions"
            )));
        }
        let mut topics = self.topics.lock().await;
        if let Some(t) = topics.get(&name.to_string()) {
            return Ok(t.clone());
        }
        let key = format!("/managed-ledgers/{}", topic_key(name));
        let stored = self.metadata.get(&key).await.map_err(meta_err)?;
        let meta: TopicMeta = stored
            .as_ref()
            .and_then(|v| serde_json::from_slice::<TopicMeta>(&v.value).ok())
            .unwrap_or_default();
        let terminated = meta.terminated;
        if stored.is_none() {
            let parent_is_partitioned = name.partition().is_some_and(|_| {
                self.partitioned
                    .lock()
                    .contains_key(&name.partitioned_parent().to_string())
            });
            if !(create && (self.config.allow_auto_topic_creation || parent_is_partitioned)) {
                return Err(BrokerError::TopicNotFound(format!(
                    "topic {name} does not exist"
                )));
            }
            self.metadata
                .put(&key, b"{}", Expect::Any)
                .await
                .map_err(meta_err)?;
            info!(topic = %name, "created topic");
        }
        let dedup = self.deduplication_enabled(name.namespace());
        let settings = crate::topic::DispatchSettings {
            max_read_entries: self.config.dispatcher_max_read_batch,
            max_unacked_messages: self.config.max_unacked_messages_per_consumer,
            key_shared_consistent_hashing: self.config.key_shared_use_consistent_hashing,
        };
        let policies = self
            .namespace_policies(name.namespace())
            .unwrap_or_default();
        let ledger_config = LedgerConfig {
            retention: retention_of(&policies),
            trim_interval: Some(std::time::Duration::from_secs(60)),
            ..self.ledger_config.clone()
        };
        let topic = Topic::open(
            name.clone(),
            self.backend.as_ref(),
            ledger_config,
            dedup,
            settings,
        )
        .await?;
        topic.set_message_ttl(self.message_ttl_secs(name.namespace()));
        topic.set_backlog_quota(quotas_of(&policies));
        if let Some(t) = terminated {
            topic.restore_terminated(t.position());
        }
        if let Some(c) = meta.compaction
            && let Some(h) = c.horizon.position()
        {
            let view = crate::compaction::CompactedView::open(
                self.backend.as_ref(),
                self.ledger_config.clone(),
                &c.ledger,
                h,
            )
            .await?;
            *topic.compacted.lock() = Some(Arc::new(view));
            *topic.compaction_status.lock() = crate::compaction::CompactionStatus::Success;
        }
        topics.insert(name.to_string(), topic.clone());
        Ok(topic)
    }

    /// A non-persistent topic: messages go to the consumers connected at the
    /// time, or nowhere. It lives in memory, in ledgers that are trimmed as soon
    /// as they roll over, and exists while it is loaded.
    async fn non_persistent_topic(
        &self,
        name: &TopicName,
        create: bool,
    ) -> Result<Arc<Topic>, BrokerError> {
        if !self.namespace_exists(name.namespace()) {
            return Err(BrokerError::TopicNotFound(format!(
                "namespace {} does not exist",
                name.namespace()
            )));
        }
        let mut topics = self.topics.lock().await;
        if let Some(t) = topics.get(&name.to_string()) {
            return Ok(t.clone());
        }
        if !(create && self.config.allow_auto_topic_creation) {
            return Err(BrokerError::TopicNotFound(format!(
                "topic {name} does not exist"
            )));
        }
        let config = LedgerConfig {
            max_entries_per_ledger: 1000,
            max_ledger_bytes: 16 << 20,
            retention: strobe_ledger::Retention::default(),
            trim_interval: Some(std::time::Duration::from_secs(1)),
            ..self.ledger_config.clone()
        };
        let settings = crate::topic::DispatchSettings {
            max_read_entries: self.config.dispatcher_max_read_batch,
            max_unacked_messages: self.config.max_unacked_messages_per_consumer,
            key_shared_consistent_hashing: self.config.key_shared_use_consistent_hashing,
        };
        let topic =
            Topic::open(name.clone(), &self.non_persistent, config, false, settings).await?;
        topics.insert(name.to_string(), topic.clone());
        Ok(topic)
    }

    /// Topics of a namespace (partitions listed by their partition names, as
    /// Pulsar lists them), sorted: persistent ones from the metadata store,
    /// non-persistent ones while they are loaded.
    pub async fn topics_of_namespace(
        &self,
        ns: &str,
        persistent: bool,
        non_persistent: bool,
    ) -> Result<Vec<String>, BrokerError> {
        let mut names = if persistent {
            self.persistent_topics_of_namespace(ns).await?
        } else {
            Vec::new()
        };
        if non_persistent {
            for t in self.topics.lock().await.values() {
                if !t.name.is_persistent() && t.name.namespace() == ns {
                    names.push(t.name.to_string());
                }
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn persistent_topics_of_namespace(&self, ns: &str) -> Result<Vec<String>, BrokerError> {
        let prefix = format!("/managed-ledgers/{ns}/persistent/");
        let mut names: Vec<String> = self
            .metadata
            .list_keys(&prefix)
            .await
            .map_err(meta_err)?
            .iter()
            .filter_map(|k| name_from_key(&k["/managed-ledgers/".len()..]))
            .collect();
        for (name, n) in self.partitioned.lock().iter() {
            let Ok(t) = TopicName::parse(name) else {
                continue;
            };
            if t.namespace() == ns {
                names.extend((0..*n).map(|i| t.partition_name(i).to_string()));
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// A namespace's bundles (namespaces from before bundles were recorded get
    /// the default split).
    pub fn bundles(&self, ns: &str) -> Result<BundlesData, BrokerError> {
        let p = self
            .namespace_policies(ns)
            .ok_or_else(|| BrokerError::TopicNotFound(format!("namespace {ns} does not exist")))?;
        Ok(p.bundles
            .unwrap_or_else(|| BundlesData::even(self.config.default_number_of_namespace_bundles)))
    }

    /// The bundle a topic belongs to, `0xLOW_0xHIGH`.
    pub fn bundle_of(&self, topic: &TopicName) -> Result<String, BrokerError> {
        self.bundles(topic.namespace())?
            .bundle_of(&topic.to_string())
            .ok_or_else(|| BrokerError::Metadata(format!("no bundle holds {topic}")))
    }

    /// Unloads every loaded topic of a namespace, or of one of its bundles.
    pub async fn unload_namespace(
        &self,
        ns: &str,
        bundle: Option<&str>,
    ) -> Result<(), BrokerError> {
        let bundles = self.bundles(ns)?;
        if let Some(b) = bundle {
            self.check_bundle(&bundles, b)?;
        }
        let names: Vec<TopicName> = self
            .topics
            .lock()
            .await
            .values()
            .filter(|t| t.name.namespace() == ns)
            .filter(|t| {
                bundle.is_none() || bundles.bundle_of(&t.name.to_string()).as_deref() == bundle
            })
            .map(|t| t.name.clone())
            .collect();
        for n in names {
            // A topic unloaded meanwhile is no error.
            let _ = self.unload(&n).await;
        }
        Ok(())
    }

    fn check_bundle(&self, bundles: &BundlesData, bundle: &str) -> Result<(u64, u64), BrokerError> {
        let v = bundles.parsed()?;
        let (lo, hi) = bundle
            .split_once('_')
            .and_then(|(a, b)| {
                Some((
                    u64::from_str_radix(a.trim_start_matches("0x"), 16).ok()?,
                    u64::from_str_radix(b.trim_start_matches("0x"), 16).ok()?,
                ))
            })
            .ok_or_else(|| {
                BrokerError::NotAllowed(format!("invalid bundle {bundle:?}: expected 0xLOW_0xHIGH"))
            })?;
        if !v.windows(2).any(|w| w[0] == lo && w[1] == hi) {
            return Err(BrokerError::TopicNotFound(format!(
                "bundle {bundle} is not one of the namespace's bundles"
            )));
        }
        Ok((lo, hi))
    }

    /// Splits a bundle into two halves (Pulsar's range_equally_divide).
    pub async fn split_bundle(&self, ns: &str, bundle: &str) -> Result<(), BrokerError> {
        let mut bundles = self.bundles(ns)?;
        let (lo, hi) = self.check_bundle(&bundles, bundle)?;
        if hi - lo < 2 {
            return Err(BrokerError::Precondition(format!(
                "bundle {bundle} is too small to split"
            )));
        }
        let mid = lo + (hi - lo) / 2;
        let mut v = bundles.parsed()?;
        let at = v.iter().position(|x| *x == hi).unwrap_or(v.len());
        v.insert(at, mid);
        bundles.boundaries = v.iter().map(|x| format!("0x{x:08x}")).collect();
        bundles.num_bundles = (v.len() - 1) as u32;
        self.update_policies(ns, move |p| p.bundles = Some(bundles))
            .await?;
        info!(namespace = ns, bundle, "bundle split");
        Ok(())
    }

    /// Deletes a topic: its data, its subscriptions and its record. Refused
    /// (412) while producers or consumers are connected unless `force`, which
    /// disconnects them first (Pulsar's `deleteTopic`).
    pub async fn delete_topic(&self, name: &TopicName, force: bool) -> Result<(), BrokerError> {
        if name.partition().is_none() && self.partitioned.lock().contains_key(&name.to_string()) {
            return Err(BrokerError::Conflict(format!(
                "{name} is a partitioned topic: delete it through its partitions path"
            )));
        }
        let mut topics = self.topics.lock().await;
        let loaded = topics.get(&name.to_string()).cloned();
        if let Some(t) = &loaded
            && !force
        {
            let producers = t.producer_names().len();
            let consumers: usize = t.subscriptions().iter().map(|s| s.consumer_count()).sum();
            if producers > 0 || consumers > 0 {
                return Err(BrokerError::Precondition(format!(
                    "topic {name} has {producers} producer(s) and {consumers} consumer(s) connected"
                )));
            }
        }
        if !name.is_persistent() {
            let t = loaded.ok_or_else(|| {
                BrokerError::TopicNotFound(format!("topic {name} does not exist"))
            })?;
            topics.remove(&name.to_string());
            drop(topics);
            t.close().await;
            info!(topic = %name, "topic deleted");
            return Ok(());
        }
        let key = format!("/managed-ledgers/{}", topic_key(name));
        if loaded.is_none() && !self.metadata.exists(&key).await.map_err(meta_err)? {
            return Err(BrokerError::TopicNotFound(format!(
                "topic {name} does not exist"
            )));
        }
        if let Some(t) = topics.remove(&name.to_string()) {
            t.close().await;
        }
        // Reopen the log alone, without retention, and drop every cursor and ledger.
        let config = LedgerConfig {
            retention: strobe_ledger::Retention::default(),
            trim_interval: None,
            ..self.ledger_config.clone()
        };
        let ledger =
            strobe_ledger::ManagedLedger::open(self.backend.as_ref(), &name.to_string(), config)
                .await?;
        for c in ledger.cursor_names() {
            ledger.delete_cursor(&c).await?;
        }
        ledger.rollover();
        ledger.trim().await?;
        ledger.close().await?;
        self.metadata.delete(&key, None).await.map_err(meta_err)?;
        drop(topics);
        info!(topic = %name, "topic deleted");
        Ok(())
    }

    /// Deletes a partitioned topic: every partition, then its record.
    pub async fn delete_partitioned(
        &self,
        name: &TopicName,
        force: bool,
    ) -> Result<(), BrokerError> {
        let n = self
            .partitioned
            .lock()
            .get(&name.to_string())
            .copied()
            .ok_or_else(|| {
                BrokerError::TopicNotFound(format!("partitioned topic {name} does not exist"))
            })?;
        if !force {
            for i in 0..n {
                if let Some(t) = self.loaded_topic(&name.partition_name(i)).await {
                    let consumers: usize =
                        t.subscriptions().iter().map(|s| s.consumer_count()).sum();
                    if !t.producer_names().is_empty() || consumers > 0 {
                        return Err(BrokerError::Precondition(format!(
                            "partition {i} of {name} has producers or consumers connected"
                        )));
                    }
                }
            }
        }
        for i in 0..n {
            match self.delete_topic(&name.partition_name(i), true).await {
                Ok(()) | Err(BrokerError::TopicNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let key = format!("/admin/partitioned-topics/{}", topic_key(name));
        self.metadata.delete(&key, None).await.map_err(meta_err)?;
        self.partitioned.lock().remove(&name.to_string());
        info!(topic = %name, partitions = n, "partitioned topic deleted");
        Ok(())
    }

    /// Terminates a topic (see [`Topic::terminate`]) and records it, so it
    /// stays terminated across restarts. Returns the last message's position.
    pub async fn terminate(&self, name: &TopicName) -> Result<Option<Position>, BrokerError> {
        if !name.is_persistent() {
            return Err(BrokerError::NotAllowed(
                "only persistent topics can be terminated".into(),
            ));
        }
        // A partition of a partitioned topic exists even before its first use.
        let topic = self.topic(name, name.partition().is_some()).await?;
        let last = topic.terminate().await;
        self.update_topic_meta(name, |m| m.terminated = Some(Terminated::at(last)))
            .await?;
        Ok(last)
    }

    /// Read-modify-write of what the metadata store records of a topic.
    async fn update_topic_meta(
        &self,
        name: &TopicName,
        f: impl FnOnce(&mut TopicMeta),
    ) -> Result<(), BrokerError> {
        let key = format!("/managed-ledgers/{}", topic_key(name));
        let current = self.metadata.get(&key).await.map_err(meta_err)?;
        let mut meta: TopicMeta = current
            .as_ref()
            .and_then(|v| serde_json::from_slice(&v.value).ok())
            .unwrap_or_default();
        f(&mut meta);
        let expect = match &current {
            Some(v) => Expect::Version(v.stat.version),
            None => Expect::Absent,
        };
        self.metadata
            .put(&key, &serde_json::to_vec(&meta).expect("json"), expect)
            .await
            .map(|_| ())
            .map_err(meta_err)
    }

    /// Starts a compaction of the topic (Pulsar's `PUT .../compaction`); 409
    /// while one runs. The status is [`BrokerService::compaction_status`].
    pub async fn compact(self: &Arc<Self>, name: &TopicName) -> Result<(), BrokerError> {
        use crate::compaction::CompactionStatus;
        if !name.is_persistent() {
            return Err(BrokerError::NotAllowed(
                "only persistent topics can be compacted".into(),
            ));
        }
        let topic = self.topic(name, name.partition().is_some()).await?;
        {
            let mut st = topic.compaction_status.lock();
            if *st == CompactionStatus::Running {
                return Err(BrokerError::Conflict(format!(
                    "a compaction of {name} is already running"
                )));
            }
            *st = CompactionStatus::Running;
        }
        let svc = self.clone();
        let name = name.clone();
        tokio::spawn(async move {
            let r = svc.run_compaction(&name, &topic).await;
            *topic.compaction_status.lock() = match r {
                Ok(()) => CompactionStatus::Success,
                Err(e) => {
                    warn!(topic = %name, error = %e, "compaction failed");
                    CompactionStatus::Error(e.to_string())
                }
            };
        });
        Ok(())
    }

    async fn run_compaction(
        &self,
        name: &TopicName,
        topic: &Arc<Topic>,
    ) -> Result<(), BrokerError> {
        let started = std::time::Instant::now();
        let previous = topic.compacted_view();
        let generation = previous
            .as_ref()
            .and_then(|v| v.ledger_name.rsplit('-').next()?.parse::<u64>().ok())
            .map_or(0, |g| g + 1);
        let ledger_name = format!("{name}/__compacted-{generation}");
        let Some(view) = crate::compaction::compact(
            &topic.ledger,
            previous.as_deref(),
            self.backend.as_ref(),
            self.ledger_config.clone(),
            &ledger_name,
        )
        .await?
        else {
            return Ok(());
        };
        let horizon = view.horizon;
        let kept = view.len();
        self.update_topic_meta(name, |m| {
            m.compaction = Some(CompactionMeta {
                horizon: Terminated::at(Some(horizon)),
                ledger: ledger_name.clone(),
                generation,
            })
        })
        .await?;
        *topic.compacted.lock() = Some(Arc::new(view));
        // The entries after the horizon stay until the next compaction.
        let cursor = topic
            .ledger
            .open_cursor(
                crate::compaction::COMPACTION_CURSOR,
                strobe_ledger::InitialPosition::Earliest,
            )
            .await?;
        cursor.mark_delete(horizon);
        cursor.flush().await?;
        if let Some(old) = previous {
            old.close().await;
            if let Err(e) = crate::compaction::drop_ledger(
                self.backend.as_ref(),
                self.ledger_config.clone(),
                &old.ledger_name,
            )
            .await
            {
                warn!(topic = %name, error = %e, "dropping the previous compacted ledger failed");
            }
        }
        info!(topic = %name, %horizon, kept, elapsed_ms = started.elapsed().as_millis() as u64, "compaction done");
        Ok(())
    }

    /// Pulsar's compaction threshold: a topic with more than the namespace's
    /// `compaction_threshold` bytes after its last compaction is compacted.
    async fn maybe_compact(self: &Arc<Self>, t: &Arc<Topic>) {
        if !t.name.is_persistent() {
            return;
        }
        let threshold = self
            .namespace_policies(t.name.namespace())
            .and_then(|p| p.compaction_threshold)
            .unwrap_or(0);
        if threshold == 0
            || *t.compaction_status.lock() == crate::compaction::CompactionStatus::Running
        {
            return;
        }
        let ls = t.ledger.stats();
        let pending = match t.compacted_view() {
            None => ls.bytes,
            Some(v) => {
                let mean = ls.bytes.checked_div(ls.entries).unwrap_or(0);
                let behind = match ls.last_confirmed {
                    Some(l) if l > v.horizon => t
                        .ledger
                        .open_cursor(
                            crate::compaction::COMPACTION_CURSOR,
                            strobe_ledger::InitialPosition::Earliest,
                        )
                        .await
                        .map(|c| c.backlog())
                        .unwrap_or(0),
                    _ => 0,
                };
                behind * mean
            }
        };
        if pending > threshold {
            info!(topic = %t.name, pending, threshold, "compaction threshold reached");
            if let Err(e) = self.compact(&t.name).await {
                warn!(topic = %t.name, error = %e, "could not start a compaction");
            }
        }
    }

    /// The compaction status of a topic: (status name, last error).
    pub async fn compaction_status(
        &self,
        name: &TopicName,
    ) -> Result<(String, Option<String>), BrokerError> {
        let topic = self.topic(name, false).await?;
        let st = topic.compaction_status.lock().clone();
        let err = match &st {
            crate::compaction::CompactionStatus::Error(e) => Some(e.clone()),
            _ => None,
        };
        Ok((st.name().to_owned(), err))
    }

    /// The broker's periodic work: rates for stats and metrics, and backlog
    /// quota enforcement. Runs until `shutdown`.
    pub async fn run_background(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let mut stats = tokio::time::interval(std::time::Duration::from_secs(
            self.config.stats_update_interval_secs,
        ));
        let mut quota = tokio::time::interval(std::time::Duration::from_secs(
            self.config.backlog_quota_check_interval_secs,
        ));
        stats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        quota.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = stats.tick() => {
                    for t in self.loaded_topics().await {
                        t.counters.update_rates();
                        self.maybe_compact(&t).await;
                    }
                }
                _ = quota.tick() => {
                    for t in self.loaded_topics().await {
                        enforce_quota(&t).await;
                    }
                }
            }
        }
    }

    /// Closes every topic: producers and consumers get CLOSE_PRODUCER and
    /// CLOSE_CONSUMER, cursors and ledgers are flushed.
    pub async fn shutdown(&self) {
        let topics: Vec<Arc<Topic>> = self.topics.lock().await.drain().map(|(_, t)| t).collect();
        for t in topics {
            t.close().await;
        }
    }
}

/// What the metadata store records of a topic at `/managed-ledgers/...`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct TopicMeta {
    #[serde(skip_serializing_if = "Option::is_none")]
    terminated: Option<Terminated>,
    #[serde(skip_serializing_if = "Option::is_none")]
    compaction: Option<CompactionMeta>,
}

/// The last finished compaction: its horizon and compacted ledger.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CompactionMeta {
    horizon: Terminated,
    ledger: String,
    generation: u64,
}

/// A terminated topic's last message (entry -1 of ledger -1 if it had none).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Terminated {
    ledger_id: i64,
    entry_id: i64,
}

impl Terminated {
    fn at(p: Option<Position>) -> Terminated {
        match p {
            Some(p) => Terminated {
                ledger_id: p.ledger_id as i64,
                entry_id: p.entry_id as i64,
            },
            None => Terminated {
                ledger_id: -1,
                entry_id: -1,
            },
        }
    }

    fn position(&self) -> Option<Position> {
        (self.ledger_id >= 0 && self.entry_id >= 0)
            .then(|| Position::new(self.ledger_id as u64, self.entry_id as u64))
    }
}

/// One backlog quota check of a topic (Pulsar's `BacklogQuotaManager`):
/// consumer_backlog_eviction skips the oldest messages of subscriptions over
/// the limit; producer_exception disconnects the producers.
async fn enforce_quota(t: &Arc<Topic>) {
    use crate::subscription::AdminOp;
    use crate::topic::RetentionPolicy;
    let q = t.backlog_quota();
    if let Some(size) = q.size {
        let backlog = t.backlog_bytes();
        if size.limit >= 0 && backlog > size.limit as u64 {
            match size.policy {
                RetentionPolicy::ConsumerBacklogEviction => {
                    let ls = t.ledger.stats();
                    let mean = ls.bytes.checked_div(ls.entries).unwrap_or(1).max(1);
                    let keep = size.limit as u64 / mean;
                    for s in t.subscriptions().iter().filter(|s| s.durable) {
                        let over = s.cursor.backlog().saturating_sub(keep);
                        if over > 0 {
                            info!(topic = %t.name, subscription = %s.name, skipped = over, "backlog quota exceeded: oldest messages evicted");
                            let _ = s.admin(AdminOp::Skip(over)).await;
                        }
                    }
                }
                RetentionPolicy::ProducerException => {
                    info!(topic = %t.name, backlog, limit = size.limit, "backlog quota exceeded: producers disconnected");
                    t.disconnect_producers();
                }
                RetentionPolicy::ProducerRequestHold => {}
            }
        }
    }
    if let Some(age) = q.age
        && age.limit >= 0
        && age.policy == RetentionPolicy::ConsumerBacklogEviction
    {
        for s in t.subscriptions().iter().filter(|s| s.durable) {
            let _ = s.admin(AdminOp::ExpireOlderThan(age.limit as u64)).await;
        }
    }
}

fn validate_actions(
    role: &str,
    actions: &std::collections::BTreeSet<String>,
) -> Result<(), BrokerError> {
    if let Some(a) = actions.iter().find(|a| !AUTH_ACTIONS.contains(&a.as_str())) {
        return Err(BrokerError::NotAllowed(format!(
            "unknown action {a:?} for role {role}: expected one of {}",
            AUTH_ACTIONS.join(", ")
        )));
    }
    Ok(())
}

/// Pulsar's retention policy as the ledger applies it: -1 is "no limit", and
/// without a policy consumed ledgers go at once (Pulsar's default, 0 and 0).
fn retention_of(p: &NamespacePolicies) -> strobe_ledger::Retention {
    match &p.retention_policies {
        None => strobe_ledger::Retention::default(),
        Some(r) => strobe_ledger::Retention {
            time: (r.retention_time_in_minutes >= 0)
                .then(|| std::time::Duration::from_secs(r.retention_time_in_minutes as u64 * 60)),
            size_bytes: (r.retention_size_in_mb >= 0)
                .then_some((r.retention_size_in_mb as u64) << 20),
        },
    }
}

fn validate_name(n: &str) -> Result<(), BrokerError> {
    if n.is_empty()
        || !n
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '=' | ':' | '.' | '_'))
    {
        return Err(BrokerError::NotAllowed(format!(
            "invalid name {n:?}: only letters, digits and -=:._ are allowed"
        )));
    }
    Ok(())
}

/// `tenant/ns/domain/local` (the metadata key layout) back to a topic name.
fn name_from_key(key: &str) -> Option<String> {
    let parts: Vec<&str> = key.splitn(4, '/').collect();
    match parts.as_slice() {
        [tenant, ns, domain, local] => Some(format!("{domain}://{tenant}/{ns}/{local}")),
        _ => None,
    }
}

/// Pulsar's topic-list hash (`TopicList.calculateHash`): CRC-32C over the
/// sorted names joined by ',', printed as Guava prints a HashCode (the
/// checksum's little-endian bytes in hex).
pub fn topics_hash(sorted: &[String]) -> String {
    let joined = sorted.join(",");
    let crc = strobe_wire::payload::crc32c(joined.as_bytes());
    crc.to_le_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_keys_round_trip() {
        let t = TopicName::parse("persistent://a/b/c-partition-2").unwrap();
        assert_eq!(
            name_from_key(&topic_key(&t)).as_deref(),
            Some("persistent://a/b/c-partition-2")
        );
    }

    #[test]
    fn hash_is_little_endian_hex() {
        let names = vec!["a".to_string(), "b".to_string()];
        let crc = strobe_wire::payload::crc32c(b"a,b");
        let h = topics_hash(&names);
        assert_eq!(h.len(), 8);
        assert_eq!(u32::from_str_radix(&h, 16).unwrap().swap_bytes(), crc);
    }
}
