//! A scalable topic split and merged under a keyed load, with our V5
//! producer (deduplication on): the topic goes 1 → 2 → 4 segments and back
//! to 1 while messages flow at about 10,000 a second. Every message sent is
//! acknowledged, none is lost or duplicated, and each key's messages, read
//! segment by segment in DAG order (a child's id is above its parents'),
//! are in the order they were sent.

mod common;

use std::time::{Duration, Instant};

use common::Strobe;
use common::keyed::{KeyedLoad, check_dag_order};
use strobe_client::Client;

const KEYS: u64 = 64;

/// A client of `strobe`.
async fn client_of(strobe: &Strobe) -> Client {
    Client::builder(&format!("pulsar://127.0.0.1:{}", strobe.port))
        .build()
        .await
        .unwrap()
}

/// A standalone broker that never prunes, with scalable topics `topics`
/// made in public/default, and a client of it.
async fn standalone(topics: &[&str]) -> (Strobe, Client) {
    let strobe = Strobe::start_with_config("scalable_topic_gc_interval_secs = 0\n");
    for t in topics {
        let (st, body) = strobe.http("PUT", &format!("/admin/v2/scalable/public/default/{t}"), "");
        assert_eq!(st, 204, "{t}: {body}");
    }
    let client = client_of(&strobe).await;
    (strobe, client)
}

