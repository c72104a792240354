//! The embedded store on a full disk (issue 48): a write whose log cannot grow is refused
//! and the store goes on; once space is free, writes succeed again and everything
//! written is there after a reopen. Before, the first such failure failed the store for
//! good ("store failed earlier").
//!
//! The store's directory is a small tmpfs (`strobe_ledger::test_fs`): the test needs root
//! to mount it, and fails without it rather than skip.

use strobe_ledger::test_fs::Tmpfs;
use strobe_metadata::{EmbeddedOptions, EmbeddedStore, Expect, MetadataStore};

#[tokio::test]
async fn a_log_that_cannot_grow_refuses_the_write_and_the_store_goes_on() {
    // Room for the reopen too, which writes the whole state as a snapshot.
    let root = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(root.path(), "96m");
    let dir = fs.path().join("metadata");
    let value = vec![7u8; 1 << 20];
    let mut stored = Vec::new();
    {
        let s = EmbeddedStore::open(&dir, EmbeddedOptions::default()).unwrap();
        s.put("/small", b"before", Expect::Any).await.unwrap();
        let filler = fs.fill("filler");
        // The log's preallocated space takes some; the first that needs more is refused.
        let mut refused = None;
        for i in 0..64 {
            let key = format!("/big/{i}");
            match s.put(&key, &value, Expect::Any).await {
                Ok(_) => stored.push(key),
                Err(e) => {
                    refused = Some(e.to_string());
                    break;
                }
            }
        }
        let refused = refused.expect("a write met the full disk");
        assert!(refused.contains("No space left"), "{refused}");
        // Not failed for good: reads answer, and once space is free writes succeed.
        assert_eq!(s.get("/small").await.unwrap().unwrap().value, b"before");
        std::fs::remove_file(&filler).unwrap();
        s.put("/small", b"after", Expect::Any).await.unwrap();
        s.put("/big/last", &value, Expect::Any).await.unwrap();
        stored.push("/big/last".into());
    }
    let s = EmbeddedStore::open(&dir, EmbeddedOptions::default()).unwrap();
    assert_eq!(s.get("/small").await.unwrap().unwrap().value, b"after");
    for key in &stored {
        assert_eq!(s.get(key).await.unwrap().unwrap().value, value, "{key}");
    }
}
