//! Property tests for frames, payloads and batches.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use strobe_wire::proto::*;
use strobe_wire::{
    Command, Frame, FrameCodec, OutFrame, WireError, batch, commands, decode_frame, payload,
};
use tokio_util::codec::{Decoder, Encoder};

const MAX_FRAME: usize = strobe_wire::DEFAULT_MAX_MESSAGE_SIZE + strobe_wire::FRAME_PADDING;

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_./:-]{0,24}"
}

fn key_values() -> impl Strategy<Value = Vec<KeyValue>> {
    prop::collection::vec(
        (name(), name()).prop_map(|(key, value)| KeyValue { key, value }),
        0..4,
    )
}

fn message_id() -> impl Strategy<Value = MessageIdData> {
    (
        any::<u64>(),
        any::<u64>(),
        -1i32..8,
        -1i32..100,
        prop::collection::vec(any::<i64>(), 0..3),
    )
        .prop_map(
            |(ledger_id, entry_id, partition, batch_index, ack_set)| MessageIdData {
                ledger_id,
                entry_id,
                partition: Some(partition),
                batch_index: Some(batch_index),
                ack_set,
                ..Default::default()
            },
        )
}

fn ranges() -> impl Strategy<Value = Vec<IntRange>> {
    prop::collection::vec(
        (0i32..65536, 0i32..65536).prop_map(|(a, b)| IntRange {
            start: a.min(b),
            end: a.max(b),
        }),
        0..5,
    )
}

/// A spread of commands from every area of the protocol, with arbitrary fields.
fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        (name(), any::<i32>(), any::<bool>()).prop_map(|(v, p, refresh)| Command::Connect(
            CommandConnect {
                client_version: v,
                protocol_version: Some(p),
                feature_flags: Some(FeatureFlags {
                    supports_auth_refresh: Some(refresh),
                    ..Default::default()
                }),
                ..Default::default()
            }
        )),
        (name(), any::<i32>(), any::<i32>(), any::<bool>()).prop_map(|(v, p, m, tc)| {
            commands::connected(
                &v,
                p,
                Some(m.unsigned_abs() as usize),
                FeatureFlags {
                    supports_tc_metadata_discovery: Some(tc),
                    ..Default::default()
                },
            )
        }),
        (
            name(),
            name(),
            0i32..4,
            any::<u64>(),
            any::<u64>(),
            prop::option::of((0i32..2, ranges(), any::<bool>(), any::<bool>())),
            key_values()
        )
            .prop_map(|(topic, sub, t, cid, rid, ksm, meta)| {
                let mut s = commands::subscribe(
                    rid,
                    cid,
                    &topic,
                    &sub,
                    command_subscribe::SubType::try_from(t).unwrap(),
                );
                s.key_shared_meta = ksm.map(|(mode, hash_ranges, ooo, ebd)| KeySharedMeta {
                    key_shared_mode: mode,
                    hash_ranges,
                    allow_out_of_order_delivery: Some(ooo),
                    entry_bucket_dispatch: Some(ebd),
                });
                s.metadata = meta;
                Command::Subscribe(s)
            }),
        (any::<u64>(), any::<u64>(), name(), prop::option::of(name()))
            .prop_map(|(r, p, t, n)| commands::producer(r, p, &t, n.as_deref())),
        (any::<u64>(), any::<u64>(), message_id())
            .prop_map(|(p, s, id)| commands::send_receipt(p, s, s, id)),
        (
            any::<u64>(),
            any::<bool>(),
            prop::collection::vec(message_id(), 0..4),
            prop::option::of(any::<u64>())
        )
            .prop_map(|(c, cum, ids, r)| commands::ack(c, cum, ids, r)),
        (any::<u64>(), any::<u32>()).prop_map(|(c, n)| commands::flow(c, n)),
        (any::<u64>(), name(), any::<bool>())
            .prop_map(|(r, t, a)| commands::lookup_topic(r, &t, a)),
        (
            any::<u64>(),
            name(),
            prop::option::of(name()),
            any::<bool>()
        )
            .prop_map(|(r, u, tls, p)| commands::lookup_connect(r, &u, tls.as_deref(), p)),
        (any::<u64>(), 0i32..26, name()).prop_map(|(r, e, m)| commands::error(
            r,
            ServerError::try_from(e).unwrap(),
            m
        )),
        (
            any::<u64>(),
            prop::option::of(name()),
            prop::option::of(name())
        )
            .prop_map(|(p, u, t)| commands::close_producer(p, u.as_deref(), t.as_deref())),
        (
            any::<u64>(),
            prop::option::of(name()),
            prop::option::of(name())
        )
            .prop_map(|(c, u, t)| commands::close_consumer(c, u.as_deref(), t.as_deref())),
        (
            any::<u64>(),
            1u32..64,
            prop::collection::vec((any::<u64>(), prop::option::of(name())), 0..8)
        )
            .prop_map(|(w, par, a)| {
                commands::watch_tc_assignments_update(
                    w,
                    par,
                    a.into_iter()
                        .map(|(tc_id, url)| TcAssignment {
                            tc_id,
                            broker_service_url: url,
                            broker_service_url_tls: None,
                        })
                        .collect(),
                )
            }),
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(r, ttl, s)| Command::NewTxn(
            CommandNewTxn {
                request_id: r,
                txn_ttl_millis: Some(ttl),
                tc_id: Some(0),
                scalable: Some(s)
            }
        )),
        (
            any::<u64>(),
            prop::collection::vec(name(), 0..5),
            name(),
            any::<bool>()
        )
            .prop_map(|(r, t, h, c)| commands::topics_of_namespace(r, t, true, h, c)),
        Just(commands::ping()),
        Just(commands::pong()),
    ]
}

