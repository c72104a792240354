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
//! (`journal`). A topic's handle (`handle`) queues its requests through
//! `flusher::enqueue`; what the threads and handles share is in `shared`.
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
mod config;
mod flusher;
mod format;
mod handle;
mod journal;
mod pacing;
mod queue;
mod recovery;
mod segment;
mod shared;
mod topic;

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;

use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::{Condvar, Mutex};

use crate::backend::{LedgerBackend, RecoveredTopic, TopicStorage};
use crate::{LedgerError, Result, SyncMode};

use checkpoint::CheckpointFile;
use queue::Queue;
use shared::{BackendShared, CheckpointState, Counters, Flusher, sync_dir};

pub use config::{FileBackendConfig, MIN_PAGE_CACHE_SHARE, MIN_PAGE_CACHE_WINDOW};

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
    /// Segment files open now, in the whole process (see
    /// [`FileBackendConfig::max_open_segment_files`]).
    pub open_segment_files: u64,
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
        out.push(EngineMetric {
            name: "strobe_storage_open_segment_files".into(),
            help: "Segment files open now (bounded by max_open_segment_files once synced)",
            kind: MetricKind::Gauge,
            value: MetricValue::Int(self.open_segment_files),
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

/// The file [`LedgerBackend`]. Dropping it stops its threads without a final
/// checkpoint (the next open recovers from the journal); [`FileBackend::close`]
/// shuts down cleanly.
#[derive(Debug)]
pub struct FileBackend {
    shared: Arc<BackendShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
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
            ckpt: Mutex::new(CheckpointState::default()),
            ckpt_cv: Condvar::new(),
            pool: Mutex::new(Vec::new()),
            next_pool_id: AtomicU64::new(0),
            counters: Counters::default(),
            _lock: lock,
            cfg,
        });
        let next_seq = recovery::recover(&shared, ckpt.journal_seq)?;
        *shared.flusher.lock() = Some(Flusher::start(shared.clone(), next_seq)?);
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
            open_segment_files: segment::open_files() as u64,
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
            tokio::task::spawn_blocking(move || handle::open_topic(&sh, &name, fence))
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
