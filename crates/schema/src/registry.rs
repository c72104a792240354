//! A topic's schema registry as a pure state machine over its stored history:
//! what PRODUCER, SUBSCRIBE, GET_SCHEMA, GET_OR_CREATE_SCHEMA and the admin
//! schema endpoints decide (`SchemaRegistryServiceImpl`, `AbstractTopic`,
//! `PersistentTopic.addSchemaIfIdleOrCheckCompatible`, `ServerCnx`).
//!
//! The history is every stored entry of the topic, oldest first: schemas and
//! deletion markers, each with its version. Versions count up from 0 and a
//! deletion takes a version too. Only entries after the latest deletion count
//! ("trimmed" in Pulsar); a deletion as the latest entry means the topic has no
//! schema. A forced delete erases the history, and versions start at 0 again.

use crate::avro::{AvroSchema, ParseOptions};
use crate::compat::{check_refs, check_with_all, check_with_latest};
use crate::strategy::SchemaCompatibilityStrategy as S;
use crate::validate::{ValidationOptions, validate_schema_data};
use crate::{SchemaData, SchemaError, SchemaType, SchemaVersion};

/// One stored entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryEntry {
    Schema(SchemaData),
    /// A deletion marker (`DELETE .../schema` without `force`).
    Deleted,
}

/// One stored entry with its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSchema {
    pub version: SchemaVersion,
    pub entry: HistoryEntry,
}

impl StoredSchema {
    pub fn schema(version: i64, data: SchemaData) -> StoredSchema {
        StoredSchema {
            version: SchemaVersion(version),
            entry: HistoryEntry::Schema(data),
        }
    }

    pub fn deleted(version: i64) -> StoredSchema {
        StoredSchema {
            version: SchemaVersion(version),
            entry: HistoryEntry::Deleted,
        }
    }
}

/// The settings that shape a topic's schema decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryPolicy {
    /// The topic's strategy, see [`crate::resolve_strategy`].
    pub strategy: S,
    /// `is_allow_auto_update_schema` (namespace) / `isAllowAutoUpdateSchemaEnabled`
    /// (broker, default true): may producers register new schemas?
    pub allow_auto_update: bool,
    /// `schema_validation_enforced` / `isSchemaValidationEnforced` (default
    /// false): must producers of a topic with a schema bring one?
    pub schema_validation_enforced: bool,
    pub validation: ValidationOptions,
}

impl Default for RegistryPolicy {
    fn default() -> Self {
        RegistryPolicy {
            strategy: S::BROKER_DEFAULT,
            allow_auto_update: true,
            schema_validation_enforced: false,
            validation: ValidationOptions::default(),
        }
    }
}

/// What a schema brought by a producer (or added by a consumer, or uploaded)
/// resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The topic already has this schema: use its version, store nothing.
    Existing(SchemaVersion),
    /// Store the schema under this new version.
    Create(SchemaVersion),
}

impl PutOutcome {
    pub fn version(self) -> SchemaVersion {
        match self {
            PutOutcome::Existing(v) | PutOutcome::Create(v) => v,
        }
    }
}

/// What a subscriber's schema resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerOutcome {
    /// Compatible with what the topic has; nothing to store.
    Compatible,
    /// The topic was idle and had no schema: the subscriber's schema becomes
    /// the topic's (by the producer rules, so it may also be `Existing`).
    Added(PutOutcome),
}

/// The schemas that count: every schema after the latest deletion, oldest
/// first (`trimDeletedSchemaAndGetList`).
pub fn active_schemas(history: &[StoredSchema]) -> Vec<(SchemaVersion, &SchemaData)> {
    let start = history
        .iter()
        .rposition(|e| e.entry == HistoryEntry::Deleted)
        .map_or(0, |i| i + 1);
    history[start..]
        .iter()
        .filter_map(|e| match &e.entry {
            HistoryEntry::Schema(s) => Some((e.version, s)),
            HistoryEntry::Deleted => None,
        })
        .collect()
}

/// The topic's current schema: the latest entry unless it is a deletion
/// (`getSchema(id)`).
pub fn latest(history: &[StoredSchema]) -> Option<(SchemaVersion, &SchemaData)> {
    match history.last() {
        Some(StoredSchema {
            version,
            entry: HistoryEntry::Schema(s),
        }) => Some((*version, s)),
        _ => None,
    }
}

/// Whether the topic has a schema (`Topic.hasSchema`).
pub fn has_schema(history: &[StoredSchema]) -> bool {
    latest(history).is_some()
}

/// The version the next stored entry gets.
pub fn next_version(history: &[StoredSchema]) -> SchemaVersion {
    history
        .last()
        .map_or(SchemaVersion(0), |e| SchemaVersion(e.version.0 + 1))
}

