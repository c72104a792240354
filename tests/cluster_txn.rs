//! Transactions on a three-broker cluster with a real etcd: the WatchTcAssignments watch follows
//! a coordinator whose leader is killed, and a consume-transform-produce pipeline stays exactly
//! once while the coordinator's leader and the topics' owner are killed with kill -9.
#![cfg(feature = "cluster")]

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::cluster::{Etcd, Member, TTL_SECS};
use strobe_client::{Client, Consumer, Error, InitialPosition, Producer, SubType, proto};

async fn client(url: &str) -> Client {
    Client::builder(url)
        .operation_timeout(Duration::from_secs(20))
        .build()
        .await
        .expect("connect")
}

/// The broker (by URL) leading each coordinator partition, as the watch on `c` reports it.
async fn leaders(c: &Client) -> Vec<Option<String>> {
    c.tc_leaders().await.expect("tc leaders")
}

/// Two brokers on an etcd: A may lead every coordinator partition, B only partition 0 (A,
/// started first, leads them all, so decisions are made on A), and a topic B owns.
async fn coordinator_on_a_topic_on_b(
    dir: &std::path::Path,
    prefix: &str,
) -> (Etcd, Member, Member, Client, String) {
    let etcd = Etcd::start(dir);
    let a = Member::start("a", &etcd, dir);
    let b = Member::start_with(
        "b",
        &etcd,
        dir,
        "transaction_coordinator_partitions = \"0\"\n",
    );
    let c = client(&format!(
        "pulsar://{},{}",
        a.url().trim_start_matches("pulsar://"),
        b.url().trim_start_matches("pulsar://")
    ))
    .await;
    for i in 0..64 {
        let t = format!("persistent://public/default/{prefix}-{i}");
        let p = c.producer(&t).create().await.unwrap();
        let owner = c.lookup_url(&t).await.unwrap();
        drop(p);
        if owner == b.url() {
            return (etcd, a, b, c, t);
        }
    }
    panic!("no topic landed on b");
}

/// The race found in review of Pulsar's implementation: a follower pushes a snapshot from a cache
/// the leader's death just invalidated and never pushes again. Here the client's watch is on C; A
/// leads partition N and is killed; within the session TTL + 2 s the latest snapshot names N's new
/// leader, and a transaction on N commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_follows_a_killed_coordinator_leader() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let mut a = Member::start("a", &etcd, dir.path());
    let b = Member::start("b", &etcd, dir.path());
    let c_member = Member::start("c", &etcd, dir.path());
    let c = client(&c_member.url()).await;
    let mut watch = c.watch_tc_assignments().await.unwrap();
    // Wait for a complete table in which A leads something (it started first).
    let deadline = Instant::now() + Duration::from_secs(30);
    let n = loop {
        let (p, assignments) = watch.next().await.unwrap();
        let led_by_a: Vec<u64> = assignments
            .iter()
            .filter(|x| x.url.as_deref() == Some(a.url().as_str()))
            .map(|x| x.tc_id)
            .collect();
        if assignments.len() == p as usize && !led_by_a.is_empty() {
            break led_by_a[0];
        }
        assert!(
            Instant::now() < deadline,
            "no complete table with A leading"
        );
    };
    a.kill9();
    let killed = Instant::now();
    let limit = Duration::from_secs(TTL_SECS + 2);
    let new_leader = loop {
        let left = limit.saturating_sub(killed.elapsed());
        let Ok(next) = tokio::time::timeout(left, watch.next()).await else {
            panic!("no snapshot naming a new leader of {n} within {limit:?}");
        };
        let (_, assignments) = next.unwrap();
        if let Some(x) = assignments.iter().find(|x| x.tc_id == n)
            && let Some(url) = &x.url
            && *url != a.url()
        {
            break url.clone();
        }
    };
    println!(
        "coordinator {n}: new leader {new_leader} named {:.2} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    assert!([b.url(), c_member.url()].contains(&new_leader));
    let txn = c
        .new_transaction_on(n, Duration::from_secs(30))
        .await
        .unwrap();
    txn.commit().await.unwrap();
}

