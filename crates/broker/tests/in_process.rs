//! ServerCnx, the topic service and the subscription actors tested in
//! process: each test binds `127.0.0.1:0`, hands the bound listener to the
//! broker (no port is guessed, so tests never race for one) and talks to it
//! with raw frames or Strobe's own client.

use std::time::Duration;

mod common;

use common::{Raw, start_server};
use futures::StreamExt;
use strobe_broker::BrokerHandle;
use strobe_client::{Client, SubType};
use strobe_wire::proto::{ServerError, command_lookup_topic_response, command_subscribe};
use strobe_wire::{Command, commands};
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn a_command_before_connect_is_refused_and_the_connection_closes() {
    let broker = start_server(|_| {}).await;
    let mut raw = Raw::connect(&broker).await;
    raw.send(commands::lookup_topic(
        7,
        "persistent://public/default/t",
        false,
    ))
    .await;
    match raw.recv().await {
        Some(Command::Error(e)) => {
            assert_eq!(e.request_id, 7);
            assert_eq!(e.error(), ServerError::NotAllowedError);
        }
        other => panic!("expected ERROR, got {other:?}"),
    }
    assert!(raw.recv().await.is_none(), "the connection closes");
    broker.shutdown().await;
}

#[tokio::test]
async fn errors_come_back_in_the_reply_shape_of_the_request() {
    let broker = start_server(|_| {}).await;
    let mut raw = Raw::handshake(&broker).await;

    // LOOKUP answers with a failed LOOKUP_RESPONSE, not a bare ERROR.
    raw.send(commands::lookup_topic(1, "persistent://bad name", false))
        .await;
    match raw.recv().await {
        Some(Command::LookupResponse(r)) => {
            assert_eq!(r.request_id, 1);
            assert_eq!(
                r.response(),
                command_lookup_topic_response::LookupType::Failed
            );
            assert_eq!(r.error(), ServerError::InvalidTopicName);
        }
        other => panic!("expected LOOKUP_RESPONSE, got {other:?}"),
    }

    // A lookup of a topic in a namespace that does not exist.
    raw.send(commands::lookup_topic(2, "persistent://nope/nope/t", false))
        .await;
    match raw.recv().await {
        Some(Command::LookupResponse(r)) => assert_eq!(r.error(), ServerError::TopicNotFound),
        other => panic!("expected LOOKUP_RESPONSE, got {other:?}"),
    }

    // A good lookup answers Connect with this broker's URL.
    raw.send(commands::lookup_topic(
        3,
        "persistent://public/default/t",
        false,
    ))
    .await;
    match raw.recv().await {
        Some(Command::LookupResponse(r)) => {
            assert_eq!(
                r.response(),
                command_lookup_topic_response::LookupType::Connect
            );
            let url = format!("pulsar://127.0.0.1:{}", broker.addr().port());
            assert_eq!(r.broker_service_url.as_deref(), Some(url.as_str()));
        }
        other => panic!("expected LOOKUP_RESPONSE, got {other:?}"),
    }

    // PARTITIONED_METADATA of a bad name: a failed PARTITIONED_METADATA_RESPONSE.
    raw.send(commands::partitioned_metadata_request(
        4,
        "persistent://bad name",
    ))
    .await;
    match raw.recv().await {
        Some(Command::PartitionedMetadataResponse(r)) => {
            assert_eq!(r.request_id, 4);
            assert_eq!(r.error(), ServerError::InvalidTopicName);
        }
        other => panic!("expected PARTITIONED_METADATA_RESPONSE, got {other:?}"),
    }

    // Requests of a consumer this connection does not have: ERROR with ConsumerNotFound.
    raw.send(commands::close_consumer_request(5, 99)).await;
    match raw.recv().await {
        Some(Command::Success(s)) => assert_eq!(s.request_id, 5),
        other => panic!("CLOSE_CONSUMER of an unknown consumer succeeds, got {other:?}"),
    }
    let unsubscribe = strobe_wire::proto::CommandUnsubscribe {
        consumer_id: 99,
        request_id: 6,
        ..Default::default()
    };
    raw.send(unsubscribe).await;
    match raw.recv().await {
        Some(Command::Error(e)) => {
            assert_eq!(e.request_id, 6);
            assert_eq!(e.error(), ServerError::ConsumerNotFound);
        }
        other => panic!("expected ERROR, got {other:?}"),
    }

    // An ACK with a request id of an unknown consumer: ACK_RESPONSE carrying the error.
    raw.send(commands::ack(
        99,
        false,
        vec![commands::message_id(0, 0)],
        Some(8),
    ))
    .await;
    match raw.recv().await {
        Some(Command::AckResponse(r)) => {
            assert_eq!(r.request_id, Some(8));
            assert_eq!(r.error(), ServerError::ConsumerNotFound);
        }
        other => panic!("expected ACK_RESPONSE, got {other:?}"),
    }

    // The connection is still usable after refused requests.
    raw.send(commands::ping()).await;
    assert!(matches!(raw.recv().await, Some(Command::Pong(_))));
    broker.shutdown().await;
}

