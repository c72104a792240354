//! Deduplication's sequence ids come back, after a reload, from its last
//! snapshot and the entries after it: a load does not read the whole log.

mod common;

use std::sync::Arc;
use std::time::Duration;

use strobe_client::Client;
use strobe_ledger::InitialPosition;
use strobe_ledger::testing::Impaired;
use strobe_model::TopicName;

use common::start_on;

const TOPIC: &str = "persistent://public/default/dedup-snapshot";

#[tokio::test]
async fn a_reload_reads_only_what_follows_the_last_snapshot() {
    let store = Impaired::default();
    let broker = start_on(|c| c.deduplication_enabled = true, Arc::new(store.clone())).await;
    let client = Client::builder(&format!("pulsar://{}", broker.addr()))
        .build()
        .await
        .unwrap();
    let producer = client
        .producer(TOPIC)
        .name("p")
        .no_batching()
        .create()
        .await
        .unwrap();
    let mut sent = Vec::new();
    for i in 0..2500u32 {
        sent.push(producer.send(i.to_be_bytes().to_vec()).await.unwrap());
    }
    let mut ids = Vec::new();
    for s in sent {
        ids.push(s.await.unwrap().position);
    }
    producer.close().await.unwrap();

    // Snapshots are made in the background every 1,000 entries: the second
    // ends at the 2,000th.
    let name = TopicName::parse(TOPIC).unwrap();
    let t = broker.service().topic(&name, false).await.unwrap();
    let cursor = t
        .ledger
        .open_cursor("pulsar.dedup", InitialPosition::Earliest)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while cursor.mark_delete_position() < Some(ids[1999]) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the snapshot stayed at {:?}",
            cursor.mark_delete_position()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        t.all_subscription_names().is_empty(),
        "deduplication's cursor is not a subscription: {:?}",
        t.all_subscription_names()
    );
    drop((t, cursor));

    broker.service().unload(&name).await.unwrap();
    let before = store.entries_read();
    let t = broker.service().topic(&name, false).await.unwrap();
    let read = store.entries_read() - before;
    assert_eq!(t.last_sequence_id("p"), 2499);
    // Deduplication's cursor is no subscription: a topic without any keeps
    // its ledgers when it loads (it trims what subscriptions consumed).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let kept = t
        .ledger
        .read(t.ledger.first_position(), 3000)
        .await
        .unwrap();
    assert_eq!(kept.len(), 2500, "entries left after the reload");
    assert!(
        read <= 500,
        "the load read {read} entries; 500 follow the last snapshot"
    );
    client.close().await;
    broker.shutdown().await;
}
