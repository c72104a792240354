//! The vocabulary of Pulsar 5's scalable topics (PIP-460): the 16-bit key-hash
//! ring, a segment's hash range and its descriptor (`%04x-%04x-%d`, the last
//! element of a `segment://` name), and which half of a key's hash picks the
//! segment and which the entry bucket (PIP-486).

use std::fmt;

use crate::hash::murmur3_32;

/// The highest hash of the ring (Pulsar's `HashRange.MAX_HASH`); the ring is
/// `0..=MAX_HASH`.
pub const MAX_HASH: u16 = 0xFFFF;

/// The number of hashes on the ring.
pub const RING_SIZE: u32 = 1 << 16;

/// The segment of a key: the high 16 bits of the key's raw Murmur3-32 (seed
/// 0, bit 31 not masked). Before PIP-486 Pulsar used the low half; the low
/// half is now the entry bucket's ([`bucket_hash`]).
pub fn segment_hash(key: &[u8]) -> u16 {
    (murmur3_32(key, 0) >> 16) as u16
}

/// The entry-bucket hash of a key (PIP-486): the low 16 bits of the same raw
/// hash.
pub fn bucket_hash(key: &[u8]) -> u16 {
    murmur3_32(key, 0) as u16
}

/// A range of the ring, both ends inclusive (Pulsar's `HashRange`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HashRange {
    pub start: u16,
    pub end: u16,
}

/// A range whose start is after its end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hash range {start:#06x}-{end:#06x} is empty (start after end)")]
pub struct EmptyRange {
    pub start: u16,
    pub end: u16,
}

impl HashRange {
    /// `start..=end`; refused when `start > end`.
    pub fn new(start: u16, end: u16) -> Result<HashRange, EmptyRange> {
        if start > end {
            return Err(EmptyRange { start, end });
        }
        Ok(HashRange { start, end })
    }

    /// The whole ring.
    pub const FULL: HashRange = HashRange {
        start: 0,
        end: MAX_HASH,
    };

    /// How many hashes it holds (1 to 65536).
    pub fn len(&self) -> u32 {
        u32::from(self.end) - u32::from(self.start) + 1
    }

    /// Never: a range holds its start. (For clippy's `len_without_is_empty`.)
    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn contains(&self, hash: u16) -> bool {
        self.start <= hash && hash <= self.end
    }

    /// Its two halves at the midpoint `start + (end - start) / 2` (the lower
    /// half takes it), as Pulsar splits a segment; `None` for a one-hash range.
    pub fn halves(&self) -> Option<(HashRange, HashRange)> {
        if self.start == self.end {
            return None;
        }
        let mid = self.start + (self.end - self.start) / 2;
        Some((
            HashRange {
                start: self.start,
                end: mid,
            },
            HashRange {
                start: mid + 1,
                end: self.end,
            },
        ))
    }

    /// Whether `self` ends just before `other` starts.
    pub fn precedes(&self, other: &HashRange) -> bool {
        u32::from(self.end) + 1 == u32::from(other.start)
    }

    /// The union of two adjacent ranges, in either order; `None` when they
    /// are not adjacent.
    pub fn join(&self, other: &HashRange) -> Option<HashRange> {
        if self.precedes(other) {
            Some(HashRange {
                start: self.start,
                end: other.end,
            })
        } else if other.precedes(self) {
            Some(HashRange {
                start: other.start,
                end: self.end,
            })
        } else {
            None
        }
    }

    /// `n` ranges tiling the ring: `65536 / n` hashes each, the last taking
    /// the remainder (Pulsar's initial layout). `n` is 1 to 65536.
    pub fn tiles(n: u32) -> Vec<HashRange> {
        assert!(
            (1..=RING_SIZE).contains(&n),
            "tiles: {n} is not in 1..=65536"
        );
        let size = RING_SIZE / n;
        (0..n)
            .map(|i| {
                let start = i * size;
                let end = if i + 1 == n {
                    RING_SIZE - 1
                } else {
                    start + size - 1
                };
                HashRange {
                    start: start as u16,
                    end: end as u16,
                }
            })
            .collect()
    }
}

/// A segment's descriptor, the last element of its `segment://` name:
/// `%04x-%04x-%d` of its range's start, its inclusive end, and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentDescriptor {
    pub range: HashRange,
    pub id: u64,
}

/// A descriptor that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid segment descriptor {0:?}: expected <4 hex>-<4 hex>-<id>, e.g. 0000-7fff-1")]
pub struct BadDescriptor(pub String);

