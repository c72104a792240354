//! Strobe's schema registry decisions, mirroring Pulsar's
//! `SchemaRegistryServiceImpl` and its compatibility checks
//! (`AvroSchemaBasedCompatibilityCheck`, `JsonSchemaCompatibilityCheck`,
//! `ProtobufNativeSchemaCompatibilityCheck`, `KeyValueSchemaCompatibilityCheck`,
//! `SchemaCompatibilityCheck.DEFAULT`) and the topic-side rules of
//! `AbstractTopic.addSchema` / `addSchemaIfIdleOrCheckCompatible` and
//! `ServerCnx`.
//!
//! Pure decisions over a topic's stored schema history: no I/O, no protobuf
//! types (the broker maps `Schema` from the wire to [`SchemaData`]), no storage.

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
    lookup, next_version, producer_without_schema, test_compatibility,
};
pub use schema_type::SchemaType;
pub use strategy::{AutoUpdateStrategy, SchemaCompatibilityStrategy, resolve_strategy};
pub use validate::{ValidationOptions, validate_schema_data};
