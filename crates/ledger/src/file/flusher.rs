//! The per-backend flusher thread: group commit into the journal, then the
//! topics' segments.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::IoSlice;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::format;
use super::pacing::SyncPacer;
use super::segment::Segment;
use super::topic::{TopicFiles, TopicShared, ensure_dir};
use super::{Shared, sync_dir};
use crate::backend::AppendCallback;
use crate::{LedgerError, Result, SyncMode};

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
    fn complete(self, r: Result<()>) {
        match self {
            Req::Entry { done, .. } => done(r),
            Req::Cursor { done, .. } | Req::Trim { done, .. } | Req::Barrier { done } => {
                let _ = done.send(r);
            }
        }
    }
    fn topic(&self) -> Option<&Arc<TopicShared>> {
        match self {
            Req::Entry { topic, .. } | Req::Cursor { topic, .. } | Req::Trim { topic, .. } => {
                Some(topic)
            }
            Req::Barrier { .. } => None,
        }
    }
}

#[derive(Debug)]
pub struct Queue {
    pub reqs: VecDeque<Req>,
    pub bytes: usize,
    pub shutdown: bool,
    /// Shut down with a final checkpoint.
    pub clean: bool,
    pub failed: Option<LedgerError>,
    /// Flusher threads asleep on the condvar (appends wake one when all are).
    pub waiting: usize,
    /// The interval [`sync_pause`] keeps between journal syncs, and when
    /// the last one started.
    pub pacer: SyncPacer,
}

/// A group commit written to the journal (`sync = always`) and waiting for
/// the fdatasync that makes it durable: see [`commit_round`].
#[derive(Debug)]
pub struct Written {
    reqs: Vec<Req>,
    results: Vec<Result<()>>,
    /// The journal file to sync first (`None`: nothing in this group needs
    /// a sync, e.g. write-once references within their window).
    journal: Option<(u64, Arc<File>, PathBuf)>,
    /// Trimmed segments, deleted once the trim is durable.
    trash: Vec<PathBuf>,
    /// Write-once chunks whose segments are synced before the group
    /// completes (pipelined write-once path, see [`Flusher::write_direct`]).
    direct: Vec<DirectSync>,
}

/// A write-once chunk written to its segment and waiting for the segment's
/// fdatasync: in [`commit_round`] (pipelined; its journal reference is
/// written only after that sync, by the next group commit), or right away
/// in [`Flusher::write_direct`] (serial, zero reference window).
#[derive(Debug)]
pub struct DirectSync {
    topic: Arc<TopicShared>,
    ledger: u64,
    file: Arc<File>,
    path: PathBuf,
    /// The segment's length after the chunk.
    end: u64,
    /// The segment file is new: its directory is synced too.
    new_file: bool,
    entries: u64,
    bytes: u64,
    /// The journal reference, written once the bytes are synced.
    segref: [u8; SEGREF_LEN],
    /// The chunk's requests (indices into the group's), failed if the sync fails.
    reqs: Vec<usize>,
}

/// The outcome of a [`DirectSync`], handed back to the flusher: the journal
/// reference to write (`None`: the sync failed and the topic refuses service).
#[derive(Debug)]
pub struct SyncedRef {
    topic: Arc<TopicShared>,
    segref: Option<[u8; SEGREF_LEN]>,
}

pub struct JournalFile {
    pub seq: u64,
    pub path: PathBuf,
    pub file: Arc<File>,
    pub offset: u64,
}

pub fn journal_path(sh: &Shared, seq: u64) -> PathBuf {
    sh.journal_dir.join(format!("J{seq:016}.wal"))
}

/// Opens journal file `seq`: a spare from the pool if there is one (renamed
/// into place), else a new file. The directory is synced so the name survives.
pub fn open_journal(sh: &Shared, seq: u64) -> Result<JournalFile> {
    let path = journal_path(sh, seq);
    if let Some(spare) = sh.take_pool_file() {
        std::fs::rename(&spare, &path).map_err(|e| LedgerError::io("rename", &spare, e))?;
    } else if sh.cfg.preallocate {
        // Journal files are used faster than checkpoints recycle them and
        // the checkpoint thread zero-fills new ones.
        tracing::warn!(
            seq,
            "no preallocated journal file was ready; this one grows as it is written"
        );
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| LedgerError::io("open", &path, e))?;
    sync_dir(&sh.journal_dir)?;
    Ok(JournalFile {
        seq,
        path,
        file: Arc::new(file),
        offset: 0,
    })
}

pub struct Flusher {
    sh: Arc<Shared>,
    jf: JournalFile,
    declared: HashSet<u32>,
    dirty: HashMap<u32, Arc<TopicShared>>,
    last_sync: Instant,
    last_rotate: Instant,
    /// Journal bytes in files rotated out since the last checkpoint request.
    ckpt_bytes: u64,
    last_ckpt: Instant,
    unsynced: bool,
    /// The journal holds write-once references not yet synced, the oldest
    /// written at this instant (see [`super::FileBackendConfig::reference_sync_window`]).
    refs_unsynced: Option<Instant>,
    /// The group commit's journal records.
    buf: Vec<u8>,
    /// `buf` holds records that must be durable before their requests
    /// complete (entries, cursors, trims), not only references.
    buf_needs_sync: bool,
    /// One write-once chunk's record headers (reused).
    hdrs: Vec<[u8; format::HEADER + format::SEG_FIXED]>,
    recs: Vec<(u64, u64, u64, u64)>,
    /// Scratch maps of [`Flusher::plan`], reused.
    chunk_index: HashMap<(u32, u64), usize>,
    chunks_per_topic: HashMap<u32, u32>,
    /// Pipelined write-once chunks per topic whose references are not yet
    /// in the journal (their segment sync may still be running).
    inflight: HashMap<u32, u32>,
    /// References of synced write-once chunks, written first in the next
    /// group commit's journal records.
    refs_out: Vec<(Arc<TopicShared>, [u8; SEGREF_LEN])>,
    /// Segments (topic, ledger) whose write-behind buffer filled up in this
    /// group commit (`sync = always`): written by the flusher thread after
    /// the group's sync, outside the flusher's lock (see [`flush_segments`]).
    deferred: Vec<(Arc<TopicShared>, u64)>,
}

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher")
            .field("journal", &self.jf.path)
            .field("offset", &self.jf.offset)
            .finish_non_exhaustive()
    }
}