impl fmt::Display for SegmentDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}-{:04x}-{}",
            self.range.start, self.range.end, self.id
        )
    }
}

impl std::str::FromStr for SegmentDescriptor {
    type Err = BadDescriptor;

    /// Strict, as Pulsar's parser: exactly three dash-separated parts, four
    /// lower-case hex digits each for the range, a decimal id.
    fn from_str(s: &str) -> Result<SegmentDescriptor, BadDescriptor> {
        let bad = || BadDescriptor(s.to_owned());
        let mut parts = s.split('-');
        let (Some(a), Some(b), Some(id), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let hex4 = |p: &str| {
            (p.len() == 4 && p.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
                .then(|| u16::from_str_radix(p, 16).ok())
                .flatten()
        };
        let start = hex4(a).ok_or_else(bad)?;
        let end = hex4(b).ok_or_else(bad)?;
        if id.is_empty() || !id.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        let id = id.parse().map_err(|_| bad())?;
        let range = HashRange::new(start, end).map_err(|_| bad())?;
        Ok(SegmentDescriptor { range, id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn descriptors_as_pulsar_writes_them() {
        let d = SegmentDescriptor {
            range: HashRange::FULL,
            id: 0,
        };
        assert_eq!(d.to_string(), "0000-ffff-0");
        let (lo, hi) = HashRange::FULL.halves().unwrap();
        assert_eq!(
            SegmentDescriptor { range: lo, id: 1 }.to_string(),
            "0000-7fff-1"
        );
        assert_eq!(
            SegmentDescriptor { range: hi, id: 2 }.to_string(),
            "8000-ffff-2"
        );
        assert_eq!(
            "8000-ffff-2".parse::<SegmentDescriptor>().unwrap().range,
            hi
        );
        for bad in [
            "",
            "0000-ffff",
            "0000-ffff-1-2",
            "000-ffff-1",
            "0000-FFFF-1",
            "ffff-0000-1",
            "0000-ffff-",
            "0000-ffff-x",
            "0000-ffff--1",
            "g000-ffff-1",
        ] {
            assert!(bad.parse::<SegmentDescriptor>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn tiles_cover_the_ring_and_the_last_takes_the_remainder() {
        assert_eq!(HashRange::tiles(1), vec![HashRange::FULL]);
        let three = HashRange::tiles(3);
        assert_eq!(
            three[0],
            HashRange {
                start: 0,
                end: 21844
            }
        );
        assert_eq!(
            three[2],
            HashRange {
                start: 43690,
                end: 0xFFFF
            }
        );
        assert_eq!(HashRange::tiles(65536).len(), 65536);
    }

    #[test]
    fn the_two_halves_of_the_key_hash() {
        let raw = murmur3_32(b"hello", 0);
        assert_eq!(segment_hash(b"hello"), (raw >> 16) as u16);
        assert_eq!(bucket_hash(b"hello"), (raw & 0xFFFF) as u16);
    }

    proptest! {
        #[test]
        fn descriptors_round_trip(start in any::<u16>(), len in any::<u16>(), id in any::<u64>()) {
            let end = start.saturating_add(len);
            let d = SegmentDescriptor { range: HashRange::new(start, end).unwrap(), id };
            prop_assert_eq!(d.to_string().parse::<SegmentDescriptor>().unwrap(), d);
        }

        #[test]
        fn halves_tile_their_range(start in any::<u16>(), len in 1u16..) {
            let r = HashRange::new(start, start.saturating_add(len)).unwrap();
            if let Some((a, b)) = r.halves() {
                prop_assert_eq!(a.start, r.start);
                prop_assert_eq!(b.end, r.end);
                prop_assert!(a.precedes(&b));
                prop_assert_eq!(a.join(&b), Some(r));
                prop_assert_eq!(b.join(&a), Some(r));
                prop_assert!(a.len() >= b.len() && a.len() - b.len() <= 1);
            }
        }

        #[test]
        fn tiles_tile(n in 1u32..=4096) {
            let t = HashRange::tiles(n);
            prop_assert_eq!(t.len() as u32, n);
            prop_assert_eq!(t[0].start, 0);
            prop_assert_eq!(t[t.len() - 1].end, MAX_HASH);
            for w in t.windows(2) {
                prop_assert!(w[0].precedes(&w[1]));
            }
        }
    }
}
