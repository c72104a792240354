//! Reading key material the way Pulsar's settings name it.
//!
//! Pulsar's `AuthTokenUtils.readKeyFromUrl` (used for `tokenSecretKey` and
//! `tokenPublicKey`) and `AuthenticationProviderBasic.readData` (for
//! `basicAuthConf`) accept, in this order:
//! 1. a `data:` URL (`data:;base64,<b64>` or `data:,<percent-encoded text>`),
//! 2. a `file:` URL (`file:///path/to/key`),
//! 3. the path of an existing file,
//! 4. otherwise the value itself, base64-encoded.
//!
//! The bytes come back as they are: a secret key file written by
//! `pulsar tokens create-secret-key --output F` holds the raw key bytes (with
//! `--base64` it holds base64 text, and Pulsar then uses that text's bytes as the
//! key — we do the same, for compatibility).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

use crate::error::{Error, Result};

/// Resolves a Pulsar-style key setting to its bytes. Error messages name a file
/// path when there is one, never the setting's inline content.
pub fn read_key_material(setting: &str) -> Result<Vec<u8>> {
    let setting = setting.trim();
    if setting.is_empty() {
        return Err(Error::Config("empty key setting".into()));
    }
    if let Some(rest) = setting.strip_prefix("data:") {
        return read_data_url(rest);
    }
    if let Some(rest) = setting.strip_prefix("file:") {
        return read_file(&file_url_path(rest)?);
    }
    let path = Path::new(setting);
    if path.is_file() {
        return read_file(path);
    }
    decode_base64(setting).ok_or_else(|| {
        Error::Key("key setting is neither a data:/file: URL, an existing file, nor base64".into())
    })
}

/// Standard padded base64, as Pulsar's `AuthTokenUtils.encodeKeyBase64` writes keys.
pub fn encode_key_base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Reads a whole file, naming it in the error.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Base64 in either alphabet, padded or not (Pulsar's decoder is lenient about padding).
pub(crate) fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())
}

/// `data:[<mediatype>][;base64],<data>` (RFC 2397), the part after `data:`.
fn read_data_url(rest: &str) -> Result<Vec<u8>> {
    let (header, payload) = rest
        .split_once(',')
        .ok_or_else(|| Error::Key("data: URL without a ',' before its payload".into()))?;
    if header
        .rsplit(';')
        .next()
        .is_some_and(|p| p.eq_ignore_ascii_case("base64"))
    {
        decode_base64(payload).ok_or_else(|| Error::Key("data: URL payload is not base64".into()))
    } else {
        percent_decode(payload)
            .ok_or_else(|| Error::Key("data: URL payload is badly escaped".into()))
    }
}

/// The path of a `file:` URL: `file:///p`, `file://localhost/p` and `file:/p` all mean `/p`.
fn file_url_path(rest: &str) -> Result<PathBuf> {
    let path = match rest.strip_prefix("//") {
        Some(authority_and_path) => {
            let slash = authority_and_path
                .find('/')
                .unwrap_or(authority_and_path.len());
            let (host, path) = authority_and_path.split_at(slash);
            if !(host.is_empty() || host.eq_ignore_ascii_case("localhost")) {
                return Err(Error::Config(format!(
                    "file: URL names a remote host {host:?}"
                )));
            }
            path
        }
        None => rest,
    };
    if path.is_empty() {
        return Err(Error::Config("file: URL without a path".into()));
    }
    let bytes = percent_decode(path)
        .ok_or_else(|| Error::Config("file: URL path is badly escaped".into()))?;
    String::from_utf8(bytes)
        .map(PathBuf::from)
        .map_err(|_| Error::Config("file: URL path is not UTF-8".into()))
}

fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_forms() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k e y.bin");
        std::fs::write(&path, [1u8, 2, 3, 0xff]).unwrap();

        let url = format!("file://{}", path.display().to_string().replace(' ', "%20"));
        assert_eq!(read_key_material(&url).unwrap(), [1, 2, 3, 0xff]);
        assert_eq!(
            read_key_material(&path.display().to_string()).unwrap(),
            [1, 2, 3, 0xff]
        );
        assert_eq!(
            read_key_material("data:;base64,AQID/w==").unwrap(),
            [1, 2, 3, 0xff]
        );
        assert_eq!(
            read_key_material("data:application/octet-stream;base64,AQID_w").unwrap(),
            [1, 2, 3, 0xff]
        );
        assert_eq!(read_key_material("data:,a%20b").unwrap(), b"a b");
        assert_eq!(read_key_material("AQID/w==").unwrap(), [1, 2, 3, 0xff]);
    }

    #[test]
    fn refusals_do_not_echo_the_setting() {
        let err = read_key_material("not base64 at all !!").unwrap_err();
        assert!(!err.to_string().contains("at all"), "{err}");
        assert!(read_key_material("data:;base64").is_err());
        assert!(read_key_material("file://example.com/etc/passwd").is_err());
        assert!(matches!(
            read_key_material("file:///definitely/not/here"),
            Err(Error::Io { .. })
        ));
        assert!(read_key_material("  ").is_err());
    }
}
