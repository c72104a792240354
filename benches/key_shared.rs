//! Key_Shared and PIP-486 entry-bucket dispatch against Shared on the same load,
//! and the pause of a moving bucket when a consumer joins. Starts its own
//! `strobe standalone` (release build recommended):
//!
//!     cargo bench --bench key_shared -- [MESSAGES] [JOINS]
//!
//! Load: 1 KiB messages over 10,000 keys, 10 consumers, batching per key
//! (Key_Shared, and Shared for a like-for-like run), per bucket (entry buckets,
//! 16 buckets) or plain (Shared).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use strobe_client::{BatchingType, Client, Consumer, InitialPosition, ProducerMessage, SubType};
use tokio::sync::Mutex;

#[path = "../tests/common/mod.rs"]
mod common;

const KEYS: usize = 10_000;
const CONSUMERS: usize = 10;
const BUCKETS: u32 = 16;

#[derive(Clone, Copy, Debug)]
enum Mode {
    Shared,
    /// Shared, with the producer batching per key as Key_Shared needs.
    SharedKeyBatched,
    KeyShared,
    Buckets,
}

async fn consumer(c: &Client, topic: &str, mode: Mode, name: &str) -> Consumer {
    let splits = strobe_client::equal_width_splits(BUCKETS);
    let b = c
        .consumer(topic, "bench")
        .consumer_name(name)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(1000);
    let b = match mode {
        Mode::Shared | Mode::SharedKeyBatched => b.sub_type(SubType::Shared),
        Mode::KeyShared => b.sub_type(SubType::KeyShared),
        Mode::Buckets => b.entry_bucket_dispatch(&splits),
    };
    b.subscribe().await.expect("subscribe")
}

