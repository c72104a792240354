//! Compatibility of a new schema with a topic's existing ones
//! (`SchemaRegistryServiceImpl.checkCompatibilityWithLatest` /
//! `checkCompatibilityWithAll` and the per-type `SchemaCompatibilityCheck`s
//! registered by default: AVRO, JSON, PROTOBUF_NATIVE, KEY_VALUE, EXTERNAL; every
//! other type gets `SchemaCompatibilityCheck.DEFAULT`).

use crate::avro::{AvroSchema, Resolution, can_read_with};
use crate::key_value::decode_key_value;
use crate::protobuf_native::protobuf_native_root_message;
use crate::strategy::SchemaCompatibilityStrategy as S;
use crate::validate::is_legacy_json_schema;
use crate::{SchemaData, SchemaError, SchemaType};

/// Checks `new` against `existing` (oldest first, everything since the latest
/// deletion) under `strategy`, as Pulsar's registry does when a schema is about
/// to be added.
///
/// - `ALWAYS_COMPATIBLE`: anything goes, even a different type.
/// - no existing schema: compatible.
/// - plain strategies (and `ALWAYS_INCOMPATIBLE`) look at the latest schema only:
///   a different type is incompatible; the same type and definition bytes
///   (Pulsar's `SchemaHash`) is compatible; otherwise the type's own check runs.
/// - `*_TRANSITIVE` look at every existing schema: any different type is
///   incompatible, then the type's own check runs against all of them (no
///   shortcut for identical ones).
///
/// Per type: AVRO and JSON resolve Avro schemas with [`Resolution::Pulsar`]
/// (`BACKWARD`: the new schema reads data written with the existing one;
/// `FORWARD`: the existing one reads data written with the new one; `FULL`:
/// both). A JSON schema in the pre-2.3 JSON-Schema format is compatible with an
/// Avro-format one either way (latest-only strategies), and two such compare by
/// their `id`. PROTOBUF_NATIVE only refuses a change of root message (and every
/// change under `ALWAYS_INCOMPATIBLE`). KEY_VALUE needs both sides KEY_VALUE with
/// the same component types, then checks key and value each with its type's
/// rule. EXTERNAL accepts EXTERNAL. Every other type (PROTOBUF, STRING, INT32,
/// ..., NONE) has no evolution rule: only `ALWAYS_INCOMPATIBLE` refuses.
///
/// `UNDEFINED` is treated as the broker default, FULL.
pub fn check_compatibility(
    new: &SchemaData,
    existing: &[SchemaData],
    strategy: S,
) -> Result<(), SchemaError> {
    let strategy = strategy.effective();
    let refs: Vec<&SchemaData> = existing.iter().collect();
    check_refs(new, &refs, strategy)
}

pub(crate) fn check_refs(
    new: &SchemaData,
    existing: &[&SchemaData],
    strategy: S,
) -> Result<(), SchemaError> {
    let strategy = strategy.effective();
    let Some(latest) = existing.last() else {
        return Ok(());
    };
    if strategy == S::AlwaysCompatible {
        return Ok(());
    }
    if strategy.is_transitive() {
        check_with_all(new, existing, strategy)
    } else {
        check_with_latest(new, latest, strategy)
    }
}

fn type_changed(existing: SchemaType, new: SchemaType) -> SchemaError {
    SchemaError::incompatible(format!(
        "Incompatible schema: exists schema type {existing}, new schema type {new}"
    ))
}

pub(crate) fn check_with_latest(
    new: &SchemaData,
    latest: &SchemaData,
    strategy: S,
) -> Result<(), SchemaError> {
    if strategy == S::AlwaysCompatible {
        return Ok(());
    }
    if new.schema_type != latest.schema_type {
        return Err(type_changed(latest.schema_type, new.schema_type));
    }
    if new.same_hash(latest) {
        return Ok(());
    }
    check_type_single(latest, new, strategy)
}

pub(crate) fn check_with_all(
    new: &SchemaData,
    existing: &[&SchemaData],
    strategy: S,
) -> Result<(), SchemaError> {
    if strategy == S::AlwaysCompatible {
        return Ok(());
    }
    if let Some(other) = existing.iter().find(|s| s.schema_type != new.schema_type) {
        return Err(type_changed(other.schema_type, new.schema_type));
    }
    check_type_list(existing, new, strategy)
}

