//! A randomized fault campaign with a history checker (issue 42).
//!
//! The cluster ([`world`]): three etcd members, an S3 server, three brokers
//! whose links to etcd, to the store and to their clients each pass through
//! a proxy, and whose clocks run through libfaketime. The nemesis
//! ([`faults`]) overlaps, from a seed: `kill -9` and restart of a broker
//! (the next life perhaps on a clock running at half or twice the speed),
//! SIGSTOP/SIGCONT for 1–20 s, a broker cut off from etcd, from the store
//! or from its clients, `kill -9` of an etcd member or of the etcd leader,
//! forward clock jumps, PIP-307 transfers, unloads, bundle splits and
//! rolling restarts.
//!
//! The workloads, every operation and outcome recorded:
//! - our client: two producers with deduplication on, keyed messages to a
//!   4-partition topic; consumers of all four subscription types
//!   acknowledging; a reader per partition; consume-transform-produce in
//!   transactions from each partition to one output topic;
//! - the official Python client (`workload.py`): a named producer to a
//!   second partitioned topic, a Failover and a Shared consumer.
//!
//! After the faults heal and everything drains, the checker
//! ([`check`]) reads the history and the logs read back from their first
//! entry, counts anomalies by kind, and writes `target/tmp/nemesis/<seed>
//! .json` (summary), `.svg` (the fault timeline over throughput and
//! latency) and the processes' logs. One command:
//!
//! `STROBE_NEMESIS_SEED=7 STROBE_NEMESIS_SECS=600 cargo test --features cluster --test nemesis -- --nocapture`

#![cfg(feature = "cluster")]

mod check;
#[path = "../common/mod.rs"]
mod common;
mod faults;
mod world;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use check::{History, Op};
use faults::{Nemesis, Rng};
use strobe_client::{
    BatchingType, Client, Consumer, Error, InitialPosition, Producer, ProducerMessage, SubType,
};
use tokio::sync::mpsc;
use world::World;

const TOPIC: &str = "persistent://public/default/nemesis";
const PY_TOPIC: &str = "persistent://public/default/nemesis-py";
const CTP_OUT: &str = "persistent://public/default/nemesis-ctp";
const PARTITIONS: u64 = 4;
const PY_PARTITIONS: u64 = 2;
const KEYS: u64 = 16;
const PRODUCERS: u64 = 2;
/// A producer sends one message per key each tick (1,600 messages/s in
/// all: what the debug build's transactions keep up with).
const TICK: Duration = Duration::from_millis(20);
const BROKERS: usize = 3;
/// How long after the load stops every outstanding receipt must come.
const RECEIPT_GRACE: Duration = Duration::from_secs(60);
/// A consumer that got nothing for this long after the heal has drained.
const IDLE: Duration = Duration::from_secs(15);
/// The longest the consumers may take to drain once the load stops.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);
/// Subscriptions: name, type, consumers.
const SUBS: [(&str, SubType, usize); 4] = [
    ("ex", SubType::Exclusive, 1),
    ("fo", SubType::Failover, 2),
    ("ks", SubType::KeyShared, 2),
    ("sh", SubType::Shared, 2),
];

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn partition(p: u64) -> String {
    format!("{TOPIC}-partition-{p}")
}

async fn client(url: &str) -> Client {
    Client::builder(url)
        .operation_timeout(Duration::from_secs(20))
        .build()
        .await
        .expect("connect")
}

