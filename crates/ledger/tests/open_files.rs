//! Segment files under a descriptor budget (issue 47): with more topics than
//! `max_open_segment_files`, the files of idle topics are closed once synced
//! and opened again on demand, so the process's open files stay near the
//! budget whatever the topic count; every entry is read back, before and
//! after a crash. Its own binary: the count is the whole process's.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{File, read_all};
use strobe_ledger::{LedgerConfig, ManagedLedger, SyncMode};

const TOPICS: usize = 120;
const BUDGET: usize = 16;

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn entry(t: usize, i: usize) -> Bytes {
    Bytes::from(format!("topic {t} entry {i} ").repeat(20))
}

async fn settle(h: &File, checkpoints_before: u64) {
    let b = h.backend.as_ref().unwrap();
    for _ in 0..500 {
        if b.stats().checkpoints > checkpoints_before && !b.busy() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no checkpoint within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_topics_hold_no_segment_files() {
    let mut h = File::with(SyncMode::Always, 256 << 10, false, |c| {
        c.checkpoint_bytes_per_topic = 0;
        c.checkpoint_interval = Duration::from_millis(100);
        c.max_open_segment_files = BUDGET;
    });
    let before = fds();
    let cfg = LedgerConfig::default();
    let mut ledgers = Vec::new();
    for t in 0..TOPICS {
        let b = h.backend.clone().unwrap();
        ledgers.push(
            ManagedLedger::open(&*b, &format!("t{t}"), cfg.clone())
                .await
                .unwrap(),
        );
    }
    // Opening creates each topic's segment; over the budget none stays open.
    let b = h.backend.clone().unwrap();
    assert!(
        b.stats().open_segment_files <= BUDGET as u64,
        "{} segment files open after opening {TOPICS} topics",
        b.stats().open_segment_files
    );
    for round in 0..3 {
        for (t, ml) in ledgers.iter().enumerate() {
            ml.append(entry(t, round)).await.unwrap();
        }
    }
    // Written, every topic's file is open until a checkpoint syncs it; then
    // only the budget's worth stays.
    let c0 = b.stats().checkpoints;
    settle(&h, c0).await;
    let open = b.stats().open_segment_files;
    assert!(
        open <= BUDGET as u64,
        "{open} segment files open after the checkpoint"
    );
    assert!(
        fds() < before + BUDGET + 16,
        "{} descriptors open, {before} before the topics",
        fds()
    );
    // Reads reopen what they need and close it again.
    for (t, ml) in ledgers.iter().enumerate() {
        let got = read_all(ml).await;
        assert_eq!(
            got,
            (0..3).map(|i| entry(t, i)).collect::<Vec<_>>(),
            "topic {t}"
        );
    }
    assert!(b.stats().open_segment_files <= BUDGET as u64);
    // More appends after the files were closed, then a crash: everything is
    // there after the restart, and the reopened topics hold no more files.
    for (t, ml) in ledgers.iter().enumerate() {
        ml.append(entry(t, 3)).await.unwrap();
    }
    drop(b);
    drop(ledgers);
    h.crash();
    h.start().unwrap();
    let b = h.backend.clone().unwrap();
    for t in 0..TOPICS {
        let ml = ManagedLedger::open(&*b, &format!("t{t}"), cfg.clone())
            .await
            .unwrap();
        let got = read_all(&ml).await;
        assert_eq!(
            got,
            (0..4).map(|i| entry(t, i)).collect::<Vec<_>>(),
            "topic {t} after the crash"
        );
    }
    assert!(
        b.stats().open_segment_files <= BUDGET as u64,
        "{} segment files open after reopening",
        b.stats().open_segment_files
    );
}
