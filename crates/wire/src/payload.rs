//! The metadata-and-payload section of SEND and MESSAGE frames, which is also
//! what the broker stores as one entry:
//!
//! ```text
//! [0x0e02][u32 size][BrokerEntryMetadata]   optional, added by the broker
//! [0x0e01][u32 crc32c]                      optional; CRC-32C of everything after it
//! [u32 metadataSize][MessageMetadata][payload]
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;

use crate::WireError;
use crate::proto::{BrokerEntryMetadata, MessageMetadata};

pub const MAGIC_CRC32C: u16 = 0x0e01;
pub const MAGIC_BROKER_ENTRY_METADATA: u16 = 0x0e02;

/// A parsed metadata-and-payload section.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    pub broker_entry_metadata: Option<BrokerEntryMetadata>,
    /// The CRC-32C the sender declared, when it sent one (it has been verified).
    pub checksum: Option<u32>,
    pub metadata: MessageMetadata,
    /// The message body (compressed, encrypted or a batch, as the metadata says):
    /// a slice of the input, not a copy.
    pub payload: Bytes,
}

fn peek_u16(b: &[u8]) -> Option<u16> {
    (b.len() >= 2).then(|| u16::from_be_bytes([b[0], b[1]]))
}

/// Splits off the broker entry metadata, if the section starts with one.
/// Returns the metadata and the rest (a slice, not a copy).
pub fn split_broker_entry_metadata(
    section: &Bytes,
) -> Result<(Option<BrokerEntryMetadata>, Bytes), WireError> {
    if peek_u16(section) != Some(MAGIC_BROKER_ENTRY_METADATA) {
        return Ok((None, section.clone()));
    }
    let mut rest = section.clone();
    if rest.len() < 6 {
        return Err(WireError::Truncated("broker entry metadata size"));
    }
    rest.advance(2);
    let size = rest.get_u32() as usize;
    if size > rest.len() {
        return Err(WireError::Truncated("broker entry metadata"));
    }
    let meta =
        BrokerEntryMetadata::decode(rest.split_to(size)).map_err(WireError::InvalidMetadata)?;
    Ok((Some(meta), rest))
}

/// CRC-32C (Castagnoli), hardware-accelerated where the CPU has it.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Verifies and strips the `0x0e01` checksum prefix of a section that no longer
/// has broker entry metadata. Returns the declared checksum (if any) and the
/// rest. A mismatch is an error: the bytes cannot be trusted.
pub fn split_checksum(section: &Bytes) -> Result<(Option<u32>, Bytes), WireError> {
    if peek_u16(section) != Some(MAGIC_CRC32C) {
        return Ok((None, section.clone()));
    }
    if section.len() < 6 {
        return Err(WireError::Truncated("checksum"));
    }
    let expected = u32::from_be_bytes([section[2], section[3], section[4], section[5]]);
    let rest = section.slice(6..);
    let computed = crc32c(&rest);
    if computed != expected {
        return Err(WireError::ChecksumMismatch { expected, computed });
    }
    Ok((Some(expected), rest))
}

/// Reads `[u32 metadataSize][MessageMetadata]` and returns the metadata and the
/// payload after it.
pub fn split_metadata(section: &Bytes) -> Result<(MessageMetadata, Bytes), WireError> {
    let mut rest = section.clone();
    if rest.len() < 4 {
        return Err(WireError::Truncated("metadata size"));
    }
    let size = rest.get_u32() as usize;
    if size > rest.len() {
        return Err(WireError::Truncated("message metadata"));
    }
    let metadata =
        MessageMetadata::decode(rest.split_to(size)).map_err(WireError::InvalidMetadata)?;
    Ok((metadata, rest))
}

/// Parses a whole section, verifying the checksum when one is present.
pub fn parse(section: &Bytes) -> Result<Payload, WireError> {
    let (broker_entry_metadata, rest) = split_broker_entry_metadata(section)?;
    let (checksum, rest) = split_checksum(&rest)?;
    let (metadata, payload) = split_metadata(&rest)?;
    Ok(Payload {
        broker_entry_metadata,
        checksum,
        metadata,
        payload,
    })
}

