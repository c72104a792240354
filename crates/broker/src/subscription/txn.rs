//! A subscription's pending acks (see `strobe_txn::pending_ack`): a transactional ACK is checked
//! for conflicts, hidden from delivery and persisted before its receipt; the outcome turns the
//! acks into cursor acks (commit, flushed before the participant says it is done) or delivers
//! the messages again (abort).

use strobe_dispatch::DelayedEntry;
use strobe_ledger::Position;
use strobe_model::TxnId;
use strobe_txn::participant;
use strobe_txn::paths::Participant;
use strobe_txn::pending_ack::AckedEntry;
use strobe_wire::proto::{CommandAck, command_ack::AckType};
use tracing::{debug, warn};

use super::acks::BEFORE_LEDGER;
use super::actor::Subscription;
use super::handle::Reply;
use super::kind::Kind;
use crate::BrokerError;

impl Subscription {
    /// Restores the pending acks persisted for this subscription (before the first dispatch).
    pub(super) async fn load_pending_acks(&mut self) {
        let Some(ctx) = self.topic.txn_context() else {
            return;
        };
        if !self.durable {
            return;
        }
        let topic = self.topic.name().to_string();
        match participant::load_pending_acks(&*ctx.store, &topic, &self.name).await {
            Ok(records) => {
                for (t, acks) in records {
                    self.pending.restore(t, acks);
                    ctx.hold(t, &topic);
                    ctx.check(t);
                }
            }
            Err(e) => warn!(error = %e, "pending acks could not be loaded"),
        }
    }

    /// An ACK in transaction `t`: refused on a conflict, else held and persisted, and answered
    /// once the record is durable.
    pub(super) fn txn_ack(
        &mut self,
        conn_id: u64,
        consumer_id: u64,
        ack: CommandAck,
        t: TxnId,
        reply: Option<Reply<()>>,
    ) {
        let answer = |reply: Option<Reply<()>>, r: Result<(), BrokerError>| {
            if let Some(reply) = reply {
                let _ = reply.send(r);
            } else if let Err(e) = r {
                debug!(error = %e, "transactional ack without a request id refused");
            }
        };
        let Some(ctx) = self.topic.txn_context().filter(|_| self.durable) else {
            return answer(
                reply,
                Err(BrokerError::NotAllowed(format!(
                    "subscription {} does not take transactional acks",
                    self.name
                ))),
            );
        };
        if self.find_mut(conn_id, consumer_id).is_none() {
            return answer(
                reply,
                Err(BrokerError::ConsumerNotFound(format!(
                    "consumer {consumer_id} is not connected to subscription {}",
                    self.name
                ))),
            );
        }
        let cumulative = ack.ack_type() == AckType::Cumulative;
        if cumulative && !self.kind.allows_cumulative_ack() {
            return answer(
                reply,
                Err(BrokerError::NotAllowed(format!(
                    "cumulative acknowledgement is not allowed on Shared subscription {}",
                    self.name
                ))),
            );
        }
        let entries: Vec<AckedEntry> = ack
            .message_id
            .iter()
            .filter_map(|id| {
                if id.entry_id == BEFORE_LEDGER {
                    // `(ledger, -1)`: everything before the ledger, that is
                    // up to the entry before it (individually: nothing).
                    let before = self
                        .cursor
                        .position_before(Position::new(id.ledger_id, 0))
                        .filter(|_| cumulative)?;
                    return Some(AckedEntry::from_wire(before, 1, &[]));
                }
                let p = Position::new(id.ledger_id, id.entry_id);
                Some(AckedEntry::from_wire(
                    p,
                    self.batch_size_of(id),
                    &id.ack_set,
                ))
            })
            .collect();
        if entries.is_empty() {
            return answer(reply, Ok(()));
        }
        // Checked first: an instance whose topic is moving takes no ack
        // (the next owner, having read the records already, would never
        // learn of it, and the commit would lose it).
        let fence = match self.topic.fence() {
            Ok(f) => f,
            Err(e) => return answer(reply, Err(e)),
        };
        let cursor = self.cursor.clone();
        if let Err(why) = self
            .pending
            .add(t, &entries, cumulative, |p| cursor.is_acked(p))
        {
            return answer(
                reply,
                Err(strobe_txn::TxnError::Conflict(format!(
                    "transaction {t} cannot ack on subscription {}: {why}",
                    self.name
                ))
                .into()),
            );
        }
        if cumulative {
            self.cumulative_by = Some((t, conn_id, consumer_id));
        }
        // Held: no consumer gets these again while the transaction is open.
        let held: Vec<Position> = if cumulative {
            // Ending inside a batch, the ack leaves that entry's later
            // indexes to acknowledge: the entry stays the consumer's.
            let last = entries.last();
            let upto = last.map(AckedEntry::position);
            let partial = last.is_some_and(|e| e.batch.is_some());
            self.consumers
                .iter()
                .flat_map(|c| c.unacked.keys().copied())
                .filter(|p| upto.is_some_and(|u| *p < u || (*p == u && !partial)))
                .collect()
        } else {
            entries
                .iter()
                .filter(|e| e.batch.is_none())
                .map(AckedEntry::position)
                .collect()
        };
        for p in held {
            self.forget(p);
        }
        let topic = self.topic.name().to_string();
        ctx.hold(t, &topic);
        let record = self.pending.of(t).cloned().unwrap_or_default();
        let sub = self.name.clone();
        tokio::spawn(async move {
            let r =
                participant::save_pending_acks(&*ctx.store, &topic, &sub, t, &record, &fence).await;
            answer(reply, r.map_err(|e| fenced(e, &topic)));
        });
    }

