//! Parsing Avro schema JSON into an [`AvroSchema`] (the rules of Avro 1.12's
//! `Schema.Parser`, with the name validator Pulsar's broker installs),
//! checking field defaults when asked.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::schema::{
    AvroSchema, Field, FieldOrder, FullName, NamedDef, NamedType, Node, ParseOptions, Primitive,
    Props,
};

/// A parse failure (Avro's `SchemaParseException` and friends).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AvroParseError(pub String);

fn err<T>(message: impl Into<String>) -> Result<T, AvroParseError> {
    Err(AvroParseError(message.into()))
}

impl AvroSchema {
    /// Parses schema JSON with defaults left unchecked (how Pulsar's broker
    /// parses for validation and compatibility).
    pub fn parse(json: &str) -> Result<AvroSchema, AvroParseError> {
        AvroSchema::parse_with(json, ParseOptions::default())
    }

    pub fn parse_with(json: &str, options: ParseOptions) -> Result<AvroSchema, AvroParseError> {
        let value: Value = serde_json::from_str(json)
            .map_err(|e| AvroParseError(format!("the schema is not JSON: {e}")))?;
        let mut parser = Parser::default();
        let root = parser.parse(&value, None)?;
        let schema = parser.finish(root)?;
        if options.validate_defaults {
            schema.validate_defaults()?;
        }
        Ok(schema)
    }

    fn validate_defaults(&self) -> Result<(), AvroParseError> {
        for named in &self.named {
            for field in named.fields() {
                if let Some(default) = &field.default
                    && !super::defaults::is_special_float_default(&field.schema, default)
                    && !super::defaults::is_valid_default(self, &field.schema, default, 0)
                {
                    return err(format!(
                        "Invalid default for field {}: {} not a {}",
                        field.name,
                        default,
                        self.describe(&field.schema)
                    ));
                }
            }
        }
        Ok(())
    }
}

const SCHEMA_RESERVED: [&str; 10] = [
    "doc",
    "fields",
    "items",
    "name",
    "namespace",
    "size",
    "symbols",
    "values",
    "type",
    "aliases",
];
const FIELD_RESERVED: [&str; 6] = ["default", "doc", "name", "order", "type", "aliases"];

fn props_of(object: &Map<String, Value>, reserved: &[&str], also: Option<&str>) -> Props {
    object
        .iter()
        .filter(|(k, _)| !reserved.contains(&k.as_str()) && Some(k.as_str()) != also)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The name validator Pulsar's broker gives Avro
/// (`StructSchemaDataValidator.CompatibleNameValidator`): a letter, `_` or `$`,
/// then letters, digits, `_` or `$`.
fn validate_name(name: &str) -> Result<(), AvroParseError> {
    let mut chars = name.chars();
    match chars.next() {
        None => return err("Empty name"),
        Some(c) if c.is_alphabetic() || c == '_' || c == '$' => {}
        Some(_) => return err(format!("Illegal initial character: {name}")),
    }
    if chars.any(|c| !(c.is_alphanumeric() || c == '_' || c == '$')) {
        return err(format!("Illegal character in: {name}"));
    }
    Ok(())
}

fn validate_full_name(name: &FullName) -> Result<(), AvroParseError> {
    if let Some(ns) = &name.namespace {
        for part in ns.split('.') {
            validate_name(part).map_err(|e| AvroParseError(format!("Namespace part: {}", e.0)))?;
        }
    }
    validate_name(&name.name)
}

fn text<'v>(object: &'v Map<String, Value>, key: &str) -> Option<&'v str> {
    object.get(key).and_then(Value::as_str)
}

#[derive(Default)]
struct Parser {
    /// `None` while a forward reference waits for its definition.
    named: Vec<Option<NamedType>>,
    defined: HashMap<String, usize>,
    pending: HashMap<String, usize>,
}

