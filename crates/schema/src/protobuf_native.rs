//! PROTOBUF_NATIVE definitions: `{"fileDescriptorSet": <base64 of a
//! FileDescriptorSet>, "rootMessageTypeName": ..., "rootFileDescriptorName": ...}`
//! (`ProtobufNativeSchemaData`). The broker only needs the root message's full
//! name (`ProtobufNativeSchemaUtils.deserialize` then `getFullName()`), so this
//! reads just enough of the descriptor set to find it: file names, packages,
//! dependencies and (nested) message names.

use std::collections::HashMap;

/// A decoded PROTOBUF_NATIVE definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtobufNativeDefinition {
    pub file_descriptor_set: Vec<u8>,
    pub root_message_type_name: String,
    pub root_file_descriptor_name: String,
}

impl ProtobufNativeDefinition {
    pub fn parse(data: &[u8]) -> Result<ProtobufNativeDefinition, String> {
        let value: serde_json::Value =
            serde_json::from_slice(data).map_err(|e| format!("the definition is not JSON: {e}"))?;
        let field = |name: &str| {
            value
                .get(name)
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| format!("the definition has no string '{name}'"))
        };
        Ok(ProtobufNativeDefinition {
            file_descriptor_set: decode_base64(field("fileDescriptorSet")?)
                .ok_or("fileDescriptorSet is not base64")?,
            root_message_type_name: field("rootMessageTypeName")?.to_string(),
            root_file_descriptor_name: field("rootFileDescriptorName")?.to_string(),
        })
    }
}

/// The full name of the root message a PROTOBUF_NATIVE definition names, after
/// checking that its file (and the files it depends on) and the message are in
/// the descriptor set.
pub fn protobuf_native_root_message(data: &[u8]) -> Result<String, String> {
    let def = ProtobufNativeDefinition::parse(data)?;
    let files = parse_descriptor_set(&def.file_descriptor_set)
        .ok_or("fileDescriptorSet is not a FileDescriptorSet")?;
    let by_name: HashMap<&str, &FileInfo> = files.iter().map(|f| (f.name.as_str(), f)).collect();
    let root = by_name
        .get(def.root_file_descriptor_name.as_str())
        .ok_or_else(|| {
            format!(
                "no file '{}' in the descriptor set",
                def.root_file_descriptor_name
            )
        })?;
    let mut stack = vec![*root];
    let mut visited = vec![root.name.as_str()];
    while let Some(file) = stack.pop() {
        for dep in &file.dependencies {
            let dep_file = by_name.get(dep.as_str()).ok_or_else(|| {
                format!(
                    "dependency '{dep}' of '{}' is not in the descriptor set",
                    file.name
                )
            })?;
            if !visited.contains(&dep.as_str()) {
                visited.push(dep.as_str());
                stack.push(dep_file);
            }
        }
    }
    // Pulsar removes the first occurrence of the package, then the first dot,
    // and walks the remaining dotted names from the root file's messages.
    let mut relative = def.root_message_type_name.clone();
    if !root.package.is_empty()
        && let Some(at) = relative.find(root.package.as_str())
    {
        relative.replace_range(at..at + root.package.len(), "");
    }
    if let Some(dot) = relative.find('.') {
        relative.remove(dot);
    }
    walk(root, &relative)
}

fn walk(root: &FileInfo, relative: &str) -> Result<String, String> {
    let mut parts = relative.split('.');
    let first = parts.next().unwrap_or_default();
    let mut message = root
        .messages
        .iter()
        .find(|m| m.name == first)
        .ok_or_else(|| format!("no message '{first}' in '{}'", root.name))?;
    let mut path = vec![message.name.clone()];
    for part in parts {
        message = message
            .nested
            .iter()
            .find(|m| m.name == part)
            .ok_or_else(|| format!("no nested message '{part}' in '{}'", path.join(".")))?;
        path.push(message.name.clone());
    }
    let path = path.join(".");
    Ok(if root.package.is_empty() {
        path
    } else {
        format!("{}.{path}", root.package)
    })
}

#[derive(Debug, Default)]
struct FileInfo {
    name: String,
    package: String,
    dependencies: Vec<String>,
    messages: Vec<MessageInfo>,
}

#[derive(Debug, Default)]
struct MessageInfo {
    name: String,
    nested: Vec<MessageInfo>,
}

