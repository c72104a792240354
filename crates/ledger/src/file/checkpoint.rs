//! Checkpoints (`checkpoint.json`), journal recycling and recovery.

use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::flusher::{K_CURSOR, K_CURSOR_DELETE, K_DECLARE, K_ENTRY, K_SEGREF, K_TRIM, SEGREF_LEN};
use super::format::{self, Decoded};
use super::segment::{ScanStop, Segment};
use super::topic::{CORRUPT_MARKER, TopicShared};
use super::{Shared, sync_dir};
use crate::{LedgerError, Result};

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

#[derive(Debug, Default, Serialize, Deserialize)]
struct TopicMetaFile {
    first_kept: u64,
    ledgers: BTreeMap<u64, u64>,
    /// Hex of each snapshot.
    cursors: BTreeMap<String, String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct CheckpointFile {
    /// Replay starts at this journal file.
    pub journal_seq: u64,
    topics: BTreeMap<String, TopicMetaFile>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl CheckpointFile {
    pub fn read(dir: &Path) -> Result<CheckpointFile> {
        let path = dir.join("checkpoint.json");
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| LedgerError::Corrupt {
                topic: "*".into(),
                path,
                offset: e.column() as u64,
                reason: format!("unreadable checkpoint: {e}"),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CheckpointFile::default()),
            Err(e) => Err(LedgerError::io("read", path, e)),
        }
    }

    pub fn topic_meta(&self) -> Result<BTreeMap<String, TopicMeta>> {
        self.topics
            .iter()
            .map(|(name, t)| {
                let cursors = t
                    .cursors
                    .iter()
                    .map(|(c, h)| {
                        unhex(h)
                            .map(|b| (c.clone(), Bytes::from(b)))
                            .ok_or_else(|| LedgerError::Corrupt {
                                topic: name.clone(),
                                path: "checkpoint.json".into(),
                                offset: 0,
                                reason: format!("bad snapshot of cursor {c}"),
                            })
                    })
                    .collect::<Result<_>>()?;
                Ok((
                    name.clone(),
                    TopicMeta {
                        first_kept: t.first_kept,
                        ledgers: t.ledgers.clone(),
                        cursors,
                    },
                ))
            })
            .collect()
    }

    fn write(dir: &Path, journal_seq: u64, meta: &BTreeMap<String, TopicMeta>) -> Result<()> {
        let file = CheckpointFile {
            journal_seq,
            topics: meta
                .iter()
                .map(|(n, m)| {
                    (
                        n.clone(),
                        TopicMetaFile {
                            first_kept: m.first_kept,
                            ledgers: m.ledgers.clone(),
                            cursors: m.cursors.iter().map(|(c, b)| (c.clone(), hex(b))).collect(),
                        },
                    )
                })
                .collect(),
        };
        let body = serde_json::to_vec(&file).expect("checkpoint serializes");
        let tmp = dir.join("checkpoint.json.tmp");
        let path = dir.join("checkpoint.json");
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| LedgerError::io("create", &tmp, e))?;
        f.write_all(&body)
            .and_then(|_| f.sync_all())
            .map_err(|e| LedgerError::io("write", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| LedgerError::io("rename", &tmp, e))?;
        sync_dir(dir)
    }
}

/// Work handed from the flusher to the checkpoint thread.
#[derive(Debug, Default)]
pub struct Pending {
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
    pub writeback: Vec<super::segment::Writeback>,
    /// The thread is working (not waiting for work).
    pub busy: bool,
}

impl Pending {
    /// Work queued or under way.
    pub fn active(&self) -> bool {
        self.busy || self.requested || !self.trash.is_empty() || !self.writeback.is_empty()
    }
}

/// Trimmed segments are freed in steps of this many bytes (the file is
/// shrunk, then removed once small), ...
const DELETE_STEP: u64 = 8 << 20;
/// ... at most this fast. On a file system mounted with `discard` every
/// freed extent becomes a discard request to the device, and the group
/// commits' fdatasyncs queue behind them: deleting 3 GiB in 8 MiB steps 1 ms
/// apart took 1.6 s and raised a concurrent 1 KiB write + fdatasync loop's
/// p99 from 0.54 to 1.93 ms; at 512 MiB/s (steps 16 ms apart) it took 7 s
/// and the p99 stayed at 0.25 ms (0.23 before).
const DELETE_BYTES_PER_SEC: f64 = (512u64 << 20) as f64;
/// Unless more than this many files wait: deleting must keep up with a producer
/// that writes faster than the pace (the disk would fill up), so a backlog
/// this long (16 segments and their indexes: 4 GiB of default ledgers) is
/// deleted without pauses.
const DELETE_BACKLOG_FILES: usize = 32;

/// The checkpoint thread: segment write-outs first, then checkpoints, and
/// in between the paced deletion of trimmed segments.
pub fn run(sh: Arc<Shared>) {
    prepare_pool(&sh);
    // When the next deletion step may run.
    let mut delete_at = std::time::Instant::now();
    loop {
        let (upto, topics, shutdown) = {
            let mut p = sh.ckpt.lock();
            loop {
                if p.requested || p.shutdown || !p.writeback.is_empty() {
                    break;
                }
                if p.trash.is_empty() {
                    p.busy = false;
                    sh.ckpt_cv.wait(&mut p);
                } else if p.trash.len() > DELETE_BACKLOG_FILES
                    || std::time::Instant::now() >= delete_at
                {
                    break;
                } else {
                    sh.ckpt_cv.wait_until(&mut p, delete_at);
                }
            }
            p.busy = true;
            if !p.writeback.is_empty() {
                drop(p);
                start_writebacks(&sh);
                continue;
            }
            if !p.requested && !p.shutdown {
                // A deletion step is due.
                let path = p.trash.remove(0);
                drop(p);
                let (freed, done) = delete_step(&path);
                if !done {
                    sh.ckpt.lock().trash.insert(0, path);
                }
                delete_at = std::time::Instant::now()
                    + std::time::Duration::from_secs_f64(freed as f64 / DELETE_BYTES_PER_SEC);
                continue;
            }
            let job = p.requested;
            p.requested = false;
            let out = (p.upto, std::mem::take(&mut p.topics), p.shutdown);
            if !job {
                drop(p);
                delete_all_trash(&sh);
                return;
            }
            out
        };
        let t0 = std::time::Instant::now();
        match checkpoint(&sh, upto, &topics) {
            Ok(cost) => {
                sh.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    journal_seq = upto,
                    topics = topics.len(),
                    ms = t0.elapsed().as_millis() as u64,
                    segments = cost.segments,
                    unsynced_kib = cost.unsynced_bytes >> 10,
                    writeout_ms = cost.writeout_us / 1000,
                    sync_ms = cost.sync_us / 1000,
                    max_locked_ms = cost.max_locked_ms,
                    file_ms = cost.file_ms,
                    "checkpoint written"
                );
            }
            Err(e) => {
                tracing::error!(error = %e, "checkpoint failed; the journal is kept");
                sh.ckpt.lock().topics.extend(topics);
            }
        }
        if shutdown {
            delete_all_trash(&sh);
            return;
        }
        prepare_pool(&sh);
    }
}

