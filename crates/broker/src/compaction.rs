//! Topic compaction (Pulsar's `TwoPhaseCompactor`): the latest message of each
//! key, up to a horizon, kept in a compacted ledger that `read_compacted`
//! consumers and readers read before the topic's own entries after the horizon.
//!
//! Phase one reads the previous compacted ledger (if any) and the topic's
//! entries after the previous horizon up to the last confirmed entry, and
//! notes the latest (entry, batch index) of every key; an empty payload or a
//! `null_value` message deletes its key, and messages without a key are left
//! out, as in Pulsar. Phase two reads the same entries again and writes those
//! that hold a latest message: unchanged when every message of the entry is
//! kept, re-batched with only the kept messages otherwise. Compressed batches
//! (any of Pulsar's four codecs) are decompressed to be looked into, and a
//! re-batch is compressed again with the batch's own codec, as Pulsar's
//! `RawBatchConverter` does. Encrypted batches cannot be looked into and are kept
//! whole (never losing a latest value; their older values may then be seen
//! before newer ones).
//!
//! A compacted ledger entry is the original position (ledger id and entry id,
//! big-endian u64 each) followed by the entry's bytes as stored. The horizon
//! and the compacted ledger's name are recorded in the topic's metadata, so a
//! restart finds them; the `__compaction` cursor keeps the entries after the
//! horizon from being trimmed before the next compaction.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use strobe_ledger::{Entry, LedgerBackend, LedgerConfig, ManagedLedger, Position};
use strobe_wire::payload;
use strobe_wire::proto::MessageMetadata;

use crate::BrokerError;

/// Entries read at once while compacting.
const READ_BATCH: usize = 500;

/// The name of the cursor that holds the entries after the horizon.
pub const COMPACTION_CURSOR: &str = "__compaction";

/// The compaction state of a topic, as `GET .../compaction` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CompactionStatus {
    #[default]
    NotRun,
    Running,
    Success,
    Error(String),
}

impl CompactionStatus {
    pub fn name(&self) -> &'static str {
        match self {
            CompactionStatus::NotRun => "NOT_RUN",
            CompactionStatus::Running => "RUNNING",
            CompactionStatus::Success => "SUCCESS",
            CompactionStatus::Error(_) => "ERROR",
        }
    }
}

/// A finished compaction: the compacted ledger and an index from original
/// positions to its entries.
#[derive(Debug)]
pub struct CompactedView {
    /// The last topic position the compaction covered.
    pub horizon: Position,
    /// The compacted ledger's name on the storage backend.
    pub ledger_name: String,
    ledger: ManagedLedger,
    /// (original position, position in the compacted ledger), in order.
    index: Vec<(Position, Position)>,
}

fn encode_entry(orig: Position, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(16 + data.len());
    b.put_u64(orig.ledger_id);
    b.put_u64(orig.entry_id);
    b.put_slice(data);
    b.freeze()
}

fn decode_entry(e: &Entry) -> Result<Entry, BrokerError> {
    if e.data.len() < 16 {
        return Err(BrokerError::Persistence(format!(
            "compacted entry {} is too short",
            e.position
        )));
    }
    let l = u64::from_be_bytes(e.data[0..8].try_into().expect("8 bytes"));
    let n = u64::from_be_bytes(e.data[8..16].try_into().expect("8 bytes"));
    Ok(Entry {
        position: Position::new(l, n),
        data: e.data.slice(16..),
    })
}

impl CompactedView {
    /// Opens a compacted ledger written earlier and indexes it.
    pub async fn open(
        backend: &dyn LedgerBackend,
        config: LedgerConfig,
        ledger_name: &str,
        horizon: Position,
    ) -> Result<CompactedView, BrokerError> {
        let ledger = ManagedLedger::open(backend, ledger_name, read_only(config)).await?;
        let mut index = Vec::new();
        let mut from = ledger.first_position();
        loop {
            let entries = ledger.read(from, READ_BATCH).await?;
            let Some(last) = entries.last() else { break };
            from = Position::new(last.position.ledger_id, last.position.entry_id + 1);
            for e in &entries {
                index.push((decode_entry(e)?.position, e.position));
            }
        }
        Ok(CompactedView {
            horizon,
            ledger_name: ledger_name.to_owned(),
            ledger,
            index,
        })
    }

