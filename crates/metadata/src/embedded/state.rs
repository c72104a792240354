//! The embedded store's state: the keys and their versions, the leases, the
//! watch history, and the open files that make it durable. Apart from the
//! store because `disk`, which the store uses, builds it at recovery and
//! writes it out in snapshots.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{MetadataError, Result};
use crate::store::{LeaseId, Revision, Stat, WatchEvent};

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) value: Vec<u8>,
    pub(super) created: u64,
    pub(super) modified: u64,
    pub(super) lease: Option<LeaseId>,
}

impl Entry {
    pub(super) fn stat(&self) -> Stat {
        Stat {
            version: self.modified,
            created: self.created,
            lease: self.lease,
        }
    }
}

#[derive(Debug)]
pub(super) struct LeaseState {
    pub(super) ttl: Duration,
    pub(super) deadline: Instant,
    pub(super) keys: BTreeSet<String>,
}

#[derive(Debug)]
pub(super) struct HistItem {
    pub(super) revision: Revision,
    pub(super) events: Vec<WatchEvent>,
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) rev: Revision,
    pub(super) data: BTreeMap<String, Entry>,
    pub(super) leases: HashMap<LeaseId, LeaseState>,
    pub(super) next_lease: LeaseId,
    pub(super) history: VecDeque<Arc<HistItem>>,
    /// Revisions up to this one are not in `history` any more.
    pub(super) compacted: Revision,
    pub(super) disk: Option<Disk>,
    /// Set after a failed write: the log may end in a partial record, so no further write is safe.
    pub(super) failed: Option<String>,
    pub(super) closed: bool,
}

impl State {
    pub(super) fn empty(disk: Option<Disk>) -> State {
        State {
            rev: 0,
            data: BTreeMap::new(),
            leases: HashMap::new(),
            next_lease: 1,
            history: VecDeque::new(),
            compacted: 0,
            disk,
            failed: None,
            closed: false,
        }
    }

    pub(super) fn usable(&self) -> Result<()> {
        if self.closed {
            return Err(MetadataError::Closed);
        }
        if let Some(why) = &self.failed {
            return Err(MetadataError::Backend(format!(
                "store failed earlier: {why}"
            )));
        }
        Ok(())
    }
}

/// The open write-ahead log, and the directory lock held while it is open.
#[derive(Debug)]
pub(super) struct Disk {
    pub(super) dir: PathBuf,
    pub(super) wal: File,
    /// Where the log's records end (the space after it is zero-filled or an earlier
    /// generation's records, see `disk::append`).
    pub(super) len: u64,
    /// The space allocated for the log.
    pub(super) cap: u64,
    pub(super) wal_records: usize,
    pub(super) _lock: File,
}
