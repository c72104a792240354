//! Arbitrary bytes as the embedded metadata store's files (its log, and a snapshot
//! when the input has a second part), then the store is opened: recovery must refuse
//! (an error) or truncate a torn tail and open, never panic or loop; an opened store
//! must answer reads.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use strobe_metadata::{EmbeddedOptions, EmbeddedStore, MetadataStore as _};

fn dir() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap())
}

fuzz_target!(|data: &[u8]| {
    let parts = strobe_fuzz::split(data, 2);
    let dir = dir().path();
    let wal = dir.join(strobe_fuzz::METADATA_WAL);
    let snapshot = dir.join(strobe_fuzz::METADATA_SNAPSHOT);
    let _ = std::fs::remove_file(&snapshot);
    std::fs::write(&wal, parts.first().copied().unwrap_or_default()).unwrap();
    if let Some(snap) = parts.get(1) {
        std::fs::write(&snapshot, snap).unwrap();
    }
    strobe_fuzz::runtime().block_on(async {
        let Ok(store) = EmbeddedStore::open(
            dir,
            EmbeddedOptions {
                sync: false,
                ..Default::default()
            },
        ) else {
            return;
        };
        let _ = store.get("/admin/clusters/standalone").await;
        let _ = store.list_keys("/").await;
        drop(store);
        // A current-thread runtime runs spawned tasks only while the future it drives
        // waits: let the store's lease reaper see its cancellation and end, or every
        // run would leave one behind (the growth libFuzzer reported as global state).
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    });
});
