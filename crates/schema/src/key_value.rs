//! KEY_VALUE schemas: how Pulsar packs a key schema and a value schema into one
//! (`KeyValueSchemaInfo`, `KeyValue.encode/decode`, `SchemaUtils`).
//!
//! Layout of the definition bytes: a big-endian `i32` length, the key schema's
//! definition, a big-endian `i32` length, the value schema's definition (a length
//! of -1 means "absent"). Everything else about the components lives in the
//! properties: `key.schema.name`, `key.schema.type` (a [`SchemaType`] name,
//! `BYTES` when missing), `key.schema.properties` (a JSON object of strings), the
//! same three for `value.`, and `kv.encoding.type` (`INLINE` when missing, or
//! `SEPARATED`).

use std::collections::BTreeMap;

use crate::{SchemaData, SchemaError, SchemaType};

pub const KEY_SCHEMA_NAME: &str = "key.schema.name";
pub const KEY_SCHEMA_TYPE: &str = "key.schema.type";
pub const KEY_SCHEMA_PROPS: &str = "key.schema.properties";
pub const VALUE_SCHEMA_NAME: &str = "value.schema.name";
pub const VALUE_SCHEMA_TYPE: &str = "value.schema.type";
pub const VALUE_SCHEMA_PROPS: &str = "value.schema.properties";
pub const KV_ENCODING_TYPE: &str = "kv.encoding.type";

/// Where a key/value message keeps its key (`KeyValueEncodingType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyValueEncoding {
    /// Key and value both in the payload.
    Inline,
    /// Key in the message key, value in the payload.
    Separated,
}

impl KeyValueEncoding {
    pub const fn name(self) -> &'static str {
        match self {
            KeyValueEncoding::Inline => "INLINE",
            KeyValueEncoding::Separated => "SEPARATED",
        }
    }
}

/// A decoded KEY_VALUE schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValueSchema {
    pub key: SchemaData,
    pub key_name: String,
    pub value: SchemaData,
    pub value_name: String,
    pub encoding: KeyValueEncoding,
}

fn bad(reason: impl Into<String>) -> SchemaError {
    SchemaError::invalid(SchemaType::KeyValue, reason)
}

/// Splits the definition bytes into (key, value) definitions.
pub fn split_key_value_data(data: &[u8]) -> Result<(Vec<u8>, Vec<u8>), SchemaError> {
    let mut rest = data;
    let key = take_part(&mut rest, "key")?;
    let value = take_part(&mut rest, "value")?;
    Ok((key, value))
}

fn take_part(rest: &mut &[u8], which: &str) -> Result<Vec<u8>, SchemaError> {
    let (len_bytes, tail) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| bad(format!("truncated before the {which} schema length")))?;
    let len = i32::from_be_bytes(*len_bytes);
    if len == -1 {
        *rest = tail;
        return Ok(Vec::new());
    }
    let len =
        usize::try_from(len).map_err(|_| bad(format!("negative {which} schema length {len}")))?;
    if tail.len() < len {
        return Err(bad(format!(
            "{which} schema length {len} exceeds the {} bytes left",
            tail.len()
        )));
    }
    let (part, tail) = tail.split_at(len);
    *rest = tail;
    Ok(part.to_vec())
}

/// Joins two definitions into KEY_VALUE definition bytes.
pub fn join_key_value_data(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + key.len() + value.len());
    // Definitions come from frames far smaller than 2 GiB.
    out.extend_from_slice(&(key.len() as i32).to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&(value.len() as i32).to_be_bytes());
    out.extend_from_slice(value);
    out
}

/// Decodes a KEY_VALUE schema into its components
/// (`KeyValueSchemaInfo.decodeKeyValueSchemaInfo`).
pub fn decode_key_value(schema: &SchemaData) -> Result<KeyValueSchema, SchemaError> {
    if schema.schema_type != SchemaType::KeyValue {
        return Err(bad(format!(
            "not a KEY_VALUE schema but {}",
            schema.schema_type
        )));
    }
    let (key_data, value_data) = split_key_value_data(&schema.data)?;
    let props = &schema.properties;
    let component = |name_prop: &str, type_prop: &str, props_prop: &str, data: Vec<u8>| {
        let schema_type = match props.get(type_prop) {
            Some(name) => SchemaType::from_name(name)
                .map_err(|_| bad(format!("{type_prop} is '{name}', not a schema type")))?,
            None => SchemaType::Bytes,
        };
        let properties = match props.get(props_prop).map(String::as_str) {
            None | Some("") => BTreeMap::new(),
            Some(text) => deserialize_properties(text)
                .map_err(|e| bad(format!("{props_prop} is not a JSON object of strings: {e}")))?,
        };
        let name = props.get(name_prop).cloned().unwrap_or_default();
        Ok::<_, SchemaError>((
            SchemaData {
                schema_type,
                data,
                properties,
            },
            name,
        ))
    };
    let (key, key_name) = component(KEY_SCHEMA_NAME, KEY_SCHEMA_TYPE, KEY_SCHEMA_PROPS, key_data)?;
    let (value, value_name) = component(
        VALUE_SCHEMA_NAME,
        VALUE_SCHEMA_TYPE,
        VALUE_SCHEMA_PROPS,
        value_data,
    )?;
    let encoding = match props.get(KV_ENCODING_TYPE).map(String::as_str) {
        None | Some("") | Some("INLINE") => KeyValueEncoding::Inline,
        Some("SEPARATED") => KeyValueEncoding::Separated,
        Some(other) => return Err(bad(format!("{KV_ENCODING_TYPE} is '{other}'"))),
    };
    Ok(KeyValueSchema {
        key,
        key_name,
        value,
        value_name,
        encoding,
    })
}

