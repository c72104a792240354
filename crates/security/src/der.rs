//! Just enough DER to split the structures we hand to signature verifiers: a
//! certificate into (to-be-signed bytes, signature algorithm, signature) and a
//! SubjectPublicKeyInfo into (algorithm, key bytes). x509-parser gives us the
//! meaning of certificates; this gives us their exact bytes.

const SEQUENCE: u8 = 0x30;
const BIT_STRING: u8 = 0x03;

/// One TLV read from the front of some input: (tag, contents, whole TLV, rest of input).
type Tlv<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

/// Reads one TLV from the front of `input`.
fn read_tlv(input: &[u8]) -> Option<Tlv<'_>> {
    let (&tag, after_tag) = input.split_first()?;
    let (&first, mut after_len) = after_tag.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        // Indefinite lengths are not DER; more than 4 length bytes is absurd here.
        if n == 0 || n > 4 || after_len.len() < n {
            return None;
        }
        let mut len = 0usize;
        for &b in &after_len[..n] {
            len = (len << 8) | usize::from(b);
        }
        after_len = &after_len[n..];
        len
    };
    if after_len.len() < len {
        return None;
    }
    let header = input.len() - after_len.len();
    let (contents, rest) = after_len.split_at(len);
    Some((tag, contents, &input[..header + len], rest))
}

/// Contents of a DER SEQUENCE that spans all of `input`.
fn sequence(input: &[u8]) -> Option<&[u8]> {
    match read_tlv(input)? {
        (SEQUENCE, contents, _, []) => Some(contents),
        _ => None,
    }
}

/// A BIT STRING's bytes, refusing any with unused trailing bits (keys and signatures have none).
fn bit_string(contents: &[u8]) -> Option<&[u8]> {
    match contents.split_first()? {
        (0, bits) => Some(bits),
        _ => None,
    }
}

/// A SubjectPublicKeyInfo split into the AlgorithmIdentifier's contents (the
/// form `rustls::pki_types::AlgorithmIdentifier` uses) and the key bytes.
pub(crate) fn split_spki(spki: &[u8]) -> Option<(&[u8], &[u8])> {
    let body = sequence(spki)?;
    let (tag, alg, _, rest) = read_tlv(body)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, key, _, rest) = read_tlv(rest)?;
    if tag != BIT_STRING || !rest.is_empty() {
        return None;
    }
    Some((alg, bit_string(key)?))
}

/// A certificate split into (tbsCertificate TLV, signature AlgorithmIdentifier contents, signature).
pub(crate) fn split_certificate(cert: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let body = sequence(cert)?;
    let (tag, _, tbs, rest) = read_tlv(body)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, alg, _, rest) = read_tlv(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, sig, _, rest) = read_tlv(rest)?;
    if tag != BIT_STRING || !rest.is_empty() {
        return None;
    }
    Some((tbs, alg, bit_string(sig)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_form_lengths_and_truncation() {
        // SEQUENCE of 130 zero bytes, long-form length.
        let mut v = vec![0x30, 0x81, 130];
        v.extend(std::iter::repeat_n(0u8, 130));
        assert_eq!(sequence(&v).map(<[u8]>::len), Some(130));
        v.pop();
        assert!(sequence(&v).is_none());
        // Indefinite length refused.
        assert!(read_tlv(&[0x30, 0x80, 0, 0]).is_none());
    }

    #[test]
    fn spki_split() {
        // SEQUENCE { SEQUENCE { OID 1.2.3 }, BIT STRING 00 AA BB }
        let spki = [
            0x30, 0x0b, 0x30, 0x04, 0x06, 0x02, 0x2a, 0x03, 0x03, 0x03, 0x00, 0xaa, 0xbb,
        ];
        let (alg, key) = split_spki(&spki).unwrap();
        assert_eq!(alg, &[0x06, 0x02, 0x2a, 0x03]);
        assert_eq!(key, &[0xaa, 0xbb]);
        let mut bad = spki;
        bad[10] = 1; // unused bits
        assert!(split_spki(&bad).is_none());
    }
}
