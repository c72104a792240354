//! `strobe-client` against the real `strobe` binary, both ways with the
//! official Python client (pulsar-client 3.13.0 from `.venv`): what one
//! produces the other consumes, batched and compressed (LZ4, ZSTD) included.
//! Also acks, negative acks, redelivery, Shared and Failover consumers,
//! batch-index acks, readers and seek with our client alone.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::Strobe;
use strobe_client::{
    BatchingType, Client, Compression, InitialPosition, ProducerMessage, SeekTo, SubType,
};

fn python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        p.exists(),
        "the official Python client is needed at {}: create it with \
         `python3 -m venv .venv && .venv/bin/pip install pulsar-client==3.13.0`",
        p.display()
    );
    p
}

/// Runs a Python snippet with `url` and `args` in `sys.argv[1..]`; returns stdout.
fn run_python(script: &str, args: &[&str]) -> String {
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const PY_CONSUME: &str = r#"
import sys, json, pulsar
url, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = pulsar.Client(url, operation_timeout_seconds=10)
cons = c.subscribe(topic, 'py-sub', initial_position=pulsar.InitialPosition.Earliest)
for _ in range(n):
    m = cons.receive(timeout_millis=10000)
    print(json.dumps({'data': m.data().decode(), 'key': m.partition_key(), 'props': m.properties()}))
    cons.acknowledge(m)
c.close()
"#;

const PY_PRODUCE: &str = r#"
import sys, pulsar
url, topic, n, comp = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ct = {'none': pulsar.CompressionType.NONE, 'lz4': pulsar.CompressionType.LZ4, 'zstd': pulsar.CompressionType.ZSTD}[comp]
c = pulsar.Client(url, operation_timeout_seconds=10)
p = c.create_producer(topic, compression_type=ct, batching_enabled=True,
                      batching_max_messages=25, batching_max_publish_delay_ms=20)
for i in range(n):
    p.send_async(('py-%d ' % i + 'x' * 200).encode(), None, partition_key='k%d' % (i % 7), properties={'i': str(i)})
p.flush()
c.close()
print('ok')
"#;

async fn client(s: &Strobe) -> Client {
    Client::builder(&format!("pulsar://127.0.0.1:{}", s.port))
        .operation_timeout(Duration::from_secs(10))
        .build()
        .await
        .expect("connect")
}

fn url(s: &Strobe) -> String {
    format!("pulsar://127.0.0.1:{}", s.port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_produces_python_consumes_batched_and_compressed() {
    let s = Strobe::start();
    let c = client(&s).await;
    for (i, comp) in [Compression::None, Compression::Lz4, Compression::Zstd(3)]
        .into_iter()
        .enumerate()
    {
        let topic = format!("rs-to-py-{i}");
        let producer = c
            .producer(&topic)
            .batching(Duration::from_millis(5), 20, 64 * 1024)
            .compression(comp)
            .create()
            .await
            .unwrap();
        let n = 100;
        let mut receipts = Vec::new();
        for j in 0..n {
            let m = ProducerMessage::new(format!("rs-{j} {}", "y".repeat(300)))
                .with_key(format!("k{}", j % 5))
                .with_property("j", j.to_string());
            receipts.push(producer.send(m).await.unwrap());
        }
        producer.flush().await.unwrap();
        let mut batched = 0;
        for r in receipts {
            if r.await.unwrap().batch_index >= 0 {
                batched += 1;
            }
        }
        assert_eq!(batched, n, "every message went out in a batch");
        let out = run_python(PY_CONSUME, &[&url(&s), &topic, &n.to_string()]);
        // The C++ client under pulsar-client logs to stdout too.
        let lines: Vec<serde_json::Value> = out
            .lines()
            .filter(|l| l.starts_with("{\"data\""))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), n);
        for (j, v) in lines.iter().enumerate() {
            assert_eq!(v["data"], format!("rs-{j} {}", "y".repeat(300)), "{comp:?}");
            assert_eq!(v["key"], format!("k{}", j % 5));
            assert_eq!(v["props"]["j"], j.to_string());
        }
        producer.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_produces_rust_consumes_batched_and_compressed() {
    let s = Strobe::start();
    let c = client(&s).await;
    for comp in ["none", "lz4", "zstd"] {
        let topic = format!("py-to-rs-{comp}");
        let mut consumer = c
            .consumer(&topic, "rs-sub")
            .initial_position(InitialPosition::Earliest)
            .subscribe()
            .await
            .unwrap();
        let n = 120;
        run_python(PY_PRODUCE, &[&url(&s), &topic, &n.to_string(), comp]);
        let mut batched = 0;
        for i in 0..n {
            let m = consumer
                .recv_timeout(Duration::from_secs(10))
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{comp}: message {i} did not arrive"));
            assert_eq!(
                m.payload,
                format!("py-{i} {}", "x".repeat(200)).as_bytes(),
                "{comp}"
            );
            assert_eq!(m.key.as_deref(), Some(format!("k{}", i % 7).as_str()));
            assert_eq!(m.properties, vec![("i".to_string(), i.to_string())]);
            if m.id.batch_size > 1 {
                batched += 1;
            }
            consumer.ack(&m).unwrap();
        }
        assert!(
            batched > n / 2,
            "{comp}: the Python producer batched ({batched})"
        );
        consumer.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_redelivers_and_acked_messages_stay_acked() {
    let s = Strobe::start();
    let c = client(&s).await;
    let mut consumer = c
        .consumer("nacks", "sub")
        .sub_type(SubType::Shared)
        .negative_ack_delay(Duration::from_millis(200))
        .ack_group_time(Duration::from_millis(10))
        .subscribe()
        .await
        .unwrap();
    let producer = c.producer("nacks").no_batching().create().await.unwrap();
    for i in 0..10 {
        producer.send_and_wait(format!("m{i}")).await.unwrap();
    }
    let mut nacked = Vec::new();
    for _ in 0..10 {
        let m = consumer
            .recv_timeout(Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        if m.payload.ends_with(b"3") || m.payload.ends_with(b"7") {
            consumer.nack(&m).unwrap();
            nacked.push(m.payload.clone());
        } else {
            consumer.ack(&m).unwrap();
        }
    }
    let mut again = Vec::new();
    for _ in 0..2 {
        let m = consumer
            .recv_timeout(Duration::from_secs(5))
            .await
            .unwrap()
            .expect("redelivered");
        assert!(m.redelivery_count >= 1);
        again.push(m.payload.clone());
        consumer.ack(&m).unwrap();
    }
    again.sort();
    assert_eq!(again, nacked);
    assert!(
        consumer
            .recv_timeout(Duration::from_millis(500))
            .await
            .unwrap()
            .is_none()
    );
    consumer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_index_acks_survive_a_reconnect() {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "batch-index";
    let mut consumer = c
        .consumer(topic, "sub")
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .unwrap();
    let producer = c
        .producer(topic)
        .batching(Duration::from_millis(50), 10, 1 << 20)
        .create()
        .await
        .unwrap();
    for i in 0..10 {
        producer.send(format!("b{i}")).await.unwrap();
    }
    producer.flush().await.unwrap();
    for i in 0..10 {
        let m = consumer
            .recv_timeout(Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.id.batch_size, 10);
        if i % 2 == 0 {
            consumer.ack(&m).unwrap();
        }
    }
    consumer.flush_acks();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(consumer);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut consumer = c.consumer(topic, "sub").subscribe().await.unwrap();
    let mut got = Vec::new();
    while let Some(m) = consumer.recv_timeout(Duration::from_secs(2)).await.unwrap() {
        got.push(String::from_utf8(m.payload.to_vec()).unwrap());
        consumer.ack(&m).unwrap();
    }
    assert_eq!(got, vec!["b1", "b3", "b5", "b7", "b9"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_consumers_split_and_cumulative_ack_on_exclusive() {
    let s = Strobe::start();
    let c = client(&s).await;
    let mut a = c
        .consumer("shared", "s")
        .sub_type(SubType::Shared)
        .receiver_queue_size(10)
        .subscribe()
        .await
        .unwrap();
    let mut b = c
        .consumer("shared", "s")
        .sub_type(SubType::Shared)
        .receiver_queue_size(10)
        .subscribe()
        .await
        .unwrap();
    let producer = c.producer("shared").no_batching().create().await.unwrap();
    for i in 0..40 {
        producer.send(format!("s{i}")).await.unwrap();
    }
    producer.flush().await.unwrap();
    let (mut na, mut nb) = (0, 0);
    loop {
        tokio::select! {
            m = a.recv_timeout(Duration::from_millis(700)) => match m.unwrap() {
                Some(m) => { a.ack(&m).unwrap(); na += 1; }
                None => break,
            },
            m = b.recv_timeout(Duration::from_millis(700)) => match m.unwrap() {
                Some(m) => { b.ack(&m).unwrap(); nb += 1; }
                None => break,
            },
        }
    }
    assert_eq!(na + nb, 40);
    assert!(
        na > 0 && nb > 0,
        "both Shared consumers got messages ({na}, {nb})"
    );

    let mut e = c
        .consumer("excl", "e")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let p2 = c.producer("excl").create().await.unwrap();
    for i in 0..20 {
        p2.send(format!("e{i}")).await.unwrap();
    }
    p2.flush().await.unwrap();
    let mut last = None;
    for _ in 0..12 {
        last = Some(
            e.recv_timeout(Duration::from_secs(5))
                .await
                .unwrap()
                .unwrap(),
        );
    }
    e.ack_cumulative(last.as_ref().unwrap()).unwrap();
    e.close().await.unwrap();
    let mut e = c.consumer("excl", "e").subscribe().await.unwrap();
    let first = e
        .recv_timeout(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.payload, "e12".as_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_reads_from_start_and_seeks() {
    let s = Strobe::start();
    let c = client(&s).await;
    let producer = c.producer("reader").no_batching().create().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(producer.send_and_wait(format!("r{i}")).await.unwrap());
    }
    let mut r = c.reader("reader").start_earliest().create().await.unwrap();
    for i in 0..10 {
        let m = r
            .recv_timeout(Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload, format!("r{i}").as_bytes());
    }
    assert!(!r.has_message_available().await.unwrap());
    r.seek(SeekTo::Id(ids[4])).await.unwrap();
    let m = r
        .recv_timeout(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload, "r4".as_bytes());
    r.close().await.unwrap();

    let mut r = c
        .reader("reader")
        .start_at(ids[6], false)
        .create()
        .await
        .unwrap();
    let m = r
        .recv_timeout(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload, "r7".as_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_based_and_entry_bucket_batches_keep_keys_together() {
    let s = Strobe::start();
    let c = client(&s).await;
    let splits = strobe_client::equal_width_splits(4);
    for (topic, kind) in [
        ("keyed", BatchingType::KeyBased),
        (
            "bucketed",
            BatchingType::EntryBucket {
                splits: splits.clone(),
            },
        ),
    ] {
        let mut consumer = c.consumer(topic, "k").subscribe().await.unwrap();
        let producer = c
            .producer(topic)
            .batching(Duration::from_millis(20), 100, 1 << 20)
            .batching_type(kind.clone())
            .create()
            .await
            .unwrap();
        for i in 0..60 {
            producer
                .send(ProducerMessage::new(format!("v{i}")).with_key(format!("key-{}", i % 6)))
                .await
                .unwrap();
        }
        producer.flush().await.unwrap();
        let mut per_entry: std::collections::HashMap<_, Vec<String>> = Default::default();
        for _ in 0..60 {
            let m = consumer
                .recv_timeout(Duration::from_secs(5))
                .await
                .unwrap()
                .unwrap();
            if let BatchingType::EntryBucket { .. } = kind {
                let (lo, hi) = m.entry_hash_range.expect("stamped");
                let h = strobe_client::entry_hash(m.key.as_deref().map(str::as_bytes));
                assert!(lo <= h && h <= hi);
                assert_eq!(
                    strobe_client::entry_bucket_of(&splits, lo),
                    strobe_client::entry_bucket_of(&splits, hi),
                    "one bucket per entry"
                );
            }
            per_entry
                .entry(m.id.position)
                .or_default()
                .push(m.key.clone().unwrap());
            consumer.ack(&m).unwrap();
        }
        if kind == BatchingType::KeyBased {
            for keys in per_entry.values() {
                assert!(
                    keys.iter().all(|k| k == &keys[0]),
                    "one key per batch: {keys:?}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_limit_refuses_when_full() {
    let s = Strobe::start();
    let c = client(&s).await;
    let producer = c
        .producer("pending-limit")
        .no_batching()
        .max_pending_messages(2)
        .block_if_queue_full(false)
        .create()
        .await
        .unwrap();
    let a = producer.send("1").await.unwrap();
    let b = producer.send("2").await.unwrap();
    let third = producer.send("3").await;
    assert!(third.is_err() || producer.pending() <= 2);
    a.await.unwrap();
    b.await.unwrap();
}

/// A strobe process on a fixed port and data directory, so that a restart
/// comes back where the clients expect it.
struct Fixed {
    child: std::process::Child,
    port: u16,
}

impl Fixed {
    fn start(dir: &std::path::Path, port: u16) -> Fixed {
        let child = Command::new(env!("CARGO_BIN_EXE_strobe"))
            .args(["standalone", "--data-dir"])
            .arg(dir)
            .args(["--broker-port", &port.to_string()])
            .args(["--http-port", &common::free_port().to_string()])
            .args([
                "--bind-address",
                "127.0.0.1",
                "--advertised-address",
                "127.0.0.1",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn strobe");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "strobe did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Fixed { child, port }
    }
}

impl Drop for Fixed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_and_consumer_survive_a_broker_restart() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let broker = Fixed::start(dir.path(), port);
    let c = Client::builder(&format!("pulsar://127.0.0.1:{}", broker.port))
        .operation_timeout(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let mut consumer = c.consumer("restart", "sub").subscribe().await.unwrap();
    let producer = c.producer("restart").no_batching().create().await.unwrap();
    for i in 0..5 {
        producer.send_and_wait(format!("before{i}")).await.unwrap();
    }
    for i in 0..5 {
        let m = consumer
            .recv_timeout(Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload, format!("before{i}").as_bytes());
        consumer.ack(&m).unwrap();
    }
    consumer.flush_acks();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(broker); // kill -9
    // Sent while the broker is down: queued, then sent after the reconnect.
    let pending: Vec<_> = {
        let mut v = Vec::new();
        for i in 0..5 {
            v.push(producer.send(format!("after{i}")).await.unwrap());
        }
        v
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _broker = Fixed::start(dir.path(), port);
    for f in pending {
        tokio::time::timeout(Duration::from_secs(20), f)
            .await
            .expect("receipt after the restart")
            .unwrap();
    }
    let mut got = Vec::new();
    while got.len() < 5 {
        let m = consumer
            .recv_timeout(Duration::from_secs(20))
            .await
            .unwrap()
            .expect("message after the restart");
        let s = String::from_utf8(m.payload.to_vec()).unwrap();
        consumer.ack(&m).unwrap();
        // Acks are flushed every 100 ms, so a kill may redeliver a few; never skip.
        if s.starts_with("after") {
            got.push(s);
        }
    }
    assert_eq!(got, (0..5).map(|i| format!("after{i}")).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_has_one_active_consumer() {
    let s = Strobe::start();
    let c = client(&s).await;
    let mut a = c
        .consumer("failover", "f")
        .sub_type(SubType::Failover)
        .consumer_name("a")
        .subscribe()
        .await
        .unwrap();
    let mut b = c
        .consumer("failover", "f")
        .sub_type(SubType::Failover)
        .consumer_name("b")
        .subscribe()
        .await
        .unwrap();
    let producer = c.producer("failover").create().await.unwrap();
    for i in 0..20 {
        producer.send(format!("f{i}")).await.unwrap();
    }
    producer.flush().await.unwrap();
    let (mut na, mut nb) = (0, 0);
    while let Some(m) = a.recv_timeout(Duration::from_millis(700)).await.unwrap() {
        a.ack(&m).unwrap();
        na += 1;
    }
    while let Some(m) = b.recv_timeout(Duration::from_millis(300)).await.unwrap() {
        b.ack(&m).unwrap();
        nb += 1;
    }
    assert_eq!(na + nb, 20);
    assert!(
        na == 0 || nb == 0,
        "one active consumer gets everything ({na}, {nb})"
    );
}

/// Drains two consumers until both stay quiet; returns (consumer index, message) pairs.
async fn drain_two(
    a: &mut strobe_client::Consumer,
    b: &mut strobe_client::Consumer,
) -> Vec<(usize, strobe_client::Message)> {
    let mut got = Vec::new();
    loop {
        tokio::select! {
            m = a.recv_timeout(Duration::from_millis(1500)) => match m.unwrap() {
                Some(m) => { a.ack(&m).unwrap(); got.push((0, m)); }
                None => break,
            },
            m = b.recv_timeout(Duration::from_millis(1500)) => match m.unwrap() {
                Some(m) => { b.ack(&m).unwrap(); got.push((1, m)); }
                None => break,
            },
        }
    }
    // One side timed out; the other may still hold messages.
    while let Some(m) = a.recv_timeout(Duration::from_millis(300)).await.unwrap() {
        a.ack(&m).unwrap();
        got.push((0, m));
    }
    while let Some(m) = b.recv_timeout(Duration::from_millis(300)).await.unwrap() {
        b.ack(&m).unwrap();
        got.push((1, m));
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_shared_keeps_each_key_on_one_consumer() {
    let s = Strobe::start();
    let c = client(&s).await;
    let sub = |name: &str| {
        c.consumer("ks", "ks")
            .sub_type(SubType::KeyShared)
            .consumer_name(name)
            .subscribe()
    };
    let mut a = sub("a").await.unwrap();
    let mut b = sub("b").await.unwrap();
    let producer = c
        .producer("ks")
        .batching(Duration::from_millis(5), 50, 1 << 20)
        .batching_type(BatchingType::KeyBased)
        .create()
        .await
        .unwrap();
    for i in 0..200 {
        producer
            .send(ProducerMessage::new(format!("k{i}")).with_key(format!("key-{}", i % 16)))
            .await
            .unwrap();
    }
    producer.flush().await.unwrap();
    let got = drain_two(&mut a, &mut b).await;
    assert_eq!(got.len(), 200);
    let mut owner: std::collections::HashMap<String, usize> = Default::default();
    for (who, m) in &got {
        let k = m.key.clone().unwrap();
        assert_eq!(
            *owner.entry(k.clone()).or_insert(*who),
            *who,
            "{k} went to both consumers"
        );
    }
    assert!(
        owner.values().any(|w| *w == 0) && owner.values().any(|w| *w == 1),
        "both consumers own keys"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_bucket_producer_and_consumers_against_the_broker() {
    let s = Strobe::start();
    let c = client(&s).await;
    let splits = strobe_client::equal_width_splits(4);
    let sub = |name: &str| {
        c.consumer("buckets", "eb")
            .entry_bucket_dispatch(&splits)
            .consumer_name(name)
            .subscribe()
    };
    let mut a = sub("a").await.unwrap();
    let mut b = sub("b").await.unwrap();
    let producer = c
        .producer("buckets")
        .batching(Duration::from_millis(5), 50, 1 << 20)
        .batching_type(BatchingType::EntryBucket {
            splits: splits.clone(),
        })
        .create()
        .await
        .unwrap();
    for i in 0..300 {
        producer
            .send(ProducerMessage::new(format!("e{i}")).with_key(format!("key-{}", i % 40)))
            .await
            .unwrap();
    }
    producer.flush().await.unwrap();
    let got = drain_two(&mut a, &mut b).await;
    assert_eq!(got.len(), 300);
    let mut owner: std::collections::HashMap<u32, usize> = Default::default();
    for (who, m) in &got {
        let (lo, hi) = m.entry_hash_range.expect("every entry is stamped");
        let bucket = strobe_client::entry_bucket_of(&splits, lo);
        assert_eq!(bucket, strobe_client::entry_bucket_of(&splits, hi));
        assert_eq!(
            *owner.entry(bucket).or_insert(*who),
            *who,
            "bucket {bucket} went to both consumers"
        );
    }
    assert!(owner.len() > 1);
}