    /// `t`'s outcome: commit makes its acks real (and durable before saying so), abort delivers
    /// its messages again. `listed`: this subscription is registered with the coordinator.
    pub(super) async fn end_txn(
        &mut self,
        t: TxnId,
        commit: bool,
        listed: bool,
    ) -> Result<(), BrokerError> {
        let Some(ctx) = self.topic.txn_context() else {
            return Ok(());
        };
        let topic = self.topic.name().to_string();
        // An instance whose topic is moving applies nothing: its owner does.
        let fence = self.topic.fence()?;
        // Read, not taken: a commit's acks stay pending (hiding their
        // messages) until the cursor has them durably, so an attempt that
        // fails part-way is made again whole on the next check. Taken
        // first, a commit whose cursor flush failed had its record deleted
        // by the retry; the subscription, loaded again elsewhere from the
        // cursor without those acks, delivered the batch a second time.
        let held = self.pending.of(t).cloned();
        // A registered participant that holds nothing in memory asks the
        // store before saying it is done: a record there that this instance
        // never loaded (stored by an instance elsewhere) is applied like a
        // loaded one. Said done without it, the coordinator let the header
        // go, and the next owner, finding the record and no header, took a
        // committed transaction's acks for aborted and delivered them again
        // (the fault campaign's seed 105: a batch transformed twice).
        let stored = match (&held, listed && !self.records_left.contains(&t)) {
            (None, true) => {
                participant::pending_acks_of(&*ctx.store, &topic, &self.name, t).await?
            }
            _ => None,
        };
        let Some(acks) = held.or_else(|| {
            stored.inspect(|a| {
                self.pending.restore(t, a.clone());
            })
        }) else {
            // Given back by an earlier attempt (an abort) whose record
            // deletion failed: the record goes now, or every load would
            // restore it (and its abort rewind the subscription again).
            if self.records_left.contains(&t) {
                participant::delete_pending_acks(&*ctx.store, &topic, &self.name, t, &fence)
                    .await?;
                self.records_left.remove(&t);
            }
            if listed {
                let me = Participant::Subscription {
                    topic,
                    subscription: self.name.clone(),
                };
                participant::applied(&*ctx.store, t, &me, &fence).await?;
            }
            return Ok(());
        };
        if commit {
            for e in &acks.individual {
                let p = e.position();
                match e.unacked_set() {
                    None => self.cursor.delete(&[p]),
                    Some((size, set)) => self.cursor.ack_batch_set(p, size, &set),
                }
                if self.cursor.is_acked(p) {
                    self.forget(p);
                }
            }
            if let Some(c) = acks.cumulative_entry() {
                let p = c.position();
                match c.unacked_set() {
                    None => self.cursor.mark_delete(p),
                    // Inside a batch: the entries before it, and the
                    // indexes acked (as a plain cumulative ack does). Before,
                    // the whole entry was marked deleted, and the batch's
                    // later messages were lost to a consumer that
                    // subscribed again before acknowledging them.
                    Some((size, set)) => {
                        self.cursor.mark_delete_before(p);
                        self.cursor.ack_batch_set(p, size, &set);
                    }
                }
            }
            self.cursor.flush().await?;
            self.forget_pending(t);
        } else {
            self.forget_pending(t);
            // Batch-index acks too: their entry goes out again, and the
            // cursor's ack set hides the indexes acked for good (before,
            // an aborted batch-index ack was never delivered again: the
            // consumer-transform-produce test on a batching V5 producer's
            // topic lost the aborted batch).
            let mut released: Vec<Position> =
                acks.individual.iter().map(AckedEntry::position).collect();
            released.sort();
            released.dedup();
            self.release(released).await;
            if let Some((l, e)) = acks.cumulative {
                self.give_back(vec![Position::new(l, e)]);
            }
        }
        if let Err(e) =
            participant::delete_pending_acks(&*ctx.store, &topic, &self.name, t, &fence).await
        {
            self.records_left.insert(t);
            return Err(fenced(e, &topic));
        }
        let me = Participant::Subscription {
            topic: topic.clone(),
            subscription: self.name.clone(),
        };
        participant::applied(&*ctx.store, t, &me, &fence)
            .await
            .map_err(|e| fenced(e, &topic))?;
        Ok(())
    }

