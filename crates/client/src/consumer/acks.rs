//! Acknowledgements: individual and cumulative acks (batch messages by index until their whole
//! entry is acked), negative acks, redelivery, and the give-back of PIP-84's consumer epochs (a
//! redeliver-all that drops what was sent before it).

use strobe_model::{MessageId, SubType};
use strobe_wire::commands;
use strobe_wire::proto::MessageIdData;
use tokio::time::Instant;

use super::grouping::{GiveBack, redeliver_all};
use super::{Consumer, Message};
use crate::error::Result;

impl Consumer {
    pub(crate) fn give_back_handle(&self) -> GiveBack {
        GiveBack {
            consumer_id: self.id,
            epoch: self.epoch.clone(),
            acks: self.acks.clone(),
        }
    }

    /// Drops what is queued once the epoch was raised (from outside: a
    /// transaction), and grants its permits again: the broker sends it again.
    pub(super) fn drop_stale(&mut self) {
        let epoch = self.epoch.current();
        if epoch == self.queue_epoch {
            return;
        }
        self.queue_epoch = epoch;
        let cleared = self.queue.len() as u32;
        self.queue.clear();
        self.trackers.clear();
        if cleared > 0 {
            let _ = self.conn.send_command(commands::flow(self.id, cleared));
        }
    }

    fn push_ack(&self, id: MessageIdData) {
        let mut a = self.acks.lock().expect("ack lock");
        a.individual.push(id);
        a.wake.notify_one();
        if self.cfg.ack_group_time.is_zero() || a.individual.len() >= 1000 {
            a.flush(self.id);
        }
    }

    /// Acknowledges one message.
    pub fn ack(&mut self, msg: &Message) -> Result<()> {
        self.ack_id(&msg.id)
    }

    pub fn ack_id(&mut self, id: &MessageId) -> Result<()> {
        let entry = commands::message_id(id.position.ledger_id, id.position.entry_id);
        if id.batch_size <= 1 || id.batch_index < 0 {
            self.push_ack(entry);
            return Ok(());
        }
        let Some(bits) = self.trackers.get_mut(&id.position) else {
            self.push_ack(entry);
            return Ok(());
        };
        let i = id.batch_index as usize;
        if let Some(w) = bits.get_mut(i / 64) {
            *w &= !(1u64 << (i % 64));
        }
        if bits.iter().all(|w| *w == 0) {
            self.trackers.remove(&id.position);
            self.push_ack(entry);
        } else if self.cfg.batch_index_ack {
            let mut d = entry;
            d.ack_set = bits.iter().map(|w| *w as i64).collect();
            self.push_ack(d);
        }
        Ok(())
    }

    /// Acknowledges every message up to and including this one (individual
    /// acks on Key_Shared, which forbids cumulative ones).
    pub fn ack_cumulative(&mut self, msg: &Message) -> Result<()> {
        if self.cfg.sub_type == SubType::KeyShared || self.cfg.sub_type == SubType::Shared {
            return self.ack(msg);
        }
        let id = msg.id;
        let mut d = commands::message_id(id.position.ledger_id, id.position.entry_id);
        if id.batch_size > 1 && id.batch_index >= 0 && id.batch_index < id.batch_size - 1 {
            if self.cfg.batch_index_ack {
                let n = id.batch_size as usize;
                let mut bits = vec![0u64; n.div_ceil(64)];
                for i in (id.batch_index as usize + 1)..n {
                    bits[i / 64] |= 1 << (i % 64);
                }
                d.ack_set = bits.into_iter().map(|w| w as i64).collect();
            } else {
                // The entry before; at a ledger's first entry, `(ledger, -1)`
                // as Pulsar's clients send it: everything before the ledger.
                d.entry_id = d.entry_id.wrapping_sub(1);
            }
        } else {
            self.trackers.remove(&id.position);
        }
        self.trackers.retain(|p, _| *p > id.position);
        let mut a = self.acks.lock().expect("ack lock");
        a.cumulative = Some(d);
        a.wake.notify_one();
        if self.cfg.ack_group_time.is_zero() {
            a.flush(self.id);
        }
        Ok(())
    }

    /// Sends grouped acks now.
    pub fn flush_acks(&self) {
        self.acks.lock().expect("ack lock").flush(self.id);
    }

    /// Asks for this message (its whole entry) again after the negative-ack delay.
    pub fn nack(&mut self, msg: &Message) -> Result<()> {
        self.trackers.remove(&msg.id.position);
        let mut d = commands::message_id(msg.id.position.ledger_id, msg.id.position.entry_id);
        if msg.id.partition >= 0 {
            d.partition = Some(msg.id.partition);
        }
        let due = Instant::now() + self.cfg.nack_delay;
        let mut a = self.acks.lock().expect("ack lock");
        a.nacks.push((due, d));
        a.wake.notify_one();
        Ok(())
    }

    /// Asks the broker to redeliver everything delivered and not acked.
    pub fn redeliver_unacknowledged(&mut self) -> Result<()> {
        let cleared = self.queue.len() as u32;
        self.queue.clear();
        self.trackers.clear();
        self.queue_epoch = self.epoch.raise();
        self.conn
            .send_command(redeliver_all(self.id, self.queue_epoch))?;
        if cleared > 0 {
            self.conn.send_command(commands::flow(self.id, cleared))?;
        }
        Ok(())
    }
}
