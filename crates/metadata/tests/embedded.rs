//! Durability of the embedded backend: what survives a restart, and what must not.

use std::io::Write;
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
    let mut f = std::fs::OpenOptions::new().append(true).open(&wal).unwrap();
    f.write_all(b"deadbeef {\"rev\":3,\"muts\":[{\"p\":{\"k\":\"/c\",")
        .unwrap();
    drop(f);
    {
        let s = EmbeddedStore::open(dir.path(), opts()).unwrap();
        assert_eq!(s.get("/b").await.unwrap().unwrap().value, b"2");
        assert_eq!(s.get("/c").await.unwrap(), None);
        s.put("/c", b"3", Expect::Absent).await.unwrap();
        s.put("/d", b"4", Expect::Absent).await.unwrap();
    }
    // Damage a record that is followed by a good one: that is corruption, not a torn write.
    let text = std::fs::read_to_string(&wal).unwrap();
    assert_eq!(text.lines().count(), 2);
    let damaged = text.replacen("\"/c\"", "\"/x\"", 1);
    std::fs::write(&wal, damaged).unwrap();
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
    let wal_lines = std::fs::read_to_string(dir.path().join("wal"))
        .unwrap()
        .lines()
        .count();
    // A snapshot comes after `snapshot_every` records and at least as many as there are keys
    // (7 here).
    assert!(
        wal_lines < 7,
        "log truncated at snapshots ({wal_lines} lines)"
    );
    let s = EmbeddedStore::open(dir.path(), o).unwrap();
    assert_eq!(s.get("/k/0").await.unwrap(), None);
    assert_eq!(s.get("/k/1").await.unwrap().unwrap().value, b"22");
    assert_eq!(s.list_children("/k").await.unwrap().len(), 6);
    assert_eq!(s.revision(), 24);
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
