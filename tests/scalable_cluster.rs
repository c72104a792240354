//! A scalable topic on a 3-broker cluster (real etcd, real processes)
//! under a keyed load from our V5 producer, with deduplication on: the
//! controller's broker dies (abort, as kill -9) in the middle of a split,
//! after it sealed the parent and before it wrote the layout; another broker
//! is elected and finishes the split; the topic splits again, its segments
//! move between brokers (the namespace unloaded mid-traffic), it merges
//! back, and a segment moved to a chosen broker is pushed to a watching
//! client. Nothing acknowledged is lost or duplicated, and each key's
//! messages, read segment by segment in DAG order, are in send order.

#![cfg(feature = "cluster")]

mod common;

use std::time::{Duration, Instant};

use common::cluster::{Etcd, Member};
use common::keyed::{KeyedLoad, check_dag_order};
use strobe_client::Client;

const KEYS: u64 = 32;
const BASE: &str = "/admin/v2/scalable/public/default/orders";

fn layout(m: &Member) -> serde_json::Value {
    let (st, body) = m.http("GET", BASE, "").expect("the broker answers");
    assert_eq!(st, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

async fn wait_epoch(m: &Member, epoch: u64, within: Duration) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let l = layout(m);
        if l["epoch"].as_u64() == Some(epoch) {
            return l;
        }
        assert!(Instant::now() < deadline, "epoch {epoch} not reached: {l}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A resize through `m` (forwarded to the controller's broker), retried
/// while the controller's leadership settles.
async fn resize(m: &Member, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match m.http("POST", &format!("{BASE}/{what}"), "") {
            Some((200, _)) => return,
            other => {
                assert!(Instant::now() < deadline, "{what}: {other:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_mid_split_and_segments_moving_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let quiet = "scalable_topic_gc_interval_secs = 0\n";
    // b1 dies at the split's worst step: parent terminated, layout unwritten.
    let b1 = Member::start_with(
        "b1",
        &etcd,
        dir.path(),
        &format!("{quiet}scalable_topic_failpoint = \"after-terminate\"\n"),
    );
    let b2 = Member::start_with("b2", &etcd, dir.path(), quiet);
    let b3 = Member::start_with("b3", &etcd, dir.path(), quiet);
    let (st, body) = b2
        .http(
            "POST",
            "/admin/v2/namespaces/public/default/deduplication",
            "true",
        )
        .unwrap();
    assert!(st == 204 || st == 200, "{st} {body}");
    // Created at b1, which so becomes its controller.
    let (st, body) = b1.http("PUT", BASE, "").unwrap();
    assert_eq!(st, 204, "{body}");

    let client = Client::builder(&b2.url()).build().await.unwrap();
    let producer = client
        .scalable_producer("topic://public/default/orders")
        .name("p")
        .create()
        .await
        .unwrap();
    // About 5,000 messages a second.
    let load = KeyedLoad::start(producer, KEYS, 50);

    tokio::time::sleep(Duration::from_secs(1)).await;
    // The split goes to b1 (forwarded by b3), which dies half way.
    let answer = b3.http("POST", &format!("{BASE}/split/0"), "");
    assert!(
        !matches!(answer, Some((200, _))),
        "the split was answered: {answer:?}"
    );
    let mut b1 = b1;
    let deadline = Instant::now() + Duration::from_secs(10);
    while b1.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "b1 did not stop at its failpoint"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        b1.log_text().contains("failpoint reached"),
        "{}",
        b1.log_text()
    );
    // Another broker leads once b1's session is gone, and finishes it.
    let l = wait_epoch(&b2, 1, Duration::from_secs(30)).await;
    assert_eq!(l["segments"]["0"]["state"], "SEALED");

    resize(&b3, "split/1").await;
    resize(&b2, "split/2").await;
    wait_epoch(&b3, 3, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Every segment changes brokers mid-traffic.
    let (st, body) = b3
        .http("PUT", "/admin/v2/namespaces/public/default/unload", "")
        .unwrap();
    assert!(st == 204 || st == 200, "unload: {st} {body}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    resize(&b2, "merge/3/4").await;
    resize(&b3, "merge/5/6").await;
    wait_epoch(&b2, 5, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A segment moved to a chosen broker (PIP-307) mid-traffic: clients
    // watching the topic are told its new broker without asking.
    let mut watch = client
        .watch_scalable_topic("topic://public/default/orders", false)
        .await
        .unwrap();
    let owner = watch.current().segments[&7].broker_url.clone().unwrap();
    let dest = [&b2, &b3].into_iter().find(|m| m.url() != owner).unwrap();
    let (_, body) = b2
        .http("GET", "/admin/v2/namespaces/public/default/bundles", "")
        .unwrap();
    let bundles: serde_json::Value = serde_json::from_str(&body).unwrap();
    let bounds: Vec<&str> = bundles["boundaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap())
        .collect();
    for w in bounds.windows(2) {
        // Bundles nobody owns refuse; the segment's does not.
        let _ = b2.http(
            "PUT",
            &format!(
                "/admin/v2/namespaces/public/default/{}_{}/unload?destinationBroker={}",
                w[0], w[1], dest.id
            ),
            "",
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while watch.current().segments[&7].broker_url.as_deref() != Some(dest.url().as_str()) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no push of segment 7's move to {}",
            dest.id
        );
        let _ = tokio::time::timeout(left, watch.changed()).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (sent, _) = load.finish().await;
    let l = layout(&b2);
    let ids: Vec<&String> = l["segments"].as_object().unwrap().keys().collect();
    assert_eq!(ids.len(), 9, "{l}");
    let total = check_dag_order(&client, "orders", &l).await;
    assert_eq!(total, sent, "messages stored vs sent");
    drop((b2, b3, etcd));
}
