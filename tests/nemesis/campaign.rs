//! A randomized fault campaign with a history checker (issue 42's first
//! part, on processes; the compose environment comes next): three brokers
//! on a real etcd and a shared-directory store, a keyed load from producers
//! with deduplication on, and consumers of all four subscription types
//! acknowledging what they get, while a seeded nemesis overlaps faults:
//! `kill -9` and restart of a broker, SIGSTOP/SIGCONT, PIP-307 transfers of
//! bundles to chosen brokers, and plain unloads. After the faults heal and
//! the consumers drain, the checker reads the history and the logs back:
//!
//! - **lost**: acknowledged to a producer, never delivered on a subscription;
//! - **stored twice**: a payload twice in a partition's log (deduplication
//!   is on, and producers keep their names across reconnects);
//! - **never sent**: delivered but not sent;
//! - **producer order**: a producer's messages of one key out of send order
//!   in the log;
//! - **key order**: on Exclusive, Failover and Key_Shared, a key's first
//!   deliveries out of send order (redeliveries may repeat earlier ones);
//! - **stuck producer**: a send that never got its receipt.
//!
//! `STROBE_NEMESIS_SEED` and `STROBE_NEMESIS_SECS` (default 42 and 60)
//! choose the run; a summary goes to `target/tmp/nemesis/<seed>.json`.
//! `cargo test --features cluster --test nemesis -- --nocapture` runs it;
//! CI does not yet (`test = false` in Cargo.toml): a 180 s run still
//! hangs on a producer that stops getting receipts (`docs/reliability.md`).

#![cfg(feature = "cluster")]

#[path = "../common/mod.rs"]
mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::cluster::{Etcd, Member, TTL_SECS};
use strobe_client::{Client, InitialPosition, ProducerMessage, SubType};
use tokio::sync::mpsc;

const TOPIC: &str = "persistent://public/default/nemesis";
const PARTITIONS: u64 = 4;
const KEYS: u64 = 16;
const PRODUCERS: u64 = 2;
const BROKERS: usize = 3;
/// Subscriptions: name, type, consumers.
const SUBS: [(&str, SubType, usize); 4] = [
    ("ex", SubType::Exclusive, 1),
    ("fo", SubType::Failover, 2),
    ("ks", SubType::KeyShared, 2),
    ("sh", SubType::Shared, 2),
];

/// xorshift64*: the campaign's only source of chance, so a seed replays it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn between(&mut self, lo_ms: u64, hi_ms: u64) -> Duration {
        Duration::from_millis(lo_ms + self.below(hi_ms - lo_ms + 1))
    }
}

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A message's payload: producer, key, sequence within that key.
fn payload(prod: u64, key: u64, seq: u64) -> String {
    format!("{prod}:{key}:{seq}")
}