impl Flusher {
    pub fn start(sh: Arc<Shared>, seq: u64) -> Result<Flusher> {
        // The first journal file is preallocated too (once, at startup).
        if sh.cfg.preallocate && sh.pool.lock().is_empty() {
            let spare = super::checkpoint::zero_filled_file(&sh, false)?;
            sh.pool.lock().push(spare);
        }
        let jf = open_journal(&sh, seq)?;
        Ok(Flusher {
            sh,
            jf,
            declared: HashSet::new(),
            dirty: HashMap::new(),
            last_sync: Instant::now(),
            last_rotate: Instant::now(),
            ckpt_bytes: 0,
            last_ckpt: Instant::now(),
            unsynced: false,
            refs_unsynced: None,
            buf: Vec::with_capacity(2 << 20),
            buf_needs_sync: false,
            hdrs: Vec::new(),
            recs: Vec::new(),
            chunk_index: HashMap::new(),
            chunks_per_topic: HashMap::new(),
            inflight: HashMap::new(),
            refs_out: Vec::new(),
            deferred: Vec::new(),
        })
    }

    /// What the flusher thread waits for before its next batch: nothing
    /// (idle work is due: unsynced write-once references) or up to a timeout.
    fn wait_plan(&self) -> Option<Duration> {
        if self.refs_unsynced.is_some() || !self.sh.synced_refs.lock().is_empty() {
            return None;
        }
        Some(match self.sh.cfg.sync {
            SyncMode::Interval(ms) if self.unsynced => {
                Duration::from_millis(ms).saturating_sub(self.last_sync.elapsed())
            }
            _ => Duration::from_millis(200),
        })
    }

    /// Whether an append of `bytes` may be processed on the appending thread
    /// (see [`Shared::enqueue`]): nothing to sync (`sync = never`), and no
    /// journal rotation due, which opens and syncs files.
    pub fn can_process_inline(&self, bytes: usize) -> bool {
        let cfg = &self.sh.cfg;
        cfg.sync == SyncMode::Never
            && self.jf.offset + (bytes as u64) * 2 + 4096 <= cfg.journal_file_bytes
            && self.last_rotate.elapsed() < cfg.checkpoint_interval
    }

    fn finish(&mut self) {
        if self.unsynced && self.sh.cfg.sync != SyncMode::Never {
            let _ = self.sync();
        }
        let clean = self.sh.queue.lock().clean;
        if clean {
            let _ = self.rotate(true);
        }
    }
}

/// Takes the next batch from the queue: everything queued up to
/// `max_batch_bytes` (at least one request). `None` once shut down and empty.
pub fn take_batch(sh: &Shared, q: &mut Queue) -> Option<Vec<Req>> {
    let mut out = Vec::new();
    let mut bytes = 0;
    while let Some(r) = q.reqs.front() {
        let s = r.size();
        if !out.is_empty() && bytes + s > sh.cfg.max_batch_bytes {
            break;
        }
        bytes += s;
        out.push(q.reqs.pop_front().expect("front exists"));
    }
    q.bytes -= bytes;
    if out.is_empty() && q.shutdown {
        return None;
    }
    Some(out)
}

/// A flusher thread. The [`Flusher`] itself lives in [`Shared::flusher`]:
/// whoever holds its lock takes batches from the queue, so an append that
/// finds it idle can run the group commit itself (`sync = never`); these
/// threads wait for work without holding it.
///
/// With `sync = always` there are two such threads, and a group commit has
/// two stages: writing (under the flusher's lock: journal records, segment
/// write-behind, write-once segment bytes) and making durable
/// ([`commit_round`]: the fdatasyncs of every group written so far, then the
/// completions, in order). While one thread waits on the disk, the other
/// can write the next group, so the disk and the CPU work overlap instead of
/// taking turns. The second thread is only woken for that when the queue has
/// at least [`PIPELINE_REQS`] requests or [`PIPELINE_BYTES`] (a low rate
/// keeps to one thread and saves the wake-ups).
pub fn run(sh: Arc<Shared>) {
    loop {
        let plan = match sh.flusher.lock().as_ref() {
            Some(f) => f.wait_plan(),
            None => break,
        };
        let pause = {
            let mut q = sh.queue.lock();
            if let Some(timeout) = plan
                && q.reqs.is_empty()
                && !q.shutdown
            {
                q.waiting += 1;
                sh.queue_cv.wait_for(&mut q, timeout);
                q.waiting -= 1;
            }
            sync_pause(&sh, &q)
        };
        if let Some(pause) = pause {
            std::thread::sleep(pause);
        }
        let deferred;
        {
            let mut g = sh.flusher.lock();
            let Some(f) = g.as_mut() else { break };
            let batch = {
                let mut q = sh.queue.lock();
                take_batch(&sh, &mut q)
            };
            match batch {
                Some(reqs) => {
                    f.process(reqs);
                    deferred = std::mem::take(&mut f.deferred);
                }
                None => {
                    // Groups still in the pipeline complete, and the
                    // references of their write-once chunks are written.
                    commit_written(&sh);
                    f.process(Vec::new());
                    commit_written(&sh);
                    f.finish();
                    // Dropping the flusher ends its reference to `Shared`
                    // (and tells the other thread to stop).
                    *g = None;
                    drop(g);
                    commit_written(&sh);
                    break;
                }
            }
        }
        commit_rounds(&sh, true);
        flush_segments(&sh, deferred);
    }
}

