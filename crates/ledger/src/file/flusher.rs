//! The per-backend flusher thread: group commit into the journal, then the
//! topics' segments.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::format;
use super::segment::Segment;
use super::topic::{TopicShared, ensure_dir};
use super::{Shared, sync_dir};
use crate::backend::AppendCallback;
use crate::{LedgerError, Result, SyncMode};

pub const K_DECLARE: u8 = 1;
pub const K_ENTRY: u8 = 2;
pub const K_CURSOR: u8 = 3;
pub const K_CURSOR_DELETE: u8 = 4;
pub const K_TRIM: u8 = 5;

pub enum Req {
    Entry {
        topic: Arc<TopicShared>,
        ledger: u64,
        entry: u64,
        ts: u64,
        data: Bytes,
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

#[derive(Debug, Default)]
pub struct Queue {
    pub reqs: VecDeque<Req>,
    pub bytes: usize,
    pub shutdown: bool,
    /// Shut down with a final checkpoint.
    pub clean: bool,
    pub failed: Option<LedgerError>,
    /// The flusher sleeps on the condvar (so appends know to wake it).
    pub waiting: bool,
}

pub struct JournalFile {
    pub seq: u64,
    pub path: PathBuf,
    pub file: File,
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
        file,
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
    unsynced: bool,
    buf: Vec<u8>,
}

struct Chunk {
    topic: Arc<TopicShared>,
    ledger: u64,
    buf: Vec<u8>,
    /// (offset in buf, record length, ts, data length)
    recs: Vec<(u64, u64, u64, u64)>,
    result: Result<()>,
}

impl Flusher {
    pub fn start(sh: Arc<Shared>, seq: u64) -> Result<Flusher> {
        // The first journal file is preallocated too (once, at startup).
        if sh.cfg.preallocate && sh.pool.lock().is_empty() {
            let spare = super::checkpoint::zero_filled_file(&sh)?;
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
            unsynced: false,
            buf: Vec::with_capacity(2 << 20),
        })
    }

    pub fn run(mut self) {
        loop {
            let Some(reqs) = self.next_batch() else { break };
            self.process(reqs);
        }
        if self.unsynced && self.sh.cfg.sync != SyncMode::Never {
            let _ = self.sync();
        }
        let clean = self.sh.queue.lock().clean;
        if clean {
            let _ = self.rotate();
        }
    }

    fn next_batch(&mut self) -> Option<Vec<Req>> {
        let sh = self.sh.clone();
        let mut q = sh.queue.lock();
        if q.reqs.is_empty() {
            if q.shutdown {
                return None;
            }
            let timeout = match sh.cfg.sync {
                SyncMode::Interval(ms) if self.unsynced => {
                    Duration::from_millis(ms).saturating_sub(self.last_sync.elapsed())
                }
                _ => Duration::from_millis(200),
            };
            q.waiting = true;
            sh.queue_cv.wait_for(&mut q, timeout);
            q.waiting = false;
        }
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

    fn sync(&mut self) -> Result<()> {
        self.jf
            .file
            .sync_data()
            .map_err(|e| LedgerError::io("fdatasync", &self.jf.path, e))?;
        self.sh.counters.syncs.fetch_add(1, Ordering::Relaxed);
        self.last_sync = Instant::now();
        self.unsynced = false;
        Ok(())
    }

    /// Starts the next journal file and hands the previous ones to the checkpointer.
    fn rotate(&mut self) -> Result<()> {
        if self.unsynced && self.sh.cfg.sync != SyncMode::Never {
            self.sync()?;
        }
        let next = open_journal(&self.sh, self.jf.seq + 1)?;
        self.jf = next;
        self.declared.clear();
        self.last_rotate = Instant::now();
        let topics: Vec<_> = self.dirty.drain().map(|(_, t)| t).collect();
        let mut p = self.sh.ckpt.lock();
        p.upto = self.jf.seq;
        p.topics.extend(topics);
        p.requested = true;
        self.sh.ckpt_cv.notify_all();
        Ok(())
    }

    fn fail_all(&mut self, reqs: Vec<Req>, e: LedgerError) {
        tracing::error!(error = %e, "journal write failed; the file backend stops accepting writes");
        let rest: Vec<Req> = {
            let mut q = self.sh.queue.lock();
            q.failed = Some(e.clone());
            q.bytes = 0;
            q.reqs.drain(..).collect()
        };
        for r in reqs.into_iter().chain(rest) {
            r.fail(e.clone());
        }
    }

    fn encode(&mut self, reqs: &[Req]) {
        let seed = format::journal_seed(self.jf.seq);
        self.buf.clear();
        for r in reqs {
            if let Some(t) = r.topic()
                && self.declared.insert(t.id)
            {
                let mut h = vec![K_DECLARE];
                h.extend_from_slice(&t.id.to_le_bytes());
                format::put_record(&mut self.buf, seed, &[&h, t.name.as_bytes()]);
            }
            match r {
                Req::Entry {
                    topic,
                    ledger,
                    entry,
                    ts,
                    data,
                    ..
                } => {
                    let mut h = [0u8; 29];
                    h[0] = K_ENTRY;
                    h[1..5].copy_from_slice(&topic.id.to_le_bytes());
                    h[5..13].copy_from_slice(&ledger.to_le_bytes());
                    h[13..21].copy_from_slice(&entry.to_le_bytes());
                    h[21..29].copy_from_slice(&ts.to_le_bytes());
                    format::put_record(&mut self.buf, seed, &[&h, data]);
                }
                Req::Cursor {
                    topic,
                    name,
                    snapshot,
                    ..
                } => {
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

    fn process(&mut self, reqs: Vec<Req>) {
        if let Some(e) = self.sh.queue.lock().failed.clone() {
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
        let rotate_due =
            self.jf.offset > 0 && self.last_rotate.elapsed() >= cfg.checkpoint_interval;
        if reqs.is_empty() {
            if rotate_due && let Err(e) = self.rotate() {
                self.fail_all(reqs, e);
            }
            return;
        }
        self.encode(&reqs);
        if self.jf.offset > 0
            && (rotate_due || self.jf.offset + self.buf.len() as u64 > cfg.journal_file_bytes)
        {
            if let Err(e) = self.rotate() {
                return self.fail_all(reqs, e);
            }
            self.encode(&reqs);
        }
        if let Err(e) = self.jf.file.write_all_at(&self.buf, self.jf.offset) {
            let e = LedgerError::io("write", &self.jf.path, e);
            return self.fail_all(reqs, e);
        }
        self.jf.offset += self.buf.len() as u64;
        self.unsynced = true;
        let c = &self.sh.counters;
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.journal_bytes
            .fetch_add(self.buf.len() as u64, Ordering::Relaxed);
        if cfg.sync == SyncMode::Always
            && let Err(e) = self.sync()
        {
            return self.fail_all(reqs, e);
        }
        let results = self.apply(&reqs);
        for (r, res) in reqs.into_iter().zip(results) {
            r.complete(res);
        }
    }

    /// Writes entries to their segments and applies metadata; the result per request.
    fn apply(&mut self, reqs: &[Req]) -> Vec<Result<()>> {
        let mut chunks: Vec<Chunk> = Vec::new();
        let mut index: HashMap<(u32, u64), usize> = HashMap::new();
        let mut slot: Vec<Option<usize>> = Vec::with_capacity(reqs.len());
        let mut results: Vec<Result<()>> = Vec::with_capacity(reqs.len());
        let mut entries = 0u64;
        for r in reqs {
            match r {
                Req::Entry {
                    topic,
                    ledger,
                    entry,
                    ts,
                    data,
                    ..
                } => {
                    entries += 1;
                    let i = *index.entry((topic.id, *ledger)).or_insert_with(|| {
                        chunks.push(Chunk {
                            topic: topic.clone(),
                            ledger: *ledger,
                            buf: Vec::new(),
                            recs: Vec::new(),
                            result: Ok(()),
                        });
                        chunks.len() - 1
                    });
                    let c = &mut chunks[i];
                    let at = c.buf.len() as u64;
                    format::put_segment_record(&mut c.buf, *entry, *ts, data);
                    c.recs
                        .push((at, c.buf.len() as u64 - at, *ts, data.len() as u64));
                    slot.push(Some(i));
                    results.push(Ok(()));
                }
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
                    slot.push(None);
                    results.push(Ok(()));
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
                            let _ = std::fs::remove_file(&seg.path);
                            let _ = std::fs::remove_file(seg.path.with_extension("idx"));
                        }
                    }
                    slot.push(None);
                    results.push(Ok(()));
                }
                Req::Barrier { .. } => {
                    slot.push(None);
                    results.push(Ok(()));
                }
            }
        }
        self.sh
            .counters
            .entries
            .fetch_add(entries, Ordering::Relaxed);
        for c in &mut chunks {
            c.result = write_chunk(&self.sh, c);
            self.dirty.insert(c.topic.id, c.topic.clone());
        }
        slot.into_iter()
            .zip(results)
            .map(|(s, r)| match s {
                Some(i) => chunks[i].result.clone(),
                None => r,
            })
            .collect()
    }
}

/// Bytes gathered per segment before they are written to the file.
const WRITE_BEHIND: usize = 64 << 10;

fn write_chunk(sh: &Shared, c: &Chunk) -> Result<()> {
    let t = &c.topic;
    let mut f = t.files.lock();
    if let Some(e) = &f.corrupt {
        return Err(e.clone());
    }
    let mut created = false;
    if let std::collections::btree_map::Entry::Vacant(v) = f.ledgers.entry(c.ledger) {
        ensure_dir(sh, &t.dir)?;
        v.insert(Segment::create(&t.dir, c.ledger)?);
        f.next_ledger_hint = f.next_ledger_hint.max(c.ledger + 1);
        created = true;
    }
    // Entering a new ledger (rollover): hand the older segments'
    // write-behind to the OS first, so a topic's files are written in
    // position order.
    if created {
        let older: Vec<u64> = f
            .ledgers
            .range(..c.ledger)
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
    let seg = f.ledgers.get_mut(&c.ledger).expect("just inserted");
    let base = seg.len;
    if let Err(e) = seg.append(&c.buf, WRITE_BEHIND) {
        f.corrupt = Some(e.clone());
        return Err(e);
    }
    for &(at, n, ts, len) in &c.recs {
        seg.push(base + at, ts, len, n);
    }
    Ok(())
}
