//! A consumer catching up on a backlog of batches gets each entry read from
//! storage about once: the dispatcher sizes its reads by the consumer's
//! permits over the average messages per entry. It used to read 100 entries
//! for a consumer with room for one batch and drop the rest, reading a
//! backlog of 50 batches about 1,300 entries' worth (and a real backlog ten
//! times over).
//!
//! And the unacknowledged-messages limit binds Shared consumers only: an
//! Exclusive consumer (a reader above all, which never acknowledges) reads
//! past it. It used to stop there, so a reader of a topic longer than
//! `max_unacked_messages_per_consumer` (50,000) stalled.

mod common;

use std::time::Duration;

use common::Strobe;
use strobe_client::{Client, InitialPosition};

const TOPIC: &str = "persistent://public/default/catch-up-reads";
const BATCHES: usize = 50;
const PER_BATCH: usize = 100;

fn metric(s: &Strobe, name: &str) -> u64 {
    let (status, body) = s.http("GET", "/metrics", "");
    assert_eq!(status, 200);
    let prefix = format!("{name}{{");
    body.lines()
        .find(|l| l.starts_with(&prefix) && l.contains(TOPIC))
        .and_then(|l| l.rsplit(' ').next()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} for {TOPIC} not in /metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_read_reads_each_entry_about_once() {
    let s = Strobe::start();
    let client = Client::builder(&format!("pulsar://127.0.0.1:{}", s.port))
        .build()
        .await
        .unwrap();
    // 50 entries of 100 messages: batches close on the count, not the delay.
    let producer = client
        .producer(TOPIC)
        .batching(Duration::from_secs(10), PER_BATCH as u32, 8 << 20)
        .create()
        .await
        .unwrap();
    let mut sends = Vec::new();
    for i in 0..BATCHES * PER_BATCH {
        sends.push(producer.send(format!("m{i}").into_bytes()).await.unwrap());
    }
    for f in sends {
        f.await.unwrap();
    }
    // Batches close on the count; a busy machine may cut one short.
    let entries = metric(&s, "pulsar_storage_entries");
    assert!(
        (BATCHES as u64..=2 * BATCHES as u64).contains(&entries),
        "{entries} entries"
    );

    // Room for one batch at a time (the flow comes back at half of it).
    let mut consumer = client
        .consumer(TOPIC, "catch-up")
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(PER_BATCH as u32)
        .subscribe()
        .await
        .unwrap();
    for i in 0..BATCHES * PER_BATCH {
        let m = tokio::time::timeout(Duration::from_secs(10), consumer.recv())
            .await
            .unwrap_or_else(|_| panic!("message {i} not received"))
            .unwrap();
        assert_eq!(m.payload.as_ref(), format!("m{i}").as_bytes());
        consumer.ack(&m).unwrap();
    }
    let read = metric(&s, "pulsar_storage_read_entries_total");
    assert!(
        read >= entries && read <= entries + entries / 2,
        "{read} entries read from storage to deliver {entries}"
    );
    consumer.close().await.unwrap();
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unacked_limit_binds_shared_consumers_only() {
    use strobe_client::SubType;
    let strobe = Strobe::start_with_config("max_unacked_messages_per_consumer = 10\n");
    let client = Client::builder(&format!("pulsar://127.0.0.1:{}", strobe.port))
        .build()
        .await
        .unwrap();
    let topic = "persistent://public/default/unacked-limit";
    let producer = client.producer(topic).no_batching().create().await.unwrap();
    for i in 0..50 {
        producer
            .send(format!("m{i}").into_bytes())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let received = |sub: SubType, name: &'static str| {
        let client = client.clone();
        async move {
            let mut c = client
                .consumer(topic, name)
                .sub_type(sub)
                .initial_position(InitialPosition::Earliest)
                .subscribe()
                .await
                .unwrap();
            let mut n = 0;
            while c
                .recv_timeout(Duration::from_millis(700))
                .await
                .unwrap()
                .is_some()
            {
                n += 1;
            }
            n
        }
    };
    assert_eq!(received(SubType::Exclusive, "ex").await, 50);
    assert_eq!(received(SubType::Failover, "fo").await, 50);
    assert_eq!(received(SubType::Shared, "sh").await, 10);
    let mut reader = client
        .reader(topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    let mut n = 0;
    while reader.has_message_available().await.unwrap() {
        reader
            .recv_timeout(Duration::from_secs(5))
            .await
            .unwrap()
            .expect("a reader is not held at the limit");
        n += 1;
    }
    assert_eq!(n, 50);
}
