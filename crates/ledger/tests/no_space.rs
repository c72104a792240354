//! A full disk under the file backend (issue 48): appends that meet ENOSPC (in their
//! segment's write-behind, the journal's next file, the journal itself) wait for space
//! instead of failing, no topic refuses service, and every entry is there once space is
//! free, before and after a crash. Before, the first failed segment write made the topic
//! refuse service for good and a failed journal write stopped the backend's writes.
//!
//! The backend's directory is a small tmpfs (`strobe_ledger::test_fs`): the test needs
//! root to mount it, and fails without it rather than skip.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::read_all;
use strobe_ledger::disk::storage_full_errors;
use strobe_ledger::test_fs::Tmpfs;
use strobe_ledger::{FileBackend, FileBackendConfig, LedgerConfig, ManagedLedger, SyncMode};

fn entry(i: usize) -> Bytes {
    Bytes::from(format!("entry {i:05} ").repeat(1500))
}

fn config(dir: PathBuf) -> FileBackendConfig {
    let mut cfg = FileBackendConfig::new(dir);
    cfg.sync = SyncMode::Always;
    cfg.journal_file_bytes = 1 << 20;
    cfg.journal_pool = 1;
    cfg.preallocate = true;
    cfg.checkpoint_interval = Duration::from_millis(200);
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_on_a_full_disk_wait_for_space_and_none_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(dir.path(), "16m");
    let cfg = config(fs.path().join("data"));
    let b = Arc::new(FileBackend::open(cfg.clone()).unwrap());
    let ml = ManagedLedger::open(&*b, "t", LedgerConfig::default())
        .await
        .unwrap();
    for i in 0..20 {
        ml.append(entry(i)).await.unwrap();
    }
    let filler = fs.fill("filler");
    let errors = storage_full_errors();
    // 200 entries of 18 KB: more than the journal's file and its spare hold, so the
    // journal must grow into space there is not.
    let pending: Vec<_> = (20..220).map(|i| ml.append(entry(i))).collect();
    let all = futures::future::join_all(pending);
    tokio::pin!(all);
    tokio::select! {
        r = &mut all => panic!(
            "every append finished on a full disk ({} failed)",
            r.iter().filter(|r| r.is_err()).count()
        ),
        _ = tokio::time::sleep(Duration::from_secs(2)) => {}
    }
    assert!(
        storage_full_errors() > errors,
        "no write met ENOSPC: the test did not fill the disk"
    );
    assert!(ml.failure().is_none(), "{:?}", ml.failure());
    std::fs::remove_file(&filler).unwrap();
    let results = tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .expect("the appends finish once space is free");
    for r in results {
        r.unwrap();
    }
    let want: Vec<Bytes> = (0..220).map(entry).collect();
    assert_eq!(read_all(&ml).await, want);
    // More appends go on as usual.
    ml.append(entry(220)).await.unwrap();
    drop(ml);
    // A crash: the next open recovers everything from the journal and segments.
    assert_eq!(Arc::strong_count(&b), 1);
    drop(b);
    let b = Arc::new(FileBackend::open(cfg).unwrap());
    let ml = ManagedLedger::open(&*b, "t", LedgerConfig::default())
        .await
        .unwrap();
    let want: Vec<Bytes> = (0..221).map(entry).collect();
    assert_eq!(read_all(&ml).await, want);
}
