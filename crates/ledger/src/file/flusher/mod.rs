//! The per-backend flusher thread: group commit into the journal, then the
//! topics' segments.

mod write;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::format::{self, SEGREF_LEN};
use super::journal::{JournalFile, open_journal};
use super::queue::Queue;
use super::topic::{Req, TopicShared};
use super::{BackendShared, sync_dir};
use crate::{LedgerError, Result, SyncMode};
use write::{flush_if_full, hand_to_checkpoint};

/// A group commit written to the journal (`sync = always`) and waiting for
/// the fdatasync that makes it durable: see `commit_round`.
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
/// fdatasync: in [`commit_round`] (pipelined; its journal reference is
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

pub struct Flusher {
    pub(super) sh: Arc<BackendShared>,
    pub(super) jf: JournalFile,
    pub(super) declared: HashSet<u32>,
    pub(super) dirty: HashMap<u32, Arc<TopicShared>>,
    pub(super) last_sync: Instant,
    pub(super) last_rotate: Instant,
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
    pub(super) recs: Vec<write::FramedRecord>,
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
    /// the group's sync, outside the flusher's lock (see [`flush_segments`]).
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

impl Flusher {
    pub fn start(sh: Arc<BackendShared>, seq: u64) -> Result<Flusher> {
        // The first journal file is preallocated too (once, at startup).
        if sh.cfg.preallocate && sh.pool.lock().is_empty() {
            let spare = super::journal::zero_filled_file(&sh, false)?;
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
    pub(super) fn wait_plan(&self) -> Option<Duration> {
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
    /// (see [`BackendShared::enqueue`]): nothing to sync (`sync = never`), and no
    /// journal rotation due, which opens and syncs files.
    pub fn can_process_inline(&self, bytes: usize) -> bool {
        let cfg = &self.sh.cfg;
        cfg.sync == SyncMode::Never
            && self.jf.offset + (bytes as u64) * 2 + 4096 <= cfg.journal_file_bytes
            && self.last_rotate.elapsed() < cfg.checkpoint_interval
    }

    pub(super) fn finish(&mut self) {
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
pub fn take_batch(sh: &BackendShared, q: &mut Queue) -> Option<Vec<Req>> {
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

/// A flusher thread. The [`Flusher`] itself lives in [`BackendShared::flusher`]:
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
pub fn run(sh: Arc<BackendShared>) {
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
                    // Dropping the flusher ends its reference to `BackendShared`
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
pub(super) fn flush_segments(sh: &BackendShared, deferred: Vec<(Arc<TopicShared>, u64)>) {
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

/// What is left of the pacer's interval ([`FileBackendConfig::min_sync_interval`]
/// and up) since the last journal sync started, when appends are queued that
/// soon (`sync = always`): the flusher thread waits it out before taking them.
///
/// [`FileBackendConfig::min_sync_interval`]: super::FileBackendConfig::min_sync_interval
pub(super) fn sync_pause(sh: &BackendShared, q: &Queue) -> Option<Duration> {
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
pub(super) fn commit_rounds(sh: &BackendShared, write_on: bool) {
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
pub(super) const SLOW_IO: Duration = Duration::from_millis(20);

/// Makes every group written so far durable and completes it (see
/// [`commit_round`]).
pub fn commit_written(sh: &BackendShared) {
    commit_rounds(sh, false);
}

/// The durable stage of `sync = always` group commits, under the sync lock
/// `s`: takes every group written so far, fdatasyncs their segments
/// (write-once chunks) and the journal once (no two threads sync at the
/// same time: on this kind of disk a second flush in flight slows both),
/// then completes the groups in the order they were written. The completion
/// lock is taken before the sync lock is released, so the next thread's
/// sync overlaps these completions but its own come after them.
pub(super) fn commit_round(sh: &BackendShared, s: parking_lot::MutexGuard<'_, ()>) {
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
pub(super) fn sync_direct(
    sh: &BackendShared,
    d: &DirectSync,
    segs: &mut Vec<(Arc<File>, Result<()>)>,
) -> Result<()> {
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
pub(super) fn book_direct(sh: &BackendShared, d: &DirectSync, r: Result<()>) -> Result<()> {
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
                        seg.take_cache_drop(seg.synced_len, sh.page_cache_keep(d.topic.id)),
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
pub(super) fn stop_accepting(sh: &BackendShared, e: LedgerError) {
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
pub(super) fn delete_later(sh: &BackendShared, mut trash: Vec<PathBuf>) {
    if !trash.is_empty() {
        sh.ckpt.lock().trash.append(&mut trash);
        sh.ckpt_cv.notify_all();
    }
}
