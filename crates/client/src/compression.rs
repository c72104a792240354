//! The codecs this client's producers use; the bytes are made (and read back,
//! in the consumer) by `strobe_wire::compression`, shared with the broker.

use bytes::Bytes;
use strobe_wire::proto::CompressionType;

use crate::error::{Error, Result};

/// The codecs this client speaks: Pulsar's four.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    #[default]
    None,
    Lz4,
    Zlib,
    /// ZSTD at the given level (Pulsar's default is 3).
    Zstd(i32),
    Snappy,
}

impl Compression {
    pub fn wire(self) -> CompressionType {
        match self {
            Compression::None => CompressionType::None,
            Compression::Lz4 => CompressionType::Lz4,
            Compression::Zlib => CompressionType::Zlib,
            Compression::Zstd(_) => CompressionType::Zstd,
            Compression::Snappy => CompressionType::Snappy,
        }
    }

    /// Parses `none`, `lz4`, `zlib`, `zstd` or `snappy`.
    pub fn parse(s: &str) -> Option<Compression> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Some(Compression::None),
            "lz4" => Some(Compression::Lz4),
            "zlib" => Some(Compression::Zlib),
            "zstd" => Some(Compression::Zstd(3)),
            "snappy" => Some(Compression::Snappy),
            _ => None,
        }
    }

    pub(crate) fn compress(self, data: &[u8]) -> Result<Vec<u8>> {
        let level = match self {
            Compression::Zstd(level) => level,
            _ => 3,
        };
        strobe_wire::compression::compress(self.wire(), data, level)
            .map_err(|e| Error::Decompress(e.to_string()))
    }
}

/// Reverses the producer's compression. `uncompressed_size` is bounded by
/// the caller (the connection's max message size) before anything is allocated.
pub(crate) fn decompress(
    kind: CompressionType,
    data: &Bytes,
    uncompressed_size: usize,
    max: usize,
) -> Result<Bytes> {
    strobe_wire::compression::decompress(kind, data, uncompressed_size, max)
        .map_err(|e| Error::Decompress(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips_through_the_client() {
        let data: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for name in ["lz4", "zlib", "zstd", "snappy"] {
            let c = Compression::parse(name).unwrap();
            let z = c.compress(&data).unwrap();
            assert!(z.len() < data.len());
            let back = decompress(c.wire(), &Bytes::from(z), data.len(), 1 << 20).unwrap();
            assert_eq!(&back[..], &data[..], "{name}");
        }
    }
}
