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
    LedgerBackend, LedgerConfig, LedgerError, ManagedLedger, ObjectBackend, ObjectBackendConfig,
    Position, StorageUrl,
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