/// Writes the write-behind buffers that filled up in a group commit to
/// their segments (`sync = always`), after the group's sync and outside the
/// flusher's lock: the other flusher thread meanwhile writes the next group,
/// and no append waits for these `pwrite`s. With many topics they were a
/// third of the flusher's time in the group commit's serial stage (a new
/// page-cache page costs the VM measured a host page fault on its first
/// write, so a segment write cost 3.5x a journal write of as many bytes into
/// recycled journal pages). The records are readable from the buffer and
/// durable in the journal until then; a checkpoint writes whatever is still
/// buffered, so a flush that never comes (shutdown) loses nothing.
fn flush_segments(sh: &Shared, deferred: Vec<(Arc<TopicShared>, u64)>) {
    for (topic, ledger) in deferred {
        let mut f = topic.files.lock();
        let Some(seg) = f.ledgers.get_mut(&ledger) else {
            continue; // trimmed meanwhile
        };
        // Not full any more if the other thread or a checkpoint wrote it.
        // On an error the entries are durable in the journal, but the
        // segment can no longer be trusted to hold them: the topic refuses
        // service (a restart replays the journal).
        if let Err(e) = flush_if_full(sh, topic.id, seg) {
            f.refuse_service(&topic.name, &e);
        }
    }
}

impl Queue {
    pub fn new(cfg: &super::FileBackendConfig) -> Queue {
        Queue {
            reqs: VecDeque::new(),
            bytes: 0,
            shutdown: false,
            clean: false,
            failed: None,
            waiting: 0,
            pacer: SyncPacer::new(cfg.min_sync_interval, cfg.max_sync_interval),
        }
    }
}

/// What is left of the pacer's interval ([`FileBackendConfig::min_sync_interval`]
/// and up) since the last journal sync started, when appends are queued that
/// soon (`sync = always`): the flusher thread waits it out before taking them.
///
/// [`FileBackendConfig::min_sync_interval`]: super::FileBackendConfig::min_sync_interval
fn sync_pause(sh: &Shared, q: &Queue) -> Option<Duration> {
    if sh.cfg.sync != SyncMode::Always || q.reqs.is_empty() || q.shutdown {
        return None;
    }
    q.pacer.pause(Instant::now())
}

/// Commit rounds until nothing written is left. With `write_on` (a flusher
/// thread right after writing a group), returns instead of waiting when
/// another thread is syncing and enough is queued for another group: this
/// thread then goes back to write groups while the disk is busy, and the
/// syncing thread takes them all in its next round, so when the disk is the
/// bottleneck its syncs grow to cover more groups instead of the queue
/// waiting behind each.
fn commit_rounds(sh: &Shared, write_on: bool) {
    loop {
        let s = match sh.sync_lock.try_lock() {
            Some(s) => s,
            // The holder checks `written` after releasing the lock (below),
            // so it finds this thread's group.
            None if write_on && sh.queue.lock().enough_to_pipeline() => return,
            None => sh.sync_lock.lock(),
        };
        commit_round(sh, s);
        if sh.written.lock().is_empty() {
            return;
        }
    }
}

/// A journal rotation, write or fdatasync taking this long is logged (the
/// first two at warn: appends wait behind them; a slow fdatasync at debug:
/// on a shared disk it happens every few seconds).
const SLOW_IO: Duration = Duration::from_millis(20);

/// Queued requests (or bytes) that make a thread about to wait on the disk
/// wake the other flusher thread to write the next group commit meanwhile
/// (see [`run`]). A group's CPU work grows with its requests (grouping,
/// framing, completions); a few large entries cost little more than the
/// wake-up would (a single topic's batched produce: +5% broker CPU when
/// woken from 32 KiB queued).
pub const PIPELINE_REQS: usize = 64;
pub const PIPELINE_BYTES: usize = 1 << 20;

impl Queue {
    /// At least [`PIPELINE_REQS`] requests or [`PIPELINE_BYTES`] queued:
    /// enough for a second thread to write while the first waits on the disk.
    fn enough_to_pipeline(&self) -> bool {
        self.reqs.len() >= PIPELINE_REQS || self.bytes >= PIPELINE_BYTES
    }
}

/// Makes every group written so far durable and completes it (see
/// [`commit_round`]).
pub fn commit_written(sh: &Shared) {
    commit_rounds(sh, false);
}

/// The durable stage of `sync = always` group commits, under the sync lock
/// `s`: takes every group written so far, fdatasyncs their segments
/// (write-once chunks) and the journal once (no two threads sync at the
/// same time: on this kind of disk a second flush in flight slows both),
/// then completes the groups in the order they were written. The completion
/// lock is taken before the sync lock is released, so the next thread's
/// sync overlaps these completions but its own come after them.
fn commit_round(sh: &Shared, s: parking_lot::MutexGuard<'_, ()>) {
    let mut groups: Vec<Written> = sh.written.lock().drain(..).collect();
    if groups.is_empty() {
        return;
    }
    let bytes: usize = groups.iter().flat_map(|g| &g.reqs).map(Req::size).sum();
    {
        let q = sh.queue.lock();
        if q.waiting > 0 && q.enough_to_pipeline() {
            sh.queue_cv.notify_one();
        }
    }
    let mut failed = sh.queue.lock().failed.clone();
    let mut last = None;
    // Segments synced in this round: one sync covers every group drained
    // (all were written before the drain).
    let mut segs: Vec<(Arc<File>, Result<()>)> = Vec::new();
    let mut refs = Vec::new();
    for g in &mut groups {
        // In write order: a group's segments, then its journal.
        for d in std::mem::take(&mut g.direct) {
            let r = sync_direct(sh, &d, &mut segs);
            // Booked before the sync lock is released: once the outcome is
            // handed over (`synced_refs`), the topic's next journal-path
            // group may be written, and after a failed sync it must find
            // the topic refusing service. A chunk synced after an earlier
            // one of its topic failed is not referenced either (its appends
            // fail).
            let r = book_direct(sh, &d, r);
            if let Err(e) = &r {
                for &i in &d.reqs {
                    g.results[i] = Err(e.clone());
                }
            }
            refs.push(SyncedRef {
                topic: d.topic,
                segref: r.is_ok().then_some(d.segref),
            });
        }
        let Some((seq, file, path)) = &g.journal else {
            continue;
        };
        if failed.is_some() || last == Some(*seq) {
            continue;
        }
        let t0 = Instant::now();
        sh.queue.lock().pacer.sync_started(t0);
        match file.sync_data() {
            Ok(()) => {
                let took = t0.elapsed();
                sh.counters.syncs.record(took);
                last = Some(*seq);
                if took >= SLOW_IO {
                    tracing::debug!(ms = took.as_millis() as u64, "slow journal fdatasync");
                }
                let mut q = sh.queue.lock();
                if q.pacer.on_sync(took, bytes, Instant::now()) {
                    tracing::debug!(
                        ms = took.as_secs_f64() * 1e3,
                        interval_us = q.pacer.interval().as_micros() as u64,
                        "a small journal fdatasync stalled: syncs start further apart"
                    );
                }
            }
            Err(e) => {
                let e = LedgerError::io("fdatasync", path, e);
                stop_accepting(sh, e.clone());
                failed = Some(e);
            }
        }
    }
    if !refs.is_empty() {
        // Handed over before the sync lock is released: a group commit that
        // drains the pipeline (see `Flusher::process`) finds them all.
        sh.synced_refs.lock().append(&mut refs);
        sh.queue_cv.notify_one();
    }
    let c = sh.complete_lock.lock();
    drop(s);
    let mut trash = Vec::new();
    for mut g in groups {
        match &failed {
            Some(e) => {
                for r in g.reqs {
                    r.fail(e.clone());
                }
            }
            None => {
                trash.append(&mut g.trash);
                for (r, res) in g.reqs.into_iter().zip(g.results) {
                    r.complete(res);
                }
            }
        }
    }
    drop(c);
    delete_later(sh, trash);
}

