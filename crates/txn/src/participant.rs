//! How participants (topics and subscriptions) learn outcomes and keep their state.
//!
//! Outcomes travel through the metadata store, as in PIP-473: every broker watches the headers
//! ([`DecisionWatch`]) and applies a decided transaction to the topics and subscriptions it serves.
//! A participant that missed the event (a watch that broke, a broker that restarted, a topic that
//! moved) asks for the header itself ([`decision`]) when it loads and on a periodic check. Once the
//! outcome is durable in the participant (a marker in the log, acks in the cursor), it deletes its
//! `/txn/part/...` key ([`applied`]); the coordinator collects a header only after every such key is
//! gone, so a participant never finds the header missing for a transaction it has not applied.

use std::sync::Arc;
use std::time::Duration;

use strobe_metadata::{EventKind, Expect, MetadataError, MetadataStore, Op};
use strobe_model::TxnId;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, warn};

use crate::Result;
use crate::buffer::BufferSnapshot;
use crate::header::{TxnHeader, TxnState};
use crate::paths::{self, Participant};
use crate::pending_ack::TxnAcks;

/// What the decision watch reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecisionEvent {
    /// `t` was decided; its participants as the header lists them.
    Decided(TxnId, TxnState, Vec<Participant>),
    /// The watch restarted: events may have been missed; check every transaction you hold.
    Resync,
    /// A participant found `t` in its state (a restored buffer or pending acks): read its header.
    Check(TxnId),
}

/// Follows every header and reports decisions, until dropped.
#[derive(Debug)]
pub struct DecisionWatch {
    _task: DropGuard,
}