/// One step of deleting a trimmed file: shrinks it by [`DELETE_STEP`], or
/// removes it once that is all it holds. Returns the bytes freed and
/// whether the file is gone.
fn delete_step(p: &Path) -> (u64, bool) {
    if let Ok(f) = OpenOptions::new().write(true).open(p)
        && let Ok(m) = f.metadata()
        && m.len() > DELETE_STEP
        && f.set_len(m.len() - DELETE_STEP).is_ok()
    {
        return (DELETE_STEP, false);
    }
    let len = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    if let Err(e) = std::fs::remove_file(p)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %p.display(), error = %e, "cannot delete a trimmed segment");
    }
    (len, true)
}

/// Shutting down: nothing is left to disturb, so every trimmed file is
/// deleted at once.
fn delete_all_trash(sh: &Shared) {
    let trash = std::mem::take(&mut sh.ckpt.lock().trash);
    for p in &trash {
        while !delete_step(p).1 {}
    }
}

/// Starts the segment write-outs queued for this thread.
fn start_writebacks(sh: &Shared) {
    let queued = std::mem::take(&mut sh.ckpt.lock().writeback);
    for wb in &queued {
        start_counted(sh, wb);
    }
}

/// Starts a write-out or drops pages from the page cache, counting the
/// bytes dropped.
fn start_counted(sh: &Shared, wb: &super::segment::Writeback) {
    wb.start();
    sh.counters
        .page_cache_dropped_bytes
        .fetch_add(wb.dropped_bytes(), Ordering::Relaxed);
}

struct SyncWork {
    ledger: u64,
    file: Arc<std::fs::File>,
    path: PathBuf,
    /// The unsynced bytes: `from..len`.
    from: u64,
    len: u64,
    entries: u64,
    new_file: bool,
}

