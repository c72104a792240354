//! Messages made into SEND frames: one message alone, or an open batch closed, with their
//! metadata, compression and checksum, queued in the pending map in sequence order.

use bytes::Bytes;
use prost::Message as _;
use strobe_wire::proto::{CommandSend, MessageMetadata, SingleMessageMetadata};
use strobe_wire::{OutFrame, batch, payload};
use tokio::time::Instant;
use tracing::warn;

use super::{BatchKey, PendingMessage, ProducerShared, Reply, State, kvs, now_ms};
use crate::compression::Compression;
use crate::error::Result;
use crate::message::{BatchingType, ProducerMessage, entry_hash};

/// The metadata-and-payload section for `body` without copying it: the
/// returned `[0x0e01][crc][size][metadata]` goes in the frame head and `body`
/// follows, shared. Together they are the bytes `payload::encode(metadata,
/// body, true)` would build.
fn section_prefix(metadata: &MessageMetadata, body: &[u8]) -> Vec<u8> {
    let meta_len = metadata.encoded_len();
    let mut prefix = Vec::with_capacity(10 + meta_len);
    prefix.extend_from_slice(&payload::MAGIC_CRC32C.to_be_bytes());
    prefix.extend_from_slice(&[0; 4]);
    prefix.extend_from_slice(&(meta_len as u32).to_be_bytes());
    metadata.encode(&mut prefix).expect("a Vec grows as needed");
    let crc = crc32c::crc32c_append(crc32c::crc32c(&prefix[6..]), body);
    prefix[2..6].copy_from_slice(&crc.to_be_bytes());
    prefix
}

impl ProducerShared {
    pub(super) fn frame(
        &self,
        seq: u64,
        highest: u64,
        n: i32,
        metadata: &MessageMetadata,
        body: Bytes,
    ) -> OutFrame {
        let prefix = section_prefix(metadata, &body);
        let cmd = CommandSend {
            producer_id: self.id,
            sequence_id: seq,
            num_messages: (n != 1).then_some(n),
            highest_sequence_id: (highest != seq).then_some(highest),
            txnid_most_bits: metadata.txnid_most_bits,
            txnid_least_bits: metadata.txnid_least_bits,
            ..Default::default()
        };
        OutFrame::with_payload(cmd, &prefix, body)
    }

    pub(super) fn enqueue(
        &self,
        st: &mut State,
        seq: u64,
        frame: OutFrame,
        replies: Vec<Reply>,
        batched: bool,
    ) {
        if let Some(c) = &st.conn {
            // A dead connection is noticed by the event loop, which resends.
            let _ = c.send(frame.clone());
        }
        st.pending.insert(
            seq,
            PendingMessage {
                frame,
                replies,
                batched,
                sent_at: Instant::now(),
            },
        );
    }

    pub(super) fn compress(
        &self,
        metadata: &mut MessageMetadata,
        raw: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        if self.cfg.compression == Compression::None {
            return Ok(None);
        }
        metadata.compression = Some(self.cfg.compression.wire() as i32);
        metadata.uncompressed_size = Some(raw.len() as u32);
        self.cfg.compression.compress(raw).map(Some)
    }

    pub(super) fn send_single(
        &self,
        st: &mut State,
        seq: u64,
        msg: ProducerMessage,
        reply: Reply,
    ) -> Result<()> {
        let mut metadata = MessageMetadata {
            producer_name: st.name.clone(),
            sequence_id: seq,
            publish_time: now_ms(),
            properties: kvs(&msg.properties),
            partition_key: msg.key.clone(),
            event_time: msg.event_time,
            ordering_key: msg.ordering_key.clone(),
            txnid_most_bits: msg.txn.map(|t| t.0),
            txnid_least_bits: msg.txn.map(|t| t.1),
            ..Default::default()
        };
        if let BatchingType::EntryBucket { .. } = self.cfg.batching_type {
            let h = entry_hash(msg.routing_key());
            metadata.entry_hash_min = Some(h);
            metadata.entry_hash_max = Some(h);
        }
        let body = match self.compress(&mut metadata, &msg.payload)? {
            Some(c) => Bytes::from(c),
            None => msg.payload,
        };
        let frame = self.frame(seq, seq, 1, &metadata, body);
        self.enqueue(st, seq, frame, vec![reply], false);
        Ok(())
    }

    pub(super) fn flush_batch(&self, st: &mut State, key: &BatchKey) -> Result<()> {
        let Some(b) = st.batches.remove(key) else {
            return Ok(());
        };
        let n = b.messages.len();
        let first_seq = st.next_seq;
        st.next_seq += n as u64;
        let last_seq = first_seq + n as u64 - 1;
        let refs: Vec<(SingleMessageMetadata, &[u8])> = b
            .messages
            .iter()
            .enumerate()
            .map(|(i, (m, p))| {
                let mut m = m.clone();
                m.sequence_id = Some(first_seq + i as u64);
                (m, &p[..])
            })
            .collect();
        let raw = batch::encode(&refs);
        let mut metadata = MessageMetadata {
            producer_name: st.name.clone(),
            sequence_id: first_seq,
            publish_time: now_ms(),
            partition_key: b.key,
            ordering_key: b.ordering_key,
            num_messages_in_batch: Some(n as i32),
            highest_sequence_id: (last_seq != first_seq).then_some(last_seq),
            ..Default::default()
        };
        if let BatchingType::EntryBucket { .. } = self.cfg.batching_type {
            metadata.entry_hash_min = Some(b.hash_min);
            metadata.entry_hash_max = Some(b.hash_max);
        }
        let compressed = match self.compress(&mut metadata, &raw) {
            Ok(c) => c,
            Err(e) => {
                for r in b.replies {
                    let _ = r.send(Err(e.clone()));
                }
                self.permits.add_permits(n);
                return Err(e);
            }
        };
        let body = match compressed {
            Some(c) => Bytes::from(c),
            None => raw,
        };
        let frame = self.frame(first_seq, last_seq, n as i32, &metadata, body);
        self.enqueue(st, first_seq, frame, b.replies, true);
        Ok(())
    }

    pub(super) fn flush_all(&self) {
        let mut st = self.state.lock().expect("producer lock");
        let keys: Vec<BatchKey> = st.batches.keys().cloned().collect();
        let mut keyed: Vec<(u64, BatchKey)> = keys
            .into_iter()
            .map(|k| (st.batches[&k].opened, k))
            .collect();
        keyed.sort_by_key(|(s, _)| *s);
        for (_, k) in keyed {
            if let Err(e) = self.flush_batch(&mut st, &k) {
                warn!(topic = %self.topic, error = %e, "batch dropped");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_prefix_matches_the_wire_encoder() {
        let meta = MessageMetadata {
            producer_name: "p".into(),
            sequence_id: 42,
            publish_time: 7,
            num_messages_in_batch: Some(3),
            ..Default::default()
        };
        let body = b"some batch bytes".repeat(100);
        let mut joined = section_prefix(&meta, &body);
        joined.extend_from_slice(&body);
        assert_eq!(&joined[..], &payload::encode(&meta, &body, true)[..]);
    }
}