/// GET_SCHEMA and `GET /admin/v2/schemas/.../schema[/{version}]`: the latest
/// schema, or the one with the given version if it is still active (versions
/// before the latest deletion are gone).
///
/// One difference from Pulsar: when the latest entry is a deletion marker,
/// Pulsar's GET_SCHEMA without a version answers with the marker itself (type
/// NONE, no definition, the marker's version) while its REST API answers 404;
/// this answers [`SchemaError::SchemaNotFound`] for both, which Java clients
/// treat as "no schema" either way.
pub fn lookup(
    history: &[StoredSchema],
    version: Option<SchemaVersion>,
) -> Result<(SchemaVersion, &SchemaData), SchemaError> {
    match version {
        None => latest(history).ok_or(SchemaError::SchemaNotFound),
        Some(v) => active_schemas(history)
            .into_iter()
            .find(|(av, _)| *av == v)
            .ok_or(SchemaError::VersionNotFound { version: v.0 }),
    }
}

/// `POST /admin/v2/schemas/.../version`: the version of an active schema with
/// the same type and definition bytes, if any (`findSchemaVersion`; Pulsar
/// answers -1 for none).
pub fn find_version(history: &[StoredSchema], schema: &SchemaData) -> Option<SchemaVersion> {
    active_schemas(history)
        .into_iter()
        .find(|(_, s)| s.same_hash(schema))
        .map(|(v, _)| v)
}

/// The version of an active schema that is "the same" as `schema`
/// (`getSchemaVersionBySchemaData`): for AVRO, JSON and PROTOBUF, equal as
/// parsed Avro schemas (whitespace, key order, docs and aliases do not matter)
/// and of the same type; otherwise the same type and bytes. The oldest match
/// wins.
///
/// Pulsar parses with default validation here, so a definition with an
/// invalid field default fails this lookup (with an error, not "not found")
/// once the topic has schemas; definitions that are not Avro at all (pre-2.3
/// JSON-Schema) are compared by bytes instead of failing.
fn same_schema_version(
    active: &[(SchemaVersion, &SchemaData)],
    schema: &SchemaData,
) -> Result<Option<SchemaVersion>, SchemaError> {
    if active.is_empty() {
        return Ok(None);
    }
    let strict = ParseOptions {
        validate_defaults: true,
    };
    let parse = |s: &SchemaData| -> Result<Option<AvroSchema>, SchemaError> {
        match AvroSchema::parse_with(&String::from_utf8_lossy(&s.data), strict) {
            Ok(p) => Ok(Some(p)),
            Err(e) if e.0.starts_with("Invalid default") => {
                Err(SchemaError::invalid(s.schema_type, e.0))
            }
            Err(_) => Ok(None),
        }
    };
    let new = if schema.schema_type.uses_avro_definition() {
        parse(schema)?
    } else {
        None
    };
    for (version, existing) in active {
        if existing.schema_type != schema.schema_type {
            continue;
        }
        let same = match &new {
            Some(new) if existing.schema_type.uses_avro_definition() => match parse(existing)? {
                Some(old) => old == *new,
                None => existing.data == schema.data,
            },
            _ => existing.data == schema.data,
        };
        if same {
            return Ok(Some(*version));
        }
    }
    Ok(None)
}

/// The producer path: a PRODUCER (or GET_OR_CREATE_SCHEMA, or an admin
/// upload with `allow_auto_update` set) bringing `schema`
/// (`AbstractTopic.addSchema`, `putSchemaIfAbsent`).
///
/// With auto update allowed: the definition is validated; a schema the topic
/// already has (see above) gets its existing version; otherwise the schema must
/// be compatible under the policy's strategy (against the latest schema, or
/// every active one for `*_TRANSITIVE`) and is created with the next version.
/// An empty history, or one whose latest entry is a deletion, accepts any valid
/// schema: version 0 for a fresh topic, the next version after a deletion.
///
/// With auto update disabled: only a schema the topic already has is accepted
/// ([`SchemaError::AutoUpdateDisabled`] otherwise, even on a topic without
/// schema). Admin uploads (`POST .../schema`) ignore that setting: pass a
/// policy with `allow_auto_update` set.
pub fn get_or_create(
    history: &[StoredSchema],
    schema: &SchemaData,
    policy: &RegistryPolicy,
) -> Result<PutOutcome, SchemaError> {
    let active = active_schemas(history);
    if !policy.allow_auto_update {
        return match same_schema_version(&active, schema)? {
            Some(v) => Ok(PutOutcome::Existing(v)),
            None => Err(SchemaError::AutoUpdateDisabled),
        };
    }
    validate_schema_data(schema, &policy.validation)?;
    if let Some(v) = same_schema_version(&active, schema)? {
        return Ok(PutOutcome::Existing(v));
    }
    let refs: Vec<&SchemaData> = active.iter().map(|(_, s)| *s).collect();
    check_refs(schema, &refs, policy.strategy)?;
    Ok(PutOutcome::Create(next_version(history)))
}

