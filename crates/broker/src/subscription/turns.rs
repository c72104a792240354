//! Where the subscription kinds behave differently, as the subscription's
//! methods: who takes the next entry, how many entries there is room for,
//! what happens to a leaving consumer's messages, how a redelivery or a due
//! delayed entry is queued, who is active.

use std::collections::HashMap;

use strobe_dispatch::key_shared::ConsumerId;
use strobe_dispatch::{ConsumerKey, DelayedEntry, failover_active};
use strobe_ledger::Position;
use strobe_model::SubType;
use strobe_wire::{OutFrame, commands};

use super::actor::Subscription;
use super::kind::Kind;

impl Subscription {
    /// The unacknowledged messages a consumer may hold, if limited: only
    /// Shared subscriptions limit them, as Pulsar's
    /// `maxUnackedMessagesPerConsumer` (Key_Shared counts them in
    /// [`Subscription::ks_permits`]). An Exclusive or Failover consumer, a
    /// reader above all, which never acknowledges, would otherwise stop
    /// at the limit.
    fn unacked_limit(&self) -> Option<u64> {
        let max = self.max_unacked_now();
        match self.kind {
            Kind::Shared { .. } if max > 0 => Some(u64::from(max)),
            _ => None,
        }
    }

    /// The limit per consumer in force: the topic's policy, else the
    /// broker's setting (0: none).
    fn max_unacked_now(&self) -> u32 {
        self.topic
            .dispatch_policy()
            .and_then(|p| p.max_unacked_per_consumer())
            .unwrap_or(self.max_unacked)
    }

    /// Whether the subscription holds as many unacknowledged messages as its
    /// policy allows (Pulsar's `maxUnackedMessagesPerSubscription`; Shared
    /// and Key_Shared only): then no consumer takes more until acks come.
    fn subscription_full(&self) -> bool {
        let max = self
            .topic
            .dispatch_policy()
            .map_or(0, |p| p.max_unacked_per_subscription());
        max > 0
            && matches!(self.kind, Kind::Shared { .. } | Kind::KeyShared { .. })
            && self
                .consumers
                .iter()
                .map(|c| c.unacked_messages)
                .sum::<u64>()
                >= u64::from(max)
    }

    /// Whether consumer `i` can take another entry now.
    pub(super) fn can_take(&self, i: usize) -> bool {
        let c = &self.consumers[i];
        c.permits > 0
            && self.unacked_limit().is_none_or(|m| c.unacked_messages < m)
            && !self.subscription_full()
    }

    /// The consumer whose turn it is, if it can take an entry.
    pub(super) fn pick(&mut self) -> Option<usize> {
        if let Kind::SingleActive { active, .. } = &self.kind {
            return active.filter(|&i| self.can_take(i));
        }
        let ready: Vec<u32> = (0..self.consumers.len())
            .map(|i| u32::from(self.can_take(i)))
            .collect();
        match &mut self.kind {
            Kind::Shared { selector, .. } => selector.pick(&ready),
            _ => None,
        }
    }

    /// Whether any consumer that would be picked can take an entry.
    pub(super) fn any_ready(&self) -> bool {
        match &self.kind {
            Kind::Shared { .. } => (0..self.consumers.len()).any(|i| self.can_take(i)),
            Kind::SingleActive { active, .. } => active.is_some_and(|i| self.can_take(i)),
            Kind::Idle | Kind::KeyShared { .. } => false,
        }
    }

    /// Messages the consumers that would be picked can take now.
    pub(super) fn room(&self) -> i64 {
        let room = |i: usize| -> i64 {
            let c = &self.consumers[i];
            if !self.can_take(i) {
                return 0;
            }
            let mut r = c.permits;
            if let Some(m) = self.unacked_limit() {
                r = r.min(m as i64 - c.unacked_messages as i64);
            }
            r.max(0)
        };
        match &self.kind {
            Kind::Shared { .. } => (0..self.consumers.len()).map(room).sum(),
            Kind::SingleActive { active, .. } => active.map_or(0, room),
            Kind::Idle | Kind::KeyShared { .. } => 0,
        }
    }

    /// Entries that must be delivered again after a consumer left or the
    /// active one changed: to the replay queue (Shared), or a rewind of the
    /// cursor (one active consumer: it gets everything unacked, in order).
    pub(super) fn give_back(&mut self, positions: Vec<Position>) {
        self.redelivery.increment_all(&positions);
        match &mut self.kind {
            Kind::Shared { replay, .. } => replay.extend(positions),
            Kind::SingleActive { replay, .. } if !positions.is_empty() => {
                replay.clear();
                for c in &mut self.consumers {
                    c.unacked.clear();
                    c.unacked_messages = 0;
                }
                self.delayed.clear();
                self.cursor.rewind();
            }
            _ => {}
        }
    }

