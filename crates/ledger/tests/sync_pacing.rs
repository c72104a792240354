//! `FileBackendConfig::min_sync_interval`: appends queued within the
//! interval after a journal sync started wait out the rest of it, so each
//! of them does not get an fdatasync of its own; an append after a pause is
//! written at once.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::File;
use strobe_ledger::{LedgerConfig, ManagedLedger, SyncMode};

/// A backend with `interval` and one topic on it, after its first sync.
async fn paced(interval: Duration) -> (File, ManagedLedger) {
    let h = File::with(SyncMode::Always, 64 << 20, false, |c| {
        c.min_sync_interval = interval
    });
    let ml = ManagedLedger::open(
        &*h.backend.clone().unwrap(),
        "paced",
        LedgerConfig::default(),
    )
    .await
    .unwrap();
    ml.append(Bytes::from_static(b"warm")).await.unwrap();
    (h, ml)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncs_start_at_most_once_per_interval() {
    let interval = Duration::from_millis(5);
    let (h, ml) = paced(interval).await;
    let backend = h.backend.clone().unwrap();
    // One append at a time, each awaited: every one needs a sync of its own,
    // and each sync starts no sooner than `interval` after the previous one.
    let n = 20u32;
    let s0 = backend.stats().syncs;
    let t0 = Instant::now();
    for i in 0..n {
        ml.append(Bytes::from(format!("e{i}"))).await.unwrap();
    }
    let took = t0.elapsed();
    assert_eq!(backend.stats().syncs - s0, u64::from(n));
    assert!(
        took >= interval * (n - 1),
        "{n} syncs one after another in {took:?}, less than {:?}",
        interval * (n - 1)
    );

    // After a pause longer than the interval, an append is not held back.
    let mut fastest = Duration::MAX;
    for i in 0..5 {
        tokio::time::sleep(interval * 2).await;
        let t = Instant::now();
        ml.append(Bytes::from(format!("late{i}"))).await.unwrap();
        fastest = fastest.min(t.elapsed());
    }
    assert!(
        fastest < interval,
        "fastest append after a pause {fastest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_arriving_during_the_interval_share_a_sync() {
    let (h, ml) = paced(Duration::from_millis(20)).await;
    let backend = h.backend.clone().unwrap();
    // Right after a sync started, ten appends 1 ms apart: without pacing
    // the first would be synced alone (and most of the rest one or two at
    // a time); with it they wait for the interval and share one sync.
    let s0 = backend.stats().syncs;
    let mut futs = Vec::new();
    for i in 0..10 {
        futs.push(ml.append(Bytes::from(format!("e{i}"))));
        std::thread::sleep(Duration::from_millis(1));
    }
    for f in futs {
        f.await.unwrap();
    }
    let syncs = backend.stats().syncs - s0;
    assert!(
        syncs <= 2,
        "10 appends within the interval took {syncs} syncs"
    );
}
