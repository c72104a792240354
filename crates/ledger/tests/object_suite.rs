//! The object-store backend: the shared suite on an in-memory store, on a
//! local directory (as a shared directory is used) and on a real S3 server
//! (moto, started by tests/run-all.sh), plus fencing between two writers of
//! one store, as two brokers of a cluster would be.
#![cfg(feature = "object")]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;
use strobe_ledger::testing::{Harness, cases};
use strobe_ledger::{
    InitialPosition, LedgerBackend, LedgerConfig, LedgerError, ManagedLedger, ObjectBackend,
    ObjectBackendConfig, Position, StorageUrl,
};

struct Objects {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    cfg: ObjectBackendConfig,
    backend: Arc<ObjectBackend>,
}

impl Objects {
    fn new(store: Arc<dyn ObjectStore>, prefix: &str, cfg: ObjectBackendConfig) -> Objects {
        let prefix = Path::from(prefix);
        let backend = Arc::new(ObjectBackend::new(
            store.clone(),
            prefix.clone(),
            cfg.clone(),
        ));
        Objects {
            store,
            prefix,
            cfg,
            backend,
        }
    }

    /// A second writer over the same store (another broker).
    fn another(&self) -> Arc<ObjectBackend> {
        Arc::new(ObjectBackend::new(
            self.store.clone(),
            self.prefix.clone(),
            self.cfg.clone(),
        ))
    }
}

impl Harness for Objects {
    fn backend(&self) -> Arc<dyn LedgerBackend> {
        self.backend.clone()
    }
    fn crash_restart(&mut self) {
        self.backend = self.another();
    }
}

async fn run(h: &mut dyn Harness) {
    for (name, case) in cases() {
        eprintln!("case {name}");
        case(h).await;
    }
}

