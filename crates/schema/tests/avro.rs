//! The Avro parser, Avro equality and the resolution rules, rule by rule, plus
//! property tests over generated schemas.

use proptest::prelude::*;
use serde_json::{Value, json};
use strobe_schema::avro::{
    AvroSchema, Node, ParseOptions, Primitive, Resolution, can_read, can_read_with,
};

fn parse(v: Value) -> AvroSchema {
    AvroSchema::parse(&v.to_string()).unwrap_or_else(|e| panic!("{v}: {e}"))
}

fn parse_err(v: Value) -> String {
    match AvroSchema::parse(&v.to_string()) {
        Ok(_) => panic!("{v} parsed"),
        Err(e) => e.0,
    }
}

fn both(reader: &AvroSchema, writer: &AvroSchema) -> (bool, bool) {
    (
        can_read_with(reader, writer, Resolution::Specification).is_ok(),
        can_read_with(reader, writer, Resolution::Pulsar).is_ok(),
    )
}

fn record(name: &str, fields: Value) -> Value {
    json!({"type": "record", "name": name, "fields": fields})
}

// ---- parsing ----

#[test]
fn primitives_in_both_forms() {
    for p in [
        "null", "boolean", "int", "long", "float", "double", "bytes", "string",
    ] {
        let a = parse(json!(p));
        let b = parse(json!({ "type": p }));
        assert_eq!(a, b, "{p}");
        assert!(matches!(a.root(), Node::Primitive(..)));
    }
}

#[test]
fn logical_types_are_properties() {
    let s = parse(json!({"type": "int", "logicalType": "date"}));
    let Node::Primitive(Primitive::Int, props) = s.root() else {
        panic!("not an int")
    };
    assert_eq!(props.get("logicalType"), Some(&json!("date")));
    assert_ne!(s, parse(json!("int")));
    // Resolution ignores them.
    assert!(can_read(&s, &parse(json!("int"))).is_ok());
}

#[test]
fn namespaces_names_and_references() {
    let s = parse(json!({
        "type": "record", "name": "Outer", "namespace": "com.example",
        "fields": [
            {"name": "inner", "type": record("Inner", json!([{"name": "x", "type": "int"}]))},
            {"name": "again", "type": "Inner"},
            {"name": "full", "type": "com.example.Inner"},
            {"name": "other", "type": {"type": "enum", "name": "x.y.Color", "symbols": ["RED"]}},
            {"name": "color", "type": "x.y.Color"},
            {"name": "nons", "type": {"type": "fixed", "name": "Hash", "namespace": "", "size": 16}},
            {"name": "hash", "type": "Hash"}
        ]
    }));
    let names: Vec<String> = s.named_types().iter().map(|n| n.name.full()).collect();
    assert_eq!(
        names,
        [
            "com.example.Outer",
            "com.example.Inner",
            "x.y.Color",
            "Hash"
        ]
    );
    assert!(s.find("com.example.Inner").is_some());
}

#[test]
fn forward_and_recursive_references() {
    let list = parse(json!(record(
        "Node",
        json!([{"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"]}])
    )));
    assert_eq!(list.named_types().len(), 1);
    assert!(can_read(&list, &list).is_ok());
    // A reference before the definition resolves once the parse ends.
    let forward = parse(json!(record(
        "A",
        json!([
            {"name": "b", "type": ["null", "B"]},
            {"name": "b2", "type": record("B", json!([{"name": "x", "type": "int"}]))}
        ])
    )));
    assert_eq!(forward.named_types().len(), 2);
    let e = parse_err(json!(record(
        "A",
        json!([{"name": "b", "type": "Nowhere"}])
    )));
    assert!(e.contains("Undefined name: Nowhere"), "{e}");
}