impl Parser {
    fn finish(self, root: Node) -> Result<AvroSchema, AvroParseError> {
        if let Some(name) = self.pending.keys().min() {
            return err(format!("Undefined name: {name}"));
        }
        let named = self
            .named
            .into_iter()
            .map(|n| n.ok_or_else(|| AvroParseError("Undefined name".to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AvroSchema { root, named })
    }

    /// A reference by name: the name in the enclosing namespace, then the bare
    /// name; otherwise a forward reference resolved when the parse ends.
    fn find(&mut self, name: &str, space: Option<&str>) -> Node {
        if let Some(p) = Primitive::from_name(name) {
            return Node::Primitive(p, Props::new());
        }
        let full = FullName::new(name, space).full();
        if let Some(&i) = self.defined.get(&full).or_else(|| self.defined.get(name)) {
            return Node::Named(i);
        }
        if let Some(&i) = self.pending.get(&full) {
            return Node::Named(i);
        }
        self.named.push(None);
        let i = self.named.len() - 1;
        self.pending.insert(full, i);
        Node::Named(i)
    }

    /// Registers a named type (Avro's `ParseContext.put`); returns its index.
    fn put(&mut self, named: NamedType) -> Result<usize, AvroParseError> {
        validate_full_name(&named.name)?;
        let full = named.name.full();
        if let Some(&i) = self.defined.get(&full) {
            // Avro accepts a redefinition only if it is equal; a record is
            // registered before its fields, so it never is.
            let same = !matches!(named.def, NamedDef::Record { .. })
                && self.named[i].as_ref() == Some(&named);
            if same {
                return Ok(i);
            }
            return err(format!("Can't redefine: {full}"));
        }
        let i = match self.pending.remove(&full) {
            Some(i) => {
                self.named[i] = Some(named);
                i
            }
            None => {
                self.named.push(Some(named));
                self.named.len() - 1
            }
        };
        self.defined.insert(full, i);
        Ok(i)
    }

    fn parse(&mut self, json: &Value, space: Option<&str>) -> Result<Node, AvroParseError> {
        match json {
            Value::String(name) => Ok(self.find(name, space)),
            Value::Array(branches) => self.parse_union(branches, space),
            Value::Object(object) => {
                let Some(kind) = text(object, "type") else {
                    return err(format!("No type: {json}"));
                };
                if let Some(p) = Primitive::from_name(kind) {
                    return Ok(Node::Primitive(p, props_of(object, &SCHEMA_RESERVED, None)));
                }
                match kind {
                    "record" | "error" => self.parse_record(object, space, kind == "error"),
                    "enum" => self.parse_enum(object, space),
                    "array" => {
                        let items = object.get("items").ok_or_else(|| {
                            AvroParseError(format!("Array has no items type: {json}"))
                        })?;
                        let items = self.parse(items, space)?;
                        Ok(Node::Array(
                            Box::new(items),
                            props_of(object, &SCHEMA_RESERVED, None),
                        ))
                    }
                    "map" => {
                        let values = object.get("values").ok_or_else(|| {
                            AvroParseError(format!("Map has no values type: {json}"))
                        })?;
                        let values = self.parse(values, space)?;
                        Ok(Node::Map(
                            Box::new(values),
                            props_of(object, &SCHEMA_RESERVED, None),
                        ))
                    }
                    "fixed" => self.parse_fixed(object, space),
                    other => Ok(self.find(other, space)),
                }
            }
            other => err(format!("Schema not yet supported: {other}")),
        }
    }

    fn parse_name(
        &self,
        object: &Map<String, Value>,
        space: Option<&str>,
    ) -> Result<FullName, AvroParseError> {
        let Some(name) = text(object, "name") else {
            return err(format!(
                "No name in schema: {}",
                Value::Object(object.clone())
            ));
        };
        let space = text(object, "namespace").or(space);
        Ok(FullName::new(name, space))
    }

    fn parse_aliases(object: &Map<String, Value>) -> Result<Vec<String>, AvroParseError> {
        match object.get("aliases") {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|a| {
                    a.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| AvroParseError(format!("alias not a string: {a}")))
                })
                .collect(),
            Some(_) => err(format!(
                "aliases not an array: {}",
                Value::Object(object.clone())
            )),
        }
    }

    fn named_aliases(
        object: &Map<String, Value>,
        name: &FullName,
    ) -> Result<Vec<FullName>, AvroParseError> {
        Self::parse_aliases(object)?
            .iter()
            .map(|a| {
                let alias = FullName::new(a, name.namespace.as_deref());
                validate_name(&alias.name)?;
                Ok(alias)
            })
            .collect()
    }

    fn parse_record(
        &mut self,
        object: &Map<String, Value>,
        space: Option<&str>,
        is_error: bool,
    ) -> Result<Node, AvroParseError> {
        let name = self.parse_name(object, space)?;
        let aliases = Self::named_aliases(object, &name)?;
        let record_space = name.namespace.clone();
        let index = self.put(NamedType {
            name: name.clone(),
            aliases,
            doc: text(object, "doc").map(str::to_string),
            props: props_of(object, &SCHEMA_RESERVED, None),
            def: NamedDef::Record {
                fields: Vec::new(),
                is_error,
            },
        })?;
        let Some(Value::Array(field_nodes)) = object.get("fields") else {
            return err(format!(
                "Record has no fields: {}",
                Value::Object(object.clone())
            ));
        };
        let mut fields: Vec<Field> = Vec::with_capacity(field_nodes.len());
        for node in field_nodes {
            let field = self.parse_field(node, record_space.as_deref())?;
            if fields.iter().any(|f| f.name == field.name) {
                return err(format!("Duplicate field {} in record {}", field.name, name));
            }
            fields.push(field);
        }
        if let Some(NamedType {
            def: NamedDef::Record { fields: slot, .. },
            ..
        }) = self.named[index].as_mut()
        {
            *slot = fields;
        }
        Ok(Node::Named(index))
    }

