//! Harnesses shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use bytes::Bytes;
use strobe_ledger::testing::Harness;
use strobe_ledger::{
    FileBackend, FileBackendConfig, LedgerBackend, ManagedLedger, MemoryBackend, Position, SyncMode,
};

pub struct Memory(pub MemoryBackend);

impl Harness for Memory {
    fn backend(&self) -> Arc<dyn LedgerBackend> {
        Arc::new(self.0.clone())
    }
    fn crash_restart(&mut self) {}
}

pub struct File {
    pub dir: tempfile::TempDir,
    pub cfg: FileBackendConfig,
    pub backend: Option<Arc<FileBackend>>,
}

impl File {
    pub fn new(sync: SyncMode, journal_file_bytes: u64, preallocate: bool) -> File {
        File::with(sync, journal_file_bytes, preallocate, |_| {})
    }

    /// Like [`File::new`], with further settings.
    pub fn with(
        sync: SyncMode,
        journal_file_bytes: u64,
        preallocate: bool,
        tweak: impl FnOnce(&mut FileBackendConfig),
    ) -> File {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = FileBackendConfig::new(dir.path());
        cfg.sync = sync;
        cfg.journal_file_bytes = journal_file_bytes;
        cfg.journal_pool = 1;
        cfg.preallocate = preallocate;
        tweak(&mut cfg);
        let backend = Some(Arc::new(FileBackend::open(cfg.clone()).unwrap()));
        File { dir, cfg, backend }
    }

    /// Stops the backend as a crash would (no final checkpoint).
    pub fn crash(&mut self) {
        let b = self.backend.take().unwrap();
        assert_eq!(Arc::strong_count(&b), 1, "every ledger must be dropped");
        drop(b);
    }

    /// Stops the backend cleanly (final checkpoint; the journal is recycled).
    pub fn shutdown(&mut self) {
        let b = self.backend.take().unwrap();
        b.close().unwrap();
        drop(b);
    }

    pub fn start(&mut self) -> strobe_ledger::Result<()> {
        self.backend = Some(Arc::new(FileBackend::open(self.cfg.clone())?));
        Ok(())
    }
}

impl Harness for File {
    fn backend(&self) -> Arc<dyn LedgerBackend> {
        self.backend.clone().unwrap()
    }
    fn crash_restart(&mut self) {
        self.crash();
        self.start().unwrap();
    }
}

/// Every entry of a ledger, read from the start 50 at a time.
pub async fn read_all(ml: &ManagedLedger) -> Vec<Bytes> {
    let mut from = Position::EARLIEST;
    let mut got = Vec::new();
    loop {
        let batch = ml.read(from, 50).await.unwrap();
        let Some(last) = batch.last() else {
            return got;
        };
        from = Position::new(last.position.ledger_id, last.position.entry_id + 1);
        got.extend(batch.into_iter().map(|e| e.data));
    }
}