/// `SchemaCompatibilityCheck.checkCompatible(from, to, strategy)` of the type's checker.
fn check_type_single(from: &SchemaData, to: &SchemaData, strategy: S) -> Result<(), SchemaError> {
    match to.schema_type {
        SchemaType::Json => check_json_single(from, to, strategy),
        _ => check_type_list(&[from], to, strategy),
    }
}

/// `SchemaCompatibilityCheck.checkCompatible(Iterable from, to, strategy)`;
/// `from` oldest first.
fn check_type_list(from: &[&SchemaData], to: &SchemaData, strategy: S) -> Result<(), SchemaError> {
    match to.schema_type {
        SchemaType::Avro | SchemaType::Json => check_avro_based(from, to, strategy),
        SchemaType::ProtobufNative => from
            .iter()
            .try_for_each(|f| check_protobuf_native(f, to, strategy)),
        SchemaType::KeyValue => check_key_value(from, to, strategy),
        SchemaType::External => Ok(()),
        _ => check_default(strategy),
    }
}

/// `SchemaCompatibilityCheck.DEFAULT`.
fn check_default(strategy: S) -> Result<(), SchemaError> {
    if strategy == S::AlwaysIncompatible {
        Err(SchemaError::incompatible(
            "Schema compatibility strategy is ALWAYS_INCOMPATIBLE",
        ))
    } else {
        Ok(())
    }
}

enum Direction {
    /// The new schema reads data written with the existing one.
    CanRead,
    /// The existing schema reads data written with the new one.
    CanBeRead,
    Mutual,
}

