//! Arbitrary bytes as the file ledger's journal (one or two journal files), then the
//! backend is opened: recovery must refuse (an error) or truncate what is torn and
//! open, never panic or loop; an opened backend must open the topic and read back
//! every entry it says it has.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strobe_ledger::{FileBackend, FileBackendConfig, LedgerBackend as _, SyncMode};

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    std::fs::create_dir_all(&journal).unwrap();
    for (seq, part) in strobe_fuzz::split(data, 2).into_iter().enumerate() {
        std::fs::write(journal.join(strobe_fuzz::journal_name(seq as u64)), part).unwrap();
    }
    let cfg = FileBackendConfig {
        sync: SyncMode::Never,
        preallocate: false,
        journal_pool: 0,
        journal_file_bytes: 1 << 16,
        ..FileBackendConfig::new(dir.path())
    };
    let Ok(backend) = FileBackend::open(cfg) else {
        return;
    };
    strobe_fuzz::runtime().block_on(async {
        if let Ok((topic, recovered)) = backend.open_topic(strobe_fuzz::LEDGER_TOPIC, 0).await {
            for ledger in &recovered.ledgers {
                if ledger.entries > 0 {
                    let last = ledger.entries.min(10_000) - 1;
                    let _ = topic.read(ledger.ledger_id, 0, last).await;
                }
            }
            let _ = topic.close().await;
        }
    });
    let _ = backend.close();
});