    /// Kept entries.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Up to `max` compacted entries at or after original position `from`,
    /// with their original positions.
    pub async fn read_from(&self, from: Position, max: usize) -> Result<Vec<Entry>, BrokerError> {
        let i = self.index.partition_point(|(orig, _)| *orig < from);
        let Some((_, start)) = self.index.get(i) else {
            return Ok(Vec::new());
        };
        let n = max.min(self.index.len() - i);
        let raw = self.ledger.read(*start, n).await?;
        raw.iter().map(decode_entry).collect()
    }

    /// The compacted entry at original position `p`, if it was kept.
    pub async fn get(&self, p: Position) -> Result<Option<Entry>, BrokerError> {
        let mut e = self.read_from(p, 1).await?;
        Ok(e.pop().filter(|e| e.position == p))
    }

    pub async fn close(&self) {
        let _ = self.ledger.close().await;
    }
}

/// The compacted ledger is written once and never trimmed by time.
fn read_only(config: LedgerConfig) -> LedgerConfig {
    LedgerConfig {
        trim_interval: None,
        retention: strobe_ledger::Retention {
            time: None,
            size_bytes: None,
        },
        ..config
    }
}

/// Where a message sits: its entry and its index in the batch (-1: not batched).
type Slot = (Position, i32);

/// What phase one found: the latest slot of every live key, and entries
/// that must be kept whole.
#[derive(Debug, Default)]
struct Latest {
    by_key: HashMap<String, Slot>,
    whole: std::collections::HashSet<Position>,
    /// The largest uncompressed batch looked into (the broker's max message size).
    max_batch: usize,
}

impl Latest {
    fn is_latest(&self, key: &str, slot: Slot) -> bool {
        self.by_key.get(key) == Some(&slot)
    }

    fn note(&mut self, e: &Entry, aborted: &dyn Fn(&MessageMetadata) -> bool) {
        let Ok(parsed) = payload::parse(&e.data) else {
            return;
        };
        let m = &parsed.metadata;
        // Markers, and messages of aborted transactions, are never part of the compacted view.
        if m.marker_type.is_some_and(|t| t != 0) || aborted(m) {
            return;
        }
        if strobe_wire::batch::is_batch(m) {
            match strobe_wire::batch::decompressed_messages(m, &parsed.payload, self.max_batch) {
                Ok(iter) => {
                    for (i, msg) in iter.enumerate() {
                        let Ok(msg) = msg else { return };
                        let tomb =
                            msg.metadata.null_value.unwrap_or(false) || msg.payload.is_empty();
                        if let Some(k) = msg.metadata.partition_key.clone() {
                            self.set(k, (e.position, i as i32), tomb);
                        }
                    }
                }
                Err(_) => {
                    self.whole.insert(e.position);
                }
            }
        } else if let Some(k) = m.partition_key.clone() {
            let tomb = m.null_value.unwrap_or(false)
                || strobe_wire::batch::is_empty_value(m, &parsed.payload);
            self.set(k, (e.position, -1), tomb);
        }
    }

    fn set(&mut self, key: String, slot: Slot, tombstone: bool) {
        if tombstone {
            self.by_key.remove(&key);
        } else {
            self.by_key.insert(key, slot);
        }
    }

    /// The bytes to keep of entry `e` (None: nothing of it survives).
    fn kept(&self, e: &Entry) -> Option<Bytes> {
        if self.whole.contains(&e.position) {
            return Some(e.data.clone());
        }
        let parsed = payload::parse(&e.data).ok()?;
        let m = &parsed.metadata;
        if !strobe_wire::batch::is_batch(m) {
            let k = m.partition_key.as_deref()?;
            return self.is_latest(k, (e.position, -1)).then(|| e.data.clone());
        }
        let msgs: Vec<_> =
            strobe_wire::batch::decompressed_messages(m, &parsed.payload, self.max_batch)
                .ok()?
                .filter_map(Result::ok)
                .collect();
        let keep: Vec<usize> = msgs
            .iter()
            .enumerate()
            .filter(|(i, msg)| {
                msg.metadata
                    .partition_key
                    .as_deref()
                    .is_some_and(|k| self.is_latest(k, (e.position, *i as i32)))
            })
            .map(|(i, _)| i)
            .collect();
        if keep.is_empty() {
            return None;
        }
        if keep.len() == msgs.len() {
            return Some(e.data.clone());
        }
        // Re-batch with the kept messages only, in the batch's own codec.
        let body = strobe_wire::batch::encode(
            &keep
                .iter()
                .map(|i| (msgs[*i].metadata.clone(), msgs[*i].payload.as_ref()))
                .collect::<Vec<_>>(),
        );
        let meta = MessageMetadata {
            num_messages_in_batch: Some(keep.len() as i32),
            uncompressed_size: Some(body.len() as u32),
            ..m.clone()
        };
        let compressed = strobe_wire::compression::compress(m.compression(), &body, 3).ok()?;
        Some(payload::encode(&meta, &compressed, true))
    }
}

