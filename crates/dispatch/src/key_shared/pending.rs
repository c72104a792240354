//! Entries delivered and not yet acked, per consumer, each with its sticky hash
//! (Pulsar's per-consumer `PendingAcksMap`, here one structure for the whole
//! subscription so an ack finds its holder without asking every consumer).

use std::collections::{BTreeMap, HashMap};

use strobe_model::Position;

use super::consumer_id::ConsumerId;

/// One delivered, unacked entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingAck {
    pub hash: u32,
    /// Messages in the entry.
    pub batch_size: u32,
}

#[derive(Debug, Clone, Default)]
pub struct PendingAcks {
    by_consumer: HashMap<ConsumerId, BTreeMap<Position, PendingAck>>,
    holder: HashMap<Position, ConsumerId>,
}

impl PendingAcks {
    pub fn new() -> PendingAcks {
        PendingAcks::default()
    }

    /// Records a delivery. A position already pending elsewhere moves.
    pub fn add(&mut self, consumer: ConsumerId, position: Position, ack: PendingAck) {
        if let Some(prev) = self.holder.insert(position, consumer)
            && prev != consumer
            && let Some(m) = self.by_consumer.get_mut(&prev)
        {
            m.remove(&position);
        }
        self.by_consumer
            .entry(consumer)
            .or_default()
            .insert(position, ack);
    }

    /// Removes a position from whoever holds it.
    pub fn remove(&mut self, position: Position) -> Option<(ConsumerId, PendingAck)> {
        let consumer = self.holder.remove(&position)?;
        let ack = self.by_consumer.get_mut(&consumer)?.remove(&position)?;
        Some((consumer, ack))
    }

    /// Removes and returns everything a consumer holds, in position order.
    pub fn remove_consumer(&mut self, consumer: ConsumerId) -> Vec<(Position, PendingAck)> {
        let m = self.by_consumer.remove(&consumer).unwrap_or_default();
        for p in m.keys() {
            self.holder.remove(p);
        }
        m.into_iter().collect()
    }

    pub fn holder(&self, position: Position) -> Option<ConsumerId> {
        self.holder.get(&position).copied()
    }

    /// A consumer's pending entries in position order.
    pub fn of(&self, consumer: ConsumerId) -> impl Iterator<Item = (Position, PendingAck)> + '_ {
        self.by_consumer
            .get(&consumer)
            .into_iter()
            .flat_map(|m| m.iter().map(|(p, a)| (*p, *a)))
    }

    /// How many entries a consumer holds.
    pub fn count(&self, consumer: ConsumerId) -> usize {
        self.by_consumer.get(&consumer).map_or(0, BTreeMap::len)
    }

    pub fn len(&self) -> usize {
        self.holder.len()
    }

    pub fn is_empty(&self) -> bool {
        self.holder.is_empty()
    }
}
