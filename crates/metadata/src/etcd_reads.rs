//! Concurrent single-key reads sent to etcd as one transaction of gets.
//!
//! A broker taking over a lost broker's bundles loads thousands of topics at once, and each
//! load reads a few keys (the topic's record, its transaction buffer's, its schema's), each
//! paying etcd's and the client's per-request cost (gRPC, the linearizable read's wait) for a
//! lookup that costs etcd microseconds (docs/performance.md, "Fewer walks, reads grouped").
//! While [`IN_FLIGHT`] reads are on their way, the next ones wait and go together, up to
//! [`GROUP`] keys in one read-only transaction; an idle broker's read goes at once, alone, as
//! before.
//!
//! Every read is still linearizable: the group is sent after each of its members was asked
//! for, and etcd answers a transaction at one revision.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{KvClient, Txn, TxnOp, TxnOpResponse};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::error::{MetadataError, Result};
use crate::store::Versioned;

/// Reads on their way to etcd at once before the next ones are grouped.
const IN_FLIGHT: usize = 4;
/// Keys in one group (etcd refuses transactions of more than 128 operations by default).
const GROUP: usize = 64;

type Answer = oneshot::Sender<Result<Option<Versioned>>>;

/// The reads waiting for a slot (see the module docs).
pub(crate) struct ReadGroups {
    kv: KvClient,
    timeout: Duration,
    state: Mutex<State>,
    /// Requests sent (lone gets and groups).
    sent: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct State {
    in_flight: usize,
    waiting: Vec<(String, Answer)>,
}

/// A slot taken by a lone read: given back, or handed to the waiting reads, when dropped (the
/// reader's future may be dropped half-way).
struct Slot(Arc<ReadGroups>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl ReadGroups {
    pub(crate) fn new(kv: KvClient, timeout: Duration) -> Arc<ReadGroups> {
        Arc::new(ReadGroups {
            kv,
            timeout,
            state: Mutex::new(State::default()),
            sent: Default::default(),
        })
    }

    /// Requests sent to etcd so far.
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads `key` (already under the store's root): alone if a slot is free, else with the
    /// reads waiting beside it. `alone` sends one read by itself (the store's own retrying
    /// get).
    pub(crate) async fn get<F, Fut>(
        self: &Arc<Self>,
        key: String,
        alone: F,
    ) -> Result<Option<Versioned>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<Versioned>>>,
    {
        let rx = {
            let mut st = self.state.lock();
            if st.in_flight < IN_FLIGHT {
                st.in_flight += 1;
                None
            } else {
                let (tx, rx) = oneshot::channel();
                st.waiting.push((key, tx));
                Some(rx)
            }
        };
        match rx {
            None => {
                let _slot = Slot(self.clone());
                self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                alone().await
            }
            Some(rx) => rx.await.unwrap_or_else(|_| {
                Err(MetadataError::Backend(
                    "etcd read dropped: the store is closing".into(),
                ))
            }),
        }
    }

    /// A read finished: its slot goes to the waiting reads, if any.
    fn release(self: &Arc<Self>) {
        let group = self.next_group();
        if group.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(self.clone().send_groups(group));
            }
            Err(_) => {
                // No runtime (the process is ending): the waiting readers are told so by
                // their answers' senders being dropped.
                self.state.lock().in_flight -= 1;
            }
        }
    }

    /// The next group of waiting reads, keeping the slot for them; none (the slot given back)
    /// when nobody waits.
    fn next_group(&self) -> Vec<(String, Answer)> {
        let mut st = self.state.lock();
        if st.waiting.is_empty() {
            st.in_flight -= 1;
            return Vec::new();
        }
        let n = st.waiting.len().min(GROUP);
        st.waiting.drain(..n).collect()
    }

    /// Sends groups while reads wait, then gives the slot back.
    async fn send_groups(self: Arc<Self>, mut group: Vec<(String, Answer)>) {
        while !group.is_empty() {
            self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let keys: Vec<String> = group.iter().map(|(k, _)| k.clone()).collect();
            match self.read_group(keys).await {
                Ok(values) => {
                    for ((_, answer), v) in group.into_iter().zip(values) {
                        let _ = answer.send(Ok(v));
                    }
                }
                Err(e) => {
                    let text = e.to_string();
                    for (_, answer) in group {
                        let _ = answer.send(Err(MetadataError::Backend(text.clone())));
                    }
                }
            }
            group = self.next_group();
        }
    }

    /// One read-only transaction of a get per key, sent again while the transport fails
    /// (within the timeout, as a lone read is).
    async fn read_group(&self, keys: Vec<String>) -> Result<Vec<Option<Versioned>>> {
        let ops: Vec<TxnOp> = keys.iter().map(|k| TxnOp::get(k.as_str(), None)).collect();
        let n = ops.len();
        let resp = crate::etcd_call::idempotent(self.timeout, || {
            let mut kv = self.kv.clone();
            let txn = Txn::new().and_then(ops.clone());
            async move { kv.txn(txn).await }
        })
        .await?;
        let values: Vec<Option<Versioned>> = resp
            .op_responses()
            .into_iter()
            .map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| Versioned {
                    value: kv.value().to_vec(),
                    stat: crate::etcd_call::stat_of(kv),
                }),
                _ => None,
            })
            .collect();
        if values.len() != n {
            return Err(MetadataError::Backend(format!(
                "etcd answered {} of {n} reads in a group",
                values.len()
            )));
        }
        Ok(values)
    }
}