/// Builds a KEY_VALUE schema from its components
/// (`KeyValueSchemaInfo.encodeKeyValueSchemaInfo`).
pub fn encode_key_value(kv: &KeyValueSchema) -> SchemaData {
    let mut properties = BTreeMap::new();
    for (name_prop, type_prop, props_prop, name, part) in [
        (
            KEY_SCHEMA_NAME,
            KEY_SCHEMA_TYPE,
            KEY_SCHEMA_PROPS,
            &kv.key_name,
            &kv.key,
        ),
        (
            VALUE_SCHEMA_NAME,
            VALUE_SCHEMA_TYPE,
            VALUE_SCHEMA_PROPS,
            &kv.value_name,
            &kv.value,
        ),
    ] {
        properties.insert(name_prop.to_string(), name.clone());
        properties.insert(type_prop.to_string(), part.schema_type.name().to_string());
        properties.insert(
            props_prop.to_string(),
            serialize_properties(&part.properties),
        );
    }
    properties.insert(KV_ENCODING_TYPE.to_string(), kv.encoding.name().to_string());
    SchemaData {
        schema_type: SchemaType::KeyValue,
        data: join_key_value_data(&kv.key.data, &kv.value.data),
        properties,
    }
}

fn serialize_properties(props: &BTreeMap<String, String>) -> String {
    serde_json::to_string(props).unwrap_or_else(|_| "{}".to_string())
}

fn deserialize_properties(text: &str) -> Result<BTreeMap<String, String>, serde_json::Error> {
    serde_json::from_str(text)
}

/// The REST form of a KEY_VALUE definition: `{"key": <key definition JSON or
/// "">, "value": ...}` (`SchemaUtils.convertKeyValueSchemaInfoDataToString`).
/// Primitive components show as `""`.
pub fn key_value_data_to_rest_json(schema: &SchemaData) -> Result<String, SchemaError> {
    let kv = decode_key_value(schema)?;
    let part = |p: &SchemaData| -> Result<String, SchemaError> {
        if p.schema_type.is_primitive() {
            return Ok("\"\"".to_string());
        }
        let text = std::str::from_utf8(&p.data)
            .map_err(|_| bad(format!("the {} component is not UTF-8", p.schema_type)))?;
        minify_json(text).ok_or_else(|| bad(format!("the {} component is not JSON", p.schema_type)))
    };
    Ok(format!(
        "{{\"key\":{},\"value\":{}}}",
        part(&kv.key)?,
        part(&kv.value)?
    ))
}

/// The definition bytes a REST upload of a KEY_VALUE schema stores
/// (`SchemaUtils.convertKeyValueDataStringToSchemaInfoSchema`): each of `key`
/// and `value` is kept as compact JSON text, `""` becoming an empty definition.
pub fn key_value_data_from_rest_json(text: &str) -> Result<Vec<u8>, SchemaError> {
    let parsed: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| bad(format!("the KEY_VALUE definition is not JSON: {e}")))?;
    let object = parsed
        .as_object()
        .ok_or_else(|| bad("the KEY_VALUE definition is not a JSON object"))?;
    let raw = |which: &str| -> Result<Vec<u8>, SchemaError> {
        let value = object
            .get(which)
            .ok_or_else(|| bad(format!("the KEY_VALUE definition has no '{which}'")))?;
        if value.as_str() == Some("") {
            return Ok(Vec::new());
        }
        let member = raw_member(text, which).ok_or_else(|| {
            bad(format!(
                "cannot locate '{which}' in the KEY_VALUE definition"
            ))
        })?;
        Ok(minify_json(member).unwrap_or_default().into_bytes())
    };
    Ok(join_key_value_data(&raw("key")?, &raw("value")?))
}

/// Removes insignificant whitespace from valid JSON, keeping member order (a
/// round trip through `serde_json::Value` would sort object keys).
pub(crate) fn minify_json(text: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(text).ok()?;
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    Some(out)
}

/// The raw text of the value of a top-level member of a JSON object (the last
/// one when a key repeats, as JSON parsers keep).
fn raw_member<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    let bytes = text.as_bytes();
    let mut found = None;
    let mut i = skip_ws(bytes, 0);
    if bytes.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(bytes, i);
        match bytes.get(i)? {
            b'}' => return found,
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = skip_value(bytes, i)?;
        let member_key: String = serde_json::from_str(&text[i..key_end]).ok()?;
        i = skip_ws(bytes, key_end);
        if bytes.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(bytes, i + 1);
        let value_end = skip_value(bytes, i)?;
        if member_key == key {
            found = Some(&text[i..value_end]);
        }
        i = value_end;
    }
}

fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The end of the JSON value starting at `i` (the input is known to be valid JSON).
fn skip_value(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    match bytes.get(i)? {
        b'"' => {
            i += 1;
            loop {
                match bytes.get(i)? {
                    b'\\' => i += 2,
                    b'"' => return Some(i + 1),
                    _ => i += 1,
                }
            }
        }
        b'{' | b'[' => {
            let mut depth = 0usize;
            loop {
                match bytes.get(i)? {
                    b'"' => {
                        i = skip_value(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            while let Some(b) = bytes.get(i) {
                if matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace() {
                    break;
                }
                i += 1;
            }
            Some(i)
        }
    }
}
