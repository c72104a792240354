//! The objects' bytes. Every object ends with the CRC-32C of everything
//! before it, so a torn or foreign object is told apart from a good one.
//!
//! Log object (at `log/<seq>`), little-endian:
//!
//! | field | bytes |
//! |---|---|
//! | magic `STRBLOG1` | 8 |
//! | kind: 1 data, 2 seal | 1 |
//! | writer epoch (the opener's fencing token) | 8 |
//! | put id (unique per put, so a retried put that lands is recognised) | 16 |
//! | data only: ledger id, first entry id, entry count | 8 + 8 + 4 |
//! | data only, per entry: append time (ms), length, CRC-32C | 8 + 4 + 4 |
//! | data only: the entries' bytes, one after the other | … |
//! | CRC-32C of all of the above | 4 |
//!
//! A checkpoint (`checkpoint/<seq>`) is `STRBCKP1`, a JSON document
//! ([`Checkpoint`]) and the CRC; a cursor (`cursors/<name>`) is `STRBCUR1`,
//! the writer's epoch, the cursor's snapshot and the CRC.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

const LOG_MAGIC: &[u8; 8] = b"STRBLOG1";
const CHECKPOINT_MAGIC: &[u8; 8] = b"STRBCKP1";
const CURSOR_MAGIC: &[u8; 8] = b"STRBCUR1";

/// One entry of a data object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjEntry {
    pub ts_ms: u64,
    pub crc: u32,
    pub data: Bytes,
}

/// What a log object holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Body {
    Data {
        ledger_id: u64,
        first_entry: u64,
        entries: Vec<ObjEntry>,
    },
    Seal,
}

/// A decoded log object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogObject {
    pub epoch: u64,
    pub put_id: u128,
    pub body: Body,
}

/// What one data object of the log holds, as the index keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ObjMeta {
    pub ledger_id: u64,
    pub first_entry: u64,
    pub count: u64,
    pub bytes: u64,
    pub first_ts: u64,
    pub last_ts: u64,
}

/// The state of a topic's log up to and including object `seq`, so that an
/// open reads this and the objects after it, not the whole history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Checkpoint {
    pub seq: u64,
    /// The highest writer epoch in the log up to `seq`.
    pub max_epoch: u64,
    pub next_ledger_id: u64,
    pub first_kept: u64,
    /// Every data object still in the log up to `seq`: (seq, what it holds).
    pub objects: Vec<(u64, ObjMeta)>,
}

/// Why bytes did not decode.
pub(crate) type DecodeError = String;

fn seal_crc(mut b: BytesMut) -> Bytes {
    let crc = crc32c::crc32c(&b);
    b.put_u32_le(crc);
    b.freeze()
}

/// Splits off and checks the trailing CRC.
fn checked(raw: &Bytes, magic: &[u8; 8]) -> Result<Bytes, DecodeError> {
    if raw.len() < magic.len() + 4 {
        return Err(format!("{} bytes is too short", raw.len()));
    }
    let (body, tail) = raw.split_at(raw.len() - 4);
    let want = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
    if crc32c::crc32c(body) != want {
        return Err("CRC-32C mismatch".into());
    }
    if &body[..8] != magic {
        return Err(format!("not a {} object", String::from_utf8_lossy(magic)));
    }
    Ok(raw.slice(8..raw.len() - 4))
}

/// Encodes a data object.
pub(crate) fn encode_data(
    epoch: u64,
    put_id: u128,
    ledger_id: u64,
    first_entry: u64,
    entries: &[ObjEntry],
) -> Bytes {
    let data_len: usize = entries.iter().map(|e| e.data.len()).sum();
    let mut b = BytesMut::with_capacity(8 + 1 + 8 + 16 + 20 + entries.len() * 16 + data_len + 4);
    b.put_slice(LOG_MAGIC);
    b.put_u8(1);
    b.put_u64_le(epoch);
    b.put_u128_le(put_id);
    b.put_u64_le(ledger_id);
    b.put_u64_le(first_entry);
    b.put_u32_le(entries.len() as u32);
    for e in entries {
        b.put_u64_le(e.ts_ms);
        b.put_u32_le(e.data.len() as u32);
        b.put_u32_le(e.crc);
    }
    for e in entries {
        b.put_slice(&e.data);
    }
    seal_crc(b)
}

/// Encodes a seal: the claim of writer `epoch` on the log from this slot on.
pub(crate) fn encode_seal(epoch: u64, put_id: u128) -> Bytes {
    let mut b = BytesMut::with_capacity(8 + 1 + 8 + 16 + 4);
    b.put_slice(LOG_MAGIC);
    b.put_u8(2);
    b.put_u64_le(epoch);
    b.put_u128_le(put_id);
    seal_crc(b)
}

