//! The client against a scripted broker: keepalive, lookup redirects,
//! reconnect with resend, send timeouts. Each test drives the broker side
//! frame by frame, so it checks exactly what the client puts on the wire.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use strobe_client::{Client, Error};
use strobe_wire::proto::{self, FeatureFlags};
use strobe_wire::{Command, Frame, FrameCodec, OutFrame, commands};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;
use tokio_util::codec::Framed;

type Conn = Framed<TcpStream, FrameCodec>;

async fn listen() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("pulsar://{}", l.local_addr().unwrap());
    (l, url)
}

async fn next(c: &mut Conn) -> Option<Frame> {
    match timeout(Duration::from_secs(5), c.next()).await {
        Ok(Some(Ok(f))) => Some(f),
        Ok(_) => None,
        Err(_) => panic!("no frame from the client within 5 s"),
    }
}

async fn send(c: &mut Conn, cmd: Command) {
    c.send(OutFrame::command(cmd)).await.unwrap();
}

/// Accepts one connection and answers its CONNECT.
async fn accept(l: &TcpListener) -> Conn {
    let (s, _) = l.accept().await.unwrap();
    let mut c = Framed::new(s, FrameCodec::default());
    let f = next(&mut c).await.unwrap();
    let Command::Connect(connect) = f.command else {
        panic!("expected CONNECT, got {:?}", f.command.kind())
    };
    assert_eq!(
        connect.protocol_version,
        Some(strobe_wire::PROTOCOL_VERSION)
    );
    send(
        &mut c,
        commands::connected("mock", 21, None, FeatureFlags::default()),
    )
    .await;
    c
}

/// Serves requests until a SEND arrives; returns the SEND (command and payload).
async fn serve_until_send(
    c: &mut Conn,
    own_url: &str,
) -> Option<(proto::CommandSend, bytes::Bytes)> {
    while let Some(f) = next(c).await {
        match f.command {
            Command::Lookup(l) => {
                send(
                    c,
                    commands::lookup_connect(l.request_id, own_url, None, false),
                )
                .await
            }
            Command::Producer(p) => {
                send(
                    c,
                    commands::producer_success(p.request_id, "mock-producer", -1, None, None, true),
                )
                .await
            }
            Command::Send(s) => return Some((s, f.payload.unwrap())),
            Command::Ping(_) => send(c, commands::pong()).await,
            _ => {}
        }
    }
    None
}