/// Where a checkpoint's time went (logged at debug level with it).
#[derive(Debug, Default)]
struct CheckpointCost {
    /// Segments fdatasync'd, and the bytes they had not synced before.
    segments: usize,
    unsynced_bytes: u64,
    /// Writing the unsynced bytes out (paced, without the pauses).
    writeout_us: u64,
    /// The fdatasyncs, issued together.
    sync_us: u64,
    /// The longest a topic's files lock was held (appends of that topic wait).
    max_locked_ms: u64,
    /// Writing, syncing and renaming `checkpoint.json`.
    file_ms: u64,
}

/// At most this many fdatasyncs of a checkpoint run at once (see
/// [`sync_together`]).
const SYNC_THREADS: usize = 16;

/// A file a checkpoint makes durable.
struct ToSync {
    /// Index of its topic in the checkpoint's plan.
    topic: usize,
    what: SyncTarget,
}

enum SyncTarget {
    /// A segment: fdatasync.
    Segment(Arc<std::fs::File>, PathBuf),
    /// A topic directory with new segments in it: fsync.
    Dir(PathBuf),
}

/// Makes `files` durable with the calls issued together from up to
/// [`SYNC_THREADS`] threads; the outcome per file.
///
/// One at a time, each fdatasync of a segment whose size grew is a commit of
/// the file system's journal and a device cache flush: 100 topics' segments
/// took 100 of them (43-82 ms of disk time, paced over 130-190 ms), and the
/// group commits' fdatasyncs queued behind one of them at a time for 5% of the
/// run. Issued together, the calls wait for the same journal commit and
/// their flushes are merged (3-8 ms for the same 100 segments); their data
/// was written out (paced) beforehand, so none of them waits on a burst.
/// This departs on purpose from the group commit's rule of one sync in flight
/// (`flusher::commit_round`): there a second concurrent flush slows both
/// in every round, here one short burst replaces a hundred serial commits.
/// A directory is opened by the thread that syncs it, so at most
/// [`SYNC_THREADS`] extra descriptors are open at a time.
fn sync_together(files: &[ToSync]) -> Vec<Result<()>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let out: Vec<parking_lot::Mutex<Result<()>>> = files
        .iter()
        .map(|_| parking_lot::Mutex::new(Ok(())))
        .collect();
    // Nothing in here panics (a panic would end the checkpoint thread).
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(f) = files.get(i) else {
                return;
            };
            *out[i].lock() = match &f.what {
                SyncTarget::Segment(file, path) => file
                    .sync_data()
                    .map_err(|e| LedgerError::io("fdatasync", path, e)),
                SyncTarget::Dir(path) => sync_dir(path),
            };
        }
    };
    std::thread::scope(|s| {
        for _ in 1..files.len().min(SYNC_THREADS) {
            // Fewer threads (down to this one) if the system refuses some.
            if std::thread::Builder::new()
                .name("strobe-ledger-sync".into())
                .spawn_scoped(s, work)
                .is_err()
            {
                break;
            }
        }
        work();
    });
    out.into_iter().map(|r| r.into_inner()).collect()
}

/// A topic whose segment bytes failed to reach the disk refuses service from
/// now on (as after a failed write-once sync), and checkpoints fail while it
/// is so: the journal, which still holds its entries, is kept for the
/// recovery after a restart.
fn refuse_service(t: &TopicShared, e: LedgerError) -> LedgerError {
    t.files.lock().refuse_service(&t.name, &e);
    e
}