/// PRODUCER and GET_OR_CREATE_SCHEMA: `schema` is the command's schema, `None`
/// when it has none (BYTES producers) or, for GET_OR_CREATE_SCHEMA only, when
/// its type is NONE (`ServerCnx.tryAddSchema`). `Ok(None)`: the producer
/// carries no schema version (an empty `schema_version` in the response).
pub fn producer_schema(
    history: &[StoredSchema],
    schema: Option<&SchemaData>,
    policy: &RegistryPolicy,
) -> Result<Option<PutOutcome>, SchemaError> {
    match schema {
        Some(schema) => get_or_create(history, schema, policy).map(Some),
        None => producer_without_schema(history, policy).map(|()| None),
    }
}

/// A producer without a schema (BYTES, which clients do not send, or a
/// GET_OR_CREATE_SCHEMA of type NONE): refused only if the topic has a schema
/// and validation is enforced; otherwise its messages carry no schema version
/// (`ServerCnx.tryAddSchema`).
pub fn producer_without_schema(
    history: &[StoredSchema],
    policy: &RegistryPolicy,
) -> Result<(), SchemaError> {
    if has_schema(history) && policy.schema_validation_enforced {
        Err(SchemaError::incompatible(
            "Producers cannot connect or send message without a schema to topics with a schema",
        ))
    } else {
        Ok(())
    }
}

/// Whether a subscriber's schema is compatible with the topic's
/// (`checkConsumerCompatibility`). `ALWAYS_COMPATIBLE` accepts anything. With a
/// schema on the topic: `BACKWARD`, `FORWARD`, `FORWARD_TRANSITIVE` and `FULL`
/// require that the subscriber's schema can read data written with the latest
/// schema (a BACKWARD check against the latest, same type required, identical
/// bytes always fine); `BACKWARD_TRANSITIVE`, `FULL_TRANSITIVE` and
/// `ALWAYS_INCOMPATIBLE` check against every active schema with the strategy
/// itself (so `ALWAYS_INCOMPATIBLE` refuses every subscriber schema). Without a
/// schema on the topic: [`SchemaError::NoSchemaToCheck`].
pub fn check_consumer_compatibility(
    history: &[StoredSchema],
    schema: &SchemaData,
    strategy: S,
) -> Result<(), SchemaError> {
    let strategy = strategy.effective();
    if strategy == S::AlwaysCompatible {
        return Ok(());
    }
    let Some((_, current)) = latest(history) else {
        return Err(SchemaError::NoSchemaToCheck);
    };
    match strategy {
        S::Backward | S::Forward | S::ForwardTransitive | S::Full => {
            check_with_latest(schema, current, S::Backward)
        }
        _ => {
            let active = active_schemas(history);
            let refs: Vec<&SchemaData> = active.iter().map(|(_, s)| *s).collect();
            check_with_all(schema, &refs, strategy)
        }
    }
}

/// The consumer path: SUBSCRIBE (consumers and readers) with `schema`
/// (`ServerCnx.handleSubscribe` + `addSchemaIfIdleOrCheckCompatible`).
///
/// - An AUTO_CONSUME schema is not checked at all.
/// - If the topic has a schema, or is not idle, the subscriber's schema must
///   pass [`check_consumer_compatibility`]; an active topic without a schema
///   (only schema-less producers so far) refuses it.
/// - An idle topic without a schema takes the subscriber's schema as its own,
///   by the producer rules ([`get_or_create`]), so the first consumer of a new
///   topic creates version 0.
///
/// `topic_idle` is Pulsar's condition for "idle": no producers connected, no
/// consumer connected other than AUTO_CONSUME ones, and nothing ever written
/// (the managed ledger is empty).
pub fn check_consumer(
    history: &[StoredSchema],
    schema: &SchemaData,
    policy: &RegistryPolicy,
    topic_idle: bool,
) -> Result<ConsumerOutcome, SchemaError> {
    if schema.schema_type == SchemaType::AutoConsume {
        return Ok(ConsumerOutcome::Compatible);
    }
    if has_schema(history) || !topic_idle {
        return match check_consumer_compatibility(history, schema, policy.strategy) {
            Ok(()) => Ok(ConsumerOutcome::Compatible),
            Err(SchemaError::NoSchemaToCheck) => Err(SchemaError::incompatible(format!(
                "Failed to add schema to an active topic with empty(BYTES) schema: new schema type {}",
                schema.schema_type
            ))),
            Err(e) => Err(e),
        };
    }
    get_or_create(history, schema, policy).map(ConsumerOutcome::Added)
}

/// `POST /admin/v2/schemas/.../compatibility`: whether `schema` could be added
/// under `strategy` (`isCompatible`: validation, then the same checks as
/// [`get_or_create`] without the "already exists" shortcut).
pub fn test_compatibility(
    history: &[StoredSchema],
    schema: &SchemaData,
    strategy: S,
    validation: &ValidationOptions,
) -> Result<(), SchemaError> {
    validate_schema_data(schema, validation)?;
    let active = active_schemas(history);
    let refs: Vec<&SchemaData> = active.iter().map(|(_, s)| *s).collect();
    check_refs(schema, &refs, strategy)
}
