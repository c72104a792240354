//! The file backend (the default): a broker-wide journal with group commit,
//! plus per-topic segment files with an index. `docs/storage.md` has the
//! whole design, the lock order and the measurements behind each choice.
//!
//! # Layout under `dir`
//!
//! ```text
//! LOCK                         held (flock) while a backend has the directory open
//! checkpoint.json              journal start + per-topic metadata (Pulsar's ManagedLedgerInfo:
//!                              ledgers with entry counts, first kept ledger, cursor snapshots)
//! journal/J<seq>.wal           the write-ahead journal, one file at a time
//! journal/pool-<n>.wal         preallocated (zero-filled or recycled) journal files
//! topics/<escaped name>/L<ledger>.seg   one segment per ledger: the entries
//! topics/<escaped name>/L<ledger>.idx   its index (entry offsets), once sealed and synced
//! ```
//!
//! Every record, in the journal and in segments, is `[len u32][CRC-32C u32][body]`;
//! each record's CRC is derived from the entry's, which the appender computed
//! once ([`crate::crc::combine`]), so the flusher does not read the bytes again.
//!
//! # Write path
//!
//! `append` only queues (`queue`). The flusher (`flusher`) takes what is
//! queued from every topic and writes it as one group commit: small groups
//! go into the journal with one `pwrite` and one `fdatasync` for all topics
//! (then into their segments through write-behind buffers, which the journal
//! covers until a checkpoint syncs them); a topic's large group is written
//! once, straight to its segment, synced, and referenced from the journal
//! (the reference never reaches the disk before the bytes it points at).
//! With `sync = always` two flusher threads pipeline: one writes the next
//! group while the other waits on the disk; syncs never overlap. An append
//! completes only after the fsync that makes it durable, in queue order.
//! Appends issued together ([`crate::append_batch`]) wake the group commit once.
//! Journal syncs are paced (`pacing`) and journal files preallocated
//! (`journal`).
//!
//! The checkpoint thread (`checkpoint`) writes out and syncs the segments
//! touched since the previous checkpoint (one fdatasync per touched segment,
//! not per flush), records every segment's synced entry count, writes the
//! index of sealed segments and `checkpoint.json`, recycles the journal files
//! it covers, keeps each segment's page-cache footprint bounded, and deletes
//! trimmed ledgers' files at a bounded rate.
//!
//! # Sync modes ([`SyncMode`])
//!
//! * `always` (default): an append resolves after the fdatasync covering it.
//! * `interval(ms)`: resolves after the write to the OS; the journal is
//!   fdatasync'd at least every `ms`. A power loss may lose that window.
//! * `never`: no fdatasync on the append path (checkpoints still sync).
//!
//! # Recovery (after `kill -9` or power loss)
//!
//! Opening the backend replays the journal from the checkpoint on, up to the
//! first torn record (`recovery`). A segment whose valid records fall short
//! of what was synced there makes its topic refuse service with
//! [`LedgerError::Corrupt`] naming the file; a damaged tail past everything
//! synced is a write the crash cut short and is truncated.

mod checkpoint;
mod flusher;
mod format;
mod journal;
mod pacing;
mod queue;
mod recovery;
mod segment;
mod topic;

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::{Condvar, Mutex};

use crate::backend::{LedgerBackend, RecoveredTopic, TopicStorage};
use crate::{LedgerError, Result, SyncMode};

use checkpoint::{CheckpointFile, TopicMeta};
use queue::Queue;
use topic::Req;
use topic::TopicShared;

/// Settings of the [`FileBackend`].
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
}

/// The least a topic keeps in the page cache under
/// [`FileBackendConfig::page_cache_budget`]: four write-out steps, so what
/// is dropped has been on its way to the disk for a while (the pages of a
/// write-out still running cannot be dropped).
pub const MIN_PAGE_CACHE_SHARE: u64 = 4 * segment::WRITEBACK_STEP;

/// A topic counts towards the page-cache budget's shares this long after
/// its last write to the disk.
const WRITER_SECS: u64 = 10;

/// The topics that wrote to their segments lately, by topic id: the second
/// (since the backend opened) of each one's last write-out.
#[derive(Debug, Default)]
struct Writers {
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
        }
    }
}

