//! The one error type of the schema registry.

use crate::SchemaType;

/// Everything a schema decision can refuse.
///
/// How Pulsar reports each one to a client: `Incompatible`, `AutoUpdateDisabled`
/// and `InvalidSchemaData` all become `ServerError::IncompatibleSchema` on the
/// binary protocol (`BrokerServiceException.getClientErrorCode` treats
/// `InvalidSchemaDataException` as incompatible "for backward compatibility with
/// old clients"); on the REST API `Incompatible` is 409 and `InvalidSchemaData`
/// is 422. `SchemaNotFound` is `ServerError::TopicNotFound` in a GET_SCHEMA
/// response ("Topic not found or no-schema") and 404 on REST.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// Pulsar's `IncompatibleSchemaException`: the reason says what broke.
    #[error("{reason}")]
    Incompatible { reason: String },

    /// A producer brought a schema the topic has never seen and the namespace
    /// (or broker) forbids registering new ones (`isAllowAutoUpdateSchema`).
    #[error("Schema not found and schema auto updating is disabled.")]
    AutoUpdateDisabled,

    /// Pulsar's `InvalidSchemaDataException`: the definition is malformed for
    /// its type (unparsable Avro, data on a primitive schema, a client-side
    /// type such as AUTO_CONSUME, ...).
    #[error("Invalid schema definition data for {schema_type} schema: {reason}")]
    InvalidSchemaData {
        schema_type: SchemaType,
        reason: String,
    },

    /// Pulsar's `NotExistSchemaException`: a consumer's schema had nothing to
    /// be checked against.
    #[error("Topic does not have schema to check")]
    NoSchemaToCheck,

    /// The topic has no schema (never had one, or its latest entry is a
    /// deletion marker).
    #[error("Topic not found or no-schema")]
    SchemaNotFound,

    /// A lookup by version found nothing (never existed, or was before the
    /// latest deletion).
    #[error("Not found schema version {version}")]
    VersionNotFound { version: i64 },

    /// A schema version that cannot be decoded (binary: fewer than 8 bytes;
    /// REST: not a number).
    #[error("Invalid schema version: {0}")]
    InvalidVersion(String),

    /// A schema type name or number Pulsar does not know.
    #[error("Unknown schema type: {0}")]
    UnknownSchemaType(String),

    /// A compatibility strategy name Pulsar does not know.
    #[error("Unknown schema compatibility strategy: {0}")]
    UnknownStrategy(String),
}

impl SchemaError {
    pub(crate) fn incompatible(reason: impl Into<String>) -> Self {
        SchemaError::Incompatible {
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid(schema_type: SchemaType, reason: impl Into<String>) -> Self {
        SchemaError::InvalidSchemaData {
            schema_type,
            reason: reason.into(),
        }
    }

    /// Whether the binary protocol reports this as `ServerError::IncompatibleSchema`.
    pub fn is_incompatible_schema(&self) -> bool {
        matches!(
            self,
            SchemaError::Incompatible { .. }
                | SchemaError::AutoUpdateDisabled
                | SchemaError::InvalidSchemaData { .. }
                | SchemaError::NoSchemaToCheck
        )
    }
}

impl From<crate::schema_type::UnknownSchemaType> for SchemaError {
    fn from(e: crate::schema_type::UnknownSchemaType) -> Self {
        SchemaError::UnknownSchemaType(e.0)
    }
}