/// Builds a section: `[0x0e01][crc]` when `checksum`, then the metadata and the payload.
pub fn encode(metadata: &MessageMetadata, payload: &[u8], checksum: bool) -> Bytes {
    let meta_len = metadata.encoded_len();
    let mut out = BytesMut::with_capacity(6 + 4 + meta_len + payload.len());
    if checksum {
        out.put_u16(MAGIC_CRC32C);
        out.put_u32(0); // filled below
    }
    let start = out.len();
    out.put_u32(meta_len as u32);
    metadata
        .encode(&mut out)
        .expect("reserved enough room for the metadata");
    out.put_slice(payload);
    if checksum {
        let crc = crc32c(&out[start..]);
        out[2..6].copy_from_slice(&crc.to_be_bytes());
    }
    out.freeze()
}

/// Prepends broker entry metadata to a section (what the broker stores when
/// entry metadata is enabled).
pub fn with_broker_entry_metadata(meta: &BrokerEntryMetadata, section: &[u8]) -> Bytes {
    let len = meta.encoded_len();
    let mut out = BytesMut::with_capacity(6 + len + section.len());
    out.put_u16(MAGIC_BROKER_ENTRY_METADATA);
    out.put_u32(len as u32);
    meta.encode(&mut out)
        .expect("reserved enough room for the entry metadata");
    out.put_slice(section);
    out.freeze()
}

/// The 6-byte `[0x0e01][crc]` prefix that makes `section` (which must not
/// already carry one) checksummed. The section itself is not copied.
pub fn checksum_prefix(section: &[u8]) -> [u8; 6] {
    prefix_for_checksum(crc32c(section))
}

/// The `[0x0e01][crc]` prefix of a section whose CRC-32C is `crc`.
pub fn prefix_for_checksum(crc: u32) -> [u8; 6] {
    let crc = crc.to_be_bytes();
    let m = MAGIC_CRC32C.to_be_bytes();
    [m[0], m[1], crc[0], crc[1], crc[2], crc[3]]
}

/// Whether the section (after any broker entry metadata) carries a checksum.
pub fn has_checksum(section: &[u8]) -> bool {
    peek_u16(section) == Some(MAGIC_CRC32C)
}

/// What a consumer must receive for a stored entry: the broker entry metadata
/// removed (unless `keep_entry_metadata`) and a checksum guaranteed, because
/// some clients (pulsar-rs) refuse payloads without one. Returns the small
/// prefix to send before the (shared, uncopied) body.
pub fn for_delivery(
    entry: &Bytes,
    keep_entry_metadata: bool,
) -> Result<(Vec<u8>, Bytes), WireError> {
    let (bem, rest) = split_broker_entry_metadata(entry)?;
    let mut prefix = Vec::new();
    if keep_entry_metadata && bem.is_some() {
        let bem_len = entry.len() - rest.len();
        if has_checksum(&rest) {
            return Ok((prefix, entry.clone()));
        }
        prefix.extend_from_slice(&entry[..bem_len]);
    }
    if has_checksum(&rest) {
        return Ok((prefix, rest));
    }
    prefix.extend_from_slice(&checksum_prefix(&rest));
    Ok((prefix, rest))
}

/// The metadata of a stored entry, without verifying its checksum (it was
/// verified once, on arrival). For the dispatch path, which reads metadata of
/// every entry it sends.
pub fn peek_metadata(entry: &Bytes) -> Result<MessageMetadata, WireError> {
    let (_, rest) = split_broker_entry_metadata(entry)?;
    let rest = if has_checksum(&rest) {
        if rest.len() < 6 {
            return Err(WireError::Truncated("checksum"));
        }
        rest.slice(6..)
    } else {
        rest
    };
    Ok(split_metadata(&rest)?.0)
}