#[tokio::test]
async fn answers_pings_and_pings_when_idle_then_gives_up() {
    let (l, url) = listen().await;
    let server = tokio::spawn(async move {
        let mut c = accept(&l).await;
        send(&mut c, commands::ping()).await;
        let f = next(&mut c).await.unwrap();
        assert!(
            matches!(f.command, Command::Pong(_)),
            "PING answered with PONG"
        );
        // Stay silent: the client pings after an idle interval...
        let f = next(&mut c).await.unwrap();
        assert!(
            matches!(f.command, Command::Ping(_)),
            "client pings when idle"
        );
        // ...and closes the connection when no answer comes.
        assert!(
            next(&mut c).await.is_none(),
            "client closes a silent connection"
        );
    });
    let _client = Client::builder(&url)
        .keepalive(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn lookup_follows_redirects() {
    let (la, url_a) = listen().await;
    let (lb, url_b) = listen().await;
    let ub = url_b.clone();
    let a = tokio::spawn(async move {
        let mut c = accept(&la).await;
        while let Some(f) = next(&mut c).await {
            if let Command::Lookup(l) = f.command {
                assert_eq!(l.authoritative, Some(false));
                send(
                    &mut c,
                    commands::lookup_redirect(l.request_id, &ub, None, true),
                )
                .await;
            }
        }
    });
    let b = tokio::spawn(async move {
        let mut c = accept(&lb).await;
        // The redirected lookup is authoritative, as the redirect said.
        let f = next(&mut c).await.unwrap();
        let Command::Lookup(l) = f.command else {
            panic!("expected LOOKUP")
        };
        assert_eq!(l.authoritative, Some(true));
        send(
            &mut c,
            commands::lookup_connect(l.request_id, &url_b, None, false),
        )
        .await;
        let (s, _) = serve_until_send(&mut c, &url_b).await.unwrap();
        send(
            &mut c,
            commands::send_receipt(
                s.producer_id,
                s.sequence_id,
                s.sequence_id,
                commands::message_id(7, 3),
            ),
        )
        .await;
        let _ = next(&mut c).await;
    });
    let client = Client::builder(&url_a).build().await.unwrap();
    let p = client.producer("t").no_batching().create().await.unwrap();
    let id = p.send_and_wait("x").await.unwrap();
    assert_eq!((id.position.ledger_id, id.position.entry_id), (7, 3));
    drop(p);
    client.close().await;
    let _ = timeout(Duration::from_secs(5), b).await;
    a.abort();
}

#[tokio::test]
async fn producer_reconnects_and_resends_pending() {
    let (l, url) = listen().await;
    let u = url.clone();
    let server = tokio::spawn(async move {
        // First connection: take the SEND, then drop the connection unanswered.
        let mut c = accept(&l).await;
        let (first, payload1) = serve_until_send(&mut c, &u).await.unwrap();
        drop(c);
        // The client comes back (after a backoff), registers again and resends.
        let mut c = accept(&l).await;
        let (again, payload2) = serve_until_send(&mut c, &u).await.unwrap();
        assert_eq!(again.sequence_id, first.sequence_id);
        assert_eq!(payload1, payload2, "the same bytes are resent");
        send(
            &mut c,
            commands::send_receipt(
                again.producer_id,
                again.sequence_id,
                again.sequence_id,
                commands::message_id(1, 0),
            ),
        )
        .await;
        let _ = next(&mut c).await;
    });
    let client = Client::builder(&url).build().await.unwrap();
    let p = client.producer("t").no_batching().create().await.unwrap();
    let id = timeout(Duration::from_secs(10), p.send_and_wait("hello"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(id.position.ledger_id, 1);
    drop(p);
    client.close().await;
    let _ = timeout(Duration::from_secs(5), server).await;
}

#[tokio::test]
async fn send_times_out_without_a_receipt() {
    let (l, url) = listen().await;
    let u = url.clone();
    let server = tokio::spawn(async move {
        let mut c = accept(&l).await;
        let _ = serve_until_send(&mut c, &u).await;
        while next(&mut c).await.is_some() {}
    });
    let client = Client::builder(&url).build().await.unwrap();
    let p = client
        .producer("t")
        .no_batching()
        .send_timeout(Some(Duration::from_millis(300)))
        .create()
        .await
        .unwrap();
    let r = timeout(Duration::from_secs(5), p.send_and_wait("x"))
        .await
        .unwrap();
    assert!(matches!(r, Err(Error::Timeout(_))), "{r:?}");
    assert_eq!(p.pending(), 0, "the timed-out message gave its permit back");
    drop(p);
    client.close().await;
    server.abort();
}

#[tokio::test]
async fn batches_by_count_with_one_send_and_sequence_range() {
    let (l, url) = listen().await;
    let u = url.clone();
    let server = tokio::spawn(async move {
        let mut c = accept(&l).await;
        let (s, payload) = serve_until_send(&mut c, &u).await.unwrap();
        assert_eq!(s.num_messages, Some(5));
        assert_eq!(s.sequence_id, 0);
        assert_eq!(s.highest_sequence_id, Some(4));
        let parsed = strobe_wire::payload::parse(&payload).unwrap();
        assert!(
            parsed.checksum.is_some(),
            "the client always sends a CRC-32C"
        );
        assert_eq!(parsed.metadata.num_messages_in_batch, Some(5));
        let n = strobe_wire::batch::messages(&parsed.metadata, &parsed.payload)
            .unwrap()
            .count();
        assert_eq!(n, 5);
        send(
            &mut c,
            commands::send_receipt(s.producer_id, 0, 4, commands::message_id(2, 9)),
        )
        .await;
        let _ = next(&mut c).await;
    });
    let client = Client::builder(&url).build().await.unwrap();
    let p = client
        .producer("t")
        .batching(Duration::from_secs(10), 5, 1 << 20)
        .create()
        .await
        .unwrap();
    let mut fs = Vec::new();
    for i in 0..5 {
        fs.push(p.send(format!("m{i}")).await.unwrap());
    }
    for (i, f) in fs.into_iter().enumerate() {
        let id = timeout(Duration::from_secs(5), f).await.unwrap().unwrap();
        assert_eq!(
            (id.position.entry_id, id.batch_index, id.batch_size),
            (9, i as i32, 5)
        );
    }
    drop(p);
    client.close().await;
    let _ = timeout(Duration::from_secs(5), server).await;
}

/// Serves requests until a SUBSCRIBE arrives, answers it and returns it.
async fn serve_until_subscribe(c: &mut Conn, own_url: &str) -> proto::CommandSubscribe {
    while let Some(f) = next(c).await {
        match f.command {
            Command::Lookup(l) => {
                send(
                    c,
                    commands::lookup_connect(l.request_id, own_url, None, false),
                )
                .await
            }
            Command::Subscribe(s) => {
                send(c, commands::success(s.request_id)).await;
                return s;
            }
            _ => {}
        }
    }
    panic!("no SUBSCRIBE");
}

async fn expect_flow(c: &mut Conn) -> u32 {
    loop {
        let f = next(c).await.expect("FLOW");
        if let Command::Flow(fl) = f.command {
            return fl.message_permits;
        }
    }
}

#[tokio::test]
async fn consumer_resubscribes_after_a_dropped_connection() {
    let (l, url) = listen().await;
    let u = url.clone();
    let server = tokio::spawn(async move {
        let mut c = accept(&l).await;
        let s = serve_until_subscribe(&mut c, &u).await;
        assert_eq!(s.subscription, "sub");
        assert_eq!(
            expect_flow(&mut c).await,
            7,
            "receiver queue size as first permits"
        );
        let meta = proto::MessageMetadata {
            producer_name: "p".into(),
            sequence_id: 0,
            publish_time: 1,
            ..Default::default()
        };
        let entry = strobe_wire::payload::encode(&meta, b"one", true);
        let frame = commands::message_frame(
            s.consumer_id,
            commands::message_id(1, 0),
            0,
            vec![],
            None,
            &entry,
            false,
        )
        .unwrap();
        c.send(frame).await.unwrap();
        // Give the client time to read the message, then drop the connection.
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(c);
        let mut c = accept(&l).await;
        let again = serve_until_subscribe(&mut c, &u).await;
        assert_eq!(again.consumer_id, s.consumer_id);
        assert_eq!(expect_flow(&mut c).await, 7);
        let entry = strobe_wire::payload::encode(&meta, b"two", true);
        let frame = commands::message_frame(
            s.consumer_id,
            commands::message_id(1, 1),
            0,
            vec![],
            None,
            &entry,
            false,
        )
        .unwrap();
        c.send(frame).await.unwrap();
        while next(&mut c).await.is_some() {}
    });
    let client = Client::builder(&url).build().await.unwrap();
    let mut consumer = client
        .consumer("t", "sub")
        .receiver_queue_size(7)
        .subscribe()
        .await
        .unwrap();
    let m = consumer.recv().await.unwrap();
    assert_eq!(&m.payload[..], b"one");
    let m = timeout(Duration::from_secs(10), consumer.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"two");
    drop(consumer);
    client.close().await;
    server.abort();
}

#[tokio::test]
async fn entry_bucket_consumer_declares_the_boundaries() {
    let (l, url) = listen().await;
    let u = url.clone();
    let server = tokio::spawn(async move {
        let mut c = accept(&l).await;
        let s = serve_until_subscribe(&mut c, &u).await;
        assert_eq!(
            s.sub_type,
            proto::command_subscribe::SubType::KeyShared as i32
        );
        let ksm = s.key_shared_meta.expect("KeySharedMeta");
        assert_eq!(ksm.key_shared_mode, proto::KeySharedMode::Sticky as i32);
        assert_eq!(ksm.entry_bucket_dispatch, Some(true));
        let r: Vec<(i32, i32)> = ksm.hash_ranges.iter().map(|r| (r.start, r.end)).collect();
        assert_eq!(r, vec![(0, 32767), (32768, 65535)]);
        while next(&mut c).await.is_some() {}
    });
    let client = Client::builder(&url).build().await.unwrap();
    let consumer = client
        .consumer("t", "sub")
        .entry_bucket_dispatch(&strobe_client::equal_width_splits(2))
        .subscribe()
        .await
        .unwrap();
    drop(consumer);
    client.close().await;
    let _ = timeout(Duration::from_secs(5), server).await.unwrap();
}

#[tokio::test]
async fn watches_tc_assignments() {
    let (l, url) = listen().await;
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let mut c = Framed::new(s, FrameCodec::default());
        let _ = next(&mut c).await.unwrap();
        let flags = FeatureFlags {
            supports_tc_metadata_discovery: Some(true),
            ..Default::default()
        };
        send(&mut c, commands::connected("mock", 21, None, flags)).await;
        let f = next(&mut c).await.unwrap();
        let Command::WatchTcAssignments(w) = f.command else {
            panic!("expected the watch")
        };
        let a = |id: u64, url: &str| proto::TcAssignment {
            tc_id: id,
            broker_service_url: Some(url.into()),
            broker_service_url_tls: None,
        };
        send(
            &mut c,
            commands::watch_tc_assignments_update(
                w.watch_id,
                2,
                vec![a(0, "pulsar://a:1"), a(1, "pulsar://b:1")],
            ),
        )
        .await;
        send(
            &mut c,
            commands::watch_tc_assignments_update(
                w.watch_id,
                2,
                vec![a(0, "pulsar://b:1"), a(1, "pulsar://b:1")],
            ),
        )
        .await;
        let f = next(&mut c).await.unwrap();
        assert!(matches!(f.command, Command::WatchTcAssignmentsClose(_)));
    });
    let client = Client::builder(&url).build().await.unwrap();
    let mut w = client.watch_tc_assignments().await.unwrap();
    let (n, a) = w.next().await.unwrap();
    assert_eq!(n, 2);
    assert_eq!(a[0].url.as_deref(), Some("pulsar://a:1"));
    let (_, a) = w.next().await.unwrap();
    assert_eq!(
        a[0].url.as_deref(),
        Some("pulsar://b:1"),
        "the leader moved"
    );
    drop(w);
    timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap();
}

/// A reader asks the broker for the topic's last message only when what it
/// was told last is used up (Pulsar's `lastMessageIdInBroker`): reading a
/// backlog is not a GET_LAST_MESSAGE_ID round trip per message.
#[tokio::test]
async fn a_reader_asks_for_the_last_message_only_when_it_has_read_up_to_it() {
    let (l, url) = listen().await;
    let u = url.clone();
    let (more_tx, more_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let mut c = accept(&l).await;
        let s = serve_until_subscribe(&mut c, &u).await;
        let message = |entry_id: u64| {
            let meta = proto::MessageMetadata {
                producer_name: "p".into(),
                sequence_id: entry_id,
                publish_time: 1,
                ..Default::default()
            };
            let entry = strobe_wire::payload::encode(&meta, b"m", true);
            commands::message_frame(
                s.consumer_id,
                commands::message_id(1, entry_id),
                0,
                vec![],
                None,
                &entry,
                false,
            )
            .unwrap()
        };
        let mut asked = 0;
        let mut more_rx = Some(more_rx);
        while let Some(f) = next(&mut c).await {
            let Command::GetLastMessageId(g) = f.command else {
                continue;
            };
            asked += 1;
            send(
                &mut c,
                commands::get_last_message_id_response(
                    g.request_id,
                    commands::message_id(1, 2),
                    None,
                ),
            )
            .await;
            if asked == 1 {
                c.send(message(0)).await.unwrap();
                // The rest only once the reader said more is there with its
                // queue empty: that answer cannot have come from the queue.
                more_rx.take().unwrap().await.unwrap();
                c.send(message(1)).await.unwrap();
                c.send(message(2)).await.unwrap();
            } else {
                break;
            }
        }
        asked
    });
    let client = Client::builder(&url).build().await.unwrap();
    let mut reader = client.reader("t").start_earliest().create().await.unwrap();
    assert!(reader.has_message_available().await.unwrap());
    reader.recv().await.unwrap();
    let more = timeout(Duration::from_secs(5), reader.has_message_available())
        .await
        .expect("answered from what the broker said before, without asking again")
        .unwrap();
    assert!(more, "(1,2) is the last and (1,0) was read");
    more_tx.send(()).unwrap();
    reader.recv().await.unwrap();
    reader.recv().await.unwrap();
    // Read up to what the broker said: now it is asked again.
    let more = timeout(Duration::from_secs(5), reader.has_message_available())
        .await
        .unwrap()
        .unwrap();
    assert!(!more, "(1,2) was the last and it was read");
    let asked = timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(asked, 2, "asked once at the start and once at the end");
    client.close().await;
}
