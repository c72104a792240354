//! Batches: an entry whose payload holds `num_messages_in_batch` messages,
//! each `[u32 size][SingleMessageMetadata][payload_size bytes]`.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;

use crate::WireError;
use crate::proto::{CompressionType, MessageMetadata, SingleMessageMetadata};

/// One message of a batch: its header and its body (a slice, not a copy).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchMessage {
    pub metadata: SingleMessageMetadata,
    pub payload: Bytes,
}

/// Whether the entry is a batch. Producers that batch set
/// `num_messages_in_batch` even for a batch of one; a plain message leaves it out.
pub fn is_batch(metadata: &MessageMetadata) -> bool {
    metadata.num_messages_in_batch.is_some()
}

/// The number of messages in the entry (1 for a plain message).
pub fn message_count(metadata: &MessageMetadata) -> u32 {
    metadata.num_messages_in_batch.unwrap_or(1).max(1) as u32
}

/// Iterates the messages of an uncompressed, unencrypted batch. A compressed or
/// encrypted batch is reported as such: the broker must not look inside it.
pub fn messages(metadata: &MessageMetadata, payload: &Bytes) -> Result<BatchIter, WireError> {
    let compression = metadata.compression();
    if compression != CompressionType::None {
        return Err(WireError::CompressedBatch(compression));
    }
    if !metadata.encryption_keys.is_empty() {
        return Err(WireError::EncryptedBatch);
    }
    Ok(BatchIter {
        rest: payload.clone(),
        remaining: message_count(metadata),
    })
}

/// Iterates the messages of an unencrypted batch, decompressing it first: the
/// metadata's `uncompressed_size` must not exceed `max` (checked before anything
/// is allocated). For the broker's own readers of batches (compaction).
pub fn decompressed_messages(
    metadata: &MessageMetadata,
    payload: &Bytes,
    max: usize,
) -> Result<BatchIter, WireError> {
    if !metadata.encryption_keys.is_empty() {
        return Err(WireError::EncryptedBatch);
    }
    let rest = match metadata.compression() {
        CompressionType::None => payload.clone(),
        kind => {
            let size = metadata
                .uncompressed_size
                .ok_or(WireError::Compression(format!(
                    "{kind:?}: the metadata has no uncompressed_size"
                )))?;
            crate::compression::decompress(kind, payload, size as usize, max)?
        }
    };
    Ok(BatchIter {
        rest,
        remaining: message_count(metadata),
    })
}

/// Whether a message's value is empty (a tombstone to compaction), looking at its
/// uncompressed size when it is compressed: an empty value compresses to a few bytes.
pub fn is_empty_value(metadata: &MessageMetadata, payload: &[u8]) -> bool {
    match metadata.compression() {
        CompressionType::None => payload.is_empty(),
        _ => metadata.uncompressed_size == Some(0),
    }
}

/// See [`messages`].
#[derive(Debug, Clone)]
pub struct BatchIter {
    rest: Bytes,
    remaining: u32,
}

impl BatchIter {
    fn read_one(&mut self) -> Result<BatchMessage, WireError> {
        if self.rest.len() < 4 {
            return Err(WireError::Truncated("batch message header size"));
        }
        let size = self.rest.get_u32() as usize;
        if size > self.rest.len() {
            return Err(WireError::Truncated("batch message header"));
        }
        let metadata = SingleMessageMetadata::decode(self.rest.split_to(size))
            .map_err(WireError::InvalidMetadata)?;
        let len = usize::try_from(metadata.payload_size)
            .map_err(|_| WireError::Truncated("negative payload size"))?;
        if len > self.rest.len() {
            return Err(WireError::Truncated("batch message payload"));
        }
        let payload = self.rest.split_to(len);
        Ok(BatchMessage { metadata, payload })
    }
}

impl Iterator for BatchIter {
    type Item = Result<BatchMessage, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let r = self.read_one();
        if r.is_err() {
            self.remaining = 0;
        }
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining as usize))
    }
}

/// Builds an uncompressed batch payload. `payload_size` in each header is set
/// from its body.
pub fn encode(messages: &[(SingleMessageMetadata, &[u8])]) -> Bytes {
    let mut out = BytesMut::new();
    for (meta, body) in messages {
        let mut meta = meta.clone();
        meta.payload_size = body.len() as i32;
        out.put_u32(meta.encoded_len() as u32);
        meta.encode(&mut out).expect("BytesMut grows as needed");
        out.put_slice(body);
    }
    out.freeze()
}