    /// `t`'s acks are no longer pending (applied, or given back).
    fn forget_pending(&mut self, t: TxnId) {
        self.pending.take(t);
        if self.cumulative_by.is_some_and(|(o, _, _)| o == t) {
            self.cumulative_by = None;
        }
    }

    /// Whether entry `p` must wait before going to consumer `i`: on an
    /// Exclusive or Failover subscription, a transaction holds a cumulative
    /// ack below `p` that another consumer made (or one of a consumer gone,
    /// or restored from the store). Should the transaction abort, its
    /// messages are delivered again from the ack's start; a consumer that
    /// had meanwhile been given the entries after it would take them first,
    /// and its own cumulative ack, further on, would then cover messages it
    /// was redelivered but never processed (the fault campaign's consume-
    /// transform-produce lost whole batches this way). The consumer that made
    /// the ack goes on receiving: it knows what it acked, and an abort's
    /// redelivery is its to handle, as with Pulsar.
    pub(super) fn held_for_txn(&self, p: Position, i: usize) -> bool {
        let Some((t, c)) = self.pending.cumulative() else {
            return false;
        };
        // An ack ending inside a batch leaves that entry's later messages to
        // deliver: held like what follows (before, the entry was hidden,
        // the read moved past it, and once the commit acked its first
        // messages the rest were never delivered).
        let covered = p < c || (p == c && !self.pending.cumulative_is_partial());
        if covered || !matches!(self.kind, Kind::SingleActive { .. }) {
            return false;
        }
        let to = &self.consumers[i];
        self.cumulative_by != Some((t, to.conn_id, to.consumer_id))
    }

    /// Messages an aborted transaction had acked: delivered again.
    async fn release(&mut self, positions: Vec<Position>) {
        match &mut self.kind {
            Kind::KeyShared { .. } => {
                let mut due = Vec::new();
                for p in positions {
                    let Ok(entries) = self.topic.ledger().read(p, 1).await else {
                        continue;
                    };
                    let Some(e) = entries.into_iter().next().filter(|e| e.position == p) else {
                        continue;
                    };
                    let Ok(meta) = strobe_wire::payload::peek_metadata(&e.data) else {
                        continue;
                    };
                    due.push(DelayedEntry {
                        position: p,
                        hash: super::dispatch::key_hash(&self.kind, &meta),
                        messages: strobe_wire::batch::message_count(&meta),
                    });
                }
                self.replay_due(due);
            }
            other => {
                if let Some(replay) = other.replay_mut() {
                    replay.extend(positions);
                }
            }
        }
    }
}

/// A participant's write refused by its fence (the topic's bundle moved
/// on) is the client's `ServiceNotReady`: the topic is elsewhere now.
fn fenced(e: strobe_txn::TxnError, topic: &str) -> BrokerError {
    match e {
        strobe_txn::TxnError::Metadata(
            strobe_metadata::MetadataError::BadVersion { ref key, .. }
            | strobe_metadata::MetadataError::NotFound(ref key),
        ) if key.starts_with("/namespace/") => BrokerError::ServiceNotReady(format!(
            "topic {topic} moved to another broker; try again"
        )),
        other => other.into(),
    }
}
