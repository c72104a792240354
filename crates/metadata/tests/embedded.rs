//! Durability of the embedded backend: what survives a restart, and what must not.

use std::time::Duration;

use strobe_metadata::{EmbeddedOptions, EmbeddedStore, Expect, MetadataError, MetadataStore, Op};

fn opts() -> EmbeddedOptions {
    EmbeddedOptions::default()
}

#[tokio::test]
async fn data_and_versions_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, rev) = {
        let s = EmbeddedStore::open(dir.path(), opts()).unwrap();
        s.put("/a", b"1", Expect::Absent).await.unwrap();
        let v1 = s.put("/a", b"2", Expect::Any).await.unwrap();
        s.txn(vec![Op::put("/b", "b"), Op::put("/c", "c")])
            .await
            .unwrap();
        s.delete("/c", None).await.unwrap();
        (v1, s.revision())
    };
    let s = EmbeddedStore::open(dir.path(), opts()).unwrap();
    let a = s.get("/a").await.unwrap().unwrap();
    assert_eq!(a.value, b"2");
    assert_eq!(a.stat, v1, "version and creation revision are durable");
    assert_eq!(s.get("/b").await.unwrap().unwrap().value, b"b");
    assert_eq!(s.get("/c").await.unwrap(), None);
    assert_eq!(s.revision(), rev);
    // CAS against the pre-restart version still works, and revisions keep growing.
    let v2 = s
        .put("/a", b"3", Expect::Version(v1.version))
        .await
        .unwrap();
    assert!(v2.version > rev);
}

#[tokio::test]
async fn ephemeral_keys_do_not_survive_the_process() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = EmbeddedStore::open(dir.path(), opts()).unwrap();
        let lease = s.grant_lease(Duration::from_secs(30)).await.unwrap().id;
        s.put_ephemeral("/owner", b"me", Expect::Absent, lease)
            .await
            .unwrap();
        s.put("/kept", b"k", Expect::Absent).await.unwrap();
        // The process "dies" here: the store goes away without revoking the lease.
    }
    let s = EmbeddedStore::open(dir.path(), opts()).unwrap();
    assert_eq!(
        s.get("/owner").await.unwrap(),
        None,
        "ephemeral key gone after restart"
    );
    assert!(s.get("/kept").await.unwrap().is_some());
    // The key can be re-created, with a fresh creation revision.
    let st = s.put("/owner", b"new", Expect::Absent).await.unwrap();
    assert_eq!(st.created, st.version);
    drop(s);
    let s = EmbeddedStore::open(dir.path(), opts()).unwrap();
    assert_eq!(s.get("/owner").await.unwrap().unwrap().stat, st);
}

/// The log's records: the file up to its zero-filled space (the log is written into space
/// allocated ahead of it).
fn log_text(wal: &std::path::Path) -> String {
    let bytes = std::fs::read(wal).unwrap();
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8(bytes[..end].to_vec()).unwrap()
}

/// Writes `bytes` where the log's records end, as an append would.
fn write_at_log_end(wal: &std::path::Path, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let at = log_text(wal).len() as u64;
    let f = std::fs::OpenOptions::new().write(true).open(wal).unwrap();
    f.write_all_at(bytes, at).unwrap();
}

