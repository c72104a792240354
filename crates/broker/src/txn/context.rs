//! What topics and subscriptions need of transactions ([`TxnContext`]:
//! which loaded topics hold which transaction, and the queue of outcomes to
//! apply), and the broker's handle on its transaction services
//! ([`TxnService`]). It knows no topic: the topics depend on it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use strobe_metadata::{Batcher, MetadataStore};
use strobe_model::{TopicName, TxnId};
use strobe_txn::TransactionCoordinator;
use strobe_txn::participant::{DecisionEvent, DecisionWatch};
use tokio::sync::{mpsc, watch};

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
    /// Outcomes told directly, by this broker's coordinator or by push (the newest
    /// [`PUSHED_KEPT`]).
    pushed: Mutex<(HashSet<TxnId>, std::collections::VecDeque<TxnId>)>,
    /// Outcomes other brokers' coordinators pushed here (see `push.rs`).
    pub pushed_in: std::sync::atomic::AtomicU64,
    /// Topics whose ADD_PARTITION_TO_TXN was answered while this broker's coordinator was
    /// still writing it (see [`TxnService::add_partitions`]), per transaction.
    registering: Mutex<HashMap<TxnId, Vec<(String, Registration)>>>,
}

/// A participant's registration being written: `None` until the write ends, then whether
/// it landed.
pub type Registration = watch::Receiver<Option<bool>>;

/// Registrations answered ahead of their write, at most (beyond, ADDs wait for theirs).
const REGISTERING_MAX: usize = 65_536;

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
            pushed_in: Default::default(),
            registering: Default::default(),
        })
    }

    /// Notes `topics` as registering in `t` (see [`TxnService::add_partitions`]); `None` when
    /// too many are.
    fn begin_registration(
        &self,
        t: TxnId,
        topics: &[String],
    ) -> Option<watch::Sender<Option<bool>>> {
        let mut r = self.registering.lock();
        if r.len() >= REGISTERING_MAX {
            return None;
        }
        let (tx, rx) = watch::channel(None);
        let e = r.entry(t).or_default();
        e.extend(topics.iter().map(|n| (n.clone(), rx.clone())));
        Some(tx)
    }

    /// The registration's write ended (`landed` or not).
    fn end_registration(&self, t: TxnId, tx: watch::Sender<Option<bool>>, landed: bool) {
        let _ = tx.send(Some(landed));
        let mut r = self.registering.lock();
        if let Some(e) = r.get_mut(&t) {
            e.retain(|(_, rx)| rx.borrow().is_none());
            if e.is_empty() {
                r.remove(&t);
            }
        }
    }

    /// `topic`'s registration in `t` if it is still being written: a send of `t` there is
    /// answered only once it landed.
    pub fn registration(&self, t: TxnId, topic: &TopicName) -> Option<Registration> {
        let r = self.registering.lock();
        // Named only once `t` is found: this is on every transactional send's path.
        let pending = r.get(&t)?;
        let topic = topic.to_string();
        pending
            .iter()
            .find(|(n, rx)| *n == topic && rx.borrow().is_none())
            .map(|(_, rx)| rx.clone())
    }

    /// Whether a registration in `t` is being written here: its header may not be written
    /// yet, and its absence means nothing.
    pub(crate) fn registering(&self, t: TxnId) -> bool {
        self.registering.lock().contains_key(&t)
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
    /// ADD_PARTITION_TO_TXN may answer before its write lands (standalone only, see
    /// [`Self::add_partitions`]).
    pub(crate) answer_before_written: bool,
    /// Keeps the decision watch running.
    pub(crate) _watch: DecisionWatch,
}

impl TxnService {
    /// ADD_PARTITION_TO_TXN. On a standalone broker, for a transaction its coordinator holds
    /// open, the answer does not wait for the registration's metadata write (a third of a
    /// transaction's time): the transaction's sends on those topics are answered only once
    /// it landed (`Published::Stored`), a write that fails fails them and leaves the
    /// transaction only abortable, and until it ends a participant does not take the header's
    /// absence for an abort. A topic's first transaction waits (its buffer record is written
    /// with it). Only standalone: there the coordinator, the topics and every
    /// reader of the header share one process and its fate, so no other broker can load a
    /// topic and read the header while the write is in flight.
    pub async fn add_partitions(
        &self,
        t: TxnId,
        topics: &[String],
    ) -> Result<(), crate::BrokerError> {
        if self.answer_before_written
            && self.coordinator.knows_open(t)
            // A topic's first transaction waits for its buffer record: without it, a restart
            // would not replay the topic's log for transactions, and an entry of one that
            // never committed would be delivered.
            && topics.iter().all(|n| self.coordinator.buffer_recorded(n))
            && let Some(tx) = self.ctx.begin_registration(t, topics)
        {
            let (ctx, coordinator, topics) =
                (self.ctx.clone(), self.coordinator.clone(), topics.to_vec());
            tokio::spawn(async move {
                let r = coordinator.add_participants(t, &topics, &[]).await;
                if let Err(e) = &r {
                    tracing::warn!(txn_id = %t, error = %e, "registering a transaction's topics failed after the answer; it can only abort");
                    coordinator.refuse_commit(t);
                }
                ctx.end_registration(t, tx, r.is_ok());
                if r.is_err() {
                    // The topics hold entries of a transaction that cannot commit now: they
                    // read the header again (absent: aborted).
                    ctx.check(t);
                }
            });
            return Ok(());
        }
        self.coordinator
            .add_participants(t, topics, &[])
            .await
            .map_err(crate::BrokerError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registration answered ahead of its write: the sends on its topics find it until the
    /// write ends, then learn how it ended; the transaction counts as registering until every
    /// one of its registrations ended.
    #[tokio::test]
    async fn registrations_are_found_until_their_write_ends() {
        let ctx = TxnContext::new(Arc::new(strobe_metadata::EmbeddedStore::in_memory()));
        let t = TxnId {
            most_sig_bits: 1,
            least_sig_bits: 7,
        };
        let (a, b, c) = (
            "persistent://p/n/a",
            "persistent://p/n/b",
            "persistent://p/n/c",
        );
        let first = ctx
            .begin_registration(t, &[a.to_string(), b.to_string()])
            .unwrap();
        let second = ctx.begin_registration(t, &[c.to_string()]).unwrap();
        assert!(ctx.registering(t));
        let name = |n: &str| TopicName::parse(n).unwrap();
        let mut on_a = ctx.registration(t, &name(a)).expect("a is registering");
        assert!(
            ctx.registration(t, &name("persistent://p/n/other"))
                .is_none()
        );
        let other_txn = TxnId {
            least_sig_bits: 8,
            ..t
        };
        assert!(ctx.registration(other_txn, &name(a)).is_none());

        ctx.end_registration(t, first, false);
        assert_eq!(*on_a.wait_for(Option::is_some).await.unwrap(), Some(false));
        assert!(ctx.registration(t, &name(a)).is_none() && ctx.registration(t, &name(b)).is_none());
        assert!(ctx.registering(t), "c is still being written");
        let mut on_c = ctx.registration(t, &name(c)).unwrap();
        ctx.end_registration(t, second, true);
        assert_eq!(*on_c.wait_for(Option::is_some).await.unwrap(), Some(true));
        assert!(!ctx.registering(t));
    }
}
