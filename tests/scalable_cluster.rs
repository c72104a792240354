//! A scalable topic on a 3-broker cluster (real etcd, real processes)
//! under a keyed load from our V5 producer, with deduplication on: the
//! controller's broker dies (abort, as kill -9) in the middle of a split,
//! after it sealed the parent and before it wrote the layout; another broker
//! is elected and finishes the split; the topic splits again, its segments
//! move between brokers (the namespace unloaded mid-traffic), and it merges
//! back. Nothing acknowledged is lost or duplicated, and each key's
//! messages, read segment by segment in DAG order, are in send order.

#![cfg(feature = "cluster")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::cluster::{Etcd, Member};
use strobe_client::{Client, InitialPosition, ProducerMessage, ScalableSendFuture, SubType};

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
    let producer = Arc::new(
        client
            .scalable_producer("topic://public/default/orders")
            .name("p")
            .create()
            .await
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (receipts_tx, mut receipts_rx) =
        tokio::sync::mpsc::unbounded_channel::<ScalableSendFuture>();
    // About 5,000 messages a second.
    let sender = {
        let (producer, stop) = (producer.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seq = [0u64; KEYS as usize];
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                for _ in 0..50 {
                    let k = n % KEYS;
                    let msg = ProducerMessage::new(format!("{k}:{}", seq[k as usize]).into_bytes())
                        .with_key(format!("key-{k}"));
                    seq[k as usize] += 1;
                    n += 1;
                    receipts_tx.send(producer.send(msg).await.unwrap()).unwrap();
                }
            }
            n
        })
    };
    let collector = tokio::spawn(async move {
        let (mut ok, mut errors) = (0u64, Vec::new());
        while let Some(f) = receipts_rx.recv().await {
            match f.await {
                Ok(_) => ok += 1,
                Err(e) => errors.push(e.to_string()),
            }
        }
        (ok, errors)
    });

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
    tokio::time::sleep(Duration::from_millis(700)).await;

    stop.store(true, Ordering::Relaxed);
    let sent = sender.await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), producer.flush())
        .await
        .expect("flushed within 60 s")
        .unwrap();
    drop(producer);
    let (ok, errors) = collector.await.unwrap();
    assert!(
        errors.is_empty(),
        "{} sends failed: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert_eq!(ok, sent);

    let l = layout(&b2);
    let mut by_key: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut total = 0u64;
    let segments: BTreeMap<u64, &serde_json::Value> = l["segments"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), v))
        .collect();
    assert_eq!(
        segments.keys().copied().collect::<Vec<_>>(),
        (0..=8).collect::<Vec<_>>()
    );
    for (id, seg) in segments {
        let name = format!(
            "segment://public/default/orders/{:04x}-{:04x}-{id}",
            seg["hashRange"]["start"].as_u64().unwrap(),
            seg["hashRange"]["end"].as_u64().unwrap()
        );
        let mut c = client
            .consumer(&name, "verify")
            .sub_type(SubType::Exclusive)
            .initial_position(InitialPosition::Earliest)
            .subscribe()
            .await
            .unwrap();
        while let Some(m) = c.recv_timeout(Duration::from_millis(700)).await.unwrap() {
            let text = String::from_utf8(m.payload.to_vec()).unwrap();
            let (k, s) = text.split_once(':').unwrap();
            by_key
                .entry(k.parse().unwrap())
                .or_default()
                .push(s.parse().unwrap());
            total += 1;
        }
    }
    for (k, seqs) in &by_key {
        if let Some(i) = seqs.iter().enumerate().position(|(i, s)| *s != i as u64) {
            panic!(
                "key {k}: lost, duplicated or out of order at {i} of {}: {:?}",
                seqs.len(),
                &seqs[i.saturating_sub(3)..(i + 10).min(seqs.len())]
            );
        }
    }
    assert_eq!(total, sent, "messages stored vs sent");
    drop((b2, b3, etcd));
}