/// Syncs a write-once chunk's segment (and the directory of a new one),
/// unless this round synced that file already.
fn sync_direct(sh: &Shared, d: &DirectSync, segs: &mut Vec<(Arc<File>, Result<()>)>) -> Result<()> {
    let r = match segs.iter().find(|(f, _)| Arc::ptr_eq(f, &d.file)) {
        Some((_, r)) => r.clone(),
        None => {
            let t0 = Instant::now();
            let r = d
                .file
                .sync_data()
                .map_err(|e| LedgerError::io("fdatasync", &d.path, e));
            if r.is_ok() {
                sh.counters.segment_syncs.fetch_add(1, Ordering::Relaxed);
                let took = t0.elapsed();
                if took >= SLOW_IO {
                    tracing::debug!(ms = took.as_millis() as u64, "slow segment fdatasync");
                }
            }
            segs.push((d.file.clone(), r.clone()));
            r
        }
    };
    // A new segment's name must be durable before its entries are.
    if r.is_ok() && d.new_file {
        sync_dir(&d.topic.dir)?;
    }
    r
}

/// Records a write-once chunk's sync outcome in its topic: the segment's
/// synced length, or (the sync failed) the topic refusing service from now
/// on. A chunk of a topic already refusing service fails too.
fn book_direct(sh: &Shared, d: &DirectSync, r: Result<()>) -> Result<()> {
    let mut f = d.topic.files.lock();
    match r {
        Ok(()) => match &f.corrupt {
            Some(e) => Err(e.clone()),
            None => {
                if let Some(seg) = f.ledgers.get_mut(&d.ledger) {
                    seg.synced_len = seg.synced_len.max(d.end);
                    if d.new_file {
                        seg.new_file = false;
                    }
                    hand_to_checkpoint(
                        sh,
                        seg.take_cache_drop(seg.synced_len, sh.wrote_out(d.topic.id)),
                    );
                }
                let c = &sh.counters;
                c.direct_entries.fetch_add(d.entries, Ordering::Relaxed);
                c.direct_bytes.fetch_add(d.bytes, Ordering::Relaxed);
                Ok(())
            }
        },
        Err(e) => {
            f.refuse_service(&d.topic.name, &e);
            Err(e)
        }
    }
}

/// After a failed journal write or sync: fails what is queued, and every
/// later request (see [`Queue::failed`]).
fn stop_accepting(sh: &Shared, e: LedgerError) {
    tracing::error!(error = %e, "the journal failed; the file backend stops accepting writes");
    let rest: Vec<Req> = {
        let mut q = sh.queue.lock();
        q.failed = Some(e.clone());
        q.bytes = 0;
        q.reqs.drain(..).collect()
    };
    for r in rest {
        r.fail(e.clone());
    }
}

/// Hands files of trimmed ledgers to the checkpoint thread for deletion.
fn delete_later(sh: &Shared, mut trash: Vec<PathBuf>) {
    if !trash.is_empty() {
        sh.ckpt.lock().trash.append(&mut trash);
        sh.ckpt_cv.notify_all();
    }
}

impl Flusher {
    fn sync(&mut self) -> Result<()> {
        let t0 = Instant::now();
        self.jf
            .file
            .sync_data()
            .map_err(|e| LedgerError::io("fdatasync", &self.jf.path, e))?;
        self.sh.counters.syncs.record(t0.elapsed());
        self.last_sync = Instant::now();
        self.unsynced = false;
        self.refs_unsynced = None;
        Ok(())
    }

