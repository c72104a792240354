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
    // 64 KiB journal files: many rotations and checkpoints during the suite.
    run(&mut File::new(SyncMode::Always, 64 << 10, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backend_sync_interval() {
    run(&mut File::new(SyncMode::Interval(5), 1 << 20, false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backend_sync_never() {
    run(&mut File::new(SyncMode::Never, 1 << 20, false)).await;
}