/// Decodes a log object, checking its CRC and every entry's.
pub(crate) fn decode_log(raw: &Bytes) -> Result<LogObject, DecodeError> {
    let body = checked(raw, LOG_MAGIC)?;
    let mut r = body.clone();
    if r.remaining() < 1 + 8 + 16 {
        return Err("truncated header".into());
    }
    let kind = r.get_u8();
    let epoch = r.get_u64_le();
    let put_id = r.get_u128_le();
    let body = match kind {
        2 if !r.has_remaining() => Body::Seal,
        1 => {
            if r.remaining() < 20 {
                return Err("truncated data header".into());
            }
            let ledger_id = r.get_u64_le();
            let first_entry = r.get_u64_le();
            let count = r.get_u32_le() as usize;
            if r.remaining() < count.saturating_mul(16) {
                return Err(format!("{count} entries do not fit"));
            }
            let mut heads = Vec::with_capacity(count);
            for _ in 0..count {
                heads.push((r.get_u64_le(), r.get_u32_le() as usize, r.get_u32_le()));
            }
            let mut offset = body.len() - r.remaining();
            let mut entries = Vec::with_capacity(count);
            for (i, (ts_ms, len, crc)) in heads.into_iter().enumerate() {
                if body.len() - offset < len {
                    return Err(format!("entry {i} is truncated"));
                }
                let data = body.slice(offset..offset + len);
                offset += len;
                if crc32c::crc32c(&data) != crc {
                    return Err(format!("entry {i} fails its CRC-32C"));
                }
                entries.push(ObjEntry { ts_ms, crc, data });
            }
            if offset != body.len() {
                return Err(format!(
                    "{} bytes after the last entry",
                    body.len() - offset
                ));
            }
            Body::Data {
                ledger_id,
                first_entry,
                entries,
            }
        }
        k => return Err(format!("unknown object kind {k}")),
    };
    Ok(LogObject {
        epoch,
        put_id,
        body,
    })
}

pub(crate) fn encode_checkpoint(c: &Checkpoint) -> Bytes {
    let json = serde_json::to_vec(c).expect("a checkpoint always serialises");
    let mut b = BytesMut::with_capacity(8 + json.len() + 4);
    b.put_slice(CHECKPOINT_MAGIC);
    b.put_slice(&json);
    seal_crc(b)
}

pub(crate) fn decode_checkpoint(raw: &Bytes) -> Result<Checkpoint, DecodeError> {
    let body = checked(raw, CHECKPOINT_MAGIC)?;
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}

pub(crate) fn encode_cursor(epoch: u64, snapshot: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(8 + 8 + snapshot.len() + 4);
    b.put_slice(CURSOR_MAGIC);
    b.put_u64_le(epoch);
    b.put_slice(snapshot);
    seal_crc(b)
}

/// A cursor object's writer epoch and snapshot.
pub(crate) fn decode_cursor(raw: &Bytes) -> Result<(u64, Bytes), DecodeError> {
    let mut body = checked(raw, CURSOR_MAGIC)?;
    if body.len() < 8 {
        return Err("truncated cursor".into());
    }
    let epoch = body.get_u64_le();
    Ok((epoch, body))
}

/// A name as one path segment: letters, digits, `-`, `_` and `.` stay, every
/// other byte becomes `~XX` (so `persistent://t/n/x` stays readable and `/`
/// never splits it).
pub(crate) fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
            out.push(b as char);
        } else {
            out.push_str(&format!("~{b:02x}"));
        }
    }
    out
}

/// [`escape`] backwards.
pub(crate) fn unescape(seg: &str) -> Option<String> {
    let bytes = seg.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'~' {
            let hex = seg.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(s: &str, ts: u64) -> ObjEntry {
        ObjEntry {
            ts_ms: ts,
            crc: crc32c::crc32c(s.as_bytes()),
            data: Bytes::copy_from_slice(s.as_bytes()),
        }
    }

    #[test]
    fn objects_round_trip_and_damage_is_caught() {
        let es = vec![entry("a", 1), entry("", 2), entry("ccc", 3)];
        let raw = encode_data(7, 42, 3, 10, &es);
        let o = decode_log(&raw).unwrap();
        assert_eq!((o.epoch, o.put_id), (7, 42));
        assert_eq!(
            o.body,
            Body::Data {
                ledger_id: 3,
                first_entry: 10,
                entries: es
            }
        );
        let seal = decode_log(&encode_seal(9, 1)).unwrap();
        assert_eq!((seal.epoch, seal.put_id, seal.body), (9, 1, Body::Seal));
        for i in 0..raw.len() {
            let mut bad = raw.to_vec();
            bad[i] ^= 0x40;
            assert!(decode_log(&Bytes::from(bad)).is_err(), "flip at {i}");
        }
        assert!(decode_log(&raw.slice(..raw.len() - 1)).is_err());
        let cur = encode_cursor(5, b"snap");
        assert_eq!(
            decode_cursor(&cur).unwrap(),
            (5, Bytes::from_static(b"snap"))
        );
        assert!(decode_log(&cur).is_err(), "a cursor is not a log object");
        let c = Checkpoint {
            seq: 4,
            max_epoch: 2,
            next_ledger_id: 3,
            first_kept: 1,
            objects: vec![(
                1,
                ObjMeta {
                    ledger_id: 1,
                    first_entry: 0,
                    count: 2,
                    bytes: 9,
                    first_ts: 1,
                    last_ts: 2,
                },
            )],
        };
        assert_eq!(decode_checkpoint(&encode_checkpoint(&c)).unwrap(), c);
    }

    #[test]
    fn names_escape_to_one_readable_segment() {
        for n in ["persistent://t/n/x-partition-1", "a b~c%", "sub/ünï", ""] {
            let e = escape(n);
            assert!(!e.contains('/') && !e.contains('%'), "{e}");
            assert_eq!(unescape(&e).as_deref(), Some(n));
        }
        assert_eq!(escape("persistent://t/n/x"), "persistent~3a~2f~2ft~2fn~2fx");
    }
}