fn parse(p: &str) -> (u64, u64, u64) {
    let v: Vec<u64> = p.split(':').map(|x| x.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

fn partition_of(key: u64) -> u64 {
    key % PARTITIONS
}

fn service_url(ports: &[u16]) -> String {
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    format!("pulsar://{}", hosts.join(","))
}

/// One producer task: every 10 ms a message for each of its keys' next
/// sequence, to the key's partition, under a fixed producer name (so
/// deduplication spans its reconnects). Returns (sent, acknowledged,
/// receipts that never came).
async fn produce(
    url: String,
    prod: u64,
    stop: Arc<AtomicBool>,
) -> (Vec<String>, HashSet<String>, usize) {
    let client = Client::builder(&url).build().await.unwrap();
    let mut producers = Vec::new();
    for p in 0..PARTITIONS {
        producers.push(
            client
                .producer(&format!("{TOPIC}-partition-{p}"))
                .name(&format!("nemesis-{prod}-{p}"))
                // Key_Shared keeps a key's order only when a batch holds
                // one key (Pulsar's KEY_BASED batcher; the default batcher
                // mixes keys, and a batch goes where its first key goes).
                .batching_type(strobe_client::BatchingType::KeyBased)
                .send_timeout(None)
                .create()
                .await
                .unwrap(),
        );
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let collector = tokio::spawn(async move {
        let mut acked = HashSet::new();
        let mut stuck = 0;
        while let Some((payload, receipt)) = rx.recv().await {
            let receipt: strobe_client::SendFuture = receipt;
            match tokio::time::timeout(Duration::from_secs(120), receipt).await {
                Ok(Ok(_)) => {
                    acked.insert(payload);
                }
                Ok(Err(_)) => {}
                Err(_) => stuck += 1,
            }
        }
        (acked, stuck)
    });
    let mut sent = Vec::new();
    let mut seq = vec![0u64; KEYS as usize];
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        for key in 0..KEYS {
            let p = payload(prod, key, seq[key as usize]);
            let msg = ProducerMessage::new(p.clone().into_bytes()).with_key(format!("k{key}"));
            match producers[partition_of(key) as usize].send(msg).await {
                Ok(r) => {
                    seq[key as usize] += 1;
                    sent.push(p.clone());
                    tx.send((p, r)).unwrap();
                }
                // Not sent (the producer's queue is full while it
                // reconnects): the same sequence goes next tick.
                Err(_) => break,
            }
        }
    }
    drop(tx);
    let (acked, stuck) = collector.await.unwrap();
    client.close().await;
    (sent, acked, stuck)
}

/// One consumer of subscription `sub` on every partition, acknowledging
/// what it gets; deliveries go to `seen` as (sub, consumer, payload). Ends
/// once `stop` is set and nothing came for `idle`.
async fn consume(
    url: String,
    sub: &'static str,
    ty: SubType,
    name: String,
    seen: mpsc::UnboundedSender<(&'static str, String, String)>,
    stop: Arc<AtomicBool>,
    idle: Duration,
) {
    let client = Client::builder(&url).build().await.unwrap();
    let mut tasks = Vec::new();
    for p in 0..PARTITIONS {
        let mut c = client
            .consumer(&format!("{TOPIC}-partition-{p}"), sub)
            .sub_type(ty)
            .consumer_name(&name)
            .initial_position(InitialPosition::Earliest)
            .subscribe()
            .await
            .unwrap();
        let (seen, stop, name) = (seen.clone(), stop.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            let mut quiet_since = Instant::now();
            loop {
                match c.recv_timeout(Duration::from_millis(500)).await {
                    Ok(Some(m)) => {
                        quiet_since = Instant::now();
                        let text = String::from_utf8(m.payload.to_vec()).unwrap();
                        let _ = seen.send((sub, name.clone(), text));
                        let _ = c.ack(&m);
                    }
                    _ => {
                        if stop.load(Ordering::Relaxed) && quiet_since.elapsed() >= idle {
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

/// The brokers, their state, and the faults done to them.
struct Nemesis {
    etcd_dir: std::path::PathBuf,
    members: Vec<Option<Member>>,
    /// Paused brokers and when they resume.
    paused: HashMap<usize, Instant>,
    /// Killed brokers and when they restart.
    dead: HashMap<usize, Instant>,
    /// (ms since the start, what): admin actions finish in the background.
    faults: Arc<std::sync::Mutex<Vec<(u128, String)>>>,
    started: Instant,
}

fn note_in(faults: &std::sync::Mutex<Vec<(u128, String)>>, started: Instant, what: String) {
    println!("{:>7} ms  {what}", started.elapsed().as_millis());
    faults
        .lock()
        .unwrap()
        .push((started.elapsed().as_millis(), what));
}

impl Nemesis {
    fn note(&mut self, what: String) {
        note_in(&self.faults, self.started, what);
    }

    fn up(&self) -> Vec<usize> {
        (0..BROKERS)
            .filter(|i| self.members[*i].is_some() && !self.paused.contains_key(i))
            .collect()
    }

    /// Resumes and restarts what is due (or everything, `all`).
    fn heal(&mut self, etcd: &Etcd, all: bool) {
        let now = Instant::now();
        let due: Vec<usize> = self
            .paused
            .iter()
            .filter(|(_, t)| all || **t <= now)
            .map(|(i, _)| *i)
            .collect();
        for i in due {
            self.paused.remove(&i);
            if let Some(m) = &self.members[i] {
                m.signal("CONT");
            }
            self.note(format!("SIGCONT b{}", i + 1));
        }
        let due: Vec<usize> = self
            .dead
            .iter()
            .filter(|(_, t)| all || **t <= now)
            .map(|(i, _)| *i)
            .collect();
        for i in due {
            self.dead.remove(&i);
            self.members[i] = Some(Member::start(&format!("b{}", i + 1), etcd, &self.etcd_dir));
            self.note(format!("restart b{}", i + 1));
        }
    }

    /// One fault, chosen by `rng`. An admin action runs in the background
    /// (its broker may wait on a paused one) and is noted when it ends.
    fn strike(&mut self, rng: &mut Rng) {
        let up = self.up();
        match rng.below(4) {
            // At most one broker down or paused at a time: the cluster
            // keeps serving, so a stall is a bug, not the fault.
            0 if up.len() == BROKERS => {
                let i = up[rng.below(up.len() as u64) as usize];
                self.members[i].take().unwrap().kill9();
                // Its session must expire before it comes back.
                let back = Duration::from_secs(TTL_SECS + 1) + rng.between(0, 4000);
                self.dead.insert(i, Instant::now() + back);
                self.note(format!("kill -9 b{}", i + 1));
            }
            1 if up.len() == BROKERS => {
                let i = up[rng.below(up.len() as u64) as usize];
                self.members[i].as_ref().unwrap().signal("STOP");
                self.paused
                    .insert(i, Instant::now() + rng.between(1000, 8000));
                self.note(format!("SIGSTOP b{}", i + 1));
            }
            k @ (2 | 3) => {
                let via = up[rng.below(up.len() as u64) as usize];
                let dst = up[rng.below(up.len() as u64) as usize];
                let m = self.members[via].as_ref().unwrap();
                let port = m.http_port;
                let pick = rng.next();
                let transfer = k == 2;
                let (faults, started) = (self.faults.clone(), self.started);
                let asked = started.elapsed().as_millis();
                let action = tokio::task::spawn_blocking(move || {
                    let http = |method: &str, path: &str| -> Option<(u16, String)> {
                        use std::io::{Read, Write};
                        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
                        s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
                        write!(s, "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").ok()?;
                        let mut out = String::new();
                        s.read_to_string(&mut out).ok()?;
                        let status = out.split_whitespace().nth(1)?.parse().ok()?;
                        Some((status, out.split_once("\r\n\r\n")?.1.to_owned()))
                    };
                    let (_, body) = http("GET", "/admin/v2/namespaces/public/default/bundles")?;
                    let b: serde_json::Value = serde_json::from_str(&body).ok()?;
                    let bounds: Vec<String> = b["boundaries"]
                        .as_array()?
                        .iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect();
                    let w = (pick % (bounds.len().max(2) as u64 - 1)) as usize;
                    let bundle = format!("{}_{}", bounds.get(w)?, bounds.get(w + 1)?);
                    let path = if transfer {
                        format!(
                            "/admin/v2/namespaces/public/default/{bundle}/unload?destinationBroker=b{}",
                            dst + 1
                        )
                    } else {
                        format!("/admin/v2/namespaces/public/default/{bundle}/unload")
                    };
                    let (st, _) = http("PUT", &path)?;
                    Some(if transfer {
                        format!("transfer {bundle} to b{} ({st})", dst + 1)
                    } else {
                        format!("unload {bundle} ({st})")
                    })
                });
                tokio::spawn(async move {
                    let what = action.await.ok().flatten().unwrap_or_else(|| {
                        format!("{} failed", if transfer { "transfer" } else { "unload" })
                    });
                    note_in(&faults, started, format!("{what}, asked at {asked} ms"));
                });
            }
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_randomized_fault_campaign_loses_duplicates_and_reorders_nothing() {
    let seed = env_u64("STROBE_NEMESIS_SEED", 42);
    let secs = env_u64("STROBE_NEMESIS_SECS", 60);
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let members: Vec<Option<Member>> = (1..=BROKERS)
        .map(|i| Some(Member::start(&format!("b{i}"), &etcd, dir.path())))
        .collect();
    let ports: Vec<u16> = members.iter().flatten().map(|m| m.port).collect();
    let admin = members[0].as_ref().unwrap();
    let (st, body) = admin
        .http(
            "POST",
            "/admin/v2/namespaces/public/default/deduplication",
            "true",
        )
        .unwrap();
    assert!(st == 204 || st == 200, "{st} {body}");
    // The checker reads the logs back: nothing consumed is deleted.
    let (st, body) = admin
        .http(
            "POST",
            "/admin/v2/namespaces/public/default/retention",
            r#"{"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}"#,
        )
        .unwrap();
    assert!(st == 204 || st == 200, "{st} {body}");
    let (st, body) = admin
        .http(
            "PUT",
            "/admin/v2/persistent/public/default/nemesis/partitions",
            &PARTITIONS.to_string(),
        )
        .unwrap();
    assert!(st == 204 || st == 200, "{st} {body}");
    let url = service_url(&ports);

    let stop_consumers = Arc::new(AtomicBool::new(false));
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
    let mut consumers = Vec::new();
    for (sub, ty, n) in SUBS {
        for c in 0..n {
            consumers.push(tokio::spawn(consume(
                url.clone(),
                sub,
                ty,
                format!("{sub}-{c}"),
                seen_tx.clone(),
                stop_consumers.clone(),
                Duration::from_secs(15),
            )));
        }
    }
    drop(seen_tx);
    let stop_producers = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| tokio::spawn(produce(url.clone(), p, stop_producers.clone())))
        .collect();

    let mut nemesis = Nemesis {
        etcd_dir: dir.path().to_owned(),
        members,
        paused: HashMap::new(),
        dead: HashMap::new(),
        faults: Default::default(),
        started: Instant::now(),
    };
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        tokio::time::sleep(rng.between(500, 3000)).await;
        nemesis.heal(&etcd, false);
        nemesis.strike(&mut rng);
    }
    nemesis.heal(&etcd, true);
    nemesis.note("healed".into());
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop_producers.store(true, Ordering::Relaxed);
    let (mut sent, mut acked, mut stuck) = (Vec::new(), HashSet::new(), 0);
    for p in producers {
        let (s, a, k) = p.await.unwrap();
        sent.extend(s);
        acked.extend(a);
        stuck += k;
    }
    stop_consumers.store(true, Ordering::Relaxed);
    let mut deliveries: Vec<(&str, String, String)> = Vec::new();
    let drain = tokio::spawn(async move {
        while let Some(d) = seen_rx.recv().await {
            deliveries.push(d);
        }
        deliveries
    });
    for c in consumers {
        c.await.unwrap();
    }
    let deliveries = drain.await.unwrap();

    // The logs, read back from their first entry (restarted brokers listen
    // on new ports).
    let ports: Vec<u16> = nemesis.members.iter().flatten().map(|m| m.port).collect();
    let reader_client = Client::builder(&service_url(&ports)).build().await.unwrap();
    let mut stored: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for p in 0..PARTITIONS {
        let got = common::read_texts(&reader_client, &format!("{TOPIC}-partition-{p}"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        stored.insert(p, got);
    }

    // The checker.
    let sent_set: HashSet<&String> = sent.iter().collect();
    let mut anomalies: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut note = |kind: &'static str, what: String| anomalies.entry(kind).or_default().push(what);
    for (p, log) in &stored {
        let mut count: HashMap<&String, u32> = HashMap::new();
        let mut last: HashMap<(u64, u64), u64> = HashMap::new();
        for s in log {
            *count.entry(s).or_default() += 1;
            let (prod, key, seq) = parse(s);
            if let Some(prev) = last.insert((prod, key), seq)
                && prev >= seq
            {
                note(
                    "producer order",
                    format!("partition {p}: {s} after seq {prev}"),
                );
            }
            if !sent_set.contains(s) {
                note("never sent", format!("partition {p} holds {s}"));
            }
        }
        for (s, n) in count {
            if n > 1 {
                note("stored twice", format!("partition {p}: {s} {n} times"));
            }
        }
    }
    // Acknowledged but not in the log: lost however the consumers fared.
    let in_logs: HashSet<&String> = stored.values().flatten().collect();
    let mut missing_by_key: BTreeMap<(u64, u64), Vec<u64>> = BTreeMap::new();
    for a in &acked {
        if !in_logs.contains(a) {
            let (prod, key, seq) = parse(a);
            missing_by_key.entry((prod, key)).or_default().push(seq);
        }
    }
    for ((prod, key), mut seqs) in missing_by_key {
        seqs.sort();
        note(
            "lost from the log",
            format!(
                "producer {prod} key {key} (partition {}): {} acknowledged, absent, seq {}..={}",
                partition_of(key),
                seqs.len(),
                seqs[0],
                seqs[seqs.len() - 1]
            ),
        );
    }
    for (sub, ty, _) in SUBS {
        let mine: Vec<&(&str, String, String)> = deliveries.iter().filter(|d| d.0 == sub).collect();
        let got: HashSet<&String> = mine.iter().map(|d| &d.2).collect();
        let mut lost: Vec<&String> = acked.iter().filter(|a| !got.contains(*a)).collect();
        lost.sort_by_key(|a| parse(a));
        for a in &lost {
            note("lost", format!("{sub}: {a}"));
        }
        if !lost.is_empty() {
            println!(
                "{sub}: {} acknowledged never delivered, e.g. {:?}",
                lost.len(),
                &lost[..lost.len().min(8)]
            );
        }
        for d in &mine {
            if !sent_set.contains(&d.2) {
                note("never sent", format!("{sub} got {}", d.2));
            }
        }
        if ty != SubType::Shared {
            let mut firsts: HashMap<(u64, u64), u64> = HashMap::new();
            let mut seen: HashSet<&String> = HashSet::new();
            for d in &mine {
                if !seen.insert(&d.2) {
                    continue;
                }
                let (prod, key, seq) = parse(&d.2);
                if let Some(prev) = firsts.insert((prod, key), seq)
                    && prev >= seq
                {
                    note(
                        "key order",
                        format!("{sub}: {} first delivered after seq {prev}", d.2),
                    );
                }
            }
        }
    }
    if stuck > 0 {
        note(
            "stuck producer",
            format!("{stuck} sends without a receipt in 120 s"),
        );
    }

    let faults = nemesis.faults.lock().unwrap().clone();
    let counts: BTreeMap<&str, usize> = anomalies.iter().map(|(k, v)| (*k, v.len())).collect();
    let summary = serde_json::json!({
        "seed": seed,
        "seconds": secs,
        "faults": faults.iter().map(|(t, w)| serde_json::json!({"at_ms": t, "what": w})).collect::<Vec<_>>(),
        "sent": sent.len(),
        "acknowledged": acked.len(),
        "deliveries": deliveries.len(),
        "stored": stored.values().map(Vec::len).sum::<usize>(),
        "anomalies": counts,
        "examples": anomalies.iter().map(|(k, v)| (k.to_string(), v.iter().take(5).cloned().collect::<Vec<_>>())).collect::<BTreeMap<_, _>>(),
    });
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("nemesis");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join(format!("{seed}.json")),
        serde_json::to_string_pretty(&summary).unwrap(),
    )
    .unwrap();
    println!("{}", serde_json::to_string_pretty(&summary).unwrap());
    let struck = faults
        .iter()
        .filter(|f| !f.1.starts_with("SIGCONT") && !f.1.starts_with("restart"))
        .count();
    assert!(struck > 0, "the nemesis did nothing");
    assert!(
        acked.len() > 1000,
        "too little traffic to judge: {}",
        acked.len()
    );
    assert!(anomalies.is_empty(), "anomalies: {counts:?}\n{summary}");
    drop(nemesis);
    drop(etcd);
}