fn checkpoint(sh: &Shared, upto: u64, topics: &[Arc<TopicShared>]) -> Result<CheckpointCost> {
    let mut cost = CheckpointCost::default();
    let mut seen = std::collections::HashSet::new();
    // Per topic: the segments to sync, and those the write-once path already synced.
    let mut planned = Vec::new();
    for t in topics {
        if !seen.insert(t.id) {
            continue;
        }
        // Segments with unsynced bytes are synced here; those the write-once
        // path already synced only need their entry counts recorded.
        let (work, already): (Vec<SyncWork>, Vec<(u64, u64)>) = {
            let mut f = t.files.lock();
            if let Some(e) = &f.corrupt {
                return Err(e.clone());
            }
            let locked = std::time::Instant::now();
            for seg in f.ledgers.values_mut() {
                if !seg.pending.is_empty() {
                    seg.flush_pending()?;
                    seg.restagger_flush();
                }
            }
            let mut work = Vec::new();
            let mut already = Vec::new();
            for (&id, s) in &f.ledgers {
                if s.synced_len < s.len || s.new_file {
                    cost.unsynced_bytes += s.len.saturating_sub(s.synced_len);
                    work.push(SyncWork {
                        ledger: id,
                        file: s.file.clone(),
                        path: s.path.clone(),
                        from: s.synced_len.min(s.len),
                        len: s.len,
                        entries: s.offsets.len() as u64,
                        new_file: s.new_file,
                    });
                } else {
                    already.push((id, s.offsets.len() as u64));
                }
            }
            cost.max_locked_ms = cost.max_locked_ms.max(locked.elapsed().as_millis() as u64);
            (work, already)
        };
        // The bytes go to the disk first, one segment at a time (most of
        // them are there already: see `Segment::take_writeback`), paced to
        // leave the disk to the journal's group commits at least half of
        // the time; write-outs queued meanwhile start between steps.
        for w in work.iter().filter(|w| w.len > w.from) {
            let t0 = std::time::Instant::now();
            super::segment::write_out_and_wait(&w.file, w.from, w.len - w.from)
                .map_err(|e| refuse_service(t, LedgerError::io("write out", &w.path, e)))?;
            cost.writeout_us += t0.elapsed().as_micros() as u64;
            if !sh.ckpt.lock().shutdown {
                std::thread::sleep(t0.elapsed());
                start_writebacks(sh);
            }
        }
        planned.push((t, work, already));
    }
    // Then every segment (and the directory of every new one) is synced at once.
    let mut files = Vec::new();
    for (i, (t, work, _)) in planned.iter().enumerate() {
        for w in work {
            files.push(ToSync {
                topic: i,
                what: SyncTarget::Segment(w.file.clone(), w.path.clone()),
            });
        }
        if work.iter().any(|w| w.new_file) {
            files.push(ToSync {
                topic: i,
                what: SyncTarget::Dir(t.dir.clone()),
            });
        }
    }
    let t0 = std::time::Instant::now();
    let results = sync_together(&files);
    cost.sync_us = t0.elapsed().as_micros() as u64;
    cost.segments = files
        .iter()
        .filter(|f| matches!(f.what, SyncTarget::Segment(..)))
        .count();
    let mut failed = None;
    for (f, r) in files.iter().zip(results) {
        if let Err(e) = r {
            let e = refuse_service(planned[f.topic].0, e);
            failed.get_or_insert(e);
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let mut uncache = Vec::new();
    for (t, work, already) in planned {
        {
            let mut f = t.files.lock();
            // A failed sync of the flusher's since the collection: whatever
            // this checkpoint's fdatasync said, those bytes are suspect.
            if let Some(e) = &f.corrupt {
                return Err(e.clone());
            }
            let locked = std::time::Instant::now();
            for w in &work {
                if let Some(seg) = f.ledgers.get_mut(&w.ledger) {
                    seg.synced_len = seg.synced_len.max(w.len);
                    if w.new_file {
                        seg.new_file = false;
                    }
                }
            }
            // Sealed (not the newest) and fully synced: index it, and let
            // its pages leave the page cache (off the topic's lock).
            let newest = f.ledgers.keys().next_back().copied();
            for (&id, seg) in f.ledgers.iter_mut() {
                if Some(id) != newest && seg.synced_len == seg.len && !seg.indexed {
                    seg.write_index(&seg.path.with_extension("idx"))?;
                    seg.indexed = true;
                    uncache.extend(seg.take_cache_drop_sealed(sh.cfg.page_cache_window));
                }
            }
            cost.max_locked_ms = cost.max_locked_ms.max(locked.elapsed().as_millis() as u64);
        }
        for wb in uncache.drain(..) {
            start_counted(sh, &wb);
        }
        sh.topic_meta_entry(&t.name, |m| {
            let counts = work.iter().map(|w| (w.ledger, w.entries)).chain(already);
            for (ledger, entries) in counts {
                if ledger >= m.first_kept {
                    let e = m.ledgers.entry(ledger).or_default();
                    *e = (*e).max(entries);
                }
            }
        });
    }
    let meta = sh.meta.lock().clone();
    let t0 = std::time::Instant::now();
    CheckpointFile::write(&sh.cfg.dir, upto, &meta)?;
    cost.file_ms = t0.elapsed().as_millis() as u64;
    recycle_below(sh, upto);
    Ok(cost)
}

fn parse_journal_name(name: &str) -> Option<u64> {
    name.strip_prefix('J')?.strip_suffix(".wal")?.parse().ok()
}

/// Journal files `(seq, path)` in order, and spare files.
type JournalListing = (Vec<(u64, PathBuf)>, Vec<PathBuf>);

fn list_journal(sh: &Shared) -> Result<JournalListing> {
    let mut js = Vec::new();
    let mut pool = Vec::new();
    let rd = std::fs::read_dir(&sh.journal_dir)
        .map_err(|e| LedgerError::io("list", &sh.journal_dir, e))?;
    for e in rd {
        let e = e.map_err(|e| LedgerError::io("list", &sh.journal_dir, e))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(seq) = parse_journal_name(name) {
            js.push((seq, e.path()));
        } else if name.starts_with("pool-") && name.ends_with(".wal") {
            pool.push(e.path());
        } else if name.ends_with(".tmp") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    js.sort();
    Ok((js, pool))
}

/// Journal files before `upto` are covered by a checkpoint: keep some as
/// spares (their stale records fail the CRC seeded with the new sequence
/// number), delete the rest.
fn recycle_below(sh: &Shared, upto: u64) {
    let Ok((js, _)) = list_journal(sh) else {
        return;
    };
    let old: Vec<_> = js.into_iter().filter(|(s, _)| *s < upto).collect();
    // Keep as many spares as a checkpoint frees (a checkpoint may cover
    // several files), so the files that follow are preallocated too.
    let spares = sh.cfg.journal_pool.max(old.len()).min(16);
    for (seq, path) in old {
        let keep = sh.cfg.preallocate && sh.pool.lock().len() < spares;
        if keep {
            let n = sh.next_pool_id.fetch_add(1, Ordering::Relaxed);
            let spare = sh.journal_dir.join(format!("pool-{n}.wal"));
            if std::fs::rename(&path, &spare).is_ok() {
                sh.pool.lock().push(spare);
                continue;
            }
        }
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(seq, error = %e, "cannot remove an old journal file");
        }
    }
}

/// Zero-fills spare journal files so that appends overwrite allocated blocks
/// and fdatasync has no size or extent metadata to write.
fn prepare_pool(sh: &Shared) {
    if !sh.cfg.preallocate {
        return;
    }
    while sh.pool.lock().len() < sh.cfg.journal_pool {
        if sh.ckpt.lock().shutdown {
            return;
        }
        let t0 = std::time::Instant::now();
        match zero_filled_file(sh, true) {
            Ok(path) => {
                tracing::debug!(
                    ms = t0.elapsed().as_millis() as u64,
                    "journal file preallocated"
                );
                sh.pool.lock().push(path)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot preallocate a journal file");
                return;
            }
        }
    }
}

/// Writes one zero-filled, synced spare journal file; `paced` while group
/// commits may be running (see below), at full speed before they start.
pub fn zero_filled_file(sh: &Shared, paced: bool) -> Result<PathBuf> {
    let n = sh.next_pool_id.fetch_add(1, Ordering::Relaxed);
    let tmp = sh.journal_dir.join(format!("pool-{n}.tmp"));
    let path = sh.journal_dir.join(format!("pool-{n}.wal"));
    let r = (|| -> std::io::Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        // Paced: 1 MiB at a time, written out and waited for, then as long
        // again without writing, so the zero-fill takes at most half of the
        // disk's time. Written at once and then synced, it is one 64 MiB
        // burst (55-64 ms at startup here) that a concurrent group commit's
        // fdatasync would queue behind.
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < sh.cfg.journal_file_bytes {
            let t0 = std::time::Instant::now();
            let n = zeros.len().min((sh.cfg.journal_file_bytes - at) as usize);
            f.write_all_at(&zeros[..n], at)?;
            at += n as u64;
            if paced && !sh.ckpt.lock().shutdown {
                super::segment::write_out_and_wait(&f, at - n as u64, n as u64)?;
                std::thread::sleep(t0.elapsed());
                // Segment write-outs queued meanwhile are this thread's
                // too: they must not wait for the whole file.
                start_writebacks(sh);
            }
        }
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    r.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        LedgerError::io("preallocate", &tmp, e)
    })?;
    Ok(path)
}

/// What the journal since the checkpoint says as a whole, gathered before
/// the replay.
#[derive(Debug, Default)]
struct JournalFacts {
    /// (topic, ledger) -> entries `0..n` of the segment were synced there by
    /// the write-once path (the end of its last reference).
    referenced: HashMap<(String, u64), u64>,
    /// Each topic's trim point at the end of the journal.
    first_kept: HashMap<String, u64>,
}

/// A segment being checked against the journal during recovery.
struct Repair {
    dir: PathBuf,
    path: PathBuf,
    /// `None` when the file is missing (then `corrupt` says why).
    seg: Option<Segment>,
    /// Where the scan stopped short of the file's end; cut once the journal
    /// shows the stop is past everything synced.
    stop: Option<ScanStop>,
    /// No journal record applied to it yet.
    fresh: bool,
    corrupt: Option<String>,
    created: bool,
    touched: bool,
}

/// The valid records of journal file `seq`, in order, up to a torn tail.
fn journal_records(data: &[u8], seq: u64) -> impl Iterator<Item = &[u8]> {
    let seed = format::journal_seed(seq);
    let mut at = 0usize;
    std::iter::from_fn(move || match format::decode(&data[at..], seed) {
        Decoded::Record(body, n) => {
            at += n;
            Some(body)
        }
        _ => None,
    })
}

/// Replays the journal from `start_seq`, repairs segments, writes a fresh
/// checkpoint and returns the sequence number of the next journal file.
pub fn recover(sh: &Shared, start_seq: u64) -> Result<u64> {
    let (js, pool) = list_journal(sh)?;
    let max_pool = pool
        .iter()
        .filter_map(|p| {
            p.file_name()?
                .to_str()?
                .strip_prefix("pool-")?
                .strip_suffix(".wal")?
                .parse::<u64>()
                .ok()
        })
        .max();
    sh.next_pool_id
        .store(max_pool.map_or(0, |m| m + 1), Ordering::Relaxed);
    *sh.pool.lock() = pool;
    let files: Vec<&(u64, PathBuf)> = js.iter().filter(|(s, _)| *s >= start_seq).collect();
    let read = |path: &PathBuf| std::fs::read(path).map_err(|e| LedgerError::io("read", path, e));

    // Pass 1: what segments must already hold (write-once references) and
    // which ledgers end up trimmed. Files are read twice rather than all
    // held in memory.
    let mut facts = JournalFacts::default();
    for (seq, path) in &files {
        let data = read(path)?;
        let mut names: HashMap<u32, String> = HashMap::new();
        for body in journal_records(&data, *seq) {
            if body.len() < 5 {
                continue;
            }
            let tid = format::u32_at(body, 1);
            if body[0] == K_DECLARE {
                names.insert(tid, String::from_utf8_lossy(&body[5..]).into_owned());
                continue;
            }
            let Some(name) = names.get(&tid) else {
                continue;
            };
            match body[0] {
                K_SEGREF if body.len() >= SEGREF_LEN => {
                    let ledger = format::u64_at(body, 5);
                    let end = format::u64_at(body, 13) + format::u64_at(body, 21);
                    let e = facts.referenced.entry((name.clone(), ledger)).or_default();
                    *e = (*e).max(end);
                }
                K_TRIM if body.len() >= 13 => {
                    let e = facts.first_kept.entry(name.clone()).or_default();
                    *e = (*e).max(format::u64_at(body, 5));
                }
                _ => {}
            }
        }
    }

    // Pass 2: replay.
    let mut repairs: HashMap<(String, u64), Repair> = HashMap::new();
    let mut next_seq = start_seq;
    let mut replayed = 0u64;
    for (seq, path) in &files {
        let data = read(path)?;
        let mut names: HashMap<u32, String> = HashMap::new();
        for body in journal_records(&data, *seq) {
            replayed += 1;
            replay_record(sh, &facts, body, &mut names, &mut repairs)?;
        }
        next_seq = seq + 1;
    }
    let mut meta = sh.meta.lock();
    for ((name, ledger), r) in repairs {
        let seg = match (r.corrupt, r.seg) {
            (None, Some(seg)) => seg,
            (reason, _) => {
                let reason = reason.unwrap_or_else(|| "missing segment file".into());
                tracing::error!(topic = %name, path = %r.path.display(), %reason, "segment cannot be repaired");
                let marker = r.dir.join(CORRUPT_MARKER);
                let msg = format!("{}: {reason}\n", r.path.display());
                std::fs::write(&marker, msg).map_err(|e| LedgerError::io("write", &marker, e))?;
                sync_dir(&r.dir)?;
                continue;
            }
        };
        if r.touched || r.created {
            seg.file
                .sync_data()
                .map_err(|e| LedgerError::io("fdatasync", &seg.path, e))?;
        }
        if r.created {
            sync_dir(&r.dir)?;
        }
        // After a restart every stored ledger is sealed: index it.
        seg.write_index(&super::segment::idx_path(&r.dir, ledger))?;
        let m = meta.entry(name).or_default();
        if ledger >= m.first_kept {
            m.ledgers.insert(ledger, seg.offsets.len() as u64);
        }
    }
    let snapshot = meta.clone();
    drop(meta);
    if replayed > 0 {
        tracing::info!(records = replayed, "journal replayed");
    }
    CheckpointFile::write(&sh.cfg.dir, next_seq, &snapshot)?;
    recycle_below(sh, next_seq);
    Ok(next_seq)
}

/// The repair state of a segment, opened (or created) on first use; `None`
/// if the ledger is trimmed by the end of the journal or the segment is
/// already known to be corrupt.
fn repair_for<'a>(
    sh: &Shared,
    facts: &JournalFacts,
    repairs: &'a mut HashMap<(String, u64), Repair>,
    name: &str,
    ledger: u64,
) -> Result<Option<&'a mut Repair>> {
    let (first_kept, checkpointed) = {
        let meta = sh.meta.lock();
        let m = meta.get(name);
        (
            m.map_or(0, |m| m.first_kept),
            m.and_then(|m| m.ledgers.get(&ledger).copied()).unwrap_or(0),
        )
    };
    let first_kept = first_kept.max(facts.first_kept.get(name).copied().unwrap_or(0));
    if ledger < first_kept {
        // Deleted by a trim the journal records; the open removes its files.
        return Ok(None);
    }
    let key = (name.to_string(), ledger);
    if !repairs.contains_key(&key) {
        let dir = sh.topic_dir(name);
        std::fs::create_dir_all(&dir).map_err(|e| LedgerError::io("create directory", &dir, e))?;
        let path = super::segment::seg_path(&dir, ledger);
        // Entries 0..need were synced in the segment itself (by a checkpoint
        // or the write-once path): the journal cannot restore them.
        let need = checkpointed.max(facts.referenced.get(&key).copied().unwrap_or(0));
        let mut r = Repair {
            dir,
            path,
            seg: None,
            stop: None,
            fresh: true,
            corrupt: None,
            created: false,
            touched: false,
        };
        if r.path.exists() {
            let (seg, stop) = Segment::open(&r.dir, ledger)?;
            let n = seg.offsets.len() as u64;
            if n < need {
                let at = stop.as_ref().map_or(String::new(), |s| {
                    format!(" (damaged at byte {}: {})", s.offset, s.reason)
                });
                r.corrupt = Some(format!(
                    "holds entries 0..{n}{at} but entries 0..{need} were synced there"
                ));
            }
            r.seg = Some(seg);
            r.stop = stop;
        } else if need > 0 {
            r.corrupt = Some(format!(
                "missing segment file (entries 0..{need} were synced there)"
            ));
        } else {
            r.seg = Some(Segment::create(&r.dir, ledger)?);
            r.created = true;
        }
        repairs.insert(key.clone(), r);
    }
    let r = repairs.get_mut(&key).expect("inserted");
    Ok(if r.corrupt.is_some() { None } else { Some(r) })
}

