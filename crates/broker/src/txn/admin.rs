//! What clients and the admin API ask of the coordinator: the legacy
//! assign-topic lookup (Pulsar's `TRANSACTION_COORDINATOR_ASSIGN`), the
//! coordinators' stats, a transaction's metadata and a subscription's
//! pending acks.

use strobe_model::{TopicName, TxnId};
use strobe_txn::participant;

use crate::BrokerError;
use crate::service::BrokerService;

/// Pulsar's `SystemTopicNames.TRANSACTION_COORDINATOR_ASSIGN`: v4 clients (Java, Go) find
/// coordinator N by looking up this topic's partition N.
pub const TC_ASSIGN_TOPIC: &str = "persistent://pulsar/system/transaction_coordinator_assign";

/// PARTITIONED_METADATA of the assign topic: the coordinator's parallelism.
pub fn assign_partitions(service: &BrokerService, topic: &TopicName) -> Option<u32> {
    let txn = service.txn()?;
    (topic.to_string() == TC_ASSIGN_TOPIC).then(|| txn.coordinator.parallelism())
}

/// LOOKUP of the assign topic's partition N: the broker elected leader of coordinator N
/// (`pulsar://`, `pulsar+ssl://`, of the client's `listener`), whoever owns the topic's bundle.
pub fn assign_lookup(
    service: &BrokerService,
    topic: &TopicName,
    listener: Option<&str>,
) -> Option<Result<(String, Option<String>), BrokerError>> {
    let txn = service.txn()?;
    let n = topic.partition()?;
    if topic.partitioned_parent().to_string() != TC_ASSIGN_TOPIC {
        return None;
    }
    let table = txn.coordinator.member().view().current();
    Some(match table.leaders.get(n as usize) {
        None => Err(BrokerError::TopicNotFound(format!(
            "transaction coordinator {n} does not exist: the cluster has {} partitions",
            table.parallelism
        ))),
        Some(None) => Err(BrokerError::ServiceNotReady(format!(
            "transaction coordinator {n} has no leader yet: its election is under way"
        ))),
        Some(Some(l)) => Ok(l.urls_for(listener)),
    })
}

/// One coordinator partition as the admin API shows it (Pulsar's
/// `TransactionCoordinatorStats`), read from the metadata store, so any broker answers for all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorSummary {
    pub tc_id: u32,
    /// The leader's service URL, if the partition has one.
    pub leader: Option<String>,
    /// The next unreserved sequence (Pulsar's `leastSigBits`).
    pub next_sequence: u64,
    /// Transactions OPEN now.
    pub ongoing: u64,
}

/// Every coordinator partition's summary.
pub async fn coordinator_stats(
    service: &BrokerService,
) -> Result<Vec<CoordinatorSummary>, BrokerError> {
    let txn = service.txn().ok_or_else(|| {
        BrokerError::NotAllowed("transactions are not enabled on this broker".into())
    })?;
    let store = &txn.ctx.store;
    let table = txn.coordinator.member().view().current();
    let mut out = Vec::with_capacity(table.leaders.len());
    for (n, leader) in table.leaders.iter().enumerate() {
        let next_sequence = match store.get(&strobe_txn::paths::seq_path(n as u64)).await? {
            Some(v) => std::str::from_utf8(&v.value)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0),
            None => 0,
        };
        let scan = store
            .scan_prefix(&strobe_txn::paths::header_prefix_of(n as u64))
            .await?;
        let ongoing = scan
            .entries
            .iter()
            .filter(|kv| kv.value.starts_with(br#"{"state":"OPEN""#))
            .count() as u64;
        out.push(CoordinatorSummary {
            tc_id: n as u32,
            leader: leader.as_ref().map(|l| l.broker_service_url.clone()),
            next_sequence,
            ongoing,
        });
    }
    Ok(out)
}

/// A transaction's header (Pulsar's `TransactionMetadata`), from any broker.
pub async fn txn_metadata(
    service: &BrokerService,
    t: TxnId,
) -> Result<Option<strobe_txn::TxnHeader>, BrokerError> {
    let txn = service.txn().ok_or_else(|| {
        BrokerError::NotAllowed("transactions are not enabled on this broker".into())
    })?;
    Ok(txn.coordinator.header(t).await?)
}

/// What `t` holds in pending acks on `topic`'s subscription `sub`, from the store.
pub async fn pending_ack_of(
    service: &BrokerService,
    topic: &str,
    sub: &str,
    t: TxnId,
) -> Result<Option<strobe_txn::pending_ack::TxnAcks>, BrokerError> {
    let txn = service.txn().ok_or_else(|| {
        BrokerError::NotAllowed("transactions are not enabled on this broker".into())
    })?;
    let records = participant::load_pending_acks(&*txn.ctx.store, topic, sub).await?;
    Ok(records.into_iter().find(|(x, _)| *x == t).map(|(_, a)| a))
}
