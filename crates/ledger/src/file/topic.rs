//! One topic's state: its segment files in memory, its durable metadata
//! (what checkpoints record), and the requests it queues for the group
//! commit. Opening a topic and its storage handle are in `handle`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::segment::Segment;
use crate::backend::AppendCallback;
use crate::{LedgerError, Result};

#[derive(Debug)]
pub struct TopicShared {
    pub id: u32,
    pub name: String,
    pub dir: PathBuf,
    pub files: Mutex<TopicFiles>,
}

#[derive(Debug, Default)]
pub struct TopicFiles {
    pub loaded: bool,
    pub open: bool,
    /// Boxed: a map node holds eleven values, and a segment is a few hundred
    /// bytes, so a topic's one segment cost a 2.5 KiB node (issue 47).
    pub ledgers: BTreeMap<u64, Box<Segment>>,
    /// Set once stored data failed a check: the topic refuses service.
    pub corrupt: Option<LedgerError>,
    /// Greater than every ledger id used in this process.
    pub next_ledger_hint: u64,
    /// The highest fencing token the topic was opened with. In memory: the
    /// directory's lock already makes this process the only writer, so the
    /// token orders the opens within it.
    pub fence: u64,
}

impl TopicFiles {
    /// A segment's bytes failed to reach the disk (a failed write-out or
    /// fdatasync): the page cache may hold bytes that never get there, so
    /// topic `name` refuses service from now on. The first failure is kept
    /// and logged.
    pub fn refuse_service(&mut self, name: &str, e: &LedgerError) {
        if self.corrupt.is_none() {
            tracing::error!(topic = %name, error = %e, "segment bytes failed to reach the disk; the topic refuses service");
            self.corrupt = Some(e.clone());
        }
    }
}

/// A request for the group commit, queued by a topic's storage.
pub enum Req {
    Entry {
        topic: Arc<TopicShared>,
        ledger: u64,
        entry: u64,
        ts: u64,
        data: Bytes,
        /// CRC-32C of `data` (the records' CRCs are derived from it).
        crc: u32,
        done: AppendCallback,
    },
    Cursor {
        topic: Arc<TopicShared>,
        name: String,
        snapshot: Option<Bytes>,
        done: oneshot::Sender<Result<()>>,
    },
    Trim {
        topic: Arc<TopicShared>,
        first_kept: u64,
        ids: Vec<u64>,
        done: oneshot::Sender<Result<()>>,
    },
    Barrier {
        done: oneshot::Sender<Result<()>>,
    },
}

impl std::fmt::Debug for Req {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Req::Entry { ledger, entry, .. } => write!(f, "Entry({ledger}:{entry})"),
            Req::Cursor { name, .. } => write!(f, "Cursor({name})"),
            Req::Trim { first_kept, .. } => write!(f, "Trim({first_kept})"),
            Req::Barrier { .. } => f.write_str("Barrier"),
        }
    }
}

impl Req {
    pub fn size(&self) -> usize {
        match self {
            Req::Entry { data, .. } => data.len() + 64,
            Req::Cursor { snapshot, .. } => snapshot.as_ref().map_or(0, |s| s.len()) + 64,
            _ => 64,
        }
    }
    pub fn fail(self, e: LedgerError) {
        self.complete(Err(e));
    }
    pub(super) fn complete(self, r: Result<()>) {
        match self {
            Req::Entry { done, .. } => done(r),
            Req::Cursor { done, .. } | Req::Trim { done, .. } | Req::Barrier { done } => {
                let _ = done.send(r);
            }
        }
    }
    pub(super) fn topic(&self) -> Option<&Arc<TopicShared>> {
        match self {
            Req::Entry { topic, .. } | Req::Cursor { topic, .. } | Req::Trim { topic, .. } => {
                Some(topic)
            }
            Req::Barrier { .. } => None,
        }
    }
}

/// A topic's durable metadata (Pulsar's `ManagedLedgerInfo` plus cursor positions).
#[derive(Debug, Clone, Default)]
pub struct TopicMeta {
    /// Every ledger below this id is deleted.
    pub first_kept: u64,
    /// Synced ledgers and their entry counts.
    pub ledgers: BTreeMap<u64, u64>,
    /// Cursor snapshots (opaque bytes from the ledger layer).
    pub cursors: BTreeMap<String, Bytes>,
}

/// Recovery writes this file (saying why) into the directory of a topic whose
/// segment it cannot repair; the topic refuses service while it is there.
pub const CORRUPT_MARKER: &str = "CORRUPT";