/// Counters of the journal, for benchmarks and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileBackendStats {
    /// Group commits written.
    pub batches: u64,
    /// fdatasync calls on the journal.
    pub syncs: u64,
    /// Entries written.
    pub entries: u64,
    /// Journal bytes written.
    pub journal_bytes: u64,
    /// Checkpoints completed.
    pub checkpoints: u64,
    /// Entries written once, straight to their segment (see
    /// [`FileBackendConfig::direct_write_bytes`]); included in `entries`.
    pub direct_entries: u64,
    /// Bytes of segment records written that way.
    pub direct_bytes: u64,
    /// fdatasync calls on segments in the group commit (write-once path).
    pub segment_syncs: u64,
    /// Segment bytes whose pages were dropped from the page cache (see
    /// [`FileBackendConfig::page_cache_window`]).
    pub page_cache_dropped_bytes: u64,
    /// The interval now kept between journal syncs (`sync = always`, see
    /// [`FileBackendConfig::max_sync_interval`]), in microseconds.
    pub sync_interval_us: u64,
    /// How many times a stalled journal sync raised that interval.
    pub sync_interval_raises: u64,
    /// Journal fdatasyncs by duration, in the buckets of
    /// [`JournalSyncBounds`](crate::JournalSyncBounds) (the last: above them).
    pub journal_sync_buckets: [u64; JOURNAL_SYNC_BUCKETS],
    /// Their total duration, in microseconds.
    pub journal_sync_micros: u64,
}

impl FileBackendStats {
    /// These figures as the metrics page shows them (Pulsar has no such
    /// family: its BookKeeper bookies export their journal's figures
    /// themselves). They tell how many entries one fsync covers (`entries /
    /// journal_fsyncs`), how much goes straight to segments, and what
    /// checkpoints cost.
    pub fn metrics(&self) -> Vec<crate::EngineMetric> {
        use crate::{EngineMetric, MetricKind, MetricValue};
        let mut out = vec![
            EngineMetric::counter(
                "strobe_storage_group_commits_total",
                "Group commits written to the journal",
                self.batches,
            ),
            EngineMetric::counter(
                "strobe_storage_journal_fsyncs_total",
                "fdatasync calls on the journal",
                self.syncs,
            ),
            EngineMetric::counter(
                "strobe_storage_entries_written_total",
                "Entries written, through the journal or once, straight to their segment",
                self.entries,
            ),
            EngineMetric::counter(
                "strobe_storage_journal_bytes_total",
                "Bytes written to the journal",
                self.journal_bytes,
            ),
            EngineMetric::counter(
                "strobe_storage_write_once_entries_total",
                "Entries of large group commits written once, straight to their segment",
                self.direct_entries,
            ),
            EngineMetric::counter(
                "strobe_storage_write_once_bytes_total",
                "Segment bytes written that way",
                self.direct_bytes,
            ),
            EngineMetric::counter(
                "strobe_storage_segment_fsyncs_total",
                "fdatasync calls on segments for write-once group commits",
                self.segment_syncs,
            ),
            EngineMetric::counter(
                "strobe_storage_checkpoints_total",
                "Checkpoints completed (segments synced, journal files recycled)",
                self.checkpoints,
            ),
            EngineMetric::counter(
                "strobe_storage_page_cache_dropped_bytes_total",
                "Segment bytes dropped from the page cache behind the page-cache window",
                self.page_cache_dropped_bytes,
            ),
            EngineMetric::counter(
                "strobe_storage_sync_interval_raises_total",
                "Times a stalled journal fdatasync raised the interval kept between syncs",
                self.sync_interval_raises,
            ),
        ];
        for (name, v) in self.named_journal_sync_buckets("strobe_storage_journal_fsync_latency") {
            out.push(EngineMetric::counter(
                name,
                "Journal fdatasyncs whose duration fell in this bucket (ms)",
                v,
            ));
        }
        out.push(EngineMetric {
            name: "strobe_storage_journal_fsync_latency_sum".into(),
            help: "Total duration of the journal fdatasyncs (ms)",
            kind: MetricKind::Counter,
            value: MetricValue::Float(self.journal_sync_micros as f64 / 1000.0),
        });
        out.push(EngineMetric {
            name: "strobe_storage_sync_interval_us".into(),
            help: "Interval now kept between journal fdatasyncs (sync = always)",
            kind: MetricKind::Gauge,
            value: MetricValue::Int(self.sync_interval_us),
        });
        out
    }

    /// [`Self::journal_sync_buckets`] with their metric names,
    /// `{prefix}_le_0_1` .. `{prefix}_le_100` and `{prefix}_overflow`.
    pub fn named_journal_sync_buckets(&self, prefix: &str) -> Vec<(String, u64)> {
        crate::LatencyBuckets::<crate::JournalSyncBounds>::bucket_names(prefix)
            .into_iter()
            .zip(self.journal_sync_buckets)
            .collect()
    }
}

