//! Reading and sending: the dispatch loop of each kind (redeliveries first,
//! then new entries, as many as the consumers have permits for), the
//! compacted view for `read_compacted` subscriptions, and the one delivery
//! function every kind sends through.

use std::collections::HashMap;

use strobe_dispatch::key_shared::{ConsumerId, Decision, NextRead, ReadType, resolve_sticky_key};
use strobe_dispatch::permits_for_entry;
use strobe_ledger::{Entry, Position};
use strobe_wire::commands;
use strobe_wire::proto::MessageMetadata;
use tracing::warn;

use super::actor::Subscription;
use super::kind::Kind;
use crate::BrokerError;

/// The sticky-key hash of an entry, as the Key_Shared dispatcher computes it
/// (0 for the other kinds, which do not route by key).
pub(super) fn key_hash(kind: &Kind, meta: &MessageMetadata) -> u32 {
    let Some(ks) = kind.key_shared() else {
        return 0;
    };
    let key = resolve_sticky_key(
        meta.ordering_key.as_deref(),
        meta.partition_key.as_deref(),
        meta.partition_key_b64_encoded(),
        Some(&meta.producer_name),
        Some(meta.sequence_id),
    );
    ks.entry_hash(&key, meta.entry_hash_min)
}

impl Subscription {
    /// Sends as many entries as the consumers' permits allow.
    pub(super) async fn dispatch(&mut self) -> Result<(), BrokerError> {
        if self.dispatch_throttled() {
            return Ok(());
        }
        match self.kind {
            Kind::Idle => Ok(()),
            Kind::KeyShared { .. } => self.dispatch_key_shared().await,
            Kind::SingleActive { .. } | Kind::Shared { .. } => self.dispatch_in_order().await,
        }
    }

    /// Entries to read for the consumers that can take messages now: their
    /// permits (and room under the unacked limit) over the average messages
    /// per entry, at least 1 and at most `max_read`, as Pulsar's dispatchers
    /// size a read. Entries read beyond what the consumers can take are
    /// dropped and read again later, so a read sized by `max_read` alone
    /// would read large batches many times over for a consumer with room
    /// for one.
    fn read_budget(&self) -> usize {
        let Some(avg) = self.avg_msgs_per_entry else {
            return 1;
        };
        let entries = (self.room() as f64 / avg.max(1.0)).ceil();
        (entries as usize).clamp(1, self.max_read)
    }

    /// Up to `max` entries from the cursor's read position, counted in the
    /// topic's `entries_read`.
    async fn read_next(&self, max: usize) -> Result<Vec<Entry>, strobe_ledger::LedgerError> {
        let entries = self.cursor.read(max).await?;
        self.topic.count_read(entries.len() as u64);
        Ok(entries)
    }

    /// The entry at `p` (a redelivery), counted in the topic's `entries_read`.
    async fn read_at(&self, p: Position) -> Result<Option<Entry>, BrokerError> {
        let entries = self.topic.ledger().read(p, 1).await?;
        self.topic.count_read(entries.len() as u64);
        Ok(entries.into_iter().next().filter(|e| e.position == p))
    }

    /// Single active consumer and Shared: redeliveries first, oldest first,
    /// then new entries in order.
    async fn dispatch_in_order(&mut self) -> Result<(), BrokerError> {
        loop {
            if !self.any_ready() {
                if !self.topic.name().is_persistent() {
                    // Non-persistent: what no consumer can take now is dropped.
                    self.cursor.seek_read(self.topic.next_position());
                }
                return Ok(());
            }
            let allowed = self.dispatch_allowance();
            if allowed == Some(0) {
                return Ok(());
            }
            let next_replay = self.kind.replay().and_then(|r| r.iter().next().copied());
            if let Some(p) = next_replay {
                if let Some(r) = self.kind.replay_mut() {
                    r.remove(&p);
                }
                if self.cursor.is_acked(p) {
                    self.redelivery.remove(p);
                    continue;
                }
                let entry = match self.compacted_entry(p).await? {
                    Some(e) => Some(e),
                    None => self.read_at(p).await?,
                };
                match entry {
                    Some(e) => {
                        if !self.deliver(e).await {
                            if let Some(r) = self.kind.replay_mut() {
                                r.insert(p);
                            }
                            return Ok(());
                        }
                    }
                    None => self.redelivery.remove(p),
                }
                continue;
            }
            let entries = match self.compacted_read().await? {
                Some(e) => e,
                None => {
                    let budget = self.read_budget().min(allowed.unwrap_or(usize::MAX));
                    self.read_next(budget).await?
                }
            };
            tracing::trace!(read = entries.len(), from = %self.cursor.read_position(), "read");
            if entries.is_empty() {
                return Ok(());
            }
            let mut iter = entries.into_iter();
            while let Some(e) = iter.next() {
                let p = e.position;
                if !self.deliver(e).await {
                    // Nobody can take it now: read it again later.
                    self.cursor.seek_read(p);
                    return Ok(());
                }
                if !self.any_ready() {
                    if let Some(next) = iter.next() {
                        self.cursor.seek_read(next.position);
                    }
                    return Ok(());
                }
            }
        }
    }