    /// A consumer left: its unacked entries go back (Key_Shared: into the
    /// dispatcher's replay queue, in key order).
    pub(super) fn consumer_left(&mut self, seq: u64, unacked: Vec<Position>) {
        match &mut self.kind {
            Kind::KeyShared { ks, .. } => {
                let out = ks.remove_consumer(ConsumerId(seq));
                self.redelivery.increment_all(&out.replay);
            }
            _ => self.give_back(unacked),
        }
        if self.consumers.is_empty() {
            self.kind = Kind::Idle;
        } else if let Kind::SingleActive { active, .. } = &mut self.kind {
            *active = None;
        }
        self.update_active();
    }

    /// Recomputes the active consumer of Exclusive/Failover and tells the
    /// consumers when it changes.
    pub(super) fn update_active(&mut self) {
        let Kind::SingleActive {
            sub_type, active, ..
        } = &self.kind
        else {
            return;
        };
        let (sub_type, old) = (*sub_type, *active);
        let keys: Vec<ConsumerKey<'_>> = self
            .consumers
            .iter()
            .map(|c| ConsumerKey {
                priority_level: c.priority_level,
                name: &c.name,
                seq: c.seq,
            })
            .collect();
        let new = failover_active(&keys, self.topic.name().partition());
        let old_id = old
            .and_then(|i| self.consumers.get(i))
            .map(|c| (c.conn_id, c.consumer_id));
        let new_id = new.map(|i| (self.consumers[i].conn_id, self.consumers[i].consumer_id));
        if let Kind::SingleActive { active, .. } = &mut self.kind {
            *active = new;
        }
        if old_id == new_id && old_id.is_some() {
            return;
        }
        if sub_type == SubType::Failover {
            // The new active consumer gets everything not acknowledged.
            let all: Vec<Position> = self
                .consumers
                .iter()
                .flat_map(|c| c.unacked.keys().copied())
                .collect();
            self.give_back(all);
            for c in &self.consumers {
                if c.protocol_version >= 12 {
                    let is_active = Some((c.conn_id, c.consumer_id)) == new_id;
                    crate::tell::tell(
                        &c.tx,
                        OutFrame::command(commands::active_consumer_change(
                            c.consumer_id,
                            is_active,
                        )),
                    );
                }
            }
        }
    }

    /// REDELIVER_UNACKNOWLEDGED_MESSAGES of one consumer: `ids` (all its
    /// unacked messages when empty) are delivered again. A higher consumer
    /// epoch (PIP-84) is taken before anything is delivered again: what was
    /// sent before carries the old one, and the client drops it.
    pub(super) fn redeliver(
        &mut self,
        conn_id: u64,
        consumer_id: u64,
        ids: Vec<strobe_wire::proto::MessageIdData>,
        epoch: Option<u64>,
    ) {
        let redeliver_all = ids.is_empty();
        let Some(c) = self.find_mut(conn_id, consumer_id) else {
            return;
        };
        if let Some(e) = epoch {
            c.epoch = Some(c.epoch.map_or(e, |old| old.max(e)));
        }
        let seq = c.seq;
        let wanted: Option<Vec<Position>> = (!redeliver_all).then(|| {
            ids.iter()
                .map(|id| Position::new(id.ledger_id, id.entry_id))
                .collect()
        });
        let mut positions = Vec::new();
        match &wanted {
            None => {
                positions.extend(c.unacked.keys().copied());
                c.unacked.clear();
                c.unacked_messages = 0;
            }
            Some(ps) => {
                for p in ps {
                    if let Some(n) = c.unacked.remove(p) {
                        c.unacked_messages = c.unacked_messages.saturating_sub(u64::from(n));
                        positions.push(*p);
                    }
                }
            }
        }
        match &mut self.kind {
            Kind::KeyShared { ks, .. } => {
                self.redelivery.increment_all(&positions);
                ks.redeliver(ConsumerId(seq), Some(&positions));
            }
            Kind::Shared { replay, .. } => {
                self.redelivery.increment_all(&positions);
                replay.extend(positions);
            }
            Kind::SingleActive { replay, .. } if !redeliver_all => {
                self.redelivery.increment_all(&positions);
                replay.extend(positions);
            }
            _ => self.give_back(positions),
        }
    }

    /// Delayed entries that fell due go to the replay queue; the filter then
    /// finds their time has passed.
    pub(super) fn replay_due(&mut self, due: Vec<DelayedEntry>) {
        match &mut self.kind {
            Kind::KeyShared { ks, .. } => {
                for d in due {
                    ks.add_to_replay(d.position, d.hash, d.messages);
                }
            }
            other => {
                if let Some(replay) = other.replay_mut() {
                    replay.extend(due.into_iter().map(|d| d.position));
                }
            }
        }
    }

    /// Key_Shared: each consumer's permits as the dispatcher counts them (0
    /// once it holds `max_unacked` messages).
    pub(super) fn ks_permits(&self) -> HashMap<ConsumerId, u32> {
        let max = self.max_unacked_now();
        let sub_full = self.subscription_full();
        self.consumers
            .iter()
            .map(|c| {
                let full = sub_full || (max != 0 && c.unacked_messages >= u64::from(max));
                let p = if full {
                    0
                } else {
                    c.permits.clamp(0, i64::from(u32::MAX)) as u32
                };
                (ConsumerId(c.seq), p)
            })
            .collect()
    }
}