/// Buckets of [`FileBackendStats::journal_sync_buckets`].
pub const JOURNAL_SYNC_BUCKETS: usize = 11;
const _: () = assert!(
    JOURNAL_SYNC_BUCKETS == <crate::JournalSyncBounds as crate::LatencyBounds>::MS.len() + 1
);

#[derive(Debug, Default)]
struct Counters {
    batches: AtomicU64,
    /// Journal fdatasyncs (count, by duration and their sum).
    syncs: crate::LatencyBuckets<crate::JournalSyncBounds>,
    entries: AtomicU64,
    journal_bytes: AtomicU64,
    checkpoints: AtomicU64,
    direct_entries: AtomicU64,
    direct_bytes: AtomicU64,
    segment_syncs: AtomicU64,
    page_cache_dropped_bytes: AtomicU64,
}

#[derive(Debug)]
struct BackendShared {
    cfg: FileBackendConfig,
    journal_dir: PathBuf,
    topics_dir: PathBuf,
    topics: Mutex<HashMap<String, Arc<TopicShared>>>,
    /// Topics whose segments took writes lately, for the page-cache
    /// budget's share (see [`BackendShared::page_cache_keep`]).
    writers: Mutex<Writers>,
    /// When the backend opened (the clock of `writers`).
    started: std::time::Instant,
    next_topic_id: AtomicU32,
    /// Durable per-topic metadata (what the next checkpoint writes).
    meta: Mutex<BTreeMap<String, TopicMeta>>,
    queue: Mutex<Queue>,
    queue_cv: Condvar,
    /// The group commit's state; `None` once its thread stopped. Whoever
    /// holds this lock takes the next batch from `queue` (see [`flusher::run`]).
    flusher: Mutex<Option<flusher::Flusher>>,
    /// Flusher threads (two with `sync = always`, see [`flusher::run`]).
    flusher_threads: usize,
    /// Group commits written and waiting for their sync, in order.
    written: Mutex<std::collections::VecDeque<flusher::Written>>,
    /// Held while the journal is synced for `written` groups.
    sync_lock: Mutex<()>,
    /// Held while synced groups complete (taken before `sync_lock` is
    /// released, so completions keep the order of the writes).
    complete_lock: Mutex<()>,
    /// Write-once chunks synced by `flusher::commit_round` whose journal
    /// references the next group commit writes.
    synced_refs: Mutex<Vec<flusher::SyncedRef>>,
    ckpt: Mutex<checkpoint::CheckpointState>,
    ckpt_cv: Condvar,
    /// Spare journal files, ready to be renamed into use.
    pool: Mutex<Vec<PathBuf>>,
    next_pool_id: AtomicU64,
    counters: Counters,
    _lock: File,
}