    /// Filters one entry and sends it to the consumer whose turn it is.
    /// False when no consumer can take it (it stays undelivered).
    async fn deliver(&mut self, e: Entry) -> bool {
        let Some(meta) = self.filter(&e, true, key_hash) else {
            return true;
        };
        let Some(i) = self.pick() else { return false };
        if self.held_for_txn(e.position, i) {
            return false;
        }
        self.send_to(i, &e, &meta).await
    }

    /// A `read_compacted` subscription whose read position is at or below the
    /// compaction horizon reads the compacted view: the kept entries (with
    /// their original positions) not yet acknowledged; past the last of them
    /// the read position jumps to just after the horizon. None: read the topic.
    async fn compacted_read(&mut self) -> Result<Option<Vec<Entry>>, BrokerError> {
        if !self.read_compacted {
            return Ok(None);
        }
        let Some(view) = self.topic.compacted_view() else {
            return Ok(None);
        };
        loop {
            // Not moved onto a stored entry: the ledgers under the horizon
            // may be trimmed while the view still holds their kept entries.
            let rp = self.cursor.read_position_unmoved();
            if rp > view.horizon {
                return Ok(None);
            }
            let raw = view.read_from(rp, self.max_read).await?;
            let Some(last) = raw.last().map(|e| e.position) else {
                self.cursor.seek_read(Position::new(
                    view.horizon.ledger_id,
                    view.horizon.entry_id + 1,
                ));
                return Ok(None);
            };
            self.cursor
                .seek_read_unmoved(Position::new(last.ledger_id, last.entry_id + 1));
            let fresh: Vec<Entry> = raw
                .into_iter()
                .filter(|e| !self.cursor.is_acked(e.position))
                .collect();
            if !fresh.is_empty() {
                return Ok(Some(fresh));
            }
        }
    }

    /// For redelivery on a `read_compacted` subscription: the compacted entry
    /// at `p`, when `p` is at or below the horizon.
    async fn compacted_entry(&self, p: Position) -> Result<Option<Entry>, BrokerError> {
        if !self.read_compacted {
            return Ok(None);
        }
        match self.topic.compacted_view() {
            Some(view) if p <= view.horizon => view.get(p).await,
            _ => Ok(None),
        }
    }

