//! Reading a schema type from its REST name. It fails with [`SchemaError`],
//! whose `InvalidSchemaData` names a [`SchemaType`]: kept apart from the type
//! so that the error depends on the type and not the other way round.

use std::str::FromStr;

use super::{ALL, SchemaType};
use crate::SchemaError;

impl SchemaType {
    /// The type a REST name spells. Exact, upper case, like Java's
    /// `SchemaType.valueOf`.
    pub fn from_name(name: &str) -> Result<SchemaType, SchemaError> {
        ALL.iter()
            .copied()
            .find(|t| t.name() == name)
            .ok_or_else(|| SchemaError::UnknownSchemaType(name.to_string()))
    }
}

impl FromStr for SchemaType {
    type Err = SchemaError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SchemaType::from_name(s)
    }
}