/// `AvroSchemaBasedCompatibilityCheck`: parse everything, then validate with
/// Avro's `SchemaValidator` for the strategy (latest only, or all).
fn check_avro_based(from: &[&SchemaData], to: &SchemaData, strategy: S) -> Result<(), SchemaError> {
    let parse = |s: &SchemaData| {
        AvroSchema::parse(&String::from_utf8_lossy(&s.data))
            .map_err(|e| SchemaError::incompatible(format!("Error during schema parsing: {e}")))
    };
    let mut existing = from
        .iter()
        .map(|s| parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let new = parse(to)?;
    let direction = match strategy {
        S::AlwaysCompatible => return Ok(()),
        S::Backward | S::BackwardTransitive => Direction::CanRead,
        S::Forward | S::ForwardTransitive => Direction::CanBeRead,
        S::Full | S::FullTransitive => Direction::Mutual,
        S::AlwaysIncompatible | S::Undefined => {
            return if existing.is_empty() {
                Ok(())
            } else {
                Err(SchemaError::incompatible(format!(
                    "Error during schema compatibility check with strategy {strategy}: \
                     the strategy accepts no new schema"
                )))
            };
        }
    };
    if !strategy.is_transitive() {
        // Avro's ValidateLatest: the newest existing schema only.
        existing = existing.split_off(existing.len().saturating_sub(1));
    }
    let fail = |what: &str, e: crate::avro::Incompatibility| {
        SchemaError::incompatible(format!(
            "Error during schema compatibility check with strategy {strategy}: {what}: {e}"
        ))
    };
    for old in existing.iter().rev() {
        if matches!(direction, Direction::CanBeRead | Direction::Mutual) {
            can_read_with(old, &new, Resolution::Pulsar).map_err(|e| {
                fail(
                    "an existing schema cannot read data written with the new schema",
                    e,
                )
            })?;
        }
        if matches!(direction, Direction::CanRead | Direction::Mutual) {
            can_read_with(&new, old, Resolution::Pulsar).map_err(|e| {
                fail(
                    "the new schema cannot read data written with an existing schema",
                    e,
                )
            })?;
        }
    }
    Ok(())
}

/// `JsonSchemaCompatibilityCheck.checkCompatible(from, to)`: tolerant of the
/// pre-2.3 JSON-Schema definitions.
fn check_json_single(from: &SchemaData, to: &SchemaData, strategy: S) -> Result<(), SchemaError> {
    let is_avro = |s: &SchemaData| AvroSchema::parse(&String::from_utf8_lossy(&s.data)).is_ok();
    match (is_avro(from), is_avro(to)) {
        (true, true) => check_avro_based(&[from], to, strategy),
        // Existing Avro, an old client brought a JSON-Schema: let it produce.
        (true, false) if is_legacy_json_schema(&to.data) => Ok(()),
        (true, false) => Err(SchemaError::incompatible("Unknown schema format")),
        (false, _) if is_legacy_json_schema(&from.data) => {
            if is_avro(to) {
                // The Avro format replaces the old one.
                Ok(())
            } else if is_legacy_json_schema(&to.data) {
                let id = |s: &SchemaData| {
                    serde_json::from_slice::<serde_json::Value>(&s.data)
                        .ok()
                        .and_then(|v| v.get("id").and_then(|i| i.as_str().map(str::to_string)))
                };
                match (id(from), id(to)) {
                    (Some(a), Some(b)) if a == b => Ok(()),
                    _ => Err(SchemaError::incompatible(format!(
                        "Incompatible Schema from {} + to {}",
                        from.data_text(),
                        to.data_text()
                    ))),
                }
            } else {
                Err(SchemaError::incompatible("Unknown schema format"))
            }
        }
        // The broker holds something unrecognisable: let the new one overwrite it.
        (false, _) => Ok(()),
    }
}

/// `ProtobufNativeSchemaCompatibilityCheck`: the root message may not change.
fn check_protobuf_native(
    from: &SchemaData,
    to: &SchemaData,
    strategy: S,
) -> Result<(), SchemaError> {
    let root = |s: &SchemaData| {
        protobuf_native_root_message(&s.data).map_err(|e| {
            SchemaError::incompatible(format!("cannot read the PROTOBUF_NATIVE definition: {e}"))
        })
    };
    let (old, new) = (root(from)?, root(to)?);
    match strategy {
        S::AlwaysCompatible => Ok(()),
        S::Backward
        | S::BackwardTransitive
        | S::Forward
        | S::ForwardTransitive
        | S::Full
        | S::FullTransitive => {
            if old == new {
                Ok(())
            } else {
                Err(SchemaError::incompatible(format!(
                    "Protobuf root message isn't allow change! ({old} -> {new})"
                )))
            }
        }
        S::AlwaysIncompatible | S::Undefined => Err(SchemaError::incompatible(
            "Unknown SchemaCompatibilityStrategy.",
        )),
    }
}

/// `KeyValueSchemaCompatibilityCheck`: component by component.
fn check_key_value(from: &[&SchemaData], to: &SchemaData, strategy: S) -> Result<(), SchemaError> {
    if strategy == S::AlwaysCompatible {
        return Ok(());
    }
    if to.schema_type != SchemaType::KeyValue {
        return Err(SchemaError::incompatible(
            "To schema is not a KEY_VALUE schema.",
        ));
    }
    let decode =
        |s: &SchemaData| decode_key_value(s).map_err(|e| SchemaError::incompatible(e.to_string()));
    let new = decode(to)?;
    let mut keys = Vec::with_capacity(from.len());
    let mut values = Vec::with_capacity(from.len());
    for s in from {
        if s.schema_type != SchemaType::KeyValue {
            return Err(SchemaError::incompatible(
                "From schema is not a KEY_VALUE schema.",
            ));
        }
        let old = decode(s)?;
        if old.key.schema_type != new.key.schema_type
            || old.value.schema_type != new.value.schema_type
        {
            return Err(SchemaError::incompatible(format!(
                "Key schemas or Value schemas are different schema type, from key schema type is {} \
                 and to key schema is {}, from value schema is {} and to value schema is {}",
                old.key.schema_type,
                new.key.schema_type,
                old.value.schema_type,
                new.value.schema_type
            )));
        }
        keys.push(old.key);
        values.push(old.value);
    }
    let key_refs: Vec<&SchemaData> = keys.iter().collect();
    let value_refs: Vec<&SchemaData> = values.iter().collect();
    check_type_list(&key_refs, &new.key, strategy)?;
    check_type_list(&value_refs, &new.value, strategy)
}