    /// Starts the next journal file and, once enough journal has built up
    /// (or `checkpoint`), hands the previous files to the checkpointer.
    ///
    /// A checkpoint costs one fdatasync per segment written since the previous
    /// one, so it waits until the journal behind it amounts to
    /// `checkpoint_bytes_per_topic` per such topic (at least one journal file,
    /// at most `checkpoint_interval`): 1,000 busy topics then cost 1,000
    /// fsyncs per 256 MB of journal, not per 64 MiB file.
    fn rotate(&mut self, checkpoint: bool) -> Result<()> {
        if self.unsynced && self.sh.cfg.sync != SyncMode::Never {
            self.sync()?;
        }
        let t0 = Instant::now();
        let next = open_journal(&self.sh, self.jf.seq + 1)?;
        let took = t0.elapsed();
        if took >= SLOW_IO {
            // Appends wait behind it: the rename and the directory fsync can
            // queue behind the file system's journal commit.
            tracing::warn!(
                seq = next.seq,
                ms = took.as_millis() as u64,
                "opening the next journal file was slow"
            );
        }
        tracing::debug!(
            seq = next.seq,
            ms = took.as_millis() as u64,
            "journal file started"
        );
        self.ckpt_bytes += self.jf.offset;
        self.jf = next;
        self.declared.clear();
        self.last_rotate = Instant::now();
        let cfg = &self.sh.cfg;
        let enough = (self.dirty.len() as u64)
            .saturating_mul(cfg.checkpoint_bytes_per_topic)
            .max(cfg.journal_file_bytes);
        if !(checkpoint
            || self.ckpt_bytes >= enough
            || self.last_ckpt.elapsed() >= cfg.checkpoint_interval)
        {
            return Ok(());
        }
        self.ckpt_bytes = 0;
        self.last_ckpt = Instant::now();
        let topics: Vec<_> = self.dirty.drain().map(|(_, t)| t).collect();
        let mut p = self.sh.ckpt.lock();
        p.upto = self.jf.seq;
        p.topics.extend(topics);
        p.requested = true;
        self.sh.ckpt_cv.notify_all();
        Ok(())
    }

    fn fail_all(&mut self, reqs: Vec<Req>, e: LedgerError) {
        // Nothing more is synced once the journal failed.
        self.refs_unsynced = None;
        for r in reqs {
            r.fail(e.clone());
        }
        stop_accepting(&self.sh, e);
    }

    /// Groups the batch's entries by (topic, ledger) and picks the chunks
    /// that are written once, straight to their segment: `sync = always`, at
    /// least `direct_write_bytes` of data, and the topic's only chunk in this
    /// batch (so a torn write can only cut the topic's last ledger). Across
    /// a rollover a power loss can still keep a newer ledger's entries while
    /// an earlier ledger's unacknowledged tail is cut (its bytes had not
    /// reached the disk): nothing acknowledged is lost.
    fn plan(&mut self, reqs: &[Req]) -> Plan {
        let mut chunks: Vec<Chunk> = Vec::new();
        // Reused across group commits (a thousand topics would otherwise
        // regrow them every time).
        let index = &mut self.chunk_index;
        let per_topic = &mut self.chunks_per_topic;
        index.clear();
        per_topic.clear();
        let mut slot = Vec::with_capacity(reqs.len());
        let mut next = vec![usize::MAX; reqs.len()];
        for (i, r) in reqs.iter().enumerate() {
            let Req::Entry {
                topic,
                ledger,
                data,
                ..
            } = r
            else {
                slot.push(None);
                continue;
            };
            let c = *index.entry((topic.id, *ledger)).or_insert_with(|| {
                *per_topic.entry(topic.id).or_default() += 1;
                chunks.push(Chunk {
                    topic: topic.clone(),
                    ledger: *ledger,
                    first: i,
                    last: i,
                    count: 0,
                    bytes: 0,
                    direct: false,
                    placed: None,
                    result: Ok(()),
                });
                chunks.len() - 1
            });
            let ch = &mut chunks[c];
            if ch.count > 0 {
                next[ch.last] = i;
            }
            ch.last = i;
            ch.count += 1;
            ch.bytes += data.len();
            slot.push(Some(c));
        }
        let min = self.sh.cfg.direct_write_bytes;
        if self.sh.cfg.sync == SyncMode::Always && min > 0 {
            for c in &mut chunks {
                c.direct = c.bytes >= min && per_topic[&c.topic.id] == 1;
            }
        }
        Plan { chunks, slot, next }
    }

    /// The write-once path: writes each direct chunk to its segment. A
    /// journal reference never reaches the disk before the bytes it points
    /// at, so the segments are synced first, and the references written
    /// after:
    ///
    /// * pipelined (`defer`, a non-zero reference sync window): the syncs run
    ///   in [`commit_round`], after this group's other work, so one
    ///   thread's segment sync overlaps the other's next group commit; the
    ///   chunks are returned, and their references go into a later group's
    ///   journal records ([`Flusher::take_synced_refs`]);
    /// * serial (a zero window: every reference synced before the appends
    ///   resolve): synced here, and referenced by this group's records.
    fn write_direct(&mut self, reqs: &[Req], plan: &mut Plan, defer: bool) -> Vec<DirectSync> {
        let mut direct: Vec<(usize, DirectSync)> = Vec::new();
        for (ci, c) in plan.chunks.iter_mut().enumerate() {
            if !c.direct {
                continue;
            }
            self.hdrs.clear();
            self.recs.clear();
            let mut len = 0u64;
            for (entry, ts, data, crc) in chunk_entries(reqs, &plan.next, c.first) {
                self.hdrs
                    .push(format::segment_header(entry, ts, data.len(), crc));
                let n = (format::HEADER + format::SEG_FIXED + data.len()) as u64;
                self.recs.push((len, n, ts, data.len() as u64));
                len += n;
            }
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(2 * c.count);
            for ((_, _, data, _), h) in chunk_entries(reqs, &plan.next, c.first).zip(&self.hdrs) {
                slices.push(IoSlice::new(h));
                slices.push(IoSlice::new(data));
            }
            let (offset, end, file, path, new_file) =
                match place_direct(&self.sh, c, &mut slices, &self.recs) {
                    Ok(placed) => placed,
                    Err(e) => {
                        c.result = Err(e);
                        continue;
                    }
                };
            self.dirty.insert(c.topic.id, c.topic.clone());
            let Req::Entry { entry, .. } = &reqs[c.first] else {
                unreachable!("chunks hold entries")
            };
            let mut idx = Vec::with_capacity(c.count);
            let mut i = c.first;
            while i != usize::MAX {
                idx.push(i);
                i = plan.next[i];
            }
            let d = DirectSync {
                topic: c.topic.clone(),
                ledger: c.ledger,
                file,
                path,
                end,
                new_file,
                entries: c.count as u64,
                bytes: len,
                segref: segref_body(c.topic.id, c.ledger, *entry, c.count as u64, offset, len),
                reqs: idx,
            };
            direct.push((ci, d));
        }
        if defer {
            // Referenced by a later group commit, once `commit_round` synced
            // them (`placed` stays unset: this group's records skip them).
            for (_, d) in &direct {
                *self.inflight.entry(d.topic.id).or_default() += 1;
            }
            return direct.into_iter().map(|(_, d)| d).collect();
        }
        let mut segs = Vec::new();
        for (ci, d) in direct {
            let c = &mut plan.chunks[ci];
            match book_direct(&self.sh, &d, sync_direct(&self.sh, &d, &mut segs)) {
                // Referenced by this group's records.
                Ok(()) => c.placed = Some(d.segref),
                Err(e) => c.result = Err(e),
            }
        }
        Vec::new()
    }

