//! Crash simulation at the crate level: stop the file backend without a
//! checkpoint, damage files at random byte offsets, reopen.

mod common;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use common::File;
use proptest::prelude::*;
use strobe_ledger::{LedgerConfig, LedgerError, ManagedLedger, Position, SyncMode};

const TOPIC: &str = "persistent://t/ns/crash";

fn cfg() -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: 40,
        trim_interval: None,
        ..LedgerConfig::default()
    }
}

fn payload(i: u64) -> Bytes {
    // Big enough that segments pass the 64 KiB write-behind and reach the file.
    Bytes::from(format!(
        "{i}:{}",
        "p".repeat(1000 + (i * 37 % 4000) as usize)
    ))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn files(dir: &Path, sub: &str, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join(sub))
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == ext));
    v.sort();
    v
}

fn topic_dir(h: &File) -> PathBuf {
    h.dir
        .path()
        .join("topics")
        .join("persistent%3A%2F%2Ft%2Fns%2Fcrash")
}

/// Writes `n` entries, returns their positions, and crashes.
fn write_and_crash(rt: &tokio::runtime::Runtime, h: &mut File, n: u64) -> Vec<Position> {
    let ps = rt.block_on(async {
        let ml = ManagedLedger::open(&**h.backend.as_ref().unwrap(), TOPIC, cfg())
            .await
            .unwrap();
        let futs: Vec<_> = (0..n).map(|i| ml.append(payload(i))).collect();
        let mut ps = Vec::new();
        for f in futs {
            ps.push(f.await.unwrap());
        }
        ps
    });
    h.crash();
    ps
}

fn reopen_and_read(
    rt: &tokio::runtime::Runtime,
    h: &mut File,
) -> strobe_ledger::Result<Vec<(Position, Bytes)>> {
    h.start()?;
    rt.block_on(async {
        let ml = ManagedLedger::open(&**h.backend.as_ref().unwrap(), TOPIC, cfg()).await?;
        let all = ml.read(Position::EARLIEST, 100_000).await?;
        ml.close().await?;
        Ok(all.into_iter().map(|e| (e.position, e.data)).collect())
    })
}

fn truncate(path: &Path, frac: f64) -> u64 {
    let len = std::fs::metadata(path).unwrap().len();
    let at = ((len as f64) * frac) as u64;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(at).unwrap();
    at
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// A segment torn anywhere is repaired from the journal: every
    /// acknowledged entry comes back, in order, with its bytes.
    #[test]
    fn torn_segment_is_repaired_from_the_journal(n in 1u64..120, frac in 0.0f64..1.0, which in 0usize..4) {
        let rt = rt();
        let mut h = File::new(SyncMode::Always, 8 << 20, false);
        let ps = write_and_crash(&rt, &mut h, n);
        let segs = files(&topic_dir(&h), "", "seg");
        let seg = &segs[which % segs.len()];
        truncate(seg, frac);
        let got = reopen_and_read(&rt, &mut h).unwrap();
        prop_assert_eq!(got.len() as u64, n);
        for (i, (p, d)) in got.iter().enumerate() {
            prop_assert_eq!(*p, ps[i]);
            prop_assert_eq!(d, &payload(i as u64));
        }
    }

    /// With the journal torn as well (a power loss in `never` mode), what
    /// comes back is a prefix of what was written, never garbage.
    #[test]
    fn torn_journal_and_segment_give_a_prefix(n in 1u64..120, jfrac in 0.0f64..1.0, sfrac in 0.0f64..1.0) {
        let rt = rt();
        let mut h = File::new(SyncMode::Never, 8 << 20, false);
        let ps = write_and_crash(&rt, &mut h, n);
        let js = files(h.dir.path(), "journal", "wal");
        truncate(js.last().unwrap(), jfrac);
        let segs = files(&topic_dir(&h), "", "seg");
        truncate(segs.last().unwrap(), sfrac);
        let got = reopen_and_read(&rt, &mut h).unwrap();
        prop_assert!(got.len() as u64 <= n);
        for (i, (p, d)) in got.iter().enumerate() {
            prop_assert_eq!(*p, ps[i]);
            prop_assert_eq!(d, &payload(i as u64));
        }
    }
}

