//! Fault tests against a real etcd (feature `etcd`).
//!
//! - etcd killed and restarted mid-watch: the watcher resumes without missing or repeating an
//!   event (a private etcd process this test can kill).
//! - two processes race one CAS: exactly one wins, every round.
//! - PIP-473 with three broker processes: kill one, the survivors' snapshots converge on them
//!   within the TTL (the lease is asked `expiry_slack` shorter, absorbing etcd's 500 ms expiry
//!   tick), and no snapshot ever drops a partition whose
//!   leader is alive; a broker with another parallelism refuses to start.
//!
//! Sessions whose keep-alives stop (ephemeral keys and leadership lost, takeover within
//! TTL + 1 s) are covered for every backend by `tests/suite.rs` (`session_loss_precedes_expiry`,
//! `election_takeover_on_session_loss`, `tc_elections_converge`).
#![cfg(feature = "etcd")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use strobe_metadata::{EventKind, Expect, MetadataError, MetadataStore, Op};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_survives_etcd_restart_without_gaps_or_repeats() {
    let mut etcd = common::EtcdProcess::start();
    let store = common::etcd_store_at(&etcd.client_url, "/restart").await;
    let start = store.scan_prefix("/w/").await.unwrap().revision + 1;
    let mut watch = store.watch("/w/", start).await.unwrap();
    const N: usize = 30;

    // Writes with retry: a create that "failed" may have been applied; AlreadyExists on the retry
    // tells us so. Each key is created exactly once either way.
    async fn create(store: &dyn MetadataStore, key: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match store.put(key, b"v", Expect::Absent).await {
                Ok(_) | Err(MetadataError::AlreadyExists(_)) => return,
                Err(e) => {
                    assert!(Instant::now() < deadline, "etcd did not come back: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    let mut seen: Vec<(u64, String)> = Vec::new();
    for i in 0..N {
        if i == 10 || i == 20 {
            // Let the watcher receive what was written, then kill etcd under it. Writes right
            // after the restart happen while the watcher is still reconnecting.
            tokio::time::sleep(Duration::from_millis(200)).await;
            etcd.restart();
        }
        create(&*store, &format!("/w/{i:02}")).await;
        if i == 25 {
            // Also a multi-key transaction and a delete across the gap.
            store
                .txn(vec![Op::put("/w/t1", "1"), Op::put("/w/t2", "2")])
                .await
                .unwrap();
            store.delete("/w/00", None).await.unwrap();
        }
    }
    let expected_events = N + 3;
    let mut kinds = BTreeMap::new();
    while seen.len() < expected_events {
        let batch = tokio::time::timeout(Duration::from_secs(15), watch.next())
            .await
            .unwrap_or_else(|_| panic!("watch stalled after {} events: {seen:?}", seen.len()))
            .expect("watch open")
            .expect("no watch error");
        for ev in batch.events {
            *kinds.entry(format!("{:?}", ev.kind)).or_insert(0) += 1;
            seen.push((batch.revision, ev.key));
        }
    }
    // Nothing more arrives (no repeats after the last resume).
    let extra = tokio::time::timeout(Duration::from_secs(1), watch.next()).await;
    assert!(extra.is_err(), "unexpected extra event: {extra:?}");
    let keys: Vec<&str> = seen.iter().map(|(_, k)| k.as_str()).collect();
    let distinct: BTreeSet<&str> = keys.iter().copied().filter(|k| *k != "/w/00").collect();
    assert_eq!(
        distinct.len(),
        N + 1,
        "every created key exactly once: {keys:?}"
    );
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "revision order");
    assert_eq!(kinds.get("Created"), Some(&(N + 2)));
    assert_eq!(kinds.get(&format!("{:?}", EventKind::Deleted)), Some(&1));
    // The watcher saw exactly what the store holds.
    let scan = store.scan_prefix("/w/").await.unwrap();
    assert_eq!(scan.entries.len(), N + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_race_one_cas_and_exactly_one_wins() {
    let endpoints = common::etcd_endpoints();
    let root = common::unique_root();
    let store = common::etcd_store_at(&endpoints, &root).await;
    const ROUNDS: u32 = 20;
    let ops = (0..ROUNDS)
        .map(|r| Op::put(format!("/race/v/{r}"), "init"))
        .collect();
    let version = store.txn(ops).await.unwrap().revision;
    let start_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 1500;
    let bin = common::example_binary("cas_racer");
    let racers: Vec<Child> = ["p1", "p2"]
        .iter()
        .map(|id| {
            Command::new(&bin)
                .args([
                    "--endpoints",
                    &endpoints,
                    "--root",
                    &root,
                    "--prefix",
                    "/race",
                    "--id",
                    id,
                ])
                .args([
                    "--rounds",
                    &ROUNDS.to_string(),
                    "--expect-version",
                    &version.to_string(),
                ])
                .args(["--start-at-ms", &start_at.to_string()])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut wins: BTreeMap<(String, u32), Vec<String>> = BTreeMap::new();
    for (child, id) in racers.into_iter().zip(["p1", "p2"]) {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            assert_ne!(parts.get(2), Some(&"ERROR"), "{id}: {line}");
            let entry = wins
                .entry((parts[0].to_string(), parts[1].parse().unwrap()))
                .or_default();
            if parts[2] == "WIN" {
                entry.push(id.to_string());
            }
        }
    }
    assert_eq!(
        wins.len(),
        2 * ROUNDS as usize,
        "every round reported: {wins:?}"
    );
    for ((kind, round), winners) in &wins {
        assert_eq!(
            winners.len(),
            1,
            "{kind} round {round}: winners {winners:?}"
        );
        let key = if kind == "V" {
            format!("/race/v/{round}")
        } else {
            format!("/race/a/{round}")
        };
        let value = store.get(&key).await.unwrap().unwrap().value;
        assert_eq!(
            String::from_utf8(value).unwrap(),
            winners[0],
            "the stored value is the winner's"
        );
    }
}

/// A `tc_member` process; killed when dropped (also when a test panics).
struct Member {
    id: String,
    child: Child,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Line {
    id: String,
    at: Instant,
    text: String,
}

fn spawn_member(
    endpoints: &str,
    root: &str,
    id: &str,
    parallelism: u32,
    tx: &mpsc::Sender<Line>,
) -> Member {
    let mut child = Command::new(common::example_binary("tc_member"))
        .args(["--endpoints", endpoints, "--root", root, "--broker-id", id])
        .args([
            "--parallelism",
            &parallelism.to_string(),
            "--ttl-ms",
            "3000",
            "--lease-slack-ms",
            "1000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let tx = tx.clone();
    let id2 = id.to_string();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(text) = line else { return };
            if tx
                .send(Line {
                    id: id2.clone(),
                    at: Instant::now(),
                    text,
                })
                .is_err()
            {
                return;
            }
        }
    });
    Member {
        id: id.to_string(),
        child,
    }
}

fn parse_snapshot(text: &str) -> Option<Vec<Option<String>>> {
    let json = text.strip_prefix("SNAPSHOT ")?;
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    Some(
        v["leaders"]
            .as_array()?
            .iter()
            .map(|l| l.as_str().map(str::to_string))
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tc_three_processes_converge_on_survivors() {
    const P: usize = 16;
    // The members' session TTL (a 2 s etcd lease: 3 s minus the 1 s expiry slack).
    const TTL: Duration = Duration::from_secs(3);
    let endpoints = common::etcd_endpoints();
    let root = common::unique_root();
    let (tx, rx) = mpsc::channel::<Line>();
    let mut members: Vec<Member> = ["b1", "b2", "b3"]
        .iter()
        .map(|id| spawn_member(&endpoints, &root, id, P as u32, &tx))
        .collect();

    // Everyone ready and every member's view complete.
    let mut latest: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    let mut ready = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(ready.len() == 3
        && latest.len() == 3
        && latest.values().all(|s| s.iter().all(Option::is_some)))
    {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("members start");
        if line.text.starts_with("READY") {
            ready.insert(line.id.clone());
        } else if let Some(s) = parse_snapshot(&line.text) {
            assert_eq!(s.len(), P);
            latest.insert(line.id.clone(), s);
        } else {
            panic!("unexpected line from {}: {}", line.id, line.text);
        }
    }
    let views: BTreeSet<&Vec<Option<String>>> = latest.values().collect();
    assert_eq!(
        views.len(),
        1,
        "all members publish the same table: {latest:?}"
    );

    // A broker with another parallelism refuses to start, naming both values.
    let out = Command::new(common::example_binary("tc_member"))
        .args([
            "--endpoints",
            &endpoints,
            "--root",
            &root,
            "--broker-id",
            "b4",
            "--parallelism",
            "8",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "refuses to start: {text}");
    assert!(
        text.contains("configured with 8") && text.contains("has 16"),
        "{text}"
    );

    // Kill -9 the broker leading the most partitions.
    let table = latest.values().next().unwrap().clone();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for l in table.iter().flatten() {
        *counts.entry(l.as_str()).or_default() += 1;
    }
    let victim = counts
        .iter()
        .max_by_key(|(_, c)| **c)
        .map(|(id, _)| id.to_string())
        .unwrap();
    let vi = members.iter().position(|m| m.id == victim).unwrap();
    let mut dead = members.remove(vi);
    dead.child.kill().unwrap();
    let killed = Instant::now();
    dead.child.wait().unwrap();
    let survivors: Vec<String> = members.iter().map(|m| m.id.clone()).collect();

    // Every survivor converges on a complete table without the victim; no snapshot drops a
    // partition whose (previous) leader is alive.
    let mut converged: BTreeMap<String, Duration> = BTreeMap::new();
    let mut prev: BTreeMap<String, Vec<Option<String>>> = survivors
        .iter()
        .map(|s| (s.clone(), table.clone()))
        .collect();
    while converged.len() < survivors.len() {
        let left =
            (killed + TTL + Duration::from_secs(5)).saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no convergence: {prev:?}"));
        if line.id == victim {
            continue;
        }
        let Some(snap) = parse_snapshot(&line.text) else {
            continue;
        };
        let before = &prev[&line.id];
        for n in 0..P {
            if let Some(l) = &before[n]
                && *l != victim
            {
                assert!(
                    snap[n].is_some(),
                    "{}: partition {n} led by live {l} went missing",
                    line.id
                );
            }
        }
        if snap
            .iter()
            .all(|l| l.as_ref().is_some_and(|l| *l != victim))
        {
            converged.entry(line.id.clone()).or_insert(line.at - killed);
        }
        prev.insert(line.id.clone(), snap);
    }
    let worst = converged.values().max().copied().unwrap();
    eprintln!("SIGKILL of {victim}: survivors converged after {converged:?}");
    // The lease is a second shorter than the TTL, which absorbs etcd's 500 ms expiry tick:
    // the survivors converge within the TTL.
    assert!(worst <= TTL, "converged after {worst:?}");

    // A graceful stop (SIGTERM) resigns at once: the survivor leading the most partitions
    // leaves, and the other takes everything well within the TTL.
    let latest_of = |id: &str| prev[id].iter().flatten().filter(|l| *l == id).count();
    let li = if latest_of(&members[0].id) >= latest_of(&members[1].id) {
        0
    } else {
        1
    };
    let leaving = members.remove(li);
    let stay = members[0].id.clone();
    assert!(
        latest_of(&leaving.id) > 0,
        "the leaving broker leads something: {prev:?}"
    );
    let status = Command::new("kill")
        .args(["-TERM", &leaving.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let stopped = Instant::now();
    let mut leaving = leaving;
    loop {
        let left = (stopped + Duration::from_secs(5)).saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).expect("convergence after SIGTERM");
        if line.id != stay {
            continue;
        }
        if let Some(snap) = parse_snapshot(&line.text)
            && snap.iter().all(|l| l.as_deref() == Some(stay.as_str()))
        {
            let took = line.at - stopped;
            eprintln!("SIGTERM of {}: {stay} leads all after {took:?}", leaving.id);
            assert!(
                took < TTL,
                "a graceful stop hands over before any TTL: {took:?}"
            );
            break;
        }
    }
    assert!(leaving.child.wait().unwrap().success());
    drop(members);
}
