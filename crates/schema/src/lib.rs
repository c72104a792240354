//! Strobe's schema registry decisions, mirroring Pulsar's
//! `SchemaRegistryServiceImpl` and its compatibility checks
//! (`AvroSchemaBasedCompatibilityCheck`, `JsonSchemaCompatibilityCheck`,
//! `ProtobufNativeSchemaCompatibilityCheck`, `KeyValueSchemaCompatibilityCheck`,
//! `SchemaCompatibilityCheck.DEFAULT`) and the topic-side rules of
//! `AbstractTopic.addSchema` / `addSchemaIfIdleOrCheckCompatible` and
//! `ServerCnx`.
//!
//! Pure decisions over a topic's stored schema history: no I/O, no protobuf
//! types (the broker maps `Schema` from the wire to [`SchemaData`] with
//! [`SchemaType::from_wire_number`]), no storage.
//!
//! How the broker uses it, command by command:
//!
//! - PRODUCER: [`producer_schema`] with the command's schema (or none) and the
//!   topic's [`RegistryPolicy`] (strategy from [`resolve_strategy`]). A
//!   [`PutOutcome::Create`] is stored before answering; the version goes into
//!   `PRODUCER_SUCCESS.schema_version` ([`SchemaVersion::to_bytes`], empty
//!   when none).
//! - SUBSCRIBE (consumers and readers) with a schema: [`check_consumer`], told
//!   whether the topic is idle; [`ConsumerOutcome::Added`] stores the schema.
//! - GET_SCHEMA: [`lookup`] with the requested version
//!   ([`SchemaVersion::from_bytes`]) or the latest.
//! - GET_OR_CREATE_SCHEMA: [`producer_schema`], passing `None` for type NONE.
//! - REST `/admin/v2/schemas/...`: [`lookup`], [`active_schemas`] (all
//!   versions), [`get_or_create`] with auto update allowed (upload),
//!   [`next_version`] (a deletion marker's version), [`find_version`],
//!   [`test_compatibility`]; KEY_VALUE definitions convert with
//!   [`key_value::key_value_data_to_rest_json`] and back.
//!
//! What clients send, which shapes these rules: BYTES producers and consumers
//! send no schema at all (Java, C++ and Python clients alike); the Python
//! client's STRING schema has the definition `null`; AUTO_CONSUME consumers
//! send type AUTO_CONSUME, which is never checked; AUTO_PUBLISH
//! (`AUTO_PRODUCE_BYTES`) producers fetch the topic's schema with GET_SCHEMA
//! and send it back, or send none, so the broker needs no rule for them.

pub mod avro;
mod compat;
mod data;
mod error;
pub mod key_value;
mod protobuf_native;
mod registry;
mod schema_type;
mod strategy;
mod validate;

pub use compat::check_compatibility;
pub use data::{SchemaData, SchemaVersion};
pub use error::SchemaError;
pub use key_value::{KeyValueEncoding, KeyValueSchema, decode_key_value, encode_key_value};
pub use protobuf_native::{ProtobufNativeDefinition, protobuf_native_root_message};
pub use registry::{
    ConsumerOutcome, HistoryEntry, PutOutcome, RegistryPolicy, StoredSchema, active_schemas,
    check_consumer, check_consumer_compatibility, find_version, get_or_create, has_schema, latest,
    lookup, next_version, producer_schema, producer_without_schema, test_compatibility,
};
pub use schema_type::{SchemaType, UnknownSchemaType};
pub use strategy::{AutoUpdateStrategy, SchemaCompatibilityStrategy, resolve_strategy};
pub use validate::{ValidationOptions, validate_schema_data};