#[test]
fn bad_crc_in_a_synced_segment_refuses_service() {
    let rt = rt();
    let mut h = File::new(SyncMode::Always, 8 << 20, false);
    write_and_crash(&rt, &mut h, 100);
    h.start().unwrap();
    h.shutdown(); // recovery + clean shutdown: segments synced, journal recycled
    let seg = files(&topic_dir(&h), "", "seg")[0].clone();
    let mut bytes = std::fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&seg, &bytes).unwrap();
    let _ = std::fs::remove_file(seg.with_extension("idx"));
    match reopen_and_read(&rt, &mut h) {
        Err(LedgerError::Corrupt { path, reason, .. }) => {
            assert_eq!(path, seg);
            eprintln!("reported: {reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // The error names the file.
    let e = rt
        .block_on(ManagedLedger::open(
            &**h.backend.as_ref().unwrap(),
            TOPIC,
            cfg(),
        ))
        .unwrap_err();
    assert!(e.to_string().contains(seg.to_str().unwrap()), "{e}");
}

#[test]
fn corruption_detected_on_read_refuses_service() {
    let rt = rt();
    let mut h = File::new(SyncMode::Always, 8 << 20, false);
    let ps = write_and_crash(&rt, &mut h, 50);
    h.start().unwrap();
    rt.block_on(async {
        let b = h.backend.clone().unwrap();
        let ml = ManagedLedger::open(&*b, TOPIC, cfg()).await.unwrap();
        // Damage the data under the running topic.
        let seg = files(&topic_dir(&h), "", "seg")[0].clone();
        let mut bytes = std::fs::read(&seg).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&seg, &bytes).unwrap();
        let e = ml.read(ps[0], 100).await.unwrap_err();
        assert!(matches!(e, LedgerError::Corrupt { .. }), "{e}");
        // ... and keeps refusing.
        assert!(ml.read(ps[0], 1).await.is_err());
        drop(ml);
    });
}

#[test]
fn segment_cut_at_a_record_boundary_after_checkpoint_is_reported() {
    let rt = rt();
    let mut h = File::new(SyncMode::Always, 8 << 20, false);
    write_and_crash(&rt, &mut h, 30);
    h.start().unwrap();
    h.shutdown();
    let seg = files(&topic_dir(&h), "", "seg")[0].clone();
    // Cut exactly after the first record: the scan alone would look clean.
    let bytes = std::fs::read(&seg).unwrap();
    let first = 8 + u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as u64;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(first)
        .unwrap();
    let _ = std::fs::remove_file(seg.with_extension("idx"));
    let r = reopen_and_read(&rt, &mut h);
    assert!(matches!(r, Err(LedgerError::Corrupt { .. })), "{r:?}");
}

#[test]
fn unsynced_tail_is_truncated_in_never_mode() {
    let rt = rt();
    let mut h = File::new(SyncMode::Never, 8 << 20, false);
    write_and_crash(&rt, &mut h, 30);
    h.start().unwrap();
    h.shutdown();
    // Garbage appended after the last record of the newest segment.
    let seg = files(&topic_dir(&h), "", "seg").last().unwrap().clone();
    let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    std::io::Write::write_all(&mut f, &[0xde, 0xad, 0xbe, 0xef, 1, 2, 3]).unwrap();
    let _ = std::fs::remove_file(seg.with_extension("idx"));
    let got = reopen_and_read(&rt, &mut h).unwrap();
    assert_eq!(got.len(), 30);
}

#[test]
fn reopen_after_clean_shutdown_uses_the_index() {
    let rt = rt();
    let mut h = File::new(SyncMode::Always, 8 << 20, false);
    let ps = write_and_crash(&rt, &mut h, 100);
    h.start().unwrap();
    h.shutdown();
    // Sealed segments got index files.
    assert!(!files(&topic_dir(&h), "", "idx").is_empty());
    let got = reopen_and_read(&rt, &mut h).unwrap();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), ps);
}

#[test]
fn trimmed_ledgers_leave_the_disk_even_across_a_crash() {
    let rt = rt();
    let mut h = File::new(SyncMode::Always, 8 << 20, false);
    let seg_of = |h: &File, id: u64| topic_dir(h).join(format!("L{id:016}.seg"));
    let (deleted, kept) = rt.block_on(async {
        let ml = ManagedLedger::open(&**h.backend.as_ref().unwrap(), TOPIC, cfg())
            .await
            .unwrap();
        for i in 0..100 {
            ml.append(payload(i)).await.unwrap();
        }
        ml.rollover();
        let kept = ml.append(payload(100)).await.unwrap();
        // No cursors: every sealed ledger counts as consumed.
        let deleted = ml.trim().await.unwrap();
        assert_eq!(deleted.len(), 3, "{deleted:?}");
        // Deleted in the background, not on the group commit's thread.
        for _ in 0..250 {
            if deleted.iter().all(|&id| !seg_of(&h, id).exists()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        for &id in &deleted {
            assert!(!seg_of(&h, id).exists(), "ledger {id} still on disk");
        }
        (deleted, kept)
    });
    // A crash right after another trim: the reopen finishes the deletion.
    rt.block_on(async {
        let ml = ManagedLedger::open(&**h.backend.as_ref().unwrap(), TOPIC, cfg())
            .await
            .unwrap();
        ml.append(payload(101)).await.unwrap();
        ml.rollover();
        ml.append(payload(102)).await.unwrap();
        let more = ml.trim().await.unwrap();
        assert!(more.contains(&kept.ledger_id), "{more:?}");
    });
    h.crash();
    let got = reopen_and_read(&rt, &mut h).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, payload(102));
    for id in deleted.iter().copied().chain([kept.ledger_id]) {
        assert!(!seg_of(&h, id).exists(), "ledger {id} still on disk");
    }
}

#[test]
fn checkpoints_wait_for_enough_journal_per_topic_and_replay_spans_files() {
    let rt = rt();
    // 64 KiB journal files, a checkpoint only per 2 MiB of journal per topic.
    let mut h = File::with(SyncMode::Always, 64 << 10, false, |c| {
        c.checkpoint_bytes_per_topic = 2 << 20;
    });
    let ps = rt.block_on(async {
        let b = h.backend.clone().unwrap();
        let ml = ManagedLedger::open(&*b, TOPIC, cfg()).await.unwrap();
        let mut ps = Vec::new();
        for i in 0..150 {
            ps.push(ml.append(payload(i)).await.unwrap());
        }
        let st = b.stats();
        assert_eq!(st.checkpoints, 0, "{st:?}");
        let journals = files(h.dir.path(), "journal", "wal")
            .iter()
            .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with('J'))
            .count();
        assert!(journals >= 4, "{journals} journal files");
        ps
    });
    h.crash();
    let got = reopen_and_read(&rt, &mut h).unwrap();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), ps);
    for (i, (_, d)) in got.iter().enumerate() {
        assert_eq!(d, &payload(i as u64));
    }
}
