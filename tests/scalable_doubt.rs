//! Messages in doubt on a sealed segment: our V5 producer's link to the
//! broker stops delivering receipts (a proxy holds what the broker sends)
//! while its messages are still stored, the segment is split meanwhile, and
//! then the link is cut. The producer cannot reconnect to the sealed
//! segment, so it does not know which of its pending messages were stored
//! there: it must find them on the segment's tail and send only the others
//! to the children. Nothing acknowledged is lost, nothing is stored twice,
//! and each key's messages, read in DAG order, are in send order. Inside
//! transactions, a message in doubt fails its send instead and the
//! transaction aborts: none is committed in part or twice.

mod common;

use std::time::Duration;

use common::Strobe;
use common::keyed::{KeyedLoad, check_dag_order, read_dag};
use common::proxy::Proxy;
use strobe_client::Client;

const BASE: &str = "/admin/v2/scalable/public/default/doubt";

fn split(strobe: &Strobe, segment: u64) {
    let (st, body) = strobe.http("POST", &format!("{BASE}/split/{segment}"), "");
    assert_eq!(st, 200, "split {segment}: {body}");
}

/// A broker whose clients reach it only through `Proxy` (every lookup
/// answers the proxy's address), deduplication on, and a scalable topic of
/// two segments, so that a sealed segment's refusals can come while the
/// other segment's oldest message still waits for its receipt.
async fn behind_a_proxy() -> (Proxy, Strobe, Client) {
    let proxy = Proxy::start().await;
    let strobe = Strobe::start_with_config(&format!(
        "scalable_topic_gc_interval_secs = 0\n\
         advertised_listeners = \"internal:pulsar://127.0.0.1:{}\"\n",
        proxy.port
    ));
    proxy.target(strobe.port);
    let (st, body) = strobe.http(
        "POST",
        "/admin/v2/namespaces/public/default/deduplication",
        "true",
    );
    assert!(st == 204 || st == 200, "{st} {body}");
    let (st, body) = strobe.http("PUT", BASE, "");
    assert_eq!(st, 204, "{body}");
    split(&strobe, 0);
    let client = Client::builder(&format!("pulsar://127.0.0.1:{}", proxy.port))
        .build()
        .await
        .unwrap();
    (proxy, strobe, client)
}

/// Held receipts, a split, a cut link, `rounds` times over. Segments 1 and
/// 2 come from the first split, 3 and 4 from splitting 1: 2, then 3, are
/// still active when their turn comes.
async fn faults(proxy: &Proxy, strobe: &Strobe, rounds: u64) {
    for segment in 1..=rounds {
        proxy.hold();
        tokio::time::sleep(Duration::from_millis(300)).await;
        split(strobe, segment);
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.cut();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn layout(strobe: &Strobe) -> serde_json::Value {
    let (st, body) = strobe.http("GET", BASE, "");
    assert_eq!(st, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_stored_without_receipts_on_a_sealed_segment_are_not_sent_again() {
    let (proxy, strobe, client) = behind_a_proxy().await;
    let producer = client
        .scalable_producer("topic://public/default/doubt")
        .name("p")
        .create()
        .await
        .unwrap();
    let load = KeyedLoad::start(producer, 16, 5);
    tokio::time::sleep(Duration::from_secs(1)).await;
    faults(&proxy, &strobe, 3).await;
    let (sent, _) = load.finish().await;
    let total = check_dag_order(&client, "doubt", &layout(&strobe)).await;
    assert_eq!(total, sent, "messages stored vs sent");
}

/// What became of one transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Committed,
    Aborted,
    /// The commit's answer was lost: either is right, never a part.
    Unknown,
}

/// The same faults under transactions: four tasks each run transactions
/// of five keyed messages. A message in doubt inside a transaction cannot
/// be looked for (a reader does not see an open transaction's messages), so
/// its send fails and the task aborts; a transaction whose sends all
/// succeeded commits. Afterwards each committed transaction's messages are
/// stored once each, and nothing of an aborted one is visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_message_in_doubt_fails_and_its_transaction_aborts() {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use strobe_client::ProducerMessage;

    const PER_TXN: u32 = 5;
    let (proxy, strobe, client) = behind_a_proxy().await;
    let producer = Arc::new(
        client
            .scalable_producer("topic://public/default/doubt")
            .name("p")
            .create()
            .await
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for task in 0..4u32 {
        let (client, producer, stop) = (client.clone(), producer.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut outcomes = BTreeMap::new();
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let Ok(txn) = client.new_transaction(Duration::from_secs(120)).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let mut receipts = Vec::new();
                let mut ok = true;
                for j in 0..PER_TXN {
                    let msg = ProducerMessage::new(format!("{task}:{n}:{j}").into_bytes())
                        .with_key(format!("k{task}-{j}"));
                    match producer.send_in(&txn, msg).await {
                        Ok(r) => receipts.push(r),
                        Err(_) => ok = false,
                    }
                }
                for r in receipts {
                    ok &= r.await.is_ok();
                }
                let outcome = if !ok {
                    let _ = txn.abort().await;
                    Outcome::Aborted
                } else if txn.commit().await.is_ok() {
                    Outcome::Committed
                } else {
                    Outcome::Unknown
                };
                outcomes.insert(n, outcome);
                n += 1;
            }
            outcomes
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    faults(&proxy, &strobe, 3).await;
    stop.store(true, Ordering::Relaxed);
    let mut outcomes = BTreeMap::new();
    for (task, t) in tasks.into_iter().enumerate() {
        for (n, o) in t.await.unwrap() {
            outcomes.insert((task as u32, n), o);
        }
    }
    let mut stored: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
    for text in read_dag(&client, "doubt", &layout(&strobe)).await {
        let v: Vec<u32> = text.split(':').map(|x| x.parse().unwrap()).collect();
        stored.entry((v[0], v[1])).or_default().push(v[2]);
    }
    let all: Vec<u32> = (0..PER_TXN).collect();
    for (id, o) in &outcomes {
        let mut got = stored.remove(id).unwrap_or_default();
        got.sort();
        match o {
            Outcome::Committed => assert_eq!(got, all, "committed transaction {id:?}"),
            Outcome::Aborted => assert!(got.is_empty(), "aborted transaction {id:?}: {got:?}"),
            Outcome::Unknown => assert!(
                got.is_empty() || got == all,
                "transaction {id:?} partly stored: {got:?}"
            ),
        }
    }
    assert!(stored.is_empty(), "stored but never sent: {stored:?}");
    let count = |x: Outcome| outcomes.values().filter(|o| **o == x).count();
    assert!(count(Outcome::Committed) > 20, "{outcomes:?}");
    println!(
        "{} committed, {} aborted, {} unknown",
        count(Outcome::Committed),
        count(Outcome::Aborted),
        count(Outcome::Unknown)
    );
}
