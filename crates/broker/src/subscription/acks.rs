//! The one acknowledgement path: every ACK (individual, cumulative, batch
//! index) and every expiry moves the cursor here, and what is acknowledged
//! leaves the consumers' unacked sets, the replay queues and the trackers
//! ([`Subscription::forget`]). Transactions' pending acks will attach here.

use strobe_ledger::Position;
use strobe_wire::proto::{CommandAck, command_ack::AckType};

use super::actor::Subscription;
use crate::BrokerError;

/// The entry id `-1` of a Java or C++ client's message id, as the wire's
/// unsigned field carries it: the position before a ledger's first entry.
pub(super) const BEFORE_LEDGER: u64 = u64::MAX;

impl Subscription {
    pub(super) fn ack(
        &mut self,
        conn_id: u64,
        consumer_id: u64,
        ack: CommandAck,
    ) -> Result<(), BrokerError> {
        // Acks from a consumer the subscription no longer has (closed by a seek,
        // say, with acks still in flight) must not touch the new position.
        if self.find_mut(conn_id, consumer_id).is_none() {
            return Err(BrokerError::ConsumerNotFound(format!(
                "consumer {consumer_id} is not connected to subscription {}",
                self.name
            )));
        }
        let cumulative = ack.ack_type() == AckType::Cumulative;
        if cumulative && !self.kind.allows_cumulative_ack() {
            return Err(BrokerError::NotAllowed(format!(
                "cumulative acknowledgement is not allowed on Shared subscription {}",
                self.name
            )));
        }
        for id in &ack.message_id {
            let p = Position::new(id.ledger_id, id.entry_id);
            let batch_size = self.batch_size_of(id);
            if cumulative {
                if id.entry_id == BEFORE_LEDGER {
                    // Pulsar's clients ack `(ledger, -1)` cumulatively for a
                    // batch message of a ledger's first entry without
                    // batch-index acks: everything before that ledger.
                    self.cursor
                        .mark_delete_before(Position::new(id.ledger_id, 0));
                } else if id.ack_set.is_empty() {
                    self.cursor.mark_delete(p);
                } else {
                    self.cursor.mark_delete_before(p);
                    self.cursor.ack_batch_set(p, batch_size, &id.ack_set);
                }
                let mut done: Vec<Position> = self
                    .consumers
                    .iter()
                    .flat_map(|c| c.unacked.range(..=p).map(|(k, _)| *k))
                    .collect();
                if let Some(replay) = self.kind.replay() {
                    done.extend(replay.range(..=p).copied());
                }
                for k in done {
                    if self.cursor.is_acked(k) {
                        self.forget(k);
                    }
                }
            } else {
                if id.ack_set.is_empty() {
                    self.cursor.delete(&[p]);
                } else {
                    self.cursor.ack_batch_set(p, batch_size, &id.ack_set);
                }
                if self.cursor.is_acked(p) {
                    self.forget(p);
                }
            }
        }
        Ok(())
    }

    /// The messages in the entry an ack names: as delivered, else as the client says, else as
    /// many as its ack set has bits.
    pub(super) fn batch_size_of(&self, id: &strobe_wire::proto::MessageIdData) -> u32 {
        let p = Position::new(id.ledger_id, id.entry_id);
        self.consumers
            .iter()
            .find_map(|c| c.unacked.get(&p).copied())
            .or(id.batch_size.map(|b| b.max(0) as u32))
            .unwrap_or((id.ack_set.len() * 64) as u32)
    }

    /// `p` is acknowledged: it leaves the consumers' unacked messages, the
    /// replay queue, the redelivery counts and the Key_Shared dispatcher's
    /// pending acks.
    pub(super) fn forget(&mut self, p: Position) {
        if let Some(ks) = self.kind.key_shared_mut() {
            ks.on_ack(p);
        }
        if let Some(replay) = self.kind.replay_mut() {
            replay.remove(&p);
        }
        for c in &mut self.consumers {
            if let Some(n) = c.unacked.remove(&p) {
                c.unacked_messages = c.unacked_messages.saturating_sub(u64::from(n));
            }
        }
        self.redelivery.remove(p);
    }
}
