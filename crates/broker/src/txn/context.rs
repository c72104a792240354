//! What topics and subscriptions need of transactions ([`TxnContext`]:
//! which loaded topics hold which transaction, and the queue of outcomes to
//! apply), and the broker's handle on its transaction services
//! ([`TxnService`]). It knows no topic: the topics depend on it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use strobe_metadata::{Batcher, MetadataStore};
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
    /// Outcomes told directly by this broker's coordinator (the newest [`PUSHED_KEPT`]).
    pushed: Mutex<(HashSet<TxnId>, std::collections::VecDeque<TxnId>)>,
}

/// How many directly told outcomes are remembered (the watch reports each soon after).
const PUSHED_KEPT: usize = 16_384;

/// Outcomes and checks queued for the applying loop; beyond it, checks wait for the periodic
/// reconcile.
const EVENT_QUEUE: usize = 4096;

/// The operations one metadata transaction of participants' writes may hold (etcd's default
/// `--max-txn-ops`).
const PARTICIPANT_TXN_OPS: usize = 128;

impl TxnContext {
    /// Participants' writes (pending acks, outcome records, buffer snapshots) go through a
    /// [`Batcher`]: concurrent transactions' writes are one metadata transaction.
    pub fn new(store: Arc<dyn MetadataStore>) -> Arc<TxnContext> {
        let (events, rx) = mpsc::channel(EVENT_QUEUE);
        Arc::new(TxnContext {
            store: Arc::new(Batcher::new(store, PARTICIPANT_TXN_OPS)),
            holders: Mutex::new(HashMap::new()),
            events,
            receiver: Mutex::new(Some(rx)),
            pushed: Default::default(),
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

    /// `t`'s outcome is being applied here as this broker's coordinator told it.
    pub(crate) fn pushed(&self, t: TxnId) {
        let mut p = self.pushed.lock();
        if p.0.insert(t) {
            p.1.push_back(t);
        }
        while p.1.len() > PUSHED_KEPT {
            if let Some(old) = p.1.pop_front() {
                p.0.remove(&old);
            }
        }
    }

    /// `t`'s outcome will not be told here directly after all (its decision failed here).
    pub(crate) fn unpushed(&self, t: TxnId) {
        let mut p = self.pushed.lock();
        if p.0.remove(&t) {
            p.1.retain(|x| *x != t);
        }
    }

    /// Whether `t`'s outcome was told here directly (see [`Self::pushed`]).
    pub(crate) fn was_pushed(&self, t: TxnId) -> bool {
        self.pushed.lock().0.contains(&t)
    }

    pub(crate) fn all(&self) -> Vec<TxnId> {
        self.holders.lock().keys().copied().collect()
    }
}

/// What a topic instance's writes about transactions must check in the
/// metadata store (see [`strobe_txn::participant::save_pending_acks`]): in a
/// cluster, that this broker still serves the topic's bundle; standalone,
/// nothing.
pub trait OwnerCheck: Send + Sync + std::fmt::Debug {
    /// The checks, or why this instance may write nothing now.
    fn fence(&self) -> Result<Vec<strobe_metadata::Op>, crate::BrokerError>;
}

/// The broker's transaction services.
#[derive(Debug)]
pub struct TxnService {
    pub ctx: Arc<TxnContext>,
    pub coordinator: Arc<TransactionCoordinator>,
    /// Keeps the decision watch running.
    pub(crate) _watch: DecisionWatch,
}