/// Runs one compaction of `ledger` up to its last visible entry (never past an open
/// transaction), merging the `previous` view, leaving out what `aborted` says is of an aborted
/// transaction. Writes the new compacted ledger `name` and returns its view.
pub async fn compact(
    ledger: &ManagedLedger,
    previous: Option<&CompactedView>,
    backend: &dyn LedgerBackend,
    config: LedgerConfig,
    name: &str,
    aborted: &(dyn Fn(&MessageMetadata) -> bool + Sync),
    max_batch: usize,
) -> Result<Option<CompactedView>, BrokerError> {
    let Some(horizon) = ledger.last_confirmed() else {
        return Ok(None);
    };
    let start = match previous {
        Some(v) => Position::new(v.horizon.ledger_id, v.horizon.entry_id + 1),
        None => Position::EARLIEST,
    };
    // Phase one.
    let mut latest = Latest {
        max_batch,
        ..Latest::default()
    };
    for_each(ledger, previous, start, horizon, |e| {
        latest.note(e, aborted);
        Ok(())
    })
    .await?;
    // Phase two.
    let out = ManagedLedger::open(backend, name, read_only(config.clone())).await?;
    let mut pending = Vec::new();
    for_each(ledger, previous, start, horizon, |e| {
        if let Some(bytes) = latest.kept(e) {
            pending.push(out.append(encode_entry(e.position, &bytes)));
        }
        Ok(())
    })
    .await?;
    for p in pending {
        p.await?;
    }
    out.close().await?;
    CompactedView::open(backend, config, name, horizon)
        .await
        .map(Some)
}

/// Every entry of the previous view, then of the topic from `start` to `end`.
async fn for_each(
    ledger: &ManagedLedger,
    previous: Option<&CompactedView>,
    start: Position,
    end: Position,
    mut f: impl FnMut(&Entry) -> Result<(), BrokerError>,
) -> Result<(), BrokerError> {
    if let Some(v) = previous {
        let mut from = Position::EARLIEST;
        loop {
            let entries = v.read_from(from, READ_BATCH).await?;
            let Some(last) = entries.last() else { break };
            from = Position::new(last.position.ledger_id, last.position.entry_id + 1);
            for e in &entries {
                f(e)?;
            }
        }
    }
    let mut from = start;
    loop {
        let entries = ledger.read(from, READ_BATCH).await?;
        let mut done = entries.is_empty();
        for e in &entries {
            if e.position > end {
                done = true;
                break;
            }
            f(e)?;
        }
        let Some(last) = entries.last() else { break };
        if done || last.position >= end {
            break;
        }
        from = Position::new(last.position.ledger_id, last.position.entry_id + 1);
    }
    Ok(())
}

/// Deletes a compacted ledger that a newer one replaced.
pub async fn drop_ledger(
    backend: &dyn LedgerBackend,
    config: LedgerConfig,
    name: &str,
) -> Result<(), BrokerError> {
    let l = ManagedLedger::open(
        backend,
        name,
        LedgerConfig {
            trim_interval: None,
            retention: strobe_ledger::Retention::default(),
            ..config
        },
    )
    .await?;
    l.rollover();
    l.trim().await?;
    l.close().await?;
    Ok(())
}

/// Shared by the topic and its subscriptions.
pub type SharedView = Arc<parking_lot::Mutex<Option<Arc<CompactedView>>>>;