impl Repair {
    /// Cuts a torn tail once it is known to lie past every synced entry.
    fn cut_torn_tail(&mut self) -> Result<()> {
        if self.stop.take().is_some() {
            let seg = self.seg.as_mut().expect("not corrupt");
            let valid = seg.len;
            seg.truncate(valid)?;
            self.touched = true;
        }
        Ok(())
    }
}

fn replay_record(
    sh: &Shared,
    facts: &JournalFacts,
    body: &[u8],
    names: &mut HashMap<u32, String>,
    repairs: &mut HashMap<(String, u64), Repair>,
) -> Result<()> {
    if body.len() < 5 {
        return Ok(());
    }
    let kind = body[0];
    let tid = format::u32_at(body, 1);
    if kind == K_DECLARE {
        names.insert(tid, String::from_utf8_lossy(&body[5..]).into_owned());
        return Ok(());
    }
    let Some(name) = names.get(&tid).cloned() else {
        tracing::warn!(tid, "journal record for an undeclared topic");
        return Ok(());
    };
    match kind {
        K_ENTRY if body.len() >= 29 => {
            let ledger = format::u64_at(body, 5);
            let entry = format::u64_at(body, 13);
            let ts = format::u64_at(body, 21);
            let Some(r) = repair_for(sh, facts, repairs, &name, ledger)? else {
                return Ok(());
            };
            let n = r.seg.as_ref().expect("not corrupt").offsets.len() as u64;
            if entry > n {
                r.corrupt = Some(if r.fresh {
                    let at = r.stop.as_ref().map_or(String::new(), |s| {
                        format!(" (damaged at byte {}: {})", s.offset, s.reason)
                    });
                    format!(
                        "holds entries 0..{n}{at} but the journal resumes at entry {entry}: synced data is missing"
                    )
                } else {
                    format!("journal skips from entry {n} to {entry}")
                });
                return Ok(());
            }
            r.fresh = false;
            r.cut_torn_tail()?;
            if entry < n {
                return Ok(());
            }
            let data = &body[29..];
            let mut rec = Vec::with_capacity(data.len() + 24);
            format::put_segment_record(&mut rec, entry, ts, data, crc32c::crc32c(data));
            let seg = r.seg.as_mut().expect("not corrupt");
            let base = seg.len;
            seg.append(&rec, 0)?;
            seg.push(base, ts, data.len() as u64, rec.len() as u64);
            r.touched = true;
        }
        K_SEGREF if body.len() >= SEGREF_LEN => {
            let ledger = format::u64_at(body, 5);
            let first = format::u64_at(body, 13);
            let count = format::u64_at(body, 21);
            let offset = format::u64_at(body, 29);
            let len = format::u64_at(body, 37);
            let Some(r) = repair_for(sh, facts, repairs, &name, ledger)? else {
                return Ok(());
            };
            // The referenced entries were synced before this record was
            // written, and `repair_for` checked that the valid prefix holds
            // them: whatever follows the prefix is a torn tail.
            r.fresh = false;
            r.cut_torn_tail()?;
            let seg = r.seg.as_ref().expect("not corrupt");
            let n = seg.offsets.len() as u64;
            let end = first.saturating_add(count);
            let placed = (count > 0 && end <= n).then(|| {
                (
                    seg.offsets[first as usize],
                    seg.record_end(end as usize - 1),
                )
            });
            if placed != Some((offset, offset + len)) {
                let held = match placed {
                    Some((a, b)) => format!("at bytes {a}..{b}"),
                    None => format!("only entries 0..{n}"),
                };
                r.corrupt = Some(format!(
                    "the journal references entries {first}..{end} synced at bytes {offset}..{}, but the segment holds {held}",
                    offset + len
                ));
            }
        }
        K_CURSOR | K_CURSOR_DELETE if body.len() >= 7 => {
            let nlen = u16::from_le_bytes([body[5], body[6]]) as usize;
            if body.len() < 7 + nlen {
                return Ok(());
            }
            let cname = String::from_utf8_lossy(&body[7..7 + nlen]).into_owned();
            let snap = Bytes::copy_from_slice(&body[7 + nlen..]);
            sh.topic_meta_entry(&name, |m| {
                if kind == K_CURSOR {
                    m.cursors.insert(cname, snap);
                } else {
                    m.cursors.remove(&cname);
                }
            });
        }
        K_TRIM if body.len() >= 13 => {
            let first_kept = format::u64_at(body, 5);
            sh.topic_meta_entry(&name, |m| {
                m.first_kept = m.first_kept.max(first_kept);
                m.ledgers.retain(|&l, _| l >= first_kept);
            });
        }
        _ => tracing::warn!(kind, "unknown journal record"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_together_reports_each_outcome_in_order() {
        assert!(sync_together(&[]).is_empty());
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for i in 0..40 {
            let path = dir.path().join(format!("s{i}"));
            let f = std::fs::File::create(&path).unwrap();
            f.write_all_at(b"entry", 0).unwrap();
            files.push(ToSync {
                topic: i,
                what: SyncTarget::Segment(Arc::new(f), path),
            });
        }
        files.push(ToSync {
            topic: 40,
            what: SyncTarget::Dir(dir.path().to_path_buf()),
        });
        // A directory that is gone: its outcome is an error naming it, the
        // others still succeed.
        let gone = dir.path().join("gone");
        files.insert(
            7,
            ToSync {
                topic: 99,
                what: SyncTarget::Dir(gone.clone()),
            },
        );
        let out = sync_together(&files);
        assert_eq!(out.len(), files.len());
        for (i, r) in out.iter().enumerate() {
            if i == 7 {
                let e = r.as_ref().unwrap_err().to_string();
                assert!(e.contains("gone"), "{e}");
            } else {
                assert!(r.is_ok(), "{i}: {r:?}");
            }
        }
    }
}