#[tokio::test]
async fn a_send_for_an_unknown_producer_is_an_error_and_closes_the_connection() {
    let broker = start_server(|_| {}).await;
    let mut raw = Raw::handshake(&broker).await;
    let meta = strobe_wire::proto::MessageMetadata {
        producer_name: "p".into(),
        sequence_id: 0,
        publish_time: 1,
        ..Default::default()
    };
    let section = strobe_wire::payload::encode(&meta, b"x", true);
    let send = commands::send_frame(42, 0, 1, section);
    raw.stream.write_all(&send.to_bytes()).await.unwrap();
    match raw.recv().await {
        Some(Command::SendError(e)) => {
            assert_eq!(e.producer_id, 42);
            assert_eq!(e.error(), ServerError::NotAllowedError);
        }
        other => panic!("expected SEND_ERROR, got {other:?}"),
    }
    assert!(raw.recv().await.is_none());
    broker.shutdown().await;
}

#[tokio::test]
async fn messages_go_from_producer_to_consumer_in_order_and_acks_empty_the_backlog() {
    let broker = start_server(|_| {}).await;
    let url = format!("pulsar://{}", broker.addr());
    let client = Client::builder(&url).build().await.unwrap();
    let topic = "persistent://public/default/in-process-order";
    let mut consumer = client
        .consumer(topic, "sub")
        .sub_type(SubType::Shared)
        .subscribe()
        .await
        .unwrap();
    let producer = client.producer(topic).create().await.unwrap();
    for i in 0..200u32 {
        producer.send(i.to_be_bytes().to_vec()).await.unwrap();
    }
    producer.flush().await.unwrap();
    for i in 0..200u32 {
        let m = consumer.recv().await.unwrap();
        assert_eq!(m.payload.as_ref(), i.to_be_bytes());
        consumer.ack(&m).unwrap();
    }
    consumer.flush_acks();
    let t = broker
        .service()
        .loaded_topic(&strobe_model::TopicName::parse(topic).unwrap())
        .expect("loaded");
    let sub = t.subscription("sub").expect("subscription");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sub.cursor.backlog() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "backlog stayed at {}",
            sub.cursor.backlog()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client.close().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn many_topics_load_concurrently_and_each_once() {
    let broker = start_server(|_| {}).await;
    let service = broker.service();
    // Several callers per topic at once: every caller of one name gets the same topic.
    let names: Vec<_> = (0..40)
        .map(|i| {
            strobe_model::TopicName::parse(&format!("persistent://public/default/load-{}", i % 10))
                .unwrap()
        })
        .collect();
    let loads = futures::stream::iter(names.iter().map(|n| {
        let service = service.clone();
        async move { (n.clone(), service.topic(n, true).await.unwrap()) }
    }))
    .buffer_unordered(40)
    .collect::<Vec<_>>()
    .await;
    for (name, topic) in &loads {
        let loaded = service.loaded_topic(name).unwrap();
        assert!(
            std::sync::Arc::ptr_eq(topic, &loaded),
            "{name} opened twice"
        );
    }
    assert_eq!(service.loaded_topics().len(), 10);

    // An unload and a load of the same topic racing: the topic ends up loaded once, usable.
    let name = names[0].clone();
    let (unloaded, reloaded) = tokio::join!(service.unload(&name), service.topic(&name, true));
    unloaded.unwrap();
    reloaded.unwrap();
    let t = service.topic(&name, true).await.unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &t,
        &service.loaded_topic(&name).unwrap()
    ));
    t.ledger
        .append(bytes::Bytes::from_static(b"x"))
        .await
        .expect("the topic that stays loaded takes writes");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_subscription_of_a_partitioned_topic_must_name_a_partition() {
    let broker = start_server(|c| c.default_num_partitions = 3).await;
    let service = broker.service();
    let name = strobe_model::TopicName::parse("persistent://public/default/parted").unwrap();
    service.create_partitioned(&name, 3).await.unwrap();
    let mut raw = Raw::handshake(&broker).await;
    raw.send(commands::subscribe(
        1,
        1,
        &name.to_string(),
        "s",
        command_subscribe::SubType::Exclusive,
    ))
    .await;
    match raw.recv().await {
        Some(Command::Error(e)) => assert_eq!(e.error(), ServerError::NotAllowedError),
        other => panic!("expected ERROR, got {other:?}"),
    }
    raw.send(commands::subscribe(
        2,
        2,
        &name.partition_name(1).to_string(),
        "s",
        command_subscribe::SubType::Exclusive,
    ))
    .await;
    assert!(matches!(raw.recv().await, Some(Command::Success(_))));
    broker.shutdown().await;
}

