//! Pulsar's schema types: wire numbers, REST names, and the classification the
//! registry relies on. Reading a type from its name is in `parse`.

use std::fmt;
use std::str::FromStr;

/// A schema type, as the broker sees it (`org.apache.pulsar.common.schema.SchemaType`).
///
/// Three numberings exist in Pulsar and they do not agree; this type keeps them
/// apart: [`SchemaType::wire_number`] is `Schema.Type` of `PulsarApi.proto`
/// (what PRODUCER/SUBSCRIBE/GET_SCHEMA carry), [`SchemaType::name`] is what the
/// REST API and namespace policies spell. `BYTES`, `AUTO` and `AUTO_PUBLISH` only
/// exist on the client side (negative numbers in Java) and travel as `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SchemaType {
    None,
    String,
    Json,
    Protobuf,
    Avro,
    Boolean,
    Int8,
    Int16,
    Int32,
    Int64,
    Float,
    Double,
    Date,
    Time,
    Timestamp,
    KeyValue,
    Instant,
    LocalDate,
    LocalTime,
    LocalDateTime,
    ProtobufNative,
    AutoConsume,
    External,
    Bytes,
    Auto,
    AutoPublish,
}

const ALL: [SchemaType; 26] = [
    SchemaType::None,
    SchemaType::String,
    SchemaType::Json,
    SchemaType::Protobuf,
    SchemaType::Avro,
    SchemaType::Boolean,
    SchemaType::Int8,
    SchemaType::Int16,
    SchemaType::Int32,
    SchemaType::Int64,
    SchemaType::Float,
    SchemaType::Double,
    SchemaType::Date,
    SchemaType::Time,
    SchemaType::Timestamp,
    SchemaType::KeyValue,
    SchemaType::Instant,
    SchemaType::LocalDate,
    SchemaType::LocalTime,
    SchemaType::LocalDateTime,
    SchemaType::ProtobufNative,
    SchemaType::AutoConsume,
    SchemaType::External,
    SchemaType::Bytes,
    SchemaType::Auto,
    SchemaType::AutoPublish,
];

