//! Payload compression as Pulsar's `CompressionCodec*`, the one place every codec
//! lives (the client compresses and decompresses with it, the broker looks inside
//! compressed batches with it, for compaction):
//!
//! - LZ4: the raw block format, no frame header; the size comes from
//!   `uncompressed_size` (Java's `lz4-java` fast compressor, C++'s `LZ4_compress_default`).
//! - ZLIB: a zlib stream (RFC 1950: header, deflate, Adler-32), as Java's `Deflater`
//!   and C++'s `compress()` write it.
//! - ZSTD: one zstd frame.
//! - SNAPPY: the raw Snappy block format (no framing), as `org.xerial.snappy`'s
//!   `Snappy.compress` and C++'s `snappy::Compress` write it.
//!
//! Decompression is bounded: the caller's limit on `uncompressed_size` is checked
//! before anything is allocated, no codec writes past it (a zlib stream that
//! inflates further is refused, not followed), and the result must be exactly
//! `uncompressed_size` bytes long.

use std::io::{Read, Write};

use bytes::Bytes;

use crate::WireError;
use crate::proto::CompressionType;

/// Compresses `data` with `kind` (`level` is used by ZSTD only; Pulsar's default is 3).
pub fn compress(kind: CompressionType, data: &[u8], level: i32) -> Result<Vec<u8>, WireError> {
    let failed = |e: std::io::Error| WireError::Compression(format!("{kind:?}: {e}"));
    Ok(match kind {
        CompressionType::None => data.to_vec(),
        CompressionType::Lz4 => lz4_flex::block::compress(data),
        CompressionType::Zlib => {
            let mut z = flate2::write::ZlibEncoder::new(
                Vec::with_capacity(data.len() / 2 + 16),
                flate2::Compression::default(),
            );
            z.write_all(data).map_err(failed)?;
            z.finish().map_err(failed)?
        }
        CompressionType::Zstd => zstd::bulk::compress(data, level).map_err(failed)?,
        CompressionType::Snappy => snap::raw::Encoder::new()
            .compress_vec(data)
            .map_err(|e| WireError::Compression(format!("Snappy: {e}")))?,
    })
}

/// Reverses `compress`. `uncompressed_size` (from the message metadata) must not
/// exceed `max`, checked before anything is allocated.
pub fn decompress(
    kind: CompressionType,
    data: &Bytes,
    uncompressed_size: usize,
    max: usize,
) -> Result<Bytes, WireError> {
    if kind == CompressionType::None {
        return Ok(data.clone());
    }
    if uncompressed_size > max {
        return Err(WireError::Compression(format!(
            "{kind:?}: uncompressed size {uncompressed_size} exceeds the limit of {max} bytes"
        )));
    }
    let failed = |e: &dyn std::fmt::Display| WireError::Compression(format!("{kind:?}: {e}"));
    let out = match kind {
        CompressionType::None => unreachable!("returned above"),
        CompressionType::Lz4 => {
            lz4_flex::block::decompress(data, uncompressed_size).map_err(|e| failed(&e))?
        }
        CompressionType::Zlib => {
            let mut out = Vec::with_capacity(uncompressed_size);
            // One byte more than expected is read so that a longer stream is noticed.
            flate2::read::ZlibDecoder::new(&data[..])
                .take(uncompressed_size as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| failed(&e))?;
            out
        }
        CompressionType::Zstd => {
            zstd::bulk::decompress(data, uncompressed_size).map_err(|e| failed(&e))?
        }
        CompressionType::Snappy => {
            let len = snap::raw::decompress_len(data).map_err(|e| failed(&e))?;
            if len != uncompressed_size {
                return Err(failed(&format!(
                    "the block holds {len} bytes, the metadata says {uncompressed_size}"
                )));
            }
            snap::raw::Decoder::new()
                .decompress_vec(data)
                .map_err(|e| failed(&e))?
        }
    };
    if out.len() != uncompressed_size {
        return Err(failed(&format!(
            "got {} bytes, the metadata says {uncompressed_size}",
            out.len()
        )));
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [CompressionType; 4] = [
        CompressionType::Lz4,
        CompressionType::Zlib,
        CompressionType::Zstd,
        CompressionType::Snappy,
    ];

    fn sample() -> Vec<u8> {
        (0..10_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect()
    }

    #[test]
    fn every_codec_round_trips() {
        let data = sample();
        for kind in ALL {
            let z = compress(kind, &data, 3).unwrap();
            assert!(z.len() < data.len(), "{kind:?} did not compress");
            let back = decompress(kind, &Bytes::from(z), data.len(), 1 << 20).unwrap();
            assert_eq!(&back[..], &data[..], "{kind:?}");
        }
        for kind in ALL {
            let z = compress(kind, b"", 3).unwrap();
            assert!(decompress(kind, &Bytes::from(z), 0, 1).unwrap().is_empty());
        }
    }

    /// Bytes written by the other implementations' formats: a zlib stream with its
    /// header (Java's `Deflater`) and a raw Snappy block (no stream identifier).
    #[test]
    fn reads_the_standard_formats() {
        // zlib.compress(b"hello hello hello") in CPython.
        static ZLIB: [u8; 16] = [
            0x78, 0x9c, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0x57, 0xc8, 0x40, 0x90, 0x00, 0x3a, 0x2e,
            0x06, 0x7d,
        ];
        let out = decompress(CompressionType::Zlib, &Bytes::from_static(&ZLIB), 17, 100).unwrap();
        assert_eq!(&out[..], b"hello hello hello");
        // A raw Snappy block: varint length 5, then a literal of 5 bytes.
        static SNAPPY: [u8; 7] = [0x05, 0x10, b'h', b'e', b'l', b'l', b'o'];
        let out = decompress(
            CompressionType::Snappy,
            &Bytes::from_static(&SNAPPY),
            5,
            100,
        )
        .unwrap();
        assert_eq!(&out[..], b"hello");
    }

    #[test]
    fn refuses_sizes_over_the_limit_and_wrong_sizes() {
        let data = sample();
        for kind in ALL {
            let z = Bytes::from(compress(kind, &data, 3).unwrap());
            assert!(decompress(kind, &z, 10 << 20, 1 << 20).is_err(), "{kind:?}");
            assert!(
                decompress(kind, &z, data.len() - 1, 1 << 20).is_err(),
                "{kind:?} short"
            );
            assert!(
                decompress(kind, &z, data.len() + 1, 1 << 20).is_err(),
                "{kind:?} long"
            );
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let junk = Bytes::from_static(&[0xff; 64]);
        for kind in ALL {
            assert!(decompress(kind, &junk, 1000, 1 << 20).is_err(), "{kind:?}");
        }
    }
}