fn metadata() -> impl Strategy<Value = MessageMetadata> {
    (
        name(),
        any::<u64>(),
        any::<u64>(),
        key_values(),
        prop::option::of(name()),
        prop::option::of(1i32..100),
        prop::option::of(any::<u32>()),
    )
        .prop_map(
            |(producer_name, sequence_id, publish_time, properties, partition_key, n, hash)| {
                MessageMetadata {
                    producer_name,
                    sequence_id,
                    publish_time,
                    properties,
                    partition_key,
                    num_messages_in_batch: n,
                    entry_hash_min: hash,
                    entry_hash_max: hash,
                    ..Default::default()
                }
            },
        )
}

fn encode(frame: &Frame) -> Bytes {
    let mut out = BytesMut::new();
    FrameCodec::default()
        .encode(frame.clone(), &mut out)
        .unwrap();
    out.freeze()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn commands_round_trip(cmd in command()) {
        let frame = Frame::new(cmd);
        let bytes = encode(&frame);
        let mut buf = BytesMut::from(&bytes[..]);
        let decoded = decode_frame(&mut buf, MAX_FRAME).unwrap().expect("a whole frame");
        prop_assert_eq!(decoded, frame);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn payload_frames_round_trip(meta in metadata(), body in prop::collection::vec(any::<u8>(), 0..2048), checksum in any::<bool>()) {
        let section = payload::encode(&meta, &body, checksum);
        let frame = commands::send_frame(7, meta.sequence_id, 1, section.clone());
        let mut buf = BytesMut::from(&frame.to_bytes()[..]);
        let decoded = decode_frame(&mut buf, MAX_FRAME).unwrap().expect("a whole frame");
        prop_assert_eq!(decoded.payload.as_ref(), Some(&section));
        let parsed = payload::parse(&section).unwrap();
        prop_assert_eq!(parsed.checksum.is_some(), checksum);
        prop_assert_eq!(parsed.metadata, meta);
        prop_assert_eq!(&parsed.payload[..], &body[..]);
    }

    #[test]
    fn any_split_decodes_the_same(cmds in prop::collection::vec(command(), 1..6), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12)) {
        let frames: Vec<Frame> = cmds.into_iter().map(Frame::new).collect();
        let mut stream = Vec::new();
        for f in &frames { stream.extend_from_slice(&encode(f)); }
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.sort_unstable();
        points.push(stream.len());
        let mut codec = FrameCodec::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut last = 0;
        for p in points {
            buf.extend_from_slice(&stream[last..p]);
            last = p;
            while let Some(f) = codec.decode(&mut buf).unwrap() { out.push(f); }
        }
        prop_assert_eq!(out, frames);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn a_flipped_bit_is_caught(meta in metadata(), body in prop::collection::vec(any::<u8>(), 1..512), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let section = payload::encode(&meta, &body, true);
        let mut bad = section.to_vec();
        // Any bit of the checksum or of what it covers (not the magic).
        let i = 2 + at.index(bad.len() - 2);
        bad[i] ^= 1 << bit;
        let err = payload::parse(&Bytes::from(bad)).unwrap_err();
        prop_assert!(matches!(err, WireError::ChecksumMismatch { .. }), "{:?}", err);
    }

    #[test]
    fn oversized_frames_are_refused_without_allocating(extra in 1u32..u32::MAX - MAX_FRAME as u32, tail in prop::collection::vec(any::<u8>(), 0..64)) {
        let declared = MAX_FRAME as u32 + extra;
        let mut buf = BytesMut::with_capacity(128);
        buf.extend_from_slice(&declared.to_be_bytes());
        buf.extend_from_slice(&tail);
        let before = buf.capacity();
        let err = FrameCodec::default().decode(&mut buf).unwrap_err();
        let is_too_large = matches!(err, WireError::FrameTooLarge { size, max } if size == declared as usize && max == MAX_FRAME);
        prop_assert!(is_too_large);
        prop_assert_eq!(buf.capacity(), before);
    }

    #[test]
    fn batches_round_trip(msgs in prop::collection::vec((prop::option::of(name()), key_values(), prop::collection::vec(any::<u8>(), 0..256)), 1..20)) {
        let items: Vec<(SingleMessageMetadata, &[u8])> = msgs
            .iter()
            .map(|(k, p, b)| (SingleMessageMetadata { partition_key: k.clone(), properties: p.clone(), ..Default::default() }, &b[..]))
            .collect();
        let body = batch::encode(&items);
        let meta = MessageMetadata { num_messages_in_batch: Some(items.len() as i32), ..Default::default() };
        let read: Vec<_> = batch::messages(&meta, &body).unwrap().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(read.len(), items.len());
        for (r, (m, b)) in read.iter().zip(&items) {
            prop_assert_eq!(&r.metadata.partition_key, &m.partition_key);
            prop_assert_eq!(&r.metadata.properties, &m.properties);
            prop_assert_eq!(&r.payload[..], *b);
        }
    }

    #[test]
    fn truncated_batches_are_errors_not_panics(msgs in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 1..6), cut in any::<prop::sample::Index>()) {
        let items: Vec<(SingleMessageMetadata, &[u8])> = msgs.iter().map(|b| (SingleMessageMetadata::default(), &b[..])).collect();
        let body = batch::encode(&items);
        let short = body.slice(..cut.index(body.len()));
        let meta = MessageMetadata { num_messages_in_batch: Some(items.len() as i32), ..Default::default() };
        let results: Vec<_> = batch::messages(&meta, &short).unwrap().collect();
        prop_assert!(results.iter().any(|r| r.is_err()));
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut buf = BytesMut::from(&bytes[..]);
        let _ = decode_frame(&mut buf, MAX_FRAME);
        let _ = payload::parse(&Bytes::from(bytes));
    }
}

