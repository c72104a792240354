//! The broker sends CLOSE_PRODUCER / CLOSE_CONSUMER only for handles the client
//! holds: never for one the client closed itself or was refused. (The C++ client
//! logs "Got invalid producer Id in closeProducer command" for a stray one, and
//! reconnects a consumer on one; with PIP-307 these frames carry a destination.)

mod common;

use std::time::Duration;

use common::{RawClient, Strobe};
use strobe_wire::proto::{ProducerAccessMode, ServerError, command_subscribe::SubType};
use strobe_wire::{Command as Cmd, Frame, commands};

/// Every frame the broker sends within `d`; none may be a close.
async fn no_close_within(c: &mut RawClient, d: Duration, what: &str) {
    let deadline = tokio::time::Instant::now() + d;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match c.recv_within(left).await {
            Err(()) => return,
            Ok(None) => panic!("{what}: the broker closed the connection"),
            Ok(Some(Frame {
                command: cmd @ (Cmd::CloseProducer(_) | Cmd::CloseConsumer(_)),
                ..
            })) => panic!("{what}: a stray {cmd:?}"),
            Ok(Some(_)) => {}
        }
    }
}

fn producer(rid: u64, pid: u64, topic: &str, mode: ProducerAccessMode) -> Cmd {
    let mut cmd = commands::producer(rid, pid, topic, None);
    if let Cmd::Producer(ref mut p) = cmd {
        p.set_producer_access_mode(mode);
    }
    cmd
}

async fn expect_success(c: &mut RawClient, rid: u64) {
    match c.recv().await {
        Some(Frame {
            command: Cmd::Success(s),
            ..
        }) if s.request_id == rid => {}
        other => panic!("expected SUCCESS for request {rid}, got {other:?}"),
    }
}

async fn expect_error(c: &mut RawClient, rid: u64, code: ServerError) {
    match c.recv().await {
        Some(Frame {
            command: Cmd::Error(e),
            ..
        }) if e.request_id == rid => assert_eq!(e.error(), code, "{}", e.message),
        other => panic!("expected ERROR {code:?} for request {rid}, got {other:?}"),
    }
}

