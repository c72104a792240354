//! The connections' side of a subscription: commands to its actor.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use strobe_ledger::ManagedCursor;
use strobe_model::SubType;
use strobe_wire::proto::{CommandAck, MessageIdData};
use tokio::sync::{mpsc, oneshot};

use super::api::{AdminOp, AdminReply, ConsumerSpec, SeekTarget};
use crate::BrokerError;

pub(super) type Reply<T> = oneshot::Sender<Result<T, BrokerError>>;

/// Kept small (large payloads boxed): a subscription's queue keeps the blocks a burst
/// of commands (FLOW, ACK) made it allocate for as long as it lives, so the size of a
/// command, times the queue's bound, is memory every subscription may hold for good.
pub(super) enum Cmd {
    Add(Box<ConsumerSpec>, Reply<()>),
    Remove {
        conn_id: u64,
        consumer_id: u64,
        reply: Option<oneshot::Sender<()>>,
    },
    Flow {
        conn_id: u64,
        consumer_id: u64,
        permits: u32,
    },
    Ack {
        conn_id: u64,
        consumer_id: u64,
        ack: Box<CommandAck>,
        /// None when the client asked for no receipt (the ack is not awaited).
        reply: Option<Reply<()>>,
    },
    Redeliver {
        conn_id: u64,
        consumer_id: u64,
        ids: Vec<MessageIdData>,
        epoch: Option<u64>,
    },
    Seek {
        conn_id: u64,
        consumer_id: u64,
        request_id: u64,
        target: Box<SeekTarget>,
    },
    Unsubscribe {
        conn_id: u64,
        consumer_id: u64,
        reply: Reply<()>,
    },
    Admin(Box<AdminOp>, Reply<AdminReply>),
    /// Stop: flush the cursor and give back the consumers; with `tell`, they
    /// get CLOSE_CONSUMER now, otherwise the caller closes them later.
    Close {
        tell: bool,
        done: oneshot::Sender<Vec<ClosingConsumer>>,
    },
    /// Something outside changed (the topic was terminated): look again.
    Wake,
    /// A transaction's outcome.
    EndTxn {
        txn: strobe_model::TxnId,
        commit: bool,
        listed: bool,
        reply: Reply<()>,
    },
}

/// A consumer of a closed subscription, to be told later.
#[derive(Debug)]
pub struct ClosingConsumer {
    pub(super) consumer_id: u64,
    pub(super) tx: tokio::sync::mpsc::Sender<strobe_wire::OutFrame>,
}

impl ClosingConsumer {
    /// CLOSE_CONSUMER, naming the broker to reconnect to if any.
    pub async fn close(self, url: Option<&str>, url_tls: Option<&str>) {
        let _ = self
            .tx
            .send(strobe_wire::OutFrame::command(
                strobe_wire::commands::close_consumer(self.consumer_id, url, url_tls),
            ))
            .await;
    }
}

/// The connections' side of a subscription.
#[derive(Clone)]
pub struct SubscriptionHandle {
    pub name: String,
    pub durable: bool,
    pub cursor: ManagedCursor,
    pub(super) tx: mpsc::Sender<Cmd>,
    pub(super) closed: Arc<AtomicBool>,
    pub(super) sub_type: Arc<Mutex<Option<SubType>>>,
    pub(super) consumer_count: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) v5_consumer_count: Arc<std::sync::atomic::AtomicUsize>,
}

impl std::fmt::Debug for SubscriptionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriptionHandle")
            .field("name", &self.name)
            .finish()
    }
}

fn gone() -> BrokerError {
    BrokerError::ServiceNotReady("the subscription is closing".into())
}

impl SubscriptionHandle {
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn sub_type(&self) -> Option<SubType> {
        *self.sub_type.lock()
    }

    /// Consumers connected now.
    pub fn consumer_count(&self) -> usize {
        self.consumer_count.load(Ordering::Acquire)
    }

    /// Consumers connected now that are not a V5 client's (PIP-475).
    pub fn v4_consumer_count(&self) -> usize {
        self.consumer_count()
            .saturating_sub(self.v5_consumer_count.load(Ordering::Acquire))
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Cmd) -> Result<T, BrokerError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    pub async fn add_consumer(&self, spec: ConsumerSpec) -> Result<(), BrokerError> {
        self.call(|r| Cmd::Add(Box::new(spec), r)).await
    }

    /// The consumer closed or its connection ended; waits until its messages are back in the queue.
    pub async fn remove_consumer(&self, conn_id: u64, consumer_id: u64) {
        let (tx, rx) = oneshot::channel();
        if self
            .tx
            .send(Cmd::Remove {
                conn_id,
                consumer_id,
                reply: Some(tx),
            })
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
    }

    pub async fn flow(&self, conn_id: u64, consumer_id: u64, permits: u32) {
        let _ = self
            .tx
            .send(Cmd::Flow {
                conn_id,
                consumer_id,
                permits,
            })
            .await;
    }

    pub async fn ack(
        &self,
        conn_id: u64,
        consumer_id: u64,
        ack: CommandAck,
    ) -> Result<(), BrokerError> {
        self.call(|reply| Cmd::Ack {
            conn_id,
            consumer_id,
            ack: Box::new(ack),
            reply: Some(reply),
        })
        .await
    }