    /// Takes the references of write-once chunks synced since the last
    /// call (see [`commit_round`]), for the next journal records.
    fn take_synced_refs(&mut self) {
        let got = std::mem::take(&mut *self.sh.synced_refs.lock());
        for r in got {
            if let Some(n) = self.inflight.get_mut(&r.topic.id) {
                *n -= 1;
                if *n == 0 {
                    self.inflight.remove(&r.topic.id);
                }
            }
            if let Some(body) = r.segref {
                self.refs_out.push((r.topic, body));
            }
        }
    }

    /// A topic's records go into the journal after the references of its
    /// earlier write-once chunks, or the declaration of a topic not yet
    /// declared in this journal file.
    fn declare(&mut self, seed: u32, t: &TopicShared) {
        if self.declared.insert(t.id) {
            let mut h = vec![K_DECLARE];
            h.extend_from_slice(&t.id.to_le_bytes());
            format::put_record(&mut self.buf, seed, &[&h, t.name.as_bytes()]);
        }
    }

    fn encode(&mut self, reqs: &[Req], plan: &Plan) {
        let seed = format::journal_seed(self.jf.seq);
        self.buf.clear();
        self.buf_needs_sync = false;
        let refs = std::mem::take(&mut self.refs_out);
        for (t, body) in &refs {
            self.declare(seed, t);
            format::put_record(&mut self.buf, seed, &[body]);
        }
        self.refs_out = refs;
        for (i, r) in reqs.iter().enumerate() {
            // An entry of a direct chunk: the chunk's first entry stands for
            // all of them with one reference; a failed chunk leaves nothing.
            let mut segref = None;
            if let Some(ci) = plan.slot[i] {
                let c = &plan.chunks[ci];
                if c.direct {
                    match &c.placed {
                        Some(h) if c.first == i => segref = Some(h),
                        _ => continue,
                    }
                }
            }
            if let Some(t) = r.topic() {
                self.declare(seed, t);
            }
            if let Some(h) = segref {
                format::put_record(&mut self.buf, seed, &[h]);
                continue;
            }
            match r {
                Req::Entry {
                    topic,
                    ledger,
                    entry,
                    ts,
                    data,
                    crc,
                    ..
                } => {
                    self.buf_needs_sync = true;
                    let mut h = [0u8; 29];
                    h[0] = K_ENTRY;
                    h[1..5].copy_from_slice(&topic.id.to_le_bytes());
                    h[5..13].copy_from_slice(&ledger.to_le_bytes());
                    h[13..21].copy_from_slice(&entry.to_le_bytes());
                    h[21..29].copy_from_slice(&ts.to_le_bytes());
                    format::put_record_crc(&mut self.buf, seed, &h, data, *crc);
                }
                Req::Cursor {
                    topic,
                    name,
                    snapshot,
                    ..
                } => {
                    self.buf_needs_sync = true;
                    let mut h = Vec::with_capacity(7 + name.len());
                    h.push(if snapshot.is_some() {
                        K_CURSOR
                    } else {
                        K_CURSOR_DELETE
                    });
                    h.extend_from_slice(&topic.id.to_le_bytes());
                    h.extend_from_slice(&(name.len() as u16).to_le_bytes());
                    h.extend_from_slice(name.as_bytes());
                    let snap: &[u8] = snapshot.as_deref().unwrap_or(&[]);
                    format::put_record(&mut self.buf, seed, &[&h, snap]);
                }
                Req::Trim {
                    topic, first_kept, ..
                } => {
                    self.buf_needs_sync = true;
                    let mut h = [0u8; 13];
                    h[0] = K_TRIM;
                    h[1..5].copy_from_slice(&topic.id.to_le_bytes());
                    h[5..13].copy_from_slice(&first_kept.to_le_bytes());
                    format::put_record(&mut self.buf, seed, &[&h]);
                }
                Req::Barrier { .. } => {}
            }
        }
    }

