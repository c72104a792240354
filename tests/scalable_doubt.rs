//! Messages in doubt on a sealed segment: our V5 producer's link to the
//! broker stops delivering receipts (a proxy holds what the broker sends)
//! while its messages are still stored, the segment is split meanwhile, and
//! then the link is cut. The producer cannot reconnect to the sealed
//! segment, so it does not know which of its pending messages were stored
//! there: it must find them on the segment's tail and send only the others
//! to the children. Nothing acknowledged is lost, nothing is stored twice,
//! and each key's messages, read in DAG order, are in send order.

mod common;

use std::time::Duration;

use common::Strobe;
use common::keyed::{KeyedLoad, check_dag_order};
use common::proxy::Proxy;
use strobe_client::Client;

const BASE: &str = "/admin/v2/scalable/public/default/doubt";

fn split(strobe: &Strobe, segment: u64) {
    let (st, body) = strobe.http("POST", &format!("{BASE}/split/{segment}"), "");
    assert_eq!(st, 200, "split {segment}: {body}");
}

/// Held receipts, a split, a cut link, `rounds` times over (each round
/// splits the lowest active segment).
async fn doubt_over_splits(rounds: usize) {
    let proxy = Proxy::start().await;
    // Clients are told the proxy's address for every lookup.
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
    // Two segments, so that a sealed segment's refusals can come while the
    // other segment's oldest message still waits for its receipt.
    split(&strobe, 0);

    let client = Client::builder(&format!("pulsar://127.0.0.1:{}", proxy.port))
        .build()
        .await
        .unwrap();
    let producer = client
        .scalable_producer("topic://public/default/doubt")
        .name("p")
        .create()
        .await
        .unwrap();
    let load = KeyedLoad::start(producer, 16, 5);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Segments 1 and 2 come from the first split, 3 and 4 from splitting
    // 1: 2, then 3, are still active when their turn comes.
    for segment in (1..).take(rounds) {
        proxy.hold();
        tokio::time::sleep(Duration::from_millis(300)).await;
        split(&strobe, segment);
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.cut();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let (sent, _) = load.finish().await;
    let (st, body) = strobe.http("GET", BASE, "");
    assert_eq!(st, 200, "{body}");
    let layout: serde_json::Value = serde_json::from_str(&body).unwrap();
    let total = check_dag_order(&client, "doubt", &layout).await;
    assert_eq!(total, sent, "messages stored vs sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_stored_without_receipts_on_a_sealed_segment_are_not_sent_again() {
    doubt_over_splits(3).await;
}