/// One producer task: every [`TICK`] a message for each of its keys' next
/// sequence, to the key's partition, under a fixed producer name (so
/// deduplication spans its reconnects).
async fn produce(url: String, prod: u64, stop: Arc<AtomicBool>, h: mpsc::UnboundedSender<Op>) {
    let client = client(&url).await;
    let mut producers = Vec::new();
    for p in 0..PARTITIONS {
        producers.push(
            client
                .producer(&partition(p))
                .name(&format!("nemesis-{prod}-{p}"))
                // Key_Shared keeps a key's order only when a batch holds
                // one key (Pulsar's KEY_BASED batcher; the default batcher
                // mixes keys, and a batch goes where its first key goes).
                .batching_type(BatchingType::KeyBased)
                .send_timeout(None)
                .create()
                .await
                .unwrap(),
        );
    }
    // Each receipt is awaited on its own (a stalled partition does not hold
    // the others' timings back); once the load stops, every one still
    // missing must come within RECEIPT_GRACE of that moment.
    let wind_down: Arc<std::sync::Mutex<Option<tokio::time::Instant>>> = Default::default();
    let mut receipts = tokio::task::JoinSet::new();
    let await_receipt = |payload: String, at: Instant, mut receipt: strobe_client::SendFuture| {
        let (wind_down, h) = (wind_down.clone(), h.clone());
        async move {
            loop {
                let until = (*wind_down.lock().unwrap())
                    .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(1));
                match tokio::time::timeout_at(until, &mut receipt).await {
                    Ok(Ok(_)) => {
                        let _ = h.send(Op::acked(TOPIC, payload, at));
                        return;
                    }
                    Ok(Err(_)) => return,
                    // Stuck only once the grace has passed: a wait begun
                    // before the load stopped ends on its own one-second
                    // timer, and took the grace as over (receipts that
                    // came seconds after the stop counted as missing).
                    Err(_)
                        if wind_down
                            .lock()
                            .unwrap()
                            .is_some_and(|d| tokio::time::Instant::now() >= d) =>
                    {
                        let _ = h.send(Op::Stuck(TOPIC, payload));
                        return;
                    }
                    Err(_) => {}
                }
            }
        }
    };
    let mut seq = vec![0u64; KEYS as usize];
    let mut tick = tokio::time::interval(TICK);
    'load: while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        while receipts.try_join_next().is_some() {}
        for key in 0..KEYS {
            let p = format!("{prod}:{key}:{}", seq[key as usize]);
            let msg = ProducerMessage::new(p.clone().into_bytes()).with_key(format!("k{key}"));
            // `send` waits for room in the producer's queue; a producer
            // whose receipts stopped would hold the load for ever, so the
            // wait is re-checked against `stop` every second.
            let producer = &producers[(key % PARTITIONS) as usize];
            let mut sending = std::pin::pin!(producer.send(msg));
            let outcome = loop {
                match tokio::time::timeout(Duration::from_secs(1), &mut sending).await {
                    Ok(r) => break r,
                    Err(_) if stop.load(Ordering::Relaxed) => break 'load,
                    Err(_) => {}
                }
            };
            match outcome {
                Ok(r) => {
                    seq[key as usize] += 1;
                    let _ = h.send(Op::Sent(TOPIC, p.clone()));
                    receipts.spawn(await_receipt(p, Instant::now(), r));
                }
                // Not sent (the producer's queue is full while it
                // reconnects): the same sequence goes next tick.
                Err(_) => break,
            }
        }
    }
    *wind_down.lock().unwrap() = Some(tokio::time::Instant::now() + RECEIPT_GRACE);
    while receipts.join_next().await.is_some() {}
    client.close().await;
}

/// Whether a consumer is done: the load has stopped (every producer has
/// its receipts or gave up) and nothing came for [`IDLE`] since then. Quiet
/// from before the stop does not count: a producer's last messages may be
/// acknowledged, and delivered, only at its wind-down.
fn quiet(stop: &AtomicBool, stopped: &mut bool, quiet_since: &mut Instant) -> bool {
    if !*stopped && stop.load(Ordering::Relaxed) {
        *stopped = true;
        *quiet_since = (*quiet_since).max(Instant::now());
    }
    *stopped && quiet_since.elapsed() >= IDLE
}

