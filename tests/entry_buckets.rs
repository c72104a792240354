//! PIP-486 entry-bucket subscriptions against the real broker, driven by our
//! client (no official client speaks entryBucketDispatch yet): consumers join
//! mid-traffic, leave and rejoin, and a slow acker holds back only what it gives up.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Strobe;
use strobe_client::{BatchingType, Client, Consumer, InitialPosition, ProducerMessage};
use tokio::sync::watch;

const KEYS: usize = 40;

async fn client(s: &Strobe) -> Client {
    Client::builder(&format!("pulsar://127.0.0.1:{}", s.port))
        .operation_timeout(Duration::from_secs(10))
        .build()
        .await
        .expect("connect")
}

/// What the application saw, in the order it saw it: (consumer, key, sequence).
type Log = Arc<Mutex<Vec<(String, usize, usize)>>>;

async fn subscribe(c: &Client, topic: &str, splits: &[u32], name: &str) -> Consumer {
    c.consumer(topic, "eb")
        .entry_bucket_dispatch(splits)
        .consumer_name(name)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(20)
        .subscribe()
        .await
        .expect("subscribe")
}

/// Receives, records, waits `ack_delay`, acks; until `stop` turns true (then
/// closes the consumer, acking nothing more).
fn run(
    mut consumer: Consumer,
    name: &str,
    log: Log,
    ack_delay: Duration,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let name = name.to_owned();
    tokio::spawn(async move {
        loop {
            if *stop.borrow() {
                break;
            }
            tokio::select! {
                _ = stop.changed() => break,
                m = consumer.recv_timeout(Duration::from_millis(100)) => {
                    let Ok(Some(m)) = m else { continue };
                    let body = String::from_utf8_lossy(&m.payload).into_owned();
                    let (k, s) = body.split_once(':').expect("key:seq");
                    log.lock().unwrap().push((name.clone(), k.parse().unwrap(), s.parse().unwrap()));
                    if !ack_delay.is_zero() {
                        tokio::time::sleep(ack_delay).await;
                    }
                    consumer.ack(&m).expect("ack");
                }
            }
        }
        let _ = consumer.close().await;
    })
}

