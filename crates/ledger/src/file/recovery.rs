//! Recovery at open: the journal since the last checkpoint is replayed into
//! the topics' segments, torn or missing segment bytes are repaired or the
//! topic refuses service, and a fresh checkpoint is written.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::checkpoint::CheckpointFile;
use super::format::{
    self, Decoded, K_CURSOR, K_CURSOR_DELETE, K_DECLARE, K_ENTRY, K_SEGREF, K_TRIM, SEGREF_LEN,
};
use super::journal::{list_journal, recycle_below};
use super::segment::{ScanStop, Segment};
use super::shared::{BackendShared, sync_dir};
use super::topic::CORRUPT_MARKER;
use crate::{LedgerError, Result};

/// What the journal since the checkpoint says as a whole, gathered before
/// the replay.
#[derive(Debug, Default)]
pub(super) struct JournalFacts {
    /// (topic, ledger) -> entries `0..n` of the segment were synced there by
    /// the write-once path (the end of its last reference).
    pub(super) referenced: HashMap<(String, u64), u64>,
    /// Each topic's trim point at the end of the journal.
    pub(super) first_kept: HashMap<String, u64>,
}

/// A segment being checked against the journal during recovery.
pub(super) struct Repair {
    pub(super) dir: PathBuf,
    pub(super) path: PathBuf,
    /// `None` when the file is missing (then `corrupt` says why).
    pub(super) seg: Option<Segment>,
    /// Where the scan stopped short of the file's end; cut once the journal
    /// shows the stop is past everything synced.
    pub(super) stop: Option<ScanStop>,
    /// No journal record applied to it yet.
    pub(super) fresh: bool,
    pub(super) corrupt: Option<String>,
    pub(super) created: bool,
    pub(super) touched: bool,
}

/// The valid records of journal file `seq`, in order, up to a torn tail.
pub(super) fn journal_records(data: &[u8], seq: u64) -> impl Iterator<Item = &[u8]> {
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
pub fn recover(sh: &BackendShared, start_seq: u64) -> Result<u64> {
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
        let mut seg = match (r.corrupt, r.seg) {
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
            seg.file()?
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
pub(super) fn repair_for<'a>(
    sh: &BackendShared,
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
    pub(super) fn cut_torn_tail(&mut self) -> Result<()> {
        if self.stop.take().is_some() {
            let seg = self.seg.as_mut().expect("not corrupt");
            let valid = seg.len;
            seg.truncate(valid)?;
            self.touched = true;
        }
        Ok(())
    }
}

pub(super) fn replay_record(
    sh: &BackendShared,
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
                    seg.offsets.at(first as usize),
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
