//! Opening a topic (its segments loaded and checked against the checkpoint)
//! and its [`TopicStorage`] handle: appends, cursor snapshots and trims queued
//! for the group commit, reads served from the segments.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::flusher;
use super::format::{self, HEADER, SEG_FIXED};
use super::segment::{self, Segment};
use super::shared::{BackendShared, ensure_dir};
use super::topic::{CORRUPT_MARKER, Req, TopicFiles, TopicMeta, TopicShared};
use crate::backend::{AppendCallback, LedgerMeta, RecoveredTopic, TopicStorage};
use crate::{LedgerError, Position, Result, SyncMode};

pub fn open_topic(
    sh: &Arc<BackendShared>,
    name: &str,
    fence: u64,
) -> Result<(Arc<dyn TopicStorage>, RecoveredTopic)> {
    let t = {
        let mut topics = sh.topics.lock();
        topics
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(TopicShared {
                    id: sh.next_topic_id.fetch_add(1, Ordering::Relaxed),
                    name: name.to_string(),
                    dir: sh.topic_dir(name),
                    files: Mutex::new(TopicFiles::default()),
                })
            })
            .clone()
    };
    let meta = sh.meta.lock().get(name).cloned().unwrap_or_default();
    let mut files = t.files.lock();
    if files.fence > fence {
        return Err(LedgerError::Fenced {
            topic: name.to_string(),
            token: fence,
            current: files.fence,
        });
    }
    if files.open {
        return Err(LedgerError::AlreadyOpen(name.to_string()));
    }
    files.fence = fence;
    if !files.loaded {
        load(sh, &t, &mut files, &meta)?;
        // Created here, off the flusher thread: a directory fsync per new
        // topic must not stall everyone's group commit.
        ensure_dir(sh, &t.dir)?;
    }
    if let Some(e) = &files.corrupt {
        return Err(e.clone());
    }
    let max_id = files.ledgers.keys().next_back().map_or(0, |l| l + 1);
    let rec = RecoveredTopic {
        ledgers: files
            .ledgers
            .iter()
            .map(|(&id, s)| LedgerMeta {
                ledger_id: id,
                entries: s.offsets.len() as u64,
                bytes: s.bytes,
                first_ts_ms: s.first_ts,
                last_ts_ms: s.last_ts,
            })
            .collect(),
        next_ledger_id: max_id
            .max(meta.first_kept)
            .max(meta.ledgers.keys().next_back().map_or(0, |l| l + 1))
            .max(files.next_ledger_hint)
            .max(1),
        cursors: meta
            .cursors
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    // Create the new ledger's segment now, off the flusher thread, so the
    // first append of each of many topics does not stall the group commit.
    if let std::collections::btree_map::Entry::Vacant(v) = files.ledgers.entry(rec.next_ledger_id) {
        v.insert(Box::new(Segment::create(&t.dir, rec.next_ledger_id)?));
        files.next_ledger_hint = files.next_ledger_hint.max(rec.next_ledger_id + 1);
    }
    // Nothing is written yet: over the budget, no descriptor stays behind.
    let max_open = sh.cfg.max_open_segment_files;
    for seg in files.ledgers.values_mut() {
        seg.close_if_over(max_open);
    }
    files.open = true;
    drop(files);
    let h: Arc<dyn TopicStorage> = Arc::new(FileTopicHandle {
        sh: Arc::downgrade(sh),
        topic: t,
        released: Arc::new(AtomicBool::new(false)),
        max_open,
    });
    Ok((h, rec))
}

fn corrupt(topic: &str, path: PathBuf, offset: u64, reason: impl Into<String>) -> LedgerError {
    LedgerError::Corrupt {
        topic: topic.to_string(),
        path,
        offset,
        reason: reason.into(),
    }
}