    /// Runs one group commit. The caller holds the flusher's lock and took
    /// `reqs` from the queue under it, so batches run in queue order.
    pub fn process(&mut self, reqs: Vec<Req>) {
        if let Some(e) = self.sh.queue.lock().failed.clone() {
            // Nothing more is written or synced (and an idle thread waits).
            self.sh.synced_refs.lock().clear();
            self.refs_out.clear();
            self.inflight.clear();
            self.refs_unsynced = None;
            for r in reqs {
                r.fail(e.clone());
            }
            return;
        }
        let cfg = self.sh.cfg.clone();
        if let SyncMode::Interval(ms) = cfg.sync
            && self.unsynced
            && self.last_sync.elapsed() >= Duration::from_millis(ms)
            && let Err(e) = self.sync()
        {
            return self.fail_all(reqs, e);
        }
        self.take_synced_refs();
        let rotate_due =
            self.jf.offset > 0 && self.last_rotate.elapsed() >= cfg.checkpoint_interval;
        if reqs.is_empty() && self.refs_out.is_empty() {
            let r = if rotate_due {
                self.rotate(false)
            } else if self.refs_unsynced.is_some() {
                self.sync()
            } else {
                Ok(())
            };
            if let Err(e) = r {
                self.fail_all(reqs, e);
            }
            return;
        }
        let mut plan = self.plan(&reqs);
        let defer = !cfg.reference_sync_window.is_zero();
        if plan
            .chunks
            .iter()
            .any(|c| !c.direct && self.inflight.contains_key(&c.topic.id))
        {
            // A topic's journal-path entries must not become durable before
            // its earlier write-once entries are synced in their segment
            // (after a power loss recovery would find the journal resuming
            // past entries the segment lacks): the groups written so far are
            // made durable first (a failed segment sync has marked its topic
            // refusing service by then, see `commit_round`).
            commit_written(&self.sh);
            self.take_synced_refs();
        }
        let mut direct = Vec::new();
        if plan.chunks.iter().any(|c| c.direct) {
            direct = self.write_direct(&reqs, &mut plan, defer);
        }
        self.encode(&reqs, &plan);
        if self.jf.offset > 0
            && (rotate_due || self.jf.offset + self.buf.len() as u64 > cfg.journal_file_bytes)
        {
            if let Err(e) = self.rotate(false) {
                return self.fail_all(reqs, e);
            }
            self.encode(&reqs, &plan);
        }
        if !self.buf.is_empty() {
            let t0 = Instant::now();
            if let Err(e) = self.jf.file.write_all_at(&self.buf, self.jf.offset) {
                let e = LedgerError::io("write", &self.jf.path, e);
                return self.fail_all(reqs, e);
            }
            let took = t0.elapsed();
            if took >= SLOW_IO {
                // A write into the page cache that blocks (dirty-page
                // throttling, the file system's journal) delays every append.
                tracing::warn!(
                    bytes = self.buf.len(),
                    ms = took.as_millis() as u64,
                    "a journal write was slow"
                );
            }
            self.jf.offset += self.buf.len() as u64;
            self.unsynced = true;
            self.refs_out.clear();
            let c = &self.sh.counters;
            c.batches.fetch_add(1, Ordering::Relaxed);
            c.journal_bytes
                .fetch_add(self.buf.len() as u64, Ordering::Relaxed);
        }
        let mut journal = None;
        if cfg.sync == SyncMode::Always && !self.buf.is_empty() {
            // Write-once references alone may wait (their entries are
            // synced in the segment already), up to the window.
            let window = cfg.reference_sync_window;
            // With nothing queued (only references to write), now.
            let due = self.buf_needs_sync
                || reqs.is_empty()
                || window.is_zero()
                || self.refs_unsynced.is_some_and(|t| t.elapsed() >= window);
            if due {
                // `commit_round` syncs everything written so far.
                self.refs_unsynced = None;
                journal = Some((self.jf.seq, self.jf.file.clone(), self.jf.path.clone()));
            } else {
                self.refs_unsynced.get_or_insert_with(Instant::now);
            }
        }
        let mut trash = Vec::new();
        let results = self.apply(&reqs, &mut plan, &mut trash);
        if cfg.sync == SyncMode::Always {
            // Completed by `commit_round` after the sync, in this order
            // (every group goes there, so none overtakes an earlier one).
            self.sh.written.lock().push_back(Written {
                reqs,
                results,
                journal,
                trash,
                direct,
            });
            return;
        }
        delete_later(&self.sh, trash);
        for (r, res) in reqs.into_iter().zip(results) {
            r.complete(res);
        }
    }

    /// Writes the journal-path entries to their segments and applies
    /// metadata; the result per request.
    /// Files of trimmed ledgers go to `trash`, to be deleted once the trim is durable.
    fn apply(
        &mut self,
        reqs: &[Req],
        plan: &mut Plan,
        trash: &mut Vec<PathBuf>,
    ) -> Vec<Result<()>> {
        let mut entries = 0u64;
        for r in reqs {
            match r {
                Req::Entry { .. } => entries += 1,
                Req::Cursor {
                    topic,
                    name,
                    snapshot,
                    ..
                } => {
                    self.sh.topic_meta_entry(&topic.name, |m| match snapshot {
                        Some(s) => {
                            m.cursors.insert(name.clone(), s.clone());
                        }
                        None => {
                            m.cursors.remove(name);
                        }
                    });
                }
                Req::Trim {
                    topic,
                    first_kept,
                    ids,
                    ..
                } => {
                    self.sh.topic_meta_entry(&topic.name, |m| {
                        m.first_kept = m.first_kept.max(*first_kept);
                        m.ledgers.retain(|&l, _| l >= *first_kept);
                    });
                    let mut f = topic.files.lock();
                    for id in ids {
                        if let Some(seg) = f.ledgers.remove(id) {
                            trash.push(seg.path.with_extension("idx"));
                            trash.push(seg.path);
                        }
                    }
                }
                Req::Barrier { .. } => {}
            }
        }
        self.sh
            .counters
            .entries
            .fetch_add(entries, Ordering::Relaxed);
        let defer = self.sh.cfg.sync == SyncMode::Always;
        for c in plan.chunks.iter_mut().filter(|c| !c.direct) {
            c.result = write_chunk(&self.sh, c, chunk_entries(reqs, &plan.next, c.first), defer)
                .map(|due| {
                    if due {
                        self.deferred.push((c.topic.clone(), c.ledger));
                    }
                });
            self.dirty
                .entry(c.topic.id)
                .or_insert_with(|| c.topic.clone());
        }
        plan.slot
            .iter()
            .map(|s| match s {
                Some(ci) => plan.chunks[*ci].result.clone(),
                None => Ok(()),
            })
            .collect()
    }
}

/// A [`K_SEGREF`] record's body.
fn segref_body(
    topic: u32,
    ledger: u64,
    first: u64,
    count: u64,
    offset: u64,
    len: u64,
) -> [u8; SEGREF_LEN] {
    let mut h = [0u8; SEGREF_LEN];
    h[0] = K_SEGREF;
    h[1..5].copy_from_slice(&topic.to_le_bytes());
    h[5..13].copy_from_slice(&ledger.to_le_bytes());
    h[13..21].copy_from_slice(&first.to_le_bytes());
    h[21..29].copy_from_slice(&count.to_le_bytes());
    h[29..37].copy_from_slice(&offset.to_le_bytes());
    h[37..45].copy_from_slice(&len.to_le_bytes());
    h
}

