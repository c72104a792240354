//! The schema registry's storage: each topic's history of schemas (and
//! deletion markers) as JSON in the metadata store at
//! `/schemas/<tenant>/<namespace>/<topic>` (partitions share their partitioned
//! topic's schema, as in Pulsar). Every decision is `strobe-schema`'s; this
//! module reads, writes (compare-and-set on the stored version) and converts
//! to and from the wire's `Schema`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use std::sync::Arc;
use strobe_model::TopicName;
use strobe_schema::{
    ConsumerOutcome, HistoryEntry, PutOutcome, RegistryPolicy, SchemaCompatibilityStrategy,
    SchemaData, SchemaError, SchemaType, SchemaVersion, StoredSchema,
};
use strobe_wire::proto;

use crate::BrokerError;
use strobe_resources::Resources;
use strobe_resources::policies::NamespacePolicies;

/// One stored entry, in the metadata store's JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredEntry {
    pub version: i64,
    /// Pulsar's type name ("AVRO", "JSON", ...); "DELETED" for a deletion marker.
    #[serde(rename = "type")]
    pub schema_type: String,
    /// The schema definition, base64.
    #[serde(default)]
    pub data: String,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// Milliseconds since the epoch.
    pub timestamp: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoredHistory {
    entries: Vec<StoredEntry>,
}

const DELETED: &str = "DELETED";

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

impl StoredEntry {
    fn to_stored(&self, topic: &TopicName) -> Result<StoredSchema, BrokerError> {
        use base64::Engine;
        if self.schema_type == DELETED {
            return Ok(StoredSchema::deleted(self.version));
        }
        let t = SchemaType::from_name(&self.schema_type).map_err(|e| schema_err(e.into()))?;
        let data = b64()
            .decode(&self.data)
            .map_err(|e| BrokerError::CorruptMetadata {
                path: strobe_resources::paths::schema(topic),
                reason: format!("schema version {}: {e}", self.version),
            })?;
        Ok(StoredSchema::schema(
            self.version,
            SchemaData::new(t, data).with_properties(self.properties.clone()),
        ))
    }

    /// The stored schema, if this entry is one (not a deletion marker).
    pub fn schema(&self, topic: &TopicName) -> Result<Option<SchemaData>, BrokerError> {
        Ok(match self.to_stored(topic)?.entry {
            HistoryEntry::Schema(s) => Some(s),
            HistoryEntry::Deleted => None,
        })
    }
}

/// A schema error as the client sees it.
pub fn schema_err(e: SchemaError) -> BrokerError {
    match e {
        SchemaError::SchemaNotFound | SchemaError::VersionNotFound { .. } => {
            BrokerError::TopicNotFound(e.to_string())
        }
        e if e.is_incompatible_schema() => BrokerError::IncompatibleSchema(e.to_string()),
        e => BrokerError::NotAllowed(e.to_string()),
    }
}

/// The wire's `Schema` as the registry's data.
pub fn from_wire(s: &proto::Schema) -> Result<SchemaData, BrokerError> {
    let t = SchemaType::from_wire_number(s.r#type).ok_or_else(|| {
        BrokerError::IncompatibleSchema(format!("unknown schema type number {}", s.r#type))
    })?;
    Ok(SchemaData::new(t, s.schema_data.to_vec()).with_properties(
        s.properties
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone())),
    ))
}