/// The file [`LedgerBackend`]. Dropping it stops its threads without a final
/// checkpoint (the next open recovers from the journal); [`FileBackend::close`]
/// shuts down cleanly.
#[derive(Debug)]
pub struct FileBackend {
    shared: Arc<BackendShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn sync_dir(path: &Path) -> Result<()> {
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

impl FileBackend {
    /// Opens (creating if needed) the data directory, recovers from the
    /// journal, writes a fresh checkpoint and starts the flusher and
    /// checkpoint threads. Blocking; call it before serving or from
    /// `spawn_blocking`.
    pub fn open(cfg: FileBackendConfig) -> Result<FileBackend> {
        if cfg.journal_file_bytes < (1 << 16) {
            return Err(LedgerError::Config(
                "journal_file_bytes below 64 KiB".into(),
            ));
        }
        if cfg.page_cache_window != 0 && cfg.page_cache_window < MIN_PAGE_CACHE_WINDOW {
            return Err(LedgerError::Config(format!(
                "page_cache_window must be 0 or at least {} MiB",
                MIN_PAGE_CACHE_WINDOW >> 20
            )));
        }
        let journal_dir = cfg.dir.join("journal");
        let topics_dir = cfg.dir.join("topics");
        for d in [&cfg.dir, &journal_dir, &topics_dir] {
            std::fs::create_dir_all(d).map_err(|e| LedgerError::io("create directory", d, e))?;
        }
        let lock_path = cfg.dir.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| LedgerError::io("open", &lock_path, e))?;
        lock.try_lock().map_err(|_| LedgerError::Io {
            op: "lock",
            path: lock_path.clone(),
            message: "the data directory is in use by another backend".into(),
        })?;
        sync_dir(&cfg.dir)?;

        let ckpt = CheckpointFile::read(&cfg.dir)?;
        let shared = Arc::new(BackendShared {
            journal_dir,
            topics_dir,
            topics: Mutex::new(HashMap::new()),
            writers: Mutex::default(),
            started: std::time::Instant::now(),
            next_topic_id: AtomicU32::new(1),
            meta: Mutex::new(ckpt.topic_meta()?),
            queue: Mutex::new(Queue::new(&cfg)),
            queue_cv: Condvar::new(),
            flusher: Mutex::new(None),
            flusher_threads: if cfg.sync == SyncMode::Always { 2 } else { 1 },
            written: Mutex::new(Default::default()),
            sync_lock: Mutex::new(()),
            complete_lock: Mutex::new(()),
            synced_refs: Mutex::new(Vec::new()),
            ckpt: Mutex::new(checkpoint::CheckpointState::default()),
            ckpt_cv: Condvar::new(),
            pool: Mutex::new(Vec::new()),
            next_pool_id: AtomicU64::new(0),
            counters: Counters::default(),
            _lock: lock,
            cfg,
        });
        let next_seq = recovery::recover(&shared, ckpt.journal_seq)?;
        *shared.flusher.lock() = Some(flusher::Flusher::start(shared.clone(), next_seq)?);
        let backend = FileBackend {
            shared: shared.clone(),
            threads: Mutex::new(Vec::new()),
        };
        // The checkpoint thread comes last: `stop` joins the flushers first.
        for i in 0..shared.flusher_threads {
            let fsh = shared.clone();
            let t = std::thread::Builder::new()
                .name(format!("strobe-ledger-flusher-{i}"))
                .spawn(move || flusher::run(fsh))
                .map_err(|e| LedgerError::io("spawn", "flusher", e))?;
            backend.threads.lock().push(t);
        }
        let sh = shared.clone();
        let t = std::thread::Builder::new()
            .name("strobe-ledger-checkpoint".into())
            .spawn(move || checkpoint::run(sh))
            .map_err(|e| LedgerError::io("spawn", "checkpointer", e))?;
        backend.threads.lock().push(t);
        Ok(backend)
    }

    /// The configuration this backend runs with.
    pub fn config(&self) -> &FileBackendConfig {
        &self.shared.cfg
    }

    /// Journal counters.
    pub fn stats(&self) -> FileBackendStats {
        let c = &self.shared.counters;
        let q = self.shared.queue.lock();
        let sync_buckets: [u64; JOURNAL_SYNC_BUCKETS] =
            c.syncs.counts().try_into().unwrap_or_default();
        FileBackendStats {
            batches: c.batches.load(Ordering::Relaxed),
            // Of one reading of the buckets, so the two always agree.
            syncs: sync_buckets.iter().sum(),
            entries: c.entries.load(Ordering::Relaxed),
            journal_bytes: c.journal_bytes.load(Ordering::Relaxed),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            direct_entries: c.direct_entries.load(Ordering::Relaxed),
            direct_bytes: c.direct_bytes.load(Ordering::Relaxed),
            segment_syncs: c.segment_syncs.load(Ordering::Relaxed),
            page_cache_dropped_bytes: c.page_cache_dropped_bytes.load(Ordering::Relaxed),
            sync_interval_us: q.pacer.interval().as_micros() as u64,
            sync_interval_raises: q.pacer.raises(),
            journal_sync_buckets: sync_buckets,
            journal_sync_micros: c.syncs.sum_micros.load(Ordering::Relaxed),
        }
    }

    /// Whether the backend is working in the background: requests queued,
    /// group commits awaiting or under their sync, write-once references not
    /// yet handed to the flusher, a checkpoint, segment write-outs or deletions
    /// of trimmed ledgers under way or pending (benchmarks wait for this between phases).
    pub fn busy(&self) -> bool {
        let sh = &self.shared;
        !sh.queue.lock().reqs.is_empty()
            || !sh.written.lock().is_empty()
            || sh.sync_lock.is_locked()
            || !sh.synced_refs.lock().is_empty()
            || sh.ckpt.lock().active()
    }

    /// Bytes of entries queued and not yet written (for publish throttling).
    pub fn pending_bytes(&self) -> usize {
        self.shared.queue.lock().bytes
    }

    /// Flushes everything queued, runs a final checkpoint and stops the
    /// threads. Blocking.
    pub fn close(&self) -> Result<()> {
        self.stop(true);
        Ok(())
    }

    /// Stops the threads after the queue drains, checkpointing if `clean`.
    fn stop(&self, clean: bool) {
        {
            let mut q = self.shared.queue.lock();
            q.shutdown = true;
            q.clean = clean;
            self.shared.queue_cv.notify_all();
        }
        let mut threads: Vec<_> = self.threads.lock().drain(..).collect();
        let ckpt = threads.pop();
        for f in threads {
            let _ = f.join();
        }
        {
            let mut p = self.shared.ckpt.lock();
            p.shutdown = true;
            self.shared.ckpt_cv.notify_all();
        }
        if let Some(t) = ckpt {
            let _ = t.join();
        }
    }
}

impl Drop for FileBackend {
    fn drop(&mut self) {
        self.stop(false);
    }
}

impl LedgerBackend for FileBackend {
    fn open_topic(
        &self,
        topic: &str,
        fence: u64,
    ) -> BoxFuture<'static, Result<(Arc<dyn TopicStorage>, RecoveredTopic)>> {
        let sh = self.shared.clone();
        let name = topic.to_string();
        async move {
            tokio::task::spawn_blocking(move || topic::open_topic(&sh, &name, fence))
                .await
                .map_err(|e| LedgerError::Io {
                    op: "open topic",
                    path: PathBuf::new(),
                    message: e.to_string(),
                })?
        }
        .boxed()
    }

