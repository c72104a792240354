//! Power loss: the broker's files live on a filesystem that throws away
//! whatever was not fsynced when the power is cut (`common/lazyfs.rs`,
//! LazyFS's model). Producers write a partitioned topic; the broker is
//! killed (-9) mid-stream and the unsynced writes are dropped, as a power
//! failure drops a disk's volatile cache; the broker restarts on what is
//! left. After every cycle each message the broker acknowledged, in every
//! cycle so far, is there exactly once and in its producer's order, the
//! topic's metadata survived, and every partition reads back from its first
//! entry to its last (the recovered log is consistent).
//!
//! `STROBE_POWER_CYCLES` sets the cycles (default 3; `docs/reliability.md`
//! records longer runs), `STROBE_POWER_SEND_MS` how long each cycle sends
//! (default 700 ms standalone, 1,500 ms cluster), and `STROBE_POWER_TOML`
//! extra standalone configuration (`sync = "never"` shows the test failing:
//! acknowledged messages lost in the first cycle). The standalone broker keeps its data and its
//! embedded metadata on the lazy filesystem; the cluster variant keeps the
//! shared-directory store and every broker's data there (etcd is not cut).

mod common;
#[path = "common/lazyfs.rs"]
mod lazyfs;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use lazyfs::LazyHandle;
use strobe_client::{Client, ProducerMessage};

const TOPIC: &str = "persistent://public/default/power";
const PARTITIONS: u32 = 3;

