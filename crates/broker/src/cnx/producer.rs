//! A producer on a connection: the handle the connection keeps
//! ([`ProducerRef`]) and the producer's task, which answers its sends in the
//! order they arrived, each once it is durable.

use std::sync::Arc;

use strobe_wire::proto::ServerError;
use strobe_wire::{OutFrame, commands};
use tokio::sync::mpsc;
use tracing::warn;

use strobe_ledger::AppendFuture;

use crate::BrokerError;
use crate::topic::{Published, Topic};
use crate::txn::Registration;

/// Sends not yet answered per producer before the connection's reader waits
/// (plus at most one run of SENDs stored before the first wait: see
/// `produce`'s `MAX_SEND_RUN`).
pub(super) const PENDING_SENDS: usize = 1000;

pub(super) struct ProducerRef {
    pub(super) topic: Arc<Topic>,
    pub(super) name: String,
    /// Boxed: the channel allocates room for 32 of them up front, and a
    /// producer on each of 100,000 topics paid 6 KiB for that (issue 47).
    pub(super) pending: mpsc::Sender<Box<PendingSend>>,
    /// The producer's task: answers what is pending, then ends once
    /// `pending` is dropped.
    pub(super) task: tokio::task::JoinHandle<()>,
}

/// What became of a SEND's synchronous part (`ServerCnx::store_send`).
pub(super) enum Stored {
    /// For a producer that closed a moment ago: dropped without an answer.
    Dropped,
    /// For a producer this connection never had: an error, and the
    /// connection closes.
    UnknownProducer,
    /// Handed to the topic (or refused by it): the outcome to answer with.
    Queued(PendingSend),
}

pub(super) struct PendingSend {
    pub(super) sequence_id: u64,
    pub(super) highest_sequence_id: u64,
    pub(super) outcome: Result<Published, BrokerError>,
    /// When the append was queued (for the storage write latency metric).
    pub(super) queued_at: std::time::Instant,
}

/// Waits until a stored entry is durable, and, in a transaction, its topic's registration in
/// it (see `TxnService::add_partitions`).
async fn durable(
    fut: AppendFuture,
    registration: Option<Registration>,
) -> Result<strobe_ledger::Position, BrokerError> {
    let Some(mut registration) = registration else {
        return Ok(fut.await?);
    };
    let (appended, registered) = tokio::join!(fut, async move {
        matches!(
            registration.wait_for(Option::is_some).await.map(|v| *v),
            Ok(Some(true))
        )
    });
    let pos = appended?;
    if !registered {
        return Err(BrokerError::Txn(strobe_txn::TxnError::InvalidStatus(
            "the transaction coordinator could not record this topic in the transaction; \
             it can only be aborted"
                .into(),
        )));
    }
    Ok(pos)
}

/// Answers one producer's sends in the order they arrived, each once it is durable.
pub(super) async fn producer_task(
    topic: Arc<Topic>,
    name: String,
    producer_id: u64,
    mut rx: mpsc::Receiver<Box<PendingSend>>,
    tx: mpsc::Sender<OutFrame>,
) {
    let mut connected = true;
    while let Some(p) = rx.recv().await {
        let p = *p;
        // `published` is called only once the receipt is queued: a topic
        // handed to another broker waits for its publishes to be published
        // before it closes the producers, so no receipt follows the close.
        let mut outcome = None;
        let reply = match p.outcome {
            Ok(Published::Stored(fut, registration)) => match durable(fut, registration).await {
                Ok(pos) => {
                    topic.counters.write_latency.record(p.queued_at.elapsed());
                    outcome = Some(true);
                    commands::send_receipt(
                        producer_id,
                        p.sequence_id,
                        p.highest_sequence_id,
                        commands::message_id(pos.ledger_id, pos.entry_id),
                    )
                }
                Err(e) => {
                    outcome = Some(false);
                    warn!(error = %e, sequence_id = p.sequence_id, "publish failed");
                    commands::send_error(
                        producer_id,
                        p.sequence_id,
                        e.server_error(),
                        e.to_string(),
                    )
                }
            },
            Ok(Published::Duplicate) => {
                duplicate(producer_id, p.sequence_id, p.highest_sequence_id)
            }
            Ok(Published::InFlight) => {
                if topic.settled(&name, p.highest_sequence_id as i64).await {
                    duplicate(producer_id, p.sequence_id, p.highest_sequence_id)
                } else {
                    // Pulsar's clients reconnect on this error and send
                    // what they have pending again.
                    commands::send_error(
                        producer_id,
                        p.sequence_id,
                        ServerError::PersistenceError,
                        "this message's first copy was not stored: send it again",
                    )
                }
            }
            // The topic is moving: the client resends this to the new owner.
            Ok(Published::Held) => continue,
            Err(e) => {
                commands::send_error(producer_id, p.sequence_id, e.server_error(), e.to_string())
            }
        };
        // With the connection gone, the rest are still awaited (and their
        // outcome recorded) but not answered.
        if connected && tx.send(OutFrame::command(reply)).await.is_err() {
            connected = false;
        }
        if let Some(ok) = outcome {
            topic.published(&name, p.highest_sequence_id as i64, ok);
        }
    }
}

/// Pulsar answers a duplicate with message id -1:-1.
fn duplicate(producer_id: u64, sequence_id: u64, highest: u64) -> strobe_wire::Command {
    commands::send_receipt(
        producer_id,
        sequence_id,
        highest,
        commands::message_id(u64::MAX, u64::MAX),
    )
}
