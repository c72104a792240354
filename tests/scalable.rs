//! Scalable topics end to end with a real `strobe standalone` process: the
//! admin API on Pulsar's paths (`/admin/v2/scalable/...`), and a split
//! whose broker dies (abort, as kill -9) at every step, finished by the
//! broker after its restart: the parent sealed for producers, its messages
//! still there, the children made with the subscription's cursor, the DAG
//! pushed to a watching client.

mod common;

use std::time::{Duration, Instant};

use common::{RawClient, Strobe};
use serde_json::Value;
use strobe_wire::proto::command_subscribe::{InitialPosition, SubType};
use strobe_wire::proto::{CommandScalableTopicLookup, MessageMetadata, ServerError};
use strobe_wire::{Command as Cmd, Frame, commands, payload};

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

async fn expect<F: Fn(&Cmd) -> bool>(c: &mut RawClient, what: &str, f: F) -> Frame {
    let mut seen = Vec::new();
    loop {
        match c.recv_within(Duration::from_secs(10)).await {
            Ok(Some(frame)) => {
                if f(&frame.command) {
                    return frame;
                }
                seen.push(frame);
            }
            other => panic!("no {what}: {other:?} after {seen:?}"),
        }
    }
}

/// Produces `n` messages on producer `id` (already created) and waits for
/// each receipt; returns the error of the first refused send.
async fn produce(c: &mut RawClient, id: u64, from: u64, n: u64) -> Option<ServerError> {
    for seq in from..from + n {
        let meta = MessageMetadata {
            producer_name: format!("p{id}"),
            sequence_id: seq,
            publish_time: 1,
            ..Default::default()
        };
        c.send_frame(commands::send_frame(
            id,
            seq,
            1,
            payload::encode(&meta, format!("m{seq}").as_bytes(), true),
        ))
        .await;
        let f = expect(c, "a receipt or an error", |f| {
            matches!(
                f,
                Cmd::SendReceipt(_) | Cmd::SendError(_) | Cmd::CloseProducer(_)
            )
        })
        .await;
        match f.command {
            Cmd::SendReceipt(_) => {}
            Cmd::SendError(e) => return Some(e.error()),
            Cmd::CloseProducer(_) => return Some(ServerError::TopicTerminatedError),
            _ => unreachable!(),
        }
    }
    None
}

/// Creates producer `id` on `topic`: `Ok` or the broker's error.
async fn create_producer(c: &mut RawClient, id: u64, topic: &str) -> Result<(), ServerError> {
    c.send(commands::producer(
        100 + id,
        id,
        topic,
        Some(&format!("p{id}")),
    ))
    .await;
    let f = expect(c, "PRODUCER_SUCCESS or ERROR", |f| {
        matches!(f, Cmd::ProducerSuccess(_) | Cmd::Error(_))
    })
    .await;
    match f.command {
        Cmd::ProducerSuccess(_) => Ok(()),
        Cmd::Error(e) => Err(e.error()),
        _ => unreachable!(),
    }
}

/// Reads every message of `topic` from its start with a fresh subscription.
async fn read_all(c: &mut RawClient, consumer_id: u64, topic: &str) -> Vec<String> {
    let mut sub = commands::subscribe(
        200 + consumer_id,
        consumer_id,
        topic,
        &format!("reader-{consumer_id}"),
        SubType::Exclusive,
    );
    sub.initial_position = Some(InitialPosition::Earliest as i32);
    c.send(Cmd::Subscribe(sub)).await;
    expect(c, "SUCCESS", |f| matches!(f, Cmd::Success(_))).await;
    c.send(commands::flow(consumer_id, 1000)).await;
    let mut out = Vec::new();
    while let Ok(Some(f)) = c.recv_within(Duration::from_millis(500)).await {
        if let (Cmd::Message(_), Some(p)) = (&f.command, &f.payload) {
            let parsed = payload::parse(p).unwrap();
            out.push(String::from_utf8_lossy(&parsed.payload).into_owned());
        }
    }
    out
}

