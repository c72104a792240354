//! Batching by key (Pulsar's KEY_BASED) or by entry bucket (PIP-486) keeps
//! one open batch per key or bucket, so batches close out of the order
//! their messages were sent in. With deduplication on, the broker drops a
//! frame whose highest sequence id is not above the last one it took, and
//! answers it as a duplicate: the producer saw a receipt for messages never
//! stored. The fault campaign (`tests/nemesis/campaign.rs`) found it as
//! acknowledged messages missing from the log. Sequence ids are now given
//! when a batch closes, so every frame's run follows the previous one.

mod common;

use std::time::Duration;

use common::Strobe;
use strobe_client::{BatchingType, Client, ProducerMessage};

async fn all_stored(batching: BatchingType, topic: &str) {
    let strobe = Strobe::start();
    let (st, body) = strobe.http(
        "POST",
        "/admin/v2/namespaces/public/default/deduplication",
        "true",
    );
    assert!(st == 204 || st == 200, "{st} {body}");
    let client = Client::builder(&format!("pulsar://127.0.0.1:{}", strobe.port))
        .build()
        .await
        .unwrap();
    let producer = client
        .producer(topic)
        .name("keyed")
        // Batches close at four messages or after a second.
        .batching(Duration::from_secs(1), 4, 1 << 20)
        .batching_type(batching)
        .create()
        .await
        .unwrap();
    // One message of key "a", then four of key "b": b's batch closes
    // first (it is full), a's at the next tick, though a's message was sent
    // before b's. Twice over.
    let mut sent = Vec::new();
    for round in [[("a", 1), ("b", 4)], [("c", 1), ("d", 4)]] {
        let mut receipts = Vec::new();
        for (key, n) in round {
            for i in 0..n {
                let text = format!("{key}{i}-{}", sent.len());
                let msg = ProducerMessage::new(text.clone().into_bytes()).with_key(key);
                receipts.push(producer.send(msg).await.unwrap());
                sent.push(text);
            }
        }
        for r in receipts {
            r.await.unwrap();
        }
    }
    let mut got = common::read_texts(&client, topic).await.unwrap();
    got.sort();
    sent.sort();
    assert_eq!(got, sent, "every acknowledged message is stored, once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_based_batches_are_all_stored_with_deduplication_on() {
    all_stored(
        BatchingType::KeyBased,
        "persistent://public/default/key-based-dedup",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_bucket_batches_are_all_stored_with_deduplication_on() {
    all_stored(
        BatchingType::EntryBucket {
            splits: strobe_client::equal_width_splits(16),
        },
        "persistent://public/default/bucket-dedup",
    )
    .await;
}
