//! Outcomes told by push between brokers (Pulsar's `END_TXN_ON_PARTITION` and
//! `END_TXN_ON_SUBSCRIPTION`, carried by the admin API the brokers already call each other
//! on): the coordinator's broker posts a decided outcome to each broker serving participants
//! of it, which applies it as it applies one its own coordinator told, and answers with the
//! participants that made it durable. Before, a commit waited for each remote participant to
//! delete its record through the metadata store and for that deletion to come back through a
//! watch: an etcd write and two watch hops on every commit's path. The record is still
//! deleted, off the path (with the directly told ones, on their common tick), and a
//! participant that did not answer is still waited for through it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use strobe_model::{TopicName, TxnId};
use strobe_txn::TxnState;
use strobe_txn::paths::Participant;
use tracing::debug;

use crate::service::BrokerService;

/// Where a broker takes pushed outcomes (superuser-only when authentication is on, as every
/// admin path not named otherwise).
pub const PUSH_PATH: &str = "/admin/v3/transactions/endTxnOnParticipants";

/// How long a push is waited for; past it the coordinator waits for the records.
const PUSH_WAIT: Duration = Duration::from_secs(2);

/// A pushed outcome.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OutcomePush {
    pub txn_id_most_bits: u64,
    pub txn_id_least_bits: u64,
    pub committed: bool,
    /// The participants, each as its record's last path segment (`Participant::segment`).
    pub participants: Vec<String>,
}

/// Tells `t`'s outcome to the brokers serving `who` (none of them this one); returns the
/// participants whose broker answered that they applied it.
pub(super) async fn push(
    service: &Arc<BrokerService>,
    t: TxnId,
    state: TxnState,
    who: Vec<Participant>,
) -> Vec<Participant> {
    let Some(cluster) = service.cluster() else {
        return Vec::new();
    };
    let me = cluster.broker_id();
    let mut by_owner: HashMap<String, Vec<Participant>> = HashMap::new();
    for p in who {
        let Ok(name) = TopicName::parse(p.topic()) else {
            continue;
        };
        let Ok(path) = service.bundle_path(&name) else {
            continue;
        };
        // Owned by nobody: whoever loads it reconciles. Moving: its destination serves it.
        let Some(owner) = cluster.owner_of(&path) else {
            continue;
        };
        let to = owner.serving();
        if to.broker_id != me {
            by_owner
                .entry(to.web_service_url.clone())
                .or_default()
                .push(p);
        }
    }
    let calls = by_owner
        .into_iter()
        .map(|(url, who)| push_to(service, url, t, state, who));
    futures::future::join_all(calls)
        .await
        .into_iter()
        .flatten()
        .collect()
}

async fn push_to(
    service: &BrokerService,
    base: String,
    t: TxnId,
    state: TxnState,
    who: Vec<Participant>,
) -> Vec<Participant> {
    let body = OutcomePush {
        txn_id_most_bits: t.most_sig_bits,
        txn_id_least_bits: t.least_sig_bits,
        committed: state == TxnState::Committed,
        participants: who.iter().map(Participant::segment).collect(),
    };
    let url = format!("{}{PUSH_PATH}", base.trim_end_matches('/'));
    let call = async {
        let (status, bytes) = crate::service::segments::call_broker(
            hyper::Method::POST,
            &url,
            &service.config.broker_client_token,
            serde_json::to_vec(&body).expect("a push serializes"),
            PUSH_WAIT,
        )
        .await?;
        if status != 200 {
            return Err(format!(
                "answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            ));
        }
        serde_json::from_slice::<Vec<String>>(&bytes).map_err(|e| e.to_string())
    };
    match tokio::time::timeout(PUSH_WAIT, call).await {
        Ok(Ok(done)) => who
            .into_iter()
            .filter(|p| done.contains(&p.segment()))
            .collect(),
        Ok(Err(e)) => {
            debug!(txn_id = %t, %url, error = %e, "pushing an outcome failed; waiting for the records");
            Vec::new()
        }
        Err(_) => {
            debug!(txn_id = %t, %url, "a pushed outcome was not answered in time; waiting for the records");
            Vec::new()
        }
    }
}