/// The topic's owner is stopped when the coordinator decides a commit, then killed: the broker
/// that takes the topic over replays its log, finds the transaction open, reads the decision
/// and makes the messages visible. Nothing committed is lost because a participant missed the
/// moment of the decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_down_during_the_commit_converges_after_takeover() {
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, a, mut b, c, topic) = coordinator_on_a_topic_on_b(dir.path(), "down-commit").await;
    let p = c.producer(&topic).no_batching().create().await.unwrap();
    let txn = loop {
        let t = c.new_transaction(Duration::from_secs(120)).await.unwrap();
        if t.id().0 != 0 {
            break t; // partition 0 might be B's; the rest are A's
        }
        t.abort().await.unwrap();
    };
    for i in 0..5 {
        txn.send(&p, format!("t{i}").into_bytes())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    b.signal("STOP");
    let decided = Instant::now();
    txn.commit().await.unwrap();
    println!(
        "commit answered in {:.2} s with the participant stopped",
        decided.elapsed().as_secs_f64()
    );
    b.signal("CONT");
    b.kill9();
    let got = common::read_from_earliest(&c, &topic, "after", Duration::from_secs(15), 5).await;
    assert_eq!(got, ["t0", "t1", "t2", "t3", "t4"]);
    drop(a);
}

