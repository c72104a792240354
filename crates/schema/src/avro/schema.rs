//! The parsed form of an Avro schema: a tree of nodes over a table of named
//! types (records, enums, fixed), and Avro's structural equality. `parse`
//! builds it from schema JSON.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde_json::Value;

/// Extra attributes of a schema or field (`logicalType`, `java-class`, ...):
/// everything that is not a reserved key. They take part in equality.
pub type Props = BTreeMap<String, Value>;

/// Avro's primitive types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Primitive {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
}

impl Primitive {
    pub const fn name(self) -> &'static str {
        match self {
            Primitive::Null => "null",
            Primitive::Boolean => "boolean",
            Primitive::Int => "int",
            Primitive::Long => "long",
            Primitive::Float => "float",
            Primitive::Double => "double",
            Primitive::Bytes => "bytes",
            Primitive::String => "string",
        }
    }

    pub fn from_name(name: &str) -> Option<Primitive> {
        Some(match name {
            "null" => Primitive::Null,
            "boolean" => Primitive::Boolean,
            "int" => Primitive::Int,
            "long" => Primitive::Long,
            "float" => Primitive::Float,
            "double" => Primitive::Double,
            "bytes" => Primitive::Bytes,
            "string" => Primitive::String,
            _ => return None,
        })
    }
}

/// One node of a schema tree. Named types (records, enums, fixed) live in the
/// schema's table and are referenced by index, which is how recursive types and
/// references by name are represented.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Primitive(Primitive, Props),
    Array(Box<Node>, Props),
    Map(Box<Node>, Props),
    Union(Vec<Node>),
    Named(usize),
}

/// A full name: `namespace.name`, the namespace optional.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FullName {
    pub name: String,
    pub namespace: Option<String>,
}

impl FullName {
    /// Avro's `Name(name, space)`: a dotted name carries its own namespace; an
    /// empty namespace is no namespace.
    pub(super) fn new(name: &str, space: Option<&str>) -> FullName {
        let (namespace, name) = match name.rfind('.') {
            Some(dot) => (Some(&name[..dot]), &name[dot + 1..]),
            None => (space, name),
        };
        FullName {
            name: name.to_string(),
            namespace: namespace.filter(|s| !s.is_empty()).map(str::to_string),
        }
    }

    pub fn full(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}.{}", self.name),
            None => self.name.clone(),
        }
    }
}

impl fmt::Display for FullName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full())
    }
}

/// The sort order attribute of a record field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOrder {
    Ascending,
    Descending,
    Ignore,
}

/// A record field.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub schema: Node,
    /// The default, as JSON (`"default": null` is a default).
    pub default: Option<Value>,
    pub order: FieldOrder,
    pub aliases: Vec<String>,
    pub doc: Option<String>,
    pub props: Props,
}

/// What a named type is.
#[derive(Debug, Clone, PartialEq)]
pub enum NamedDef {
    Record {
        fields: Vec<Field>,
        is_error: bool,
    },
    Enum {
        symbols: Vec<String>,
        default: Option<String>,
    },
    Fixed {
        size: usize,
    },
}

/// A record, enum or fixed, with its name and aliases.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedType {
    pub name: FullName,
    /// Aliases, resolved against this type's namespace.
    pub aliases: Vec<FullName>,
    pub doc: Option<String>,
    pub props: Props,
    pub def: NamedDef,
}

impl NamedType {
    pub fn kind_name(&self) -> &'static str {
        match self.def {
            NamedDef::Record { .. } => "record",
            NamedDef::Enum { .. } => "enum",
            NamedDef::Fixed { .. } => "fixed",
        }
    }

    pub fn fields(&self) -> &[Field] {
        match &self.def {
            NamedDef::Record { fields, .. } => fields,
            _ => &[],
        }
    }
}

/// A parsed Avro schema.
#[derive(Debug, Clone)]
pub struct AvroSchema {
    pub(super) root: Node,
    pub(super) named: Vec<NamedType>,
}

impl AvroSchema {
    pub fn root(&self) -> &Node {
        &self.root
    }

