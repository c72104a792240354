//! What a consumer's acknowledgements share with its ticker and with transactions: the acks
//! and negative acks waiting to be sent in a group ([`AckState`]), and the handle a
//! transaction gives back a consumer's messages with ([`GiveBack`]).

use std::sync::{Arc, Mutex};

use strobe_wire::commands;
use strobe_wire::proto::{CommandRedeliverUnacknowledgedMessages, MessageIdData};
use tokio::time::Instant;

use crate::connection::Connection;
use crate::epoch::Epoch;

#[derive(Debug, Default)]
pub(super) struct AckState {
    pub(super) conn: Option<Arc<Connection>>,
    pub(super) individual: Vec<MessageIdData>,
    pub(super) cumulative: Option<MessageIdData>,
    pub(super) nacks: Vec<(Instant, MessageIdData)>,
    /// Told when an ack or a negative ack is queued: the ticker waits on it
    /// while there is nothing to send.
    pub(super) wake: Arc<tokio::sync::Notify>,
}

impl AckState {
    /// Nothing queued to send.
    pub(super) fn is_idle(&self) -> bool {
        self.individual.is_empty() && self.cumulative.is_none() && self.nacks.is_empty()
    }

    pub(super) fn flush(&mut self, consumer_id: u64) {
        let Some(conn) = &self.conn else { return };
        if !self.individual.is_empty() {
            let ids = std::mem::take(&mut self.individual);
            let _ = conn.send_command(commands::ack(consumer_id, false, ids, None));
        }
        if let Some(id) = self.cumulative.take() {
            let _ = conn.send_command(commands::ack(consumer_id, true, vec![id], None));
        }
    }

    pub(super) fn redeliver_due(&mut self, consumer_id: u64, now: Instant) {
        if self.nacks.is_empty() {
            return;
        }
        let Some(conn) = &self.conn else { return };
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.nacks)
            .into_iter()
            .partition(|(t, _)| *t <= now);
        self.nacks = keep;
        if !due.is_empty() {
            let ids = due.into_iter().map(|(_, id)| id).collect();
            let _ = conn.send_command(CommandRedeliverUnacknowledgedMessages {
                consumer_id,
                message_ids: ids,
                consumer_epoch: None,
            });
        }
    }
}

/// Gives back everything a consumer was sent and has not acknowledged, from
/// outside it: Pulsar's client does this for the consumers of a transaction
/// that acknowledged cumulatively and aborted.
#[derive(Debug, Clone)]
pub(crate) struct GiveBack {
    pub(super) consumer_id: u64,
    pub(super) epoch: Epoch,
    pub(super) acks: Arc<Mutex<AckState>>,
}

impl GiveBack {
    pub(crate) fn give_back(&self) {
        let epoch = self.epoch.raise();
        let a = self.acks.lock().expect("ack lock");
        if let Some(conn) = &a.conn {
            let _ = conn.send_command(redeliver_all(self.consumer_id, epoch));
        }
    }

    pub(crate) fn is_for(&self, other: &GiveBack) -> bool {
        self.consumer_id == other.consumer_id && self.epoch.same(&other.epoch)
    }
}

pub(super) fn redeliver_all(
    consumer_id: u64,
    epoch: u64,
) -> CommandRedeliverUnacknowledgedMessages {
    CommandRedeliverUnacknowledgedMessages {
        consumer_id,
        message_ids: Vec::new(),
        consumer_epoch: Some(epoch),
    }
}