#[test]
fn incomplete_frame_is_none() {
    let frame = encode(&Frame::new(commands::ping()));
    for n in 0..frame.len() {
        let mut buf = BytesMut::from(&frame[..n]);
        assert!(
            decode_frame(&mut buf, MAX_FRAME).unwrap().is_none(),
            "{n} bytes"
        );
    }
}

#[test]
fn command_size_past_the_frame_is_an_error() {
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&8u32.to_be_bytes()); // total: 4 (cmd size) + 4
    buf.extend_from_slice(&100u32.to_be_bytes()); // command claims 100 bytes
    buf.extend_from_slice(&[0u8; 4]);
    let err = decode_frame(&mut buf, MAX_FRAME).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::CommandSizeExceedsFrame {
                command_size: 100,
                frame_size: 8
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_command_that_does_not_parse_is_an_error() {
    let mut buf = BytesMut::new();
    let junk = [0xffu8; 6];
    buf.extend_from_slice(&((4 + junk.len()) as u32).to_be_bytes());
    buf.extend_from_slice(&(junk.len() as u32).to_be_bytes());
    buf.extend_from_slice(&junk);
    assert!(matches!(
        decode_frame(&mut buf, MAX_FRAME).unwrap_err(),
        WireError::InvalidCommand(_)
    ));
}

#[test]
fn type_without_body_is_an_error() {
    let base = BaseCommand {
        r#type: base_command::Type::Subscribe as i32,
        ..Default::default()
    };
    let mut buf = BytesMut::new();
    strobe_wire::encode_command(&base, &mut buf);
    assert!(matches!(
        decode_frame(&mut buf, MAX_FRAME).unwrap_err(),
        WireError::MissingCommandBody(base_command::Type::Subscribe)
    ));
    let base = BaseCommand {
        r#type: 999,
        ..Default::default()
    };
    let mut buf = BytesMut::new();
    strobe_wire::encode_command(&base, &mut buf);
    assert!(matches!(
        decode_frame(&mut buf, MAX_FRAME).unwrap_err(),
        WireError::UnknownCommandType(999)
    ));
}

#[test]
fn message_frames_always_carry_a_checksum_and_share_the_entry() {
    let meta = MessageMetadata {
        producer_name: "p".into(),
        sequence_id: 3,
        publish_time: 1,
        ..Default::default()
    };
    for stored_with_checksum in [false, true] {
        let entry = payload::encode(&meta, b"hello", stored_with_checksum);
        let bem = BrokerEntryMetadata {
            broker_timestamp: Some(42),
            index: Some(7),
        };
        for stored in [
            entry.clone(),
            payload::with_broker_entry_metadata(&bem, &entry),
        ] {
            let frame = commands::message_frame(
                9,
                commands::message_id(1, 2),
                0,
                vec![],
                None,
                &stored,
                false,
            )
            .unwrap();
            // The body is a slice of the stored entry, not a copy.
            let body_start = frame.body.as_ptr() as usize;
            let stored_range = stored.as_ptr() as usize..stored.as_ptr() as usize + stored.len();
            assert!(frame.body.is_empty() || stored_range.contains(&body_start));
            let mut buf = BytesMut::from(&frame.to_bytes()[..]);
            let decoded = decode_frame(&mut buf, MAX_FRAME).unwrap().unwrap();
            let section = decoded.payload.unwrap();
            assert!(payload::has_checksum(&section), "MESSAGE must carry 0x0e01");
            let parsed = payload::parse(&section).unwrap();
            assert!(parsed.broker_entry_metadata.is_none());
            assert_eq!(parsed.metadata, meta);
            assert_eq!(&parsed.payload[..], b"hello");
        }
    }
}

#[test]
fn entry_metadata_is_kept_when_asked() {
    let meta = MessageMetadata {
        producer_name: "p".into(),
        ..Default::default()
    };
    let entry = payload::encode(&meta, b"x", false);
    let bem = BrokerEntryMetadata {
        broker_timestamp: Some(5),
        index: None,
    };
    let stored = payload::with_broker_entry_metadata(&bem, &entry);
    let frame = commands::message_frame(
        1,
        commands::message_id(1, 1),
        2,
        vec![],
        None,
        &stored,
        true,
    )
    .unwrap();
    let mut buf = BytesMut::from(&frame.to_bytes()[..]);
    let section = decode_frame(&mut buf, MAX_FRAME)
        .unwrap()
        .unwrap()
        .payload
        .unwrap();
    let parsed = payload::parse(&section).unwrap();
    assert_eq!(parsed.broker_entry_metadata, Some(bem));
    assert!(parsed.checksum.is_some());
}

#[test]
fn compressed_and_encrypted_batches_are_reported() {
    let meta = MessageMetadata {
        compression: Some(CompressionType::Lz4 as i32),
        num_messages_in_batch: Some(2),
        ..Default::default()
    };
    assert!(matches!(
        batch::messages(&meta, &Bytes::new()).unwrap_err(),
        WireError::CompressedBatch(CompressionType::Lz4)
    ));
    let meta = MessageMetadata {
        encryption_keys: vec![EncryptionKeys {
            key: "k".into(),
            value: Bytes::from_static(b"v"),
            metadata: vec![],
        }],
        ..Default::default()
    };
    assert!(matches!(
        batch::messages(&meta, &Bytes::new()).unwrap_err(),
        WireError::EncryptedBatch
    ));
}

#[test]
fn out_frame_and_frame_encodings_agree() {
    let meta = MessageMetadata {
        producer_name: "p".into(),
        ..Default::default()
    };
    let section = payload::encode(&meta, b"abc", true);
    let out: OutFrame = commands::send_frame(1, 2, 1, section.clone());
    let mut buf = BytesMut::new();
    FrameCodec::default().encode(out.clone(), &mut buf).unwrap();
    assert_eq!(&buf[..], &out.to_bytes()[..]);
    let decoded = decode_frame(&mut buf, MAX_FRAME).unwrap().unwrap();
    assert_eq!(decoded.payload, Some(section));
}
