//! The one entry filter every entry passes before a dispatcher may send it
//! (Pulsar's `filterEntriesForConsumer`): markers and unreadable entries are
//! acknowledged and skipped, and an entry whose delivery time is ahead waits
//! in the delayed-delivery tracker. Entries of aborted transactions are skipped
//! like markers, and entries acked in an open transaction are not delivered.

use strobe_dispatch::DelayedEntry;
use strobe_ledger::Entry;
use strobe_wire::payload;
use strobe_wire::proto::MessageMetadata;
use tracing::warn;

use super::actor::Subscription;
use super::api::now_ms;
use super::kind::Kind;

impl Subscription {
    /// Filters one entry: its metadata if it is to be sent, `None` when it
    /// was acknowledged and skipped or held for later. `may_delay`: this read may hold entries for their
    /// delivery time (a replayed entry's time has passed, or the kind does
    /// not delay); `hash` is the entry's sticky-key hash, kept with a held
    /// entry so a Key_Shared dispatcher can replay it.
    pub(super) fn filter(
        &mut self,
        e: &Entry,
        may_delay: bool,
        hash: impl FnOnce(&Kind, &MessageMetadata) -> u32,
    ) -> Option<MessageMetadata> {
        let meta = match payload::peek_metadata(&e.data) {
            Ok(m) => m,
            Err(err) => {
                // Stored bytes we cannot read: skip them rather than wedge the subscription.
                warn!(position = %e.position, error = %err, "unreadable entry acknowledged and skipped");
                self.skip(e);
                return None;
            }
        };
        if meta.marker_type.is_some_and(|m| m != 0) {
            self.skip(e);
            return None;
        }
        if let Some(t) = crate::topic::txn_of(&meta)
            && self.topic.txn_aborted(t)
        {
            self.skip(e);
            return None;
        }
        if self.pending.hides(e.position) {
            // Acked in an open transaction: not delivered unless it aborts.
            return None;
        }
        if may_delay
            && self.kind.delays()
            && self
                .topic
                .dispatch_policy()
                .is_none_or(|p| p.delayed_delivery())
            && let Some(at) = meta.deliver_at_time.filter(|t| *t > 0)
            && (at as u64) > now_ms()
        {
            let entry = DelayedEntry {
                position: e.position,
                hash: hash(&self.kind, &meta),
                messages: strobe_wire::batch::message_count(&meta),
            };
            self.delayed.add(at as u64, entry);
            return None;
        }
        Some(meta)
    }

    /// An entry no consumer will see: acknowledged, and forgotten by the dispatcher.
    fn skip(&mut self, e: &Entry) {
        self.cursor.delete(&[e.position]);
        self.forget(e.position);
    }
}
