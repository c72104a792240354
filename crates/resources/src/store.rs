//! [`Resources`]: the typed documents of the metadata store behind one
//! handle, with the caches of namespace policies and partition counts.

use std::collections::BTreeMap;
use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use strobe_metadata::{CacheSnapshot, Expect, MetadataError, MetadataStore, Op, PrefixCache};
use strobe_model::Position;
use strobe_model::TopicName;
use tracing::{error, info};

use crate::error::ResourcesError;
use crate::paths;
use crate::policies::{NamespacePolicies, TenantInfo};
use strobe_tenancy::TopicPolicies;

/// What the metadata store records of a persistent topic (`/managed-ledgers/...`).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TopicMeta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminated: Option<StoredPosition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionMeta>,
}

/// The last finished compaction: its horizon and compacted ledger.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompactionMeta {
    pub horizon: StoredPosition,
    pub ledger: String,
    pub generation: u64,
}

/// A position as stored: entry -1 of ledger -1 stands for "none" (a
/// terminated topic that had no message).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredPosition {
    ledger_id: i64,
    entry_id: i64,
}

impl StoredPosition {
    pub fn at(p: Option<Position>) -> StoredPosition {
        match p {
            Some(p) => StoredPosition {
                ledger_id: p.ledger_id as i64,
                entry_id: p.entry_id as i64,
            },
            None => StoredPosition {
                ledger_id: -1,
                entry_id: -1,
            },
        }
    }

