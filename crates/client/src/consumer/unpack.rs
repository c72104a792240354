//! A MESSAGE frame made into messages when the application asks for the next: verified,
//! decompressed, split by batch index, with what is already acknowledged, before a seek's
//! start or sent before the latest redeliver-all left out.

use std::sync::Arc;

use bytes::Bytes;
use strobe_model::{MessageId, Position};
use strobe_wire::proto;
use strobe_wire::{batch, payload};

use super::{Consumer, Message};
use crate::compression::decompress;
use crate::error::Result;

impl Consumer {
    fn skipped(&self, id: &MessageId) -> bool {
        let Some((start, inclusive)) = &self.skip else {
            return false;
        };
        if id.position != start.position {
            return id.position < start.position;
        }
        if start.batch_index < 0 {
            return !inclusive;
        }
        if *inclusive {
            id.batch_index < start.batch_index
        } else {
            id.batch_index <= start.batch_index
        }
    }

    pub(super) fn unpack(&mut self, cmd: proto::CommandMessage, data: Bytes) -> Result<()> {
        let p = payload::parse(&data)?;
        let mut meta = p.metadata;
        if self.epoch.is_stale(cmd.consumer_epoch) {
            // Sent before the latest redeliver-all: it comes again.
            self.consumed += batch::message_count(&meta).max(1);
            self.maybe_flow();
            return Ok(());
        }
        let position = Position::new(cmd.message_id.ledger_id, cmd.message_id.entry_id);
        let partition = cmd.message_id.partition.unwrap_or(-1);
        let redelivery_count = cmd.redelivery_count.unwrap_or(0);
        let body = decompress(
            meta.compression(),
            &p.payload,
            meta.uncompressed_size.unwrap_or(0) as usize,
            self.conn.max_message_size + strobe_wire::FRAME_PADDING,
        )?;
        meta.compression = None;
        let producer_name: Arc<str> = meta.producer_name.as_str().into();
        let hash_range = meta.entry_hash_min.zip(meta.entry_hash_max);
        let props = |kv: &[proto::KeyValue]| -> Vec<(String, String)> {
            kv.iter()
                .map(|k| (k.key.clone(), k.value.clone()))
                .collect()
        };
        if !batch::is_batch(&meta) {
            let id = MessageId {
                position,
                partition,
                batch_index: -1,
                batch_size: 0,
            };
            if self.skipped(&id) {
                self.consumed += 1;
                self.maybe_flow();
                return Ok(());
            }
            self.queue.push_back(Message {
                id,
                topic: self.topic.clone(),
                payload: body,
                key: meta.partition_key.clone(),
                ordering_key: meta.ordering_key.clone(),
                properties: props(&meta.properties),
                publish_time: meta.publish_time,
                event_time: meta.event_time.filter(|t| *t > 0),
                producer_name,
                sequence_id: meta.sequence_id,
                redelivery_count,
                entry_hash_range: hash_range,
            });
            return Ok(());
        }
        let n = batch::message_count(&meta) as usize;
        let ack_set = &cmd.ack_set;
        let unacked = |i: usize| -> bool {
            ack_set.is_empty()
                || ack_set
                    .get(i / 64)
                    .is_some_and(|w| (*w as u64) >> (i % 64) & 1 == 1)
        };
        if n > 1 {
            let mut bits = vec![0u64; n.div_ceil(64)];
            for i in 0..n {
                if unacked(i) {
                    bits[i / 64] |= 1 << (i % 64);
                }
            }
            self.trackers.insert(position, bits);
        }
        let mut skipped = 0;
        for (i, m) in batch::messages(&meta, &body)?.enumerate() {
            let m = m?;
            let id = MessageId {
                position,
                partition,
                batch_index: i as i32,
                batch_size: n as i32,
            };
            if !unacked(i) || self.skipped(&id) || m.metadata.compacted_out == Some(true) {
                skipped += 1;
                continue;
            }
            let s = m.metadata;
            self.queue.push_back(Message {
                id,
                topic: self.topic.clone(),
                payload: m.payload,
                key: s.partition_key,
                ordering_key: s.ordering_key,
                properties: props(&s.properties),
                publish_time: meta.publish_time,
                event_time: s.event_time.filter(|t| *t > 0),
                producer_name: producer_name.clone(),
                sequence_id: s.sequence_id.unwrap_or(meta.sequence_id + i as u64),
                redelivery_count,
                entry_hash_range: hash_range,
            });
        }
        if skipped > 0 {
            self.consumed += skipped;
            self.maybe_flow();
        }
        Ok(())
    }
}
