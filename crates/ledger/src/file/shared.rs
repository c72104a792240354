//! What the file backend's threads and topic handles share: [`BackendShared`]
//! and what it holds that the working modules would otherwise import from
//! each other: the group commit's state (the [`Flusher`], which holds the
//! backend in turn, and the groups waiting for their sync), the checkpoint
//! thread's work, the counters; and the file-system helpers they all use. The
//! modules that do the work (`flusher`, `checkpoint`, `journal`, `recovery`,
//! `handle`) depend on this one; it depends on none of them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::config::{FileBackendConfig, MIN_PAGE_CACHE_SHARE};
use super::format::{self, SEGREF_LEN};
use super::queue::Queue;
use super::segment;
use super::topic::{Req, TopicMeta, TopicShared};
use crate::{LedgerError, Result};

/// Everything the backend's threads and topic handles share.
#[derive(Debug)]
pub(super) struct BackendShared {
    pub(super) cfg: FileBackendConfig,
    pub(super) journal_dir: PathBuf,
    pub(super) topics_dir: PathBuf,
    pub(super) topics: Mutex<HashMap<String, Arc<TopicShared>>>,
    /// Topics whose segments took writes lately, for the page-cache
    /// budget's share (see [`BackendShared::page_cache_keep`]).
    pub(super) writers: Mutex<Writers>,
    /// When the backend opened (the clock of `writers`).
    pub(super) started: std::time::Instant,
    pub(super) next_topic_id: AtomicU32,
    /// Durable per-topic metadata (what the next checkpoint writes).
    pub(super) meta: Mutex<BTreeMap<String, TopicMeta>>,
    pub(super) queue: Mutex<Queue>,
    pub(super) queue_cv: Condvar,
    /// The group commit's state; `None` once its thread stopped. Whoever
    /// holds this lock takes the next batch from `queue` (see `flusher::run`).
    pub(super) flusher: Mutex<Option<Flusher>>,
    /// Flusher threads (two with `sync = always`, see `flusher::run`).
    pub(super) flusher_threads: usize,
    /// Group commits written and waiting for their sync, in order.
    pub(super) written: Mutex<std::collections::VecDeque<Written>>,
    /// Held while the journal is synced for `written` groups.
    pub(super) sync_lock: Mutex<()>,
    /// Held while synced groups complete (taken before `sync_lock` is
    /// released, so completions keep the order of the writes).
    pub(super) complete_lock: Mutex<()>,
    /// Write-once chunks synced by `flusher::commit::commit_round` whose journal
    /// references the next group commit writes.
    pub(super) synced_refs: Mutex<Vec<SyncedRef>>,
    pub(super) ckpt: Mutex<CheckpointState>,
    pub(super) ckpt_cv: Condvar,
    /// Spare journal files, ready to be renamed into use.
    pub(super) pool: Mutex<Vec<PathBuf>>,
    pub(super) next_pool_id: AtomicU64,
    pub(super) counters: Counters,
    pub(super) _lock: File,
}

impl BackendShared {
    /// Notes that some of topic `id`'s segment bytes went to the disk, and
    /// returns how many of its newest bytes stay in the page cache: the
    /// window, or the budget's
    /// share of each topic that wrote to the disk in the last
    /// [`WRITER_SECS`] where that is smaller (see
    /// [`FileBackendConfig::page_cache_budget`]); 0: all. Open topics that
    /// take no writes do not shrink the share of those that do.
    pub(super) fn page_cache_keep(&self, id: u32) -> u64 {
        let (window, budget) = (self.cfg.page_cache_window, self.cfg.page_cache_budget);
        if window == 0 || budget == 0 {
            return window;
        }
        let writing = self
            .writers
            .lock()
            .saw(id, self.started.elapsed().as_secs()) as u64;
        window.min((budget / writing.max(1)).max(MIN_PAGE_CACHE_SHARE)) & !(segment::PAGE - 1)
    }

    pub(super) fn topic_dir(&self, name: &str) -> PathBuf {
        self.topics_dir.join(escape(name))
    }

    pub(super) fn take_pool_file(&self) -> Option<PathBuf> {
        self.pool.lock().pop()
    }

    pub(super) fn topic_meta_entry(&self, name: &str, f: impl FnOnce(&mut TopicMeta)) {
        let mut m = self.meta.lock();
        f(m.entry(name.to_string()).or_default());
    }
}

impl crate::batch::HeldWake for BackendShared {
    /// The wake-up an append batch held back: the flusher threads are
    /// woken if they all sleep and something is queued.
    fn wake_held(&self) {
        let q = self.queue.lock();
        if q.waiting == self.flusher_threads && !q.reqs.is_empty() {
            self.queue_cv.notify_one();
        }
    }
}

