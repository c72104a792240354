//! Is a schema definition well formed for its type? (`SchemaDataValidator` and
//! its per-type validators; Pulsar runs them before storing a schema.)

use crate::avro::AvroSchema;
use crate::key_value::decode_key_value;
use crate::protobuf_native::protobuf_native_root_message;
use crate::{SchemaData, SchemaError, SchemaType};

/// Validation switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ValidationOptions {
    /// Accept a JSON schema whose definition is a Jackson/JSON-Schema document
    /// instead of Avro JSON (the broker setting
    /// `schemaJsonAllowLegacyJacksonFormat`, off by default in Pulsar 4.2).
    pub json_allow_legacy_jackson_format: bool,
}

/// The Python client sends `json.dumps(None)` as the definition of a STRING
/// schema; Pulsar accepts exactly that besides empty data.
const PY_NONE_SCHEMA_INFO: &[u8] = b"null";

/// Checks a definition against its type, as Pulsar does before storing it.
///
/// - AVRO, JSON, PROTOBUF: Avro schema JSON (names validated, defaults not);
///   an AVRO schema may not be a union at the top level; a JSON schema may be a
///   legacy JSON-Schema document when the option allows it.
/// - PROTOBUF_NATIVE: the descriptor set must contain the root message.
/// - STRING: empty, or `null` (Python).
/// - the other primitives (BOOLEAN ... LOCAL_DATE_TIME): empty.
/// - NONE, BYTES, EXTERNAL: anything.
/// - KEY_VALUE: both components, recursively.
/// - AUTO, AUTO_CONSUME, AUTO_PUBLISH: refused, they are client-side types.
pub fn validate_schema_data(
    schema: &SchemaData,
    options: &ValidationOptions,
) -> Result<(), SchemaError> {
    let t = schema.schema_type;
    match t {
        SchemaType::Avro | SchemaType::Json | SchemaType::Protobuf => {
            let text = String::from_utf8_lossy(&schema.data);
            match AvroSchema::parse(&text) {
                Ok(parsed) => {
                    if t == SchemaType::Avro && parsed.is_union() {
                        return Err(SchemaError::invalid(
                            t,
                            "Avro schema typed [UNION] is not supported",
                        ));
                    }
                    Ok(())
                }
                Err(e) => {
                    if t == SchemaType::Json
                        && options.json_allow_legacy_jackson_format
                        && is_legacy_json_schema(&schema.data)
                    {
                        Ok(())
                    } else {
                        Err(SchemaError::invalid(t, e.to_string()))
                    }
                }
            }
        }
        SchemaType::ProtobufNative => protobuf_native_root_message(&schema.data)
            .map(|_| ())
            .map_err(|e| {
                SchemaError::invalid(t, format!("deserialize ProtobufNative Schema failed: {e}"))
            }),
        SchemaType::String => {
            if schema.data.is_empty() || schema.data == PY_NONE_SCHEMA_INFO {
                Ok(())
            } else {
                Err(SchemaError::invalid(
                    t,
                    format!(
                        "a string schema has no definition, got '{}'",
                        schema.data_text()
                    ),
                ))
            }
        }
        SchemaType::Boolean
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
        | SchemaType::LocalDateTime => {
            if schema.data.is_empty() {
                Ok(())
            } else {
                Err(SchemaError::invalid(
                    t,
                    format!(
                        "length of schema data should be zero, but {} bytes is found",
                        schema.data.len()
                    ),
                ))
            }
        }
        SchemaType::None | SchemaType::Bytes | SchemaType::External => Ok(()),
        SchemaType::Auto | SchemaType::AutoConsume | SchemaType::AutoPublish => Err(
            SchemaError::invalid(t, format!("Schema {t} is a client-side schema type")),
        ),
        SchemaType::KeyValue => {
            let kv = decode_key_value(schema)?;
            validate_schema_data(&kv.key, options)?;
            validate_schema_data(&kv.value, options)
        }
    }
}

/// Whether a definition reads as Jackson's `JsonSchema` (the format of JSON
/// schemas before Pulsar 2.3): a JSON object whose `type` is a JSON-Schema type.
pub(crate) fn is_legacy_json_schema(data: &[u8]) -> bool {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return false;
    };
    matches!(
        value.get("type").and_then(serde_json::Value::as_str),
        Some("object" | "array" | "string" | "integer" | "number" | "boolean" | "null" | "any")
    )
}