/// `topic://` names are scalable topics, which no v4 producer attaches to; a
/// `segment://` is created on connect only while its topic's layout lists it
/// as active, so a client holding an old layout cannot revive a sealed one.
#[tokio::test]
async fn segments_are_created_only_while_their_layout_lists_them_active() {
    let broker = start_server(|c| c.allow_auto_topic_creation = false).await;
    let service = broker.service();
    let mut raw = Raw::handshake(&broker).await;
    let mut request = 0;
    let mut produce = async |raw: &mut Raw, topic: &str| {
        request += 1;
        raw.send(commands::producer(request, request, topic, None))
            .await;
        match raw.recv().await {
            Some(Command::ProducerSuccess(_)) => Ok(()),
            Some(Command::Error(e)) => Err(e.error()),
            other => panic!("expected PRODUCER_SUCCESS or ERROR, got {other:?}"),
        }
    };
    assert_eq!(
        produce(&mut raw, "topic://public/default/orders").await,
        Err(ServerError::NotAllowedError)
    );
    // No layout yet.
    let first = "segment://public/default/orders/0000-ffff-0";
    assert_eq!(
        produce(&mut raw, first).await,
        Err(ServerError::TopicNotFound)
    );
    let layout = strobe_layout::Layout::create(1, 4, Default::default(), 1).unwrap();
    let v = service
        .resources
        .create_layout("public/default", "orders", &layout)
        .await
        .unwrap();
    produce(&mut raw, first).await.unwrap();
    // A descriptor whose range differs from the layout's is not that segment.
    assert_eq!(
        produce(&mut raw, "segment://public/default/orders/0000-7fff-0").await,
        Err(ServerError::TopicNotFound)
    );
    // After a split the children are created on connect, ids never listed
    // are not, and the sealed parent, which exists, still loads.
    let (split, [a, b]) = layout.split(0, 2).unwrap();
    service
        .resources
        .replace_layout("public/default", "orders", &split, v)
        .await
        .unwrap();
    for id in [a, b] {
        let d = split.get(id).unwrap().descriptor();
        produce(&mut raw, &format!("segment://public/default/orders/{d}"))
            .await
            .unwrap();
    }
    assert_eq!(
        produce(&mut raw, "segment://public/default/orders/0000-7fff-7").await,
        Err(ServerError::TopicNotFound)
    );
    produce(&mut raw, first).await.unwrap();
    broker.shutdown().await;
}