/// A (topic, ledger) run of one group commit's entries.
struct Chunk {
    topic: Arc<TopicShared>,
    ledger: u64,
    /// Index of its first and last entry in the batch (the others are
    /// chained through [`Plan::next`]), and how many there are.
    first: usize,
    last: usize,
    count: usize,
    /// Sum of the entries' data lengths.
    bytes: usize,
    /// Written once, straight to the segment (else through the journal).
    direct: bool,
    /// A direct chunk's journal reference, once its segment is synced
    /// (serial write-once path; the pipelined one hands it to a later group).
    placed: Option<[u8; SEGREF_LEN]>,
    result: Result<()>,
}

struct Plan {
    chunks: Vec<Chunk>,
    /// The chunk of each request (entries only).
    slot: Vec<Option<usize>>,
    /// The next entry of the same chunk, per request (`usize::MAX`: none).
    next: Vec<usize>,
}

/// (entry id, timestamp, data, its CRC-32C) of a chunk's entries, in order.
fn chunk_entries<'a>(
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

/// Framed segment records: (offset in the buffer, record length, ts, data length).
type Recs = [(u64, u64, u64, u64)];

/// The segment of `ledger`, created on first use. Entering a new ledger
/// (rollover) hands the older segments' write-behind to the OS first, so a
/// topic's files are written in position order.
fn segment_for<'a>(
    sh: &Shared,
    t: &TopicShared,
    f: &'a mut TopicFiles,
    ledger: u64,
) -> Result<&'a mut Segment> {
    if let Some(e) = &f.corrupt {
        return Err(e.clone());
    }
    if let std::collections::btree_map::Entry::Vacant(v) = f.ledgers.entry(ledger) {
        ensure_dir(sh, &t.dir)?;
        v.insert(Segment::create(&t.dir, ledger)?);
        f.next_ledger_hint = f.next_ledger_hint.max(ledger + 1);
        let older: Vec<u64> = f
            .ledgers
            .range(..ledger)
            .filter(|(_, s)| !s.pending.is_empty())
            .map(|(&id, _)| id)
            .collect();
        for id in older {
            let seg = f.ledgers.get_mut(&id).expect("listed");
            if let Err(e) = seg.flush_pending() {
                f.corrupt = Some(e.clone());
                return Err(e);
            }
        }
    }
    Ok(f.ledgers.get_mut(&ledger).expect("just inserted"))
}

/// Journal path: frames a chunk's records straight into its segment's
/// write-behind buffer (the journal already holds them). A full buffer is
/// written at once, or with `defer` left to the caller: returns whether it
/// is due.
fn write_chunk<'a>(
    sh: &Shared,
    c: &Chunk,
    entries: impl Iterator<Item = (u64, u64, &'a Bytes, u32)>,
    defer: bool,
) -> Result<bool> {
    let mut f = match c.topic.files.try_lock() {
        Some(f) => f,
        None => {
            // Held by a reader or the checkpoint thread; every append of
            // this group commit waits with us.
            let t0 = Instant::now();
            let f = c.topic.files.lock();
            let took = t0.elapsed();
            if took >= SLOW_IO {
                tracing::debug!(
                    topic = %c.topic.name,
                    ms = took.as_millis() as u64,
                    "waited for a topic's files"
                );
            }
            f
        }
    };
    let seg = segment_for(sh, &c.topic, &mut f, c.ledger)?;
    for (entry, ts, data, crc) in entries {
        let at = seg.len;
        let before = seg.pending.len();
        format::put_segment_record(&mut seg.pending, entry, ts, data, crc);
        let n = (seg.pending.len() - before) as u64;
        seg.push(at, ts, data.len() as u64, n);
    }
    if defer {
        return Ok(seg.flush_due());
    }
    if let Err(e) = flush_if_full(sh, c.topic.id, seg) {
        f.corrupt = Some(e.clone());
        return Err(e);
    }
    Ok(false)
}

/// Writes a segment's write-behind buffer to its file if it is full, and
/// hands the write-out that became due to the checkpoint thread (the
/// syscall can wait on the device queue, and the flusher's time is every
/// producer's latency).
fn flush_if_full(sh: &Shared, topic: u32, seg: &mut Segment) -> Result<()> {
    if seg.flush_when_full()?
        && let Some(wb) = seg.take_writeback()
    {
        // Everything below this write-out's start was handed to the disk a
        // step ago: what lies a window behind it may leave the page cache.
        let uncache = seg.take_cache_drop(wb.from(), sh.wrote_out(topic));
        hand_to_checkpoint(sh, std::iter::once(wb).chain(uncache));
    }
    Ok(())
}

/// Queues segment write-outs and cache drops for the checkpoint thread,
/// which starts them (waking it if there are any).
fn hand_to_checkpoint(sh: &Shared, wbs: impl IntoIterator<Item = super::segment::Writeback>) {
    let mut p = sh.ckpt.lock();
    let before = p.writeback.len();
    p.writeback.extend(wbs);
    if p.writeback.len() > before {
        drop(p);
        sh.ckpt_cv.notify_all();
    }
}

/// Write-once path: writes a chunk's records to its segment file (after
/// the segment's write-behind). Returns (offset, segment end, file, path,
/// whether the file is new) for the sync that follows.
fn place_direct(
    sh: &Shared,
    c: &Chunk,
    slices: &mut [IoSlice<'_>],
    recs: &Recs,
) -> Result<(u64, u64, Arc<File>, PathBuf, bool)> {
    let mut f = c.topic.files.lock();
    let seg = segment_for(sh, &c.topic, &mut f, c.ledger)?;
    let base = match seg.write_direct(slices) {
        Ok(b) => b,
        Err(e) => {
            f.corrupt = Some(e.clone());
            return Err(e);
        }
    };
    debug_assert_eq!(base, seg.len, "write-behind flushed before the chunk");
    for &(at, n, ts, len) in recs {
        seg.push(base + at, ts, len, n);
    }
    Ok((
        base,
        seg.len,
        seg.file.clone(),
        seg.path.clone(),
        seg.new_file,
    ))
}