/// One consumer of subscription `sub` on every partition, acknowledging
/// what it gets. Ends once `stop` is set and nothing came for [`IDLE`].
async fn consume(
    url: String,
    sub: &'static str,
    ty: SubType,
    name: String,
    h: mpsc::UnboundedSender<Op>,
    stop: Arc<AtomicBool>,
) {
    let client = client(&url).await;
    let mut tasks = Vec::new();
    for p in 0..PARTITIONS {
        let mut c = client
            .consumer(&partition(p), sub)
            .sub_type(ty)
            .consumer_name(&name)
            .initial_position(InitialPosition::Earliest)
            .subscribe()
            .await
            .unwrap();
        let (h, stop) = (h.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let (mut quiet_since, mut stopped) = (Instant::now(), false);
            loop {
                match c.recv_timeout(Duration::from_millis(500)).await {
                    Ok(Some(m)) => {
                        quiet_since = Instant::now();
                        let text = String::from_utf8(m.payload.to_vec()).unwrap();
                        let _ = h.send(Op::Recv(TOPIC, sub, text));
                        let _ = c.ack(&m);
                    }
                    _ => {
                        if quiet(&stop, &mut stopped, &mut quiet_since) {
                            let _ = c.close().await;
                            return;
                        }
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    client.close().await;
}

/// A reader of partition `p` from its first entry; what it returns, in
/// order, is checked against the log.
async fn read(url: String, p: u64, h: mpsc::UnboundedSender<Op>, stop: Arc<AtomicBool>) {
    let client = client(&url).await;
    let mut r = client
        .reader(&partition(p))
        .start_earliest()
        .create()
        .await
        .unwrap();
    let (mut quiet_since, mut stopped) = (Instant::now(), false);
    loop {
        match r.recv_timeout(Duration::from_millis(500)).await {
            Ok(Some(m)) => {
                quiet_since = Instant::now();
                let text = String::from_utf8(m.payload.to_vec()).unwrap();
                let _ = h.send(Op::Read(p, text));
            }
            _ => {
                if quiet(&stop, &mut stopped, &mut quiet_since) {
                    let _ = r.close().await;
                    break;
                }
            }
        }
    }
    client.close().await;
}

/// Consume-transform-produce from partition `p` to [`CTP_OUT`] in
/// transactions of up to 200 messages: send each transformed, acknowledge
/// the input cumulatively in the same transaction, commit; any failure
/// aborts and the batch comes again.
async fn transform(url: String, p: u64, h: mpsc::UnboundedSender<Op>, stop: Arc<AtomicBool>) {
    let client = client(&url).await;
    let subscribe = || async {
        loop {
            match client
                .consumer(&partition(p), "ctp")
                .sub_type(SubType::Failover)
                .initial_position(InitialPosition::Earliest)
                .subscribe()
                .await
            {
                Ok(c) => return c,
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    };
    let out = loop {
        match client
            .producer(CTP_OUT)
            .name(&format!("ctp-{p}"))
            .no_batching()
            .send_timeout(None)
            .create()
            .await
        {
            Ok(o) => break o,
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    };
    let mut input = subscribe().await;
    let mut life = 0u32;
    // The last input processed in this consumer life: what comes again at
    // or before it is a redelivery (the topic moved and the client
    // subscribed again: Pulsar's at-least-once), already in a transaction
    // of this life, and skipped. Without this the transformer produced
    // such messages twice and acked the last one received, a redelivery,
    // so its next transaction did the rest again.
    let mut last: Option<(u64, u64, i32)> = None;
    let (mut quiet_since, mut stopped) = (Instant::now(), false);
    loop {
        match transform_batch(&client, &mut input, &out, &h, (p, life), &mut last).await {
            Ok(0) => {
                if quiet(&stop, &mut stopped, &mut quiet_since) {
                    break;
                }
            }
            Ok(_) => quiet_since = Instant::now(),
            Err(_) => {
                drop(input);
                tokio::time::sleep(Duration::from_millis(500)).await;
                input = subscribe().await;
                life += 1;
                last = None;
            }
        }
    }
    let _ = input.close().await;
    client.close().await;
}

/// The output topic's messages stored more than once: each copy's id,
/// producer, sequence id and publish time.
async fn output_copies(client: &Client) -> BTreeMap<String, Vec<String>> {
    let mut reader = client
        .reader(CTP_OUT)
        .start_earliest()
        .create()
        .await
        .unwrap();
    let mut all: BTreeMap<String, Vec<String>> = BTreeMap::new();
    while reader.has_message_available().await.unwrap_or(false) {
        let Ok(Some(m)) = reader.recv_timeout(Duration::from_secs(10)).await else {
            break;
        };
        let p = m.id.position;
        all.entry(String::from_utf8_lossy(&m.payload).into_owned())
            .or_default()
            .push(format!(
                "{}:{}:{} {} seq {} at {}",
                p.ledger_id,
                p.entry_id,
                m.id.batch_index,
                m.producer_name,
                m.sequence_id,
                m.publish_time
            ));
    }
    all.retain(|_, v| v.len() > 1);
    all
}

/// One transaction; its batch and outcome go to the history.
async fn transform_batch(
    c: &Client,
    input: &mut Consumer,
    out: &Producer,
    h: &mpsc::UnboundedSender<Op>,
    who: (u64, u32),
    last: &mut Option<(u64, u64, i32)>,
) -> Result<usize, Error> {
    let mut msgs = Vec::new();
    while msgs.len() < 200 {
        match input.recv_timeout(Duration::from_millis(100)).await? {
            Some(m) => {
                let at = (
                    m.id.position.ledger_id,
                    m.id.position.entry_id,
                    m.id.batch_index,
                );
                if last.is_some_and(|l| at <= l) {
                    continue;
                }
                *last = Some(at);
                msgs.push(m);
            }
            None => break,
        }
    }
    // A failed batch is done again in the next consumer life (the caller
    // subscribes again and `last` starts afresh), so nothing skipped here
    // is lost.
    if msgs.is_empty() {
        return Ok(0);
    }
    let batch: Vec<String> = msgs
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    let journal = |txn: String, outcome: &str| {
        let ids: Vec<String> = msgs
            .iter()
            .map(|m| {
                let p = m.id.position;
                format!("{}:{}:{}", p.ledger_id, p.entry_id, m.id.batch_index)
            })
            .collect();
        let line = serde_json::json!({
            "partition": who.0, "life": who.1, "txn": txn, "outcome": outcome,
            "at_ms": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            "batch": batch, "ids": ids,
        });
        let _ = h.send(Op::Journal(line.to_string()));
    };
    let txn = match c.new_transaction(Duration::from_secs(60)).await {
        Ok(t) => t,
        Err(e) => {
            journal("none".into(), &format!("no transaction: {e}"));
            let _ = h.send(Op::Aborted(format!("no transaction: {e}"), batch));
            return Err(e);
        }
    };
    let work = async {
        let mut sends = Vec::new();
        for m in &msgs {
            let mut t = b"t:".to_vec();
            t.extend_from_slice(&m.payload);
            sends.push(txn.send(out, t).await?);
        }
        // One cumulative acknowledgement (Failover) covers the batch.
        txn.ack(input, msgs.last().expect("a batch"), true).await?;
        for s in sends {
            s.await?;
        }
        txn.commit().await
    };
    match tokio::time::timeout(Duration::from_secs(60), work).await {
        Ok(Ok(())) => {
            journal(format!("{:?}", txn.id()), "committed");
            let _ = h.send(Op::Committed(batch));
            Ok(msgs.len())
        }
        outcome => {
            // Committed or aborted, the caller subscribes again: what the
            // subscription has not acknowledged (an aborted transaction's
            // batch) comes back. Kept, the batch would stay delivered but
            // unacknowledged, and the next cumulative acknowledgement would
            // cover it untransformed.
            let aborted = txn.abort().await;
            let e = match outcome {
                Ok(Err(e)) => e,
                _ => Error::Timeout("transaction"),
            };
            journal(
                format!("{:?}", txn.id()),
                &format!("failed: {e}; abort: {:?}", aborted.as_ref().err()),
            );
            let _ = h.send(Op::Aborted(
                format!(
                    "txn {:?}: {e} (abort: {:?})",
                    txn.id(),
                    aborted.err().map(|e| e.to_string())
                ),
                batch,
            ));
            Err(e)
        }
    }
}

/// A child process killed when dropped: a campaign that panics leaves
/// no workload behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The official Python client's workload, as a process.
fn python_workload(url: &str, history: &std::path::Path, stop: &std::path::Path) -> KillOnDrop {
    let python = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: tests/run-all.sh makes the venv with pulsar-client",
        python.display()
    );
    std::process::Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/nemesis/workload.py"
        ))
        .args([url, PY_TOPIC])
        .arg(history)
        .arg(stop)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(history.with_extension("stderr")).unwrap())
        .spawn()
        .map(KillOnDrop)
        .expect("spawn the Python workload")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_randomized_fault_campaign_loses_duplicates_and_reorders_nothing() {
    let seed = env_u64("STROBE_NEMESIS_SEED", 42);
    let secs = env_u64("STROBE_NEMESIS_SECS", 180);
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("nemesis");
    std::fs::create_dir_all(&out).unwrap();
    // The client's own account of its reconnects, beside the brokers' logs.
    let client_log = std::fs::File::create(out.join(format!("{seed}-client.log"))).unwrap();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "strobe_client=debug,warn",
        ))
        .with_writer(std::sync::Mutex::new(client_log))
        .with_ansi(false)
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let mut world = World::start(dir.path(), BROKERS).await;
    let admin = world.brokers[0].as_ref().unwrap();
    for (method, path, body) in [
        (
            "POST",
            "/admin/v2/namespaces/public/default/deduplication",
            "true",
        ),
        // The checker reads the logs back: nothing consumed is deleted.
        (
            "POST",
            "/admin/v2/namespaces/public/default/retention",
            r#"{"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}"#,
        ),
        (
            "PUT",
            "/admin/v2/persistent/public/default/nemesis/partitions",
            &PARTITIONS.to_string(),
        ),
        (
            "PUT",
            "/admin/v2/persistent/public/default/nemesis-py/partitions",
            &PY_PARTITIONS.to_string(),
        ),
    ] {
        let (st, body) = admin.http(method, path, body).unwrap();
        assert!(st == 204 || st == 200, "{path}: {st} {body}");
    }
    let url = world.service_url();

    let (h, mut history_rx) = mpsc::unbounded_channel::<Op>();
    let started = Instant::now();
    let collector = tokio::spawn(async move {
        let mut history = History::new(started);
        while let Some(op) = history_rx.recv().await {
            history.add(op);
        }
        history
    });
    let stop_consumers = Arc::new(AtomicBool::new(false));
    let mut drains = Vec::new();
    for (sub, ty, n) in SUBS {
        for c in 0..n {
            drains.push(tokio::spawn(consume(
                url.clone(),
                sub,
                ty,
                format!("{sub}-{c}"),
                h.clone(),
                stop_consumers.clone(),
            )));
        }
    }
    for p in 0..PARTITIONS {
        drains.push(tokio::spawn(read(
            url.clone(),
            p,
            h.clone(),
            stop_consumers.clone(),
        )));
        drains.push(tokio::spawn(transform(
            url.clone(),
            p,
            h.clone(),
            stop_consumers.clone(),
        )));
    }
    let stop_producers = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| tokio::spawn(produce(url.clone(), p, stop_producers.clone(), h.clone())))
        .collect();
    let py_history = dir.path().join("python.jsonl");
    let py_stop = dir.path().join("python.stop");
    let mut python = python_workload(&url, &py_history, &py_stop);

    let mut nemesis = Nemesis::new();
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        tokio::time::sleep(rng.between(300, 2500)).await;
        nemesis.heal(&mut world, false);
        nemesis.strike(&mut world, &mut rng);
    }
    nemesis.heal(&mut world, true);
    let healed_ms = nemesis.started.elapsed().as_millis();
    println!("{healed_ms:>7} ms  healed");
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop_producers.store(true, Ordering::Relaxed);
    std::fs::write(&py_stop, "").unwrap();
    for p in producers {
        p.await.unwrap();
    }
    let phase = |what: &str| {
        println!("{:>7} ms  {what}", nemesis.started.elapsed().as_millis());
    };
    phase("producers done");
    stop_consumers.store(true, Ordering::Relaxed);
    // Consumers, readers and transformers end once drained; one still going
    // DRAIN_LIMIT after the load stopped is stuck.
    let drain_deadline = tokio::time::Instant::now() + DRAIN_LIMIT;
    let mut stuck_drains = 0;
    for mut d in drains {
        if tokio::time::timeout_at(drain_deadline, &mut d)
            .await
            .is_err()
        {
            d.abort();
            stuck_drains += 1;
        }
    }
    phase("consumers drained");
    // The Python workload ends by itself once drained (60 s for receipts,
    // then 15 s of quiet); one that does not is an anomaly.
    let py_deadline = Instant::now() + Duration::from_secs(180);
    let py_hung = loop {
        if python.0.try_wait().unwrap().is_some() {
            break false;
        }
        if Instant::now() > py_deadline {
            let _ = python.0.kill();
            break true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    phase("python workload done");
    drop(h);
    let mut history = collector.await.unwrap();
    history.add_python(&std::fs::read_to_string(&py_history).unwrap_or_default());

    // The logs, read back from their first entry.
    let reader = client(&url).await;
    // All at once: the brokers and the client share two cores, and one
    // read at a time leaves them waiting on each other.
    let topics: Vec<String> = (0..PARTITIONS)
        .map(partition)
        .chain((0..PY_PARTITIONS).map(|p| format!("{PY_TOPIC}-partition-{p}")))
        .chain([CTP_OUT.to_string()])
        .collect();
    let mut reads = tokio::task::JoinSet::new();
    for t in topics {
        let reader = reader.clone();
        reads.spawn(async move {
            let got = common::read_texts_partly(&reader, &t).await;
            (t, got)
        });
    }
    let mut logs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut stopped_readers = Vec::new();
    while let Some(r) = reads.join_next().await {
        let (t, (got, stopped)) = r.unwrap();
        logs.insert(t, got);
        stopped_readers.extend(stopped);
    }
    phase("logs read back");
    let mut anomalies = check::check(&history, &logs, TOPIC, PY_TOPIC, CTP_OUT, &SUBS);
    if anomalies.contains_key("transaction duplicate") {
        // Where each copy is, with its producer and sequence id: the same
        // sequence twice is a resend deduplication let through; two
        // sequences, the client sent it twice.
        let copies = output_copies(&reader).await;
        std::fs::write(
            out.join(format!("{seed}-ctp-duplicates.json")),
            serde_json::to_string_pretty(&copies).unwrap(),
        )
        .unwrap();
    }
    if !stopped_readers.is_empty() {
        // What they did not read shows as lost too.
        anomalies
            .entry("stuck reader")
            .or_default()
            .extend(stopped_readers);
    }
    if stuck_drains > 0 {
        anomalies.entry("stuck consumer").or_default().push(format!(
            "{stuck_drains} consumers, readers or transformers still going {} s after the load stopped",
            DRAIN_LIMIT.as_secs()
        ));
    }
    for f in &world.start_failures {
        anomalies
            .entry("broker failed to start")
            .or_default()
            .push(f.clone());
    }
    if py_hung {
        anomalies
            .entry("stuck workload")
            .or_default()
            .push("the Python workload did not end 180 s after the load stopped".into());
    }

    // What the transformers left behind: their subscription's backlog.
    let mut ctp_backlog = BTreeMap::new();
    for p in 0..PARTITIONS {
        let path = format!("/admin/v2/persistent/public/default/nemesis-partition-{p}/stats");
        let backlog = (0..BROKERS)
            .filter_map(|i| world.http_port(i))
            .find_map(|port| match faults::http(port, "GET", &path) {
                Some((200, body)) => serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .map(|v| v["subscriptions"]["ctp"]["msgBacklog"].clone()),
                _ => None,
            });
        ctp_backlog.insert(p, backlog);
    }
    // Inputs that went by untransformed, by the transaction they were last in.
    let mut lost_by_txn: BTreeMap<String, usize> = BTreeMap::new();
    for x in anomalies.get("transaction lost").into_iter().flatten() {
        let why = x
            .split_once(" (")
            .map_or("", |(_, w)| w.trim_end_matches(')'));
        *lost_by_txn.entry(why.to_string()).or_default() += 1;
    }
    let faults = nemesis.timeline.lock().unwrap().clone();
    let counts: BTreeMap<&str, usize> = anomalies.iter().map(|(k, v)| (*k, v.len())).collect();
    let summary = serde_json::json!({
        "seed": seed,
        "seconds": secs,
        "healed_at_ms": healed_ms,
        "faults": faults,
        "fault_count": faults.len(),
        "totals": history.totals(&logs),
        "transformers_backlog": ctp_backlog,
        "transaction_lost_by_txn": lost_by_txn,
        "anomalies": counts,
        "examples": anomalies.iter().map(|(k, v)| (k.to_string(), v.iter().take(5).cloned().collect::<Vec<_>>())).collect::<BTreeMap<_, _>>(),
    });
    std::fs::write(
        out.join(format!("{seed}.json")),
        serde_json::to_string_pretty(&summary).unwrap(),
    )
    .unwrap();
    std::fs::write(
        out.join(format!("{seed}.svg")),
        check::svg(&history, &faults, secs, healed_ms),
    )
    .unwrap();
    // Every process's log (each life of each broker) goes with the summary.
    std::fs::write(
        out.join(format!("{seed}-ctp.jsonl")),
        history.journal.join("\n") + "\n",
    )
    .unwrap();
    let logs_dir = out.join(format!("{seed}-logs"));
    let _ = std::fs::remove_dir_all(&logs_dir);
    std::fs::create_dir_all(&logs_dir).unwrap();
    for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".log") || name.starts_with("python") {
            let _ = std::fs::copy(e.path(), logs_dir.join(&name));
        }
    }
    println!("{}", serde_json::to_string_pretty(&summary).unwrap());
    let struck = faults.iter().filter(|f| f.kind != "admin").count();
    assert!(struck > 0, "the nemesis did nothing");
    assert!(
        history.acknowledged(TOPIC) > 1000,
        "too little traffic to judge: {}",
        history.acknowledged(TOPIC)
    );
    let seen: HashSet<&str> = faults.iter().map(|f| f.kind).collect();
    println!("fault kinds: {seen:?}");
    assert!(anomalies.is_empty(), "anomalies: {counts:?}\n{summary}");
    drop(world);
}