/// The registry's data as the wire's `Schema`.
pub fn to_wire(name: &str, s: &SchemaData) -> proto::Schema {
    proto::Schema {
        name: name.to_owned(),
        schema_data: bytes::Bytes::from(s.data.clone()),
        r#type: s.schema_type.wire_number(),
        properties: s
            .properties
            .iter()
            .map(|(k, v)| proto::KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
    }
}

/// The registry settings of a topic: its own strategy, else its
/// namespace's (or the namespace's older auto-update setting), else the
/// broker's FULL; whether producers may add schemas; whether they must
/// bring one (the topic's say, else the namespace's).
pub fn policy_of(
    p: &NamespacePolicies,
    topic: Option<&strobe_tenancy::TopicPolicies>,
) -> RegistryPolicy {
    let named = |s: Option<&str>| s.and_then(|s| SchemaCompatibilityStrategy::from_name(s).ok());
    let auto_update = p
        .schema_auto_update_compatibility_strategy
        .as_deref()
        .and_then(|s| strobe_schema::AutoUpdateStrategy::from_name(s).ok());
    RegistryPolicy {
        strategy: strobe_schema::resolve_strategy(
            named(topic.and_then(|t| t.schema_compatibility_strategy.as_deref())),
            named(p.schema_compatibility_strategy.as_deref()),
            auto_update,
            SchemaCompatibilityStrategy::BROKER_DEFAULT,
        ),
        allow_auto_update: p.is_allow_auto_update_schema.unwrap_or(true),
        schema_validation_enforced: topic
            .and_then(|t| t.schema_validation_enforced)
            .or(p.schema_validation_enforced)
            .unwrap_or(false),
        ..RegistryPolicy::default()
    }
}

/// The schema registry (Pulsar's `SchemaRegistryService`) over the
/// metadata store.
#[derive(Debug)]
pub struct SchemaRegistry {
    resources: Arc<Resources>,
    /// Serialises one schema's checks and writes (each write is also a compare-and-set),
    /// keyed by the schema's path (a partitioned topic's partitions share it). One lock
    /// for the whole registry serialised every PRODUCER of the broker on a metadata read
    /// (issue 47: topics were created at ~600 a second on three brokers).
    locks: crate::service::keyed::KeyedLocks,
}

impl SchemaRegistry {
    pub fn new(resources: Arc<Resources>) -> SchemaRegistry {
        SchemaRegistry {
            resources,
            locks: Default::default(),
        }
    }

    /// Every stored entry of the topic's schema history, oldest first, and the
    /// metadata version to write against.
    pub async fn schema_history(
        &self,
        topic: &TopicName,
    ) -> Result<(Vec<StoredEntry>, Option<u64>), BrokerError> {
        match self
            .resources
            .schema_history::<StoredHistory>(topic)
            .await?
        {
            None => Ok((Vec::new(), None)),
            Some(v) => Ok((v.value.entries, Some(v.version))),
        }
    }

    async fn stored(
        &self,
        topic: &TopicName,
    ) -> Result<(Vec<StoredSchema>, Vec<StoredEntry>, Option<u64>), BrokerError> {
        let (entries, version) = self.schema_history(topic).await?;
        let stored = entries
            .iter()
            .map(|e| e.to_stored(topic))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((stored, entries, version))
    }

    async fn write_history(
        &self,
        topic: &TopicName,
        entries: Vec<StoredEntry>,
        expect: Option<u64>,
    ) -> Result<(), BrokerError> {
        self.resources
            .put_schema_history(topic, &StoredHistory { entries }, expect)
            .await
            .map_err(|e| match e {
                strobe_metadata::MetadataError::BadVersion { .. }
                | strobe_metadata::MetadataError::AlreadyExists(_) => BrokerError::ServiceNotReady(
                    format!("the schema of {topic} changed concurrently; try again"),
                ),
                other => BrokerError::Metadata(other),
            })
    }

    fn schema_policy(&self, topic: &TopicName) -> RegistryPolicy {
        policy_of(
            &self
                .resources
                .namespace_policies(topic.namespace())
                .unwrap_or_default(),
            self.resources.topic_policies(topic).as_ref(),
        )
    }

    async fn store_outcome(
        &self,
        topic: &TopicName,
        schema: &SchemaData,
        outcome: PutOutcome,
        mut entries: Vec<StoredEntry>,
        expect: Option<u64>,
    ) -> Result<SchemaVersion, BrokerError> {
        use base64::Engine;
        if let PutOutcome::Create(v) = outcome {
            entries.push(StoredEntry {
                version: v.0,
                schema_type: schema.schema_type.name().to_owned(),
                data: b64().encode(&schema.data),
                properties: schema.properties.clone(),
                timestamp: now_ms(),
            });
            self.write_history(topic, entries, expect).await?;
            tracing::info!(%topic, version = v.0, schema_type = schema.schema_type.name(), "schema added");
        }
        Ok(outcome.version())
    }

    /// PRODUCER and GET_OR_CREATE_SCHEMA: the version of `schema` for this
    /// topic, registering it if the strategy allows. `None` schema: a producer
    /// without one (allowed unless the namespace enforces schemas).
    pub async fn producer_schema(
        &self,
        topic: &TopicName,
        schema: Option<&SchemaData>,
    ) -> Result<Option<SchemaVersion>, BrokerError> {
        let _serial = self
            .locks
            .lock(&strobe_resources::paths::schema(topic))
            .await;
        let (stored, entries, version) = self.stored(topic).await?;
        let policy = self.schema_policy(topic);
        match strobe_schema::producer_schema(&stored, schema, &policy).map_err(schema_err)? {
            None => Ok(None),
            Some(outcome) => {
                let schema = schema.expect("an outcome comes from a schema");
                self.store_outcome(topic, schema, outcome, entries, version)
                    .await
                    .map(Some)
            }
        }
    }

    /// SUBSCRIBE with a schema: compatible with the topic's, or (on an idle
    /// topic without one) it becomes the topic's.
    pub async fn consumer_schema(
        &self,
        topic: &TopicName,
        schema: &SchemaData,
        topic_idle: bool,
    ) -> Result<(), BrokerError> {
        let _serial = self
            .locks
            .lock(&strobe_resources::paths::schema(topic))
            .await;
        let (stored, entries, version) = self.stored(topic).await?;
        let policy = self.schema_policy(topic);
        match strobe_schema::check_consumer(&stored, schema, &policy, topic_idle)
            .map_err(schema_err)?
        {
            ConsumerOutcome::Compatible => Ok(()),
            ConsumerOutcome::Added(outcome) => self
                .store_outcome(topic, schema, outcome, entries, version)
                .await
                .map(|_| ()),
        }
    }

    /// GET_SCHEMA and the REST GET: the latest schema, or a given version.
    pub async fn get_schema(
        &self,
        topic: &TopicName,
        version: Option<SchemaVersion>,
    ) -> Result<(SchemaVersion, SchemaData, u64), BrokerError> {
        let (stored, entries, _) = self.stored(topic).await?;
        let (v, s) = strobe_schema::lookup(&stored, version).map_err(schema_err)?;
        let ts = entries
            .iter()
            .find(|e| e.version == v.0)
            .map_or(0, |e| e.timestamp);
        Ok((v, s.clone(), ts))
    }

    /// Every live schema of the topic with its version and timestamp.
    pub async fn all_schemas(
        &self,
        topic: &TopicName,
    ) -> Result<Vec<(SchemaVersion, SchemaData, u64)>, BrokerError> {
        let (stored, entries, _) = self.stored(topic).await?;
        Ok(strobe_schema::active_schemas(&stored)
            .into_iter()
            .map(|(v, s)| {
                let ts = entries
                    .iter()
                    .find(|e| e.version == v.0)
                    .map_or(0, |e| e.timestamp);
                (v, s.clone(), ts)
            })
            .collect())
    }

    /// The REST upload (POST .../schema): as a producer would register it.
    pub async fn post_schema(
        &self,
        topic: &TopicName,
        schema: &SchemaData,
    ) -> Result<SchemaVersion, BrokerError> {
        self.producer_schema(topic, Some(schema))
            .await
            .map(|v| v.expect("a schema was given"))
    }

    /// Whether `schema` could be added now (POST .../compatibility).
    pub async fn test_schema(
        &self,
        topic: &TopicName,
        schema: &SchemaData,
    ) -> Result<(bool, SchemaCompatibilityStrategy), BrokerError> {
        let (stored, _, _) = self.stored(topic).await?;
        let policy = self.schema_policy(topic);
        let ok =
            strobe_schema::test_compatibility(&stored, schema, policy.strategy, &policy.validation)
                .is_ok();
        Ok((ok, policy.strategy))
    }

    /// DELETE .../schema: a deletion marker (taking a version), or with
    /// `force` the whole history. Returns the marker's version.
    pub async fn delete_schema(&self, topic: &TopicName, force: bool) -> Result<i64, BrokerError> {
        let _serial = self
            .locks
            .lock(&strobe_resources::paths::schema(topic))
            .await;
        let (stored, mut entries, version) = self.stored(topic).await?;
        if !strobe_schema::has_schema(&stored) {
            return Err(BrokerError::TopicNotFound(format!("{topic} has no schema")));
        }
        let next = strobe_schema::next_version(&stored).0;
        if force {
            self.resources.delete_schema_history(topic, version).await?;
            return Ok(next - 1);
        }
        entries.push(StoredEntry {
            version: next,
            schema_type: DELETED.into(),
            data: String::new(),
            properties: BTreeMap::new(),
            timestamp: now_ms(),
        });
        self.write_history(topic, entries, version).await?;
        Ok(next)
    }
}