/// Reads a topic's segments from disk and checks them against the checkpoint.
fn load(
    sh: &BackendShared,
    t: &TopicShared,
    files: &mut TopicFiles,
    meta: &TopicMeta,
) -> Result<()> {
    let marker = t.dir.join(CORRUPT_MARKER);
    if let Ok(reason) = std::fs::read_to_string(&marker) {
        return Err(corrupt(&t.name, marker, 0, reason.trim().to_string()));
    }
    let mut ids = Vec::new();
    match std::fs::read_dir(&t.dir) {
        Ok(rd) => {
            for e in rd {
                let e = e.map_err(|e| LedgerError::io("list", &t.dir, e))?;
                if let Some(id) = e.file_name().to_str().and_then(segment::parse_seg_name) {
                    ids.push(id);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(LedgerError::io("list", &t.dir, e)),
    }
    ids.sort_unstable();
    let newest = ids.last().copied();
    let mut ledgers = BTreeMap::new();
    for id in ids {
        if id < meta.first_kept {
            let _ = std::fs::remove_file(segment::seg_path(&t.dir, id));
            let _ = std::fs::remove_file(segment::idx_path(&t.dir, id));
            continue;
        }
        let (mut seg, stop) = Segment::open(&t.dir, id)?;
        if let Some(stop) = stop {
            // Recovery has already repaired (or refused) what the journal
            // covers, and the checkpoint counts every entry synced in the
            // segment itself. A damaged record past those is a torn tail of
            // a write that was never acknowledged (the write-once path writes
            // the segment before the journal refers to it): cut it. Below the
            // count it is synced data gone bad: refuse.
            let synced = meta.ledgers.get(&id).copied().unwrap_or(0);
            let torn = seg.offsets.len() as u64 >= synced
                || (sh.cfg.sync != SyncMode::Always && Some(id) == newest);
            if torn {
                tracing::warn!(topic = %t.name, path = %seg.path.display(), offset = stop.offset,
                    reason = stop.reason, "truncating the unsynced torn tail of a segment");
                let valid = seg.len;
                seg.truncate(valid)?;
            } else {
                let e = corrupt(&t.name, seg.path.clone(), stop.offset, stop.reason);
                files.corrupt = Some(e.clone());
                return Err(e);
            }
        }
        if let Some(&want) = meta.ledgers.get(&id)
            && (seg.offsets.len() as u64) < want
        {
            let e = corrupt(
                &t.name,
                seg.path.clone(),
                seg.len,
                format!(
                    "holds {} entries but the checkpoint recorded {want}",
                    seg.offsets.len()
                ),
            );
            files.corrupt = Some(e.clone());
            return Err(e);
        }
        if seg.offsets.is_empty() {
            let _ = std::fs::remove_file(&seg.path);
            continue;
        }
        // Every stored ledger is sealed (this open starts a new one), and
        // recovery synced it: index it so the next open need not scan.
        if !seg.indexed {
            seg.write_index(&segment::idx_path(&t.dir, id))?;
            seg.indexed = true;
        }
        ledgers.insert(id, Box::new(seg));
    }
    for (&id, &n) in &meta.ledgers {
        if id >= meta.first_kept && n > 0 && !ledgers.contains_key(&id) {
            let e = corrupt(
                &t.name,
                segment::seg_path(&t.dir, id),
                0,
                format!("missing segment file (the checkpoint recorded {n} entries)"),
            );
            files.corrupt = Some(e.clone());
            return Err(e);
        }
    }
    files.ledgers = ledgers;
    files.loaded = true;
    Ok(())
}

#[derive(Debug)]
pub struct FileTopicHandle {
    /// Weak: the [`super::FileBackend`] owns the backend's lifetime.
    sh: std::sync::Weak<BackendShared>,
    topic: Arc<TopicShared>,
    released: Arc<AtomicBool>,
    /// [`super::FileBackendConfig::max_open_segment_files`].
    max_open: usize,
}

fn release(t: &TopicShared, released: &AtomicBool) {
    if !released.swap(true, Ordering::SeqCst) {
        t.files.lock().open = false;
    }
}

impl Drop for FileTopicHandle {
    fn drop(&mut self) {
        release(&self.topic, &self.released);
    }
}

fn channel_result(rx: oneshot::Receiver<Result<()>>) -> BoxFuture<'static, Result<()>> {
    async move {
        rx.await
            .unwrap_or_else(|_| Err(LedgerError::Closed("file backend".into())))
    }
    .boxed()
}

impl FileTopicHandle {
    fn enqueue(&self, req: Req) {
        match self.sh.upgrade() {
            Some(sh) => flusher::enqueue(&sh, req),
            None => req.fail(LedgerError::Closed("file backend".into())),
        }
    }
}

impl TopicStorage for FileTopicHandle {
    fn append(
        &self,
        ledger_id: u64,
        entry_id: u64,
        ts_ms: u64,
        data: Bytes,
        crc: u32,
        done: AppendCallback,
    ) {
        self.enqueue(Req::Entry {
            topic: self.topic.clone(),
            ledger: ledger_id,
            entry: entry_id,
            ts: ts_ms,
            data,
            crc,
            done,
        });
    }

    fn read(
        &self,
        ledger_id: u64,
        first: u64,
        last: u64,
    ) -> BoxFuture<'static, Result<Vec<Bytes>>> {
        let t = self.topic.clone();
        let loc = match locate(&t, ledger_id, first, last, self.max_open) {
            Ok(loc) => loc,
            Err(e) => return futures::future::ready(Err(e)).boxed(),
        };
        // A consumer at the tail reads what was written moments ago: it is in
        // the write-behind buffer or the page cache, and reading it here costs
        // less than the two thread hand-offs of the blocking pool. Anything
        // older or larger may wait on the disk, so it goes to the pool.
        if loc.in_memory {
            return futures::future::ready(read_located(&t, loc, first, last)).boxed();
        }
        async move {
            tokio::task::spawn_blocking(move || read_located(&t, loc, first, last))
                .await
                .map_err(|e| LedgerError::Io {
                    op: "read",
                    path: PathBuf::new(),
                    message: e.to_string(),
                })?
        }
        .boxed()
    }

    fn delete_ledgers(&self, first_kept: u64, ids: Vec<u64>) -> BoxFuture<'static, Result<()>> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(Req::Trim {
            topic: self.topic.clone(),
            first_kept,
            ids,
            done: tx,
        });
        channel_result(rx)
    }

    fn persist_cursor(
        &self,
        name: &str,
        snapshot: Option<Bytes>,
    ) -> BoxFuture<'static, Result<()>> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(Req::Cursor {
            topic: self.topic.clone(),
            name: name.to_string(),
            snapshot,
            done: tx,
        });
        channel_result(rx)
    }

    fn close(&self) -> BoxFuture<'static, Result<()>> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(Req::Barrier { done: tx });
        let topic = self.topic.clone();
        let released = self.released.clone();
        async move {
            let r = rx
                .await
                .unwrap_or_else(|_| Err(LedgerError::Closed("file backend".into())));
            release(&topic, &released);
            r
        }
        .boxed()
    }
}

