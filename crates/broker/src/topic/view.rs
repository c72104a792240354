//! The topic as its subscriptions see it ([`TopicView`]): its log, its compacted view, its
//! settings and its transactions, and where their counts go.

use std::sync::Arc;

use strobe_ledger::{ManagedLedger, Position};
use strobe_model::TopicName;

use super::Topic;
use crate::subscription::TopicView;

impl TopicView for Topic {
    fn name(&self) -> &TopicName {
        &self.name
    }

    fn ledger(&self) -> &ManagedLedger {
        &self.ledger
    }

    fn compacted_view(&self) -> Option<Arc<crate::compaction::CompactedView>> {
        Topic::compacted_view(self)
    }

    fn is_terminated(&self) -> bool {
        self.terminated().is_some()
    }

    fn message_ttl_secs(&self) -> u64 {
        Topic::message_ttl_secs(self)
    }

    fn dispatch_policy(&self) -> Option<&super::DispatchPolicy> {
        Some(&self.dispatch_policy)
    }

    fn next_position(&self) -> Position {
        Topic::next_position(self)
    }

    fn count_read(&self, entries: u64) {
        self.counters
            .entries_read
            .fetch_add(entries, std::sync::atomic::Ordering::Relaxed);
    }

    fn count_out(&self, messages: u64, bytes: u64) {
        self.counters.add_out(messages, bytes);
    }

    fn subscription_ended(&self, name: &str) {
        Topic::subscription_ended(self, name)
    }

    fn txn_aborted(&self, t: strobe_model::TxnId) -> bool {
        Topic::txn_aborted(self, t)
    }

    fn txn_context(&self) -> Option<Arc<crate::txn::TxnContext>> {
        self.txn.lock().ctx.clone()
    }

    fn limits(&self) -> &crate::limits::TopicLimits {
        &self.limits
    }

    fn fence(&self) -> Result<Vec<strobe_metadata::Op>, crate::BrokerError> {
        Topic::fence(self)
    }
}
