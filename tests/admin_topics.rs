//! Topic lifecycle through the admin API, seen from a raw protocol client:
//! terminate (producers closed and refused, consumers told REACHED_END_OF_TOPIC,
//! the state survives a restart) and delete (refused while clients are
//! connected, the data gone afterwards).

mod common;

use std::time::Duration;

use common::{RawClient, Strobe};
use strobe_wire::proto::command_subscribe::SubType;
use strobe_wire::proto::{MessageMetadata, ServerError};
use strobe_wire::{Command as Cmd, Frame, commands, payload};

const TOPIC: &str = "persistent://public/default/lifecycle";

async fn produce(c: &mut RawClient, producer_id: u64, n: u64) {
    for seq in 0..n {
        let meta = MessageMetadata {
            producer_name: format!("p{producer_id}"),
            sequence_id: seq,
            publish_time: 1,
            ..Default::default()
        };
        c.send_frame(commands::send_frame(
            producer_id,
            seq,
            1,
            payload::encode(&meta, format!("m{seq}").as_bytes(), true),
        ))
        .await;
        match c.recv().await {
            Some(Frame {
                command: Cmd::SendReceipt(_),
                ..
            }) => {}
            other => panic!("expected a receipt, got {other:?}"),
        }
    }
}

async fn expect<F: Fn(&Cmd) -> bool>(c: &mut RawClient, what: &str, f: F) -> Vec<Frame> {
    let mut seen = Vec::new();
    loop {
        match c.recv_within(Duration::from_secs(10)).await {
            Ok(Some(frame)) => {
                let hit = f(&frame.command);
                seen.push(frame);
                if hit {
                    return seen;
                }
            }
            other => panic!("no {what}: {other:?} after {seen:?}"),
        }
    }
}

#[tokio::test]
async fn terminate_closes_producers_and_tells_consumers_the_end() {
    let mut strobe = Strobe::start();
    let mut c = RawClient::handshake(strobe.port).await;
    c.send(commands::producer(1, 1, TOPIC, Some("p1"))).await;
    expect(&mut c, "PRODUCER_SUCCESS", |f| {
        matches!(f, Cmd::ProducerSuccess(_))
    })
    .await;
    produce(&mut c, 1, 3).await;
    let mut sub = commands::subscribe(2, 5, TOPIC, "s", SubType::Exclusive);
    sub.initial_position =
        Some(strobe_wire::proto::command_subscribe::InitialPosition::Earliest as i32);
    c.send(Cmd::Subscribe(sub)).await;
    expect(&mut c, "SUCCESS", |f| matches!(f, Cmd::Success(_))).await;
    c.send(commands::flow(5, 100)).await;

    let (status, body) = strobe.http(
        "POST",
        "/admin/v2/persistent/public/default/lifecycle/terminate",
        "",
    );
    assert_eq!(status, 200, "{body}");
    let id: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(id["entryId"], 2, "the last of three messages: {body}");

    // The producer is closed by the broker; the consumer gets its three
    // messages and then REACHED_END_OF_TOPIC.
    let frames = expect(
        &mut c,
        "REACHED_END_OF_TOPIC",
        |f| matches!(f, Cmd::ReachedEndOfTopic(r) if r.consumer_id == 5),
    )
    .await;
    let messages = frames
        .iter()
        .filter(|f| matches!(f.command, Cmd::Message(_)))
        .count();
    assert_eq!(messages, 3, "{frames:?}");
    assert!(
        frames
            .iter()
            .any(|f| matches!(&f.command, Cmd::CloseProducer(p) if p.producer_id == 1)),
        "{frames:?}"
    );

    // A new producer is refused with TopicTerminatedError.
    c.send(commands::producer(3, 2, TOPIC, None)).await;
    let frames = expect(&mut c, "ERROR", |f| matches!(f, Cmd::Error(_))).await;
    let Some(Cmd::Error(e)) = frames.last().map(|f| &f.command) else {
        unreachable!()
    };
    assert_eq!(
        e.error(),
        ServerError::TopicTerminatedError,
        "{}",
        e.message
    );

    // Still terminated after a restart.
    drop(c);
    strobe.signal("TERM");
    assert_eq!(strobe.wait_exit(Duration::from_secs(10)), Some(0));
    strobe.restart();
    let strobe2 = &strobe;
    let mut c = RawClient::handshake(strobe2.port).await;
    c.send(commands::producer(1, 1, TOPIC, None)).await;
    let frames = expect(&mut c, "ERROR", |f| matches!(f, Cmd::Error(_))).await;
    let Some(Cmd::Error(e)) = frames.last().map(|f| &f.command) else {
        unreachable!()
    };
    assert_eq!(
        e.error(),
        ServerError::TopicTerminatedError,
        "{}",
        e.message
    );
    let (_, stats) = strobe2.http(
        "GET",
        "/admin/v2/persistent/public/default/lifecycle/internalStats",
        "",
    );
    assert!(stats.contains("\"state\":\"Terminated\""), "{stats}");
}