/// Reads at most this many bytes on the caller's thread (see [`Located::in_memory`]).
const INLINE_READ_BYTES: u64 = 256 * 1024;
/// ... and only within this distance of the end of the topic's newest segment.
const INLINE_READ_RECENT: u64 = 8 << 20;

/// Where entries `first..=last` of a ledger are, found under the topic's lock.
struct Located {
    /// None when every byte is in the write-behind buffer.
    file: Option<Arc<std::fs::File>>,
    path: PathBuf,
    start: u64,
    end: u64,
    /// `start..file_end` is read from the file.
    file_end: u64,
    /// The rest, copied from the write-behind buffer.
    tail: Vec<u8>,
    /// Small and recent enough to read without the blocking pool: in the
    /// topic's newest segment, within its last [`INLINE_READ_RECENT`] bytes,
    /// at most [`INLINE_READ_BYTES`] (in the write-behind buffer or the page
    /// cache, not waiting on the disk).
    in_memory: bool,
}

fn locate(t: &TopicShared, ledger: u64, first: u64, last: u64, max_open: usize) -> Result<Located> {
    let mut f = t.files.lock();
    if let Some(e) = &f.corrupt {
        return Err(e.clone());
    }
    let newest = f.ledgers.keys().next_back() == Some(&ledger);
    let seg = f
        .ledgers
        .get_mut(&ledger)
        .filter(|s| (last as usize) < s.offsets.len() && first <= last);
    let Some(seg) = seg else {
        return Err(LedgerError::InvalidPosition {
            topic: t.name.clone(),
            position: Position::new(ledger, first),
            reason: "no such entry in storage",
        });
    };
    let (start, end) = seg.byte_range(first, last);
    // The part still in the write-behind buffer is copied under the lock;
    // the part in the file stays there (the file only grows).
    let file_end = end.min(seg.written);
    let tail = if end > seg.written {
        let from = (start.max(seg.written) - seg.written) as usize;
        seg.pending[from..(end - seg.written) as usize].to_vec()
    } else {
        Vec::new()
    };
    let file = if file_end > start {
        let file = seg.file()?;
        // The read keeps its own handle: over the budget the segment need
        // not keep one (the descriptor closes when the read is done).
        seg.close_if_over(max_open);
        Some(file)
    } else {
        None
    };
    Ok(Located {
        file,
        path: seg.path.clone(),
        start,
        end,
        file_end,
        tail,
        // ... and still in the page cache (a small window under the
        // page-cache budget may have dropped it).
        in_memory: newest
            && end - start <= INLINE_READ_BYTES
            && seg.len - start <= INLINE_READ_RECENT
            && start >= seg.cache_dropped,
    })
}

/// Reads and checks the entries `loc` found.
fn read_located(t: &TopicShared, loc: Located, first: u64, last: u64) -> Result<Vec<Bytes>> {
    let Located {
        file,
        path,
        start,
        end,
        file_end,
        tail,
        ..
    } = loc;
    let buf = if let Some(file) = file.filter(|_| file_end > start) {
        let mut buf = Vec::with_capacity((end - start) as usize);
        buf.resize((file_end - start) as usize, 0);
        file.read_exact_at(&mut buf, start)
            .map_err(|e| LedgerError::io("read", &path, e))?;
        buf.extend_from_slice(&tail);
        buf
    } else {
        // All of it is in the write-behind buffer: the copy made under the
        // lock is the buffer.
        tail
    };
    let buf = Bytes::from(buf);
    let mut out = Vec::with_capacity((last - first + 1) as usize);
    let mut at = 0usize;
    for want in first..=last {
        let bad = |reason: &str| {
            let e = corrupt(&t.name, path.clone(), start + at as u64, reason.to_string());
            t.files.lock().corrupt = Some(e.clone());
            e
        };
        match format::decode(&buf[at..], 0) {
            format::Decoded::Record(body, n) => {
                if body.len() < SEG_FIXED || format::u64_at(body, 0) != want {
                    return Err(bad("unexpected entry id"));
                }
                out.push(buf.slice(at + HEADER + SEG_FIXED..at + n));
                at += n;
            }
            format::Decoded::Bad(r) => return Err(bad(r)),
            _ => return Err(bad("truncated record")),
        }
    }
    Ok(out)
}
