//! Metadata benchmarks: CAS latency, watch-notification latency, and the time from a TC leader's
//! death to the new assignments snapshot, against a local etcd (and the embedded store for
//! comparison).
//!
//! ```text
//! etcd --data-dir $(mktemp -d) --listen-client-urls http://127.0.0.1:23790 \
//!      --advertise-client-urls http://127.0.0.1:23790 --listen-peer-urls http://127.0.0.1:23791 &
//! ETCD_ENDPOINTS=http://127.0.0.1:23790 cargo bench -p strobe-metadata --features etcd --bench metadata
//! ```
//!
//! Optional arguments after `--`: `--ops N` (CAS and watch samples, default 2000), `--deaths N`
//! (failover samples, default 5).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use strobe_metadata::tc::{TcLeader, TcMember, TcMemberConfig};
use strobe_metadata::{
    EmbeddedOptions, EmbeddedStore, EtcdOptions, EtcdStore, Expect, LeaderState, MetadataStore,
    SessionOptions,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

type Store = Arc<dyn MetadataStore>;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn root() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    format!("/strobe-bench-{}-{ms}", std::process::id())
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).unwrap()
}

fn report(what: &str, h: &Histogram<u64>) {
    println!(
        "{what:<46} n={:<5} p50={:>8.3} ms  p99={:>8.3} ms  max={:>8.3} ms",
        h.len(),
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.max() as f64 / 1000.0
    );
}

async fn cas_latency(store: &Store, label: &str, n: usize) {
    let key = "/bench/cas";
    let mut version = store.put(key, b"0", Expect::Any).await.unwrap().version;
    let mut h = hist();
    for i in 0..n + 100 {
        let t = Instant::now();
        version = store
            .put(key, i.to_string().as_bytes(), Expect::Version(version))
            .await
            .unwrap()
            .version;
        if i >= 100 {
            h.record(t.elapsed().as_micros().max(1) as u64).unwrap();
        }
    }
    report(&format!("{label}: CAS put (expected version)"), &h);
}

async fn watch_latency(store: &Store, label: &str, n: usize) {
    let mut watch = store.watch("/bench/w/", 0).await.unwrap();
    let (tx, mut rx) = mpsc::channel::<(u64, Instant)>(16);
    let feeder = tokio::spawn(async move {
        while let Some(Ok(b)) = watch.next().await {
            if tx.send((b.revision, Instant::now())).await.is_err() {
                return;
            }
        }
    });
    let mut from_issue = hist();
    let mut from_ack = hist();
    for i in 0..n + 100 {
        let issued = Instant::now();
        let rev = store
            .put(&format!("/bench/w/{}", i % 16), b"x", Expect::Any)
            .await
            .unwrap()
            .version;
        let acked = Instant::now();
        let (seen, at) = rx.recv().await.unwrap();
        assert_eq!(seen, rev);
        if i >= 100 {
            from_issue
                .record((at - issued).as_micros().max(1) as u64)
                .unwrap();
            from_ack
                .record(at.saturating_duration_since(acked).as_micros().max(1) as u64)
                .unwrap();
        }
    }
    report(
        &format!("{label}: watch notify, from put issued"),
        &from_issue,
    );
    report(
        &format!("{label}: watch notify, after put acked"),
        &from_ack,
    );
    feeder.abort();
}

fn member_config(id: &str) -> TcMemberConfig {
    TcMemberConfig {
        leader: TcLeader {
            broker_id: id.into(),
            broker_service_url: format!("pulsar://{id}:6650"),
            broker_service_url_tls: None,
            listeners: Vec::new(),
        },
        parallelism: 16,
        session: SessionOptions::with_ttl(Duration::from_secs(2)),
        campaign: None,
    }
}

/// Time from the death of the broker leading all 16 partitions to the survivor's first
/// complete snapshot without it. `crash`: keep-alives stop (the lease must expire);
/// otherwise a graceful shutdown (resign).
async fn failover(
    make: &dyn Fn() -> futures::future::BoxFuture<'static, Store>,
    label: &str,
    deaths: usize,
    crash: bool,
) {
    let mut h = hist();
    for _ in 0..deaths {
        let old = TcMember::start(make().await, member_config("old"))
            .await
            .unwrap();
        old.view()
            .wait_for(Duration::from_secs(10), |a| a.count_led_by("old") == 16)
            .await
            .unwrap();
        let new = TcMember::start(make().await, member_config("new"))
            .await
            .unwrap();
        for n in 0..16 {
            new.election(n)
                .unwrap()
                .wait_for(Duration::from_secs(10), |s| {
                    matches!(s, LeaderState::Following { .. })
                })
                .await
                .unwrap();
        }
        let t = Instant::now();
        if crash {
            old.session().pause_keepalives(true);
        } else {
            old.shutdown().await.unwrap();
        }
        let mut rx = new.view().subscribe();
        loop {
            if rx.borrow_and_update().count_led_by("new") == 16 {
                break;
            }
            tokio::time::timeout(Duration::from_secs(10), rx.changed())
                .await
                .unwrap()
                .unwrap();
        }
        h.record(t.elapsed().as_micros().max(1) as u64).unwrap();
        new.shutdown().await.unwrap();
    }
    let kind = if crash {
        "crash (keep-alives stop), TTL 2 s"
    } else {
        "graceful resign"
    };
    report(&format!("{label}: leader death -> snapshot, {kind}"), &h);
}

#[tokio::main]
async fn main() {
    let n = arg("--ops", 2000);
    let deaths = arg("--deaths", 5);
    let endpoints = std::env::var("ETCD_ENDPOINTS")
        .expect("set ETCD_ENDPOINTS to a local etcd, e.g. http://127.0.0.1:23790");

    let opts = EtcdOptions::from_list(&endpoints).with_root(root());
    let etcd: Store = Arc::new(EtcdStore::connect(opts).await.unwrap());
    cas_latency(&etcd, "etcd", n).await;
    watch_latency(&etcd, "etcd", n).await;
    for crash in [false, true] {
        // Both members of a failover share one namespace, each with its own connection.
        let ns = format!("{}-fo-{crash}", root());
        let ep = endpoints.clone();
        let factory = move || -> futures::future::BoxFuture<'static, Store> {
            let opts = EtcdOptions::from_list(&ep).with_root(ns.clone());
            Box::pin(async move { Arc::new(EtcdStore::connect(opts).await.unwrap()) as Store })
        };
        failover(&factory, "etcd", deaths, crash).await;
    }

    let dir = tempfile::tempdir().unwrap();
    let embedded: Store =
        Arc::new(EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).unwrap());
    cas_latency(&embedded, "embedded (fsync)", n).await;
    watch_latency(&embedded, "embedded (fsync)", n).await;
    for crash in [false, true] {
        let e = embedded.clone();
        let same = move || -> futures::future::BoxFuture<'static, Store> {
            let e = e.clone();
            Box::pin(async move { e })
        };
        failover(&same, "embedded", deaths, crash).await;
    }
}