#[tokio::test]
async fn delete_is_refused_while_connected_and_removes_the_data() {
    let strobe = Strobe::start();
    let path = "/admin/v2/persistent/public/default/doomed";
    let topic = "persistent://public/default/doomed";
    let mut c = RawClient::handshake(strobe.port).await;
    c.send(commands::producer(1, 1, topic, Some("p1"))).await;
    expect(&mut c, "PRODUCER_SUCCESS", |f| {
        matches!(f, Cmd::ProducerSuccess(_))
    })
    .await;
    produce(&mut c, 1, 5).await;
    c.send(Cmd::Subscribe(commands::subscribe(
        2,
        5,
        topic,
        "keep",
        SubType::Shared,
    )))
    .await;
    expect(&mut c, "SUCCESS", |f| matches!(f, Cmd::Success(_))).await;

    let (status, body) = strobe.http("DELETE", path, "");
    assert_eq!(status, 412, "{body}");
    let (status, body) = strobe.http("DELETE", &format!("{path}?force=true"), "");
    assert_eq!(status, 204, "{body}");
    let frames = expect(&mut c, "CLOSE_CONSUMER", |f| {
        matches!(f, Cmd::CloseConsumer(_))
    })
    .await;
    assert!(
        frames
            .iter()
            .any(|f| matches!(f.command, Cmd::CloseProducer(_)))
            || matches!(
                c.recv_within(Duration::from_secs(5)).await,
                Ok(Some(Frame {
                    command: Cmd::CloseProducer(_),
                    ..
                }))
            ),
        "the producer is closed too: {frames:?}"
    );
    let (_, list) = strobe.http("GET", "/admin/v2/persistent/public/default", "");
    assert!(!list.contains("doomed"), "{list}");
    assert_eq!(strobe.http("DELETE", path, "").0, 404);

    // Created again, the topic is empty and has no subscriptions.
    let mut c = RawClient::handshake(strobe.port).await;
    let mut sub = commands::subscribe(3, 6, topic, "fresh", SubType::Shared);
    sub.initial_position =
        Some(strobe_wire::proto::command_subscribe::InitialPosition::Earliest as i32);
    c.send(Cmd::Subscribe(sub)).await;
    expect(&mut c, "SUCCESS", |f| matches!(f, Cmd::Success(_))).await;
    c.send(commands::flow(6, 100)).await;
    assert!(
        matches!(c.recv_within(Duration::from_millis(500)).await, Err(())),
        "no message may survive the delete"
    );
    let (_, subs) = strobe.http("GET", &format!("{path}/subscriptions"), "");
    assert_eq!(subs, "[\"fresh\"]");
}

#[tokio::test]
async fn read_compacted_is_refused_on_shared_subscriptions() {
    let strobe = Strobe::start();
    let mut c = RawClient::handshake(strobe.port).await;
    for (i, t) in [SubType::Shared, SubType::KeyShared, SubType::Failover]
        .into_iter()
        .enumerate()
    {
        let mut sub = commands::subscribe(i as u64, i as u64, TOPIC, &format!("s{i}"), t);
        sub.read_compacted = Some(true);
        c.send(Cmd::Subscribe(sub)).await;
        let mut f = c.recv().await.expect("an answer");
        while matches!(f.command, Cmd::ActiveConsumerChange(_)) {
            f = c.recv().await.expect("an answer");
        }
        match (t, &f.command) {
            (SubType::Failover, Cmd::Success(_)) => {}
            (SubType::Failover, other) => panic!("failover + read_compacted refused: {other:?}"),
            (_, Cmd::Error(e)) => {
                assert_eq!(e.error(), ServerError::NotAllowedError, "{}", e.message)
            }
            (_, other) => panic!("{t:?} + read_compacted accepted: {other:?}"),
        }
    }
}
