//! The registry state machine, compatibility per strategy and per type, the
//! KeyValue layout, versions and names.

// `&[x.clone()]` reads better than `std::slice::from_ref(&x)` in these tables.
#![allow(clippy::cloned_ref_to_slice_refs)]

use std::collections::BTreeMap;

use serde_json::json;
use strobe_schema::key_value::{
    join_key_value_data, key_value_data_from_rest_json, key_value_data_to_rest_json,
    split_key_value_data,
};
use strobe_schema::{
    AutoUpdateStrategy, ConsumerOutcome, KeyValueEncoding, KeyValueSchema, PutOutcome,
    RegistryPolicy, SchemaCompatibilityStrategy as S, SchemaData, SchemaError, SchemaType,
    SchemaVersion, StoredSchema, ValidationOptions, active_schemas, check_compatibility,
    check_consumer, check_consumer_compatibility, decode_key_value, encode_key_value, find_version,
    get_or_create, has_schema, latest, lookup, next_version, producer_schema,
    producer_without_schema, resolve_strategy, test_compatibility, validate_schema_data,
};

fn avro(v: serde_json::Value) -> SchemaData {
    SchemaData::new(SchemaType::Avro, v.to_string())
}

fn json_schema(v: serde_json::Value) -> SchemaData {
    SchemaData::new(SchemaType::Json, v.to_string())
}

fn rec(fields: serde_json::Value) -> serde_json::Value {
    json!({"type": "record", "name": "R", "fields": fields})
}

fn history(schemas: &[SchemaData]) -> Vec<StoredSchema> {
    schemas
        .iter()
        .enumerate()
        .map(|(i, s)| StoredSchema::schema(i as i64, s.clone()))
        .collect()
}

fn policy(strategy: S) -> RegistryPolicy {
    RegistryPolicy {
        strategy,
        ..RegistryPolicy::default()
    }
}

fn reason(e: SchemaError) -> String {
    match e {
        SchemaError::Incompatible { reason } => reason,
        other => panic!("not an incompatibility: {other:?}"),
    }
}

// ---- names, numbers, versions ----

#[test]
fn schema_type_wire_numbers_match_the_proto() {
    let proto = include_str!("../../../proto/PulsarApi.proto");
    let start = proto.find("message Schema {").unwrap();
    let body = &proto[start..start + proto[start..].find("required string name").unwrap()];
    let mut seen = 0;
    for line in body.lines() {
        let Some((name, number)) = line.trim().trim_end_matches(';').split_once(" = ") else {
            continue;
        };
        let number: i32 = number.trim().parse().unwrap();
        let t = SchemaType::from_wire_number(number).unwrap_or_else(|| panic!("{name} = {number}"));
        assert_eq!(t.wire_number(), number, "{name}");
        let expected = name.trim().to_ascii_uppercase().replace("BOOL", "BOOLEAN");
        assert_eq!(t.name().replace('_', ""), expected, "{name}");
        seen += 1;
    }
    assert_eq!(seen, 23);
    assert_eq!(SchemaType::from_wire_number(23), None);
    assert_eq!(SchemaType::from_wire_number(-1), None);
    // Client-side types travel as None.
    for t in [SchemaType::Bytes, SchemaType::Auto, SchemaType::AutoPublish] {
        assert_eq!(t.wire_number(), 0);
    }
}

#[test]
fn schema_type_names_round_trip() {
    for &t in SchemaType::all() {
        assert_eq!(SchemaType::from_name(t.name()).unwrap(), t);
        assert_eq!(t.to_string().parse::<SchemaType>().unwrap(), t);
    }
    assert_eq!(
        SchemaType::from_name("KEY_VALUE").unwrap(),
        SchemaType::KeyValue
    );
    assert!(SchemaType::from_name("avro").is_err());
    assert!(SchemaType::Avro.uses_avro_definition());
    assert!(SchemaType::Protobuf.uses_avro_definition());
    assert!(!SchemaType::ProtobufNative.uses_avro_definition());
    assert!(SchemaType::String.is_primitive() && !SchemaType::KeyValue.is_primitive());
}

