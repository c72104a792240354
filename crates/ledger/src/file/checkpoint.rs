//! The checkpoint thread and the work handed to it: segment write-outs and
//! page-cache drops, checkpoints (segments synced, `checkpoint.json` written,
//! journal files recycled), and the paced deletion of trimmed ledgers' files.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::journal::{prepare_pool, recycle_below};
use super::segment;
use super::shared::{BackendShared, SyncClose, start_counted, start_writebacks, sync_dir};
use super::topic::{TopicMeta, TopicShared};
use crate::{LedgerError, Result};

#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct TopicMetaFile {
    pub(super) first_kept: u64,
    pub(super) ledgers: BTreeMap<u64, u64>,
    /// Hex of each snapshot.
    pub(super) cursors: BTreeMap<String, String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct CheckpointFile {
    /// Replay starts at this journal file.
    pub journal_seq: u64,
    pub(super) topics: BTreeMap<String, TopicMetaFile>,
}

pub(super) use strobe_model::hex::{decode as unhex, encode as hex};

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

    pub(super) fn write(
        dir: &Path,
        journal_seq: u64,
        meta: &BTreeMap<String, TopicMeta>,
    ) -> Result<()> {
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

/// Queues segment write-outs and cache drops for the checkpoint thread,
/// which starts them (waking it if there are any).
pub(super) fn hand_to_checkpoint(
    sh: &BackendShared,
    wbs: impl IntoIterator<Item = segment::Writeback>,
) {
    let mut p = sh.ckpt.lock();
    let before = p.writeback.len();
    p.writeback.extend(wbs);
    if p.writeback.len() > before {
        drop(p);
        sh.ckpt_cv.notify_all();
    }
}

/// Hands a segment file written over the descriptor budget to the
/// checkpoint thread, to be synced and closed.
pub(super) fn sync_and_close_later(sh: &BackendShared, sc: SyncClose) {
    sh.ckpt.lock().sync_close.push(sc);
    sh.ckpt_cv.notify_all();
}

/// Syncs the segment files queued by [`sync_and_close_later`] together, then
/// closes each that is still over the budget and wholly synced. A failed
/// sync makes its topic refuse service, as a checkpoint's would.
pub(super) fn sync_and_close_queued(sh: &BackendShared) {
    let mut queued = std::mem::take(&mut sh.ckpt.lock().sync_close);
    if queued.is_empty() {
        return;
    }
    // One sync per file, covering the most bytes queued for it.
    queued.sort_by_key(|q| (Arc::as_ptr(&q.file) as usize, std::cmp::Reverse(q.written)));
    queued.dedup_by_key(|q| Arc::as_ptr(&q.file) as usize);
    let files: Vec<ToSync> = queued
        .iter()
        .enumerate()
        .map(|(i, q)| ToSync {
            topic: i,
            what: SyncTarget::Segment(q.file.clone(), q.path.clone()),
        })
        .collect();
    let results = sync_together(&files);
    drop(files);
    for (q, r) in queued.into_iter().zip(results) {
        if let Err(e) = r {
            refuse_service(&q.topic, e);
            continue;
        }
        let mut f = q.topic.files.lock();
        if let Some(seg) = f.ledgers.get_mut(&q.ledger) {
            seg.synced_len = seg.synced_len.max(q.written);
            // Dropped here, so the segment's own handle is the last one.
            drop(q.file);
            seg.close_if_over(sh.cfg.max_open_segment_files);
        }
    }
}

/// Hands files of trimmed ledgers to the checkpoint thread for deletion.
pub(super) fn delete_later(sh: &BackendShared, mut trash: Vec<PathBuf>) {
    if !trash.is_empty() {
        sh.ckpt.lock().trash.append(&mut trash);
        sh.ckpt_cv.notify_all();
    }
}

/// Trimmed segments are freed in steps of this many bytes (the file is
/// shrunk, then removed once small), ...
pub(super) const DELETE_STEP: u64 = 8 << 20;
/// ... at most this fast. On a file system mounted with `discard` every
/// freed extent becomes a discard request to the device, and the group
/// commits' fdatasyncs queue behind them; at this pace they do not
/// (docs/storage.md, "Deleting trimmed ledgers").
pub(super) const DELETE_BYTES_PER_SEC: f64 = (512u64 << 20) as f64;
/// Unless more than this many files wait: deleting must keep up with a producer
/// that writes faster than the pace (the disk would fill up), so a backlog
/// this long (16 segments and their indexes: 4 GiB of default ledgers) is
/// deleted without pauses.
pub(super) const DELETE_BACKLOG_FILES: usize = 32;

/// The checkpoint thread: segment write-outs first, then checkpoints, and
/// in between the paced deletion of trimmed segments.
pub fn run(sh: Arc<BackendShared>) {
    prepare_pool(&sh);
    // When the next deletion step may run.
    let mut delete_at = std::time::Instant::now();
    loop {
        let (upto, topics, shutdown) = {
            let mut p = sh.ckpt.lock();
            loop {
                if p.requested || p.shutdown || !p.writeback.is_empty() || !p.sync_close.is_empty()
                {
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
            if !p.sync_close.is_empty() {
                drop(p);
                sync_and_close_queued(&sh);
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
pub(super) fn delete_step(p: &Path) -> (u64, bool) {
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
pub(super) fn delete_all_trash(sh: &BackendShared) {
    let trash = std::mem::take(&mut sh.ckpt.lock().trash);
    for p in &trash {
        while !delete_step(p).1 {}
    }
}

pub(super) struct SyncWork {
    pub(super) ledger: u64,
    pub(super) file: Arc<std::fs::File>,
    pub(super) path: PathBuf,
    /// The unsynced bytes: `from..len`.
    pub(super) from: u64,
    pub(super) len: u64,
    pub(super) entries: u64,
    pub(super) new_file: bool,
}

/// Where a checkpoint's time went (logged at debug level with it).
#[derive(Debug, Default)]
pub(super) struct CheckpointCost {
    /// Segments fdatasync'd, and the bytes they had not synced before.
    pub(super) segments: usize,
    pub(super) unsynced_bytes: u64,
    /// Writing the unsynced bytes out (paced, without the pauses).
    pub(super) writeout_us: u64,
    /// The fdatasyncs, issued together.
    pub(super) sync_us: u64,
    /// The longest a topic's files lock was held (appends of that topic wait).
    pub(super) max_locked_ms: u64,
    /// Writing, syncing and renaming `checkpoint.json`.
    pub(super) file_ms: u64,
}

/// At most this many fdatasyncs of a checkpoint run at once (see
/// [`sync_together`]).
pub(super) const SYNC_THREADS: usize = 16;

/// A file a checkpoint makes durable.
pub(super) struct ToSync {
    /// Index of its topic in the checkpoint's plan.
    pub(super) topic: usize,
    pub(super) what: SyncTarget,
}

pub(super) enum SyncTarget {
    /// A segment: fdatasync.
    Segment(Arc<std::fs::File>, PathBuf),
    /// A topic directory with new segments in it: fsync.
    Dir(PathBuf),
}

/// Makes `files` durable with the calls issued together from up to
/// [`SYNC_THREADS`] threads; the outcome per file.
///
/// One at a time, each fdatasync of a segment whose size grew is a commit of
/// the file system's journal and a device cache flush, and the group
/// commits' fdatasyncs queue behind each in turn. Issued together, the calls
/// wait for the same journal commit and their flushes are merged
/// (docs/storage.md, "Checkpoint syncs"); their data
/// was written out (paced) beforehand, so none of them waits on a burst.
/// This departs on purpose from the group commit's rule of one sync in flight
/// (`flusher::commit::commit_round`): there a second concurrent flush slows both
/// in every round, here one short burst replaces a hundred serial commits.
/// A directory is opened by the thread that syncs it, so at most
/// [`SYNC_THREADS`] extra descriptors are open at a time.
pub(super) fn sync_together(files: &[ToSync]) -> Vec<Result<()>> {
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
pub(super) fn refuse_service(t: &TopicShared, e: LedgerError) -> LedgerError {
    t.files.lock().refuse_service(&t.name, &e);
    e
}

pub(super) fn checkpoint(
    sh: &BackendShared,
    upto: u64,
    topics: &[Arc<TopicShared>],
) -> Result<CheckpointCost> {
    let mut cost = CheckpointCost::default();
    let mut seen = std::collections::HashSet::new();
    let topics: Vec<&Arc<TopicShared>> = topics.iter().filter(|t| seen.insert(t.id)).collect();
    // In parts, so the segment files opened to be synced together stay
    // within half the descriptor budget (100,000 touched topics would
    // otherwise hold 100,000 files open at once).
    let part = match sh.cfg.max_open_segment_files {
        0 => usize::MAX,
        n => (n / 2).max(16),
    };
    for chunk in topics.chunks(part) {
        // Files queued meanwhile are synced and closed between the parts.
        sync_and_close_queued(sh);
        checkpoint_part(sh, chunk, &mut cost)?;
    }
    let meta = sh.meta.lock().clone();
    let t0 = std::time::Instant::now();
    CheckpointFile::write(&sh.cfg.dir, upto, &meta)?;
    cost.file_ms = t0.elapsed().as_millis() as u64;
    recycle_below(sh, upto);
    Ok(cost)
}

/// Syncs the segments `topics` wrote since the last checkpoint and records
/// their entry counts; over the descriptor budget, closes their files after.
fn checkpoint_part(
    sh: &BackendShared,
    topics: &[&Arc<TopicShared>],
    cost: &mut CheckpointCost,
) -> Result<()> {
    // Per topic: the segments to sync, and those the write-once path already synced.
    let mut planned = Vec::new();
    for &t in topics {
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
            for (&id, s) in f.ledgers.iter_mut() {
                if s.synced_len < s.len || s.new_file {
                    cost.unsynced_bytes += s.len.saturating_sub(s.synced_len);
                    work.push(SyncWork {
                        ledger: id,
                        file: s.file()?,
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
            segment::write_out_and_wait(&w.file, w.from, w.len - w.from)
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
    cost.sync_us += t0.elapsed().as_micros() as u64;
    cost.segments += files
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
                    seg.offsets.shrink_to_fit();
                    uncache.extend(seg.take_cache_drop_sealed(sh.cfg.page_cache_window));
                }
            }
            for seg in f.ledgers.values_mut() {
                seg.close_if_over(sh.cfg.max_open_segment_files);
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    pub(super) fn sync_together_reports_each_outcome_in_order() {
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
