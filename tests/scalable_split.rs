//! A scalable topic split and merged under a keyed load, with our V5
//! producer (deduplication on): the topic goes 1 → 2 → 4 segments and back
//! to 1 while messages flow at about 10,000 a second. Every message sent is
//! acknowledged, none is lost or duplicated, and each key's messages, read
//! segment by segment in DAG order (a child's id is above its parents'),
//! are in the order they were sent.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Strobe;
use strobe_client::{Client, InitialPosition, ProducerMessage, ScalableSendFuture, SubType};

const KEYS: u64 = 64;

/// The widest gap between consecutive receipts within `window` after each
/// of `marks`, in ms.
fn pauses(receipts: &[Instant], marks: &[Instant], window: Duration) -> Vec<u128> {
    marks
        .iter()
        .map(|m| {
            receipts
                .windows(2)
                .filter(|w| w[1] >= *m && w[0] <= *m + window)
                .map(|w| w[1].duration_since(w[0]).as_millis())
                .max()
                .unwrap_or(0)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splits_and_merges_under_load_lose_duplicate_and_reorder_nothing() {
    let strobe = Strobe::start_with_config("scalable_topic_gc_interval_secs = 0\n");
    let (st, body) = strobe.http(
        "POST",
        "/admin/v2/namespaces/public/default/deduplication",
        "true",
    );
    assert!(st == 204 || st == 200, "{st} {body}");
    let (st, body) = strobe.http("PUT", "/admin/v2/scalable/public/default/load", "");
    assert_eq!(st, 204, "{body}");

    let client = Client::builder(&format!("pulsar://127.0.0.1:{}", strobe.port))
        .build()
        .await
        .unwrap();
    let producer = Arc::new(
        client
            .scalable_producer("topic://public/default/load")
            .name("p")
            .create()
            .await
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (receipts_tx, mut receipts_rx) =
        tokio::sync::mpsc::unbounded_channel::<ScalableSendFuture>();
    // About 10,000 messages a second: 100 every 10 ms, keys in turn.
    let sender = {
        let (producer, stop) = (producer.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seq = [0u64; KEYS as usize];
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                for _ in 0..100 {
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
        let mut at = Vec::new();
        let mut errors = Vec::new();
        while let Some(f) = receipts_rx.recv().await {
            match f.await {
                Ok(_) => at.push(Instant::now()),
                Err(e) => errors.push(e.to_string()),
            }
        }
        (at, errors)
    });

    let admin = |path: String| {
        let (st, body) = strobe.http(
            "POST",
            &format!("/admin/v2/scalable/public/default/load/{path}"),
            "",
        );
        assert_eq!(st, 200, "{path}: {body}");
    };
    let mut marks = Vec::new();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // 1 → 2 → 4 → 2 → 1: ids 1, 2; 3, 4 and 5, 6; 7 and 8; 9.
    for step in [
        "split/0",
        "split/1",
        "split/2",
        "merge/3/4",
        "merge/5/6",
        "merge/7/8",
    ] {
        marks.push(Instant::now());
        admin(step.to_owned());
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let sent = sender.await.unwrap();
    producer.flush().await.unwrap();
    drop(producer);
    let (receipts, errors) = collector.await.unwrap();
    assert!(
        errors.is_empty(),
        "{} sends failed: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert_eq!(receipts.len() as u64, sent);
    assert!(sent > 30_000, "only {sent} messages sent");

    let (_, body) = strobe.http("GET", "/admin/v2/scalable/public/default/load", "");
    let layout: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(layout["epoch"], 6, "{layout}");
    // Every segment, in id order (parents before children).
    let mut by_key: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut total = 0u64;
    for (id, seg) in layout["segments"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse::<u64>().unwrap(), v))
        .collect::<BTreeMap<_, _>>()
    {
        let range = &seg["hashRange"];
        let name = format!(
            "segment://public/default/load/{:04x}-{:04x}-{id}",
            range["start"].as_u64().unwrap(),
            range["end"].as_u64().unwrap()
        );
        let mut c = client
            .consumer(&name, "verify")
            .sub_type(SubType::Exclusive)
            .initial_position(InitialPosition::Earliest)
            .subscribe()
            .await
            .unwrap();
        while let Some(m) = c.recv_timeout(Duration::from_millis(500)).await.unwrap() {
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
    let p = pauses(&receipts, &marks, Duration::from_millis(600));
    eprintln!("receipt gaps after each resize (ms): {p:?}; {sent} messages");
}