#[test]
fn versions_on_the_wire_and_on_rest() {
    assert_eq!(SchemaVersion(0).to_bytes(), [0; 8]);
    assert_eq!(SchemaVersion(258).to_bytes(), [0, 0, 0, 0, 0, 0, 1, 2]);
    assert_eq!(
        SchemaVersion::from_bytes(&[0, 0, 0, 0, 0, 0, 1, 2]).unwrap(),
        SchemaVersion(258)
    );
    // Longer values (pre-2.4 clients): the first 8 bytes.
    assert_eq!(
        SchemaVersion::from_bytes(&[0, 0, 0, 0, 0, 0, 0, 7, 9, 9]).unwrap(),
        SchemaVersion(7)
    );
    assert!(matches!(
        SchemaVersion::from_bytes(&[0, 1]),
        Err(SchemaError::InvalidVersion(_))
    ));
    assert_eq!(SchemaVersion::parse_rest("12").unwrap(), SchemaVersion(12));
    assert!(SchemaVersion::parse_rest("x").is_err());
    assert!(SchemaVersion::optional_bytes(None).is_empty());
    assert_eq!(
        SchemaVersion::optional_bytes(Some(SchemaVersion(1))),
        1i64.to_be_bytes()
    );
}

#[test]
fn strategy_names_and_resolution() {
    for &s in S::all() {
        assert_eq!(S::from_name(s.name()).unwrap(), s);
    }
    assert_eq!(S::from_name("\"FORWARD\"").unwrap(), S::Forward);
    assert_eq!(S::from_name("full_transitive").unwrap(), S::FullTransitive);
    assert!(matches!(
        S::from_name("SIDEWAYS"),
        Err(SchemaError::UnknownStrategy(_))
    ));
    assert!(S::BackwardTransitive.is_transitive() && !S::Full.is_transitive());
    // Topic, then namespace, then the deprecated auto-update policy, then broker.
    assert_eq!(
        resolve_strategy(Some(S::Backward), Some(S::Forward), None, S::Full),
        S::Backward
    );
    assert_eq!(
        resolve_strategy(Some(S::Undefined), Some(S::Forward), None, S::Full),
        S::Forward
    );
    assert_eq!(
        resolve_strategy(
            None,
            Some(S::Undefined),
            Some(AutoUpdateStrategy::AutoUpdateDisabled),
            S::Full
        ),
        S::AlwaysIncompatible
    );
    assert_eq!(
        resolve_strategy(None, Some(S::Undefined), None, S::Backward),
        S::Backward
    );
    assert_eq!(resolve_strategy(None, None, None, S::Undefined), S::Full);
    assert_eq!(
        AutoUpdateStrategy::from_name("BackwardTransitive")
            .unwrap()
            .to_strategy(),
        S::BackwardTransitive
    );
}

// ---- history ----

#[test]
fn fresh_topic_and_identical_schema() {
    let a = avro(rec(json!([{"name": "a", "type": "int"}])));
    let p = RegistryPolicy::default();
    assert_eq!(
        get_or_create(&[], &a, &p).unwrap(),
        PutOutcome::Create(SchemaVersion(0))
    );
    let h = history(&[a.clone()]);
    assert_eq!(
        get_or_create(&h, &a, &p).unwrap(),
        PutOutcome::Existing(SchemaVersion(0))
    );
    // Properties are not part of "the same schema".
    let with_props = a
        .clone()
        .with_properties([("k".to_string(), "v".to_string())]);
    assert_eq!(
        get_or_create(&h, &with_props, &p).unwrap(),
        PutOutcome::Existing(SchemaVersion(0))
    );
    assert_eq!(find_version(&h, &with_props), Some(SchemaVersion(0)));
    // The same definition under another type is another schema (and a type change).
    let as_json = SchemaData::new(SchemaType::Json, a.data.clone());
    assert_eq!(
        reason(get_or_create(&h, &as_json, &p).unwrap_err()),
        "Incompatible schema: exists schema type AVRO, new schema type JSON"
    );
    assert_eq!(find_version(&h, &as_json), None);
    // The oldest equal schema wins.
    let b = avro(rec(
        json!([{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}]),
    ));
    let h = history(&[a.clone(), b.clone(), a.clone()]);
    assert_eq!(
        get_or_create(&h, &a, &p).unwrap(),
        PutOutcome::Existing(SchemaVersion(0))
    );
    assert_eq!(
        get_or_create(&h, &b, &p).unwrap(),
        PutOutcome::Existing(SchemaVersion(1))
    );
}

