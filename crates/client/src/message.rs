//! What a producer sends: [`ProducerMessage`], the batching kinds, and the
//! PIP-486 entry hash and bucket of a key.

use bytes::Bytes;
use strobe_model::murmur3_32;

/// One message to send.
#[derive(Debug, Clone, Default)]
pub struct ProducerMessage {
    pub payload: Bytes,
    /// The partition key, which Key_Shared routes on (unless an ordering key is set).
    pub key: Option<String>,
    pub ordering_key: Option<Bytes>,
    pub properties: Vec<(String, String)>,
    pub event_time: Option<u64>,
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