    pub fn position(&self) -> Option<Position> {
        (self.ledger_id >= 0 && self.entry_id >= 0)
            .then(|| Position::new(self.ledger_id as u64, self.entry_id as u64))
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct PartitionedTopicMeta {
    partitions: u32,
}

/// A decoded document and the version to write it back against.
#[derive(Debug)]
pub struct Versioned<T> {
    pub value: T,
    pub version: u64,
}

pub(crate) fn decode<T: DeserializeOwned>(path: &str, bytes: &[u8]) -> Result<T, ResourcesError> {
    serde_json::from_slice(bytes).map_err(|e| ResourcesError::Corrupt {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("policy documents always serialise")
}

/// A compare-and-set put's expectation from the version read (`None`: the
/// path did not exist).
pub fn expect_version(version: Option<u64>) -> Expect {
    match version {
        Some(v) => Expect::Version(v),
        None => Expect::Absent,
    }
}

/// Schema histories kept in memory at most: a broker's topics' worth at the
/// scale issue 47 measures (most of them "absent", a few bytes each).
const SCHEMA_CACHE_KEYS: usize = 400_000;

/// The broker's view of the metadata store.
pub struct Resources {
    store: Arc<dyn MetadataStore>,
    /// Every namespace's policies, by `<tenant>/<namespace>`.
    namespaces: Arc<Mutex<BTreeMap<String, NamespacePolicies>>>,
    /// Partition counts of partitioned topics, by full name.
    partitioned: Arc<Mutex<BTreeMap<String, u32>>>,
    /// Topics' own policies, by full name (a partitioned topic's, not its
    /// partitions').
    topic_policies: Arc<Mutex<BTreeMap<String, TopicPolicies>>>,
    /// The store revision of this broker's newest write to each cached prefix
    /// (namespaces, partitioned topics, topic policies).
    written: [Arc<AtomicU64>; 3],
    /// Bumped whenever a policy cache changes (a write here or another
    /// broker's seen by the watch), for what applies policies to loaded topics.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
    /// The watches feeding the two caches (dropping them stops the followers).
    _follow: Vec<PrefixCache>,
    /// Schema histories read before, absent ones included (every PRODUCER
    /// and SUBSCRIBE reads its topic's).
    schemas: strobe_metadata::KeyCache,
}

impl std::fmt::Debug for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resources")
            .field("store", &self.store.backend_name())
            .finish_non_exhaustive()
    }
}

impl Resources {
    /// Loads the caches and starts following the store, creating the `public`
    /// tenant and `public/default` namespace on the first start. A namespace or
    /// partitioned-topic record that does not decode is logged with its path
    /// and left out (the broker still starts; that namespace or topic answers
    /// as missing).
    pub async fn load(store: Arc<dyn MetadataStore>) -> Result<Resources, ResourcesError> {
        for path in [paths::tenant("public"), paths::namespace("public/default")] {
            // Another broker (or an earlier start) may have made it.
            if strobe_metadata::create_once(&*store, &path, b"{}").await? {
                info!(path, "created");
            }
        }
        let namespaces = Arc::new(Mutex::new(BTreeMap::new()));
        let partitioned = Arc::new(Mutex::new(BTreeMap::new()));
        let topic_policies = Arc::new(Mutex::new(BTreeMap::new()));
        let written = [
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        ];
        let changes = Arc::new(tokio::sync::watch::Sender::new(0u64));
        let policies_root = format!("{}/", paths::POLICIES);
        let policies = PrefixCache::start(store.clone(), &policies_root).await?;
        let parts_root = format!("{}/", paths::PARTITIONED_TOPICS);
        let parts = PrefixCache::start(store.clone(), &parts_root).await?;
        let topics_root = format!("{}/", paths::TOPIC_POLICIES);
        let topics = PrefixCache::start(store.clone(), &topics_root).await?;
        *namespaces.lock() = namespaces_in(&policies.snapshot(), &policies_root);
        *partitioned.lock() = partitioned_in(&parts.snapshot(), &parts_root);
        *topic_policies.lock() = topic_policies_in(&topics.snapshot(), &topics_root);
        follow(
            policies.subscribe(),
            written[0].clone(),
            namespaces.clone(),
            Some(changes.clone()),
            move |s| namespaces_in(s, &policies_root),
        );
        follow(
            parts.subscribe(),
            written[1].clone(),
            partitioned.clone(),
            None,
            move |s| partitioned_in(s, &parts_root),
        );
        follow(
            topics.subscribe(),
            written[2].clone(),
            topic_policies.clone(),
            Some(changes.clone()),
            move |s| topic_policies_in(s, &topics_root),
        );
        let schemas = strobe_metadata::KeyCache::start(
            store.clone(),
            &format!("{}/", paths::SCHEMAS),
            SCHEMA_CACHE_KEYS,
        );
        Ok(Resources {
            schemas,
            store,
            namespaces,
            partitioned,
            topic_policies,
            written,
            changes,
            _follow: vec![policies, parts, topics],
        })
    }

    /// Notes the revision of a write to a cached prefix (0: namespaces, 1:
    /// partitioned topics, 2: topic policies), before the cache takes it in
    /// (the follower then keeps no older snapshot over it).
    fn wrote(&self, cache: usize, revision: u64) {
        self.written[cache].fetch_max(revision, Ordering::SeqCst);
    }

    /// Says a policy cache changed, once the change is in it (what was
    /// derived from an earlier generation is derived again).
    fn changed(&self) {
        self.changes.send_modify(|g| *g += 1);
    }

    /// The policy caches' generation: bumped after every change to
    /// namespaces' or topics' policies is in the caches, so what is derived
    /// from them (a namespace's parsed bundles) can be kept until it moves.
    pub fn policy_generation(&self) -> u64 {
        *self.changes.borrow()
    }

    /// Changes to the cached policies (namespaces, topics): the value is a
    /// counter, bumped after each change is in the cache.
    pub fn policy_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Deletes `path` and notes the delete's revision.
    async fn delete_cached(&self, cache: usize, path: &str) -> Result<(), ResourcesError> {
        let r = self.store.txn(vec![Op::delete(path, None)]).await?;
        self.wrote(cache, r.revision);
        Ok(())
    }

    /// The store itself, for what is not a document (the health check, schemas).
    pub fn store(&self) -> &Arc<dyn MetadataStore> {
        &self.store
    }

    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<Option<Versioned<T>>, ResourcesError> {
        match self.store.get(path).await? {
            None => Ok(None),
            Some(v) => Ok(Some(Versioned {
                value: decode(path, &v.value)?,
                version: v.stat.version,
            })),
        }
    }

    /// A put that refuses to overwrite: `AlreadyExists` becomes `what already exists`.
    pub(crate) async fn create<T: Serialize>(
        &self,
        path: &str,
        value: &T,
        what: &str,
    ) -> Result<u64, ResourcesError> {
        match self.store.put(path, &encode(value), Expect::Absent).await {
            Ok(stat) => Ok(stat.version),
            Err(MetadataError::AlreadyExists(_)) => Err(ResourcesError::AlreadyExists(format!(
                "{what} already exists"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    // --- tenants ------------------------------------------------------------

    pub async fn tenants(&self) -> Result<Vec<String>, ResourcesError> {
        let mut out = self.store.list_children(paths::POLICIES).await?;
        out.sort();
        Ok(out)
    }

    pub async fn tenant(
        &self,
        tenant: &str,
    ) -> Result<Option<Versioned<TenantInfo>>, ResourcesError> {
        self.get(&paths::tenant(tenant)).await
    }

    pub async fn tenant_exists(&self, tenant: &str) -> Result<bool, ResourcesError> {
        Ok(self.store.exists(&paths::tenant(tenant)).await?)
    }

    pub async fn create_tenant(
        &self,
        tenant: &str,
        info: &TenantInfo,
    ) -> Result<(), ResourcesError> {
        self.create(&paths::tenant(tenant), info, &format!("tenant {tenant}"))
            .await
            .map(|_| ())
    }

    /// Replaces a tenant's info; `false` if the tenant does not exist. The
    /// version read fences the write; whether the old document decodes does
    /// not matter, it is replaced.
    pub async fn update_tenant(
        &self,
        tenant: &str,
        info: &TenantInfo,
    ) -> Result<bool, ResourcesError> {
        let path = paths::tenant(tenant);
        let Some(current) = self.store.get(&path).await? else {
            return Ok(false);
        };
        self.store
            .put(&path, &encode(info), Expect::Version(current.stat.version))
            .await?;
        Ok(true)
    }

    pub async fn delete_tenant(&self, tenant: &str) -> Result<(), ResourcesError> {
        Ok(self.store.delete(&paths::tenant(tenant), None).await?)
    }

    // --- namespaces ---------------------------------------------------------

    pub fn namespace_exists(&self, ns: &str) -> bool {
        self.namespaces.lock().contains_key(ns)
    }

    pub fn namespace_policies(&self, ns: &str) -> Option<NamespacePolicies> {
        self.namespaces.lock().get(ns).cloned()
    }

    /// The namespaces of a tenant (`<tenant>/<namespace>`), sorted.
    pub fn namespaces_of(&self, tenant: &str) -> Vec<String> {
        self.namespaces
            .lock()
            .keys()
            .filter(|ns| ns.split('/').next() == Some(tenant))
            .cloned()
            .collect()
    }

    pub async fn create_namespace(
        &self,
        ns: &str,
        policies: &NamespacePolicies,
    ) -> Result<(), ResourcesError> {
        let rev = self
            .create(&paths::namespace(ns), policies, &format!("namespace {ns}"))
            .await?;
        self.wrote(0, rev);
        self.namespaces
            .lock()
            .insert(ns.to_owned(), policies.clone());
        self.changed();
        Ok(())
    }

    /// A namespace's policies as the store has them now, with their version
    /// (the cache may be a moment behind another broker's write); 404 if
    /// the namespace does not exist.
    pub async fn namespace_policies_now(
        &self,
        ns: &str,
    ) -> Result<Versioned<NamespacePolicies>, ResourcesError> {
        self.get(&paths::namespace(ns))
            .await?
            .ok_or_else(|| ResourcesError::NotFound(format!("namespace {ns} does not exist")))
    }

    /// Writes a namespace's policies if the store still has them at
    /// `version`; a concurrent change is a 409 (Pulsar's "Concurrent
    /// modification"), never a lost update.
    pub async fn replace_namespace_policies(
        &self,
        ns: &str,
        policies: &NamespacePolicies,
        version: u64,
    ) -> Result<(), ResourcesError> {
        let stat = match self
            .store
            .put(
                &paths::namespace(ns),
                &encode(policies),
                Expect::Version(version),
            )
            .await
        {
            Ok(stat) => stat,
            Err(MetadataError::BadVersion { .. }) | Err(MetadataError::NotFound(_)) => {
                return Err(ResourcesError::Conflict(format!(
                    "Concurrent modification of namespace {ns}'s policies; try again"
                )));
            }
            Err(e) => return Err(e.into()),
        };
        self.policies_written(ns, policies.clone(), stat.version);
        Ok(())
    }

    /// The write of a namespace's policies at `version`, for a transaction
    /// (a bundle split writes the new boundaries with the ownership records).
    pub fn namespace_policies_op(
        &self,
        ns: &str,
        policies: &NamespacePolicies,
        version: u64,
    ) -> Op {
        Op::put_if(
            paths::namespace(ns),
            encode(policies),
            Expect::Version(version),
        )
    }

    /// Notes policies this broker wrote at `revision` in the cache.
    pub fn policies_written(&self, ns: &str, policies: NamespacePolicies, revision: u64) {
        self.wrote(0, revision);
        self.namespaces.lock().insert(ns.to_owned(), policies);
        self.changed();
    }

    pub async fn delete_namespace(&self, ns: &str) -> Result<(), ResourcesError> {
        self.delete_cached(0, &paths::namespace(ns)).await?;
        self.namespaces.lock().remove(ns);
        self.changed();
        Ok(())
    }

    // --- topic policies -----------------------------------------------------

    /// A topic's own policies (a partition's are its partitioned topic's).
    pub fn topic_policies(&self, topic: &TopicName) -> Option<TopicPolicies> {
        self.topic_policies
            .lock()
            .get(&topic.partitioned_parent().to_string())
            .cloned()
    }

    /// Changes a topic's own policies with `f` over what the store has now
    /// (a concurrent change is a 409, never a lost update); policies left
    /// empty are deleted.
    pub async fn update_topic_policies(
        &self,
        topic: &TopicName,
        f: impl FnOnce(&mut TopicPolicies),
    ) -> Result<TopicPolicies, ResourcesError> {
        let topic = topic.partitioned_parent();
        let path = paths::topic_policies(&topic);
        let current = self.get::<TopicPolicies>(&path).await?;
        let mut p = current
            .as_ref()
            .map(|c| c.value.clone())
            .unwrap_or_default();
        f(&mut p);
        let expect = match &current {
            Some(c) => Expect::Version(c.version),
            None => Expect::Absent,
        };
        let op = if p.is_empty() {
            if current.is_none() {
                return Ok(p);
            }
            Op::delete(&path, current.as_ref().map(|c| c.version))
        } else {
            Op::put_if(path.clone(), encode(&p), expect)
        };
        let r = match self.store.txn(vec![op]).await {
            Ok(r) => r,
            Err(MetadataError::BadVersion { .. })
            | Err(MetadataError::AlreadyExists(_))
            | Err(MetadataError::NotFound(_)) => {
                return Err(ResourcesError::Conflict(format!(
                    "Concurrent modification of topic {topic}'s policies; try again"
                )));
            }
            Err(e) => return Err(e.into()),
        };
        self.wrote(2, r.revision);
        {
            let mut map = self.topic_policies.lock();
            if p.is_empty() {
                map.remove(&topic.to_string());
            } else {
                map.insert(topic.to_string(), p.clone());
            }
        }
        self.changed();
        Ok(p)
    }

    /// Forgets a deleted topic's own policies.
    pub async fn delete_topic_policies(&self, topic: &TopicName) -> Result<(), ResourcesError> {
        let topic = topic.partitioned_parent();
        let deleted = match self.delete_cached(2, &paths::topic_policies(&topic)).await {
            Ok(()) => true,
            Err(ResourcesError::Metadata(MetadataError::NotFound(_))) => false,
            Err(e) => return Err(e),
        };
        let held = self
            .topic_policies
            .lock()
            .remove(&topic.to_string())
            .is_some();
        // Every deleted topic comes here, most with no policies of their
        // own: a change said for those would walk every loaded topic
        // (`apply_policies`) once per deleted topic.
        if deleted || held {
            self.changed();
        }
        Ok(())
    }

    // --- partitioned topics -------------------------------------------------

    /// The partition count of `topic` if it is a partitioned topic.
    pub fn partitions(&self, topic: &TopicName) -> Option<u32> {
        self.partitioned.lock().get(&topic.to_string()).copied()
    }

    /// Every partitioned topic of a namespace with its partition count.
    pub fn partitioned_topics_of(&self, ns: &str) -> Vec<(TopicName, u32)> {
        self.partitioned
            .lock()
            .iter()
            .filter_map(|(n, p)| Some((TopicName::parse(n).ok()?, *p)))
            .filter(|(t, _)| t.namespace() == ns)
            .collect()
    }

    pub async fn create_partitioned(
        &self,
        topic: &TopicName,
        partitions: u32,
    ) -> Result<(), ResourcesError> {
        let meta = PartitionedTopicMeta { partitions };
        let rev = self
            .create(
                &paths::partitioned_topic(topic),
                &meta,
                &format!("partitioned topic {topic}"),
            )
            .await?;
        self.wrote(1, rev);
        self.partitioned
            .lock()
            .insert(topic.to_string(), partitions);
        Ok(())
    }

    pub async fn set_partitions(
        &self,
        topic: &TopicName,
        partitions: u32,
    ) -> Result<(), ResourcesError> {
        let meta = PartitionedTopicMeta { partitions };
        let stat = self
            .store
            .put(
                &paths::partitioned_topic(topic),
                &encode(&meta),
                Expect::Any,
            )
            .await?;
        self.wrote(1, stat.version);
        self.partitioned
            .lock()
            .insert(topic.to_string(), partitions);
        Ok(())
    }

    pub async fn delete_partitioned(&self, topic: &TopicName) -> Result<(), ResourcesError> {
        self.delete_cached(1, &paths::partitioned_topic(topic))
            .await?;
        self.partitioned.lock().remove(&topic.to_string());
        Ok(())
    }

    // --- persistent topics ----------------------------------------------------

    pub async fn topic_meta(
        &self,
        topic: &TopicName,
    ) -> Result<Option<Versioned<TopicMeta>>, ResourcesError> {
        self.get(&paths::managed_ledger(topic)).await
    }

    pub async fn topic_recorded(&self, topic: &TopicName) -> Result<bool, ResourcesError> {
        Ok(self.store.exists(&paths::managed_ledger(topic)).await?)
    }

    /// Records that a persistent topic exists.
    pub async fn record_topic(&self, topic: &TopicName) -> Result<(), ResourcesError> {
        self.store
            .put(
                &paths::managed_ledger(topic),
                &encode(&TopicMeta::default()),
                Expect::Any,
            )
            .await?;
        Ok(())
    }

    /// Read-modify-write (compare-and-set) of what is recorded of a topic;
    /// `f` runs again on what is read anew when another write came between
    /// (a migration and the controller's recovery terminate the same
    /// partitions at once; compaction records its horizon meanwhile), so
    /// neither write is lost and neither caller fails for the other.
    pub async fn update_topic_meta(
        &self,
        topic: &TopicName,
        f: impl Fn(&mut TopicMeta),
    ) -> Result<(), ResourcesError> {
        const ATTEMPTS: usize = 16;
        let path = paths::managed_ledger(topic);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = self.topic_meta(topic).await?;
            let version = current.as_ref().map(|v| v.version);
            let mut meta = current.map(|v| v.value).unwrap_or_default();
            f(&mut meta);
            match self
                .store
                .put(&path, &encode(&meta), expect_version(version))
                .await
            {
                Ok(_) => return Ok(()),
                Err(MetadataError::BadVersion { .. } | MetadataError::AlreadyExists(_))
                    if attempt < ATTEMPTS => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    pub async fn delete_topic_record(&self, topic: &TopicName) -> Result<(), ResourcesError> {
        Ok(self
            .store
            .delete(&paths::managed_ledger(topic), None)
            .await?)
    }

    /// The persistent topics recorded in a namespace (partitions of
    /// partitioned topics only once they were used).
    pub async fn recorded_topics_of(&self, ns: &str) -> Result<Vec<String>, ResourcesError> {
        let root = format!("{}/", paths::MANAGED_LEDGERS);
        Ok(self
            .store
            .list_keys(&paths::persistent_topics_of(ns))
            .await?
            .iter()
            .filter_map(|k| paths::name_from_key(&k[root.len()..]))
            .collect())
    }

    // --- schemas --------------------------------------------------------------

    /// A topic's schema history document and its version.
    pub async fn schema_history<T: DeserializeOwned>(
        &self,
        topic: &TopicName,
    ) -> Result<Option<Versioned<T>>, ResourcesError> {
        let path = paths::schema(topic);
        match self.schemas.get(&path).await? {
            None => Ok(None),
            Some(v) => Ok(Some(Versioned {
                value: decode(&path, &v.value)?,
                version: v.stat.version,
            })),
        }
    }

    /// Writes a schema history if it is still at `version` (`None`: absent).
    pub async fn put_schema_history<T: Serialize>(
        &self,
        topic: &TopicName,
        history: &T,
        version: Option<u64>,
    ) -> Result<(), MetadataError> {
        let path = paths::schema(topic);
        let put = self
            .store
            .put(&path, &encode(history), expect_version(version))
            .await;
        // Failed or not (a lost answer may have landed), the next read goes
        // to the store.
        self.schemas.forget(&path);
        put.map(|_| ())
    }

    pub async fn delete_schema_history(
        &self,
        topic: &TopicName,
        version: Option<u64>,
    ) -> Result<(), ResourcesError> {
        let path = paths::schema(topic);
        let deleted = self.store.delete(&path, version).await;
        self.schemas.forget(&path);
        Ok(deleted?)
    }

    // --- health ---------------------------------------------------------------

    /// The health check's write: a timestamp under the broker's port.
    pub async fn touch_health(&self, broker_port: u16, stamp: &str) -> Result<(), ResourcesError> {
        self.store
            .put(&paths::health(broker_port), stamp.as_bytes(), Expect::Any)
            .await?;
        Ok(())
    }
}

/// The namespaces' policies in a snapshot of `/admin/policies/` (tenants,
/// one level up, are not cached).
fn namespaces_in(snap: &CacheSnapshot, root: &str) -> BTreeMap<String, NamespacePolicies> {
    let mut out = BTreeMap::new();
    for (key, v) in &snap.entries {
        let rest = &key[root.len()..];
        if rest.matches('/').count() != 1 {
            continue;
        }
        match decode::<NamespacePolicies>(key, &v.value) {
            Ok(p) => {
                out.insert(rest.to_owned(), p);
            }
            Err(e) => error!(error = %e, "namespace left out"),
        }
    }
    out
}

/// The documents under `root` in a snapshot, by the full name of the topic
/// each key names; one that does not decode is logged as `what` and left out.
fn by_topic<T: DeserializeOwned>(
    snap: &CacheSnapshot,
    root: &str,
    what: &str,
) -> BTreeMap<String, T> {
    let mut out = BTreeMap::new();
    for (key, v) in &snap.entries {
        let Some(name) = paths::name_from_key(&key[root.len()..]) else {
            continue;
        };
        match decode::<T>(key, &v.value) {
            Ok(d) => {
                out.insert(name, d);
            }
            Err(e) => error!(error = %e, "{what} left out"),
        }
    }
    out
}

/// The partition counts in a snapshot of `/admin/partitioned-topics/`.
fn partitioned_in(snap: &CacheSnapshot, root: &str) -> BTreeMap<String, u32> {
    by_topic::<PartitionedTopicMeta>(snap, root, "partitioned topic")
        .into_iter()
        .map(|(name, m)| (name, m.partitions))
        .collect()
}

/// Topics' own policies in a snapshot of `/admin/topic-policies/`.
fn topic_policies_in(snap: &CacheSnapshot, root: &str) -> BTreeMap<String, TopicPolicies> {
    by_topic(snap, root, "topic policies")
}

/// Rebuilds `map` from every new snapshot that is not older than this
/// broker's newest write (an older one would undo that write until the next),
/// and says so on `changes` (the policy caches: loaded topics re-apply their
/// policies; not the partition counts, or every partitioned topic created
/// would walk every loaded topic). Ends when the cache is dropped.
fn follow<T: Send + 'static>(
    mut rx: tokio::sync::watch::Receiver<Arc<CacheSnapshot>>,
    written: Arc<AtomicU64>,
    map: Arc<Mutex<T>>,
    changes: Option<Arc<tokio::sync::watch::Sender<u64>>>,
    derive: impl Fn(&CacheSnapshot) -> T + Send + 'static,
) {
    tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let snap = rx.borrow_and_update().clone();
            if snap.revision < written.load(Ordering::SeqCst) {
                continue;
            }
            *map.lock() = derive(&snap);
            if let Some(c) = &changes {
                c.send_modify(|g| *g += 1);
            }
        }
        tracing::debug!("a metadata cache stopped following the store");
    });
}

#[cfg(test)]
mod tests;
