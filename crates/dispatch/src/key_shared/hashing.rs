//! The sticky key of an entry, as `Commands.resolveStickyKey` picks it from the
//! entry's outer metadata (the broker never opens a batch, so a batch goes by its
//! first message's key).

use std::borrow::Cow;

/// The key of entries that carry none of the fields below.
pub const NONE_KEY: &[u8] = b"NONE_KEY";

/// The bytes Key_Shared hashes for an entry:
/// 1. `ordering_key`;
/// 2. else `partition_key`, base64-decoded when `partition_key_b64_encoded`
///    (an undecodable value falls back to its UTF-8 bytes, where Java would throw);
/// 3. else `producer_name + "-" + sequence_id`, both required; the sequence id is
///    printed as Java prints a `long`, so ids above `i64::MAX` come out negative;
/// 4. else `"NONE_KEY"`.
pub fn resolve_sticky_key<'a>(
    ordering_key: Option<&'a [u8]>,
    partition_key: Option<&'a str>,
    partition_key_b64_encoded: bool,
    producer_name: Option<&str>,
    sequence_id: Option<u64>,
) -> Cow<'a, [u8]> {
    if let Some(key) = ordering_key {
        return Cow::Borrowed(key);
    }
    if let Some(key) = partition_key {
        if partition_key_b64_encoded && let Some(decoded) = base64_decode(key) {
            return Cow::Owned(decoded);
        }
        return Cow::Borrowed(key.as_bytes());
    }
    if let (Some(name), Some(seq)) = (producer_name, sequence_id) {
        return Cow::Owned(format!("{name}-{}", seq as i64).into_bytes());
    }
    Cow::Borrowed(NONE_KEY)
}

/// Standard-alphabet base64 as `java.util.Base64.getDecoder()` accepts it:
/// padding optional at the end, nothing else allowed. `None` if invalid.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const JAVA: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    );
    JAVA.decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence() {
        assert_eq!(
            &*resolve_sticky_key(Some(b"ord"), Some("pk"), false, Some("p"), Some(1)),
            b"ord"
        );
        assert_eq!(
            &*resolve_sticky_key(None, Some("pk"), false, Some("p"), Some(1)),
            b"pk"
        );
        assert_eq!(
            &*resolve_sticky_key(None, None, false, Some("p"), Some(7)),
            b"p-7"
        );
        assert_eq!(
            &*resolve_sticky_key(None, None, false, Some("p"), None),
            NONE_KEY
        );
        assert_eq!(
            &*resolve_sticky_key(None, None, false, None, Some(7)),
            NONE_KEY
        );
        assert_eq!(
            &*resolve_sticky_key(None, None, false, Some("p"), Some(u64::MAX)),
            b"p--1"
        );
    }

    #[test]
    fn base64_partition_keys() {
        assert_eq!(
            &*resolve_sticky_key(None, Some("aGVsbG8="), true, None, None),
            b"hello"
        );
        assert_eq!(
            &*resolve_sticky_key(None, Some("aGVsbG8"), true, None, None),
            b"hello"
        );
        assert_eq!(
            &*resolve_sticky_key(None, Some("AAEC/w=="), true, None, None),
            &[0, 1, 2, 255]
        );
        assert_eq!(&*resolve_sticky_key(None, Some(""), true, None, None), b"");
        // Not base64: the UTF-8 bytes, unchanged.
        assert_eq!(
            &*resolve_sticky_key(None, Some("a*b"), true, None, None),
            b"a*b"
        );
        assert_eq!(
            &*resolve_sticky_key(None, Some("aGVsbG8="), false, None, None),
            b"aGVsbG8="
        );
    }
}
