//! Helpers shared by the integration tests: store factories and a private etcd process.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use strobe_metadata::{EmbeddedOptions, EmbeddedStore, MetadataStore};

/// A fresh in-memory embedded store.
pub async fn embedded_memory() -> Arc<dyn MetadataStore> {
    Arc::new(EmbeddedStore::in_memory())
}

/// A fresh durable embedded store in a temporary directory (kept until the process exits).
pub async fn embedded_durable() -> Arc<dyn MetadataStore> {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).expect("open");
    // The directory must outlive the store; tests are short-lived processes.
    std::mem::forget(dir);
    Arc::new(store)
}

/// A root prefix unique to this process and call, so tests can share one etcd.
pub fn unique_root() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    format!(
        "/strobe-test-{}-{}-{}",
        std::process::id(),
        ms,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The etcd under test, from `ETCD_ENDPOINTS`. Panics (fails the test, never skips) without it.
pub fn etcd_endpoints() -> String {
    match std::env::var("ETCD_ENDPOINTS") {
        Ok(v) if !v.trim().is_empty() => v,
        _ => panic!(
            "ETCD_ENDPOINTS is not set. The etcd tests (feature `etcd`) need a real etcd, e.g.\n  \
             etcd --data-dir $(mktemp -d) --listen-client-urls http://127.0.0.1:23790 \
             --advertise-client-urls http://127.0.0.1:23790 --listen-peer-urls http://127.0.0.1:23791 &\n  \
             export ETCD_ENDPOINTS=http://127.0.0.1:23790"
        ),
    }
}

#[cfg(feature = "etcd")]
pub async fn etcd_store_at(endpoints: &str, root: &str) -> Arc<dyn MetadataStore> {
    use strobe_metadata::{EtcdOptions, EtcdStore};
    let opts = EtcdOptions::from_list(endpoints).with_root(root);
    Arc::new(EtcdStore::connect(opts).await.expect("connect to etcd"))
}

/// A fresh namespace on the etcd of `ETCD_ENDPOINTS`.
#[cfg(feature = "etcd")]
pub async fn etcd() -> Arc<dyn MetadataStore> {
    etcd_store_at(&etcd_endpoints(), &unique_root()).await
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A private single-node etcd on free ports with its data in a temporary directory, for tests
/// that must kill and restart it.
pub struct EtcdProcess {
    child: Option<std::process::Child>,
    dir: tempfile::TempDir,
    pub client_url: String,
    peer_url: String,
}

pub fn etcd_binary() -> PathBuf {
    for p in ["/usr/bin/etcd", "/usr/local/bin/etcd"] {
        if std::path::Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!(
        "the etcd binary is missing: install Debian's etcd-server (apt-get install -y etcd-server)"
    )
}

impl EtcdProcess {
    pub fn start() -> EtcdProcess {
        let client_url = format!("http://127.0.0.1:{}", free_port());
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        let mut p = EtcdProcess {
            child: None,
            dir: tempfile::tempdir().unwrap(),
            client_url,
            peer_url,
        };
        p.spawn();
        p
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).unwrap();
        let child = std::process::Command::new(etcd_binary())
            .arg("--name")
            .arg("test")
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .arg("--listen-client-urls")
            .arg(&self.client_url)
            .arg("--advertise-client-urls")
            .arg(&self.client_url)
            .arg("--listen-peer-urls")
            .arg(&self.peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&self.peer_url)
            .arg("--initial-cluster")
            .arg(format!("test={}", self.peer_url))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn etcd");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let addr = self.client_url.trim_start_matches("http://").to_string();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(&addr).is_ok() {
                // The port opens slightly before the server serves; give raft a moment.
                std::thread::sleep(Duration::from_millis(300));
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "etcd at {} did not come up; log: {}",
            self.client_url,
            self.log()
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// SIGKILL and wait.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same ports and data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The path of an example binary built next to this test binary. `cargo test` builds the
/// examples (as `examples/<name>-<hash>`); `cargo build --example <name>` makes `examples/<name>`.
/// The newest of them is taken.
pub fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("examples");
    // `cargo test` uplifts the plain name; hashed files may also be test-harness builds
    // (`cargo test --examples`), so they are only a fallback.
    if dir.join(name).exists() {
        return dir.join(name);
    }
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let file = entry.file_name().to_string_lossy().to_string();
        let hashed = file
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|h| h.len() == 16 && h.chars().all(|c| c.is_ascii_hexdigit()));
        if file != name && !hashed {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let modified = meta.modified().unwrap();
        if best.as_ref().is_none_or(|(t, _)| modified > *t) {
            best = Some((modified, entry.path()));
        }
    }
    match best {
        Some((_, path)) => path,
        None => panic!(
            "example binary {name} is missing under {}; run the tests with \
             `cargo test -p strobe-metadata --features etcd` (which builds the examples) or build it \
             with `cargo build -p strobe-metadata --features etcd --example {name}`",
            dir.display()
        ),
    }
}

/// Polls `f` until it returns true or `timeout` passes.
pub async fn eventually(timeout: Duration, mut f: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
