//! Lowercase hex, for the few places that keep bytes in JSON documents
//! (the embedded metadata store's log, the file ledger's checkpoint).

/// `bytes` as lowercase hex.
pub fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Hex back to bytes (either case); `None` for an odd length or a non-hex digit.
pub fn decode(s: &str) -> Option<Vec<u8>> {
    // from_str_radix alone would take a sign ("+1").
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_and_refuses_bad_text() {
        let data = [0u8, 1, 0x7f, 0x80, 0xff];
        assert_eq!(super::encode(&data), "00017f80ff");
        assert_eq!(super::decode("00017F80ff").unwrap(), data);
        assert!(super::decode("abc").is_none());
        assert!(super::decode("zz").is_none());
        assert!(super::decode("+1").is_none());
    }
}