#[test]
fn malformed_schemas() {
    let cases = [
        (json!(null), "not yet supported"),
        (json!(1), "not yet supported"),
        (json!({"name": "x"}), "No type"),
        (json!({"type": "record", "fields": []}), "No name"),
        (
            json!({"type": "record", "name": "R"}),
            "Record has no fields",
        ),
        (
            json!(record("R", json!([{"type": "int"}]))),
            "No field name",
        ),
        (json!(record("R", json!([{"name": "a"}]))), "No field type"),
        (
            json!(record(
                "R",
                json!([{"name": "a", "type": "int"}, {"name": "a", "type": "long"}])
            )),
            "Duplicate field a",
        ),
        (json!(record("1R", json!([]))), "Illegal initial character"),
        (json!(record("R-x", json!([]))), "Illegal character"),
        (json!({"type": "enum", "name": "E"}), "Enum has no symbols"),
        (
            json!({"type": "enum", "name": "E", "symbols": ["A", "A"]}),
            "Duplicate enum symbol",
        ),
        (
            json!({"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}),
            "is not in the enum symbol set",
        ),
        (json!({"type": "fixed", "name": "F"}), "Invalid or no size"),
        (
            json!({"type": "fixed", "name": "F", "size": 1.5}),
            "Invalid or no size",
        ),
        (json!({"type": "array"}), "Array has no items"),
        (json!({"type": "map"}), "Map has no values"),
        (json!(["null", ["int"]]), "Nested union"),
        (json!(["int", "int"]), "Duplicate in union"),
        (
            json!([{"type": "array", "items": "int"}, {"type": "array", "items": "long"}]),
            "Duplicate in union",
        ),
        (
            json!([record("R", json!([])), {"type": "record", "name": "R", "fields": []}]),
            "Can't redefine",
        ),
    ];
    for (schema, expected) in cases {
        let e = parse_err(schema.clone());
        assert!(e.contains(expected), "{schema}: {e}");
    }
    assert!(AvroSchema::parse("{not json").is_err());
    // Pulsar's name validator allows `$`.
    parse(json!(record("$R", json!([{"name": "$a", "type": "int"}]))));
}

#[test]
fn defaults_are_checked_only_when_asked() {
    let s = json!(record(
        "R",
        json!([{"name": "a", "type": "int", "default": "x"}])
    ));
    assert!(AvroSchema::parse(&s.to_string()).is_ok());
    let strict = ParseOptions {
        validate_defaults: true,
    };
    let e = AvroSchema::parse_with(&s.to_string(), strict).unwrap_err();
    assert!(e.0.starts_with("Invalid default for field a"), "{e}");
    for (t, d) in [
        (json!("int"), json!(1)),
        (json!("long"), json!(-5)),
        (json!("double"), json!(1.5)),
        (json!("float"), json!("NaN")),
        (json!(["null", "int"]), json!(null)),
        (json!(["null", "int"]), json!(3)),
        (json!({"type": "array", "items": "int"}), json!([1, 2])),
        (
            json!({"type": "map", "values": "string"}),
            json!({"k": "v"}),
        ),
        (
            json!({"type": "enum", "name": "E", "symbols": ["A"]}),
            json!("A"),
        ),
    ] {
        let s = json!(record("R", json!([{"name": "a", "type": t, "default": d}])));
        AvroSchema::parse_with(&s.to_string(), strict).unwrap_or_else(|e| panic!("{s}: {e}"));
    }
    for (t, d) in [
        (json!("int"), json!(1.5)),
        (json!("int"), json!(4_000_000_000_i64)),
        (json!("boolean"), json!(0)),
        (json!(["null", "int"]), json!("x")),
        (json!({"type": "array", "items": "int"}), json!(["a"])),
    ] {
        let s = json!(record("R", json!([{"name": "a", "type": t, "default": d}])));
        assert!(
            AvroSchema::parse_with(&s.to_string(), strict).is_err(),
            "{s}"
        );
    }
}

// ---- equality ("the same schema") ----

#[test]
fn equality_ignores_formatting_docs_aliases_and_enum_defaults() {
    let a = json!({"type": "record", "name": "R", "namespace": "n", "fields": [
        {"name": "a", "type": ["null", "int"], "default": null},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}}
    ]});
    let b = json!({"fields": [
        {"type": ["null", "int"], "name": "a", "default": null, "doc": "the a", "aliases": ["aa"]},
        {"name": "e", "type": {"symbols": ["X", "Y"], "name": "E", "type": "enum", "default": "X"}}
    ], "name": "n.R", "type": "record", "doc": "a record", "aliases": ["Old"]});
    assert_eq!(parse(a.clone()), parse(b));
    let pretty = AvroSchema::parse(&serde_json::to_string_pretty(&a).unwrap()).unwrap();
    assert_eq!(parse(a.clone()), pretty);
}