    pub fn named_types(&self) -> &[NamedType] {
        &self.named
    }

    pub fn named(&self, index: usize) -> &NamedType {
        &self.named[index]
    }

    /// The named type called `full_name`, if any.
    pub fn find(&self, full_name: &str) -> Option<&NamedType> {
        self.named.iter().find(|n| n.name.full() == full_name)
    }

    /// Whether the top level is a union.
    pub fn is_union(&self) -> bool {
        matches!(self.root, Node::Union(_))
    }

    /// A short description of a node, for messages: `int`, `record 'User'`,
    /// `union [null, int]`.
    pub fn describe(&self, node: &Node) -> String {
        match node {
            Node::Primitive(p, _) => p.name().to_string(),
            Node::Array(items, _) => format!("array of {}", self.describe(items)),
            Node::Map(values, _) => format!("map of {}", self.describe(values)),
            Node::Union(branches) => {
                let parts: Vec<String> = branches.iter().map(|b| self.short(b)).collect();
                format!("union [{}]", parts.join(", "))
            }
            Node::Named(i) => {
                let n = &self.named[*i];
                format!("{} '{}'", n.kind_name(), n.name)
            }
        }
    }

    fn short(&self, node: &Node) -> String {
        match node {
            Node::Primitive(p, _) => p.name().to_string(),
            Node::Array(..) => "array".to_string(),
            Node::Map(..) => "map".to_string(),
            Node::Union(..) => "union".to_string(),
            Node::Named(i) => self.named[*i].name.full(),
        }
    }
}

/// Avro's `Schema.equals`: same types, same full names, same fields in the
/// same order with the same defaults and orders, same enum symbols, same fixed
/// sizes, same extra properties. Docs and aliases do not count, nor do enum
/// defaults.
impl PartialEq for AvroSchema {
    fn eq(&self, other: &AvroSchema) -> bool {
        let mut seen = HashSet::new();
        nodes_equal(self, &self.root, other, &other.root, &mut seen)
    }
}

fn nodes_equal(
    a: &AvroSchema,
    x: &Node,
    b: &AvroSchema,
    y: &Node,
    seen: &mut HashSet<(usize, usize)>,
) -> bool {
    match (x, y) {
        (Node::Primitive(p, pp), Node::Primitive(q, qp)) => p == q && pp == qp,
        (Node::Array(i, ip), Node::Array(j, jp)) | (Node::Map(i, ip), Node::Map(j, jp)) => {
            ip == jp && nodes_equal(a, i, b, j, seen)
        }
        (Node::Union(xs), Node::Union(ys)) => {
            xs.len() == ys.len()
                && xs
                    .iter()
                    .zip(ys)
                    .all(|(x, y)| nodes_equal(a, x, b, y, seen))
        }
        (Node::Named(i), Node::Named(j)) => {
            let (n, m) = (&a.named[*i], &b.named[*j]);
            if n.name != m.name || n.props != m.props {
                return false;
            }
            match (&n.def, &m.def) {
                (NamedDef::Fixed { size: s }, NamedDef::Fixed { size: t }) => s == t,
                (NamedDef::Enum { symbols: s, .. }, NamedDef::Enum { symbols: t, .. }) => s == t,
                (NamedDef::Record { fields: f, .. }, NamedDef::Record { fields: g, .. }) => {
                    if !seen.insert((*i, *j)) {
                        return true;
                    }
                    f.len() == g.len()
                        && f.iter().zip(g).all(|(f, g)| {
                            f.name == g.name
                                && f.default == g.default
                                && f.order == g.order
                                && f.props == g.props
                                && nodes_equal(a, &f.schema, b, &g.schema, seen)
                        })
                }
                _ => false,
            }
        }
        _ => false,
    }
}

/// Parser options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ParseOptions {
    /// Check field defaults against their types (Avro's
    /// `setValidateDefaults`). Pulsar's validators and compatibility checks
    /// parse with this off; its "is this the same schema" lookup parses with
    /// Avro's default, on.
    pub validate_defaults: bool,
}