    /// An ack the client wants no receipt for: queued, not awaited (errors
    /// are dropped, as Pulsar drops them without a request id).
    pub async fn ack_no_reply(&self, conn_id: u64, consumer_id: u64, ack: CommandAck) {
        let _ = self
            .tx
            .send(Cmd::Ack {
                conn_id,
                consumer_id,
                ack: Box::new(ack),
                reply: None,
            })
            .await;
    }

    /// Applies transaction `txn`'s outcome to the subscription's pending acks. A subscription
    /// that has stopped has nothing to apply now: its next load restores and reconciles them.
    pub async fn end_txn(
        &self,
        txn: strobe_model::TxnId,
        commit: bool,
        listed: bool,
    ) -> Result<(), BrokerError> {
        let (tx, rx) = oneshot::channel();
        let cmd = Cmd::EndTxn {
            txn,
            commit,
            listed,
            reply: tx,
        };
        // A subscription that is gone (closing with its topic) has applied nothing: saying it
        // had let its coordinator forget the transaction's header, and the subscription, loaded
        // again elsewhere with the transaction's pending acks, found no header and aborted
        // them (the fault campaign's transformer did a committed input twice).
        let gone = || {
            Err(BrokerError::ServiceNotReady(format!(
                "subscription {} is closing; transaction {txn} is applied where it loads next",
                self.name
            )))
        };
        if self.tx.send(cmd).await.is_err() {
            return gone();
        }
        rx.await.unwrap_or_else(|_| gone())
    }

    pub async fn redeliver(
        &self,
        conn_id: u64,
        consumer_id: u64,
        ids: Vec<MessageIdData>,
        epoch: Option<u64>,
    ) {
        let _ = self
            .tx
            .send(Cmd::Redeliver {
                conn_id,
                consumer_id,
                ids,
                epoch,
            })
            .await;
    }

    /// The subscription answers the seek itself (SUCCESS or ERROR to the
    /// requesting consumer), then disconnects its consumers so they reconnect
    /// from the new position.
    pub async fn seek(
        &self,
        conn_id: u64,
        consumer_id: u64,
        request_id: u64,
        target: SeekTarget,
    ) -> bool {
        self.tx
            .send(Cmd::Seek {
                conn_id,
                consumer_id,
                request_id,
                target: Box::new(target),
            })
            .await
            .is_ok()
    }

    pub async fn unsubscribe(&self, conn_id: u64, consumer_id: u64) -> Result<(), BrokerError> {
        self.call(|reply| Cmd::Unsubscribe {
            conn_id,
            consumer_id,
            reply,
        })
        .await
    }

    /// An admin operation (see [`AdminOp`]).
    pub async fn admin(&self, op: AdminOp) -> Result<AdminReply, BrokerError> {
        self.call(|reply| Cmd::Admin(Box::new(op), reply)).await
    }

    /// Deletes the subscription; refused while consumers are connected.
    pub async fn delete(&self) -> Result<(), BrokerError> {
        self.unsubscribe(u64::MAX, u64::MAX).await
    }

    /// Closes every consumer (CLOSE_CONSUMER) and stops the subscription.
    pub async fn close(&self) {
        let (done, rx) = oneshot::channel();
        if self.tx.send(Cmd::Close { tell: true, done }).await.is_ok() {
            let _ = rx.await;
        }
        // The actor answers before its task marks it closed: marked here
        // too, so that whoever looks the subscription up next gets a new
        // one, not this one that takes no more commands (a scalable topic's
        // subscription delete closed then deleted it, and failed with 503).
        self.closed.store(true, Ordering::Release);
    }

    /// Stops dispatching and persists the cursor, without telling the
    /// consumers: the caller closes them later (a topic moving to another
    /// broker tells them where to go). Acks arriving meanwhile are dropped.
    pub async fn close_quietly(&self) -> Vec<ClosingConsumer> {
        let (done, rx) = oneshot::channel();
        let closing = match self.tx.send(Cmd::Close { tell: false, done }).await {
            Ok(()) => rx.await.unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        self.closed.store(true, Ordering::Release);
        closing
    }

    /// Makes the subscription look at its topic again (it was terminated).
    pub async fn wake(&self) {
        let _ = self.tx.send(Cmd::Wake).await;
    }

    /// Makes the subscription look at its topic's settings again, without
    /// waiting (a full queue means it is busy and will).
    pub fn nudge(&self) {
        let _ = self.tx.try_send(Cmd::Wake);
    }

    /// Stops an unused subscription actor without waiting.
    pub fn shutdown(&self) {
        let (done, _) = oneshot::channel();
        let _ = self.tx.try_send(Cmd::Close { tell: true, done });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_command_stays_small() {
        // 256 queued commands in blocks of 32: a subscription holds at most
        // 9 blocks of 32 commands after a burst.
        assert!(
            std::mem::size_of::<super::Cmd>() <= 64,
            "{}",
            std::mem::size_of::<super::Cmd>()
        );
    }
}
