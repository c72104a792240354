//! The embedded store's durability: the write-ahead log (one line per
//! committed transaction), the snapshot it is compacted into, and recovery.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{MetadataError, Result};
use crate::store::LeaseId;

use super::state::{Disk, Entry, State};

/// One log record: the mutations of one transaction.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Record {
    pub(super) rev: u64,
    pub(super) muts: Vec<Mutation>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Mutation {
    #[serde(rename = "p")]
    Put {
        k: String,
        v: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        l: Option<LeaseId>,
    },
    #[serde(rename = "d")]
    Delete { k: String },
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Snapshot {
    pub(super) rev: u64,
    pub(super) next_lease: LeaseId,
    pub(super) entries: Vec<SnapEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct SnapEntry {
    pub(super) k: String,
    pub(super) v: String,
    pub(super) c: u64,
    pub(super) m: u64,
}

pub(super) const WAL_FILE: &str = "wal";
pub(super) const SNAPSHOT_FILE: &str = "snapshot";
pub(super) const LOCK_FILE: &str = "LOCK";

pub(super) fn recover(dir: &Path) -> Result<State> {
    std::fs::create_dir_all(dir)?;
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))?;
    if lock.try_lock().is_err() {
        return Err(MetadataError::DirectoryLocked(dir.display().to_string()));
    }
    let mut st = State::empty(None);
    let mut max_lease: LeaseId = 0;

    let snap_path = dir.join(SNAPSHOT_FILE);
    if snap_path.exists() {
        let bytes = std::fs::read(&snap_path)?;
        let corrupt = |reason: String| MetadataError::Corrupt {
            path: snap_path.display().to_string(),
            reason,
        };
        let line = bytes
            .strip_suffix(b"\n")
            .ok_or_else(|| corrupt("no final newline".into()))?;
        let snap: Snapshot = decode_line(line).map_err(corrupt)?;
        st.rev = snap.rev;
        max_lease = max_lease.max(snap.next_lease - 1);
        for e in snap.entries {
            let value = unhex(&e.v).ok_or_else(|| corrupt(format!("bad hex at {}", e.k)))?;
            st.data.insert(
                e.k,
                Entry {
                    value,
                    created: e.c,
                    modified: e.m,
                    lease: None,
                },
            );
        }
    }

    let wal_path = dir.join(WAL_FILE);
    let mut wal = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(&wal_path)?;
    let mut bytes = Vec::new();
    wal.seek(SeekFrom::Start(0))?;
    wal.read_to_end(&mut bytes)?;
    let mut pos = 0;
    while pos < bytes.len() {
        if bytes[pos] == 0 {
            // The zero-filled space ahead of the log (see `append`): nothing was written here.
            break;
        }
        let end = bytes[pos..]
            .iter()
            .position(|b| *b == b'\n')
            .map(|i| pos + i);
        let parsed = end
            .ok_or_else(|| "no newline".to_string())
            .and_then(|end| decode_line::<Record>(&bytes[pos..end]));
        match parsed {
            Ok(rec) => {
                // Lines at or below the snapshot's revision are in it already: the log of an
                // earlier generation, left behind where this one has not written yet (the
                // space is reused, see `reset`), or records the snapshot took in before the
                // log was reset.
                if rec.rev > st.rev {
                    if rec.rev != st.rev + 1 {
                        return Err(MetadataError::Corrupt {
                            path: wal_path.display().to_string(),
                            reason: format!("revision {} follows {}", rec.rev, st.rev),
                        });
                    }
                    replay(&mut st, rec, &mut max_lease).map_err(|reason| {
                        MetadataError::Corrupt {
                            path: wal_path.display().to_string(),
                            reason,
                        }
                    })?;
                }
                pos = end.unwrap_or(bytes.len()) + 1;
            }
            Err(reason) => {
                // A torn append from a crash was never acknowledged: it ends the log, and what
                // follows it is the zero-filled space or an earlier generation's lines. A
                // record that should come after it means a damaged line inside the log.
                if let Some(rev) = newer_record_after(&bytes, end, st.rev) {
                    return Err(MetadataError::Corrupt {
                        path: wal_path.display().to_string(),
                        reason: format!(
                            "bad record at byte {pos} (revision {} expected, {rev} follows it): {reason}",
                            st.rev + 1
                        ),
                    });
                }
                tracing::warn!(path = %wal_path.display(), pos, "dropping a torn final log record");
                break;
            }
        }
    }
    drop(wal);

    // Ephemeral keys belong to sessions of a previous process: they are gone.
    st.data.retain(|_, e| e.lease.is_none());
    st.next_lease = (max_lease + 1).max(now_ms());
    st.compacted = st.rev;
    let wal = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&wal_path)?;
    let cap = wal.metadata()?.len();
    let mut disk = Disk {
        dir: dir.to_path_buf(),
        wal,
        len: 0,
        cap,
        wal_records: 0,
        _lock: lock,
    };
    if disk.cap < WAL_STEP {
        zero_fill(&disk.wal, disk.cap, WAL_STEP)?;
        disk.wal.sync_all()?;
        disk.cap = WAL_STEP;
    }
    st.disk = Some(disk);
    // Make the recovered state (without ephemeral keys, without a torn tail) the new base.
    write_snapshot(&mut st)?;
    Ok(st)
}

