//! The journal's files: their names, opening the next one, and the pool of
//! spare (zero-filled or recycled) files that keeps a journal rotation from
//! allocating blocks while appends wait.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::shared::{BackendShared, JournalFile, start_writebacks, sync_dir};
use crate::{LedgerError, Result};

pub fn journal_path(sh: &BackendShared, seq: u64) -> PathBuf {
    sh.journal_dir.join(format!("J{seq:016}.wal"))
}

/// Opens journal file `seq`: a spare from the pool if there is one (renamed
/// into place), else a new file. The directory is synced so the name survives.
pub fn open_journal(sh: &BackendShared, seq: u64) -> Result<JournalFile> {
    let path = journal_path(sh, seq);
    let spare = sh.take_pool_file();
    if let Some(spare) = &spare
        && let Err(e) = std::fs::rename(spare, &path)
    {
        // Kept for the next try.
        sh.pool.lock().push(spare.clone());
        return Err(LedgerError::io("rename", spare, e));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| LedgerError::io("open", &path, e))?;
    if spare.is_none() && sh.cfg.preallocate {
        // Journal files are used faster than checkpoints recycle them and
        // the checkpoint thread zero-fills new ones.
        tracing::warn!(
            seq,
            "no preallocated journal file was ready; this one grows as it is written"
        );
    }
    sync_dir(&sh.journal_dir)?;
    Ok(JournalFile {
        seq,
        path,
        file: Arc::new(file),
        offset: 0,
    })
}

pub(super) fn parse_journal_name(name: &str) -> Option<u64> {
    name.strip_prefix('J')?.strip_suffix(".wal")?.parse().ok()
}

/// Journal files `(seq, path)` in order, and spare files.
pub(super) type JournalListing = (Vec<(u64, PathBuf)>, Vec<PathBuf>);

pub(super) fn list_journal(sh: &BackendShared) -> Result<JournalListing> {
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
pub(super) fn recycle_below(sh: &BackendShared, upto: u64) {
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
pub(super) fn prepare_pool(sh: &BackendShared) {
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
pub fn zero_filled_file(sh: &BackendShared, paced: bool) -> Result<PathBuf> {
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
