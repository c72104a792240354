//! The shared suite, run against every backend.

use std::sync::Arc;

use strobe_ledger::testing::{Harness, cases};
use strobe_ledger::{FileBackend, FileBackendConfig, LedgerBackend, MemoryBackend, SyncMode};

struct Memory(MemoryBackend);

impl Harness for Memory {
    fn backend(&self) -> Arc<dyn LedgerBackend> {
        Arc::new(self.0.clone())
    }
    fn crash_restart(&mut self) {}
}

struct File {
    dir: tempfile::TempDir,
    cfg: FileBackendConfig,
    backend: Option<Arc<FileBackend>>,
}

impl File {
    fn new(sync: SyncMode, journal_file_bytes: u64) -> File {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = FileBackendConfig::new(dir.path());
        cfg.sync = sync;
        cfg.journal_file_bytes = journal_file_bytes;
        cfg.journal_pool = 1;
        let backend = Some(Arc::new(FileBackend::open(cfg.clone()).unwrap()));
        File { dir, cfg, backend }
    }
}

impl Harness for File {
    fn backend(&self) -> Arc<dyn LedgerBackend> {
        self.backend.clone().unwrap()
    }
    fn crash_restart(&mut self) {
        // Dropping stops the threads without a final checkpoint: the next
        // open has to recover from the journal.
        let b = self.backend.take().unwrap();
        assert_eq!(Arc::strong_count(&b), 1, "every ledger must be dropped");
        drop(b);
        let _ = self.dir.path();
        self.backend = Some(Arc::new(FileBackend::open(self.cfg.clone()).unwrap()));
    }
}

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
    run(&mut File::new(SyncMode::Always, 1 << 20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backend_small_journal_files() {
    // 64 KiB journal files: many rotations and checkpoints during the suite.
    run(&mut File::new(SyncMode::Always, 64 << 10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backend_sync_interval() {
    run(&mut File::new(SyncMode::Interval(5), 1 << 20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backend_sync_never() {
    run(&mut File::new(SyncMode::Never, 1 << 20)).await;
}