#[tokio::test]
async fn torn_tail_is_dropped_but_inner_corruption_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = EmbeddedStore::open(dir.path(), opts()).unwrap();
        s.put("/a", b"1", Expect::Any).await.unwrap();
        s.put("/b", b"2", Expect::Any).await.unwrap();
    }
    // A crash in the middle of an append leaves half a record.
    let wal = dir.path().join("wal");
    write_at_log_end(&wal, b"deadbeef {\"rev\":3,\"muts\":[{\"p\":{\"k\":\"/c\",");
    {
        let s = EmbeddedStore::open(dir.path(), opts()).unwrap();
        assert_eq!(s.get("/b").await.unwrap().unwrap().value, b"2");
        assert_eq!(s.get("/c").await.unwrap(), None);
        s.put("/c", b"3", Expect::Absent).await.unwrap();
        s.put("/d", b"4", Expect::Absent).await.unwrap();
    }
    // Damage a record that is followed by a good one: that is corruption, not a torn write.
    // The two new records, written over the torn one (its tail is left behind them).
    let text = log_text(&wal);
    assert!(text.starts_with(|c: char| c.is_ascii_hexdigit()), "{text}");
    assert!(text.lines().nth(1).unwrap().contains("\"/d\""), "{text}");
    let damaged = text.replacen("\"/c\"", "\"/x\"", 1);
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes[..damaged.len()].copy_from_slice(damaged.as_bytes());
    std::fs::write(&wal, bytes).unwrap();
    match EmbeddedStore::open(dir.path(), opts()) {
        Err(MetadataError::Corrupt { reason, .. }) => {
            assert!(reason.contains("checksum"), "{reason}")
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[tokio::test]
async fn snapshots_compact_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let o = EmbeddedOptions {
        snapshot_every: 5,
        ..opts()
    };
    let wal = dir.path().join("wal");
    {
        let s = EmbeddedStore::open(dir.path(), o.clone()).unwrap();
        for i in 0..23u32 {
            s.put(
                &format!("/k/{}", i % 7),
                i.to_string().as_bytes(),
                Expect::Any,
            )
            .await
            .unwrap();
        }
        s.delete("/k/0", None).await.unwrap();
    }
    // A snapshot comes after `snapshot_every` records and at least as many as there are keys
    // (7 here); the log starts again at its beginning, in the same space.
    let allocated = std::fs::metadata(&wal).unwrap().len();
    assert_eq!(allocated, 16 << 20, "the log's space is reused");
    let s = EmbeddedStore::open(dir.path(), o).unwrap();
    assert_eq!(s.get("/k/0").await.unwrap(), None);
    assert_eq!(s.get("/k/1").await.unwrap().unwrap().value, b"22");
    assert_eq!(s.list_children("/k").await.unwrap().len(), 6);
    assert_eq!(s.revision(), 24);
}

/// After a snapshot the log is written over its earlier generation's records: a crash leaves
/// the new records, maybe a torn one, then old ones. Recovery takes the new records and no
/// old one (an old record applied again would undo a newer write).
#[tokio::test]
async fn old_records_left_in_the_reused_log_are_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let o = EmbeddedOptions {
        snapshot_every: 8,
        ..opts()
    };
    let wal = dir.path().join("wal");
    {
        let s = EmbeddedStore::open(dir.path(), o.clone()).unwrap();
        // Long records first (a generation that reaches far), then short ones over them.
        let long = vec![b'v'; 4000];
        for i in 0..7u32 {
            s.put(&format!("/k/{i}"), &long, Expect::Any).await.unwrap();
        }
        for i in 0..10u32 {
            s.put("/k/0", i.to_string().as_bytes(), Expect::Any)
                .await
                .unwrap();
        }
        s.delete("/k/1", None).await.unwrap();
    }
    let text = log_text(&wal);
    assert!(
        text.lines().count() >= 4,
        "the new generation's records are followed by old ones: {text:.200}"
    );
    {
        let s = EmbeddedStore::open(dir.path(), o.clone()).unwrap();
        assert_eq!(s.get("/k/0").await.unwrap().unwrap().value, b"9");
        assert_eq!(s.get("/k/1").await.unwrap(), None);
        assert_eq!(s.get("/k/2").await.unwrap().unwrap().value.len(), 4000);
        assert_eq!(s.revision(), 18);
    }
    // Recovery snapshotted: the next records go over the start of the log again. One of them
    // torn by a crash, in the middle of the old records.
    {
        let s = EmbeddedStore::open(dir.path(), o.clone()).unwrap();
        s.put("/k/0", b"9", Expect::Any).await.unwrap();
    }
    let text = log_text(&wal);
    let first = text.lines().next().unwrap().len() + 1;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
        f.write_all_at(b"0badc0de {\"rev\":", first as u64).unwrap();
    }
    let s = EmbeddedStore::open(dir.path(), o).unwrap();
    assert_eq!(s.get("/k/0").await.unwrap().unwrap().value, b"9");
    assert_eq!(s.get("/k/1").await.unwrap(), None);
    assert_eq!(s.revision(), 19);
}

#[tokio::test]
async fn a_directory_has_one_owner() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path(), opts()).unwrap();
    assert!(matches!(
        EmbeddedStore::open(dir.path(), opts()),
        Err(MetadataError::DirectoryLocked(_))
    ));
    drop(s);
    EmbeddedStore::open(dir.path(), opts()).expect("reopens once the owner is gone");
}

#[tokio::test]
async fn watch_older_than_history_is_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(
        dir.path(),
        EmbeddedOptions {
            history: 3,
            sync: false,
            ..opts()
        },
    )
    .unwrap();
    for i in 0..10 {
        s.put(&format!("/h/{i}"), b"v", Expect::Any).await.unwrap();
    }
    assert!(matches!(
        s.watch("/h/", 2).await,
        Err(MetadataError::Compacted { .. })
    ));
    let mut w = s.watch("/h/", 8).await.unwrap();
    assert_eq!(w.next().await.unwrap().unwrap().revision, 8);
}