fn parse_descriptor_set(buf: &[u8]) -> Option<Vec<FileInfo>> {
    let mut files = Vec::new();
    for (number, payload) in fields(buf)? {
        if number == 1 {
            files.push(parse_file(payload?)?);
        }
    }
    Some(files)
}

fn parse_file(buf: &[u8]) -> Option<FileInfo> {
    let mut file = FileInfo::default();
    for (number, payload) in fields(buf)? {
        match number {
            1 => file.name = utf8(payload?)?,
            2 => file.package = utf8(payload?)?,
            3 => file.dependencies.push(utf8(payload?)?),
            4 => file.messages.push(parse_message(payload?, 0)?),
            _ => {}
        }
    }
    Some(file)
}

fn parse_message(buf: &[u8], depth: usize) -> Option<MessageInfo> {
    if depth > 100 {
        return None;
    }
    let mut message = MessageInfo::default();
    for (number, payload) in fields(buf)? {
        match number {
            1 => message.name = utf8(payload?)?,
            3 => message.nested.push(parse_message(payload?, depth + 1)?),
            _ => {}
        }
    }
    Some(message)
}

fn utf8(bytes: &[u8]) -> Option<String> {
    String::from_utf8(bytes.to_vec()).ok()
}

/// The fields of a protobuf message: (number, payload of length-delimited
/// fields, `None` for other wire types). `None` if the bytes are malformed.
#[allow(clippy::type_complexity)]
fn fields(buf: &[u8]) -> Option<Vec<(u64, Option<&[u8]>)>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let number = key >> 3;
        match key & 7 {
            0 => {
                varint(buf, &mut pos)?;
                out.push((number, None));
            }
            1 => {
                pos = pos.checked_add(8).filter(|&p| p <= buf.len())?;
                out.push((number, None));
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).ok()?;
                let end = pos.checked_add(len).filter(|&e| e <= buf.len())?;
                out.push((number, Some(&buf[pos..end])));
                pos = end;
            }
            5 => {
                pos = pos.checked_add(4).filter(|&p| p <= buf.len())?;
                out.push((number, None));
            }
            _ => return None,
        }
    }
    Some(out)
}

fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Standard base64, padding optional, whitespace ignored.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
    let text: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    STANDARD
        .decode(&text)
        .or_else(|_| STANDARD_NO_PAD.decode(&text))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode_len(number: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![((number << 3) | 2) as u8];
        out.push(payload.len() as u8);
        out.extend_from_slice(payload);
        out
    }

    fn base64(bytes: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// `test_schema.proto`, package `test`, messages `TestMessage` and
    /// `Outer { Inner }` (the shape the Python client's test builds).
    fn definition(root: &str) -> Vec<u8> {
        let inner = encode_len(1, b"Inner");
        let mut outer = encode_len(1, b"Outer");
        outer.extend(encode_len(3, &inner));
        let mut file = encode_len(1, b"test_schema.proto");
        file.extend(encode_len(2, b"test"));
        file.extend(encode_len(4, &encode_len(1, b"TestMessage")));
        file.extend(encode_len(4, &outer));
        let set = encode_len(1, &file);
        format!(
            r#"{{"fileDescriptorSet":"{}","rootMessageTypeName":"{root}","rootFileDescriptorName":"test_schema.proto"}}"#,
            base64(&set)
        )
        .into_bytes()
    }

    #[test]
    fn root_message_names() {
        assert_eq!(
            protobuf_native_root_message(&definition("test.TestMessage")).unwrap(),
            "test.TestMessage"
        );
        assert_eq!(
            protobuf_native_root_message(&definition("test.Outer.Inner")).unwrap(),
            "test.Outer.Inner"
        );
        assert!(protobuf_native_root_message(&definition("test.Missing")).is_err());
        assert!(protobuf_native_root_message(b"{}").is_err());
        assert!(protobuf_native_root_message(b"not json").is_err());
    }

    #[test]
    fn base64_round_trip() {
        for len in 0..20u8 {
            let bytes: Vec<u8> = (0..len).map(|i| i.wrapping_mul(37)).collect();
            assert_eq!(decode_base64(&base64(&bytes)).unwrap(), bytes);
        }
        assert!(decode_base64("a*b").is_none());
    }
}
