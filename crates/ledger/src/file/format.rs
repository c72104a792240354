//! Record framing shared by journal and segment files:
//! `[len: u32 LE][crc: u32 LE][body: len bytes]`, where `crc` is CRC-32C of
//! the body (journal records also mix in the journal file's sequence number,
//! so stale records in a recycled journal file never validate).

/// Header bytes before each record body.
pub const HEADER: usize = 8;
/// Upper bound on a body, checked before allocating for one.
pub const MAX_BODY: usize = 64 << 20;

/// Segment record body: `[entry_id u64][ts_ms u64][data]`.
pub const SEG_FIXED: usize = 16;

pub fn put_record(buf: &mut Vec<u8>, seed: u32, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut crc = seed;
    for p in parts {
        crc = crc32c::crc32c_append(crc, p);
    }
    buf.extend_from_slice(&(len as u32).to_le_bytes());
    buf.extend_from_slice(&crc.to_le_bytes());
    for p in parts {
        buf.extend_from_slice(p);
    }
}

/// [`put_record`] of `head ++ data`, with `data_crc = crc32c(data)` known:
/// the CRC is derived from it instead of read off `data` again.
pub fn put_record_crc(buf: &mut Vec<u8>, seed: u32, head: &[u8], data: &[u8], data_crc: u32) {
    let crc = crate::crc::combine(
        crc32c::crc32c_append(seed, head),
        data_crc,
        data.len() as u64,
    );
    buf.extend_from_slice(&((head.len() + data.len()) as u32).to_le_bytes());
    buf.extend_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(head);
    buf.extend_from_slice(data);
}

/// The CRC seed of journal file `seq`.
pub fn journal_seed(seq: u64) -> u32 {
    crc32c::crc32c(&seq.to_le_bytes())
}

/// The bytes of an entry's segment record that precede its data:
/// `[len][crc][entry id][ts]`, for data of `len` bytes whose CRC-32C is
/// `data_crc`.
pub fn segment_header(
    entry_id: u64,
    ts: u64,
    len: usize,
    data_crc: u32,
) -> [u8; HEADER + SEG_FIXED] {
    let mut h = [0u8; HEADER + SEG_FIXED];
    h[HEADER..HEADER + 8].copy_from_slice(&entry_id.to_le_bytes());
    h[HEADER + 8..].copy_from_slice(&ts.to_le_bytes());
    let crc = crate::crc::combine(crc32c::crc32c(&h[HEADER..]), data_crc, len as u64);
    h[..4].copy_from_slice(&((SEG_FIXED + len) as u32).to_le_bytes());
    h[4..8].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Appends a segment record for one entry (`data_crc = crc32c(data)`).
pub fn put_segment_record(buf: &mut Vec<u8>, entry_id: u64, ts: u64, data: &[u8], data_crc: u32) {
    buf.extend_from_slice(&segment_header(entry_id, ts, data.len(), data_crc));
    buf.extend_from_slice(data);
}

/// The outcome of decoding one record at the start of `buf`.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A valid record: its body and total length including the header.
    Record(&'a [u8], usize),
    /// Not enough bytes for the header or the body (a torn tail or the end).
    Incomplete,
    /// A zero length: unwritten (zero-filled) space.
    Zero,
    /// A bad length or CRC.
    Bad(&'static str),
}

pub fn decode(buf: &[u8], seed: u32) -> Decoded<'_> {
    if buf.len() < HEADER {
        return Decoded::Incomplete;
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    if len == 0 {
        return if crc == 0 {
            Decoded::Zero
        } else {
            Decoded::Bad("zero length")
        };
    }
    if len > MAX_BODY {
        return Decoded::Bad("length out of bounds");
    }
    if buf.len() < HEADER + len {
        return Decoded::Incomplete;
    }
    let body = &buf[HEADER..HEADER + len];
    if crc32c::crc32c_append(seed, body) != crc {
        return Decoded::Bad("CRC-32C mismatch");
    }
    Decoded::Record(body, HEADER + len)
}

pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Journal record kinds (the first byte of a record body).
pub const K_DECLARE: u8 = 1;
pub const K_ENTRY: u8 = 2;
pub const K_CURSOR: u8 = 3;
pub const K_CURSOR_DELETE: u8 = 4;
pub const K_TRIM: u8 = 5;
/// A reference to entries written once, straight to a segment, and synced
/// there before this record was written: `[kind][topic u32][ledger u64]
/// [first entry u64][count u64][segment offset u64][byte length u64]`.
pub const K_SEGREF: u8 = 6;
pub const SEGREF_LEN: usize = 45;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_damage() {
        let mut b = Vec::new();
        put_segment_record(&mut b, 7, 99, b"hello", crc32c::crc32c(b"hello"));
        // The same bytes as the generic framing.
        let mut fixed = [0u8; SEG_FIXED];
        fixed[..8].copy_from_slice(&7u64.to_le_bytes());
        fixed[8..].copy_from_slice(&99u64.to_le_bytes());
        let mut g = Vec::new();
        put_record(&mut g, 0, &[&fixed, b"hello"]);
        assert_eq!(b, g);
        let mut j = Vec::new();
        put_record_crc(
            &mut j,
            journal_seed(3),
            &fixed,
            b"hello",
            crc32c::crc32c(b"hello"),
        );
        let mut g = Vec::new();
        put_record(&mut g, journal_seed(3), &[&fixed, b"hello"]);
        assert_eq!(j, g);
        match decode(&b, 0) {
            Decoded::Record(body, n) => {
                assert_eq!(n, b.len());
                assert_eq!(u64_at(body, 0), 7);
                assert_eq!(&body[SEG_FIXED..], b"hello");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(decode(&b[..b.len() - 1], 0), Decoded::Incomplete);
        assert_eq!(decode(&[0u8; 16], 0), Decoded::Zero);
        let mut bad = b.clone();
        bad[12] ^= 1;
        assert_eq!(decode(&bad, 0), Decoded::Bad("CRC-32C mismatch"));
        assert_eq!(
            decode(&b, journal_seed(3)),
            Decoded::Bad("CRC-32C mismatch")
        );
    }
}
