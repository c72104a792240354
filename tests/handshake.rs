//! The real `strobe` binary: handshake, keep-alive, protocol errors, shutdown and
//! the command line.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{RawClient, Strobe};
use strobe_wire::proto::{MessageMetadata, ServerError};
use strobe_wire::{Command as Cmd, Frame, commands, payload};

#[tokio::test]
async fn connect_negotiates_version_and_limits() {
    let strobe = Strobe::start();
    let mut c = RawClient::connect(strobe.port).await;
    let mut connect = commands::connect("strobe-test", None);
    if let Cmd::Connect(ref mut cc) = connect {
        cc.protocol_version = Some(15);
    }
    c.send(connect).await;
    let Some(Frame {
        command: Cmd::Connected(ok),
        ..
    }) = c.recv().await
    else {
        panic!("no CONNECTED")
    };
    assert_eq!(ok.protocol_version, Some(15), "min(client, server)");
    assert_eq!(ok.max_message_size, Some(5 * 1024 * 1024));
    assert!(ok.server_version.starts_with("Strobe "));

    let mut c = RawClient::handshake(strobe.port).await;
    c.send(commands::ping()).await;
    assert!(matches!(
        c.recv().await,
        Some(Frame {
            command: Cmd::Pong(_),
            ..
        })
    ));
}

#[tokio::test]
async fn send_before_connect_is_refused_and_closed() {
    let strobe = Strobe::start();
    let mut c = RawClient::connect(strobe.port).await;
    let meta = MessageMetadata {
        producer_name: "p".into(),
        ..Default::default()
    };
    c.send_frame(commands::send_frame(
        1,
        1,
        1,
        payload::encode(&meta, b"x", true),
    ))
    .await;
    let frames = c.expect_closed(Duration::from_secs(5)).await;
    let Some(Frame {
        command: Cmd::Error(e),
        ..
    }) = frames.first()
    else {
        panic!("no ERROR: {frames:?}")
    };
    assert_eq!(e.error(), ServerError::NotAllowedError);
    assert!(e.message.contains("before the CONNECT"), "{}", e.message);
}

#[tokio::test]
async fn frame_over_the_limit_closes_only_that_connection() {
    let strobe = Strobe::start();
    let mut bystander = RawClient::handshake(strobe.port).await;
    let mut c = RawClient::handshake(strobe.port).await;
    let declared: u32 = 64 * 1024 * 1024;
    c.send_raw(&declared.to_be_bytes()).await;
    let frames = c.expect_closed(Duration::from_secs(5)).await;
    let Some(Frame {
        command: Cmd::Error(e),
        ..
    }) = frames.first()
    else {
        panic!("no ERROR: {frames:?}")
    };
    assert_eq!(e.error(), ServerError::NotAllowedError);
    assert!(e.message.contains("exceeds the limit"), "{}", e.message);
    // The broker and its other clients carry on.
    bystander.send(commands::ping()).await;
    assert!(matches!(
        bystander.recv().await,
        Some(Frame {
            command: Cmd::Pong(_),
            ..
        })
    ));
    RawClient::handshake(strobe.port).await;
}

#[tokio::test]
async fn garbage_closes_the_connection_not_the_broker() {
    let strobe = Strobe::start();
    for junk in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        &[0, 0, 0, 8, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff][..],
        &[0, 0, 0, 2, 1, 2][..],
    ] {
        let mut c = RawClient::connect(strobe.port).await;
        c.send_raw(junk).await;
        c.expect_closed(Duration::from_secs(5)).await;
    }
    RawClient::handshake(strobe.port).await;
}

#[tokio::test]
async fn unsupported_requests_get_an_error_not_silence() {
    let strobe = Strobe::start();
    let mut c = RawClient::handshake(strobe.port).await;
    c.send(Cmd::GetSchema(strobe_wire::proto::CommandGetSchema {
        request_id: 7,
        topic: "persistent://public/default/t".into(),
        schema_version: None,
    }))
    .await;
    let Some(Frame {
        command: Cmd::GetSchemaResponse(r),
        ..
    }) = c.recv().await
    else {
        panic!("no GET_SCHEMA_RESPONSE")
    };
    assert_eq!(r.request_id, 7);
    assert!(r.error_code.is_some() && r.error_message.is_some());
    // A broker-to-broker command of Pulsar's coordinator: ours learn outcomes from the
    // metadata store, so it is refused, in ERROR's shape.
    c.send(Cmd::EndTxnOnPartition(
        strobe_wire::proto::CommandEndTxnOnPartition {
            request_id: 8,
            ..Default::default()
        },
    ))
    .await;
    let Some(Frame {
        command: Cmd::Error(e),
        ..
    }) = c.recv().await
    else {
        panic!("no ERROR")
    };
    assert_eq!(e.request_id, 8);
}