fn in_memory(cfg: ObjectBackendConfig) -> Objects {
    Objects::new(Arc::new(object_store::memory::InMemory::new()), "", cfg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_backend_in_memory() {
    run(&mut in_memory(ObjectBackendConfig::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_backend_checkpoints_every_flush_and_tiny_puts() {
    // A checkpoint after every put, at most one entry per put and a cache of
    // one object: recovery from checkpoints and reads from the store.
    run(&mut in_memory(ObjectBackendConfig {
        checkpoint_every: 1,
        max_batch_bytes: 1,
        cache_bytes: 1,
        ..ObjectBackendConfig::default()
    }))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_backend_on_a_shared_directory() {
    let dir = tempfile::tempdir().unwrap();
    let url = StorageUrl::File(dir.path().join("shared"));
    // Through the factory, as a cluster broker opens it (the probe included).
    strobe_ledger::open_shared_backend(&url, ObjectBackendConfig::default())
        .await
        .unwrap();
    let fs = object_store::local::LocalFileSystem::new_with_prefix(dir.path().join("shared"))
        .unwrap()
        .with_fsync(true);
    run(&mut Objects::new(
        Arc::new(fs),
        "",
        ObjectBackendConfig {
            checkpoint_every: 3,
            ..ObjectBackendConfig::default()
        },
    ))
    .await;
    assert!(dir.path().join("shared/topics").is_dir());
}

fn cfg(fence: u64) -> LedgerConfig {
    LedgerConfig {
        fence,
        trim_interval: None,
        cursor_flush_interval: Duration::from_secs(3600),
        ..LedgerConfig::default()
    }
}

/// Two writers of one store, as two brokers: the newer one seals the log, the
/// older one's next flush fails `Fenced` and is never acknowledged, and the
/// log holds exactly what was acknowledged.
async fn fencing_between_writers(h: &Objects) {
    let a = h.backend.clone();
    let b = h.another();
    let topic = "persistent://t/n/fenced";
    let old = ManagedLedger::open(&*a, topic, cfg(10)).await.unwrap();
    let mut acked = Vec::new();
    for i in 0..20u32 {
        let p = old.append(Bytes::from(format!("a-{i}"))).await.unwrap();
        acked.push((p, format!("a-{i}")));
    }
    // B takes over (its open seals the log); A has not noticed yet.
    let new = ManagedLedger::open(&*b, topic, cfg(11)).await.unwrap();
    let refused = old.append(Bytes::from_static(b"a-late")).await;
    match refused {
        Err(LedgerError::Fenced { token, current, .. }) => assert_eq!((token, current), (10, 11)),
        other => panic!("the old writer's append after the seal: {other:?}"),
    }
    assert!(old.failure().is_some(), "a fenced ledger stays failed");
    assert!(old.append(Bytes::from_static(b"a-later")).await.is_err());
    for i in 0..5u32 {
        let p = new.append(Bytes::from(format!("b-{i}"))).await.unwrap();
        acked.push((p, format!("b-{i}")));
    }
    // An opener older than the newest writer is refused.
    drop(old);
    match ManagedLedger::open(&*a, topic, cfg(10)).await {
        Err(LedgerError::Fenced { .. }) => {}
        other => panic!("a stale reopen: {:?}", other.map(|_| ())),
    }
    new.close().await.unwrap();
    // A third writer sees exactly what was acknowledged, in order.
    let c = h.another();
    let third = ManagedLedger::open(&*c, topic, cfg(12)).await.unwrap();
    let all = third.read(Position::EARLIEST, 1000).await.unwrap();
    let got: Vec<(Position, String)> = all
        .iter()
        .map(|e| (e.position, String::from_utf8(e.data.to_vec()).unwrap()))
        .collect();
    assert_eq!(got, acked);
    third.close().await.unwrap();
}

/// An older writer wins the slot a newer one wanted for its seal: its object
/// is part of the log, and the seal goes to the next slot.
async fn a_racing_flush_before_the_seal_is_kept(h: &Objects) {
    let a = h.backend.clone();
    let b = h.another();
    let topic = "persistent://t/n/race";
    let old = ManagedLedger::open(&*a, topic, cfg(20)).await.unwrap();
    old.append(Bytes::from_static(b"first")).await.unwrap();
    // Many appends in flight while B opens: some land before the seal,
    // the rest fail; every acknowledged one must be in B's log.
    let futs: Vec<_> = (0..200)
        .map(|i| old.append(Bytes::from(format!("x-{i}"))))
        .collect();
    let opening = ManagedLedger::open(&*b, topic, cfg(21));
    let (new, results) = tokio::join!(opening, futures::future::join_all(futs));
    let new = new.unwrap();
    let mut acked = vec!["first".to_string()];
    let mut refused = 0;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(_) => acked.push(format!("x-{i}")),
            Err(LedgerError::Fenced { .. }) => refused += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    let got: Vec<String> = new
        .read(Position::EARLIEST, 1000)
        .await
        .unwrap()
        .iter()
        .map(|e| String::from_utf8(e.data.to_vec()).unwrap())
        .collect();
    assert_eq!(got, acked, "{refused} refused");
    drop(old);
    new.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_in_memory() {
    let h = in_memory(ObjectBackendConfig::default());
    fencing_between_writers(&h).await;
    a_racing_flush_before_the_seal_is_kept(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_on_a_shared_directory() {
    let dir = tempfile::tempdir().unwrap();
    let fs = object_store::local::LocalFileSystem::new_with_prefix(dir.path())
        .unwrap()
        .with_fsync(true);
    let h = Objects::new(Arc::new(fs), "", ObjectBackendConfig::default());
    fencing_between_writers(&h).await;
    a_racing_flush_before_the_seal_is_kept(&h).await;
}

/// A faulty store in front of a good one: its first `lose` puts of log
/// objects land but report an error (a response lost on the way back), and
/// with `ignore_create` it overwrites on create-only puts, as some S3 servers do.
#[derive(Debug, Default)]
struct Faulty {
    inner: object_store::memory::InMemory,
    lose: std::sync::atomic::AtomicU32,
    ignore_create: bool,
}

impl std::fmt::Display for Faulty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Faulty")
    }
}

#[async_trait::async_trait]
impl ObjectStore for Faulty {
    async fn put_opts(
        &self,
        location: &Path,
        payload: object_store::PutPayload,
        mut opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        if self.ignore_create {
            opts.mode = object_store::PutMode::Overwrite;
        }
        let r = self.inner.put_opts(location, payload, opts).await;
        let lose = || {
            self.lose
                .fetch_update(
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                    |n| n.checked_sub(1),
                )
                .is_ok()
        };
        if r.is_ok() && location.as_ref().contains("/log/") && lose() {
            return Err(object_store::Error::Generic {
                store: "test",
                source: "connection reset after the put landed".into(),
            });
        }
        r
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.inner.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }
    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

fn log_dir(topic: &str) -> Path {
    // Topic names here are plain, so their escaped segment is the name itself.
    Path::from(format!("t/topics/{topic}/log").as_str())
}

async fn list(store: &dyn ObjectStore, dir: &Path) -> Vec<Path> {
    use futures::TryStreamExt;
    store
        .list(Some(dir))
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .unwrap()
}

fn fenced_total(b: &ObjectBackend) -> u64 {
    match b
        .engine_stats()
        .into_iter()
        .find(|m| m.name == "strobe_storage_object_fenced_total")
        .map(|m| m.value)
    {
        Some(strobe_ledger::MetricValue::Int(n)) => n,
        other => panic!("no fenced counter: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_put_that_had_landed_is_the_writers_own() {
    // The seal's and two data puts' responses are lost after they landed:
    // each retry finds its own put id in the slot and carries on.
    let store = Arc::new(Faulty {
        lose: 3.into(),
        ..Faulty::default()
    });
    let b = ObjectBackend::new(
        store.clone(),
        Path::from("t"),
        ObjectBackendConfig::default(),
    );
    let ml = ManagedLedger::open(&b, "retry", cfg(1)).await.unwrap();
    let mut ps = Vec::new();
    for i in 0..5u32 {
        ps.push(ml.append(Bytes::from(format!("r{i}"))).await.unwrap());
    }
    assert_eq!(store.lose.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(
        fenced_total(&b),
        0,
        "its own retried puts are not a newer writer"
    );
    ml.close().await.unwrap();
    drop(ml);
    let ml = ManagedLedger::open(&b, "retry", cfg(1)).await.unwrap();
    let all = ml.read(Position::EARLIEST, 10).await.unwrap();
    assert_eq!(all.iter().map(|e| e.position).collect::<Vec<_>>(), ps);
    ml.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_refuses_a_store_that_ignores_create_only() {
    let good: Arc<dyn ObjectStore> = Arc::new(Faulty::default());
    strobe_ledger::probe_create_only(&good, &Path::from("p"))
        .await
        .unwrap();
    let bad: Arc<dyn ObjectStore> = Arc::new(Faulty {
        ignore_create: true,
        ..Faulty::default()
    });
    let e = strobe_ledger::probe_create_only(&bad, &Path::from("p"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("ignores create-only puts"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_object_is_corrupt_not_wrong_data() {
    use object_store::ObjectStoreExt;
    let store = Arc::new(object_store::memory::InMemory::new());
    let small = ObjectBackendConfig {
        checkpoint_every: 1000,
        cache_bytes: 0,
        ..ObjectBackendConfig::default()
    };
    let b = ObjectBackend::new(store.clone(), Path::from("t"), small.clone());
    let ml = ManagedLedger::open(&b, "dmg", cfg(1)).await.unwrap();
    let p = ml.append(Bytes::from_static(b"precious")).await.unwrap();
    // The seal is at slot 0, the data at slot 1: flip one byte of it.
    let key = log_dir("dmg").join(format!("{:020}", 1).as_str());
    let mut bytes = store
        .get(&key)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    store.put(&key, bytes.into()).await.unwrap();
    let e = ml.read(p, 1).await.unwrap_err();
    assert!(matches!(e, LedgerError::Corrupt { .. }), "{e:?}");
    drop(ml);
    // Recovery (no checkpoint was written) reads the object too, and refuses it.
    let fresh = ObjectBackend::new(store, Path::from("t"), small);
    let e = ManagedLedger::open(&fresh, "dmg", cfg(1))
        .await
        .unwrap_err();
    assert!(matches!(e, LedgerError::Corrupt { .. }), "{e:?}");
}

/// A close writes no checkpoint while the next open would read only a few objects past the
/// newest one (a broker's shutdown hands its topics over one close after another), and writes
/// one past that; either way the next owner finds every entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_leaves_a_few_objects_past_the_checkpoint_and_the_next_open_reads_them() {
    let store = Arc::new(object_store::memory::InMemory::new());
    let backend = |fence| {
        (
            ObjectBackend::new(
                store.clone(),
                Path::from("t"),
                ObjectBackendConfig::default(),
            ),
            cfg(fence),
        )
    };
    let dir = Path::from("t/topics/few/checkpoint");
    let checkpoints = || list(&*store, &dir);
    let (b, c) = backend(1);
    let ml = ManagedLedger::open(&b, "few", c).await.unwrap();
    let mut ps = Vec::new();
    for i in 0..2u32 {
        ps.push(ml.append(Bytes::from(format!("f{i}"))).await.unwrap());
    }
    ml.close().await.unwrap();
    drop(ml);
    // A seal and two data objects: the close left them for the next open.
    assert_eq!(list(&*store, &log_dir("few")).await.len(), 3);
    assert!(checkpoints().await.is_empty());
    // The next owner (another broker, a higher token) reads them, adds its seal and three more.
    let (b, c) = backend(2);
    let ml = ManagedLedger::open(&b, "few", c).await.unwrap();
    let read = ml.read(Position::EARLIEST, 100).await.unwrap();
    assert_eq!(read.iter().map(|e| e.position).collect::<Vec<_>>(), ps);
    for i in 2..5u32 {
        ps.push(ml.append(Bytes::from(format!("f{i}"))).await.unwrap());
    }
    ml.close().await.unwrap();
    drop(ml);
    // Seven objects past none: this close wrote a checkpoint.
    assert_eq!(checkpoints().await.len(), 1);
    let (b, c) = backend(3);
    let ml = ManagedLedger::open(&b, "few", c).await.unwrap();
    let read = ml.read(Position::EARLIEST, 100).await.unwrap();
    assert_eq!(read.iter().map(|e| e.position).collect::<Vec<_>>(), ps);
    assert_eq!(
        read.iter().map(|e| e.data.clone()).collect::<Vec<_>>(),
        (0..5u32)
            .map(|i| Bytes::from(format!("f{i}")))
            .collect::<Vec<_>>()
    );
    ml.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimming_deletes_the_objects_of_deleted_ledgers() {
    let store = Arc::new(object_store::memory::InMemory::new());
    let b = ObjectBackend::new(
        store.clone(),
        Path::from("t"),
        ObjectBackendConfig::default(),
    );
    let c = LedgerConfig {
        max_entries_per_ledger: 2,
        ..cfg(1)
    };
    let ml = ManagedLedger::open(&b, "trim", c.clone()).await.unwrap();
    let mut ps = Vec::new();
    for i in 0..10u32 {
        // One at a time: one data object per entry.
        ps.push(ml.append(Bytes::from(format!("t{i}"))).await.unwrap());
    }
    // A seal and ten data objects.
    assert_eq!(list(&*store, &log_dir("trim")).await.len(), 11);
    // No cursors: every sealed ledger is consumed; the current one stays.
    let deleted = ml.trim().await.unwrap();
    assert_eq!(deleted.len(), 4, "{deleted:?}");
    let left = list(&*store, &log_dir("trim")).await;
    assert_eq!(
        left.len(),
        3,
        "the seal and the last ledger's two objects: {left:?}"
    );
    ml.close().await.unwrap();
    drop(ml);
    let fresh = ObjectBackend::new(
        store.clone(),
        Path::from("t"),
        ObjectBackendConfig::default(),
    );
    let ml = ManagedLedger::open(&fresh, "trim", c).await.unwrap();
    let all = ml.read(Position::EARLIEST, 100).await.unwrap();
    assert_eq!(
        all.iter().map(|e| e.position).collect::<Vec<_>>(),
        ps[8..].to_vec()
    );
    assert!(ml.stats().current_ledger_id > ps[9].ledger_id);
    ml.close().await.unwrap();
}

/// A reopened topic trims what its recovered cursors consumed at once, not
/// after the periodic trim interval (a topic that changes owners more often
/// than that would otherwise keep every ledger); one without cursors keeps
/// its ledgers until the periodic trim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_topic_trims_what_its_cursors_consumed_at_once() {
    let store = Arc::new(object_store::memory::InMemory::new());
    let backend = || {
        ObjectBackend::new(
            store.clone(),
            Path::from("t"),
            ObjectBackendConfig::default(),
        )
    };
    let c = LedgerConfig {
        max_entries_per_ledger: 2,
        trim_interval: Some(Duration::from_secs(3600)),
        ..cfg(1)
    };
    for (topic, with_cursor) in [("consumed", true), ("no-subscription", false)] {
        let b = backend();
        let ml = ManagedLedger::open(&b, topic, c.clone()).await.unwrap();
        let cursor = if with_cursor {
            Some(
                ml.open_cursor("sub", InitialPosition::Earliest)
                    .await
                    .unwrap(),
            )
        } else {
            None
        };
        let mut last = None;
        for i in 0..6u32 {
            last = Some(ml.append(Bytes::from(format!("e{i}"))).await.unwrap());
        }
        if let Some(cur) = &cursor {
            cur.mark_delete(last.unwrap());
        }
        drop(cursor);
        ml.close().await.unwrap();
        drop(ml);
        let b = backend();
        let ml = ManagedLedger::open(&b, topic, c.clone()).await.unwrap();
        let before = ml.stats().ledgers;
        assert!(before >= 4, "three full ledgers and a new one: {before}");
        let t0 = std::time::Instant::now();
        let wait = if with_cursor { 5000 } else { 300 };
        while ml.stats().ledgers > 1 && t0.elapsed() < Duration::from_millis(wait) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if with_cursor {
            assert_eq!(
                ml.stats().ledgers,
                1,
                "consumed ledgers trimmed at the open"
            );
        } else {
            assert_eq!(
                ml.stats().ledgers,
                before,
                "no cursor: nothing trimmed before the interval"
            );
        }
        ml.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_share_puts() {
    let store = Arc::new(object_store::memory::InMemory::new());
    let grouped = ObjectBackendConfig {
        flush_delay: Duration::from_millis(5),
        max_batch_bytes: 1 << 10,
        ..ObjectBackendConfig::default()
    };
    let b = ObjectBackend::new(store.clone(), Path::from("t"), grouped);
    let ml = ManagedLedger::open(&b, "group", cfg(1)).await.unwrap();
    let futs: Vec<_> = (0..200u32)
        .map(|i| ml.append(Bytes::from(format!("{i:08}"))))
        .collect();
    let mut ps = Vec::new();
    for f in futs {
        ps.push(f.await.unwrap());
    }
    // 200 entries of 8 bytes, at most 1 KiB a put: a few puts, far fewer
    // than one per entry (plus the seal).
    let objects = list(&*store, &log_dir("group")).await.len();
    assert!((3..=20).contains(&objects), "{objects} log objects");
    let all = ml.read(Position::EARLIEST, 1000).await.unwrap();
    assert_eq!(all.iter().map(|e| e.position).collect::<Vec<_>>(), ps);
    ml.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_snapshots_land_in_the_order_they_were_taken() {
    let store = Arc::new(object_store::memory::InMemory::new());
    let b = ObjectBackend::new(
        store.clone(),
        Path::from("t"),
        ObjectBackendConfig::default(),
    );
    let (st, _) = b.open_topic("cur", 1).await.unwrap();
    let older = st.persist_cursor("c", Some(Bytes::from_static(b"older")));
    let newer = st.persist_cursor("c", Some(Bytes::from_static(b"newer")));
    // The newer snapshot reaches the store first; the older must not overwrite it.
    newer.await.unwrap();
    older.await.unwrap();
    st.close().await.unwrap();
    drop(st);
    let (st, rec) = b.open_topic("cur", 1).await.unwrap();
    assert_eq!(
        rec.cursors,
        vec![("c".to_string(), Bytes::from_static(b"newer"))]
    );
    st.close().await.unwrap();
}

/// Creates a bucket on the S3 server at `endpoint` (moto takes an
/// unauthenticated PUT of the bucket).
fn create_bucket(endpoint: &str, bucket: &str) {
    use std::io::{Read, Write};
    let hostport = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut s = std::net::TcpStream::connect(&hostport).expect("connect to the S3 server");
    write!(
        s,
        "PUT /{bucket} HTTP/1.1\r\nHost: {hostport}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(
        reply.starts_with("HTTP/1.1 200"),
        "creating bucket {bucket}: {reply}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_backend_against_moto() {
    let Ok(endpoint) = std::env::var("STROBE_TEST_S3_ENDPOINT") else {
        panic!(
            "STROBE_TEST_S3_ENDPOINT must name an S3 server (http://127.0.0.1:PORT): \
             run tests/run-all.sh, which starts moto"
        );
    };
    let bucket = format!("strobe-test-{}", std::process::id());
    create_bucket(&endpoint, &bucket);
    // The broker gives object_store's HTTP client the ring provider; so does the test.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(&bucket)
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .build()
        .unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(s3);
    strobe_ledger::probe_create_only(&store, &Path::from("probe"))
        .await
        .expect("moto honours If-None-Match");
    let mut h = Objects::new(store, "suite", ObjectBackendConfig::default());
    run(&mut h).await;
    fencing_between_writers(&h).await;
    a_racing_flush_before_the_seal_is_kept(&h).await;
}