fn cycles() -> u32 {
    std::env::var("STROBE_POWER_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

fn send_for(default_ms: u64) -> Duration {
    Duration::from_millis(
        std::env::var("STROBE_POWER_SEND_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default_ms),
    )
}

/// A lazy filesystem over a fresh backing directory.
fn lazy_mount() -> (tempfile::TempDir, tempfile::TempDir, LazyHandle) {
    let backing = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let fs = LazyHandle::mount(backing.path(), mnt.path());
    (backing, mnt, fs)
}

/// Sends `"<cycle>-<n>"` round the partitions through `url` for `for_`,
/// then calls `cut` (which kills the broker and drops the unsynced data);
/// returns the payloads acknowledged, by partition.
async fn produce_then_cut(
    url: &str,
    cycle: u32,
    for_: Duration,
    cut: impl FnOnce(),
) -> BTreeMap<u32, Vec<String>> {
    let client = Client::builder(url).build().await.unwrap();
    let mut producers = Vec::new();
    for p in 0..PARTITIONS {
        producers.push(
            client
                .producer(&format!("{TOPIC}-partition-{p}"))
                .name(&format!("power-{cycle}-{p}"))
                .send_timeout(Some(Duration::from_secs(3)))
                .create()
                .await
                .unwrap(),
        );
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let collector = tokio::spawn(async move {
        let mut acked: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        while let Some((p, payload, receipt)) = rx.recv().await {
            let receipt: strobe_client::SendFuture = receipt;
            if receipt.await.is_ok() {
                acked.entry(p).or_default().push(payload);
            }
        }
        acked
    });
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < for_ {
        for (p, producer) in producers.iter().enumerate() {
            let payload = format!("{cycle}-{n}");
            match producer
                .send(ProducerMessage::new(payload.clone().into_bytes()))
                .await
            {
                Ok(r) => tx.send((p as u32, payload, r)).unwrap(),
                Err(e) => panic!("send before the cut: {e}"),
            }
            n += 1;
        }
        if n.is_multiple_of(300) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    cut();
    drop(tx);
    let acked = collector.await.unwrap();
    client.close().await;
    acked
}

/// Every partition read from its first entry: payloads by partition, or
/// why not.
async fn read_all(url: &str) -> Result<BTreeMap<u32, Vec<String>>, String> {
    let client = Client::builder(url).build().await.unwrap();
    let mut out = BTreeMap::new();
    for p in 0..PARTITIONS {
        let got = common::read_texts(&client, &format!("{TOPIC}-partition-{p}")).await?;
        out.insert(p, got);
    }
    client.close().await;
    Ok(out)
}

/// Each acknowledged message is stored once; what a producer stored is in
/// its send order; nothing is stored that was never sent.
fn check(acked: &BTreeMap<u32, Vec<String>>, stored: &BTreeMap<u32, Vec<String>>, cycle: u32) {
    for p in 0..PARTITIONS {
        let got = stored.get(&p).cloned().unwrap_or_default();
        let mut seen = std::collections::HashSet::new();
        let mut last: BTreeMap<&str, u64> = BTreeMap::new();
        for s in &got {
            assert!(
                seen.insert(s.as_str()),
                "cycle {cycle}, partition {p}: {s} stored twice"
            );
            let (c, n) = s.split_once('-').unwrap();
            let n: u64 = n.parse().unwrap();
            if let Some(prev) = last.insert(c, n) {
                assert!(
                    prev < n,
                    "cycle {cycle}, partition {p}: {s} after {c}-{prev}"
                );
            }
        }
        for a in acked.get(&p).into_iter().flatten() {
            assert!(
                seen.contains(a.as_str()),
                "cycle {cycle}, partition {p}: acknowledged {a} lost"
            );
        }
    }
}

/// Prints what the cycles did (the figures `docs/reliability.md` keeps).
fn report(fs: &LazyHandle, sent: usize, lost_bytes: u64) -> lazyfs::LazyStats {
    let stats = fs.stats();
    println!(
        "{} cycles: {sent} acknowledged, none lost; {} bytes written, {} fsyncs, {lost_bytes} unsynced bytes dropped",
        cycles(),
        stats.written,
        stats.syncs
    );
    stats
}

fn merge(into: &mut BTreeMap<u32, Vec<String>>, from: BTreeMap<u32, Vec<String>>) {
    for (p, v) in from {
        into.entry(p).or_default().extend(v);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_survive_power_cuts_in_standalone() {
    let (_backing, mnt, fs) = lazy_mount();
    let data = mnt.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mut strobe = common::Strobe::start_on(
        &std::env::var("STROBE_POWER_TOML").unwrap_or_default(),
        Some(&data),
    );
    let (st, body) = strobe.http(
        "PUT",
        "/admin/v2/persistent/public/default/power/partitions",
        &PARTITIONS.to_string(),
    );
    assert!(st == 204 || st == 200, "{st} {body}");
    let mut acked: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let (mut sent, mut lost_bytes) = (0usize, 0u64);
    for cycle in 0..cycles() {
        let url = format!("pulsar://127.0.0.1:{}", strobe.port);
        let child = &mut strobe.child;
        let now = produce_then_cut(&url, cycle, send_for(700), || {
            let _ = child.kill();
            let _ = child.wait();
            lost_bytes += fs.power_cut();
        })
        .await;
        sent += now.values().map(Vec::len).sum::<usize>();
        merge(&mut acked, now);
        strobe.restart();
        let (st, body) = strobe.http(
            "GET",
            "/admin/v2/persistent/public/default/power/partitions",
            "",
        );
        assert_eq!(st, 200, "{body}");
        assert!(
            body.contains(&format!("\"partitions\":{PARTITIONS}")),
            "the partitioned topic's metadata after cycle {cycle}: {body}"
        );
        let stored = read_all(&format!("pulsar://127.0.0.1:{}", strobe.port))
            .await
            .unwrap_or_else(|e| panic!("cycle {cycle}: {e}\n{}", strobe.log_text()));
        check(&acked, &stored, cycle);
    }
    report(&fs, sent, lost_bytes);
    assert!(
        lost_bytes > 0 || cycles() == 0,
        "no power cut dropped anything: the test tests nothing"
    );
    drop(strobe);
    drop(fs);
}

/// A symlink at `at` to a new directory `name` on the lazy mount.
#[cfg(feature = "cluster")]
fn on_mount(mnt: &Path, name: &str, at: &Path) {
    let d = mnt.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::os::unix::fs::symlink(&d, at).unwrap();
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_survive_power_cuts_in_a_cluster() {
    use common::cluster::{Etcd, Member, TTL_SECS};

    let (_backing, mnt, fs) = lazy_mount();
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    // The shared store and each broker's own directory on the lazy mount.
    on_mount(mnt.path(), "shared", &dir.path().join("shared"));
    let ids = ["b1", "b2"];
    for id in ids {
        on_mount(mnt.path(), id, &dir.path().join(id));
    }
    let start = || -> Vec<Member> {
        ids.iter()
            .map(|id| Member::start(id, &etcd, dir.path()))
            .collect()
    };
    let mut members = start();
    let (st, body) = members[0]
        .http(
            "PUT",
            "/admin/v2/persistent/public/default/power/partitions",
            &PARTITIONS.to_string(),
        )
        .unwrap();
    assert!(st == 204 || st == 200, "{st} {body}");
    let mut acked: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let (mut sent, mut lost_bytes) = (0usize, 0u64);
    for cycle in 0..cycles() {
        let url = format!(
            "pulsar://{}",
            members
                .iter()
                .map(|m| format!("127.0.0.1:{}", m.port))
                .collect::<Vec<_>>()
                .join(",")
        );
        let now = produce_then_cut(&url, cycle, send_for(1500), || {
            for m in &mut members {
                m.kill9();
            }
            lost_bytes += fs.power_cut();
        })
        .await;
        sent += now.values().map(Vec::len).sum::<usize>();
        merge(&mut acked, now);
        // The dead brokers' sessions expire before they come back.
        tokio::time::sleep(Duration::from_secs(TTL_SECS + 1)).await;
        members = start();
        let stored = read_all(&members[1].url()).await.unwrap_or_else(|e| {
            let logs: Vec<String> = members
                .iter()
                .map(|m| format!("--- {}\n{}", m.id, m.log_text()))
                .collect();
            panic!("cycle {cycle}: {e}\n{}", logs.join("\n"))
        });
        check(&acked, &stored, cycle);
    }
    let stats = report(&fs, sent, lost_bytes);
    // Objects are put with fsync (object_store's `with_fsync`), so a cut
    // may find nothing unsynced; the filesystem must at least have seen
    // the writes and their syncs.
    assert!(stats.written > 0 && stats.syncs > 0, "{stats:?}");
    drop(members);
    drop(fs);
}