#[test]
fn equality_sees_names_fields_defaults_and_properties() {
    let base = json!(record(
        "R",
        json!([{"name": "a", "type": "int"}, {"name": "b", "type": "string"}])
    ));
    let different = [
        json!(record(
            "S",
            json!([{"name": "a", "type": "int"}, {"name": "b", "type": "string"}])
        )),
        json!({"type": "record", "name": "R", "namespace": "n", "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string"}]}),
        json!(record(
            "R",
            json!([{"name": "b", "type": "string"}, {"name": "a", "type": "int"}])
        )),
        json!(record(
            "R",
            json!([{"name": "a", "type": "long"}, {"name": "b", "type": "string"}])
        )),
        json!(record(
            "R",
            json!([{"name": "a", "type": "int", "default": 1}, {"name": "b", "type": "string"}])
        )),
        json!(record(
            "R",
            json!([{"name": "a", "type": "int", "order": "descending"}, {"name": "b", "type": "string"}])
        )),
        json!(record(
            "R",
            json!([{"name": "a", "type": "int", "x-prop": 1}, {"name": "b", "type": "string"}])
        )),
        json!({"type": "record", "name": "R", "x-prop": true, "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string"}]}),
    ];
    for d in different {
        assert_ne!(parse(base.clone()), parse(d.clone()), "{d}");
    }
    // 1 and 1.0 are different defaults, as in Jackson.
    assert_ne!(
        parse(json!(record(
            "R",
            json!([{"name": "a", "type": "double", "default": 1}])
        ))),
        parse(json!(record(
            "R",
            json!([{"name": "a", "type": "double", "default": 1.0}])
        )))
    );
}

// ---- resolution ----

#[test]
fn promotions() {
    let ok = [
        ("int", "long"),
        ("int", "float"),
        ("int", "double"),
        ("long", "float"),
        ("long", "double"),
        ("float", "double"),
        ("string", "bytes"),
        ("bytes", "string"),
    ];
    let prims = [
        "null", "boolean", "int", "long", "float", "double", "bytes", "string",
    ];
    for w in prims {
        for r in prims {
            let expected = w == r || ok.contains(&(w, r));
            let (spec, pulsar) = both(&parse(json!(r)), &parse(json!(w)));
            assert_eq!(
                (spec, pulsar),
                (expected, expected),
                "writer {w}, reader {r}"
            );
        }
    }
}

