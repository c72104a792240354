//! MurmurHash3 x86_32 with seed 0, as Pulsar's `Murmur3_32Hash`, and the two ways
//! Pulsar folds it into a 16-bit sticky-key hash.

/// The raw 32-bit MurmurHash3 (x86_32 variant) of `data` with `seed`.
pub fn murmur3_32(data: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h = seed;
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let mut k = 0u32;
        for (i, b) in tail.iter().enumerate() {
            k ^= u32::from(*b) << (8 * i);
        }
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    // The length is mixed in as a 32-bit value, as the Java implementation does.
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// The sticky hash used by the consistent-hashing selector: the positive part of
/// the hash, modulo 65535 (not 65536), plus one. Always in `1..=65535`.
pub fn sticky_hash_consistent(key: &[u8]) -> u32 {
    (murmur3_32(key, 0) & 0x7fff_ffff) % 65_535 + 1
}

/// The sticky hash used by the STICKY and auto-split selectors and by PIP-486
/// buckets: the low 16 bits, with the reserved value 0 mapped to 1.
pub fn sticky_hash_low16(key: &[u8]) -> u32 {
    match murmur3_32(key, 0) & 0xffff {
        0 => 1,
        h => h,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_vectors() {
        assert_eq!(murmur3_32(b"", 0), 0);
        assert_eq!(murmur3_32(b"hello", 0), 0x248b_fa47);
        assert_eq!(
            murmur3_32(b"The quick brown fox jumps over the lazy dog", 0),
            0x2e4f_f723
        );
    }

    #[test]
    fn pulsar_sticky_vectors() {
        // (key, raw, consistent slot, low16 slot), from protocol notes §5.2.
        let cases: [(&str, u32, u32, u32); 5] = [
            ("key-0", 0xe337_f8bf, 23544, 63679),
            ("key-1", 0x98b1_15a0, 11858, 5536),
            ("a", 0x3c25_69b2, 42456, 27058),
            ("user-42", 0xb972_dad0, 5188, 56016),
            ("NONE_KEY", 0x9e15_bea3, 56505, 48803),
        ];
        for (key, raw, consistent, low16) in cases {
            assert_eq!(murmur3_32(key.as_bytes(), 0), raw, "{key}");
            assert_eq!(sticky_hash_consistent(key.as_bytes()), consistent, "{key}");
            assert_eq!(sticky_hash_low16(key.as_bytes()), low16, "{key}");
            assert_eq!(raw >> 16, murmur3_32(key.as_bytes(), 0) >> 16);
        }
    }
}