/// A DAG watch session (SCALABLE_TOPIC_LOOKUP): the first update names the
/// resolved topic and carries its layout with each active segment's broker;
/// every layout change pushes again until SCALABLE_TOPIC_CLOSE; bad names,
/// missing topics and a disabled broker are refused in the update.
#[tokio::test]
async fn a_dag_watch_session_follows_the_layout() {
    use strobe_wire::proto::{CommandScalableTopicClose, CommandScalableTopicLookup};

    let broker = start_server(|_| {}).await;
    let service = broker.service();
    let mut raw = Raw::connect(&broker).await;
    raw.send(commands::connect("in-process-test", None)).await;
    match raw.recv().await {
        Some(Command::Connected(c)) => {
            assert_eq!(
                c.feature_flags.unwrap().supports_scalable_topics,
                Some(true)
            )
        }
        other => panic!("expected CONNECTED, got {other:?}"),
    }
    let lookup = |session_id: u64, topic: &str, create: Option<bool>| CommandScalableTopicLookup {
        session_id,
        topic: topic.into(),
        create_if_missing: create,
    };
    async fn update(raw: &mut Raw) -> strobe_wire::proto::CommandScalableTopicUpdate {
        match raw.recv().await {
            Some(Command::ScalableTopicUpdate(u)) => u,
            other => panic!("expected SCALABLE_TOPIC_UPDATE, got {other:?}"),
        }
    }
    // A topic:// name the lookup creates with one segment.
    raw.send(lookup(1, "topic://public/default/orders", None))
        .await;
    let u = update(&mut raw).await;
    assert_eq!(u.session_id, 1);
    assert_eq!(
        u.resolved_topic_name.as_deref(),
        Some("topic://public/default/orders")
    );
    let dag = u.dag.unwrap();
    assert_eq!(
        (dag.epoch, dag.segments.len(), dag.segment_brokers.len()),
        (0, 1, 1)
    );
    assert_eq!(
        dag.segments[0].entry_bucket_splits,
        vec![16384, 32768, 49152]
    );
    assert_eq!(
        dag.segment_brokers[0].broker_url,
        format!("pulsar://127.0.0.1:{}", broker.addr().port())
    );
    // A split pushes the new layout: the sealed parent and two children,
    // brokers for the active ones only.
    let current = service
        .resources
        .layout("public/default", "orders")
        .await
        .unwrap()
        .unwrap();
    let (split, _) = current.value.split(0, 5).unwrap();
    service
        .resources
        .replace_layout("public/default", "orders", &split, current.version)
        .await
        .unwrap();
    let dag = update(&mut raw).await.dag.unwrap();
    assert_eq!(
        (dag.epoch, dag.segments.len(), dag.segment_brokers.len()),
        (1, 3, 2)
    );
    let mut brokered: Vec<u64> = dag.segment_brokers.iter().map(|b| b.segment_id).collect();
    brokered.sort();
    assert_eq!(brokered, vec![1, 2]);
    // Closed: the next change is not pushed (the next frame is the answer
    // to the lookup after it).
    raw.send(CommandScalableTopicClose { session_id: 1 }).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (merged, _) = split.merge(1, 2, 6).unwrap();
    let v = service
        .resources
        .layout("public/default", "orders")
        .await
        .unwrap()
        .unwrap()
        .version;
    service
        .resources
        .replace_layout("public/default", "orders", &merged, v)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A persistent:// name with no layout (PIP-475): the v4 topic's
    // synthetic layout, epoch 0, its one segment the topic itself, no
    // controller, nothing stored; its partitions when it has some.
    raw.send(lookup(7, "persistent://public/default/v4", None))
        .await;
    let u = update(&mut raw).await;
    assert_eq!(
        u.resolved_topic_name.as_deref(),
        Some("topic://public/default/v4")
    );
    let dag = u.dag.unwrap();
    assert_eq!((dag.epoch, dag.segments.len()), (0, 1));
    assert_eq!(
        dag.segments[0].legacy_topic_name.as_deref(),
        Some("persistent://public/default/v4")
    );
    assert!(dag.controller_broker_url.is_none());
    assert!(
        service
            .resources
            .layout("public/default", "v4")
            .await
            .unwrap()
            .is_none()
    );
    service
        .create_partitioned(
            &strobe_model::TopicName::parse("persistent://public/default/v4p").unwrap(),
            3,
        )
        .await
        .unwrap();
    raw.send(lookup(8, "persistent://public/default/v4p", None))
        .await;
    let dag = update(&mut raw).await.dag.unwrap();
    let names: Vec<_> = dag
        .segments
        .iter()
        .map(|s| (s.segment_id, s.legacy_topic_name.clone().unwrap()))
        .collect();
    assert_eq!(
        names,
        (0..3)
            .map(|i| (i, format!("persistent://public/default/v4p-partition-{i}")))
            .collect::<Vec<_>>()
    );
    raw.send(lookup(2, "topic://public/default/absent", Some(false)))
        .await;
    let u = update(&mut raw).await;
    assert_eq!(
        (u.session_id, u.error),
        (2, Some(ServerError::TopicNotFound as i32))
    );
    // Sessions that failed do not hold the connection's places (64).
    for id in 100..200 {
        raw.send(lookup(id, "topic://public/default/absent", Some(false)))
            .await;
        assert_eq!(
            update(&mut raw).await.error,
            Some(ServerError::TopicNotFound as i32)
        );
    }
    for (id, bad, code) in [
        (
            3,
            "non-persistent://public/default/x",
            ServerError::NotAllowedError,
        ),
        (
            4,
            "persistent://public/default/x-partition-1",
            ServerError::NotAllowedError,
        ),
        (
            5,
            "segment://public/default/x/0000-ffff-0",
            ServerError::NotAllowedError,
        ),
        (6, "not a name://", ServerError::InvalidTopicName),
    ] {
        raw.send(lookup(id, bad, None)).await;
        let u = update(&mut raw).await;
        assert_eq!((u.session_id, u.error), (id, Some(code as i32)), "{bad}");
        assert!(u.dag.is_none());
    }
    broker.shutdown().await;

    // Disabled: not advertised, and refused.
    let broker = start_server(|c| c.scalable_topics_enabled = false).await;
    let mut raw = Raw::connect(&broker).await;
    raw.send(commands::connect("in-process-test", None)).await;
    match raw.recv().await {
        Some(Command::Connected(c)) => {
            assert_eq!(c.feature_flags.unwrap().supports_scalable_topics, None)
        }
        other => panic!("expected CONNECTED, got {other:?}"),
    }
    raw.send(lookup(1, "topic://public/default/orders", None))
        .await;
    let u = update(&mut raw).await;
    assert_eq!(u.error, Some(ServerError::NotAllowedError as i32));
    broker.shutdown().await;
}