#[tokio::test]
async fn the_admin_api_creates_splits_merges_and_deletes() {
    let strobe = Strobe::start();
    let base = "/admin/v2/scalable/public/default";
    let (st, body) = strobe.http(
        "PUT",
        &format!("{base}/orders?numInitialSegments=2"),
        r#"{"team":"a"}"#,
    );
    assert_eq!(st, 204, "{body}");
    let (st, _) = strobe.http("PUT", &format!("{base}/orders"), "");
    assert_eq!(st, 409);
    let (st, _) = strobe.http("PUT", &format!("{base}/other"), r#"{"team":"b"}"#);
    assert_eq!(st, 204);
    let (_, body) = strobe.http("GET", &format!("{base}?property=team=a"), "");
    assert_eq!(
        json(&body),
        serde_json::json!(["topic://public/default/orders"])
    );
    let (_, body) = strobe.http("GET", base, "");
    assert_eq!(json(&body).as_array().unwrap().len(), 2);

    // LOOKUP answers for a topic:// name (the Java V5 client picks its
    // connection so).
    let mut c = RawClient::handshake(strobe.port).await;
    c.send(commands::lookup_topic(
        1,
        "topic://public/default/orders",
        false,
    ))
    .await;
    let f = expect(&mut c, "LOOKUP_RESPONSE", |f| {
        matches!(f, Cmd::LookupResponse(_))
    })
    .await;
    let Cmd::LookupResponse(r) = f.command else {
        unreachable!()
    };
    assert_eq!(
        r.broker_service_url.as_deref(),
        Some(format!("pulsar://127.0.0.1:{}", strobe.port).as_str()),
        "{r:?}"
    );

    let (st, body) = strobe.http("GET", &format!("{base}/orders"), "");
    assert_eq!(st, 200);
    let l = json(&body);
    assert_eq!(l["epoch"], 0);
    assert_eq!(l["segments"]["1"]["hashRange"]["start"], 0x8000);

    let (st, body) = strobe.http(
        "PUT",
        &format!("{base}/orders/subscriptions/audit?type=QUEUE"),
        "",
    );
    assert_eq!(st, 204, "{body}");
    let (st, body) = strobe.http("POST", &format!("{base}/orders/split/0"), "");
    assert_eq!(st, 200, "{body}");
    let l = json(&body);
    assert_eq!(l["epoch"], 1);
    assert_eq!(l["segments"]["0"]["state"], "SEALED");
    assert_eq!(l["segments"]["0"]["childIds"], serde_json::json!([2, 3]));
    // Sealed: not split again; unknown: 404; not adjacent: refused.
    let (st, _) = strobe.http("POST", &format!("{base}/orders/split/0"), "");
    assert_eq!(st, 412);
    let (st, _) = strobe.http("POST", &format!("{base}/orders/split/9"), "");
    assert_eq!(st, 404);
    let (st, _) = strobe.http("POST", &format!("{base}/orders/merge/2/1"), "");
    assert_eq!(st, 412);
    let (st, body) = strobe.http("POST", &format!("{base}/orders/merge/3/1"), "");
    assert_eq!(st, 200, "{body}");
    assert_eq!(
        json(&body)["segments"]["4"]["parentIds"],
        serde_json::json!([3, 1])
    );

    let (st, body) = strobe.http("GET", &format!("{base}/orders/stats"), "");
    assert_eq!(st, 200, "{body}");
    let stats = json(&body);
    assert_eq!(
        (stats["epoch"].as_u64(), stats["activeSegments"].as_u64()),
        (Some(2), Some(2))
    );
    // Every segment, sealed or not, has the subscription's cursor.
    for (id, seg) in stats["segments"].as_object().unwrap() {
        assert!(
            seg["stats"]["backlogs"].get("audit").is_some(),
            "segment {id}: {seg}"
        );
    }
    // The segment topics exist as ordinary topics with the cursor.
    let (st, body) = strobe.http(
        "GET",
        "/admin/v2/segments/public/default/orders/0000-3fff-2/stats",
        "",
    );
    assert_eq!(st, 200, "{body}");
    assert_eq!(json(&body)["backlogs"]["audit"], 0);

    let (st, _) = strobe.http(
        "POST",
        &format!("{base}/orders/subscriptions/audit/skip-all"),
        "",
    );
    assert_eq!(st, 204);
    let (st, _) = strobe.http(
        "POST",
        &format!("{base}/orders/subscriptions/audit/seek?timestamp=1"),
        "",
    );
    assert_eq!(st, 204);
    let (st, _) = strobe.http(
        "POST",
        &format!("{base}/orders/subscriptions/nobody/skip-all"),
        "",
    );
    assert_eq!(st, 404);
    let (st, _) = strobe.http("DELETE", &format!("{base}/orders/subscriptions/audit"), "");
    assert_eq!(st, 204);

    // Deleted without force while a producer is connected: refused.
    let mut c = RawClient::handshake(strobe.port).await;
    create_producer(&mut c, 1, "segment://public/default/orders/0000-3fff-2")
        .await
        .unwrap();
    let (st, body) = strobe.http("DELETE", &format!("{base}/orders"), "");
    assert_eq!(st, 412, "{body}");
    let (st, body) = strobe.http("DELETE", &format!("{base}/orders?force=true"), "");
    assert_eq!(st, 204, "{body}");
    let (st, _) = strobe.http("GET", &format!("{base}/orders"), "");
    assert_eq!(st, 404);
    let (st, _) = strobe.http(
        "GET",
        "/admin/v2/segments/public/default/orders/0000-3fff-2/stats",
        "",
    );
    assert_eq!(st, 404);
}

/// An HTTP call to a broker that may die answering it.
fn http_maybe(strobe: &Strobe, method: &str, path: &str) -> Option<u16> {
    common::http_call(strobe.http_port, method, path, "", Duration::from_secs(30)).map(|r| r.0)
}

#[tokio::test]
async fn a_split_cut_by_the_brokers_death_at_any_step_is_finished_after_restart() {
    for step in [
        "after-record",
        "after-create",
        "after-terminate",
        "after-commit",
    ] {
        let mut strobe =
            Strobe::start_with_config(&format!("scalable_topic_failpoint = \"{step}\"\n"));
        let base = "/admin/v2/scalable/public/default";
        let (st, _) = strobe.http("PUT", &format!("{base}/t"), "");
        assert_eq!(st, 204);
        let (st, _) = strobe.http("PUT", &format!("{base}/t/subscriptions/s"), "");
        assert_eq!(st, 204);
        let parent = "segment://public/default/t/0000-ffff-0";
        let mut c = RawClient::handshake(strobe.port).await;
        create_producer(&mut c, 1, parent).await.unwrap();
        assert_eq!(produce(&mut c, 1, 0, 5).await, None);

        // The split kills the broker at `step`.
        let answer = http_maybe(&strobe, "POST", &format!("{base}/t/split/0"));
        assert_eq!(answer, None, "{step}: the broker answered the split");
        assert_eq!(
            strobe.wait_exit(Duration::from_secs(10)),
            None,
            "{step}: aborted"
        );
        std::fs::write(strobe.data_dir.path().join("strobe.toml"), "").unwrap();
        strobe.restart();

        // The restarted broker finishes it on its own.
        let deadline = Instant::now() + Duration::from_secs(20);
        let layout = loop {
            let (_, body) = strobe.http("GET", &format!("{base}/t"), "");
            let l = json(&body);
            if l["epoch"] == 1 {
                break l;
            }
            assert!(Instant::now() < deadline, "{step}: not finished: {l}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(layout["segments"]["0"]["state"], "SEALED", "{step}");
        assert_eq!(
            layout["segments"]["0"]["childIds"],
            serde_json::json!([1, 2])
        );

        let mut c = RawClient::handshake(strobe.port).await;
        // The parent takes no more messages and keeps the five it has.
        assert_eq!(
            create_producer(&mut c, 2, parent).await,
            Err(ServerError::TopicTerminatedError),
            "{step}"
        );
        assert_eq!(
            read_all(&mut c, 3, parent).await,
            (0..5).map(|i| format!("m{i}")).collect::<Vec<_>>(),
            "{step}"
        );
        // The children take messages, and were made with the cursor.
        for (i, child) in ["0000-7fff-1", "8000-ffff-2"].iter().enumerate() {
            let name = format!("segment://public/default/t/{child}");
            create_producer(&mut c, 10 + i as u64, &name).await.unwrap();
            assert_eq!(produce(&mut c, 10 + i as u64, 0, 2).await, None);
        }
        let (_, body) = strobe.http("GET", &format!("{base}/t/stats"), "");
        let stats = json(&body);
        assert_eq!(
            stats["subscriptions"]["s"]["msgBacklog"],
            5 + 2 + 2,
            "{step}: {stats}"
        );
        // A client watching the topic gets the finished layout.
        c.send(Cmd::ScalableTopicLookup(CommandScalableTopicLookup {
            session_id: 1,
            topic: "topic://public/default/t".into(),
            create_if_missing: Some(false),
        }))
        .await;
        let f = expect(&mut c, "SCALABLE_TOPIC_UPDATE", |f| {
            matches!(f, Cmd::ScalableTopicUpdate(_))
        })
        .await;
        let Cmd::ScalableTopicUpdate(u) = f.command else {
            unreachable!()
        };
        let dag = u.dag.unwrap();
        assert_eq!(
            (dag.epoch, dag.segments.len(), dag.segment_brokers.len()),
            (1, 3, 2)
        );
        assert_eq!(
            dag.controller_broker_url,
            Some(format!("pulsar://127.0.0.1:{}", strobe.port))
        );
    }
}

#[tokio::test]
async fn a_sealed_segment_is_pruned_once_every_subscription_has_read_it() {
    let strobe = Strobe::start_with_config("scalable_topic_gc_interval_secs = 1\n");
    let base = "/admin/v2/scalable/public/default/gc";
    assert_eq!(strobe.http("PUT", base, "").0, 204);
    assert_eq!(
        strobe.http("PUT", &format!("{base}/subscriptions/s"), "").0,
        204
    );
    let parent = "segment://public/default/gc/0000-ffff-0";
    let mut c = RawClient::handshake(strobe.port).await;
    create_producer(&mut c, 1, parent).await.unwrap();
    assert_eq!(produce(&mut c, 1, 0, 3).await, None);
    let (st, body) = strobe.http("POST", &format!("{base}/split/0"), "");
    assert_eq!(st, 200, "{body}");
    // Unread by "s": kept through several GC rounds.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (_, body) = strobe.http("GET", base, "");
    let l = json(&body);
    assert!(
        l["segments"].get("0").is_some(),
        "pruned with a backlog: {l}"
    );
    // Read (skipped): pruned, its topic deleted, the children's edges gone.
    assert_eq!(
        strobe
            .http("POST", &format!("{base}/subscriptions/s/skip-all"), "")
            .0,
        204
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    let l = loop {
        let (_, body) = strobe.http("GET", base, "");
        let l = json(&body);
        if l["segments"].get("0").is_none() {
            break l;
        }
        assert!(Instant::now() < deadline, "not pruned: {l}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(l["epoch"], 2);
    assert_eq!(l["segments"]["1"]["parentIds"], serde_json::json!([]));
    let (st, _) = strobe.http(
        "GET",
        "/admin/v2/segments/public/default/gc/0000-ffff-0/stats",
        "",
    );
    assert_eq!(st, 404);
}

#[tokio::test]
async fn a_segment_read_to_its_sealed_end_is_recorded_drained() {
    let strobe = Strobe::start_with_config("scalable_topic_gc_interval_secs = 0\n");
    let base = "/admin/v2/scalable/public/default/dr";
    assert_eq!(strobe.http("PUT", base, "").0, 204);
    assert_eq!(
        strobe.http("PUT", &format!("{base}/subscriptions/s"), "").0,
        204
    );
    let mut c = RawClient::handshake(strobe.port).await;
    create_producer(&mut c, 1, "segment://public/default/dr/0000-ffff-0")
        .await
        .unwrap();
    assert_eq!(produce(&mut c, 1, 0, 3).await, None);
    assert_eq!(strobe.http("POST", &format!("{base}/split/0"), "").0, 200);
    let drained = |strobe: &Strobe| {
        let (_, body) = strobe.http("GET", &format!("{base}/stats"), "");
        json(&body)["subscriptions"]["s"]["drainedSegments"].clone()
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        drained(&strobe),
        serde_json::json!([]),
        "unread, not drained"
    );
    assert_eq!(
        strobe
            .http("POST", &format!("{base}/subscriptions/s/skip-all"), "")
            .0,
        204
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while drained(&strobe) != serde_json::json!([0]) {
        assert!(
            Instant::now() < deadline,
            "not recorded: {}",
            drained(&strobe)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
