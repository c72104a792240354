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

use super::flusher::{K_CURSOR, K_CURSOR_DELETE, K_DECLARE, K_ENTRY, K_TRIM};
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
}

/// The checkpoint thread.
pub fn run(sh: Arc<Shared>) {
    prepare_pool(&sh);
    loop {
        let (upto, topics, shutdown) = {
            let mut p = sh.ckpt.lock();
            while !p.requested && !p.shutdown {
                sh.ckpt_cv.wait(&mut p);
            }
            if !p.requested {
                return;
            }
            p.requested = false;
            (p.upto, std::mem::take(&mut p.topics), p.shutdown)
        };
        match checkpoint(&sh, upto, &topics) {
            Ok(()) => {
                sh.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::error!(error = %e, "checkpoint failed; the journal is kept");
                sh.ckpt.lock().topics.extend(topics);
            }
        }
        if shutdown {
            return;
        }
        prepare_pool(&sh);
    }
}

struct SyncWork {
    ledger: u64,
    file: Arc<std::fs::File>,
    path: PathBuf,
    len: u64,
    entries: u64,
    new_file: bool,
}

fn checkpoint(sh: &Shared, upto: u64, topics: &[Arc<TopicShared>]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for t in topics {
        if !seen.insert(t.id) {
            continue;
        }
        let work: Vec<SyncWork> = {
            let mut f = t.files.lock();
            for seg in f.ledgers.values_mut() {
                seg.flush_pending()?;
            }
            f.ledgers
                .iter()
                .filter(|(_, s)| s.synced_len < s.len || s.new_file)
                .map(|(&id, s)| SyncWork {
                    ledger: id,
                    file: s.file.clone(),
                    path: s.path.clone(),
                    len: s.len,
                    entries: s.offsets.len() as u64,
                    new_file: s.new_file,
                })
                .collect()
        };
        for w in &work {
            let t0 = std::time::Instant::now();
            w.file
                .sync_data()
                .map_err(|e| LedgerError::io("fdatasync", &w.path, e))?;
            // Pace: leave the disk to the journal's group commits at least half
            // of the time, so a checkpoint of many topics does not show up
            // in append latency.
            if !sh.ckpt.lock().shutdown {
                std::thread::sleep(t0.elapsed());
            }
        }
        if work.iter().any(|w| w.new_file) {
            sync_dir(&t.dir)?;
        }
        {
            let mut f = t.files.lock();
            let newest = f.ledgers.keys().next_back().copied();
            for w in &work {
                if let Some(seg) = f.ledgers.get_mut(&w.ledger) {
                    seg.synced_len = seg.synced_len.max(w.len);
                    if w.new_file {
                        seg.new_file = false;
                    }
                    if Some(w.ledger) != newest && seg.synced_len == seg.len && !seg.indexed {
                        seg.write_index(&w.path.with_extension("idx"))?;
                        seg.indexed = true;
                    }
                }
            }
        }
        sh.topic_meta_entry(&t.name, |m| {
            for w in &work {
                if w.ledger >= m.first_kept {
                    let e = m.ledgers.entry(w.ledger).or_default();
                    *e = (*e).max(w.entries);
                }
            }
        });
    }
    let meta = sh.meta.lock().clone();
    CheckpointFile::write(&sh.cfg.dir, upto, &meta)?;
    recycle_below(sh, upto);
    Ok(())
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
    for (seq, path) in js.into_iter().filter(|(s, _)| *s < upto) {
        let keep = sh.cfg.preallocate && sh.pool.lock().len() < sh.cfg.journal_pool;
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
        match zero_filled_file(sh) {
            Ok(path) => sh.pool.lock().push(path),
            Err(e) => {
                tracing::warn!(error = %e, "cannot preallocate a journal file");
                return;
            }
        }
    }
}