impl SchemaType {
    /// Every type, in wire order then the client-side ones.
    pub fn all() -> &'static [SchemaType] {
        &ALL
    }

    /// The `Schema.Type` number of `PulsarApi.proto`. Client-side types
    /// (`BYTES`, `AUTO`, `AUTO_PUBLISH`) map to `None` (0), as Pulsar's
    /// `Commands.getSchemaType` does.
    pub const fn wire_number(self) -> i32 {
        match self {
            SchemaType::None => 0,
            SchemaType::String => 1,
            SchemaType::Json => 2,
            SchemaType::Protobuf => 3,
            SchemaType::Avro => 4,
            SchemaType::Boolean => 5,
            SchemaType::Int8 => 6,
            SchemaType::Int16 => 7,
            SchemaType::Int32 => 8,
            SchemaType::Int64 => 9,
            SchemaType::Float => 10,
            SchemaType::Double => 11,
            SchemaType::Date => 12,
            SchemaType::Time => 13,
            SchemaType::Timestamp => 14,
            SchemaType::KeyValue => 15,
            SchemaType::Instant => 16,
            SchemaType::LocalDate => 17,
            SchemaType::LocalTime => 18,
            SchemaType::LocalDateTime => 19,
            SchemaType::ProtobufNative => 20,
            SchemaType::AutoConsume => 21,
            SchemaType::External => 22,
            SchemaType::Bytes | SchemaType::Auto | SchemaType::AutoPublish => 0,
        }
    }

    /// The type a `Schema.Type` number names; `None` for numbers the proto does
    /// not define (the caller answers with an error instead of guessing).
    pub fn from_wire_number(number: i32) -> Option<SchemaType> {
        ALL.iter()
            .copied()
            .find(|t| t.wire_number() == number && !t.is_client_side_only())
    }

    /// The name used by the REST API (`GetSchemaResponse.type`,
    /// `PostSchemaPayload.type`) and by `KeyValue` properties such as
    /// `key.schema.type`.
    pub const fn name(self) -> &'static str {
        match self {
            SchemaType::None => "NONE",
            SchemaType::String => "STRING",
            SchemaType::Json => "JSON",
            SchemaType::Protobuf => "PROTOBUF",
            SchemaType::Avro => "AVRO",
            SchemaType::Boolean => "BOOLEAN",
            SchemaType::Int8 => "INT8",
            SchemaType::Int16 => "INT16",
            SchemaType::Int32 => "INT32",
            SchemaType::Int64 => "INT64",
            SchemaType::Float => "FLOAT",
            SchemaType::Double => "DOUBLE",
            SchemaType::Date => "DATE",
            SchemaType::Time => "TIME",
            SchemaType::Timestamp => "TIMESTAMP",
            SchemaType::KeyValue => "KEY_VALUE",
            SchemaType::Instant => "INSTANT",
            SchemaType::LocalDate => "LOCAL_DATE",
            SchemaType::LocalTime => "LOCAL_TIME",
            SchemaType::LocalDateTime => "LOCAL_DATE_TIME",
            SchemaType::ProtobufNative => "PROTOBUF_NATIVE",
            SchemaType::AutoConsume => "AUTO_CONSUME",
            SchemaType::External => "EXTERNAL",
            SchemaType::Bytes => "BYTES",
            SchemaType::Auto => "AUTO",
            SchemaType::AutoPublish => "AUTO_PUBLISH",
        }
    }

    /// Types that only exist in clients and never reach the registry as such
    /// (`BYTES` producers send no schema at all).
    pub const fn is_client_side_only(self) -> bool {
        matches!(
            self,
            SchemaType::Bytes | SchemaType::Auto | SchemaType::AutoPublish
        )
    }

    /// Pulsar's `SchemaType.isPrimitiveType`: types whose schema carries no
    /// definition.
    pub const fn is_primitive(self) -> bool {
        matches!(
            self,
            SchemaType::String
                | SchemaType::Boolean
                | SchemaType::Int8
                | SchemaType::Int16
                | SchemaType::Int32
                | SchemaType::Int64
                | SchemaType::Float
                | SchemaType::Double
                | SchemaType::Date
                | SchemaType::Time
                | SchemaType::Timestamp
                | SchemaType::Instant
                | SchemaType::LocalDate
                | SchemaType::LocalTime
                | SchemaType::LocalDateTime
                | SchemaType::Bytes
                | SchemaType::None
        )
    }

    /// Pulsar's `SchemaType.isStructType`.
    pub const fn is_struct(self) -> bool {
        matches!(
            self,
            SchemaType::Avro | SchemaType::Json | SchemaType::Protobuf | SchemaType::ProtobufNative
        )
    }

    /// Types whose definition is Avro schema JSON, compared by parsed Avro
    /// equality rather than by bytes (`SchemaRegistryServiceImpl.isUsingAvroSchemaParser`).
    pub const fn uses_avro_definition(self) -> bool {
        matches!(
            self,
            SchemaType::Avro | SchemaType::Json | SchemaType::Protobuf
        )
    }
}

impl fmt::Display for SchemaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no schema type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown schema type {0}")]
pub struct UnknownSchemaType(pub String);

impl SchemaType {
    /// The type a REST name spells. Exact, upper case, like Java's
    /// `SchemaType.valueOf`.
    pub fn from_name(name: &str) -> Result<SchemaType, UnknownSchemaType> {
        ALL.iter()
            .copied()
            .find(|t| t.name() == name)
            .ok_or_else(|| UnknownSchemaType(name.to_string()))
    }
}

impl FromStr for SchemaType {
    type Err = UnknownSchemaType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SchemaType::from_name(s)
    }
}
