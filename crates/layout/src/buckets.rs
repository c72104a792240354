//! PIP-486's entry buckets of a segment: boundaries on the 16-bit bucket
//! hash (the low half of a key's hash, independent of the segment's range),
//! and how many buckets a new, split or merged segment gets.

use strobe_model::scalable::RING_SIZE;

/// The most buckets one segment gets (Pulsar's later
/// `scalableTopicEntryBucketMaxPerSegment`): merges add their parents'
/// counts, and the count must stay bounded however often segments merge.
pub const MAX_BUCKETS: u32 = 1024;

/// The boundaries of `n` equal buckets (Pulsar's `EntryBucketSplits.equalWidth`):
/// `i * 65536 / n` for `i` in `1..n`; one bucket has none.
pub fn equal_width(n: u32) -> Vec<u32> {
    let n = n.clamp(1, MAX_BUCKETS);
    (1..n)
        .map(|i| (u64::from(i) * u64::from(RING_SIZE) / u64::from(n)) as u32)
        .collect()
}

/// Buckets of each segment of a new topic: the broker's budget shared by
/// its segments, at least one.
pub fn initial(budget: u32, segments: u32) -> u32 {
    (budget / segments.max(1)).max(1)
}

/// Buckets of each child of a split: half its parent's, at least one.
pub fn after_split(parent: u32) -> u32 {
    (parent / 2).max(1)
}

/// Buckets of a merged segment: its parents' together.
pub fn after_merge(a: u32, b: u32) -> u32 {
    a.saturating_add(b).min(MAX_BUCKETS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pulsar_defaults() {
        // A one-segment topic with the default budget of 4.
        assert_eq!(equal_width(initial(4, 1)), vec![16384, 32768, 49152]);
        assert_eq!(equal_width(1), Vec::<u32>::new());
        assert_eq!(initial(4, 8), 1);
        assert_eq!(after_split(4), 2);
        assert_eq!(after_split(1), 1);
        assert_eq!(after_merge(2, 1), 3);
        assert_eq!(equal_width(u32::MAX).len() as u32, MAX_BUCKETS - 1);
    }
}
