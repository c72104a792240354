//! The durable stage of `sync = always` group commits: the fdatasyncs of
//! every group written so far (write-once segments first, then the journal,
//! once), then the groups' completions in write order; and, when the journal
//! fails, failing everything queued.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::file::checkpoint::{delete_later, hand_to_checkpoint};
use crate::file::shared::{BackendShared, DirectSync, SyncedRef, Written, sync_dir};
use crate::file::topic::Req;
use crate::{LedgerError, Result};

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
/// later request (see [`Queue::failed`](crate::file::queue::Queue::failed)).
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
