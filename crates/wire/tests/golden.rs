//! Frames captured from the official Python client (pulsar-client 3.13.0, which
//! embeds the C++ client 4.2.0) by `tests/data/capture.py`, decoded field by field.

use bytes::{Bytes, BytesMut};
use strobe_wire::proto::*;
use strobe_wire::{Command, Frame, batch, decode_frame, payload};

fn frame(name: &str) -> Frame {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut buf = BytesMut::from(&bytes[..]);
    let frame = decode_frame(
        &mut buf,
        strobe_wire::DEFAULT_MAX_MESSAGE_SIZE + strobe_wire::FRAME_PADDING,
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"))
    .unwrap_or_else(|| panic!("{name}: incomplete frame"));
    assert!(buf.is_empty(), "{name}: exactly one frame");
    // What we decode, we re-encode to the same bytes (field order and defaults kept).
    let mut again = BytesMut::new();
    match &frame.payload {
        None => strobe_wire::encode_command(&frame.command.clone().into_base(), &mut again),
        Some(p) => {
            strobe_wire::encode_payload_command(&frame.command.clone().into_base(), p, &mut again)
        }
    }
    assert_eq!(&again[..], &bytes[..], "{name}: re-encoding differs");
    frame
}

#[test]
fn connect() {
    let Command::Connect(c) = frame("connect.bin").command else {
        panic!("not CONNECT")
    };
    assert_eq!(c.client_version, "Pulsar-CPP-v4.2.0");
    assert_eq!(c.protocol_version, Some(20));
    assert_eq!(c.auth_method_name.as_deref(), Some("none"));
    assert_eq!(c.auth_data, None);
    let flags = c.feature_flags.expect("feature flags");
    assert_eq!(flags.supports_auth_refresh, Some(true));
    assert_eq!(flags.supports_broker_entry_metadata, Some(true));
    assert_eq!(flags.supports_partial_producer, None);
    assert_eq!(c.proxy_to_broker_url, None);
}

#[test]
fn producer() {
    let Command::Producer(p) = frame("producer.bin").command else {
        panic!("not PRODUCER")
    };
    assert_eq!(p.topic, "persistent://public/default/golden");
    assert_eq!(p.producer_id, 0);
    assert_eq!(p.request_id, 0);
    assert_eq!(p.producer_name, None);
    assert_eq!(p.user_provided_producer_name, Some(false));
    assert_eq!(p.producer_access_mode(), ProducerAccessMode::Shared);
    assert_eq!(p.epoch, Some(0));
    assert_eq!(p.encrypted, Some(false));
    assert_eq!(p.schema, None);
}

#[test]
fn batched_send() {
    let f = frame("send-batch.bin");
    let Command::Send(s) = f.command else {
        panic!("not SEND")
    };
    assert_eq!(s.producer_id, 0);
    assert_eq!(s.sequence_id, 0);
    assert_eq!(s.num_messages, Some(3));
    let section = f.payload.expect("SEND carries a payload");
    assert!(
        payload::has_checksum(&section),
        "the C++ client always sends CRC-32C"
    );
    let parsed = payload::parse(&section).expect("checksum verifies");
    let m = &parsed.metadata;
    assert_eq!(
        m.producer_name, "golden-producer",
        "the name the broker gave"
    );
    assert_eq!(m.sequence_id, 0);
    assert!(m.publish_time > 1_700_000_000_000);
    assert_eq!(
        m.partition_key.as_deref(),
        Some("key-0"),
        "copied from the first message"
    );
    assert_eq!(m.num_messages_in_batch, Some(3));
    assert_eq!(m.compression(), CompressionType::None);
    let msgs: Vec<_> = batch::messages(m, &parsed.payload)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(msgs.len(), 3);
    for (i, msg) in msgs.iter().enumerate() {
        assert_eq!(msg.payload, Bytes::from(format!("message-{i}")));
        assert_eq!(msg.metadata.partition_key.as_deref(), Some("key-0"));
        assert_eq!(msg.metadata.sequence_id, Some(i as u64));
        assert_eq!(
            msg.metadata.properties,
            vec![KeyValue {
                key: "i".into(),
                value: i.to_string()
            }]
        );
        assert_eq!(msg.metadata.payload_size as usize, msg.payload.len());
    }
}

fn subscribe(name: &str) -> CommandSubscribe {
    let Command::Subscribe(s) = frame(name).command else {
        panic!("not SUBSCRIBE")
    };
    assert_eq!(s.topic, "persistent://public/default/golden");
    assert_eq!(s.sub_type(), command_subscribe::SubType::KeyShared);
    assert_eq!(s.durable, Some(true));
    assert_eq!(
        s.initial_position(),
        command_subscribe::InitialPosition::Latest
    );
    assert_eq!(
        s.consumer_name.as_ref().map(String::len),
        Some(10),
        "a generated name"
    );
    assert_eq!(s.start_message_id, None);
    s
}

#[test]
fn subscribe_key_shared_auto_split() {
    let s = subscribe("subscribe-key-shared-auto-split.bin");
    assert_eq!(s.subscription, "golden-auto-split");
    assert_eq!((s.consumer_id, s.request_id), (0, 2));
    let ksm = s.key_shared_meta.expect("KeySharedMeta");
    assert_eq!(ksm.key_shared_mode(), KeySharedMode::AutoSplit);
    assert!(ksm.hash_ranges.is_empty());
    assert_eq!(ksm.allow_out_of_order_delivery, Some(false));
    assert_eq!(
        ksm.entry_bucket_dispatch, None,
        "no official client sends PIP-486's flag yet"
    );
}

#[test]
fn subscribe_key_shared_sticky() {
    let s = subscribe("subscribe-key-shared-sticky.bin");
    assert_eq!(s.subscription, "golden-sticky");
    assert_eq!((s.consumer_id, s.request_id), (1, 4));
    let ksm = s.key_shared_meta.expect("KeySharedMeta");
    assert_eq!(ksm.key_shared_mode(), KeySharedMode::Sticky);
    assert_eq!(
        ksm.hash_ranges,
        vec![
            IntRange {
                start: 0,
                end: 16383
            },
            IntRange {
                start: 32768,
                end: 49151
            }
        ]
    );
}

#[test]
fn flow() {
    let Command::Flow(f) = frame("flow.bin").command else {
        panic!("not FLOW")
    };
    assert_eq!(f.consumer_id, 0);
    assert_eq!(f.message_permits, 10, "the receiver queue size");
}

#[test]
fn ack_with_ack_set() {
    let Command::Ack(a) = frame("ack-batch-index.bin").command else {
        panic!("not ACK")
    };
    assert_eq!(a.consumer_id, 0);
    assert_eq!(a.ack_type(), command_ack::AckType::Individual);
    assert_eq!(a.message_id.len(), 1);
    let id = &a.message_id[0];
    assert_eq!((id.ledger_id, id.entry_id), (1, 0));
    // Message 0 of the batch of 3 acked: bits 1 and 2 (still unacked) remain set.
    assert_eq!(id.ack_set, vec![0b110]);
    assert_eq!(a.request_id, None, "no ack receipt asked");
    assert_eq!(a.txnid_most_bits, None);
}