#[test]
fn deletion_markers() {
    let a = avro(rec(json!([{"name": "a", "type": "int"}])));
    let b = avro(rec(json!([{"name": "b", "type": "string"}])));
    let p = RegistryPolicy::default();
    let h = vec![StoredSchema::schema(0, a.clone()), StoredSchema::deleted(1)];
    assert!(!has_schema(&h));
    assert_eq!(latest(&h), None);
    assert!(active_schemas(&h).is_empty());
    assert_eq!(lookup(&h, None), Err(SchemaError::SchemaNotFound));
    assert_eq!(
        lookup(&h, Some(SchemaVersion(0))),
        Err(SchemaError::VersionNotFound { version: 0 })
    );
    // After a deletion anything valid goes, under the next version; the old
    // schema too, as a new version.
    assert_eq!(
        get_or_create(&h, &b, &p).unwrap(),
        PutOutcome::Create(SchemaVersion(2))
    );
    assert_eq!(
        get_or_create(&h, &a, &p).unwrap(),
        PutOutcome::Create(SchemaVersion(2))
    );
    let h2 = [h.clone(), vec![StoredSchema::schema(2, b.clone())]].concat();
    assert_eq!(lookup(&h2, None).unwrap(), (SchemaVersion(2), &b));
    assert_eq!(
        lookup(&h2, Some(SchemaVersion(2))).unwrap().0,
        SchemaVersion(2)
    );
    assert!(lookup(&h2, Some(SchemaVersion(0))).is_err());
    assert_eq!(
        lookup(&h2, Some(SchemaVersion(9))),
        Err(SchemaError::VersionNotFound { version: 9 })
    );
    assert_eq!(active_schemas(&h2).len(), 1);
    assert_eq!(next_version(&h2), SchemaVersion(3));
    // Only the schemas after the deletion are checked.
    assert!(
        get_or_create(&h2, &a, &p)
            .unwrap_err()
            .to_string()
            .contains("strategy FULL")
    );
    assert_eq!(find_version(&h2, &a), None);
}

#[test]
fn auto_update_disabled() {
    let a = avro(rec(json!([{"name": "a", "type": "int"}])));
    let b = avro(rec(
        json!([{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 1}]),
    ));
    let p = RegistryPolicy {
        allow_auto_update: false,
        ..RegistryPolicy::default()
    };
    assert_eq!(
        get_or_create(&[], &a, &p),
        Err(SchemaError::AutoUpdateDisabled)
    );
    let h = history(&[a.clone()]);
    assert_eq!(
        get_or_create(&h, &a, &p).unwrap(),
        PutOutcome::Existing(SchemaVersion(0))
    );
    let e = get_or_create(&h, &b, &p).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Schema not found and schema auto updating is disabled."
    );
    assert!(e.is_incompatible_schema());
    // A consumer on an idle topic without schema goes through the same door.
    assert_eq!(
        check_consumer(&[], &a, &p, true),
        Err(SchemaError::AutoUpdateDisabled)
    );
}