/// The widest gap between consecutive receipts within `window` after each
/// of `marks`, in ms.
fn pauses(receipts: &[Instant], marks: &[Instant], window: Duration) -> Vec<u128> {
    marks
        .iter()
        .map(|m| {
            receipts
                .windows(2)
                .filter(|w| w[1] >= *m && w[0] <= *m + window)
                .map(|w| w[1].duration_since(w[0]).as_millis())
                .max()
                .unwrap_or(0)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splits_and_merges_under_load_lose_duplicate_and_reorder_nothing() {
    let strobe = Strobe::start_with_config("scalable_topic_gc_interval_secs = 0\n");
    let (st, body) = strobe.http(
        "POST",
        "/admin/v2/namespaces/public/default/deduplication",
        "true",
    );
    assert!(st == 204 || st == 200, "{st} {body}");
    let (st, body) = strobe.http("PUT", "/admin/v2/scalable/public/default/load", "");
    assert_eq!(st, 204, "{body}");

    let client = client_of(&strobe).await;
    let producer = client
        .scalable_producer("topic://public/default/load")
        .name("p")
        .create()
        .await
        .unwrap();
    // About 10,000 messages a second: 100 every 10 ms.
    let load = KeyedLoad::start(producer, KEYS, 100);
    let admin = |path: &str| {
        let (st, body) = strobe.http(
            "POST",
            &format!("/admin/v2/scalable/public/default/load/{path}"),
            "",
        );
        assert_eq!(st, 200, "{path}: {body}");
    };
    let mut marks = Vec::new();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // 1 → 2 → 4 → 2 → 1: ids 1, 2; 3, 4 and 5, 6; 7 and 8; 9.
    for step in [
        "split/0",
        "split/1",
        "split/2",
        "merge/3/4",
        "merge/5/6",
        "merge/7/8",
    ] {
        marks.push(Instant::now());
        admin(step);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (sent, receipts) = load.finish().await;
    assert!(sent > 30_000, "only {sent} messages sent");

    let (_, body) = strobe.http("GET", "/admin/v2/scalable/public/default/load", "");
    let layout: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(layout["epoch"], 6, "{layout}");
    let total = check_dag_order(&client, "load", &layout).await;
    assert_eq!(total, sent, "messages stored vs sent");
    let p = pauses(&receipts, &marks, Duration::from_millis(600));
    eprintln!("receipt gaps after each resize (ms): {p:?}; {sent} messages");
}

/// A queue consumer (Shared on every segment, following the DAG) gets every
/// message once across a split and a merge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_consumer_reads_everything_across_a_split_and_a_merge() {
    let (strobe, client) = standalone(&["q"]).await;
    let mut consumer = client
        .scalable_queue_consumer("topic://public/default/q", "work")
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .scalable_producer("topic://public/default/q")
        .create()
        .await
        .unwrap();
    let load = KeyedLoad::start(producer, 16, 20);
    for step in ["split/0", "merge/1/2"] {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let (st, body) = strobe.http(
            "POST",
            &format!("/admin/v2/scalable/public/default/q/{step}"),
            "",
        );
        assert_eq!(st, 200, "{step}: {body}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (sent, _) = load.finish().await;
    let mut seen = std::collections::BTreeSet::new();
    let mut segments = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while (seen.len() as u64) < sent && Instant::now() < deadline {
        let Some(m) = consumer.recv_timeout(Duration::from_secs(1)).await.unwrap() else {
            continue;
        };
        let text = String::from_utf8(m.message.payload.to_vec()).unwrap();
        assert!(seen.insert(text.clone()), "{text} received twice");
        segments.insert(m.segment_id);
        consumer.ack(&m).unwrap();
    }
    assert_eq!(seen.len() as u64, sent, "received vs sent");
    assert_eq!(segments, (0..=3).collect(), "every segment was read");
    // Nothing more comes.
    assert!(
        consumer
            .recv_timeout(Duration::from_millis(500))
            .await
            .unwrap()
            .is_none()
    );
}

/// Two stream consumers on a one-segment topic (sharing it by entry
/// bucket) while it splits under a keyed load (entry-bucket batching): the
/// children go to them only after the parent is drained, so every message
/// arrives once and each key's messages arrive in send order across both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_consumers_keep_each_keys_order_across_a_split() {
    let (strobe, client) = standalone(&["s"]).await;
    // Every receipt in one order: (key, seq, consumer).
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<(u64, u64, &str)>();
    let mut readers = Vec::new();
    for name in ["a", "b"] {
        let mut c = client
            .scalable_stream_consumer("topic://public/default/s", "work", name)
            .initial_position(strobe_client::InitialPosition::Earliest)
            .subscribe()
            .await
            .unwrap();
        let seen = seen_tx.clone();
        readers.push(tokio::spawn(async move {
            loop {
                let Ok(Some(m)) = c.recv_timeout(Duration::from_secs(30)).await else {
                    return;
                };
                let text = String::from_utf8(m.message.payload.to_vec()).unwrap();
                let (k, s) = text.split_once(':').unwrap();
                let _ = seen.send((k.parse().unwrap(), s.parse().unwrap(), name));
                c.ack(&m).unwrap();
            }
        }));
    }
    drop(seen_tx);
    let producer = client
        .scalable_producer("topic://public/default/s")
        .entry_bucket_batching(true)
        .create()
        .await
        .unwrap();
    let load = KeyedLoad::start(producer, 16, 20);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (st, body) = strobe.http("POST", "/admin/v2/scalable/public/default/s/split/0", "");
    assert_eq!(st, 200, "{body}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (sent, _) = load.finish().await;

    let mut by_key: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    let mut readers_of_children = std::collections::BTreeSet::new();
    let mut n = 0u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    while n < sent && Instant::now() < deadline {
        let Ok(Some((k, s, who))) =
            tokio::time::timeout(Duration::from_secs(1), seen_rx.recv()).await
        else {
            continue;
        };
        by_key.entry(k).or_default().push(s);
        if n > sent / 2 {
            readers_of_children.insert(who);
        }
        n += 1;
    }
    assert_eq!(n, sent, "received vs sent");
    for (k, seqs) in &by_key {
        if let Some(i) = seqs.iter().enumerate().position(|(i, s)| *s != i as u64) {
            panic!(
                "key {k}: out of order, lost or twice at {i}: {:?}",
                &seqs[i.saturating_sub(3)..(i + 5).min(seqs.len())]
            );
        }
    }
    // After the split both consumers read (one child each).
    assert_eq!(readers_of_children.len(), 2, "{readers_of_children:?}");
    let (_, body) = strobe.http("GET", "/admin/v2/scalable/public/default/s/stats", "");
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        stats["subscriptions"]["work"]["drainedSegments"],
        serde_json::json!([0])
    );
    for r in readers {
        r.abort();
    }
}

/// PIP-483 by itself: a load over the split threshold splits the topic
/// until no segment is over it (at most `max_segments`), and once the
/// load stops the cold segments merge back; nothing is lost or reordered
/// through the resizes the controller chose. The broker keeps Pulsar's
/// thresholds (off here): the namespace's override sets this test's, and
/// the topic's own override wins over the namespace's `maxSegments`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_splits_under_load_and_merges_when_it_stops() {
    let strobe = Strobe::start_with_config(
        "scalable_topic_gc_interval_secs = 0\n\
         stats_update_interval_secs = 1\n\
         scalable_topic_auto_scale_enabled = false\n\
         scalable_topic_auto_scale_interval_secs = 1\n",
    );
    let ns_policy = "/admin/v2/namespaces/public/default/scalableTopicAutoScalePolicy";
    // Unusable combinations are refused, not stored.
    let (code, body) = strobe.http("POST", ns_policy, r#"{"minSegments":5,"maxSegments":2}"#);
    assert_eq!(code, 400, "{body}");
    let (code, body) = strobe.http("POST", ns_policy, r#"{"mergeMsgRateInThreshold":20000}"#);
    assert_eq!(code, 400, "merge above split: {body}");
    let (code, body) = strobe.http("POST", ns_policy, r#"{"maxSegments":"many"}"#);
    assert_eq!(code, 400, "{body}");
    let (code, body) = strobe.http(
        "POST",
        ns_policy,
        r#"{"enabled":true,"maxSegments":8,"splitCooldownSeconds":0,
            "mergeCooldownSeconds":0,"mergeWindowSeconds":2,
            "splitMsgRateInThreshold":400,"mergeMsgRateInThreshold":50}"#,
    );
    assert_eq!(code, 204, "{body}");
    let (_, body) = strobe.http("GET", ns_policy, "");
    let got: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(got["maxSegments"], 8, "{body}");
    assert_eq!(got["splitMsgRateInThreshold"], 400.0, "{body}");
    let base = "/admin/v2/scalable/public/default/auto";
    assert_eq!(strobe.http("PUT", base, "").0, 204);
    let topic_policy = format!("{base}/autoScalePolicy");
    let (code, body) = strobe.http("POST", &topic_policy, r#"{"minSegments":9}"#);
    assert_eq!(code, 400, "min above the namespace's max: {body}");
    let (code, body) = strobe.http("POST", &topic_policy, r#"{"maxSegments":4}"#);
    assert_eq!(code, 204, "{body}");
    let (_, body) = strobe.http("GET", &topic_policy, "");
    assert_eq!(body.trim(), r#"{"maxSegments":4}"#);
    let (_, body) = strobe.http("GET", base, "");
    let l: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(l["epoch"], 0, "a policy write leaves the epoch: {body}");
    assert_eq!(l["autoScalePolicy"]["maxSegments"], 4, "{body}");
    let client = client_of(&strobe).await;
    let producer = client
        .scalable_producer("topic://public/default/auto")
        .name("p")
        .create()
        .await
        .unwrap();
    let active = |strobe: &Strobe| {
        let (_, body) = strobe.http("GET", base, "");
        let l: serde_json::Value = serde_json::from_str(&body).unwrap();
        let n = l["segments"]
            .as_object()
            .unwrap()
            .values()
            .filter(|s| s["state"] == "ACTIVE")
            .count();
        (n, l)
    };
    // About 2,000 msg/s over 64 keys: five times the threshold.
    let load = KeyedLoad::start(producer, 64, 20);
    let started = Instant::now();
    let split_in = loop {
        let (n, _) = active(&strobe);
        if n >= 4 {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not split to 4: {n}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(active(&strobe).0, 4, "never above the topic's maxSegments");
    let (sent, _) = load.finish().await;
    let stopped = Instant::now();
    let merged_in = loop {
        let (n, _) = active(&strobe);
        if n == 1 {
            break stopped.elapsed();
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(40),
            "not merged back: {n}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (_, layout) = active(&strobe);
    let total = check_dag_order(&client, "auto", &layout).await;
    assert_eq!(total, sent, "messages stored vs sent");
    eprintln!(
        "split to 4 in {split_in:?} under load; merged back to 1 in {merged_in:?} after it stopped; epoch {}",
        layout["epoch"]
    );
}

/// A checkpoint consumer (readers, positions kept by the application)
/// stops partway through a keyed load that splits the topic, and one
/// started from its checkpoint's bytes reads the rest: every message once
/// between the two. Then a group of two reads it all again from the
/// start, each member its own segments, every message once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_consumers_resume_from_a_checkpoint_across_a_split() {
    use strobe_client::{Checkpoint, CheckpointKind};
    let (strobe, client) = standalone(&["cp"]).await;
    let topic = "topic://public/default/cp";
    let mut first = client
        .scalable_checkpoint_consumer(topic)
        .start_from(Checkpoint::earliest())
        .create()
        .await
        .unwrap();
    let producer = client.scalable_producer(topic).create().await.unwrap();
    let load = KeyedLoad::start(producer, 16, 20);
    let mut seen = std::collections::BTreeSet::new();
    let text =
        |m: &strobe_client::ScalableMessage| String::from_utf8(m.message.payload.to_vec()).unwrap();
    let until = Instant::now() + Duration::from_millis(700);
    while Instant::now() < until {
        if let Some(m) = first
            .recv_timeout(Duration::from_millis(100))
            .await
            .unwrap()
        {
            assert!(seen.insert(text(&m)), "{} received twice", text(&m));
        }
    }
    let (st, body) = strobe.http("POST", "/admin/v2/scalable/public/default/cp/split/0", "");
    assert_eq!(st, 200, "{body}");
    let until = Instant::now() + Duration::from_millis(700);
    let mut from_children = 0;
    while Instant::now() < until {
        if let Some(m) = first
            .recv_timeout(Duration::from_millis(100))
            .await
            .unwrap()
        {
            from_children += u32::from(m.segment_id != 0);
            assert!(seen.insert(text(&m)), "{} received twice", text(&m));
        }
    }
    assert!(
        from_children > 0,
        "no reads of the children before the checkpoint"
    );
    let checkpoint = first.checkpoint();
    assert_eq!(checkpoint.kind, CheckpointKind::Regular);
    let bytes = checkpoint.to_bytes();
    first.close().await.unwrap();
    let before = seen.len();
    let (sent, _) = load.finish().await;
    let mut second = client
        .scalable_checkpoint_consumer(topic)
        .start_from(Checkpoint::from_bytes(&bytes).unwrap())
        .create()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while (seen.len() as u64) < sent && Instant::now() < deadline {
        if let Some(m) = second.recv_timeout(Duration::from_secs(1)).await.unwrap() {
            assert!(
                seen.insert(text(&m)),
                "{} read again after the checkpoint",
                text(&m)
            );
        }
    }
    assert_eq!(
        seen.len() as u64,
        sent,
        "received vs sent ({before} before the checkpoint)"
    );
    assert!(
        second
            .recv_timeout(Duration::from_millis(500))
            .await
            .unwrap()
            .is_none()
    );
    second.close().await.unwrap();

    // A group of two, at the end of every segment, then a second load:
    // three segments (the sealed parent and two children), never shared,
    // so the children's new messages arrive once. (A segment
    // moving to another member is read from that member's own checkpoint:
    // positions are the application's, so members start together here.)
    let member = |name: &'static str| {
        client
            .scalable_checkpoint_consumer(topic)
            .consumer_group("g")
            .consumer_name(name)
            .start_from(Checkpoint::latest())
            .create()
    };
    let mut a = member("a").await.unwrap();
    let mut b = member("b").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let producer = client.scalable_producer(topic).create().await.unwrap();
    let load = KeyedLoad::start(producer, 16, 20);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (sent, _) = load.finish().await;
    let mut again = std::collections::BTreeSet::new();
    let mut segments_of = [
        std::collections::BTreeSet::new(),
        std::collections::BTreeSet::new(),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    while (again.len() as u64) < sent && Instant::now() < deadline {
        let (i, m) = tokio::select! {
            m = a.recv() => (0, m.unwrap()),
            m = b.recv() => (1, m.unwrap()),
            _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
        };
        segments_of[i].insert(m.segment_id);
        assert!(
            again.insert(text(&m)),
            "{} read twice by the group",
            text(&m)
        );
    }
    assert_eq!(
        again.len() as u64,
        sent,
        "the group read vs sent: {segments_of:?}"
    );
    // Segments go round robin in ring order (child 1, the parent, child
    // 2), so `a` reads both children and `b` the drained parent.
    assert!(
        segments_of[0].is_disjoint(&segments_of[1]),
        "a segment read by both members: {segments_of:?}"
    );
    assert_eq!(
        segments_of[0].union(&segments_of[1]).count(),
        2,
        "{segments_of:?}"
    );
}

/// PIP-475: a V5 producer writes to a two-partition v4 topic through its
/// synthetic layout; the topic migrates (refused while a plain v4 producer
/// is connected) under that load, the producer follows the new layout to
/// the children, and reading the partitions then the children gives every
/// key's messages once and in order. The v4 subscription has a cursor on
/// the children, and the partitions take no more v4 producers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v4_topic_migrates_under_load_and_v5_producers_follow() {
    let strobe = Strobe::start_with_config("scalable_topic_gc_interval_secs = 0\n");
    let (st, body) = strobe.http(
        "PUT",
        "/admin/v2/persistent/public/default/mig/partitions",
        "2",
    );
    assert!(st == 204 || st == 200, "{st} {body}");
    let client = client_of(&strobe).await;
    for p in 0..2 {
        let c = client
            .consumer(
                &format!("persistent://public/default/mig-partition-{p}"),
                "v4sub",
            )
            .subscribe()
            .await
            .unwrap();
        c.close().await.unwrap();
    }
    let migrate = "/admin/v2/scalable/public/default/mig/migrate";
    let v4 = client
        .producer("persistent://public/default/mig-partition-0")
        .create()
        .await
        .unwrap();
    let (st, body) = strobe.http("POST", migrate, "");
    assert_eq!(st, 409, "a v4 producer is connected: {body}");
    v4.close().await.unwrap();
    let (st, body) = strobe.http(
        "POST",
        "/admin/v2/scalable/public/default/absent/migrate",
        "",
    );
    assert_eq!(st, 404, "{body}");

    let producer = client
        .scalable_producer("persistent://public/default/mig")
        .create()
        .await
        .unwrap();
    let load = KeyedLoad::start(producer, 16, 20);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (st, body) = strobe.http("POST", migrate, "");
    assert_eq!(st, 204, "{body}");
    let (st, body) = strobe.http("POST", migrate, "");
    assert_eq!(st, 409, "migrated already: {body}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (sent, _) = load.finish().await;

    let (_, body) = strobe.http("GET", "/admin/v2/scalable/public/default/mig", "");
    let layout: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(layout["epoch"], 1, "{body}");
    assert_eq!(layout["segments"].as_object().unwrap().len(), 4, "{body}");
    assert_eq!(
        layout["segments"]["2"]["parentIds"],
        serde_json::json!([0, 1])
    );
    assert_eq!(
        layout["segments"]["0"]["legacyTopicName"],
        "persistent://public/default/mig-partition-0"
    );
    let total = check_dag_order(&client, "mig", &layout).await;
    assert_eq!(total, sent, "stored vs sent");
    let (_, body) = strobe.http("GET", "/admin/v2/scalable/public/default/mig/stats", "");
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    for child in ["2", "3"] {
        assert!(
            stats["segments"][child]["stats"]["backlogs"]["v4sub"].is_u64(),
            "the v4 subscription has a cursor on child {child}: {body}"
        );
    }
    assert!(
        client
            .producer("persistent://public/default/mig-partition-0")
            .create()
            .await
            .is_err(),
        "a sealed partition takes no producer"
    );
}

/// PIP-473's data path: a transaction sends keyed messages to a scalable
/// topic before and after a split (to the parent, then to the children):
/// nothing is delivered until it commits, then all of it once. Another
/// across the next split aborts: none of it is ever delivered, and the
/// topic goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_across_a_split_commit_or_abort_on_parent_and_children() {
    use strobe_client::ProducerMessage;
    let (strobe, client) = standalone(&["tx"]).await;
    let topic = "topic://public/default/tx";
    let mut consumer = client
        .scalable_queue_consumer(topic, "q")
        .initial_position(strobe_client::InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let producer = client.scalable_producer(topic).create().await.unwrap();
    let msg = |tag: &str, i: u32| {
        ProducerMessage::new(format!("{tag}{i}").into_bytes()).with_key(format!("k{}", i % 8))
    };
    let admin = |path: &str| {
        let (st, body) = strobe.http(
            "POST",
            &format!("/admin/v2/scalable/public/default/tx/{path}"),
            "",
        );
        assert_eq!(st, 200, "{path}: {body}");
    };
    let ttl = Duration::from_secs(60);

    let t1 = client.new_transaction(ttl).await.unwrap();
    let mut segments = std::collections::BTreeSet::new();
    for i in 0..20 {
        segments.insert(
            producer
                .send_in(&t1, msg("a", i))
                .await
                .unwrap()
                .await
                .unwrap()
                .segment_id,
        );
    }
    admin("split/0");
    for i in 20..40 {
        segments.insert(
            producer
                .send_in(&t1, msg("a", i))
                .await
                .unwrap()
                .await
                .unwrap()
                .segment_id,
        );
    }
    assert!(
        segments.contains(&0) && segments.len() == 3,
        "parent and both children: {segments:?}"
    );
    assert!(
        consumer
            .recv_timeout(Duration::from_millis(700))
            .await
            .unwrap()
            .is_none(),
        "nothing of an open transaction is delivered"
    );
    t1.commit().await.unwrap();
    let mut got = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 40 && Instant::now() < deadline {
        if let Some(m) = consumer
            .recv_timeout(Duration::from_millis(500))
            .await
            .unwrap()
        {
            let text = String::from_utf8(m.message.payload.to_vec()).unwrap();
            assert!(got.insert(text.clone()), "{text} delivered twice");
            consumer.ack(&m).unwrap();
        }
    }
    assert_eq!(
        got.len(),
        40,
        "the committed transaction's messages: {got:?}"
    );

    let t2 = client.new_transaction(ttl).await.unwrap();
    for i in 0..10 {
        producer
            .send_in(&t2, msg("b", i))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    admin("split/1");
    for i in 10..20 {
        producer
            .send_in(&t2, msg("b", i))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    t2.abort().await.unwrap();
    producer.send_and_wait(msg("c", 0)).await.unwrap();
    let mut after = Vec::new();
    while let Some(m) = consumer
        .recv_timeout(Duration::from_millis(1500))
        .await
        .unwrap()
    {
        after.push(String::from_utf8(m.message.payload.to_vec()).unwrap());
        consumer.ack(&m).unwrap();
    }
    assert_eq!(
        after,
        vec!["c0".to_string()],
        "only the plain message after the abort"
    );

    // A stream subscription: the parent, sealed with the transaction's
    // messages held, is not drained until they are read after the commit.
    let (st, body) = strobe.http("PUT", "/admin/v2/scalable/public/default/tx2", "");
    assert_eq!(st, 204, "{body}");
    let topic = "topic://public/default/tx2";
    let mut stream = client
        .scalable_stream_consumer(topic, "s", "only")
        .initial_position(strobe_client::InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let producer = client.scalable_producer(topic).create().await.unwrap();
    let t3 = client.new_transaction(ttl).await.unwrap();
    for i in 0..10 {
        producer
            .send_in(&t3, msg("d", i))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let (st, body) = strobe.http("POST", "/admin/v2/scalable/public/default/tx2/split/0", "");
    assert_eq!(st, 200, "{body}");
    for i in 10..20 {
        producer
            .send_in(&t3, msg("d", i))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    // Drains are recorded every second: give a wrong one time to happen.
    tokio::time::sleep(Duration::from_secs(3)).await;
    t3.commit().await.unwrap();
    let mut got = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 20 && Instant::now() < deadline {
        if let Some(m) = stream
            .recv_timeout(Duration::from_millis(500))
            .await
            .unwrap()
        {
            got.insert(String::from_utf8(m.message.payload.to_vec()).unwrap());
            stream.ack(&m).unwrap();
        }
    }
    assert_eq!(got.len(), 20, "the stream subscription got: {got:?}");
}

/// Consume-transform-produce in transactions between two scalable topics
/// that both split midway, with one batch aborted (its messages come
/// again and are processed in a later batch): the output holds every input
/// message exactly once, and the input subscription has nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_transform_produce_across_splits_is_exactly_once() {
    use strobe_client::ProducerMessage;
    let (strobe, client) = standalone(&["src", "dst"]).await;
    let input = client
        .scalable_producer("topic://public/default/src")
        .create()
        .await
        .unwrap();
    const N: u32 = 200;
    for i in 0..N {
        input
            .send(
                ProducerMessage::new(format!("m{i}").into_bytes()).with_key(format!("k{}", i % 16)),
            )
            .await
            .unwrap();
    }
    input.flush().await.unwrap();
    let mut consumer = client
        .scalable_queue_consumer("topic://public/default/src", "etl")
        .initial_position(strobe_client::InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let output = client
        .scalable_producer("topic://public/default/dst")
        .create()
        .await
        .unwrap();
    let ttl = Duration::from_secs(60);
    let (mut batches, mut committed) = (0, 0u32);
    let deadline = Instant::now() + Duration::from_secs(60);
    while committed < N && Instant::now() < deadline {
        let txn = client.new_transaction(ttl).await.unwrap();
        let mut n = 0;
        while n < 10 {
            let Some(m) = consumer
                .recv_timeout(Duration::from_millis(500))
                .await
                .unwrap()
            else {
                break;
            };
            let out = ProducerMessage::new(m.message.payload.to_vec())
                .with_key(m.message.key.clone().unwrap_or_default());
            output.send_in(&txn, out).await.unwrap().await.unwrap();
            consumer.ack_in(&txn, &m).await.unwrap();
            n += 1;
        }
        batches += 1;
        if batches == 4 {
            // This one aborts: its messages come again.
            txn.abort().await.unwrap();
            continue;
        }
        txn.commit().await.unwrap();
        committed += n;
        if batches == 6 {
            for t in ["src", "dst"] {
                let (st, body) = strobe.http(
                    "POST",
                    &format!("/admin/v2/scalable/public/default/{t}/split/0"),
                    "",
                );
                assert_eq!(st, 200, "{t}: {body}");
            }
        }
    }
    assert_eq!(
        committed, N,
        "every input message processed in a committed batch"
    );
    let mut check = client
        .scalable_queue_consumer("topic://public/default/dst", "verify")
        .initial_position(strobe_client::InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(m) = check
        .recv_timeout(Duration::from_millis(1500))
        .await
        .unwrap()
    {
        let text = String::from_utf8(m.message.payload.to_vec()).unwrap();
        assert!(seen.insert(text.clone()), "{text} is in the output twice");
    }
    assert_eq!(seen.len() as u32, N, "the output holds every input message");
    let (_, body) = strobe.http("GET", "/admin/v2/scalable/public/default/src/stats", "");
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(stats["subscriptions"]["etl"]["msgBacklog"], 0, "{body}");
}
