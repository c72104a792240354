//! Reads at once, on every backend (etcd sends those beyond a few in flight as one
//! transaction: `etcd_reads`). Kept beside the shared suite (`suite.rs`) so that file does not
//! grow; each case runs on every backend the same way.

mod common;

use std::sync::Arc;

use strobe_metadata::{Expect, MetadataStore};

type Store = Arc<dyn MetadataStore>;

/// Many reads at once (etcd sends those beyond a few in flight as one transaction): each
/// answers for its own key, absent keys included, and sees every write that finished before
/// it was asked, its own writer's included.
async fn concurrent_gets_see_every_finished_write(s: Store) {
    for i in 0..50u64 {
        s.put(&format!("/cg/k{i}"), i.to_string().as_bytes(), Expect::Any)
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for w in 0..16u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..20u64 {
                // Reads of keys that exist, of one that does not, then this task's own
                // write read back.
                let i = (w * 7 + round * 3) % 50;
                let got = s.get(&format!("/cg/k{i}")).await.unwrap().unwrap();
                assert_eq!(got.value, i.to_string().into_bytes());
                assert!(
                    s.get(&format!("/cg/none{w}-{round}"))
                        .await
                        .unwrap()
                        .is_none()
                );
                let key = format!("/cg/w{w}");
                let value = format!("{w}-{round}");
                let stat = s.put(&key, value.as_bytes(), Expect::Any).await.unwrap();
                let back = s.get(&key).await.unwrap().unwrap();
                assert_eq!(
                    (back.value, back.stat.version),
                    (value.into_bytes(), stat.version)
                );
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_memory_concurrent_gets_see_every_finished_write() {
    concurrent_gets_see_every_finished_write(common::embedded_memory().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_durable_concurrent_gets_see_every_finished_write() {
    concurrent_gets_see_every_finished_write(common::embedded_durable().await).await;
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_concurrent_gets_see_every_finished_write() {
    concurrent_gets_see_every_finished_write(common::etcd().await).await;
}

/// Concurrent reads beyond the few in flight go to etcd together: 400 reads at once take far
/// fewer requests, and each still answers for its own key.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_sends_concurrent_reads_together() {
    use strobe_metadata::{EtcdOptions, EtcdStore};
    let opts = EtcdOptions::from_list(&common::etcd_endpoints()).with_root(common::unique_root());
    let s = Arc::new(EtcdStore::connect(opts).await.expect("connect to etcd"));
    for i in 0..100u64 {
        s.put(&format!("/r/k{i}"), i.to_string().as_bytes(), Expect::Any)
            .await
            .unwrap();
    }
    let before = s.read_requests();
    let tasks: Vec<_> = (0..400u64)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move { (i, s.get(&format!("/r/k{}", i % 125)).await.unwrap()) })
        })
        .collect();
    for t in tasks {
        let (i, got) = t.await.unwrap();
        match i % 125 {
            k if k < 100 => assert_eq!(got.unwrap().value, k.to_string().into_bytes()),
            _ => assert!(got.is_none()),
        }
    }
    let requests = s.read_requests() - before;
    assert!(
        requests < 100,
        "400 concurrent reads took {requests} requests"
    );
}

/// Every transaction sent to etcd counts as a write and adds its round trip to the time writes
/// took (the broker's `strobe_metadata_write_seconds_total`, whose mean per write the
/// transactions benchmark prints); reads add to neither.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_counts_and_times_its_writes() {
    use std::time::{Duration, Instant};
    use strobe_metadata::{EtcdOptions, EtcdStore};
    let opts = EtcdOptions::from_list(&common::etcd_endpoints()).with_root(common::unique_root());
    let s = EtcdStore::connect(opts).await.expect("connect to etcd");
    let (writes, time) = (s.writes_made(), s.write_time());
    let started = Instant::now();
    for i in 0..20u64 {
        s.put(&format!("/w/k{i}"), b"v", Expect::Any).await.unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(s.writes_made() - writes, 20);
    let spent = s.write_time() - time;
    assert!(
        spent > Duration::ZERO && spent <= elapsed,
        "20 writes in {elapsed:?} counted {spent:?}"
    );
    let (writes, time) = (s.writes_made(), s.write_time());
    s.get("/w/k1").await.unwrap();
    assert_eq!((s.writes_made(), s.write_time()), (writes, time));
}