#[test]
fn invalid_definitions_are_refused() {
    let p = RegistryPolicy::default();
    let cases = [
        SchemaData::new(SchemaType::Avro, "not json"),
        SchemaData::new(SchemaType::Avro, r#"["null", "int"]"#),
        SchemaData::new(SchemaType::Json, r#"{"type": "object", "id": "urn:x"}"#),
        SchemaData::new(SchemaType::Protobuf, "{}"),
        SchemaData::new(SchemaType::Int32, "x"),
        SchemaData::new(SchemaType::String, "hello"),
        SchemaData::new(SchemaType::AutoConsume, ""),
        SchemaData::new(SchemaType::ProtobufNative, "{}"),
        SchemaData::new(SchemaType::KeyValue, vec![0, 0]),
    ];
    for s in cases {
        let e = get_or_create(&[], &s, &p).unwrap_err();
        assert!(
            matches!(e, SchemaError::InvalidSchemaData { .. }),
            "{s:?}: {e}"
        );
        assert!(e.is_incompatible_schema());
    }
    for s in [
        SchemaData::new(SchemaType::String, ""),
        SchemaData::new(SchemaType::String, "null"),
        SchemaData::new(SchemaType::Int64, ""),
        SchemaData::new(SchemaType::None, "anything"),
        SchemaData::new(SchemaType::Json, r#"["null", "int"]"#),
        SchemaData::new(SchemaType::Avro, r#""string""#),
    ] {
        validate_schema_data(&s, &ValidationOptions::default())
            .unwrap_or_else(|e| panic!("{s:?}: {e}"));
    }
    // Pre-2.3 JSON-Schema definitions, when the broker allows them.
    let legacy = ValidationOptions {
        json_allow_legacy_jackson_format: true,
    };
    validate_schema_data(
        &SchemaData::new(SchemaType::Json, r#"{"type": "object", "id": "urn:x"}"#),
        &legacy,
    )
    .unwrap();
}

// ---- strategies ----

/// Three versions where each is compatible with the one before, and the third
/// is not compatible with the first: v0 has `b: int` (default 1), v1 drops
/// it, v2 brings it back as a string (default "s").
fn chain() -> [SchemaData; 3] {
    [
        avro(rec(
            json!([{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 1}]),
        )),
        avro(rec(json!([{"name": "a", "type": "int"}]))),
        avro(rec(
            json!([{"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": "s"}]),
        )),
    ]
}

#[test]
fn transitive_strategies_see_every_version() {
    let [v0, v1, v2] = chain();
    let existing = [v0.clone(), v1.clone()];
    for (plain, transitive) in [
        (S::Backward, S::BackwardTransitive),
        (S::Forward, S::ForwardTransitive),
        (S::Full, S::FullTransitive),
    ] {
        check_compatibility(&v1, &[v0.clone()], plain).unwrap();
        check_compatibility(&v1, &[v0.clone()], transitive).unwrap();
        check_compatibility(&v2, &existing, plain).unwrap_or_else(|e| panic!("{plain}: {e}"));
        let r = reason(check_compatibility(&v2, &existing, transitive).unwrap_err());
        assert!(r.contains(&format!("strategy {transitive}")), "{r}");
        assert!(r.contains("at b:"), "{r}");
        // Through the registry: v2 becomes version 2, or is refused.
        let h = history(&existing);
        assert_eq!(
            get_or_create(&h, &v2, &policy(plain)).unwrap(),
            PutOutcome::Create(SchemaVersion(2))
        );
        assert!(get_or_create(&h, &v2, &policy(transitive)).is_err());
    }
}

#[test]
fn backward_and_forward_directions() {
    // Adding a required field: old data lacks it (not BACKWARD), old readers
    // skip it (FORWARD).
    let old = avro(rec(json!([{"name": "a", "type": "int"}])));
    let new = avro(rec(
        json!([{"name": "a", "type": "int"}, {"name": "b", "type": "int"}]),
    ));
    let r = reason(check_compatibility(&new, &[old.clone()], S::Backward).unwrap_err());
    assert!(
        r.contains("the new schema cannot read data written with an existing schema"),
        "{r}"
    );
    assert!(
        r.contains("field 'b' of record 'R' is missing in the writer and has no default"),
        "{r}"
    );
    check_compatibility(&new, &[old.clone()], S::Forward).unwrap();
    assert!(check_compatibility(&new, &[old.clone()], S::Full).is_err());
    // Removing a field without default: the reverse.
    check_compatibility(&old, &[new.clone()], S::Backward).unwrap();
    let r = reason(check_compatibility(&old, &[new.clone()], S::Forward).unwrap_err());
    assert!(
        r.contains("an existing schema cannot read data written with the new schema"),
        "{r}"
    );
}

#[test]
fn always_strategies_and_undefined() {
    let a = avro(rec(json!([{"name": "a", "type": "int"}])));
    let b = avro(rec(json!([{"name": "b", "type": "string"}])));
    let s = SchemaData::new(SchemaType::String, "");
    check_compatibility(&b, &[a.clone()], S::AlwaysCompatible).unwrap();
    // Even a type change.
    check_compatibility(&s, &[a.clone()], S::AlwaysCompatible).unwrap();
    assert!(check_compatibility(&b, &[a.clone()], S::AlwaysIncompatible).is_err());
    // The same bytes are always fine with the latest-only strategies.
    check_compatibility(&a, &[a.clone()], S::AlwaysIncompatible).unwrap();
    // UNDEFINED acts as the broker default, FULL.
    assert_eq!(
        check_compatibility(&b, &[a.clone()], S::Undefined).is_err(),
        check_compatibility(&b, &[a.clone()], S::Full).is_err()
    );
    // Nothing to compare with: compatible.
    check_compatibility(&b, &[], S::AlwaysIncompatible).unwrap();
    // The registry never stores a second identical schema, whatever the strategy.
    let h = history(&[a.clone()]);
    assert_eq!(
        get_or_create(&h, &a, &policy(S::AlwaysIncompatible)).unwrap(),
        PutOutcome::Existing(SchemaVersion(0))
    );
}

#[test]
fn primitive_types_have_no_evolution_rule() {
    let int32 = SchemaData::new(SchemaType::Int32, "");
    let int64 = SchemaData::new(SchemaType::Int64, "");
    assert_eq!(
        reason(check_compatibility(&int64, &[int32.clone()], S::AlwaysIncompatible).unwrap_err()),
        "Incompatible schema: exists schema type INT32, new schema type INT64"
    );
    assert_eq!(
        reason(check_compatibility(&int64, &[int32.clone()], S::Full).unwrap_err()),
        "Incompatible schema: exists schema type INT32, new schema type INT64"
    );
    // Transitive: any different type in the history.
    let r = reason(
        check_compatibility(&int32, &[int64.clone(), int32.clone()], S::FullTransitive)
            .unwrap_err(),
    );
    assert_eq!(
        r,
        "Incompatible schema: exists schema type INT64, new schema type INT32"
    );
    // PROTOBUF (the Avro-ish definition of Java's ProtobufSchema) has no checker either.
    let p1 = SchemaData::new(
        SchemaType::Protobuf,
        rec(json!([{"name": "a", "type": "int"}])).to_string(),
    );
    let p2 = SchemaData::new(
        SchemaType::Protobuf,
        rec(json!([{"name": "z", "type": "string"}])).to_string(),
    );
    check_compatibility(&p2, &[p1.clone()], S::Full).unwrap();
    assert_eq!(
        reason(check_compatibility(&p2, &[p1.clone()], S::AlwaysIncompatible).unwrap_err()),
        "Schema compatibility strategy is ALWAYS_INCOMPATIBLE"
    );
    // Transitive ALWAYS_INCOMPATIBLE is not a thing; transitive checks have no
    // identical-bytes shortcut but the DEFAULT rule accepts.
    check_compatibility(&int32, &[int32.clone()], S::FullTransitive).unwrap();
}

#[test]
fn json_definitions_from_before_avro() {
    let legacy = SchemaData::new(
        SchemaType::Json,
        r#"{"type":"object","id":"urn:jsonschema:User","properties":{}}"#,
    );
    let legacy_other = SchemaData::new(
        SchemaType::Json,
        r#"{"type":"object","id":"urn:jsonschema:Other"}"#,
    );
    let modern = json_schema(rec(json!([{"name": "a", "type": "int"}])));
    check_compatibility(&modern, &[legacy.clone()], S::Full).unwrap();
    check_compatibility(&legacy, &[modern.clone()], S::Full).unwrap();
    let r = reason(check_compatibility(&legacy_other, &[legacy.clone()], S::Full).unwrap_err());
    assert!(r.starts_with("Incompatible Schema from"), "{r}");
    // Transitive checks parse everything as Avro.
    let r = reason(check_compatibility(&modern, &[legacy.clone()], S::FullTransitive).unwrap_err());
    assert!(r.starts_with("Error during schema parsing"), "{r}");
    // Something unrecognisable on the broker is overwritten.
    let junk = SchemaData::new(SchemaType::Json, "%%%");
    check_compatibility(&modern, &[junk], S::Full).unwrap();
}

// ---- consumers ----

#[test]
fn consumer_checks_by_strategy() {
    let [v0, v1, v2] = chain();
    let h = history(&[v0.clone(), v1.clone(), v2.clone()]);
    // v1 reads v2's data, but not v0's... v1 reads everything (it only has `a`).
    for s in [
        S::Backward,
        S::Forward,
        S::ForwardTransitive,
        S::Full,
        S::BackwardTransitive,
    ] {
        check_consumer_compatibility(&h, &v1, s).unwrap_or_else(|e| panic!("{s}: {e}"));
    }
    // v0 cannot read v2's data (`b` is a string there): a BACKWARD check
    // against the latest, whatever the plain strategy.
    for s in [S::Backward, S::Forward, S::ForwardTransitive, S::Full] {
        let r = reason(check_consumer_compatibility(&h, &v0, s).unwrap_err());
        assert!(r.contains("strategy BACKWARD"), "{s}: {r}");
    }
    // FULL_TRANSITIVE wants mutual reads with every version: v1 fails nothing,
    // a consumer needing `b` as an int without default fails on v1.
    check_consumer_compatibility(&h, &v1, S::FullTransitive).unwrap();
    let needs_b = avro(rec(
        json!([{"name": "a", "type": "int"}, {"name": "b", "type": "int"}]),
    ));
    assert!(check_consumer_compatibility(&h, &needs_b, S::BackwardTransitive).is_err());
    // ALWAYS_COMPATIBLE takes anything, ALWAYS_INCOMPATIBLE nothing (even the
    // latest schema itself).
    check_consumer_compatibility(
        &h,
        &SchemaData::new(SchemaType::String, ""),
        S::AlwaysCompatible,
    )
    .unwrap();
    assert!(check_consumer_compatibility(&h, &v2, S::AlwaysIncompatible).is_err());
    // No schema: nothing to check against.
    assert_eq!(
        check_consumer_compatibility(&[], &v0, S::Full),
        Err(SchemaError::NoSchemaToCheck)
    );
}

#[test]
fn consumer_on_idle_and_active_topics() {
    let a = avro(rec(json!([{"name": "a", "type": "int"}])));
    let p = RegistryPolicy::default();
    assert_eq!(
        check_consumer(&[], &a, &p, true).unwrap(),
        ConsumerOutcome::Added(PutOutcome::Create(SchemaVersion(0)))
    );
    let r = reason(check_consumer(&[], &a, &p, false).unwrap_err());
    assert_eq!(
        r,
        "Failed to add schema to an active topic with empty(BYTES) schema: new schema type AVRO"
    );
    // A deleted schema counts as none.
    let deleted = vec![StoredSchema::schema(0, a.clone()), StoredSchema::deleted(1)];
    assert_eq!(
        check_consumer(&deleted, &a, &p, true).unwrap(),
        ConsumerOutcome::Added(PutOutcome::Create(SchemaVersion(2)))
    );
    // AUTO_CONSUME is never checked.
    let auto = SchemaData::new(SchemaType::AutoConsume, "");
    assert_eq!(
        check_consumer(&[], &auto, &p, false).unwrap(),
        ConsumerOutcome::Compatible
    );
    let h = history(&[a.clone()]);
    assert_eq!(
        check_consumer(&h, &auto, &p, false).unwrap(),
        ConsumerOutcome::Compatible
    );
    // With a schema, idle or not, the subscriber's schema is only checked.
    assert_eq!(
        check_consumer(&h, &a, &p, true).unwrap(),
        ConsumerOutcome::Compatible
    );
}

#[test]
fn producers_without_schema() {
    let a = avro(rec(json!([{"name": "a", "type": "int"}])));
    let enforced = RegistryPolicy {
        schema_validation_enforced: true,
        ..RegistryPolicy::default()
    };
    producer_without_schema(&[], &enforced).unwrap();
    producer_without_schema(&history(&[a.clone()]), &RegistryPolicy::default()).unwrap();
    let r = reason(producer_without_schema(&history(&[a]), &enforced).unwrap_err());
    assert_eq!(
        r,
        "Producers cannot connect or send message without a schema to topics with a schema"
    );
}

#[test]
fn producer_command() {
    let a = avro(rec(json!([{"name": "a", "type": "int"}])));
    let p = RegistryPolicy::default();
    assert_eq!(producer_schema(&[], None, &p).unwrap(), None);
    assert_eq!(
        producer_schema(&[], Some(&a), &p).unwrap(),
        Some(PutOutcome::Create(SchemaVersion(0)))
    );
    let h = history(&[a.clone()]);
    assert_eq!(
        producer_schema(&h, Some(&a), &p).unwrap(),
        Some(PutOutcome::Existing(SchemaVersion(0)))
    );
    assert_eq!(producer_schema(&h, None, &p).unwrap(), None);
}

#[test]
fn admin_compatibility_test() {
    let [v0, v1, v2] = chain();
    let h = history(&[v0, v1]);
    let v = ValidationOptions::default();
    test_compatibility(&h, &v2, S::Full, &v).unwrap();
    assert!(test_compatibility(&h, &v2, S::FullTransitive, &v).is_err());
    assert!(matches!(
        test_compatibility(&h, &SchemaData::new(SchemaType::Avro, "{"), S::Full, &v),
        Err(SchemaError::InvalidSchemaData { .. })
    ));
}

// ---- KEY_VALUE ----

fn kv(key: SchemaData, value: SchemaData) -> SchemaData {
    encode_key_value(&KeyValueSchema {
        key,
        key_name: "key".to_string(),
        value,
        value_name: "value".to_string(),
        encoding: KeyValueEncoding::Separated,
    })
}

#[test]
fn key_value_layout() {
    let key = SchemaData::new(SchemaType::String, "");
    let value = avro(rec(json!([{"name": "a", "type": "int"}])))
        .with_properties([("__alwaysAllowNull".to_string(), "true".to_string())]);
    let s = kv(key.clone(), value.clone());
    assert_eq!(s.schema_type, SchemaType::KeyValue);
    // Big-endian lengths, then the bytes.
    assert_eq!(&s.data[..8], &[0, 0, 0, 0, 0, 0, 0, value.data.len() as u8]);
    assert_eq!(&s.data[8..], &value.data[..]);
    assert_eq!(s.properties["key.schema.type"], "STRING");
    assert_eq!(s.properties["value.schema.type"], "AVRO");
    assert_eq!(s.properties["kv.encoding.type"], "SEPARATED");
    assert_eq!(
        s.properties["value.schema.properties"],
        r#"{"__alwaysAllowNull":"true"}"#
    );
    let back = decode_key_value(&s).unwrap();
    assert_eq!(back.key, key);
    assert_eq!(back.value, value);
    assert_eq!(back.encoding, KeyValueEncoding::Separated);
    // Without properties: BYTES components, INLINE encoding; -1 lengths are absent parts.
    let mut bare = SchemaData::new(SchemaType::KeyValue, join_key_value_data(b"", b"x"));
    bare.data[..4].copy_from_slice(&(-1i32).to_be_bytes());
    let d = decode_key_value(&bare).unwrap();
    assert_eq!(
        (d.key.schema_type, d.value.schema_type),
        (SchemaType::Bytes, SchemaType::Bytes)
    );
    assert_eq!(d.encoding, KeyValueEncoding::Inline);
    assert_eq!((d.key.data.len(), d.value.data), (0, b"x".to_vec()));
    // Truncated or lying lengths.
    assert!(split_key_value_data(&[0, 0, 0]).is_err());
    assert!(split_key_value_data(&[0, 0, 0, 9, 1]).is_err());
    assert!(split_key_value_data(&[0xff, 0xff, 0xff, 0xfe]).is_err());
    let mut bad_type = bare.clone();
    bad_type
        .properties
        .insert("key.schema.type".to_string(), "NOPE".to_string());
    assert!(decode_key_value(&bad_type).is_err());
}

#[test]
fn key_value_compatibility_is_component_wise() {
    let string = SchemaData::new(SchemaType::String, "");
    let v0 = avro(rec(json!([{"name": "a", "type": "int"}])));
    let v1 = avro(rec(
        json!([{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}]),
    ));
    let bad = avro(rec(json!([{"name": "a", "type": "string"}])));
    let p = RegistryPolicy::default();
    let h = history(&[kv(string.clone(), v0.clone())]);
    assert_eq!(
        get_or_create(&h, &kv(string.clone(), v0.clone()), &p).unwrap(),
        PutOutcome::Existing(SchemaVersion(0))
    );
    assert_eq!(
        get_or_create(&h, &kv(string.clone(), v1.clone()), &p).unwrap(),
        PutOutcome::Create(SchemaVersion(1))
    );
    let r = reason(get_or_create(&h, &kv(string.clone(), bad), &p).unwrap_err());
    assert!(r.contains("at a:"), "{r}");
    let r = reason(get_or_create(&h, &kv(v0.clone(), v0.clone()), &p).unwrap_err());
    assert!(
        r.starts_with("Key schemas or Value schemas are different schema type"),
        "{r}"
    );
    assert!(
        r.contains("from key schema type is STRING and to key schema is AVRO"),
        "{r}"
    );
    // Pulsar's "same schema" for KEY_VALUE is type + bytes: the component types
    // live in the properties, so STRING -> INT32 keys (both without definition)
    // is the same schema.
    assert_eq!(
        get_or_create(
            &h,
            &kv(SchemaData::new(SchemaType::Int32, ""), v0.clone()),
            &p
        )
        .unwrap(),
        PutOutcome::Existing(SchemaVersion(0))
    );
    assert_eq!(
        reason(get_or_create(&h, &v0, &p).unwrap_err()),
        "Incompatible schema: exists schema type KEY_VALUE, new schema type AVRO"
    );
    // Transitive: every version's components.
    let h = history(&[
        kv(string.clone(), chain()[0].clone()),
        kv(string.clone(), chain()[1].clone()),
    ]);
    let third = kv(string.clone(), chain()[2].clone());
    assert!(get_or_create(&h, &third, &policy(S::Full)).is_ok());
    assert!(get_or_create(&h, &third, &policy(S::FullTransitive)).is_err());
    // ALWAYS_INCOMPATIBLE reaches the components' own rule.
    let h = history(&[kv(string.clone(), v0.clone())]);
    assert!(get_or_create(&h, &kv(string, v1), &policy(S::AlwaysIncompatible)).is_err());
}

#[test]
fn key_value_rest_form() {
    let string = SchemaData::new(SchemaType::String, "");
    // Member order as sent (not sorted); REST stores compact JSON, as Pulsar
    // (Gson) does.
    let value = SchemaData::new(
        SchemaType::Avro,
        r#"{"type":"record","name":"R","fields":[{"name":"z","type":"int"},{"name":"a","type":"long"}]}"#,
    );
    let s = kv(string, value.clone());
    let text = key_value_data_to_rest_json(&s).unwrap();
    assert_eq!(
        text,
        r#"{"key":"","value":{"type":"record","name":"R","fields":[{"name":"z","type":"int"},{"name":"a","type":"long"}]}}"#
    );
    let data = key_value_data_from_rest_json(&text).unwrap();
    assert_eq!(data, s.data);
    let pretty = "{ \"key\" : \"\",\n  \"value\": {\"type\": \"record\", \"name\": \"R\", \"fields\": [{\"name\": \"z\", \"type\": \"int\"}, {\"name\": \"a\", \"type\": \"long\"}]} }";
    assert_eq!(key_value_data_from_rest_json(pretty).unwrap(), s.data);
    assert!(key_value_data_from_rest_json(r#"{"key": ""}"#).is_err());
    assert!(key_value_data_from_rest_json("[]").is_err());
}

// ---- PROTOBUF_NATIVE ----

fn protobuf_native(root: &str) -> SchemaData {
    // FileDescriptorSet { file: { name: "a.proto", package: "p", message_type: [{name: "M"}, {name: "N"}] } }
    let file: Vec<u8> = [
        &[0x0a, 7][..],
        b"a.proto",
        &[0x12, 1],
        b"p",
        &[0x22, 3, 0x0a, 1],
        b"M",
        &[0x22, 3, 0x0a, 1],
        b"N",
    ]
    .concat();
    let set = [&[0x0a, file.len() as u8][..], &file].concat();
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for chunk in set.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            b64.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
        b64.push_str(&"=".repeat(3 - chunk.len()));
    }
    SchemaData::new(
        SchemaType::ProtobufNative,
        json!({"fileDescriptorSet": b64, "rootMessageTypeName": root, "rootFileDescriptorName": "a.proto"}).to_string(),
    )
}

#[test]
fn protobuf_native_root_may_not_change() {
    let m = protobuf_native("p.M");
    let m_again = SchemaData::new(SchemaType::ProtobufNative, format!("{} ", m.data_text()));
    let n = protobuf_native("p.N");
    validate_schema_data(&m, &ValidationOptions::default()).unwrap();
    assert!(validate_schema_data(&protobuf_native("p.X"), &ValidationOptions::default()).is_err());
    check_compatibility(&m_again, &[m.clone()], S::Full).unwrap();
    let r = reason(check_compatibility(&n, &[m.clone()], S::Backward).unwrap_err());
    assert!(
        r.starts_with("Protobuf root message isn't allow change!"),
        "{r}"
    );
    check_compatibility(&n, &[m.clone()], S::AlwaysCompatible).unwrap();
    assert_eq!(
        reason(check_compatibility(&m_again, &[m.clone()], S::AlwaysIncompatible).unwrap_err()),
        "Unknown SchemaCompatibilityStrategy."
    );
    let p = RegistryPolicy::default();
    assert_eq!(
        get_or_create(&[], &m, &p).unwrap(),
        PutOutcome::Create(SchemaVersion(0))
    );
    // PROTOBUF_NATIVE definitions are compared by bytes.
    assert_eq!(
        get_or_create(&history(&[m.clone()]), &m_again, &p).unwrap(),
        PutOutcome::Create(SchemaVersion(1))
    );
}

#[test]
fn external_schemas() {
    let e1 = SchemaData::new(SchemaType::External, "one");
    let e2 = SchemaData::new(SchemaType::External, "two");
    check_compatibility(&e2, &[e1.clone()], S::AlwaysIncompatible).unwrap();
    assert!(check_compatibility(&SchemaData::new(SchemaType::String, ""), &[e1], S::Full).is_err());
}

#[test]
fn errors_display() {
    let e = SchemaError::InvalidSchemaData {
        schema_type: SchemaType::Avro,
        reason: "bad".to_string(),
    };
    assert_eq!(
        e.to_string(),
        "Invalid schema definition data for AVRO schema: bad"
    );
    assert!(!SchemaError::SchemaNotFound.is_incompatible_schema());
    let _ = BTreeMap::<String, String>::new();
}
