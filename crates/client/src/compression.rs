//! Payload compression as Pulsar's `CompressionCodec*`: LZ4 is the raw block
//! format (no frame header; the size comes from `uncompressed_size`), ZSTD is
//! one zstd frame.

use bytes::Bytes;
use strobe_wire::proto::CompressionType;

use crate::error::{Error, Result};

/// The codecs this client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    #[default]
    None,
    Lz4,
    /// ZSTD at the given level (Pulsar's default is 3).
    Zstd(i32),
}

impl Compression {
    pub fn wire(self) -> CompressionType {
        match self {
            Compression::None => CompressionType::None,
            Compression::Lz4 => CompressionType::Lz4,
            Compression::Zstd(_) => CompressionType::Zstd,
        }
    }

    /// Parses `none`, `lz4` or `zstd`.
    pub fn parse(s: &str) -> Option<Compression> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Some(Compression::None),
            "lz4" => Some(Compression::Lz4),
            "zstd" => Some(Compression::Zstd(3)),
            _ => None,
        }
    }

    pub(crate) fn compress(self, data: &[u8]) -> Result<Vec<u8>> {
        match self {
            Compression::None => Ok(data.to_vec()),
            Compression::Lz4 => Ok(lz4_flex::block::compress(data)),
            Compression::Zstd(level) => {
                zstd::bulk::compress(data, level).map_err(|e| Error::Decompress(e.to_string()))
            }
        }
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
    if kind == CompressionType::None {
        return Ok(data.clone());
    }
    if uncompressed_size > max {
        return Err(Error::Decompress(format!(
            "uncompressed size {uncompressed_size} exceeds {max}"
        )));
    }
    let out = match kind {
        CompressionType::Lz4 => lz4_flex::block::decompress(data, uncompressed_size)
            .map_err(|e| Error::Decompress(format!("lz4: {e}")))?,
        CompressionType::Zstd => zstd::bulk::decompress(data, uncompressed_size)
            .map_err(|e| Error::Decompress(format!("zstd: {e}")))?,
        other => return Err(Error::Decompress(format!("{other:?} is not supported"))),
    };
    if out.len() != uncompressed_size {
        return Err(Error::Decompress(format!(
            "got {} bytes, the metadata says {uncompressed_size}",
            out.len()
        )));
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let data: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for c in [Compression::Lz4, Compression::Zstd(3)] {
            let z = c.compress(&data).unwrap();
            assert!(z.len() < data.len());
            let back = decompress(c.wire(), &Bytes::from(z), data.len(), 1 << 20).unwrap();
            assert_eq!(&back[..], &data[..]);
        }
    }

    #[test]
    fn refuses_oversized() {
        let z = Bytes::from(Compression::Lz4.compress(b"abc").unwrap());
        assert!(decompress(CompressionType::Lz4, &z, 10 << 20, 1 << 20).is_err());
    }
}