#[tokio::test]
async fn a_namespace_watch_sends_a_snapshot_then_diffs_of_matching_topics() {
    use std::collections::BTreeMap;
    use strobe_wire::proto::command_watch_scalable_topics_update::Event;
    use strobe_wire::proto::{
        CommandWatchScalableTopics, CommandWatchScalableTopicsUpdate, KeyValue,
    };

    let broker = start_server(|_| {}).await;
    let service = broker.service();
    let topic =
        |n: &str| strobe_model::TopicName::parse(&format!("topic://public/default/{n}")).unwrap();
    let props = |team: &str| BTreeMap::from([("team".to_string(), team.to_string())]);
    service
        .create_scalable_topic(&topic("a"), 1, props("x"))
        .await
        .unwrap();
    service
        .create_scalable_topic(&topic("b"), 2, props("y"))
        .await
        .unwrap();

    let mut raw = Raw::connect(&broker).await;
    raw.send(commands::connect("in-process-test", None)).await;
    assert!(matches!(raw.recv().await, Some(Command::Connected(_))));
    let watch =
        |watch_id: u64, team: Option<&str>, hash: Option<String>| CommandWatchScalableTopics {
            watch_id,
            namespace: "public/default".into(),
            property_filters: team
                .map(|t| {
                    vec![KeyValue {
                        key: "team".into(),
                        value: t.into(),
                    }]
                })
                .unwrap_or_default(),
            current_hash: hash,
        };
    async fn next(raw: &mut Raw) -> CommandWatchScalableTopicsUpdate {
        match tokio::time::timeout(std::time::Duration::from_secs(5), raw.recv()).await {
            Ok(Some(Command::WatchScalableTopicsUpdate(u))) => u,
            other => panic!("expected WATCH_SCALABLE_TOPICS_UPDATE, got {other:?}"),
        }
    }
    raw.send(watch(1, Some("x"), None)).await;
    let u = next(&mut raw).await;
    assert_eq!(
        u.event,
        Some(Event::Snapshot(
            strobe_wire::proto::ScalableTopicsSnapshot {
                topics: vec!["topic://public/default/a".into()]
            }
        ))
    );
    // Created with the property: added. Created without: nothing.
    service
        .create_scalable_topic(&topic("c"), 1, props("x"))
        .await
        .unwrap();
    service
        .create_scalable_topic(&topic("d"), 1, props("z"))
        .await
        .unwrap();
    let u = next(&mut raw).await;
    let Some(Event::Diff(d)) = u.event else {
        panic!("{u:?}")
    };
    assert_eq!(
        (d.added, d.removed),
        (vec!["topic://public/default/c".to_string()], vec![])
    );
    // A resize rewrites the document: not a change of the set.
    let c = match service.scalable_controller(&topic("c")).await.unwrap() {
        strobe_broker::service::controllers::ControllerAt::Here(c) => c,
        other => panic!("{other:?}"),
    };
    c.split(0).await.unwrap();
    // Deleted: removed.
    service.delete_scalable_topic(&c, true).await.unwrap();
    let u = next(&mut raw).await;
    let Some(Event::Diff(d)) = u.event else {
        panic!("{u:?}")
    };
    assert_eq!(
        (d.added, d.removed),
        (vec![], vec!["topic://public/default/c".to_string()])
    );

    // A client whose hash names the set gets no snapshot, only what follows.
    let all = [
        "topic://public/default/a".to_string(),
        "topic://public/default/b".to_string(),
        "topic://public/default/d".to_string(),
    ];
    let mut raw2 = Raw::connect(&broker).await;
    raw2.send(commands::connect("in-process-test", None)).await;
    assert!(matches!(raw2.recv().await, Some(Command::Connected(_))));
    let crc = strobe_wire::payload::crc32c(all.join(",").as_bytes());
    let hash: String = crc
        .to_le_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    raw2.send(watch(7, None, Some(hash))).await;
    // No answer tells the watch has started (that is the point): give it time.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    service
        .create_scalable_topic(&topic("e"), 1, BTreeMap::new())
        .await
        .unwrap();
    let u = next(&mut raw2).await;
    assert_eq!(u.watch_id, 7);
    let Some(Event::Diff(d)) = u.event else {
        panic!("expected a diff, not a snapshot: {u:?}")
    };
    assert_eq!(d.added, vec!["topic://public/default/e".to_string()]);
    // An unknown namespace is refused.
    raw2.send(CommandWatchScalableTopics {
        watch_id: 8,
        namespace: "public/nope".into(),
        property_filters: vec![],
        current_hash: None,
    })
    .await;
    let u = next(&mut raw2).await;
    assert_eq!(
        (u.watch_id, u.error),
        (8, Some(ServerError::TopicNotFound as i32))
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn stream_consumers_are_assigned_segments_and_follow_joins_leaves_and_splits() {
    use std::collections::BTreeMap;
    use strobe_wire::proto::{
        CommandScalableTopicSubscribe, CommandScalableTopicUnsubscribe, ScalableConsumerAssignment,
        ScalableConsumerType,
    };

    let broker = start_server(|c| c.scalable_topic_consumer_session_grace_period_secs = 1).await;
    let service = broker.service();
    let topic = strobe_model::TopicName::parse("topic://public/default/st").unwrap();
    service
        .create_scalable_topic(&topic, 2, BTreeMap::new())
        .await
        .unwrap();

    async fn connect(broker: &BrokerHandle) -> Raw {
        let mut raw = Raw::connect(broker).await;
        raw.send(commands::connect("in-process-test", None)).await;
        assert!(matches!(raw.recv().await, Some(Command::Connected(_))));
        raw
    }
    fn ids(a: &ScalableConsumerAssignment) -> Vec<u64> {
        a.segments.iter().map(|s| s.segment_id).collect()
    }
    async fn subscribe(raw: &mut Raw, name: &str) -> ScalableConsumerAssignment {
        raw.send(CommandScalableTopicSubscribe {
            request_id: 9,
            topic: "topic://public/default/st".into(),
            subscription: "s".into(),
            consumer_name: name.into(),
            consumer_id: 1,
            consumer_type: ScalableConsumerType::Stream as i32,
        })
        .await;
        loop {
            match tokio::time::timeout(std::time::Duration::from_secs(5), raw.recv()).await {
                Ok(Some(Command::ScalableTopicSubscribeResponse(r))) => {
                    assert_eq!(r.error, None, "{:?}", r.message);
                    return r.assignment.unwrap();
                }
                Ok(Some(_)) => continue,
                other => panic!("no SUBSCRIBE_RESPONSE: {other:?}"),
            }
        }
    }
    async fn update(raw: &mut Raw) -> ScalableConsumerAssignment {
        loop {
            match tokio::time::timeout(std::time::Duration::from_secs(5), raw.recv()).await {
                Ok(Some(Command::ScalableTopicAssignmentUpdate(u))) => return u.assignment,
                Ok(Some(_)) => continue,
                other => panic!("no ASSIGNMENT_UPDATE: {other:?}"),
            }
        }
    }

    let mut a = connect(&broker).await;
    assert_eq!(ids(&subscribe(&mut a, "a").await), vec![0, 1]);
    let mut b = connect(&broker).await;
    assert_eq!(ids(&subscribe(&mut b, "b").await), vec![1]);
    assert_eq!(ids(&update(&mut a).await), vec![0]);
    // A third consumer: more consumers than segments, so segment 0 (two
    // buckets) is shared by a and b, each told its full bucket list.
    let mut c = connect(&broker).await;
    assert_eq!(ids(&subscribe(&mut c, "c").await), vec![1]);
    let ua = update(&mut a).await;
    assert_eq!(ids(&ua), vec![0]);
    assert_eq!(ua.segments[0].bucket_ranges.len(), 2);
    let ub = update(&mut b).await;
    assert_eq!((ids(&ub), ub.segments[0].bucket_ranges.len()), (vec![0], 2));
    // c leaves at once (82): a and b go back to one segment each, alone.
    c.send(CommandScalableTopicUnsubscribe {
        request_id: 10,
        consumer_id: 1,
    })
    .await;
    assert!(matches!(c.recv().await, Some(Command::Success(s)) if s.request_id == 10));
    let ua = update(&mut a).await;
    assert_eq!((ids(&ua), ua.segments[0].bucket_ranges.len()), (vec![0], 0));
    assert_eq!(ids(&update(&mut b).await), vec![1]);
    // A split: the children wait until the subscription drained the parent.
    let ctl = match service.scalable_controller(&topic).await.unwrap() {
        strobe_broker::service::controllers::ControllerAt::Here(c) => c,
        other => panic!("{other:?}"),
    };
    ctl.split(0).await.unwrap();
    service
        .resources
        .mark_drained("public/default", "st", "s", 0)
        .await
        .unwrap();
    let ua = update(&mut a).await;
    assert_eq!(ids(&ua), vec![2, 1]);
    assert_eq!(ua.layout_epoch, 1);
    assert_eq!(ids(&update(&mut b).await), vec![3]);
    // a's connection ends: after the grace period (1 s), b reads everything.
    drop(a);
    let ub = update(&mut b).await;
    assert_eq!(ids(&ub), vec![2, 3, 1]);
    assert_eq!(
        service
            .resources
            .scalable_consumers("public/default", "st", "s")
            .await
            .unwrap(),
        vec!["b".to_string()]
    );
    broker.shutdown().await;
}

/// A topic closed for a handoff whose mover was cancelled half-way (an
/// admin request whose client hung up) still tells its producers to go:
/// they are no longer registered on the topic, so without CLOSE_PRODUCER
/// what they send would be held, unanswered, forever (the fault campaign's
/// stuck producer).
#[tokio::test]
async fn a_handoff_dropped_before_telling_its_clients_still_closes_its_producers() {
    let broker = start_server(|_| {}).await;
    let mut raw = Raw::handshake(&broker).await;
    let topic = "persistent://public/default/dropped-handoff";
    raw.send(commands::producer(1, 7, topic, None)).await;
    match raw.recv().await {
        Some(Command::ProducerSuccess(_)) => {}
        other => panic!("expected PRODUCER_SUCCESS, got {other:?}"),
    }
    let name = strobe_model::TopicName::parse(topic).unwrap();
    let t = broker.service().topic(&name, false).await.unwrap();
    drop(t.close_for_handoff().await);
    match raw.recv().await {
        Some(Command::CloseProducer(c)) => {
            assert_eq!(c.producer_id, 7);
            assert_eq!(c.assigned_broker_service_url, None, "no broker to go to");
        }
        other => panic!("expected CLOSE_PRODUCER, got {other:?}"),
    }
    broker.shutdown().await;
}
