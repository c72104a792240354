//! A journal that cannot open its next file for want of file descriptors keeps writing the
//! current one (it grows past its size) and rolls once a descriptor is free: appends go on, and
//! everything appended is there after a crash. Before, the failed roll stopped the file
//! backend's writes for good. (The only test of this binary: it lowers the process's limit.)

mod common;

use bytes::Bytes;
use common::{File, read_all};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use strobe_ledger::{LedgerConfig, ManagedLedger, SyncMode};

fn open_files() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_go_on_while_the_journal_cannot_roll() {
    // 64 KiB journal files: 300 entries of 1 KiB need several rolls.
    let mut h = File::new(SyncMode::Always, 64 << 10, false);
    let cfg = LedgerConfig::default();
    let ml = ManagedLedger::open(&*h.backend.clone().unwrap(), "t", cfg.clone())
        .await
        .unwrap();
    let entry = |i: usize| Bytes::from(format!("{i:04}").repeat(256));
    ml.append(entry(0)).await.unwrap();
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    // Every descriptor in use: the next open fails with EMFILE (the read_dir's own is closed).
    setrlimit(Resource::RLIMIT_NOFILE, open_files() - 1, hard).unwrap();
    let mut appended = 1;
    let mut during = Ok(());
    for i in 1..300 {
        if let Err(e) = ml.append(entry(i)).await {
            during = Err(e);
            break;
        }
        appended += 1;
    }
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    during.expect("appends go on while the journal cannot roll");
    for i in 300..350 {
        ml.append(entry(i)).await.unwrap();
        appended += 1;
    }
    assert_eq!(appended, 350);
    drop(ml);
    h.crash();
    h.start().unwrap();
    let ml = ManagedLedger::open(&*h.backend.clone().unwrap(), "t", cfg)
        .await
        .unwrap();
    let got = read_all(&ml).await;
    let want: Vec<Bytes> = (0..350).map(entry).collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "what was appended is what is read");
}