    fn kind(&self) -> &'static str {
        "file"
    }

    fn engine_stats(&self) -> Vec<crate::EngineMetric> {
        self.stats().metrics()
    }

    fn close(&self) -> Result<()> {
        FileBackend::close(self)
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

impl BackendShared {
    /// Notes that some of topic `id`'s segment bytes went to the disk, and
    /// returns how many of its newest bytes stay in the page cache: the
    /// window, or the budget's
    /// share of each topic that wrote to the disk in the last
    /// [`WRITER_SECS`] where that is smaller (see
    /// [`FileBackendConfig::page_cache_budget`]); 0: all. Open topics that
    /// take no writes do not shrink the share of those that do.
    fn page_cache_keep(&self, id: u32) -> u64 {
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

    fn topic_dir(&self, name: &str) -> PathBuf {
        self.topics_dir.join(escape(name))
    }

    fn enqueue(self: &Arc<Self>, req: Req) {
        let mut q = self.queue.lock();
        let err = if let Some(e) = &q.failed {
            Some(e.clone())
        } else if q.shutdown {
            Some(LedgerError::Closed("file backend".into()))
        } else {
            None
        };
        if let Some(e) = err {
            drop(q);
            req.fail(e);
            return;
        }
        let size = req.size();
        q.bytes += size;
        q.reqs.push_back(req);
        // With nothing to sync (`sync = never`) and the flusher idle, the
        // appending thread runs the group commit itself: two thread hand-offs
        // (wake the flusher, wake the appender's task) cost more than the
        // write into the page cache.
        if self.cfg.sync == SyncMode::Never
            && q.reqs.len() == 1
            && let Some(mut g) = self.flusher.try_lock()
            && let Some(f) = g.as_mut()
            && f.can_process_inline(size)
        {
            if let Some(reqs) = flusher::take_batch(self, &mut q) {
                drop(q);
                f.process(reqs);
            }
            return;
        }
        // Only when every flusher thread sleeps: a busy one comes back for
        // the queue, and `flusher::commit_round` wakes the other when
        // there is enough to overlap with its sync. Inside an
        // [`crate::append_batch`] the wake-up waits for the batch's end.
        if q.waiting == self.flusher_threads && !crate::batch::hold_wake(self) {
            self.queue_cv.notify_one();
        }
    }

    fn take_pool_file(&self) -> Option<PathBuf> {
        self.pool.lock().pop()
    }

    fn topic_meta_entry(&self, name: &str, f: impl FnOnce(&mut TopicMeta)) {
        let mut m = self.meta.lock();
        f(m.entry(name.to_string()).or_default());
    }
}

/// Starts the segment write-outs queued for this thread.
fn start_writebacks(sh: &BackendShared) {
    let queued = std::mem::take(&mut sh.ckpt.lock().writeback);
    for wb in &queued {
        start_counted(sh, wb);
    }
}

/// Starts a write-out or drops pages from the page cache, counting the
/// bytes dropped.
fn start_counted(sh: &BackendShared, wb: &segment::Writeback) {
    wb.start();
    sh.counters
        .page_cache_dropped_bytes
        .fetch_add(wb.dropped_bytes(), Ordering::Relaxed);
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
