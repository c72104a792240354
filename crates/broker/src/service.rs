//! Pulsar's `BrokerService` and `NamespaceService` for one standalone broker:
//! which topics exist, loading them, partitioned-topic metadata, namespaces and
//! their policies. Everything that must survive a restart goes through the
//! metadata store.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use strobe_ledger::{LedgerBackend, LedgerConfig};
use strobe_metadata::{Expect, MetadataStore};
use strobe_model::{Domain, TopicName};
use tracing::info;

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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_policies: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication_clusters: Option<Vec<String>>,
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
    /// The port clients reach the binary protocol on.
    pub broker_port: u16,
    backend: Arc<dyn LedgerBackend>,
    ledger_config: LedgerConfig,
    metadata: Arc<dyn MetadataStore>,
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

fn meta_err(e: strobe_metadata::MetadataError) -> BrokerError {
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
        let svc = BrokerService {
            config,
            broker_port,
            backend,
            ledger_config,
            metadata,
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
        for t in loaded {
            t.set_deduplication(dedup).await?;
            t.set_message_ttl(ttl);
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
        let exists = self.metadata.exists(&key).await.map_err(meta_err)?;
        if !exists {
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

    /// Closes every topic: producers and consumers get CLOSE_PRODUCER and
    /// CLOSE_CONSUMER, cursors and ledgers are flushed.
    pub async fn shutdown(&self) {
        let topics: Vec<Arc<Topic>> = self.topics.lock().await.drain().map(|(_, t)| t).collect();
        for t in topics {
            t.close().await;
        }
    }
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
