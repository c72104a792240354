//! The shared suite, run against every backend.

mod common;

use common::{File, Memory};
use strobe_ledger::testing::{Harness, cases};
use strobe_ledger::{MemoryBackend, SyncMode};

async fn run(h: &mut dyn Harness) {
    for (name, case) in cases() {
        eprintln!("case {name}");
        case(h).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_backend() {
    run(&mut Memory(MemoryBackend::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backend_sync_always() {
    run(&mut File::new(SyncMode::Always, 1 << 20, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backend_small_journal_files() {
    // 64 KiB journal files, a checkpoint on each: many rotations and
    // checkpoints during the suite.
    run(&mut File::with(SyncMode::Always, 64 << 10, true, |c| {
        c.checkpoint_bytes_per_topic = 0
    }))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backend_sync_interval() {
    run(&mut File::new(SyncMode::Interval(5), 1 << 20, false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backend_sync_never() {
    run(&mut File::new(SyncMode::Never, 1 << 20, false)).await;
}

/// A file harness that counts the entries written once, across restarts.
struct CountingFile(File, u64);

impl CountingFile {
    fn direct_entries(&self) -> u64 {
        self.1 + self.0.backend.as_ref().unwrap().stats().direct_entries
    }
}

impl Harness for CountingFile {
    fn backend(&self) -> std::sync::Arc<dyn strobe_ledger::LedgerBackend> {
        self.0.backend()
    }
    fn crash_restart(&mut self) {
        self.1 += self.0.backend.as_ref().unwrap().stats().direct_entries;
        self.0.crash_restart();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backend_write_once() {
    // Every group commit of a topic goes straight to its segment.
    let mut h = CountingFile(
        File::with(SyncMode::Always, 64 << 10, true, |c| {
            c.direct_write_bytes = 1
        }),
        0,
    );
    run(&mut h).await;
    assert!(h.direct_entries() > 50, "{}", h.direct_entries());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backend_write_once_threshold() {
    // Some group commits go straight to the segment, some through the journal.
    let mut h = CountingFile(
        File::with(SyncMode::Always, 1 << 20, false, |c| {
            c.direct_write_bytes = 64
        }),
        0,
    );
    run(&mut h).await;
    assert!(h.direct_entries() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backend_one_open_segment_file() {
    // Every segment file is closed after each use once synced and opened
    // again on the next: every case runs through the reopening paths.
    run(&mut File::with(SyncMode::Always, 64 << 10, true, |c| {
        c.checkpoint_bytes_per_topic = 0;
        c.max_open_segment_files = 1;
    }))
    .await;
}