/// Publishes `n` messages over 10,000 keys and consumes them with 10 consumers;
/// returns messages per second from the first send to the last receive.
async fn throughput(port: u16, mode: Mode, n: u64) -> f64 {
    let c = Client::builder(&format!("pulsar://127.0.0.1:{port}"))
        .build()
        .await
        .unwrap();
    let topic = format!("bench-{mode:?}-{n}");
    let received = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..CONSUMERS {
        let mut k = consumer(&c, &topic, mode, &format!("c{i}")).await;
        let received = received.clone();
        tasks.push(tokio::spawn(async move {
            while let Ok(Some(m)) = k.recv_timeout(Duration::from_secs(5)).await {
                k.ack(&m).unwrap();
                received.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let batching = match mode {
        Mode::Shared => BatchingType::Default,
        Mode::KeyShared | Mode::SharedKeyBatched => BatchingType::KeyBased,
        Mode::Buckets => BatchingType::EntryBucket {
            splits: strobe_client::equal_width_splits(BUCKETS),
        },
    };
    let producer = c
        .producer(&topic)
        .batching(Duration::from_millis(1), 1000, 128 << 10)
        .batching_type(batching)
        .max_pending_messages(4000)
        .create()
        .await
        .unwrap();
    let payload = vec![b'x'; 1024];
    let start = Instant::now();
    let mut pending = Vec::new();
    for i in 0..n {
        let msg =
            ProducerMessage::new(payload.clone()).with_key(format!("key-{}", i as usize % KEYS));
        pending.push(producer.send(msg).await.unwrap());
        if pending.len() >= 2000 {
            for p in pending.drain(..) {
                p.await.unwrap();
            }
        }
    }
    for p in pending {
        p.await.unwrap();
    }
    while received.load(Ordering::Relaxed) < n {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "consumers stalled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    for t in tasks {
        t.abort();
    }
    rate
}

/// With traffic at a steady rate over 16 buckets and 2 consumers, a third
/// consumer joins (then leaves) `joins` times. For each bucket that moves, the
/// pause is the time from the join to the bucket's first message at its new owner.
async fn moving_bucket_pauses(port: u16, joins: usize) -> Vec<Duration> {
    let c = Client::builder(&format!("pulsar://127.0.0.1:{port}"))
        .build()
        .await
        .unwrap();
    let topic = "bench-moving";
    let splits = strobe_client::equal_width_splits(BUCKETS);
    // bucket -> (owner, time of the last delivery)
    type Seen = Arc<Mutex<HashMap<u32, (String, Instant)>>>;
    let seen: Seen = Arc::default();
    let firsts: Arc<Mutex<Vec<(String, u32, Instant)>>> = Arc::default();
    let spawn = |mut k: Consumer, name: String| {
        let seen = seen.clone();
        let firsts = firsts.clone();
        let splits = splits.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = k.recv_timeout(Duration::from_secs(30)).await {
                let bucket =
                    strobe_client::entry_bucket_of(&splits, m.entry_hash_range.map_or(0, |r| r.0));
                let now = Instant::now();
                let mut s = seen.lock().await;
                if s.get(&bucket).is_none_or(|(o, _)| *o != name) {
                    firsts.lock().await.push((name.clone(), bucket, now));
                }
                s.insert(bucket, (name.clone(), now));
                drop(s);
                if k.ack(&m).is_err() {
                    break;
                }
            }
        })
    };
    let _a = spawn(consumer(&c, topic, Mode::Buckets, "a").await, "a".into());
    let _b = spawn(consumer(&c, topic, Mode::Buckets, "b").await, "b".into());
    let producer = c
        .producer(topic)
        .batching(Duration::from_millis(1), 100, 128 << 10)
        .batching_type(BatchingType::EntryBucket {
            splits: splits.clone(),
        })
        .create()
        .await
        .unwrap();
    // 2,000 msg/s in the background.
    let sender = tokio::spawn(async move {
        let mut i = 0usize;
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        loop {
            tick.tick().await;
            for _ in 0..2 {
                let msg =
                    ProducerMessage::new(vec![b'x'; 100]).with_key(format!("key-{}", i % KEYS));
                if producer.send(msg).await.is_err() {
                    return;
                }
                i += 1;
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut pauses = Vec::new();
    for j in 0..joins {
        let name = format!("z{j}");
        let joined = Instant::now();
        let t = spawn(
            consumer(&c, topic, Mode::Buckets, &name).await,
            name.clone(),
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
        for (who, _bucket, at) in firsts.lock().await.iter() {
            if *who == name && *at >= joined {
                pauses.push(at.duration_since(joined));
            }
        }
        t.abort(); // the joiner goes away; its buckets move back
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    sender.abort();
    pauses
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    if v.is_empty() {
        return Duration::ZERO;
    }
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let n: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let joins: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let broker = common::Strobe::start();
    println!(
        "# key_shared bench: {n} x 1 KiB messages, {KEYS} keys, {CONSUMERS} consumers, durable storage"
    );
    let mut rates = HashMap::new();
    for mode in [
        Mode::Shared,
        Mode::SharedKeyBatched,
        Mode::KeyShared,
        Mode::Buckets,
    ] {
        let r = rt.block_on(throughput(broker.port, mode, n));
        rates.insert(format!("{mode:?}"), r);
        println!("{:<10} {:>9.0} msg/s", format!("{mode:?}"), r);
    }
    let shared = rates["Shared"];
    println!(
        "Key_Shared at {:.0}% of Shared with the same per-key batching ({:.0}% of Shared batching freely); \
         entry buckets at {:.0}% of Shared",
        100.0 * rates["KeyShared"] / rates["SharedKeyBatched"],
        100.0 * rates["KeyShared"] / shared,
        100.0 * rates["Buckets"] / shared
    );
    let mut pauses = rt.block_on(moving_bucket_pauses(broker.port, joins));
    println!(
        "moving bucket pause over {} moves in {joins} joins: p50 {:?} p99 {:?} max {:?}",
        pauses.len(),
        pct(&mut pauses, 0.5),
        pct(&mut pauses, 0.99),
        pauses.last().copied().unwrap_or_default()
    );
}