#[tokio::test]
async fn silent_clients_are_pinged_then_dropped() {
    let strobe = Strobe::start_with_config("keepalive_interval_secs = 1\n");
    let mut lively = RawClient::handshake(strobe.port).await;
    let mut silent = RawClient::handshake(strobe.port).await;
    // The silent one gets a PING and, not answering, is closed within ~3 intervals,
    // while the lively one answers every PING and stays.
    let silent_closed = async {
        let frames = silent.expect_closed(Duration::from_secs(6)).await;
        assert!(
            frames.iter().any(|f| matches!(f.command, Cmd::Ping(_))),
            "{frames:?}"
        );
    };
    let lively_stays = async {
        let mut pings = 0;
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < until {
            match lively.recv_within(Duration::from_millis(200)).await {
                Ok(Some(Frame {
                    command: Cmd::Ping(_),
                    ..
                })) => {
                    pings += 1;
                    lively.send(commands::pong()).await;
                }
                Ok(Some(other)) => panic!("unexpected {other:?}"),
                Ok(None) => panic!("a client that answers PINGs was disconnected"),
                Err(()) => {}
            }
        }
        assert!(pings >= 1, "an idle client is pinged");
    };
    tokio::join!(silent_closed, lively_stays);
}

#[tokio::test]
async fn no_connect_within_the_handshake_timeout_is_closed() {
    let strobe = Strobe::start_with_config("handshake_timeout_secs = 1\n");
    let mut c = RawClient::connect(strobe.port).await;
    c.expect_closed(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn sigterm_and_sigint_shut_down_cleanly() {
    for sig in ["TERM", "INT"] {
        let mut strobe = Strobe::start();
        let mut c = RawClient::handshake(strobe.port).await;
        strobe.signal(sig);
        c.expect_closed(Duration::from_secs(10)).await;
        assert_eq!(
            strobe.wait_exit(Duration::from_secs(10)),
            Some(0),
            "{}",
            strobe.log_text()
        );
    }
}

#[test]
fn command_line_reads_well() {
    let out = Command::new(env!("CARGO_BIN_EXE_strobe"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("strobe {}", env!("CARGO_PKG_VERSION"))
    );
    let out = Command::new(env!("CARGO_BIN_EXE_strobe"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for word in ["standalone", "broker", "Pulsar"] {
        assert!(help.contains(word), "--help lacks {word}: {help}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_strobe"))
        .args(["standalone", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--data-dir",
        "--broker-port",
        "--http-port",
        "--advertised-address",
        "--config",
    ] {
        assert!(
            help.contains(flag),
            "standalone --help lacks {flag}: {help}"
        );
    }
}

#[test]
fn bad_config_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "brokr_port = 1\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_strobe"))
        .args(["standalone", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("brokr_port"), "{err}");
}

#[cfg(not(feature = "cluster"))]
#[test]
fn broker_without_the_cluster_build_names_the_fix() {
    let out = Command::new(env!("CARGO_BIN_EXE_strobe"))
        .args([
            "broker",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/cluster.toml"),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--features cluster") && err.contains("protobuf-compiler"),
        "{err}"
    );
}

#[tokio::test]
async fn shutdown_closes_producers_and_consumers_before_the_connection() {
    let mut strobe = Strobe::start();
    let mut c = RawClient::handshake(strobe.port).await;
    c.send(commands::producer(
        1,
        7,
        "persistent://public/default/shutdown-raw",
        None,
    ))
    .await;
    let Some(Frame {
        command: Cmd::ProducerSuccess(_),
        ..
    }) = c.recv().await
    else {
        panic!("no PRODUCER_SUCCESS")
    };
    c.send(Cmd::Subscribe(commands::subscribe(
        2,
        9,
        "persistent://public/default/shutdown-raw",
        "s",
        strobe_wire::proto::command_subscribe::SubType::Shared,
    )))
    .await;
    let Some(Frame {
        command: Cmd::Success(_),
        ..
    }) = c.recv().await
    else {
        panic!("no SUCCESS")
    };
    strobe.signal("TERM");
    let frames = c.expect_closed(Duration::from_secs(10)).await;
    assert!(
        frames
            .iter()
            .any(|f| matches!(&f.command, Cmd::CloseProducer(p) if p.producer_id == 7)),
        "{frames:?}"
    );
    assert!(
        frames
            .iter()
            .any(|f| matches!(&f.command, Cmd::CloseConsumer(k) if k.consumer_id == 9)),
        "{frames:?}"
    );
    assert_eq!(strobe.wait_exit(Duration::from_secs(10)), Some(0));
}

#[tokio::test]
async fn ack_receipts_and_consumer_stats() {
    use strobe_wire::proto::{CommandConsumerStats, command_subscribe::SubType};
    let strobe = Strobe::start();
    let topic = "persistent://public/default/ack-receipts";
    let mut c = RawClient::handshake(strobe.port).await;
    c.send(Cmd::Subscribe(commands::subscribe(
        1,
        5,
        topic,
        "s",
        SubType::Shared,
    )))
    .await;
    assert!(matches!(
        c.recv().await,
        Some(Frame {
            command: Cmd::Success(_),
            ..
        })
    ));
    c.send(commands::producer(2, 3, topic, Some("p"))).await;
    assert!(matches!(
        c.recv().await,
        Some(Frame {
            command: Cmd::ProducerSuccess(_),
            ..
        })
    ));
    let meta = MessageMetadata {
        producer_name: "p".into(),
        sequence_id: 0,
        publish_time: 1,
        ..Default::default()
    };
    c.send_frame(commands::send_frame(
        3,
        0,
        1,
        payload::encode(&meta, b"hello", false),
    ))
    .await;
    let Some(Frame {
        command: Cmd::SendReceipt(r),
        ..
    }) = c.recv().await
    else {
        panic!("no receipt")
    };
    let id = r.message_id.expect("the receipt names the position");
    c.send(commands::flow(5, 10)).await;
    let Some(Frame {
        command: Cmd::Message(m),
        payload: Some(p),
    }) = c.recv().await
    else {
        panic!("no MESSAGE")
    };
    assert_eq!(
        (m.message_id.ledger_id, m.message_id.entry_id),
        (id.ledger_id, id.entry_id)
    );
    // Stored without a checksum by the producer, delivered with one.
    assert!(payload::has_checksum(&p));
    c.send(Cmd::ConsumerStats(CommandConsumerStats {
        request_id: 9,
        consumer_id: 5,
    }))
    .await;
    let Some(Frame {
        command: Cmd::ConsumerStatsResponse(st),
        ..
    }) = c.recv().await
    else {
        panic!("no stats")
    };
    assert_eq!(st.request_id, 9);
    assert_eq!(st.unacked_messages, Some(1));
    assert_eq!(st.r#type.as_deref(), Some("Shared"));
    c.send(commands::ack(
        5,
        false,
        vec![commands::message_id(id.ledger_id, id.entry_id)],
        Some(11),
    ))
    .await;
    let Some(Frame {
        command: Cmd::AckResponse(a),
        ..
    }) = c.recv().await
    else {
        panic!("no ACK_RESPONSE")
    };
    assert_eq!((a.consumer_id, a.request_id, a.error), (5, Some(11), None));
    // An ack for a consumer that does not exist gets an error receipt, not silence.
    c.send(commands::ack(
        77,
        false,
        vec![commands::message_id(1, 1)],
        Some(12),
    ))
    .await;
    let Some(Frame {
        command: Cmd::AckResponse(a),
        ..
    }) = c.recv().await
    else {
        panic!("no ACK_RESPONSE")
    };
    assert_eq!(a.error, Some(ServerError::ConsumerNotFound as i32));
}

/// SENDs that arrive in one read are stored as one append batch (one wake-up
/// of the group commit): each is still answered, in order, with positions in
/// order, also across a PING between them (answered at once, receipts only
/// once durable) and past the batch's size bound;
/// a SEND for an unknown producer in the middle of a run is refused, closes
/// the connection, and what followed it in the run is not stored.
#[tokio::test]
async fn sends_in_one_write_are_each_answered_in_order() {
    let strobe = Strobe::start();
    let topic = "persistent://public/default/send-runs";
    let mut c = RawClient::handshake(strobe.port).await;
    c.send(commands::producer(1, 7, topic, Some("p"))).await;
    assert!(matches!(
        c.recv().await,
        Some(Frame {
            command: Cmd::ProducerSuccess(_),
            ..
        })
    ));
    let send = |seq: u64, producer: u64| {
        let meta = MessageMetadata {
            producer_name: "p".into(),
            sequence_id: seq,
            publish_time: 1,
            ..Default::default()
        };
        commands::send_frame(producer, seq, 1, payload::encode(&meta, b"m", false)).to_bytes()
    };
    // 150 SENDs (more than one batch's bound) with a PING after the 100th.
    let mut bytes = Vec::new();
    for seq in 0..150u64 {
        bytes.extend_from_slice(&send(seq, 7));
        if seq == 99 {
            bytes.extend_from_slice(&strobe_wire::OutFrame::command(commands::ping()).to_bytes());
        }
    }
    c.send_raw(&bytes).await;
    let mut last = None;
    let (mut receipts, mut pongs) = (0u64, 0);
    while receipts < 150 {
        match c.recv().await {
            Some(Frame {
                command: Cmd::SendReceipt(r),
                ..
            }) => {
                assert_eq!(r.sequence_id, receipts, "receipts in order");
                let id = r.message_id.expect("a position");
                let pos = (id.ledger_id, id.entry_id);
                assert!(
                    last < Some(pos),
                    "positions in order: {last:?} then {pos:?}"
                );
                last = Some(pos);
                receipts += 1;
            }
            Some(Frame {
                command: Cmd::Pong(_),
                ..
            }) => pongs += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(pongs, 1);

    // SENDs and then CLOSE_PRODUCER in one write: the close is handled after
    // the run is stored and answered, so every receipt comes before its
    // SUCCESS (handled first, it would leave the run without receipts).
    let mut bytes = Vec::new();
    for seq in 150..170u64 {
        bytes.extend_from_slice(&send(seq, 7));
    }
    let close = strobe_wire::proto::CommandCloseProducer {
        producer_id: 7,
        request_id: 8,
        ..Default::default()
    };
    bytes.extend_from_slice(&strobe_wire::OutFrame::command(close).to_bytes());
    c.send_raw(&bytes).await;
    let mut receipts = 150u64;
    loop {
        match c.recv().await {
            Some(Frame {
                command: Cmd::SendReceipt(r),
                ..
            }) => {
                assert_eq!(r.sequence_id, receipts, "receipts in order");
                receipts += 1;
            }
            Some(Frame {
                command: Cmd::Success(s),
                ..
            }) => {
                assert_eq!(s.request_id, 8);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(receipts, 170, "every SEND before the close answered first");

    // An unknown producer in the middle of a run.
    c.send(commands::producer(9, 8, topic, Some("p2"))).await;
    assert!(matches!(
        c.recv().await,
        Some(Frame {
            command: Cmd::ProducerSuccess(_),
            ..
        })
    ));
    let mut bytes = send(170, 8).to_vec();
    bytes.extend_from_slice(&send(171, 99));
    bytes.extend_from_slice(&send(172, 8));
    c.send_raw(&bytes).await;
    let frames = c.expect_closed(Duration::from_secs(5)).await;
    let receipts: Vec<u64> = frames
        .iter()
        .filter_map(|f| match &f.command {
            Cmd::SendReceipt(r) => Some(r.sequence_id),
            _ => None,
        })
        .collect();
    assert_eq!(receipts, vec![170], "{frames:?}");
    let Some(Frame {
        command: Cmd::SendError(e),
        ..
    }) = frames
        .iter()
        .find(|f| matches!(f.command, Cmd::SendError(_)))
    else {
        panic!("no SEND_ERROR: {frames:?}")
    };
    assert_eq!((e.producer_id, e.sequence_id), (99, 171));
    assert_eq!(e.error(), ServerError::NotAllowedError);
    // 171 SENDs stored, not 172: the one after the refused SEND was dropped.
    let (code, body) = strobe.http(
        "GET",
        "/admin/v2/persistent/public/default/send-runs/internalStats",
        "",
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"numberOfEntries\":171"), "{body}");
}