/// What the backend's threads count; [`FileBackendStats`](super::FileBackendStats) is read
/// from it.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) batches: AtomicU64,
    /// Journal fdatasyncs (count, by duration and their sum).
    pub(super) syncs: crate::LatencyBuckets<crate::JournalSyncBounds>,
    pub(super) entries: AtomicU64,
    pub(super) journal_bytes: AtomicU64,
    pub(super) checkpoints: AtomicU64,
    pub(super) direct_entries: AtomicU64,
    pub(super) direct_bytes: AtomicU64,
    pub(super) segment_syncs: AtomicU64,
    pub(super) page_cache_dropped_bytes: AtomicU64,
}

/// A topic counts towards the page-cache budget's shares this long after
/// its last write to the disk.
const WRITER_SECS: u64 = 10;

/// The topics that wrote to their segments lately, by topic id: the second
/// (since the backend opened) of each one's last write-out.
#[derive(Debug, Default)]
pub(super) struct Writers {
    last: HashMap<u32, u64>,
    pruned_at: u64,
}

impl Writers {
    /// Notes a write-out of topic `id` at second `now`; how many topics
    /// wrote within the last [`WRITER_SECS`].
    fn saw(&mut self, id: u32, now: u64) -> usize {
        self.last.insert(id, now);
        if now > self.pruned_at {
            self.pruned_at = now;
            self.last.retain(|_, t| now - *t < WRITER_SECS);
        }
        self.last.len()
    }
}

pub(super) fn sync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| LedgerError::io("fsync directory", path, e))
}

/// A topic name as a directory name: bytes outside `[A-Za-z0-9._-]` as `%XX`.
fn escape(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-' {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    if s.starts_with('.') {
        s.replace_range(..1, "%2E");
    }
    s
}

/// Creates a topic directory durably.
pub fn ensure_dir(sh: &BackendShared, dir: &Path) -> Result<()> {
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| LedgerError::io("create directory", dir, e))?;
        sync_dir(&sh.topics_dir)?;
    }
    Ok(())
}

/// Starts the segment write-outs queued for this thread.
pub(super) fn start_writebacks(sh: &BackendShared) {
    let queued = std::mem::take(&mut sh.ckpt.lock().writeback);
    for wb in &queued {
        start_counted(sh, wb);
    }
}

/// Starts a write-out or drops pages from the page cache, counting the
/// bytes dropped.
pub(super) fn start_counted(sh: &BackendShared, wb: &segment::Writeback) {
    wb.start();
    sh.counters
        .page_cache_dropped_bytes
        .fetch_add(wb.dropped_bytes(), Ordering::Relaxed);
}

/// Work handed from the flusher to the checkpoint thread.
#[derive(Debug, Default)]
pub struct CheckpointState {
    pub upto: u64,
    pub topics: Vec<Arc<TopicShared>>,
    pub requested: bool,
    pub shutdown: bool,
    /// Files of trimmed ledgers, deleted here rather than on the flusher:
    /// unlinking a large segment takes tens of milliseconds, which would
    /// stall every producer's group commit. The trim is already durable
    /// (journal record, then checkpoint), and an open after a crash deletes
    /// ledgers below the trim point, so a later unlink loses nothing.
    pub trash: Vec<PathBuf>,
    /// Segment ranges whose write-out to the disk should start.
    pub writeback: Vec<segment::Writeback>,
    /// Segment files to sync and then close (over the descriptor budget).
    pub sync_close: Vec<SyncClose>,
    /// The thread is working (not waiting for work).
    pub busy: bool,
}

/// A segment file written while more than
/// [`FileBackendConfig::max_open_segment_files`] were open: the checkpoint
/// thread syncs it and closes it, rather than leaving it open and dirty
/// until the next checkpoint (under load, every topic's file would be).
#[derive(Debug)]
pub struct SyncClose {
    pub topic: Arc<TopicShared>,
    pub ledger: u64,
    pub file: Arc<File>,
    pub path: PathBuf,
    /// Bytes in the file when it was queued (what its sync covers).
    pub written: u64,
}

impl CheckpointState {
    /// Work queued or under way.
    pub fn active(&self) -> bool {
        self.busy
            || self.requested
            || !self.trash.is_empty()
            || !self.writeback.is_empty()
            || !self.sync_close.is_empty()
    }
}

/// A group commit written to the journal (`sync = always`) and waiting for
/// the fdatasync that makes it durable: see `flusher::commit::commit_round`.
#[derive(Debug)]
pub struct Written {
    pub(super) reqs: Vec<Req>,
    pub(super) results: Vec<Result<()>>,
    /// The journal file to sync first (`None`: nothing in this group needs
    /// a sync, e.g. write-once references within their window).
    pub(super) journal: Option<(u64, Arc<File>, PathBuf)>,
    /// Trimmed segments, deleted once the trim is durable.
    pub(super) trash: Vec<PathBuf>,
    /// Write-once chunks whose segments are synced before the group
    /// completes (pipelined write-once path, see [`Flusher::write_direct`]).
    pub(super) direct: Vec<DirectSync>,
}