    fn parse_field(&mut self, node: &Value, space: Option<&str>) -> Result<Field, AvroParseError> {
        let empty = Map::new();
        let object = node.as_object().unwrap_or(&empty);
        let Some(name) = text(object, "name") else {
            return err(format!("No field name: {node}"));
        };
        validate_name(name)?;
        let Some(type_node) = object.get("type") else {
            return err(format!("No field type: {node}"));
        };
        let schema = self.parse(type_node, space)?;
        let order = match object.get("order") {
            None => FieldOrder::Ascending,
            Some(v) => match v.as_str().map(str::to_ascii_uppercase).as_deref() {
                Some("ASCENDING") => FieldOrder::Ascending,
                Some("DESCENDING") => FieldOrder::Descending,
                Some("IGNORE") => FieldOrder::Ignore,
                _ => return err(format!("Invalid field order {v} of field {name}")),
            },
        };
        let mut default = object.get("default").cloned();
        // Avro turns a string default of a float or double field into a number.
        if let (Some(Value::String(s)), Node::Primitive(Primitive::Float | Primitive::Double, _)) =
            (&default, &schema)
        {
            let parsed: f64 = s.trim().parse().map_err(|_| {
                AvroParseError(format!("Invalid default for field {name}: \"{s}\""))
            })?;
            if let Some(n) = serde_json::Number::from_f64(parsed) {
                default = Some(Value::Number(n));
            }
        }
        Ok(Field {
            name: name.to_string(),
            schema,
            default,
            order,
            aliases: Self::parse_aliases(object)?,
            doc: text(object, "doc").map(str::to_string),
            props: props_of(object, &FIELD_RESERVED, None),
        })
    }

    fn parse_enum(
        &mut self,
        object: &Map<String, Value>,
        space: Option<&str>,
    ) -> Result<Node, AvroParseError> {
        let name = self.parse_name(object, space)?;
        let Some(Value::Array(symbol_nodes)) = object.get("symbols") else {
            return err(format!(
                "Enum has no symbols: {}",
                Value::Object(object.clone())
            ));
        };
        let mut symbols: Vec<String> = Vec::with_capacity(symbol_nodes.len());
        for s in symbol_nodes {
            let Some(symbol) = s.as_str() else {
                return err("Null name");
            };
            validate_name(symbol)?;
            if symbols.iter().any(|t| t == symbol) {
                return err(format!("Duplicate enum symbol: {symbol}"));
            }
            symbols.push(symbol.to_string());
        }
        let default = text(object, "default").map(str::to_string);
        if let Some(d) = &default
            && !symbols.contains(d)
        {
            return err(format!(
                "The Enum Default: {d} is not in the enum symbol set: {symbols:?}"
            ));
        }
        let aliases = Self::named_aliases(object, &name)?;
        let index = self.put(NamedType {
            name,
            aliases,
            doc: text(object, "doc").map(str::to_string),
            props: props_of(object, &SCHEMA_RESERVED, Some("default")),
            def: NamedDef::Enum { symbols, default },
        })?;
        Ok(Node::Named(index))
    }

    fn parse_fixed(
        &mut self,
        object: &Map<String, Value>,
        space: Option<&str>,
    ) -> Result<Node, AvroParseError> {
        let name = self.parse_name(object, space)?;
        let size = object
            .get("size")
            .and_then(Value::as_i64)
            .and_then(|s| i32::try_from(s).ok())
            .and_then(|s| usize::try_from(s).ok())
            .ok_or_else(|| {
                AvroParseError(format!(
                    "Invalid or no size: {}",
                    Value::Object(object.clone())
                ))
            })?;
        let aliases = Self::named_aliases(object, &name)?;
        let index = self.put(NamedType {
            name,
            aliases,
            doc: text(object, "doc").map(str::to_string),
            props: props_of(object, &SCHEMA_RESERVED, None),
            def: NamedDef::Fixed { size },
        })?;
        Ok(Node::Named(index))
    }

    fn parse_union(
        &mut self,
        branches: &[Value],
        space: Option<&str>,
    ) -> Result<Node, AvroParseError> {
        let mut nodes = Vec::with_capacity(branches.len());
        let mut keys: Vec<String> = Vec::with_capacity(branches.len());
        for branch in branches {
            let node = self.parse(branch, space)?;
            let key = match &node {
                Node::Union(_) => return err("Nested union"),
                Node::Primitive(p, _) => p.name().to_string(),
                Node::Array(..) => "array".to_string(),
                Node::Map(..) => "map".to_string(),
                Node::Named(i) => match &self.named[*i] {
                    Some(n) => n.name.full(),
                    // A forward reference: its pending key is its full name.
                    None => self
                        .pending
                        .iter()
                        .find(|(_, v)| **v == *i)
                        .map(|(k, _)| k.clone())
                        .unwrap_or_default(),
                },
            };
            if keys.contains(&key) {
                return err(format!("Duplicate in union:{key}"));
            }
            keys.push(key);
            nodes.push(node);
        }
        Ok(Node::Union(nodes))
    }
}
