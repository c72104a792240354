//! Avro schemas: a parser for Avro's JSON schema language, Avro's equality
//! (what makes two definitions "the same schema" for the registry) and the
//! reader/writer resolution rules compatibility checks are built on.

mod defaults;
mod parse;
mod resolve;
mod schema;

pub use parse::AvroParseError;
pub use resolve::{Incompatibility, Resolution, can_read, can_read_with};
pub use schema::{
    AvroSchema, Field, FieldOrder, FullName, NamedDef, NamedType, Node, ParseOptions, Primitive,
    Props,
};
