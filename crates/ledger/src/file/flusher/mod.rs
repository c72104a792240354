//! The group commit's entry and its threads: [`enqueue`] queues a topic's
//! requests (running the group commit on the appending thread when nothing
//! is to be synced), and the flusher threads ([`run`]) take them in batches,
//! each written by `write` and made durable by `commit`.

mod commit;
mod plan;
mod write;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::journal::{open_journal, zero_filled_file};
use super::queue::Queue;
use super::shared::{BackendShared, Flusher};
use super::topic::{Req, TopicShared};
use crate::{LedgerError, Result, SyncMode};
use commit::{commit_rounds, commit_written};
use write::flush_if_full;

impl Flusher {
    pub fn start(sh: Arc<BackendShared>, seq: u64) -> Result<Flusher> {
        // The first journal file is preallocated too (once, at startup).
        if sh.cfg.preallocate && sh.pool.lock().is_empty() {
            let spare = zero_filled_file(&sh, false)?;
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
            roll_retry_at: None,
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
    /// (see [`enqueue`]): nothing to sync (`sync = never`), and no journal
    /// rotation due, which opens and syncs files.
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
/// ([`commit::commit_round`]: the fdatasyncs of every group written so far, then the
/// completions, in order). While one thread waits on the disk, the other
/// can write the next group, so the disk and the CPU work overlap instead of
/// taking turns. The second thread is only woken for that when the queue has
/// at least [`PIPELINE_REQS`] requests or [`PIPELINE_BYTES`] (a low rate
/// keeps to one thread and saves the wake-ups).
pub fn run(sh: Arc<BackendShared>) {
    write::mark_flusher_thread();
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
        // A failed write keeps the bytes in the buffer (see `write_failed`).
        if let Err(e) = flush_if_full(sh, &topic, ledger, seg) {
            write::write_failed(&topic, &e);
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

/// Queues a topic's request for the group commit, and wakes a flusher
/// thread when all of them sleep.
pub(super) fn enqueue(sh: &Arc<BackendShared>, req: Req) {
    let mut q = sh.queue.lock();
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
    if sh.cfg.sync == SyncMode::Never
        && q.reqs.len() == 1
        && let Some(mut g) = sh.flusher.try_lock()
        && let Some(f) = g.as_mut()
        && f.can_process_inline(size)
    {
        if let Some(reqs) = take_batch(sh, &mut q) {
            drop(q);
            f.process(reqs);
        }
        return;
    }
    // Only when every flusher thread sleeps: a busy one comes back for
    // the queue, and `commit::commit_round` wakes the other when
    // there is enough to overlap with its sync. Inside an
    // [`crate::append_batch`] the wake-up waits for the batch's end.
    if q.waiting == sh.flusher_threads && !crate::batch::hold_wake(sh) {
        sh.queue_cv.notify_one();
    }
}
