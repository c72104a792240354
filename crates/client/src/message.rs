//! What a producer sends: [`ProducerMessage`], the batching kinds, and the
//! PIP-486 entry hash and bucket of a key.

use bytes::Bytes;
use strobe_model::murmur3_32;
use strobe_wire::proto::IntRange;

/// One message to send.
#[derive(Debug, Clone, Default)]
pub struct ProducerMessage {
    pub payload: Bytes,
    /// The partition key, which Key_Shared routes on (unless an ordering key is set).
    pub key: Option<String>,
    pub ordering_key: Option<Bytes>,
    pub properties: Vec<(String, String)>,
    pub event_time: Option<u64>,
    /// The transaction (most, least bits) this message is sent in; set by [`crate::Transaction::send`].
    pub txn: Option<(u64, u64)>,
}

impl ProducerMessage {
    pub fn new(payload: impl Into<Bytes>) -> Self {
        ProducerMessage {
            payload: payload.into(),
            ..Default::default()
        }
    }

    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    pub fn with_ordering_key(mut self, key: impl Into<Bytes>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    pub fn with_property(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.properties.push((k.into(), v.into()));
        self
    }

    pub fn with_event_time(mut self, t: u64) -> Self {
        self.event_time = Some(t);
        self
    }

    /// The bytes the routing hash is computed on: ordering key, else key.
    pub(crate) fn routing_key(&self) -> Option<&[u8]> {
        self.ordering_key
            .as_deref()
            .or(self.key.as_deref().map(str::as_bytes))
    }
}

impl From<Vec<u8>> for ProducerMessage {
    fn from(v: Vec<u8>) -> Self {
        ProducerMessage::new(v)
    }
}
impl From<&[u8]> for ProducerMessage {
    fn from(v: &[u8]) -> Self {
        ProducerMessage::new(Bytes::copy_from_slice(v))
    }
}
impl From<Bytes> for ProducerMessage {
    fn from(v: Bytes) -> Self {
        ProducerMessage::new(v)
    }
}
impl From<&str> for ProducerMessage {
    fn from(v: &str) -> Self {
        ProducerMessage::new(Bytes::copy_from_slice(v.as_bytes()))
    }
}
impl From<String> for ProducerMessage {
    fn from(v: String) -> Self {
        ProducerMessage::new(v.into_bytes())
    }
}

/// How messages are grouped into batches.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum BatchingType {
    /// One open batch for everything (Java's `DEFAULT`).
    #[default]
    Default,
    /// One open batch per key (ordering key, else partition key), so that a
    /// Key_Shared subscription can route whole batches (Java's `KEY_BASED`).
    KeyBased,
    /// PIP-486: one open batch per entry bucket. `splits` are the bucket
    /// boundaries (`[s1, .., s_{N-1}]`, see [`crate::equal_width_splits`]);
    /// every entry is stamped with the min and max `hashB` of its messages.
    EntryBucket { splits: Vec<u32> },
}

/// PIP-486 `hashB`: the low 16 bits of Murmur3_32 over the key; a keyless
/// message hashes to 0.
pub fn entry_hash(key: Option<&[u8]>) -> u32 {
    key.map_or(0, |k| murmur3_32(k, 0) & 0xffff)
}

/// PIP-486 `bucketOf`: the number of split points at or below `hash`.
pub fn entry_bucket_of(splits: &[u32], hash: u32) -> u32 {
    splits.partition_point(|s| *s <= hash) as u32
}

/// PIP-486 `equalWidth(N)`: the `N - 1` split points of `N` equal buckets.
pub fn equal_width_splits(n: u32) -> Vec<u32> {
    let n = n.max(1) as u64;
    (1..n).map(|i| ((i * 65536) / n) as u32).collect()
}

/// PIP-486 `ranges(splits)`: `[0, s1-1], [s1, s2-1], .., [s_{N-1}, 0xFFFF]`.
pub fn entry_bucket_ranges(splits: &[u32]) -> Vec<IntRange> {
    let mut starts = vec![0u32];
    starts.extend_from_slice(splits);
    starts
        .iter()
        .enumerate()
        .map(|(i, s)| IntRange {
            start: *s as i32,
            end: starts.get(i + 1).map_or(0xffff, |n| *n as i32 - 1),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_tile_the_ring() {
        let r = entry_bucket_ranges(&equal_width_splits(4));
        assert_eq!(r.len(), 4);
        assert_eq!((r[0].start, r[0].end), (0, 16383));
        assert_eq!((r[3].start, r[3].end), (49152, 65535));
        let one = entry_bucket_ranges(&equal_width_splits(1));
        assert_eq!((one[0].start, one[0].end), (0, 65535));
    }
}