/// A coordinator on A tells B, which owns the topic, each outcome by push (Pulsar's
/// END_TXN_ON_PARTITION) rather than through B's record deletion in etcd and a watch: B counts
/// every pushed commit and abort, and what a commit made visible is delivered when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_are_pushed_to_a_participant_on_another_broker() {
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, a, b, c, topic) = coordinator_on_a_topic_on_b(dir.path(), "pushed").await;
    let p = c.producer(&topic).no_batching().create().await.unwrap();
    let mut k = c
        .consumer(&topic, "s")
        .sub_type(SubType::Exclusive)
        .subscribe()
        .await
        .unwrap();
    let pushed = || -> u64 {
        let (_, metrics) = b.http("GET", "/metrics", "").expect("b's metrics");
        metrics
            .lines()
            .filter(|l| l.starts_with("strobe_txn_outcomes_pushed_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let before = pushed();
    let mut ended = 0;
    while ended < 10 {
        let txn = c.new_transaction(Duration::from_secs(60)).await.unwrap();
        if txn.id().0 == 0 {
            txn.abort().await.unwrap(); // partition 0 may be B's own
            continue;
        }
        let body = format!("m{ended}");
        txn.send(&p, body.clone().into_bytes())
            .await
            .unwrap()
            .await
            .unwrap();
        if ended == 5 {
            txn.abort().await.unwrap();
        } else {
            txn.commit().await.unwrap();
            let m = k
                .recv_timeout(Duration::from_secs(2))
                .await
                .unwrap()
                .expect("visible once the commit returned");
            assert_eq!(String::from_utf8_lossy(&m.payload), body);
            k.ack(&m).unwrap();
        }
        ended += 1;
    }
    assert_eq!(pushed() - before, 10, "every outcome pushed to b");
    assert!(
        k.recv_timeout(Duration::from_millis(500))
            .await
            .unwrap()
            .is_none()
    );
    drop(a);
}

const MESSAGES: usize = 240;
const BATCH: usize = 8;

async fn in_consumer(c: &Client) -> Consumer {
    c.consumer("persistent://public/default/ctp-in", "proc")
        .sub_type(SubType::Failover)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(BATCH as u32 * 2)
        .subscribe()
        .await
        .unwrap()
}

/// One transaction: take a batch from `input`, send each to `out` and ack it, commit. Any
/// failure aborts (or finds the transaction already decided) and the caller starts over.
async fn process_batch(c: &Client, input: &mut Consumer, out: &Producer) -> Result<usize, Error> {
    let mut msgs = Vec::new();
    while msgs.len() < BATCH {
        match input.recv_timeout(Duration::from_millis(500)).await? {
            Some(m) => msgs.push(m),
            None => break,
        }
    }
    if msgs.is_empty() {
        return Ok(0);
    }
    let txn = c.new_transaction(Duration::from_secs(60)).await?;
    let work = async {
        let mut sends = Vec::new();
        for m in &msgs {
            sends.push(txn.send(out, m.payload.clone()).await?);
            txn.ack(input, m, false).await?;
        }
        for s in sends {
            s.await?;
        }
        txn.commit().await
    };
    match work.await {
        Ok(()) => Ok(msgs.len()),
        Err(e) => {
            match txn.abort().await {
                // Decided as committed before the failure reached us: the batch is done.
                Err(Error::Server {
                    code: proto::ServerError::InvalidTxnStatus,
                    ..
                }) => Ok(msgs.len()),
                _ => Err(e),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_transform_produce_is_exactly_once_across_kills() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let dedup = "deduplication_enabled = true\n";
    let mut members = [
        Some(Member::start_with("a", &etcd, dir.path(), dedup)),
        Some(Member::start_with("b", &etcd, dir.path(), dedup)),
        Some(Member::start_with("c", &etcd, dir.path(), dedup)),
    ];
    let urls: Vec<String> = members.iter().flatten().map(Member::url).collect();
    let hosts: Vec<&str> = urls
        .iter()
        .map(|u| u.trim_start_matches("pulsar://"))
        .collect();
    let c = client(&format!("pulsar://{}", hosts.join(","))).await;
    let feeder = c
        .producer("persistent://public/default/ctp-in")
        .create()
        .await
        .unwrap();
    for i in 0..MESSAGES {
        feeder
            .send(format!("msg-{i:05}").into_bytes())
            .await
            .unwrap();
    }
    feeder.flush().await.unwrap();
    let out = c
        .producer("persistent://public/default/ctp-out")
        .name("ctp-processor")
        .no_batching()
        .create()
        .await
        .unwrap();
    let mut input = in_consumer(&c).await;
    let mut done = 0;
    let mut kills = 0;
    let started = Instant::now();
    while done < MESSAGES {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "pipeline stalled at {done}"
        );
        // Kill the coordinator leader of partition 0's broker and the owner of the topics,
        // a third and two thirds of the way through.
        if (kills == 0 && done >= MESSAGES / 3) || (kills == 1 && done >= 2 * MESSAGES / 3) {
            let leader = leaders(&c).await[0].clone().unwrap_or_default();
            let victim = members
                .iter()
                .position(|m| m.as_ref().is_some_and(|m| m.url() == leader))
                .or_else(|| members.iter().position(Option::is_some))
                .unwrap();
            let mut m = members[victim].take().unwrap();
            println!("kill -9 of {} after {done} messages", m.id);
            m.kill9();
            kills += 1;
        }
        match process_batch(&c, &mut input, &out).await {
            Ok(n) => done += n,
            Err(e) => {
                println!("batch failed ({e}); starting over");
                drop(input);
                tokio::time::sleep(Duration::from_millis(500)).await;
                input = in_consumer(&c).await;
            }
        }
    }
    assert_eq!(kills, 2);
    // The output holds exactly the input: no gap, no duplicate.
    let mut r = c
        .reader("persistent://public/default/ctp-out")
        .start_earliest()
        .create()
        .await
        .unwrap();
    let mut seen = Vec::new();
    while let Some(m) = r.recv_timeout(Duration::from_secs(3)).await.unwrap() {
        seen.push(String::from_utf8_lossy(&m.payload).into_owned());
    }
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "duplicates in the output");
    let want: Vec<String> = (0..MESSAGES).map(|i| format!("msg-{i:05}")).collect();
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, want, "the output is not exactly the input");
    println!(
        "{MESSAGES} messages exactly once through 2 kills in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
