//! One group commit's plan: its entries grouped into (topic, ledger) runs
//! ([`Chunk`]) and chained in order. Plain data, so that the flusher's state
//! (`shared`), which takes and returns plans, depends on nothing that writes.

use std::sync::Arc;

use bytes::Bytes;

use crate::Result;
use crate::file::format::SEGREF_LEN;
use crate::file::topic::{Req, TopicShared};

/// A (topic, ledger) run of one group commit's entries.
pub(super) struct Chunk {
    pub(super) topic: Arc<TopicShared>,
    pub(super) ledger: u64,
    /// Index of its first and last entry in the batch (the others are
    /// chained through [`Plan::next`]), and how many there are.
    pub(super) first: usize,
    pub(super) last: usize,
    pub(super) count: usize,
    /// Sum of the entries' data lengths.
    pub(super) bytes: usize,
    /// Written once, straight to the segment (else through the journal).
    pub(super) direct: bool,
    /// A direct chunk's journal reference, once its segment is synced
    /// (serial write-once path; the pipelined one hands it to a later group).
    pub(super) placed: Option<[u8; SEGREF_LEN]>,
    pub(super) result: Result<()>,
}

pub(super) struct Plan {
    pub(super) chunks: Vec<Chunk>,
    /// The chunk of each request (entries only).
    pub(super) slot: Vec<Option<usize>>,
    /// The next entry of the same chunk, per request (`usize::MAX`: none).
    pub(super) next: Vec<usize>,
}

/// (entry id, timestamp, data, its CRC-32C) of a chunk's entries, in order.
pub(super) fn chunk_entries<'a>(
    reqs: &'a [Req],
    next: &'a [usize],
    first: usize,
) -> impl Iterator<Item = (u64, u64, &'a Bytes, u32)> + 'a {
    let mut i = first;
    std::iter::from_fn(move || {
        if i == usize::MAX {
            return None;
        }
        let Req::Entry {
            entry,
            ts,
            data,
            crc,
            ..
        } = &reqs[i]
        else {
            unreachable!("chunks hold entries")
        };
        i = next[i];
        Some((*entry, *ts, data, *crc))
    })
}
