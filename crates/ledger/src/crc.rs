//! CRC-32C of a concatenation from the CRCs of its parts, without reading
//! the bytes again.
//!
//! Every stored entry's bytes are covered by three CRCs: the producer's
//! frame checksum (verified by the broker), the journal record's and the
//! segment record's. Each record CRC starts with a small header, so each was
//! a pass over the whole entry (7% of the broker's CPU in a batched produce,
//! most of it on the group-commit thread, whose time every producer waits
//! for). With the entry's own CRC known, a record's CRC is
//! `combine(crc(header), crc(entry), len(entry))`: a multiplication by
//! `x^(8 len)` modulo the polynomial, which costs nanoseconds whatever the
//! length.
//!
//! The arithmetic is over GF(2) in CRC-32C's reflected bit order (bit 31 is
//! the coefficient of `x^0`). The multiplication uses the CPU's carry-less
//! multiply and CRC instructions where it has them (x86-64 with PCLMULQDQ
//! and SSE4.2), else a bitwise loop (about 40 ns per product).

/// CRC-32C's polynomial, reflected.
const POLY: u32 = 0x82F6_3B78;
/// `x^0` (reflected).
const ONE: u32 = 1 << 31;

/// `a * b mod P`.
const fn mul_sw(a: u32, mut b: u32) -> u32 {
    let mut p = 0u32;
    let mut m = ONE;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
        m >>= 1;
    }
    p
}

/// `X2N[k] = x^(2^k) mod P`.
const X2N: [u32; 64] = {
    let mut t = [0u32; 64];
    t[0] = ONE >> 1; // x
    let mut k = 1;
    while k < 64 {
        t[k] = mul_sw(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// `MONT[j] = x^(32 (2^j - 1)) mod P`: `x^(32 * 2^j)` in the form the
/// hardware product keeps (times `x^-32`, see `hw::mul`).
#[cfg(target_arch = "x86_64")]
const MONT: [u32; 62] = {
    let x32 = X2N[5];
    let mut t = [0u32; 62];
    t[0] = ONE;
    let mut j = 1;
    while j < 62 {
        t[j] = mul_sw(mul_sw(t[j - 1], t[j - 1]), x32);
        j += 1;
    }
    t
};

/// `crc * x^(8 len) mod P`, bitwise.
fn shift_sw(crc: u32, len: u64) -> u32 {
    let mut p = crc;
    let mut n = len;
    let mut k = 3; // x^(8 len) = x^(2^3 len)
    while n != 0 {
        if n & 1 != 0 {
            p = mul_sw(X2N[k], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

#[cfg(target_arch = "x86_64")]
mod hw {
    use std::arch::x86_64::*;

    /// `a * b * x^32 mod P`: the carry-less product (63 bits, which the
    /// shift by one aligns to the CRC instruction's reflected 64-bit input)
    /// reduced by the CRC instruction, which multiplies its input by `x^32`.
    #[target_feature(enable = "pclmulqdq,sse4.2")]
    fn mul(a: u32, b: u32) -> u32 {
        let p = _mm_clmulepi64_si128(_mm_cvtsi32_si128(a as i32), _mm_cvtsi32_si128(b as i32), 0);
        let c = _mm_cvtsi128_si64(p) as u64;
        _mm_crc32_u64(0, c << 1) as u32
    }

    /// `crc * x^(8 len) mod P`: `x^(32 (len / 4))` from [`super::MONT`],
    /// then one CRC step over a zero byte (`* x^8`) per remaining byte.
    #[target_feature(enable = "pclmulqdq,sse4.2")]
    pub fn shift(crc: u32, len: u64) -> u32 {
        let mut q = len / 4;
        let mut p = crc;
        if q != 0 {
            let mut pow = None;
            let mut j = 0;
            while q != 0 {
                if q & 1 != 0 {
                    let m = super::MONT[j];
                    pow = Some(match pow {
                        None => m,
                        Some(v) => mul(v, m),
                    });
                }
                q >>= 1;
                j += 1;
            }
            p = mul(p, pow.expect("q has a set bit"));
        }
        for _ in 0..len % 4 {
            p = _mm_crc32_u8(p, 0);
        }
        p
    }

    pub fn available() -> bool {
        std::is_x86_feature_detected!("pclmulqdq") && std::is_x86_feature_detected!("sse4.2")
    }
}

/// `crc * x^(8 len) mod P`, by the fastest means the CPU has (`len` below
/// 2^61).
#[allow(unsafe_code)]
fn shift(crc: u32, len: u64) -> u32 {
    debug_assert!(len < 1 << 61);
    #[cfg(target_arch = "x86_64")]
    {
        static HW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *HW.get_or_init(hw::available) {
            // SAFETY: the CPU has both features (checked above).
            return unsafe { hw::shift(crc, len) };
        }
    }
    shift_sw(crc, len)
}

/// The CRC-32C of `a ++ b`, given `crc_a` (of `a`, or any CRC-32C value
/// `a`'s bytes would be appended to), `crc_b = crc32c(b)` and `b`'s length.
pub fn combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    shift(crc_a, len_b) ^ crc_b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn combine_matches_a_pass_over_the_bytes() {
        let mut lens: Vec<usize> = (0..70).collect();
        lens.extend([
            127,
            128,
            1023,
            1024,
            1025,
            4096,
            65_535,
            65_536,
            300_001,
            1 << 20,
        ]);
        for (i, &lb) in lens.iter().enumerate() {
            for la in [0usize, 1, 6, 29] {
                let a = bytes(la, i as u64);
                let b = bytes(lb, 1000 + i as u64);
                let whole = crc32c::crc32c_append(crc32c::crc32c(&a), &b);
                let got = combine(crc32c::crc32c(&a), crc32c::crc32c(&b), lb as u64);
                assert_eq!(got, whole, "len a {la}, len b {lb}");
                // A seed (a journal file's) stands for bytes before `a`.
                let seed = 0xDEAD_BEEF;
                let whole = crc32c::crc32c_append(crc32c::crc32c_append(seed, &a), &b);
                let got = combine(
                    crc32c::crc32c_append(seed, &a),
                    crc32c::crc32c(&b),
                    lb as u64,
                );
                assert_eq!(got, whole, "seeded, len a {la}, len b {lb}");
            }
        }
    }

    #[test]
    fn software_and_hardware_shifts_agree() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let crc = x as u32;
            let len = (x >> 32) % (1 << 26);
            let sw = shift_sw(crc, len);
            assert_eq!(shift(crc, len), sw, "len {len}");
            // Huge lengths (the tables' last entries) too.
            let big = x >> 3;
            assert_eq!(shift(crc, big), shift_sw(crc, big), "len {big}");
        }
        #[cfg(target_arch = "x86_64")]
        assert!(
            hw::available(),
            "this machine's CPU lacks PCLMULQDQ or SSE4.2: the test above only checked the bitwise path"
        );
    }
}