/// Writes one zero-filled, synced spare journal file.
pub fn zero_filled_file(sh: &Shared) -> Result<PathBuf> {
    let n = sh.next_pool_id.fetch_add(1, Ordering::Relaxed);
    let tmp = sh.journal_dir.join(format!("pool-{n}.tmp"));
    let path = sh.journal_dir.join(format!("pool-{n}.wal"));
    let r = (|| -> std::io::Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < sh.cfg.journal_file_bytes {
            let n = zeros.len().min((sh.cfg.journal_file_bytes - at) as usize);
            f.write_all_at(&zeros[..n], at)?;
            at += n as u64;
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

/// A segment being checked against the journal during recovery.
struct Repair {
    dir: PathBuf,
    seg: Segment,
    stop: Option<ScanStop>,
    checked: bool,
    corrupt: Option<String>,
    created: bool,
    touched: bool,
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
    let mut repairs: HashMap<(String, u64), Repair> = HashMap::new();
    let mut next_seq = start_seq;
    let mut replayed = 0u64;
    for (seq, path) in js.iter().filter(|(s, _)| *s >= start_seq) {
        let data = std::fs::read(path).map_err(|e| LedgerError::io("read", path, e))?;
        let seed = format::journal_seed(*seq);
        let mut names: HashMap<u32, String> = HashMap::new();
        let mut at = 0usize;
        while let Decoded::Record(body, n) = format::decode(&data[at..], seed) {
            at += n;
            replayed += 1;
            replay_record(sh, body, &mut names, &mut repairs)?;
        }
        next_seq = seq + 1;
    }
    let mut meta = sh.meta.lock();
    for ((name, ledger), r) in repairs {
        if let Some(reason) = r.corrupt {
            tracing::error!(topic = %name, path = %r.seg.path.display(), %reason, "segment cannot be repaired");
            let marker = r.dir.join(CORRUPT_MARKER);
            let msg = format!("{}: {reason}\n", r.seg.path.display());
            std::fs::write(&marker, msg).map_err(|e| LedgerError::io("write", &marker, e))?;
            sync_dir(&r.dir)?;
            continue;
        }
        if r.touched || r.created {
            r.seg
                .file
                .sync_data()
                .map_err(|e| LedgerError::io("fdatasync", &r.seg.path, e))?;
        }
        if r.created {
            sync_dir(&r.dir)?;
        }
        // After a restart every stored ledger is sealed: index it.
        r.seg
            .write_index(&super::segment::idx_path(&r.dir, ledger))?;
        let m = meta.entry(name).or_default();
        if ledger >= m.first_kept {
            m.ledgers.insert(ledger, r.seg.offsets.len() as u64);
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

fn replay_record(
    sh: &Shared,
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
            let first_kept = sh.meta.lock().get(&name).map_or(0, |m| m.first_kept);
            if ledger < first_kept {
                return Ok(());
            }
            let key = (name.clone(), ledger);
            if !repairs.contains_key(&key) {
                let dir = sh.topic_dir(&name);
                std::fs::create_dir_all(&dir)
                    .map_err(|e| LedgerError::io("create directory", &dir, e))?;
                let path = super::segment::seg_path(&dir, ledger);
                let (seg, stop, created) = if path.exists() {
                    let (s, stop) = Segment::open(&dir, ledger)?;
                    (s, stop, false)
                } else {
                    (Segment::create(&dir, ledger)?, None, true)
                };
                repairs.insert(
                    key.clone(),
                    Repair {
                        dir,
                        seg,
                        stop,
                        checked: false,
                        corrupt: None,
                        created,
                        touched: false,
                    },
                );
            }
            let r = repairs.get_mut(&key).expect("inserted");
            if r.corrupt.is_some() {
                return Ok(());
            }
            let n = r.seg.offsets.len() as u64;
            if !r.checked {
                r.checked = true;
                if entry > n {
                    let at = r.stop.as_ref().map_or(String::new(), |s| {
                        format!(" (damaged at byte {}: {})", s.offset, s.reason)
                    });
                    r.corrupt = Some(format!(
                        "holds entries 0..{n}{at} but the journal resumes at entry {entry}: synced data is missing"
                    ));
                    return Ok(());
                }
                if r.stop.take().is_some() {
                    let valid = r.seg.len;
                    r.seg.truncate(valid)?;
                    r.touched = true;
                }
            }
            if entry < n {
                return Ok(());
            }
            if entry > n {
                r.corrupt = Some(format!("journal skips from entry {n} to {entry}"));
                return Ok(());
            }
            let data = &body[29..];
            let mut rec = Vec::with_capacity(data.len() + 24);
            format::put_segment_record(&mut rec, entry, ts, data);
            let base = r.seg.len;
            r.seg.append(&rec, 0)?;
            r.seg.push(base, ts, data.len() as u64, rec.len() as u64);
            r.touched = true;
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
