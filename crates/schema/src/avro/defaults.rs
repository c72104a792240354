//! Field defaults: Avro's `isValidDefault` (checked at parse time when asked)
//! and the stricter check schema resolution performs when it has to fill a
//! reader field from its default (Avro's `ResolvingGrammarGenerator.encode`).

use serde_json::Value;

use super::schema::{AvroSchema, NamedDef, Node, Primitive};

/// Defaults nest as deep as their JSON; records whose field defaults refer to
/// the record itself could loop, so stop somewhere.
const MAX_DEPTH: usize = 64;

/// Avro turns a string default of a float or double field into a double when
/// it parses the field (`"NaN"`, `"Infinity"`); the finite ones became numbers
/// in the parser, the others stay strings here and count as numbers.
pub(crate) fn is_special_float_default(node: &Node, value: &Value) -> bool {
    matches!(
        node,
        Node::Primitive(Primitive::Float | Primitive::Double, _)
    ) && value
        .as_str()
        .is_some_and(|s| s.trim().parse::<f64>().is_ok())
}

/// Avro 1.12's `Schema.isValidDefault`.
pub(crate) fn is_valid_default(
    schema: &AvroSchema,
    node: &Node,
    value: &Value,
    depth: usize,
) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    match node {
        Node::Primitive(p, _) => match p {
            Primitive::String | Primitive::Bytes => value.is_string(),
            Primitive::Int => value.as_i64().is_some_and(|v| i32::try_from(v).is_ok()),
            Primitive::Long => value.is_i64(),
            Primitive::Float | Primitive::Double => value.is_number(),
            Primitive::Boolean => value.is_boolean(),
            Primitive::Null => value.is_null(),
        },
        Node::Array(items, _) => value.as_array().is_some_and(|a| {
            a.iter()
                .all(|v| is_valid_default(schema, items, v, depth + 1))
        }),
        Node::Map(values, _) => value.as_object().is_some_and(|m| {
            m.values()
                .all(|v| is_valid_default(schema, values, v, depth + 1))
        }),
        // A union default may match any branch (Avro 1.12).
        Node::Union(branches) => branches
            .iter()
            .any(|b| is_valid_value(schema, b, value, depth + 1)),
        Node::Named(i) => match &schema.named(*i).def {
            NamedDef::Enum { .. } | NamedDef::Fixed { .. } => value.is_string(),
            NamedDef::Record { fields, .. } => {
                let Some(object) = value.as_object() else {
                    return false;
                };
                fields.iter().all(|f| {
                    object
                        .get(&f.name)
                        .or(f.default.as_ref())
                        .is_some_and(|v| is_valid_value(schema, &f.schema, v, depth + 1))
                })
            }
        },
    }
}

fn is_valid_value(schema: &AvroSchema, node: &Node, value: &Value, depth: usize) -> bool {
    match node {
        Node::Union(branches) => branches
            .iter()
            .any(|b| is_valid_default(schema, b, value, depth + 1)),
        other => is_valid_default(schema, other, value, depth),
    }
}

/// Whether resolution can encode `value` as a default of type `node`. With
/// `any_union_branch` a union default may match the first branch whose kind
/// fits (Avro 1.12, what Pulsar 4.x runs); without it the default must match the
/// union's first branch (the Avro specification, and Avro 1.11).
pub(crate) fn check_default(
    schema: &AvroSchema,
    node: &Node,
    value: &Value,
    any_union_branch: bool,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("the default nests too deeply".to_string());
    }
    let expect = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(format!("{value} is not {what}"))
        }
    };
    match node {
        Node::Primitive(p, _) => match p {
            Primitive::String | Primitive::Bytes => expect(value.is_string(), "a string"),
            Primitive::Int | Primitive::Long | Primitive::Float | Primitive::Double => {
                expect(value.is_number(), "a number")
            }
            Primitive::Boolean => expect(value.is_boolean(), "a boolean"),
            Primitive::Null => expect(value.is_null(), "null"),
        },
        Node::Array(items, _) => {
            // Jackson iterates the members of an object and nothing of a scalar.
            let elements: Vec<&Value> = match value {
                Value::Array(a) => a.iter().collect(),
                Value::Object(m) => m.values().collect(),
                _ => Vec::new(),
            };
            elements
                .into_iter()
                .try_for_each(|v| check_default(schema, items, v, any_union_branch, depth + 1))
        }
        Node::Map(values, _) => match value {
            Value::Object(m) => m
                .values()
                .try_for_each(|v| check_default(schema, values, v, any_union_branch, depth + 1)),
            _ => Ok(()),
        },
        Node::Union(branches) => {
            let branch = if any_union_branch {
                branches.iter().find(|b| kind_fits(schema, b, value))
            } else {
                branches.first()
            };
            match branch {
                Some(b) => check_default(schema, b, value, any_union_branch, depth + 1),
                None => Err(format!("{value} matches no branch of the union")),
            }
        }
        Node::Named(i) => {
            let named = schema.named(*i);
            match &named.def {
                NamedDef::Enum { symbols, .. } => match value.as_str() {
                    Some(s) if symbols.iter().any(|t| t == s) => Ok(()),
                    _ => Err(format!("{value} is not a symbol of enum '{}'", named.name)),
                },
                NamedDef::Fixed { .. } => expect(value.is_string(), "a string"),
                NamedDef::Record { fields, .. } => fields.iter().try_for_each(|f| {
                    let v = value
                        .as_object()
                        .and_then(|m| m.get(&f.name))
                        .or(f.default.as_ref())
                        .ok_or_else(|| format!("no default value for field '{}'", f.name))?;
                    check_default(schema, &f.schema, v, any_union_branch, depth + 1)
                }),
            }
        }
    }
}

fn kind_fits(schema: &AvroSchema, node: &Node, value: &Value) -> bool {
    match node {
        Node::Primitive(p, _) => match p {
            Primitive::String | Primitive::Bytes => value.is_string(),
            Primitive::Int | Primitive::Long | Primitive::Float | Primitive::Double => {
                value.is_number()
            }
            Primitive::Boolean => value.is_boolean(),
            Primitive::Null => value.is_null(),
        },
        Node::Named(i) => match schema.named(*i).def {
            NamedDef::Fixed { .. } => value.is_string(),
            _ => true,
        },
        _ => true,
    }
}
