//! PROTOBUF_NATIVE definitions: `{"fileDescriptorSet": <base64 of a
//! FileDescriptorSet>, "rootMessageTypeName": ..., "rootFileDescriptorName": ...}`
//! (`ProtobufNativeSchemaData`). The broker only needs the root message's full
//! name (`ProtobufNativeSchemaUtils.deserialize` then `getFullName()`): the set is
//! decoded with `prost-types` and checked for the root file, its dependencies and
//! the (nested) root message.

use std::collections::HashMap;

use prost::Message as _;
use prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};

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
    let set = FileDescriptorSet::decode(def.file_descriptor_set.as_slice())
        .map_err(|e| format!("fileDescriptorSet is not a FileDescriptorSet: {e}"))?;
    let by_name: HashMap<&str, &FileDescriptorProto> =
        set.file.iter().map(|f| (f.name(), f)).collect();
    let root = by_name
        .get(def.root_file_descriptor_name.as_str())
        .ok_or_else(|| {
            format!(
                "no file '{}' in the descriptor set",
                def.root_file_descriptor_name
            )
        })?;
    let mut stack = vec![*root];
    let mut visited = vec![root.name()];
    while let Some(file) = stack.pop() {
        for dep in &file.dependency {
            let dep_file = by_name.get(dep.as_str()).ok_or_else(|| {
                format!(
                    "dependency '{dep}' of '{}' is not in the descriptor set",
                    file.name()
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
    let package = root.package();
    if !package.is_empty()
        && let Some(at) = relative.find(package)
    {
        relative.replace_range(at..at + package.len(), "");
    }
    if let Some(dot) = relative.find('.') {
        relative.remove(dot);
    }
    walk(root, &relative)
}

fn walk(root: &FileDescriptorProto, relative: &str) -> Result<String, String> {
    let mut parts = relative.split('.');
    let first = parts.next().unwrap_or_default();
    let mut message: &DescriptorProto = root
        .message_type
        .iter()
        .find(|m| m.name() == first)
        .ok_or_else(|| format!("no message '{first}' in '{}'", root.name()))?;
    let mut path = vec![message.name()];
    for part in parts {
        message = message
            .nested_type
            .iter()
            .find(|m| m.name() == part)
            .ok_or_else(|| format!("no nested message '{part}' in '{}'", path.join(".")))?;
        path.push(message.name());
    }
    let path = path.join(".");
    Ok(if root.package().is_empty() {
        path
    } else {
        format!("{}.{path}", root.package())
    })
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
