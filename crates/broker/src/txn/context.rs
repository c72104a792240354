//! What topics and subscriptions need of transactions ([`TxnContext`]:
//! which loaded topics hold which transaction, and the queue of outcomes to
//! apply), and the broker's handle on its transaction services
//! ([`TxnService`]). It knows no topic: the topics depend on it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use strobe_metadata::MetadataStore;
use strobe_model::TxnId;
use strobe_txn::TransactionCoordinator;
use strobe_txn::participant::{DecisionEvent, DecisionWatch};
use tokio::sync::mpsc;

/// What topics need to take part in transactions.
#[derive(Debug)]
pub struct TxnContext {
    pub store: Arc<dyn MetadataStore>,
    /// Which loaded topics hold each transaction (in their buffer or a subscription's pending
    /// acks): where an outcome must go.
    holders: Mutex<HashMap<TxnId, HashSet<String>>>,
    /// Into the loop that applies outcomes (decisions from the watch, and checks asked here).
    pub(crate) events: mpsc::Sender<DecisionEvent>,
    pub(crate) receiver: Mutex<Option<mpsc::Receiver<DecisionEvent>>>,
}

/// Outcomes and checks queued for the applying loop; beyond it, checks wait for the periodic
/// reconcile.
const EVENT_QUEUE: usize = 4096;

impl TxnContext {
    pub fn new(store: Arc<dyn MetadataStore>) -> Arc<TxnContext> {
        let (events, rx) = mpsc::channel(EVENT_QUEUE);
        Arc::new(TxnContext {
            store,
            holders: Mutex::new(HashMap::new()),
            events,
            receiver: Mutex::new(Some(rx)),
        })
    }

    /// Asks for `t`'s header to be read and a decided outcome applied (a participant restored
    /// `t` and may have missed its decision).
    pub fn check(&self, t: TxnId) {
        let _ = self.events.try_send(DecisionEvent::Check(t));
    }

    /// `topic` holds `t` now.
    pub fn hold(&self, t: TxnId, topic: &str) {
        self.holders
            .lock()
            .entry(t)
            .or_default()
            .insert(topic.to_owned());
    }

    /// `topic` applied `t`'s outcome (or unloaded).
    pub fn release(&self, t: TxnId, topic: &str) {
        let mut h = self.holders.lock();
        if let Some(set) = h.get_mut(&t) {
            set.remove(topic);
            if set.is_empty() {
                h.remove(&t);
            }
        }
    }

    pub(crate) fn holders_of(&self, t: TxnId) -> Vec<String> {
        self.holders
            .lock()
            .get(&t)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(crate) fn all(&self) -> Vec<TxnId> {
        self.holders.lock().keys().copied().collect()
    }
}

/// The broker's transaction services.
#[derive(Debug)]
pub struct TxnService {
    pub ctx: Arc<TxnContext>,
    pub coordinator: Arc<TransactionCoordinator>,
    /// Keeps the decision watch running.
    pub(crate) _watch: DecisionWatch,
}