/// A write-once chunk written to its segment and waiting for the segment's
/// fdatasync: in `flusher::commit::commit_round` (pipelined; its journal reference is
/// written only after that sync, by the next group commit), or right away
/// in [`Flusher::write_direct`] (serial, zero reference window).
#[derive(Debug)]
pub struct DirectSync {
    pub(super) topic: Arc<TopicShared>,
    pub(super) ledger: u64,
    pub(super) file: Arc<File>,
    pub(super) path: PathBuf,
    /// The segment's length after the chunk.
    pub(super) end: u64,
    /// The segment file is new: its directory is synced too.
    pub(super) new_file: bool,
    pub(super) entries: u64,
    pub(super) bytes: u64,
    /// The journal reference, written once the bytes are synced.
    pub(super) segref: [u8; SEGREF_LEN],
    /// The chunk's requests (indices into the group's), failed if the sync fails.
    pub(super) reqs: Vec<usize>,
}

/// The outcome of a [`DirectSync`], handed back to the flusher: the journal
/// reference to write (`None`: the sync failed and the topic refuses service).
#[derive(Debug)]
pub struct SyncedRef {
    pub(super) topic: Arc<TopicShared>,
    pub(super) segref: Option<[u8; SEGREF_LEN]>,
}

/// The group commit's state; the work is in `flusher`. Defined beside
/// [`BackendShared`], which holds it, because it holds the backend in turn.
pub struct Flusher {
    pub(super) sh: Arc<BackendShared>,
    pub(super) jf: JournalFile,
    pub(super) declared: HashSet<u32>,
    pub(super) dirty: HashMap<u32, Arc<TopicShared>>,
    pub(super) last_sync: Instant,
    pub(super) last_rotate: Instant,
    /// The next journal file could not be opened for want of descriptors: the current one
    /// grows, and the next try waits until then (see `Flusher::rotate`).
    pub(super) roll_retry_at: Option<Instant>,
    /// Journal bytes in files rotated out since the last checkpoint request.
    pub(super) ckpt_bytes: u64,
    pub(super) last_ckpt: Instant,
    pub(super) unsynced: bool,
    /// The journal holds write-once references not yet synced, the oldest
    /// written at this instant (see [`super::FileBackendConfig::reference_sync_window`]).
    pub(super) refs_unsynced: Option<Instant>,
    /// The group commit's journal records.
    pub(super) buf: Vec<u8>,
    /// `buf` holds records that must be durable before their requests
    /// complete (entries, cursors, trims), not only references.
    pub(super) buf_needs_sync: bool,
    /// One write-once chunk's record headers (reused).
    pub(super) hdrs: Vec<[u8; format::HEADER + format::SEG_FIXED]>,
    /// One write-once chunk's framed records (reused).
    pub(super) recs: Vec<FramedRecord>,
    /// Scratch maps of [`Flusher::plan`], reused.
    pub(super) chunk_index: HashMap<(u32, u64), usize>,
    pub(super) chunks_per_topic: HashMap<u32, u32>,
    /// Pipelined write-once chunks per topic whose references are not yet
    /// in the journal (their segment sync may still be running).
    pub(super) inflight: HashMap<u32, u32>,
    /// References of synced write-once chunks, written first in the next
    /// group commit's journal records.
    pub(super) refs_out: Vec<(Arc<TopicShared>, [u8; SEGREF_LEN])>,
    /// Segments (topic, ledger) whose write-behind buffer filled up in this
    /// group commit (`sync = always`): written by the flusher thread after
    /// the group's sync, outside the flusher's lock (see `flusher::flush_segments`).
    pub(super) deferred: Vec<(Arc<TopicShared>, u64)>,
}

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher")
            .field("journal", &self.jf.path)
            .field("offset", &self.jf.offset)
            .finish_non_exhaustive()
    }
}

/// One framed segment record of a write-once chunk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FramedRecord {
    /// Where its record starts among the chunk's bytes.
    pub(crate) offset: u64,
    /// The record's length, framing included.
    pub(crate) len: u64,
    /// The entry's append time (ms).
    pub(crate) ts: u64,
    /// The entry's data length.
    pub(crate) data_len: u64,
}

/// The journal file the flusher writes (`journal` opens it).
pub struct JournalFile {
    pub seq: u64,
    pub path: PathBuf,
    pub file: Arc<File>,
    pub offset: u64,
}

#[cfg(test)]
mod tests {
    use super::{WRITER_SECS, Writers};

    #[test]
    fn topics_that_stopped_writing_leave_the_budget_shares() {
        let mut w = Writers::default();
        assert_eq!(w.saw(1, 0), 1);
        assert_eq!(w.saw(2, 0), 2);
        assert_eq!(w.saw(1, 0), 2, "a topic counts once");
        assert_eq!(w.saw(3, WRITER_SECS - 1), 3);
        // Topic 2 last wrote WRITER_SECS ago; 1 and 3 write on.
        assert_eq!(w.saw(1, WRITER_SECS), 2);
        assert_eq!(w.saw(3, 3 * WRITER_SECS), 1, "only the one writing now");
    }
}
