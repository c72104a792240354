//! A schema as stored and compared (`SchemaData`, `SchemaHash`) and the version
//! numbers the registry hands out (`LongSchemaVersion`).

use std::collections::BTreeMap;
use std::fmt;

use crate::{SchemaError, SchemaType};

/// One schema: its type, its definition bytes and its free-form properties
/// (Pulsar's `SchemaData`; user and timestamp are the storage layer's business).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaData {
    pub schema_type: SchemaType,
    pub data: Vec<u8>,
    pub properties: BTreeMap<String, String>,
}

impl SchemaData {
    pub fn new(schema_type: SchemaType, data: impl Into<Vec<u8>>) -> SchemaData {
        SchemaData {
            schema_type,
            data: data.into(),
            properties: BTreeMap::new(),
        }
    }

    pub fn with_properties(
        mut self,
        properties: impl IntoIterator<Item = (String, String)>,
    ) -> SchemaData {
        self.properties.extend(properties);
        self
    }

    /// Pulsar's `SchemaHash` equality: SHA-256 of the definition bytes plus the
    /// type. Properties do not take part, so two schemas that differ only in
    /// properties are "the same schema". Comparing the bytes directly decides
    /// exactly what comparing their SHA-256 digests decides.
    pub fn same_hash(&self, other: &SchemaData) -> bool {
        self.schema_type == other.schema_type && self.data == other.data
    }

    /// The definition as text (lossy), for messages.
    pub fn data_text(&self) -> String {
        String::from_utf8_lossy(&self.data).into_owned()
    }
}

/// A schema version (Pulsar's `LongSchemaVersion`): 0 for the first schema of a
/// topic, one more for every later entry, deletion markers included.
///
/// The REST API shows it as a JSON number; the binary protocol carries it in
/// `schema_version` as 8 bytes, big-endian. "No schema" on the binary protocol
/// is an empty `schema_version` (Pulsar's `SchemaVersion.Empty`), which is why
/// the registry functions return `Option<SchemaVersion>` there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SchemaVersion(pub i64);

impl SchemaVersion {
    /// The 8-byte big-endian encoding of the binary protocol.
    pub fn to_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }

    /// Decodes `schema_version` bytes. Like Pulsar's
    /// `BookkeeperSchemaStorage.versionFromBytes`, the first 8 bytes are read as
    /// a big-endian long (pre-2.4 clients sent longer values) and fewer than 8
    /// bytes is an error.
    pub fn from_bytes(bytes: &[u8]) -> Result<SchemaVersion, SchemaError> {
        let head: [u8; 8] = bytes
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                SchemaError::InvalidVersion(format!(
                    "{} bytes, a schema version needs 8",
                    bytes.len()
                ))
            })?;
        Ok(SchemaVersion(i64::from_be_bytes(head)))
    }

    /// Parses the `{version}` path segment of the REST API (a decimal long).
    pub fn parse_rest(text: &str) -> Result<SchemaVersion, SchemaError> {
        text.trim()
            .parse::<i64>()
            .map(SchemaVersion)
            .map_err(|_| SchemaError::InvalidVersion(text.to_string()))
    }

    /// The encoding of an optional version on the binary protocol: empty bytes
    /// when there is none.
    pub fn optional_bytes(version: Option<SchemaVersion>) -> Vec<u8> {
        version.map(|v| v.to_bytes().to_vec()).unwrap_or_default()
    }
}

impl fmt::Display for SchemaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
