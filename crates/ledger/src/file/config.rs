//! The file backend's settings, and the least its page-cache settings may be.

use std::path::PathBuf;
use std::time::Duration;

use super::segment;
use crate::SyncMode;

/// Settings of the [`FileBackend`](super::FileBackend).
#[derive(Debug, Clone)]
pub struct FileBackendConfig {
    /// The data directory.
    pub dir: PathBuf,
    /// When an append counts as durable.
    pub sync: SyncMode,
    /// Size of one journal file; a full file triggers a checkpoint.
    pub journal_file_bytes: u64,
    /// Zero-fill spare journal files ahead of use (and recycle used ones).
    pub preallocate: bool,
    /// Spare journal files kept ready.
    pub journal_pool: usize,
    /// At most this many bytes of entries per group commit.
    pub max_batch_bytes: usize,
    /// Checkpoint at least this often while there are writes.
    pub checkpoint_interval: Duration,
    /// A checkpoint fdatasyncs every segment written since the previous one,
    /// so it waits until the journal behind it holds this many bytes per
    /// such topic (and at least one full journal file). Larger values mean
    /// fewer fsyncs with many busy topics, and more journal to keep and to
    /// replay after a crash (at most `checkpoint_interval` of it).
    pub checkpoint_bytes_per_topic: u64,
    /// Write-once threshold (`sync = always` only): when one topic's entries
    /// in one group commit add up to at least this many bytes, they are
    /// written once, straight to the topic's segment, which is fdatasync'd
    /// before the journal records a small reference to them. Smaller groups
    /// go through the journal (one fsync for every topic). `0` turns
    /// write-once off.
    pub direct_write_bytes: usize,
    /// How long the journal may hold write-once references unsynced. A
    /// write-once group's entries are fdatasync'd in their segment before
    /// their appends resolve; the reference (what lets recovery tell synced
    /// bytes gone bad from a torn write) is written to the journal by the
    /// next group commit and made durable by the next journal fsync that is
    /// due anyway, when the flusher goes idle, or at the latest after this
    /// window. So one fsync per write-once group commit, not two. Until then
    /// a `kill -9` or a power loss loses nothing (the entries are synced in
    /// their segment, and recovery keeps intact records past what the
    /// journal and the checkpoint account for); only damage to those newest synced
    /// bytes coinciding with a power loss would be cut as a torn tail instead
    /// of refused. `Duration::ZERO` syncs every reference before the appends
    /// resolve (two fsyncs per write-once group commit).
    pub reference_sync_window: Duration,
    /// With `sync = always`, a group commit starts its journal fdatasync no
    /// sooner than this after the previous one started: a flusher thread
    /// that finds appends queued that soon waits out the rest first, and
    /// takes what queued meanwhile too. Appends arriving after a pause are
    /// written at once, and under load (syncs longer than this) it never
    /// waits. Without it, appends arriving one by one and evenly (a producer
    /// with batching off at a fixed rate) get a sync of about one entry each,
    /// thousands a second. On a VM each sync costs the host CPU time (VM
    /// exits to submit and complete the write and the cache flush), and a VM
    /// held to a CPU quota then stalls its flushes; fewer syncs stop that.
    /// It costs an append that arrives just after a sync started at most
    /// this much extra latency, so the default is `Duration::ZERO`: a host
    /// that stalls raises the interval through `max_sync_interval` (150 us
    /// on the first stall, doubling per stall), and a quiet one keeps the
    /// disk's own latency (docs/storage.md has the measurements).
    pub min_sync_interval: Duration,
    /// How far stalls may raise the interval between journal syncs: a
    /// journal fdatasync of a small group commit that takes 5 ms or more
    /// doubles it, up to this; after 2 s without one it steps back down by
    /// a quarter, to `min_sync_interval` at the lowest. On a quiet host the
    /// short minimum gives the lower latency, on one that runs short of CPU
    /// time for the VM fewer syncs stop the stalls (docs/storage.md has the
    /// figures; default 600 us). At or below `min_sync_interval` the
    /// interval is fixed.
    pub max_sync_interval: Duration,
    /// How many of the newest bytes of each segment stay in the page cache
    /// once they are on the disk; older pages are dropped
    /// (`POSIX_FADV_DONTNEED`), and a sealed segment's all go at the
    /// checkpoint that indexes it. A consumer at the tail reads from the page
    /// cache, one further behind from the disk. Without it a broker fills
    /// all free memory with page cache, which on a VM that reports free
    /// pages to its host costs a host page fault per new page (figures in
    /// docs/storage.md). 0 leaves it to the kernel; otherwise
    /// at least [`MIN_PAGE_CACHE_WINDOW`]. Default 64 MiB. See also
    /// [`FileBackendConfig::page_cache_budget`].
    pub page_cache_window: u64,
    /// How many bytes of all topics' segments together stay in the page
    /// cache (with a window on): each topic that writes to the disk keeps the
    /// smaller of `page_cache_window` and its share of the budget (shared by
    /// the topics that wrote in the last 10 s), but at least
    /// [`MIN_PAGE_CACHE_SHARE`]. Without it 1,000 topics would keep up to
    /// 64 GiB: in effect no window, and every page they write a new one,
    /// which costs the kernel a copy into a fresh page. 0: no budget. Default
    /// 256 MiB.
    pub page_cache_budget: u64,
    /// How many segment files may stay open in the process (0: no limit).
    /// Over it, a segment file is closed after each use once every byte
    /// written to it is synced (a checkpoint syncs the rest, then closes
    /// them), and opened again when next needed; so the descriptors a broker
    /// holds do not grow with its topics. Default 1,000.
    pub max_open_segment_files: usize,
}

/// The least a topic keeps in the page cache under
/// [`FileBackendConfig::page_cache_budget`]: four write-out steps, so what
/// is dropped has been on its way to the disk for a while (the pages of a
/// write-out still running cannot be dropped).
pub const MIN_PAGE_CACHE_SHARE: u64 = 4 * segment::WRITEBACK_STEP;

/// The smallest non-zero [`FileBackendConfig::page_cache_window`]: twice the
/// stretch behind a segment's end that reads serve on the caller's thread,
/// expecting the page cache.
pub const MIN_PAGE_CACHE_WINDOW: u64 = 16 << 20;

impl FileBackendConfig {
    pub fn new(dir: impl Into<PathBuf>) -> FileBackendConfig {
        FileBackendConfig {
            dir: dir.into(),
            sync: SyncMode::Always,
            journal_file_bytes: 64 << 20,
            preallocate: true,
            journal_pool: 2,
            max_batch_bytes: 1 << 20,
            checkpoint_interval: Duration::from_secs(30),
            checkpoint_bytes_per_topic: 256 << 10,
            direct_write_bytes: 256 << 10,
            reference_sync_window: Duration::from_millis(50),
            min_sync_interval: Duration::ZERO,
            max_sync_interval: Duration::from_micros(600),
            page_cache_window: 64 << 20,
            page_cache_budget: 256 << 20,
            max_open_segment_files: 1000,
        }
    }
}
