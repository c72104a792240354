//! Schema resolution: can data written with one schema be read with another?
//!
//! Two rule sets. [`Resolution::Specification`] is the "Schema Resolution"
//! section of the Avro specification. [`Resolution::Pulsar`] is what Pulsar's
//! broker actually enforces: its Avro validators (`ValidateCanRead` and
//! friends) build Avro Java's resolving grammar and only look for error symbols
//! in it, which differs from the specification in ways a client can see:
//!
//! - record names are not compared (a record `Example` reads a record
//!   `ExampleRequiredDefault` if the fields resolve);
//! - enum symbols are not compared, only enum names (a writer symbol missing
//!   from the reader is not an error);
//! - a named type in a reader union is matched by full name, else (records
//!   only) by a shallow structural match;
//! - a union default may match any branch whose kind fits (Avro 1.12).
//!
//! Both rule sets apply the reader's aliases to the writer first, require a
//! default for every reader field the writer lacks (and that default to be
//! encodable), resolve every branch of a writer union, and allow the promotions
//! int → long → float → double and string ↔ bytes.

use std::collections::{HashMap, HashSet};
use std::fmt;

use super::defaults::{check_default, is_special_float_default};
use super::schema::{AvroSchema, Field, NamedDef, Node, Primitive};

/// Which rules [`can_read_with`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// The Avro specification.
    Specification,
    /// Pulsar's broker (Avro Java 1.12's resolving grammar).
    Pulsar,
}

/// Why a reader cannot read a writer's data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Incompatibility {
    /// Where in the reader's schema: field names joined by `.`, `[]` for array
    /// items, `{}` for map values. Empty at the top level.
    pub path: String,
    pub reason: String,
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "at {}: {}", self.path, self.reason)
        }
    }
}

/// Whether `reader` can read data written with `writer`, by the Avro
/// specification.
pub fn can_read(reader: &AvroSchema, writer: &AvroSchema) -> Result<(), Incompatibility> {
    can_read_with(reader, writer, Resolution::Specification)
}

/// Whether `reader` can read data written with `writer`, by the given rules.
pub fn can_read_with(
    reader: &AvroSchema,
    writer: &AvroSchema,
    rules: Resolution,
) -> Result<(), Incompatibility> {
    Resolver::new(reader, writer, rules).resolve(writer.root(), reader.root())
}