pub(super) fn replay(
    st: &mut State,
    rec: Record,
    max_lease: &mut LeaseId,
) -> std::result::Result<(), String> {
    for m in rec.muts {
        match m {
            Mutation::Put { k, v, l } => {
                let value = unhex(&v).ok_or_else(|| format!("bad hex at {k}"))?;
                if let Some(l) = l {
                    *max_lease = (*max_lease).max(l);
                }
                let created = st.data.get(&k).map_or(rec.rev, |e| e.created);
                st.data.insert(
                    k,
                    Entry {
                        value,
                        created,
                        modified: rec.rev,
                        lease: l,
                    },
                );
            }
            Mutation::Delete { k } => {
                st.data.remove(&k);
            }
        }
    }
    st.rev = rec.rev;
    Ok(())
}

/// Writes the persistent state to `snapshot` atomically, then empties the log.
pub(super) fn write_snapshot(st: &mut State) -> Result<()> {
    let Some(disk) = st.disk.as_mut() else {
        return Ok(());
    };
    let snap = Snapshot {
        rev: st.rev,
        next_lease: st.next_lease,
        entries: st
            .data
            .iter()
            .filter(|(_, e)| e.lease.is_none())
            .map(|(k, e)| SnapEntry {
                k: k.clone(),
                v: hex(&e.value),
                c: e.created,
                m: e.modified,
            })
            .collect(),
    };
    let line = encode_line(&snap)?;
    let tmp = disk.dir.join("snapshot.tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&line)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, disk.dir.join(SNAPSHOT_FILE))?;
    File::open(&disk.dir)?.sync_all()?;
    // Records up to `rev` are in the snapshot now; replay skips them even if this truncation
    // does not reach the disk.
    reset(disk)
}

/// The log's space is allocated and zero-filled ahead of its records, in steps of this much:
/// an fdatasync that overwrites allocated blocks need not commit a new file size to the
/// filesystem's journal (that commit was most of a metadata write's time under load; see
/// docs/transactions.md).
pub(super) const WAL_STEP: u64 = 16 << 20;

/// A log grown past this gives its space back at the next snapshot (down to one step).
pub(super) const WAL_KEEP: u64 = 256 << 20;

/// Makes room in the log for `bytes` more. A failure (no space) changes nothing the log
/// holds, so the store goes on: the write is refused and a later one may fit.
pub(super) fn reserve(disk: &mut Disk, bytes: usize) -> std::io::Result<()> {
    let end = disk.len + bytes as u64;
    if end > disk.cap {
        // Made durable by `append`'s fdatasync, with the new size and the records.
        let cap = end.div_ceil(WAL_STEP) * WAL_STEP;
        zero_fill(&disk.wal, disk.cap, cap)?;
        disk.cap = cap;
    }
    Ok(())
}

/// Writes records into space [`reserve`]d for them and syncs them. A failure here leaves
/// the log in doubt (a failed fdatasync may have dropped pages), so the store fails.
pub(super) fn append(disk: &mut Disk, bytes: &[u8]) -> std::io::Result<()> {
    let end = disk.len + bytes.len() as u64;
    debug_assert!(end <= disk.cap, "append into space reserve() made");
    disk.wal.write_all_at(bytes, disk.len)?;
    disk.wal.sync_data()?;
    disk.len = end;
    Ok(())
}

/// Starts the log again from its beginning (everything in it is in the snapshot now). The
/// space is kept, and the old records in it too: recovery skips lines the snapshot holds,
/// and the first line that does not decode ends the log.
fn reset(disk: &mut Disk) -> Result<()> {
    disk.len = 0;
    disk.wal_records = 0;
    if disk.cap > WAL_KEEP {
        disk.wal.set_len(WAL_STEP)?;
        disk.wal.sync_all()?;
        disk.cap = WAL_STEP;
    }
    Ok(())
}

fn zero_fill(f: &File, from: u64, to: u64) -> std::io::Result<()> {
    let zeros = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let n = (to - at).min(zeros.len() as u64) as usize;
        f.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// The revision of a record after the bad line ending at `end` that belongs after `rev`, if
/// any (see `recover`).
fn newer_record_after(bytes: &[u8], end: Option<usize>, rev: u64) -> Option<u64> {
    let mut pos = end? + 1;
    while pos < bytes.len() && bytes[pos] != 0 {
        let end = bytes[pos..]
            .iter()
            .position(|b| *b == b'\n')
            .map(|i| pos + i);
        if let Some(e) = end
            && let Ok(rec) = decode_line::<Record>(&bytes[pos..e])
            && rec.rev > rev
        {
            return Some(rec.rev);
        }
        pos = end? + 1;
    }
    None
}

pub(super) fn encode_line<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(value).map_err(|e| MetadataError::Backend(e.to_string()))?;
    let mut line = format!("{:08x} ", crc32(&json)).into_bytes();
    line.extend_from_slice(&json);
    line.push(b'\n');
    Ok(line)
}

pub(super) fn decode_line<T: for<'de> Deserialize<'de>>(
    line: &[u8],
) -> std::result::Result<T, String> {
    if line.len() < 9 || line[8] != b' ' {
        return Err("short line".into());
    }
    let crc = std::str::from_utf8(&line[..8])
        .ok()
        .and_then(|s| u32::from_str_radix(s, 16).ok())
        .ok_or("bad checksum field")?;
    let json = &line[9..];
    if crc32(json) != crc {
        return Err("checksum mismatch".into());
    }
    serde_json::from_slice(json).map_err(|e| e.to_string())
}

pub(super) fn hex(bytes: &[u8]) -> String {
    strobe_model::hex::encode(bytes)
}

pub(super) fn unhex(s: &str) -> Option<Vec<u8>> {
    strobe_model::hex::decode(s)
}

/// CRC-32 (IEEE); guards log lines against torn writes and bit rot.
pub(super) fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_millis() as i64)
}
