//! The journal path's write-behind buffers: with `sync = always` a buffer
//! that fills up in a group commit is written to its segment by the flusher
//! thread after the group's sync, outside the group commit. The bytes must
//! reach the segment file without waiting for a checkpoint, and every entry
//! must read back the same, from the buffer, the file, and after a crash.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{File, read_all};
use strobe_ledger::testing::Harness;
use strobe_ledger::{LedgerConfig, ManagedLedger, SyncMode};

fn payload(i: usize) -> Bytes {
    let mut v = format!("e{i}:").into_bytes();
    v.resize(1000, (i % 251) as u8);
    Bytes::from(v)
}

/// Total size of the segment files under `dir`.
fn segment_bytes(dir: &Path) -> u64 {
    let mut n = 0;
    for t in std::fs::read_dir(dir.join("topics")).unwrap() {
        for f in std::fs::read_dir(t.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "seg") {
                n += std::fs::metadata(&p).unwrap().len();
            }
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_buffers_reach_the_segment_without_a_checkpoint() {
    let mut h = File::with(SyncMode::Always, 64 << 20, false, |c| {
        c.checkpoint_interval = Duration::from_secs(3600);
        c.checkpoint_bytes_per_topic = 1 << 30;
    });
    let ml = ManagedLedger::open(&*h.backend(), "wb", LedgerConfig::default())
        .await
        .unwrap();
    // One small append at a time: each is a group commit of its own on the
    // journal path (far below the write-once threshold).
    let n = 300;
    for i in 0..n {
        ml.append(payload(i)).await.unwrap();
    }
    let st = h.backend.as_ref().unwrap().stats();
    assert_eq!(st.checkpoints, 0, "{st:?}");
    assert_eq!(st.direct_entries, 0, "{st:?}");
    // About 300 KB went through the buffer of 64 KiB: most of it must be in
    // the file, written by the flusher thread after the syncs.
    let t0 = Instant::now();
    let mut on_file = segment_bytes(h.dir.path());
    while on_file < 200_000 && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        on_file = segment_bytes(h.dir.path());
    }
    assert!(
        on_file >= 200_000,
        "only {on_file} bytes in the segment after {n} appends of 1 KB"
    );
    let want: Vec<Bytes> = (0..n).map(payload).collect();
    assert_eq!(read_all(&ml).await, want);
    // The tail still in the buffer is in the journal: after a crash the
    // replay brings back every entry.
    drop(ml);
    h.crash_restart();
    let ml = ManagedLedger::open(&*h.backend(), "wb", LedgerConfig::default())
        .await
        .unwrap();
    assert_eq!(read_all(&ml).await, want);
}