#[test]
fn missing_field_needs_a_default() {
    let writer = parse(record("User", json!([{"name": "name", "type": "string"}])));
    let reader = parse(record(
        "User",
        json!([{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]),
    ));
    let e = can_read(&reader, &writer).unwrap_err();
    assert_eq!(
        e.reason,
        "field 'age' of record 'User' is missing in the writer and has no default"
    );
    assert_eq!(e.to_string(), e.reason);
    let with_default = parse(record(
        "User",
        json!([{"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}]),
    ));
    assert_eq!(both(&with_default, &writer), (true, true));
    // The writer's extra fields are skipped.
    assert_eq!(both(&writer, &with_default), (true, true));
}

#[test]
fn defaults_the_reader_uses_must_fit() {
    let writer = parse(record("R", json!([{"name": "a", "type": "int"}])));
    let bad = parse(record(
        "R",
        json!([{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": "x"}]),
    ));
    let e = can_read_with(&bad, &writer, Resolution::Pulsar).unwrap_err();
    assert_eq!(e.path, "b");
    assert!(e.reason.contains("is not a number"), "{e}");
    // Not used, not checked.
    assert_eq!(both(&bad, &bad), (true, true));
    // A union default: Pulsar (Avro 1.12) takes the first branch it fits, the
    // specification wants the first branch.
    let later_branch = parse(record(
        "R",
        json!([{"name": "a", "type": "int"}, {"name": "b", "type": ["null", "string"], "default": "x"}]),
    ));
    assert_eq!(both(&later_branch, &writer), (false, true));
    let record_default = parse(record(
        "R",
        json!([{"name": "a", "type": "int"},
               {"name": "p", "type": record("P", json!([{"name": "x", "type": "int"}, {"name": "y", "type": "int", "default": 2}])),
                "default": {"x": 1}}]),
    ));
    assert_eq!(both(&record_default, &writer), (true, true));
    let enum_default = parse(record(
        "R",
        json!([{"name": "a", "type": "int"},
               {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}, "default": "Z"}]),
    ));
    assert_eq!(both(&enum_default, &writer), (false, false));
}

#[test]
fn field_and_record_aliases() {
    let writer = parse(record("Old", json!([{"name": "old_name", "type": "int"}])));
    let reader = parse(json!({"type": "record", "name": "New", "aliases": ["Old"],
        "fields": [{"name": "new_name", "type": "int", "aliases": ["old_name"]}]}));
    assert_eq!(both(&reader, &writer), (true, true));
    let no_alias = parse(record("New", json!([{"name": "new_name", "type": "int"}])));
    let e = can_read(&no_alias, &writer).unwrap_err();
    assert!(e.reason.contains("names differ"), "{e}");
    // Without the field alias the field is missing.
    let no_field_alias = parse(json!({"type": "record", "name": "New", "aliases": ["Old"],
        "fields": [{"name": "new_name", "type": "int"}]}));
    assert_eq!(both(&no_field_alias, &writer), (false, false));
}

#[test]
fn record_names_spec_versus_pulsar() {
    let a = parse(record("Example", json!([{"name": "a", "type": "int"}])));
    let b = parse(record(
        "ExampleRequiredDefault",
        json!([{"name": "a", "type": "int"}]),
    ));
    assert_eq!(both(&a, &b), (false, true));
    // Namespaces do not matter, only the unqualified name.
    let c = parse(
        json!({"type": "record", "name": "Example", "namespace": "x", "fields": [{"name": "a", "type": "int"}]}),
    );
    assert_eq!(both(&a, &c), (true, true));
}

#[test]
fn enums() {
    let abc = parse(json!({"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}));
    let ab = parse(json!({"type": "enum", "name": "E", "symbols": ["A", "B"]}));
    let ab_default =
        parse(json!({"type": "enum", "name": "E", "symbols": ["A", "B"], "default": "A"}));
    // Reading with fewer symbols: the spec needs a default, Pulsar does not look.
    assert_eq!(both(&ab, &abc), (false, true));
    let e = can_read(&ab, &abc).unwrap_err();
    assert!(e.reason.contains("symbol 'C'"), "{e}");
    assert_eq!(both(&ab_default, &abc), (true, true));
    assert_eq!(both(&abc, &ab), (true, true));
    let other = parse(json!({"type": "enum", "name": "F", "symbols": ["A", "B", "C"]}));
    assert_eq!(both(&other, &abc), (false, false));
}

#[test]
fn fixed() {
    let f16 = parse(json!({"type": "fixed", "name": "F", "size": 16}));
    let f8 = parse(json!({"type": "fixed", "name": "F", "size": 8}));
    let g16 = parse(json!({"type": "fixed", "name": "G", "size": 16}));
    assert_eq!(both(&f16, &f16), (true, true));
    assert_eq!(both(&f16, &f8), (false, false));
    assert_eq!(both(&g16, &f16), (false, false));
    assert_eq!(both(&parse(json!("bytes")), &f16), (false, false));
}

#[test]
fn unions() {
    let nullable_int = parse(json!(["null", "int"]));
    let nullable_long = parse(json!(["null", "long"]));
    let int = parse(json!("int"));
    assert_eq!(both(&nullable_int, &int), (true, true));
    // Every writer branch must be readable: null cannot become an int.
    assert_eq!(both(&int, &nullable_int), (false, false));
    let e = can_read(&int, &nullable_int).unwrap_err();
    assert!(e.reason.contains("writer union branch null"), "{e}");
    assert_eq!(both(&nullable_long, &nullable_int), (true, true));
    assert_eq!(both(&nullable_int, &nullable_long), (false, false));
    // Order does not matter.
    assert_eq!(
        both(&parse(json!(["int", "null"])), &nullable_int),
        (true, true)
    );
    // A reader union without a fitting branch.
    let e = can_read(&parse(json!(["null", "string"])), &int).unwrap_err();
    assert!(e.reason.contains("no branch"), "{e}");
}

#[test]
fn reader_union_record_matching() {
    let writer = parse(record("A", json!([{"name": "x", "type": "int"}])));
    let reader = parse(json!([
        "null",
        record("B", json!([{"name": "x", "type": "int"}]))
    ]));
    // Pulsar matches the record by structure, the spec by name.
    assert_eq!(both(&reader, &writer), (false, true));
    let wrong_shape = parse(json!([
        "null",
        record("B", json!([{"name": "y", "type": "int"}]))
    ]));
    assert_eq!(both(&wrong_shape, &writer), (false, false));
}

#[test]
fn containers_and_paths() {
    let writer = parse(record(
        "R",
        json!([{"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "long"}}}]),
    ));
    let reader = parse(record(
        "R",
        json!([{"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "int"}}}]),
    ));
    let e = can_read(&reader, &writer).unwrap_err();
    assert_eq!(e.path, "m.{}.[]");
    assert_eq!(
        e.to_string(),
        "at m.{}.[]: the writer's long cannot be read as int"
    );
    assert_eq!(both(&writer, &reader), (true, true));
    let arr = parse(json!({"type": "array", "items": "int"}));
    let map = parse(json!({"type": "map", "values": "int"}));
    assert_eq!(both(&arr, &map), (false, false));
}

#[test]
fn recursive_schemas_terminate() {
    let v1 = parse(record(
        "Tree",
        json!([{"name": "children", "type": {"type": "array", "items": "Tree"}}]),
    ));
    let v2 = parse(record(
        "Tree",
        json!([{"name": "children", "type": {"type": "array", "items": "Tree"}},
               {"name": "label", "type": "string", "default": ""}]),
    ));
    assert_eq!(both(&v2, &v1), (true, true));
    assert_eq!(both(&v1, &v2), (true, true));
    let v3 = parse(record(
        "Tree",
        json!([{"name": "children", "type": {"type": "array", "items": "Tree"}},
               {"name": "label", "type": "string"}]),
    ));
    assert_eq!(both(&v3, &v1), (false, false));
}

// ---- property tests ----

/// Random schemas: primitives, enums, fixed, arrays, maps, nullable unions and
/// records, nested a few levels. Named types are renamed afterwards so every
/// name is unique.
fn schema_strategy() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        prop::sample::select(vec![
            "null", "boolean", "int", "long", "float", "double", "bytes", "string"
        ])
        .prop_map(|p| json!(p)),
        (1usize..4).prop_map(|n| {
            let symbols: Vec<String> = (0..n).map(|i| format!("S{i}")).collect();
            json!({"type": "enum", "name": "E", "symbols": symbols})
        }),
        (1usize..32).prop_map(|n| json!({"type": "fixed", "name": "F", "size": n})),
    ];
    leaf.prop_recursive(3, 32, 4, |inner| {
        prop_oneof![
            inner
                .clone()
                .prop_map(|t| json!({"type": "array", "items": t})),
            inner
                .clone()
                .prop_map(|t| json!({"type": "map", "values": t})),
            inner
                .clone()
                .prop_filter("no nested or null-null unions", |t| !t.is_array()
                    && *t != json!("null"))
                .prop_map(|t| json!(["null", t])),
            prop::collection::vec(inner, 1..4).prop_map(|types| {
                let fields: Vec<Value> = types
                    .into_iter()
                    .enumerate()
                    .map(|(i, t)| json!({"name": format!("f{i}"), "type": t}))
                    .collect();
                json!({"type": "record", "name": "R", "fields": fields})
            }),
        ]
    })
    .prop_map(|mut v| {
        let mut counter = 0;
        rename(&mut v, &mut counter);
        v
    })
}

fn rename(v: &mut Value, counter: &mut usize) {
    match v {
        Value::Object(m) => {
            if m.contains_key("name")
                && m.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| matches!(t, "record" | "enum" | "fixed"))
            {
                let t = m["type"].as_str().unwrap_or_default().to_string();
                m.insert(
                    "name".to_string(),
                    json!(format!("{}{}", &t[..1].to_uppercase(), counter)),
                );
                *counter += 1;
            }
            for (k, child) in m.iter_mut() {
                if k != "name" {
                    rename(child, counter);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|c| rename(c, counter)),
        _ => {}
    }
}

/// A default value of the given simple type.
fn simple_field_with_default() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({"type": "int", "default": 0})),
        Just(json!({"type": "long", "default": 7})),
        Just(json!({"type": "double", "default": 1.5})),
        Just(json!({"type": "string", "default": "x"})),
        Just(json!({"type": "boolean", "default": true})),
        Just(json!({"type": ["null", "string"], "default": null})),
        Just(json!({"type": {"type": "array", "items": "int"}, "default": []})),
        Just(json!({"type": {"type": "map", "values": "long"}, "default": {}})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_schema_reads_itself(v in schema_strategy()) {
        let s = parse(v.clone());
        prop_assert!(can_read(&s, &s).is_ok(), "{}", v);
        prop_assert!(can_read_with(&s, &s, Resolution::Pulsar).is_ok(), "{}", v);
        prop_assert_eq!(&s, &s.clone());
    }

    #[test]
    fn equality_survives_reformatting(v in schema_strategy()) {
        let compact = AvroSchema::parse(&v.to_string()).unwrap();
        let pretty = AvroSchema::parse(&serde_json::to_string_pretty(&v).unwrap()).unwrap();
        prop_assert_eq!(compact, pretty);
    }

    #[test]
    fn adding_a_field_with_a_default_is_backward_and_forward_compatible(
        fields in prop::collection::vec(schema_strategy(), 1..4),
        added in simple_field_with_default(),
        at in 0usize..4,
    ) {
        let mut field_list: Vec<Value> = fields
            .into_iter()
            .enumerate()
            .map(|(i, t)| json!({"name": format!("f{i}"), "type": t}))
            .collect();
        let old = json!({"type": "record", "name": "Top", "fields": field_list.clone()});
        let mut new_field = added;
        new_field["name"] = json!("added");
        field_list.insert(at.min(field_list.len()), new_field);
        let new = json!({"type": "record", "name": "Top", "fields": field_list});
        let mut counter = 0;
        let (mut old, mut new) = (old, new);
        rename(&mut old, &mut counter);
        counter = 0;
        rename(&mut new, &mut counter);
        let (old, new) = (parse(old), parse(new));
        for rules in [Resolution::Specification, Resolution::Pulsar] {
            // BACKWARD: the new schema reads old data (using the default).
            prop_assert!(can_read_with(&new, &old, rules).is_ok());
            // FORWARD: the old schema reads new data (skipping the field).
            prop_assert!(can_read_with(&old, &new, rules).is_ok());
        }
    }

    #[test]
    fn a_field_without_default_breaks_backward(v in schema_strategy()) {
        let old = parse(json!({"type": "record", "name": "Top", "fields": [{"name": "a", "type": "int"}]}));
        let mut new = json!({"type": "record", "name": "Top", "fields": [
            {"name": "a", "type": "int"}, {"name": "b", "type": v}
        ]});
        let mut counter = 0;
        rename(&mut new, &mut counter);
        let new = parse(new);
        let e = can_read_with(&new, &old, Resolution::Pulsar).unwrap_err();
        prop_assert!(e.reason.starts_with("field 'b' of record '"), "{}", e);
        prop_assert!(e.reason.ends_with("is missing in the writer and has no default"), "{}", e);
        prop_assert!(can_read_with(&old, &new, Resolution::Pulsar).is_ok());
    }

    #[test]
    fn parser_never_panics(text in ".{0,200}") {
        let _ = AvroSchema::parse(&text);
    }
}