    /// Key_Shared: the dispatcher of `strobe-dispatch` says what to read
    /// (its replay queue or new entries) and who gets each entry.
    async fn dispatch_key_shared(&mut self) -> Result<(), BrokerError> {
        loop {
            let allowed = self.dispatch_allowance();
            if allowed == Some(0) {
                return Ok(());
            }
            let permits = self.ks_permits();
            let Some(ks) = self.kind.key_shared() else {
                return Ok(());
            };
            match ks.next_read(|c| permits.get(&c).copied().unwrap_or(0)) {
                NextRead::Idle => return Ok(()),
                NextRead::Replay(positions) => {
                    let mut entries = Vec::with_capacity(positions.len());
                    for p in positions {
                        let found = if self.cursor.is_acked(p) {
                            None
                        } else {
                            self.read_at(p).await?
                        };
                        match found {
                            Some(e) => entries.push(e),
                            // Acked meanwhile, or trimmed: it no longer waits.
                            None => {
                                if let Some(ks) = self.kind.key_shared_mut() {
                                    ks.on_ack(p);
                                }
                            }
                        }
                    }
                    if !self.ks_deliver(ReadType::Replay, entries).await {
                        return Ok(());
                    }
                }
                NextRead::Normal { max_entries } => {
                    let max = max_entries.min(allowed.unwrap_or(usize::MAX));
                    let entries = self.read_next(max).await?;
                    if entries.is_empty() {
                        return Ok(());
                    }
                    if !self.ks_deliver(ReadType::Normal, entries).await {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Hands one read to the Key_Shared dispatcher, entry by entry, and sends
    /// what it dispatches. False when the subscription changed under the
    /// read (a consumer's connection went away): the caller starts over.
    async fn ks_deliver(&mut self, read_type: ReadType, entries: Vec<Entry>) -> bool {
        let mut permits: HashMap<ConsumerId, u32> = self.ks_permits();
        let Some(ks) = self.kind.key_shared() else {
            return false;
        };
        let mut pass = ks.begin_read(read_type);
        for e in entries {
            let Some(meta) = self.filter(&e, read_type == ReadType::Normal, key_hash) else {
                continue;
            };
            let hash = key_hash(&self.kind, &meta);
            let n = strobe_wire::batch::message_count(&meta);
            let Some(ks) = self.kind.key_shared_mut() else {
                return false;
            };
            match ks.on_entry(&mut pass, e.position, hash, n, |c| {
                permits.get(&c).copied().unwrap_or(0)
            }) {
                Decision::Dispatch(cid) => {
                    let Some(i) = self.consumers.iter().position(|c| ConsumerId(c.seq) == cid)
                    else {
                        continue;
                    };
                    if !self.send_to(i, &e, &meta).await {
                        return false;
                    }
                    if let Some(p) = permits.get_mut(&cid) {
                        *p = p.saturating_sub(permits_for_entry(n));
                    }
                }
                Decision::Hold(_) | Decision::Skip => {}
            }
        }
        true
    }

    /// Sends one entry to consumer `i` and charges its permits: the one
    /// delivery function of every kind. False when the consumer's connection
    /// is gone (it is removed).
    pub(super) async fn send_to(&mut self, i: usize, e: &Entry, meta: &MessageMetadata) -> bool {
        let n = strobe_wire::batch::message_count(meta);
        let redelivery = self.redelivery.count(e.position);
        let ack_set = if strobe_wire::batch::is_batch(meta) {
            self.cursor
                .batch_unacked_set(e.position)
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let partition = self.topic.name().partition();
        let c = &mut self.consumers[i];
        let mut id = commands::message_id(e.position.ledger_id, e.position.entry_id);
        // As Pulsar: the partition index rides in the id (clients read it from there).
        id.partition = partition.map(|p| p as i32);
        if strobe_wire::batch::is_batch(meta) {
            id.batch_size = Some(n as i32);
        }
        let frame = match commands::message_frame(
            c.consumer_id,
            id,
            redelivery,
            ack_set,
            c.epoch,
            &e.data,
            c.keep_entry_metadata,
        ) {
            Ok(f) => f,
            Err(err) => {
                warn!(position = %e.position, error = %err, "cannot frame entry; skipped");
                self.cursor.delete(&[e.position]);
                return true;
            }
        };
        if c.tx.send(frame).await.is_err() {
            // The connection is gone; its consumers are being removed.
            let (conn, cid) = (c.conn_id, c.consumer_id);
            self.remove(conn, cid);
            return false;
        }
        tracing::trace!(position = %e.position, consumer_id = c.consumer_id, redelivery, "dispatched");
        c.permits -= i64::from(permits_for_entry(n));
        c.unacked.insert(e.position, n);
        c.unacked_messages += u64::from(n);
        let m = f64::from(n.max(1));
        self.avg_msgs_per_entry = Some(self.avg_msgs_per_entry.map_or(m, |a| 0.9 * a + 0.1 * m));
        self.topic.count_out(u64::from(n), e.data.len() as u64);
        self.charge_dispatch(n, e.data.len() as u64);
        true
    }
}
