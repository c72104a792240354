//! A scalable topic on a 3-broker cluster (real etcd, real processes)
//! under a keyed load from our V5 producer, with deduplication on: the
//! controller's broker dies (abort, as kill -9) in the middle of a split,
//! after it sealed the parent and before it wrote the layout; another broker
//! is elected and finishes the split; the topic splits again (1 → 2 → 4),
//! its segments move between brokers (the namespace unloaded mid-traffic),
//! it merges back to 1, and a segment moved to a chosen broker is pushed to
//! a watching client. A second test stops the controller's broker at each
//! of the split's other steps. Nothing acknowledged is lost or duplicated, and each key's
//! messages, read segment by segment in DAG order, are in send order.

#![cfg(feature = "cluster")]

mod common;

use std::time::{Duration, Instant};

use common::cluster::{Etcd, Member};
use common::keyed::{KeyedLoad, check_dag_order};
use strobe_client::Client;

/// One cluster at a time: each test runs etcd and three brokers under a
/// keyed load, and on two cores three at once starve each other's
/// timeouts (the failures under `tests/run-all.sh` were of that kind).
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const KEYS: u64 = 32;
const BASE: &str = "/admin/v2/scalable/public/default/orders";

fn layout(m: &Member) -> serde_json::Value {
    let (st, body) = m.http("GET", BASE, "").expect("the broker answers");
    assert_eq!(st, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

async fn wait_epoch(m: &Member, epoch: u64, within: Duration) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let l = layout(m);
        if l["epoch"].as_u64() == Some(epoch) {
            return l;
        }
        assert!(Instant::now() < deadline, "epoch {epoch} not reached: {l}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A resize through `m` (forwarded to the controller's broker), retried
/// while the controller's leadership settles.
async fn resize(m: &Member, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match m.http("POST", &format!("{BASE}/{what}"), "") {
            Some((200, _)) => return,
            other => {
                assert!(Instant::now() < deadline, "{what}: {other:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// `n` brokers on `etcd`, the first of which aborts at `step` of its first
/// split, with deduplication on; the topic is created at the first, which so
/// becomes its controller.
fn cluster(etcd: &Etcd, dir: &std::path::Path, n: usize, step: &str) -> Vec<Member> {
    let quiet = "scalable_topic_gc_interval_secs = 0\n";
    let mut members = vec![Member::start_with(
        "b1",
        etcd,
        dir,
        &format!("{quiet}scalable_topic_failpoint = \"{step}\"\n"),
    )];
    for i in 2..=n {
        members.push(Member::start_with(&format!("b{i}"), etcd, dir, quiet));
    }
    let (st, body) = members[1]
        .http(
            "POST",
            "/admin/v2/namespaces/public/default/deduplication",
            "true",
        )
        .unwrap();
    assert!(st == 204 || st == 200, "{st} {body}");
    let (st, body) = members[0].http("PUT", BASE, "").unwrap();
    assert_eq!(st, 204, "{body}");
    members
}

/// A V5 producer through `via` sending `per_tick` keyed messages every 10 ms.
async fn load(via: &Member, per_tick: u64) -> (Client, KeyedLoad) {
    let client = Client::builder(&via.url()).build().await.unwrap();
    let producer = client
        .scalable_producer("topic://public/default/orders")
        .name("p")
        .create()
        .await
        .unwrap();
    let load = KeyedLoad::start(producer, KEYS, per_tick);
    (client, load)
}

/// Splits segment 0 through `via`; the controller's broker `dying` stops
/// at its failpoint instead of answering.
async fn split_killing(via: &Member, dying: &mut Member, step: &str) {
    let answer = via.http("POST", &format!("{BASE}/split/0"), "");
    assert!(
        !matches!(answer, Some((200, _))),
        "{step}: the split was answered: {answer:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while dying.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "{step}: no stop at the failpoint"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        dying.log_text().contains("failpoint reached"),
        "{step}: {}",
        dying.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_mid_split_and_segments_moving_lose_nothing() {
    let _one = ONE_CLUSTER.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    // b1 dies at the split's worst step: parent terminated, layout unwritten.
    let [mut b1, b2, b3]: [Member; 3] = cluster(&etcd, dir.path(), 3, "after-terminate")
        .try_into()
        .ok()
        .unwrap();
    // About 10,000 messages a second.
    let (client, load) = load(&b2, 100).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The split goes to b1 (forwarded by b3), which dies half way.
    split_killing(&b3, &mut b1, "after-terminate").await;
    // Another broker leads once b1's session is gone, and finishes it.
    let l = wait_epoch(&b2, 1, Duration::from_secs(30)).await;
    assert_eq!(l["segments"]["0"]["state"], "SEALED");

    resize(&b3, "split/1").await;
    resize(&b2, "split/2").await;
    wait_epoch(&b3, 3, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Every segment changes brokers mid-traffic.
    let (st, body) = b3
        .http("PUT", "/admin/v2/namespaces/public/default/unload", "")
        .unwrap();
    assert!(st == 204 || st == 200, "unload: {st} {body}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    resize(&b2, "merge/3/4").await;
    resize(&b3, "merge/5/6").await;
    wait_epoch(&b2, 5, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A segment moved to a chosen broker (PIP-307) mid-traffic: clients
    // watching the topic are told its new broker without asking.
    let mut watch = client
        .watch_scalable_topic("topic://public/default/orders", false)
        .await
        .unwrap();
    let owner = watch.current().segments[&7].broker_url.clone().unwrap();
    let dest = [&b2, &b3].into_iter().find(|m| m.url() != owner).unwrap();
    let (_, body) = b2
        .http("GET", "/admin/v2/namespaces/public/default/bundles", "")
        .unwrap();
    let bundles: serde_json::Value = serde_json::from_str(&body).unwrap();
    let bounds: Vec<&str> = bundles["boundaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap())
        .collect();
    for w in bounds.windows(2) {
        // Bundles nobody owns refuse; the segment's does not.
        let _ = b2.http(
            "PUT",
            &format!(
                "/admin/v2/namespaces/public/default/{}_{}/unload?destinationBroker={}",
                w[0], w[1], dest.id
            ),
            "",
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while watch.current().segments[&7].broker_url.as_deref() != Some(dest.url().as_str()) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no push of segment 7's move to {}",
            dest.id
        );
        let _ = tokio::time::timeout(left, watch.changed()).await;
    }
    // And back to one segment.
    resize(&b3, "merge/7/8").await;
    wait_epoch(&b2, 6, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (sent, _) = load.finish().await;
    let l = layout(&b2);
    let ids: Vec<&String> = l["segments"].as_object().unwrap().keys().collect();
    assert_eq!(ids.len(), 10, "{l}");
    let total = check_dag_order(&client, "orders", &l).await;
    assert_eq!(total, sent, "messages stored vs sent");
    drop((b2, b3, etcd));
}

/// The controller's broker dies after recording the split, after creating
/// the children, and after writing the layout: in each case another broker
/// is elected and the topic ends split once, with nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_at_any_step_of_a_split_is_replaced() {
    let _one = ONE_CLUSTER.lock().await;
    for step in ["after-record", "after-create", "after-commit"] {
        let dir = tempfile::tempdir().unwrap();
        let etcd = Etcd::start(dir.path());
        let [mut b1, b2]: [Member; 2] =
            cluster(&etcd, dir.path(), 2, step).try_into().ok().unwrap();
        let (client, load) = load(&b2, 20).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        split_killing(&b2, &mut b1, step).await;
        let l = wait_epoch(&b2, 1, Duration::from_secs(30)).await;
        assert_eq!(
            l["segments"]["0"]["childIds"],
            serde_json::json!([1, 2]),
            "{step}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (sent, _) = load.finish().await;
        let total = check_dag_order(&client, "orders", &layout(&b2)).await;
        assert_eq!(total, sent, "{step}: messages stored vs sent");
        drop((b2, etcd));
    }
}

/// Stream consumers on three brokers: three, then six (more than the
/// segments: buckets shared), then two, one of the leavers killed (its
/// client's connections cut, so it leaves after its grace period), while
/// the topic splits and merges under a keyed load. Every message arrives,
/// and each key's first deliveries are in send order; a killed consumer's
/// unacknowledged messages may come again, never a later one first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_consumers_join_leave_and_die_across_splits_and_merges() {
    let _one = ONE_CLUSTER.lock().await;
    use std::collections::{BTreeMap, BTreeSet};

    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let cfg = "scalable_topic_gc_interval_secs = 0\nscalable_topic_consumer_session_grace_period_secs = 2\n";
    let b1 = Member::start_with("b1", &etcd, dir.path(), cfg);
    let b2 = Member::start_with("b2", &etcd, dir.path(), cfg);
    let b3 = Member::start_with("b3", &etcd, dir.path(), cfg);
    let (st, body) = b1.http("PUT", BASE, "").unwrap();
    assert_eq!(st, 204, "{body}");

    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<(u64, u64)>();
    // Each consumer on its own client (its own connections), so killing one
    // is cutting its connections.
    let start = |name: String,
                 via: String,
                 seen: tokio::sync::mpsc::UnboundedSender<(u64, u64)>| async move {
        let client = Client::builder(&via).build().await.unwrap();
        let mut c = client
            .scalable_stream_consumer("topic://public/default/orders", "work", &name)
            .initial_position(strobe_client::InitialPosition::Earliest)
            .subscribe()
            .await
            .unwrap();
        let task = tokio::spawn(async move {
            loop {
                let Ok(Some(m)) = c.recv_timeout(Duration::from_secs(60)).await else {
                    return c;
                };
                let text = String::from_utf8(m.message.payload.to_vec()).unwrap();
                let (k, s) = text.split_once(':').unwrap();
                let _ = seen.send((k.parse().unwrap(), s.parse().unwrap()));
                c.ack(&m).unwrap();
            }
        });
        (client, task)
    };
    let urls = [b1.url(), b2.url(), b3.url()];
    let mut consumers = Vec::new();
    for i in 0..3 {
        consumers.push(start(format!("c{i}"), urls[i % 3].clone(), seen_tx.clone()).await);
    }
    let producer_client = Client::builder(&b2.url()).build().await.unwrap();
    let producer = producer_client
        .scalable_producer("topic://public/default/orders")
        .entry_bucket_batching(true)
        .create()
        .await
        .unwrap();
    let load = KeyedLoad::start(producer, KEYS, 20);
    tokio::time::sleep(Duration::from_secs(1)).await;
    resize(&b2, "split/0").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 3..6 {
        consumers.push(start(format!("c{i}"), urls[i % 3].clone(), seen_tx.clone()).await);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    resize(&b3, "split/1").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Four leave: three close, one is killed.
    let (killed_client, killed_task) = consumers.remove(5);
    killed_task.abort();
    killed_client.close().await;
    for _ in 0..3 {
        let (client, task) = consumers.remove(2);
        task.abort();
        if let Err(e) = task.await {
            assert!(e.is_cancelled());
        }
        client.close().await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    resize(&b1, "merge/3/4").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (sent, _) = load.finish().await;

    drop(seen_tx);
    let mut first: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut got: BTreeSet<(u64, u64)> = BTreeSet::new();
    let mut again = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while (got.len() as u64) < sent && Instant::now() < deadline {
        let Ok(Some((k, s))) = tokio::time::timeout(Duration::from_secs(1), seen_rx.recv()).await
        else {
            continue;
        };
        if got.insert((k, s)) {
            first.entry(k).or_default().push(s);
        } else {
            again += 1;
        }
    }
    assert_eq!(got.len() as u64, sent, "received vs sent ({again} again)");
    for (k, seqs) in &first {
        if let Some(i) = seqs.iter().enumerate().position(|(i, s)| *s != i as u64) {
            panic!(
                "key {k}: first deliveries out of order at {i}: {:?}",
                &seqs[i.saturating_sub(3)..(i + 5).min(seqs.len())]
            );
        }
    }
    eprintln!("{sent} messages, {again} delivered again after a consumer died");
    drop((consumers, b1, b2, b3, etcd));
}