/// A header whose bytes say it is still OPEN (skips decoding the many OPEN writes).
fn looks_open(value: &[u8]) -> bool {
    value.starts_with(br#"{"state":"OPEN""#)
}

impl DecisionWatch {
    /// Starts the watch and returns once it is established (every decision from then on is
    /// reported); events go to `tx` (bounded: a slow consumer slows the watch, which the store
    /// buffers).
    pub async fn start(
        store: Arc<dyn MetadataStore>,
        tx: mpsc::Sender<DecisionEvent>,
    ) -> Result<DecisionWatch> {
        let mut watch = store.watch(paths::HEADER_PREFIX, 0).await?;
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        tokio::spawn(async move {
            loop {
                loop {
                    let batch = tokio::select! {
                        _ = stop.cancelled() => return,
                        b = watch.next() => b,
                    };
                    let batch = match batch {
                        Some(Ok(b)) => b,
                        Some(Err(e)) => {
                            warn!(error = %e, "transaction decision watch broke; resyncing");
                            break;
                        }
                        None => break,
                    };
                    for ev in batch.events {
                        if ev.kind == EventKind::Deleted {
                            continue;
                        }
                        let Some(value) = ev.value.as_deref().filter(|v| !looks_open(v)) else {
                            continue;
                        };
                        let Some(t) = paths::txn_of_header(&ev.key) else {
                            continue;
                        };
                        match serde_json::from_slice::<TxnHeader>(value) {
                            Ok(h) if h.state.is_final() => {
                                let who = participants(&h);
                                if tx
                                    .send(DecisionEvent::Decided(t, h.state, who))
                                    .await
                                    .is_err()
                                {
                                    return;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => debug!(key = %ev.key, error = %e, "undecodable header"),
                        }
                    }
                }
                // Re-establish, then tell the consumer that events may have been missed.
                watch = loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                    match store.watch(paths::HEADER_PREFIX, 0).await {
                        Ok(w) => break w,
                        Err(e) => warn!(error = %e, "transaction decision watch failed to restart"),
                    }
                };
                if tx.send(DecisionEvent::Resync).await.is_err() {
                    return;
                }
            }
        });
        Ok(DecisionWatch {
            _task: cancel.drop_guard(),
        })
    }
}

/// Every participant a header lists.
pub fn participants(h: &TxnHeader) -> Vec<Participant> {
    h.partitions
        .iter()
        .map(|p| Participant::Partition(p.clone()))
        .chain(h.subscriptions.iter().map(|s| Participant::Subscription {
            topic: s.topic.clone(),
            subscription: s.subscription.clone(),
        }))
        .collect()
}

/// The outcome of `t` as the store has it: `Some(Open)` while undecided, `None` if no header
/// exists (never created, or collected after every participant applied it).
pub async fn decision(store: &dyn MetadataStore, t: TxnId) -> Result<Option<TxnState>> {
    let path = paths::header_path(t);
    Ok(match store.get(&path).await? {
        None => None,
        Some(v) => Some(
            serde_json::from_slice::<TxnHeader>(&v.value)
                .map_err(|e| MetadataError::Codec {
                    key: path,
                    reason: e.to_string(),
                })?
                .state,
        ),
    })
}

/// Participant `p` has made `t`'s outcome durable.
/// How long a participant's record deletion is sent again through a
/// failing store: long enough for the client to reach another etcd member,
/// short because a subscription waits for it (the next check retries).
const RESEND_WITHIN: Duration = Duration::from_secs(3);

///
/// `fence`: checks the write must pass (the participant's topic still owned
/// here, in a cluster): a topic instance that lost its bundle says nothing
/// about the transaction, whoever owns the topic now does.
pub async fn applied(
    store: &dyn MetadataStore,
    t: TxnId,
    p: &Participant,
    fence: &[Op],
) -> Result<()> {
    Ok(
        strobe_metadata::delete_once_checked(store, &paths::part_path(t, p), fence, RESEND_WITHIN)
            .await?,
    )
}

/// The topic's buffer snapshot, if the topic was ever written in a transaction.
pub async fn load_buffer(store: &dyn MetadataStore, topic: &str) -> Result<Option<BufferSnapshot>> {
    get_json(store, paths::buffer_path(topic)).await
}

/// The JSON document at `path`, if any.
async fn get_json<T: serde::de::DeserializeOwned>(
    store: &dyn MetadataStore,
    path: String,
) -> Result<Option<T>> {
    match store.get(&path).await? {
        None => Ok(None),
        Some(v) => Ok(Some(serde_json::from_slice(&v.value).map_err(|e| {
            MetadataError::Codec {
                key: path,
                reason: e.to_string(),
            }
        })?)),
    }
}

pub async fn save_buffer(store: &dyn MetadataStore, topic: &str, s: &BufferSnapshot) -> Result<()> {
    let bytes = serde_json::to_vec(s).expect("a snapshot serializes");
    store
        .put(&paths::buffer_path(topic), &bytes, Expect::Any)
        .await?;
    Ok(())
}

/// Forgets a deleted topic's transaction state.
pub async fn delete_topic_state(store: &dyn MetadataStore, topic: &str) -> Result<()> {
    match store.delete(&paths::buffer_path(topic), None).await {
        Ok(()) | Err(MetadataError::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let prefix = format!("{}{}/", paths::PENDING_ACK_PREFIX, paths::escape(topic));
    for key in store.list_keys(&prefix).await? {
        let _ = store.delete(&key, None).await;
    }
    Ok(())
}

/// The subscription's pending-ack records.
pub async fn load_pending_acks(
    store: &dyn MetadataStore,
    topic: &str,
    subscription: &str,
) -> Result<Vec<(TxnId, TxnAcks)>> {
    let prefix = paths::pending_ack_prefix(topic, subscription);
    let scan = store.scan_prefix(&prefix).await?;
    let mut out = Vec::new();
    for kv in scan.entries {
        let Some(t) = kv.key.strip_prefix(&prefix).and_then(paths::parse_txn_key) else {
            continue;
        };
        match serde_json::from_slice::<TxnAcks>(&kv.value) {
            Ok(a) => out.push((t, a)),
            Err(e) => warn!(key = %kv.key, error = %e, "undecodable pending-ack record"),
        }
    }
    Ok(out)
}

/// Stores a subscription's pending acks of `t`, if `fence` holds (see
/// [`applied`]): stored by a topic instance that lost its bundle, after the
/// next owner read the records, they were acks no owner knew of, and the
/// commit that the client was then allowed lost them.
pub async fn save_pending_acks(
    store: &dyn MetadataStore,
    topic: &str,
    subscription: &str,
    t: TxnId,
    acks: &TxnAcks,
    fence: &[Op],
) -> Result<()> {
    let bytes = serde_json::to_vec(acks).expect("acks serialize");
    let mut ops = fence.to_vec();
    ops.push(Op::put(
        paths::pending_ack_path(topic, subscription, t),
        bytes,
    ));
    store.txn(ops).await?;
    Ok(())
}

/// Deletes a subscription's pending acks of `t` (applied), if `fence` holds.
pub async fn delete_pending_acks(
    store: &dyn MetadataStore,
    topic: &str,
    subscription: &str,
    t: TxnId,
    fence: &[Op],
) -> Result<()> {
    let path = paths::pending_ack_path(topic, subscription, t);
    Ok(strobe_metadata::delete_once_checked(store, &path, fence, RESEND_WITHIN).await?)
}

/// The pending acks of `t` stored for a subscription, if any.
pub async fn pending_acks_of(
    store: &dyn MetadataStore,
    topic: &str,
    subscription: &str,
    t: TxnId,
) -> Result<Option<TxnAcks>> {
    get_json(store, paths::pending_ack_path(topic, subscription, t)).await
}