async fn expect_producer_success(c: &mut RawClient, rid: u64, ready: bool) {
    match c.recv().await {
        Some(Frame {
            command: Cmd::ProducerSuccess(s),
            ..
        }) if s.request_id == rid => {
            assert_eq!(s.producer_ready.unwrap_or(true), ready, "{s:?}")
        }
        other => panic!("expected PRODUCER_SUCCESS for request {rid}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_waiting_producer_closed_by_its_client_gets_no_close() {
    let strobe = Strobe::start();
    let mut c = RawClient::handshake(strobe.port).await;
    let topic = "persistent://public/default/stray-wait-for-exclusive";
    c.send(producer(1, 1, topic, ProducerAccessMode::Exclusive))
        .await;
    expect_producer_success(&mut c, 1, true).await;
    c.send(producer(2, 2, topic, ProducerAccessMode::WaitForExclusive))
        .await;
    expect_producer_success(&mut c, 2, false).await;
    // The client gives up waiting: its producer 2 is gone.
    c.send(commands::close_producer_request(3, 2)).await;
    expect_success(&mut c, 3).await;
    no_close_within(
        &mut c,
        Duration::from_millis(500),
        "after closing the waiter",
    )
    .await;
    // The exclusive producer leaves; nobody is waiting any more.
    c.send(commands::close_producer_request(4, 1)).await;
    expect_success(&mut c, 4).await;
    no_close_within(
        &mut c,
        Duration::from_millis(500),
        "after closing the owner",
    )
    .await;
}

#[tokio::test]
async fn a_refused_producer_gets_no_close() {
    let strobe = Strobe::start();
    let mut c = RawClient::handshake(strobe.port).await;
    let topic = "persistent://public/default/stray-refused-producer";
    c.send(producer(1, 1, topic, ProducerAccessMode::Exclusive))
        .await;
    expect_producer_success(&mut c, 1, true).await;
    c.send(producer(2, 2, topic, ProducerAccessMode::Shared))
        .await;
    expect_error(&mut c, 2, ServerError::ProducerFenced).await;
    // As the C++ client does after a failed PRODUCER: close it on the broker too.
    c.send(commands::close_producer_request(3, 2)).await;
    expect_success(&mut c, 3).await;
    // A hostile topic name: refused, closed by the client, never closed by the broker.
    c.send(producer(
        4,
        3,
        "persistent://public/default/bad\"name\nx",
        ProducerAccessMode::Shared,
    ))
    .await;
    // Refused as a name, not as a metadata error the client would retry.
    expect_error(&mut c, 4, ServerError::InvalidTopicName).await;
    c.send(commands::close_producer_request(5, 3)).await;
    expect_success(&mut c, 5).await;
    no_close_within(
        &mut c,
        Duration::from_millis(500),
        "after refused producers",
    )
    .await;
    c.send(commands::close_producer_request(6, 1)).await;
    expect_success(&mut c, 6).await;
    no_close_within(&mut c, Duration::from_millis(300), "after the last close").await;
}

#[tokio::test]
async fn a_refused_exclusive_subscriber_closes_nobody() {
    let strobe = Strobe::start();
    let mut c = RawClient::handshake(strobe.port).await;
    let topic = "persistent://public/default/stray-exclusive";
    c.send(commands::subscribe(1, 0, topic, "sub", SubType::Exclusive).into())
        .await;
    expect_success(&mut c, 1).await;
    for (rid, cid, kind) in [(2, 1, SubType::Exclusive), (4, 2, SubType::Shared)] {
        c.send(commands::subscribe(rid, cid, topic, "sub", kind).into())
            .await;
        expect_error(&mut c, rid, ServerError::ConsumerBusy).await;
        // The C++ client closes a consumer whose SUBSCRIBE failed.
        c.send(commands::close_consumer_request(rid + 1, cid)).await;
        expect_success(&mut c, rid + 1).await;
    }
    no_close_within(
        &mut c,
        Duration::from_millis(700),
        "after refused subscribers",
    )
    .await;
    c.send(commands::close_consumer_request(9, 0)).await;
    expect_success(&mut c, 9).await;
    no_close_within(&mut c, Duration::from_millis(300), "after the last close").await;
}

/// A PRODUCER or SUBSCRIBE repeated with an id the connection already holds
/// for the same topic (the client's first request timed out and its answer
/// came late) gets the handle there is, as from Pulsar's broker; a refusal
/// would fail every retry for as long as the connection lives (the fault
/// campaign's transformers never produced again). The same id for another
/// topic stays refused.
#[tokio::test]
async fn a_repeated_producer_or_subscribe_gets_the_handle_there_is() {
    let strobe = Strobe::start();
    let mut c = RawClient::handshake(strobe.port).await;
    let topic = "persistent://public/default/repeated-create";
    c.send(producer(1, 7, topic, ProducerAccessMode::Shared))
        .await;
    expect_producer_success(&mut c, 1, true).await;
    c.send(producer(2, 7, topic, ProducerAccessMode::Shared))
        .await;
    expect_producer_success(&mut c, 2, true).await;
    c.send(producer(
        3,
        7,
        "persistent://public/default/another",
        ProducerAccessMode::Shared,
    ))
    .await;
    expect_error(&mut c, 3, ServerError::ProducerBusy).await;

    c.send(commands::subscribe(4, 9, topic, "sub", SubType::Exclusive).into())
        .await;
    expect_success(&mut c, 4).await;
    c.send(commands::subscribe(5, 9, topic, "sub", SubType::Exclusive).into())
        .await;
    expect_success(&mut c, 5).await;
    c.send(commands::subscribe(6, 9, topic, "other", SubType::Exclusive).into())
        .await;
    expect_error(&mut c, 6, ServerError::ConsumerBusy).await;
    // The one producer and the one consumer are still whole: closing each
    // works once.
    c.send(commands::close_producer_request(7, 7)).await;
    expect_success(&mut c, 7).await;
    c.send(commands::close_consumer_request(8, 9)).await;
    expect_success(&mut c, 8).await;
    no_close_within(&mut c, Duration::from_millis(300), "after the closes").await;
}