/// A node seen through the named-type table.
#[derive(Clone, Copy)]
enum View<'s> {
    Prim(Primitive),
    Array(&'s Node),
    Map(&'s Node),
    Union(&'s [Node]),
    Record(usize),
    Enum(usize),
    Fixed(usize),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tag {
    Prim(Primitive),
    Array,
    Map,
    Union,
    Record,
    Enum,
    Fixed,
}

fn view<'s>(schema: &'s AvroSchema, node: &'s Node) -> View<'s> {
    match node {
        Node::Primitive(p, _) => View::Prim(*p),
        Node::Array(items, _) => View::Array(items),
        Node::Map(values, _) => View::Map(values),
        Node::Union(branches) => View::Union(branches),
        Node::Named(i) => match schema.named(*i).def {
            NamedDef::Record { .. } => View::Record(*i),
            NamedDef::Enum { .. } => View::Enum(*i),
            NamedDef::Fixed { .. } => View::Fixed(*i),
        },
    }
}

fn tag(v: View<'_>) -> Tag {
    match v {
        View::Prim(p) => Tag::Prim(p),
        View::Array(_) => Tag::Array,
        View::Map(_) => Tag::Map,
        View::Union(_) => Tag::Union,
        View::Record(_) => Tag::Record,
        View::Enum(_) => Tag::Enum,
        View::Fixed(_) => Tag::Fixed,
    }
}

/// Avro's promotions (writer → reader).
fn promotable(w: Primitive, r: Primitive) -> bool {
    use Primitive::*;
    matches!(
        (w, r),
        (Int, Long | Float | Double)
            | (Long, Float | Double)
            | (Float, Double)
            | (String, Bytes)
            | (Bytes, String)
    )
}

fn short_of(full: &str) -> &str {
    full.rsplit('.').next().unwrap_or(full)
}

struct Resolver<'a> {
    reader: &'a AvroSchema,
    writer: &'a AvroSchema,
    rules: Resolution,
    /// Writer full name → reader full name, from the reader's aliases.
    aliases: HashMap<String, String>,
    /// Reader record full name (or alias) → field alias → field name.
    field_aliases: HashMap<String, HashMap<String, String>>,
    /// Record pairs already resolved or being resolved.
    seen: HashSet<(usize, usize)>,
    /// Pulsar's shallow structural match of records in reader unions.
    shallow: HashMap<(usize, usize), bool>,
    shallow_in_progress: HashSet<(usize, usize)>,
    path: Vec<String>,
}

impl<'a> Resolver<'a> {
    fn new(reader: &'a AvroSchema, writer: &'a AvroSchema, rules: Resolution) -> Self {
        let mut aliases = HashMap::new();
        let mut field_aliases: HashMap<String, HashMap<String, String>> = HashMap::new();
        for named in reader.named_types() {
            let full = named.name.full();
            for alias in &named.aliases {
                aliases.insert(alias.full(), full.clone());
            }
            let mut fields = HashMap::new();
            for f in named.fields() {
                for alias in &f.aliases {
                    fields.insert(alias.clone(), f.name.clone());
                }
            }
            if !fields.is_empty() {
                for alias in &named.aliases {
                    field_aliases.insert(alias.full(), fields.clone());
                }
                field_aliases.insert(full, fields);
            }
        }
        Resolver {
            reader,
            writer,
            rules,
            aliases,
            field_aliases,
            seen: HashSet::new(),
            shallow: HashMap::new(),
            shallow_in_progress: HashSet::new(),
            path: Vec::new(),
        }
    }

    fn fail<T>(&self, reason: String) -> Result<T, Incompatibility> {
        Err(Incompatibility {
            path: self.path.join("."),
            reason,
        })
    }

    /// The writer type's full name once the reader's aliases are applied.
    fn writer_full(&self, i: usize) -> String {
        let full = self.writer.named(i).name.full();
        self.aliases.get(&full).cloned().unwrap_or(full)
    }

    fn reader_full(&self, i: usize) -> String {
        self.reader.named(i).name.full()
    }

    fn same_short_name(&self, w: usize, r: usize) -> bool {
        short_of(&self.writer_full(w)) == self.reader.named(r).name.name
    }

    /// The writer field's name once the reader's field aliases are applied.
    fn writer_field_name<'f>(&'f self, record_full: &str, field: &'f Field) -> &'f str {
        self.field_aliases
            .get(record_full)
            .and_then(|m| m.get(&field.name))
            .map(String::as_str)
            .unwrap_or(&field.name)
    }

    fn describe_writer(&self, node: &Node) -> String {
        self.writer.describe(node)
    }

    fn describe_reader(&self, node: &Node) -> String {
        self.reader.describe(node)
    }

    fn resolve(&mut self, w: &Node, r: &Node) -> Result<(), Incompatibility> {
        let wv = view(self.writer, w);
        let rv = view(self.reader, r);
        if let View::Union(branches) = wv {
            if self.union_equiv(w, r, &mut HashMap::new()) {
                return Ok(());
            }
            for b in branches {
                self.resolve(b, r).map_err(|e| Incompatibility {
                    path: e.path,
                    reason: format!(
                        "writer union branch {} cannot be read: {}",
                        self.describe_writer(b),
                        e.reason
                    ),
                })?;
            }
            return Ok(());
        }
        if tag(wv) == tag(rv) {
            return match (wv, rv) {
                (View::Prim(_), View::Prim(_)) => Ok(()),
                (View::Array(wi), View::Array(ri)) => {
                    self.path.push("[]".to_string());
                    let result = self.resolve(wi, ri);
                    self.path.pop();
                    result
                }
                (View::Map(wi), View::Map(ri)) => {
                    self.path.push("{}".to_string());
                    let result = self.resolve(wi, ri);
                    self.path.pop();
                    result
                }
                (View::Fixed(wi), View::Fixed(ri)) => self.resolve_fixed(wi, ri),
                (View::Enum(wi), View::Enum(ri)) => self.resolve_enum(wi, ri),
                (View::Record(wi), View::Record(ri)) => self.resolve_record(wi, ri),
                _ => unreachable!("same tag, same view"),
            };
        }
        if let View::Union(branches) = rv {
            return match self.first_matching_branch(w, branches) {
                Some(j) => self.resolve(w, &branches[j]),
                None => self.fail(format!(
                    "no branch of the reader's {} can read the writer's {}",
                    self.describe_reader(r),
                    self.describe_writer(w)
                )),
            };
        }
        match (wv, rv) {
            (View::Prim(wp), View::Prim(rp)) if promotable(wp, rp) => Ok(()),
            _ => self.fail(format!(
                "the writer's {} cannot be read as {}",
                self.describe_writer(w),
                self.describe_reader(r)
            )),
        }
    }

    fn resolve_fixed(&mut self, wi: usize, ri: usize) -> Result<(), Incompatibility> {
        if !self.same_short_name(wi, ri) {
            return self.fail(format!(
                "fixed '{}' cannot be read as fixed '{}': the names differ",
                self.writer.named(wi).name,
                self.reader.named(ri).name
            ));
        }
        let (NamedDef::Fixed { size: ws }, NamedDef::Fixed { size: rs }) =
            (&self.writer.named(wi).def, &self.reader.named(ri).def)
        else {
            unreachable!("fixed views");
        };
        if ws != rs {
            return self.fail(format!(
                "fixed '{}' has {ws} bytes in the writer and {rs} in the reader",
                self.reader.named(ri).name
            ));
        }
        Ok(())
    }

    fn resolve_enum(&mut self, wi: usize, ri: usize) -> Result<(), Incompatibility> {
        if !self.same_short_name(wi, ri) {
            return self.fail(format!(
                "enum '{}' cannot be read as enum '{}': the names differ",
                self.writer.named(wi).name,
                self.reader.named(ri).name
            ));
        }
        if self.rules == Resolution::Specification {
            let (
                NamedDef::Enum { symbols: ws, .. },
                NamedDef::Enum {
                    symbols: rs,
                    default,
                },
            ) = (&self.writer.named(wi).def, &self.reader.named(ri).def)
            else {
                unreachable!("enum views");
            };
            if default.is_none()
                && let Some(missing) = ws.iter().find(|s| !rs.contains(s))
            {
                return self.fail(format!(
                    "symbol '{missing}' of enum '{}' is not in the reader's symbols and the reader has no default",
                    self.reader.named(ri).name
                ));
            }
        }
        Ok(())
    }

    fn resolve_record(&mut self, wi: usize, ri: usize) -> Result<(), Incompatibility> {
        if !self.seen.insert((wi, ri)) {
            return Ok(());
        }
        let writer_full = self.writer_full(wi);
        let reader_type = self.reader.named(ri);
        let writer_type = self.writer.named(wi);
        if self.rules == Resolution::Specification && !self.same_short_name(wi, ri) {
            return self.fail(format!(
                "record '{}' cannot be read as record '{}': the names differ",
                writer_type.name, reader_type.name
            ));
        }
        let writer_names: Vec<String> = writer_type
            .fields()
            .iter()
            .map(|f| self.writer_field_name(&writer_full, f).to_string())
            .collect();
        let has = |name: &str| writer_names.iter().any(|n| n == name);
        // A reader field the writer lacks needs a default.
        for rf in reader_type.fields() {
            if !has(&rf.name) && rf.default.is_none() {
                return self.fail(format!(
                    "field '{}' of record '{}' is missing in the writer and has no default",
                    rf.name, reader_type.name
                ));
            }
        }
        // Fields both have resolve against each other.
        for (wf, name) in writer_type.fields().iter().zip(&writer_names) {
            if let Some(rf) = reader_type.fields().iter().find(|rf| rf.name == *name) {
                self.path.push(rf.name.clone());
                let result = self.resolve(&wf.schema, &rf.schema);
                self.path.pop();
                result?;
            }
        }
        // Defaults the reader will use must be encodable.
        let any_branch = self.rules == Resolution::Pulsar;
        for rf in reader_type.fields() {
            if has(&rf.name) {
                continue;
            }
            if let Some(default) = &rf.default
                && !is_special_float_default(&rf.schema, default)
                && let Err(why) = check_default(self.reader, &rf.schema, default, any_branch, 0)
            {
                self.path.push(rf.name.clone());
                let result = self.fail(format!(
                    "field '{}' of record '{}' is missing in the writer and its default {} is not a valid {}: {why}",
                    rf.name,
                    reader_type.name,
                    default,
                    self.describe_reader(&rf.schema)
                ));
                self.path.pop();
                return result;
            }
        }
        Ok(())
    }

    /// Which branch of a reader union reads a (non-union) writer type: the
    /// first branch of the same type (named types: same full name; records
    /// under Pulsar's rules: else the first shallow structural match, preferring
    /// one with the same short name), else the first branch the writer type
    /// promotes to.
    fn first_matching_branch(&mut self, w: &Node, branches: &[Node]) -> Option<usize> {
        let wv = view(self.writer, w);
        let wt = tag(wv);
        let mut structural: Option<usize> = None;
        for (j, b) in branches.iter().enumerate() {
            let bv = view(self.reader, b);
            if tag(bv) != wt {
                continue;
            }
            match (wv, bv) {
                (View::Record(wi), View::Record(ri))
                | (View::Enum(wi), View::Enum(ri))
                | (View::Fixed(wi), View::Fixed(ri)) => {
                    let names_match = match self.rules {
                        Resolution::Pulsar => self.writer_full(wi) == self.reader_full(ri),
                        Resolution::Specification => self.same_short_name(wi, ri),
                    };
                    if names_match {
                        return Some(j);
                    }
                    if self.rules == Resolution::Pulsar
                        && wt == Tag::Record
                        && !self.shallow_error(wi, ri)
                        && (structural.is_none() || self.same_short_name(wi, ri))
                    {
                        structural = Some(j);
                    }
                }
                _ => return Some(j),
            }
        }
        if structural.is_some() {
            return structural;
        }
        let View::Prim(wp) = wv else {
            return None;
        };
        branches
            .iter()
            .position(|b| matches!(view(self.reader, b), View::Prim(rp) if promotable(wp, rp)))
    }

    /// Pulsar's structural match of a writer record against a reader union
    /// branch (Avro's `hasMatchError`): an error only if a reader field without
    /// default is missing, or a field's own resolution fails at its top level.
    fn shallow_error(&mut self, wi: usize, ri: usize) -> bool {
        if let Some(&known) = self.shallow.get(&(wi, ri)) {
            return known;
        }
        if !self.shallow_in_progress.insert((wi, ri)) {
            return false;
        }
        let result = self.missing_required(wi, ri) || {
            let writer_full = self.writer_full(wi);
            let mut error = false;
            for wf in self.writer.named(wi).fields() {
                let name = self.writer_field_name(&writer_full, wf).to_string();
                if let Some(rf) = self
                    .reader
                    .named(ri)
                    .fields()
                    .iter()
                    .find(|rf| rf.name == name)
                    && self.direct_error(&wf.schema, &rf.schema)
                {
                    error = true;
                    break;
                }
            }
            error
        };
        self.shallow_in_progress.remove(&(wi, ri));
        self.shallow.insert((wi, ri), result);
        result
    }

    fn missing_required(&self, wi: usize, ri: usize) -> bool {
        let writer_full = self.writer_full(wi);
        let writer_names: Vec<&str> = self
            .writer
            .named(wi)
            .fields()
            .iter()
            .map(|f| self.writer_field_name(&writer_full, f))
            .collect();
        self.reader
            .named(ri)
            .fields()
            .iter()
            .any(|rf| rf.default.is_none() && !writer_names.contains(&rf.name.as_str()))
    }

    /// Whether resolving `w` against `r` fails immediately (without looking
    /// inside containers, unions or records' fields).
    fn direct_error(&mut self, w: &Node, r: &Node) -> bool {
        let wv = view(self.writer, w);
        let rv = view(self.reader, r);
        if let View::Union(_) = wv {
            return false;
        }
        if tag(wv) == tag(rv) {
            return match (wv, rv) {
                (View::Fixed(wi), View::Fixed(ri)) => {
                    let sizes_differ = !matches!(
                        (&self.writer.named(wi).def, &self.reader.named(ri).def),
                        (NamedDef::Fixed { size: a }, NamedDef::Fixed { size: b }) if a == b
                    );
                    !self.same_short_name(wi, ri) || sizes_differ
                }
                (View::Enum(wi), View::Enum(ri)) => !self.same_short_name(wi, ri),
                (View::Record(wi), View::Record(ri)) => self.missing_required(wi, ri),
                _ => false,
            };
        }
        if let View::Union(branches) = rv {
            return self.first_matching_branch(w, branches).is_none();
        }
        !matches!((wv, rv), (View::Prim(wp), View::Prim(rp)) if promotable(wp, rp))
    }

    /// Avro's `unionEquiv`: the writer union is, branch for branch, the reader
    /// union (same kinds, short names, sizes, symbols, field names).
    fn union_equiv(&self, w: &Node, r: &Node, seen: &mut HashMap<(usize, usize), bool>) -> bool {
        let wv = view(self.writer, w);
        let rv = view(self.reader, r);
        if tag(wv) != tag(rv) {
            return false;
        }
        match (wv, rv) {
            (View::Prim(_), View::Prim(_)) => true,
            (View::Array(a), View::Array(b)) | (View::Map(a), View::Map(b)) => {
                self.union_equiv(a, b, seen)
            }
            (View::Union(a), View::Union(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| self.union_equiv(x, y, seen))
            }
            (View::Fixed(wi), View::Fixed(ri)) => {
                self.same_short_name(wi, ri)
                    && matches!(
                        (&self.writer.named(wi).def, &self.reader.named(ri).def),
                        (NamedDef::Fixed { size: a }, NamedDef::Fixed { size: b }) if a == b
                    )
            }
            (View::Enum(wi), View::Enum(ri)) => {
                self.same_short_name(wi, ri)
                    && matches!(
                        (&self.writer.named(wi).def, &self.reader.named(ri).def),
                        (NamedDef::Enum { symbols: a, .. }, NamedDef::Enum { symbols: b, .. }) if a == b
                    )
            }
            (View::Record(wi), View::Record(ri)) => {
                if !self.same_short_name(wi, ri) {
                    return false;
                }
                if let Some(&known) = seen.get(&(wi, ri)) {
                    return known;
                }
                seen.insert((wi, ri), true);
                let writer_full = self.writer_full(wi);
                let wf = self.writer.named(wi).fields();
                let rf = self.reader.named(ri).fields();
                let equiv = wf.len() == rf.len()
                    && wf.iter().zip(rf).all(|(a, b)| {
                        self.writer_field_name(&writer_full, a) == b.name
                            && self.union_equiv(&a.schema, &b.schema, seen)
                    });
                seen.insert((wi, ri), equiv);
                equiv
            }
            _ => false,
        }
    }
}