fn check(log: &[(String, usize, usize)], sent: usize) {
    // Nothing lost.
    let seen: HashSet<(usize, usize)> = log.iter().map(|(_, k, s)| (*k, *s)).collect();
    let missing: Vec<usize> = (0..sent)
        .filter(|i| !seen.contains(&(i % KEYS, *i)))
        .collect();
    assert!(
        missing.is_empty(),
        "lost {} messages, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    // Per-key order: first deliveries of a key come in publish order.
    let mut last: HashMap<usize, usize> = HashMap::new();
    let mut first = HashSet::new();
    for (who, k, s) in log {
        if !first.insert((*k, *s)) {
            continue;
        }
        let prev = last.insert(*k, *s);
        assert!(
            prev.is_none_or(|p| p < *s),
            "key {k}: {s} reached {who} after {prev:?}"
        );
    }
}

async fn produce(c: &Client, topic: &str, splits: &[u32], from: usize, to: usize) {
    let producer = c
        .producer(topic)
        .batching(Duration::from_millis(1), 20, 1 << 20)
        .batching_type(BatchingType::EntryBucket {
            splits: splits.to_vec(),
        })
        .create()
        .await
        .expect("producer");
    for i in from..to {
        producer
            .send(
                ProducerMessage::new(format!("{}:{i}", i % KEYS))
                    .with_key(format!("key-{}", i % KEYS)),
            )
            .await
            .expect("send");
    }
    producer.flush().await.expect("flush");
    let _ = producer.close().await;
}

async fn wait_for(log: &Log, n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let distinct: HashSet<(usize, usize)> = log
            .lock()
            .unwrap()
            .iter()
            .map(|(_, k, s)| (*k, *s))
            .collect();
        if distinct.len() >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "stuck: {} of {n} messages after {within:?}",
            distinct.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_joining_mid_traffic_keeps_key_order_and_loses_nothing() {
    let s = Strobe::start();
    let c = client(&s).await;
    let splits = strobe_client::equal_width_splits(8);
    let log: Log = Arc::default();
    let (stop_tx, stop) = watch::channel(false);
    let a = run(
        subscribe(&c, "join", &splits, "a").await,
        "a",
        log.clone(),
        Duration::ZERO,
        stop.clone(),
    );
    produce(&c, "join", &splits, 0, 200).await;
    let b = run(
        subscribe(&c, "join", &splits, "b").await,
        "b",
        log.clone(),
        Duration::ZERO,
        stop.clone(),
    );
    produce(&c, "join", &splits, 200, 400).await;
    wait_for(&log, 400, Duration::from_secs(20)).await;
    stop_tx.send(true).unwrap();
    let _ = tokio::join!(a, b);
    let log = log.lock().unwrap().clone();
    check(&log, 400);
    let dups = log.len()
        - log
            .iter()
            .map(|(_, k, s)| (*k, *s))
            .collect::<HashSet<_>>()
            .len();
    assert_eq!(dups, 0, "no consumer left, so nothing is delivered twice");
    assert!(
        log.iter().any(|(w, _, _)| w == "b"),
        "the joiner got buckets"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_leave_rejoin_cycles_never_wedge() {
    let s = Strobe::start();
    let c = client(&s).await;
    let splits = strobe_client::equal_width_splits(4);
    let log: Log = Arc::default();
    let (stop_all, stop) = watch::channel(false);
    let a = run(
        subscribe(&c, "cycles", &splits, "a").await,
        "a",
        log.clone(),
        Duration::ZERO,
        stop.clone(),
    );
    let mut sent = 0;
    for _cycle in 0..5 {
        let (stop_b_tx, stop_b) = watch::channel(false);
        let b = run(
            subscribe(&c, "cycles", &splits, "b").await,
            "b",
            log.clone(),
            Duration::ZERO,
            stop_b,
        );
        produce(&c, "cycles", &splits, sent, sent + 60).await;
        sent += 60;
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop_b_tx.send(true).unwrap();
        b.await.unwrap();
        produce(&c, "cycles", &splits, sent, sent + 20).await;
        sent += 20;
    }
    wait_for(&log, sent, Duration::from_secs(20)).await;
    stop_all.send(true).unwrap();
    a.await.unwrap();
    check(&log.lock().unwrap(), sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_acker_delays_only_the_buckets_it_gives_up() {
    // Two buckets. "a" acks slowly (150 ms each) and owns both until "b" joins and
    // takes one. The bucket "a" keeps flows at a's pace; the bucket "b" takes waits
    // only until "a" acked what it held of it, then flows at b's pace: b is done
    // long before a has worked through its own backlog.
    let s = Strobe::start();
    let c = client(&s).await;
    let splits = strobe_client::equal_width_splits(2);
    let log: Log = Arc::default();
    let (stop_tx, stop) = watch::channel(false);
    let a = run(
        subscribe(&c, "slow", &splits, "a").await,
        "a",
        log.clone(),
        Duration::from_millis(150),
        stop.clone(),
    );
    produce(&c, "slow", &splits, 0, 20).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let b = run(
        subscribe(&c, "slow", &splits, "b").await,
        "b",
        log.clone(),
        Duration::ZERO,
        stop.clone(),
    );
    produce(&c, "slow", &splits, 20, 60).await;
    wait_for(&log, 60, Duration::from_secs(60)).await;
    stop_tx.send(true).unwrap();
    let _ = tokio::join!(a, b);
    let log = log.lock().unwrap().clone();
    check(&log, 60);
    let last = |who: &str| {
        log.iter()
            .rposition(|(w, _, _)| w == who)
            .expect("both consumed")
    };
    assert!(
        last("b") < last("a"),
        "b waited for a's whole backlog: {:?}",
        log.iter()
            .map(|(w, k, s)| format!("{w}:{k}:{s}"))
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_with_other_boundaries_is_refused() {
    let s = Strobe::start();
    let c = client(&s).await;
    let _first = subscribe(&c, "layout", &strobe_client::equal_width_splits(4), "a").await;
    let stale = c
        .consumer("layout", "eb")
        .entry_bucket_dispatch(&strobe_client::equal_width_splits(8))
        .consumer_name("b")
        .subscribe()
        .await;
    let err = match stale {
        Ok(_) => panic!("a stale layout must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("ConsumerAssignError") || err.to_lowercase().contains("boundar"),
        "{err}"
    );
    // Boundaries that do not tile [0, 65535] are refused too.
    let broken = c
        .consumer("layout-broken", "eb")
        .key_shared(strobe_client::proto::KeySharedMeta {
            key_shared_mode: strobe_client::proto::KeySharedMode::Sticky as i32,
            hash_ranges: vec![strobe_client::proto::IntRange { start: 0, end: 100 }],
            allow_out_of_order_delivery: Some(false),
            entry_bucket_dispatch: Some(true),
        })
        .subscribe()
        .await;
    assert!(
        broken.is_err(),
        "a boundary list that does not cover the ring is refused"
    );
}
