//! Transaction commands (Pulsar's `ServerCnx.handleTcClientConnectRequest`, `handleNewTxn`,
//! `handleAddPartitionToTxn`, `handleAddSubscriptionToTxn`, `handleEndTxn`, and PIP-473's
//! `handleCommandWatchTcAssignments`). Each request runs in its own task and answers in its
//! own response shape, errors included: END_TXN waits for participants, and other commands on
//! the connection (it is shared with producers and consumers) must not wait behind it.

use std::sync::Arc;
use std::time::Duration;

use strobe_model::TxnId;
use strobe_txn::header::SubRef;
use strobe_txn::{EndAction, TxnError};
use strobe_wire::proto::{self, ServerError, TcAssignment};
use strobe_wire::{Command, OutFrame, commands};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span};

use super::{Outcome, ServerCnx};
use crate::BrokerError;
use crate::txn::TxnService;

/// PIP-473's `TC_ASSIGNMENTS_REPUSH_DELAY_MS`: while a partition has no leader the snapshot is
/// sent again this often, so a client never waits on a push that will not come.
const REPUSH_EVERY: Duration = Duration::from_millis(1000);

/// Most coordinator watches one connection may hold.
pub(super) const MAX_TC_WATCHES: usize = 16;

fn txn(most: Option<u64>, least: Option<u64>) -> Option<TxnId> {
    Some(TxnId {
        most_sig_bits: most?,
        least_sig_bits: least?,
    })
}

fn code(e: &BrokerError) -> (ServerError, String) {
    (e.server_error(), e.to_string())
}

impl ServerCnx {
    fn txn_service(&self) -> Result<Arc<TxnService>, BrokerError> {
        self.service.txn().cloned().ok_or_else(|| {
            BrokerError::NotAllowed("transactions are not enabled on this broker".into())
        })
    }

    /// Runs `work` in its own task and sends the reply it builds.
    fn reply_later<F>(&self, work: F) -> Outcome
    where
        F: std::future::Future<Output = Command> + Send + 'static,
    {
        let tx = self.tx.clone();
        tokio::spawn(
            async move {
                let reply = work.await;
                let _ = tx.send(OutFrame::command(reply)).await;
            }
            .in_current_span(),
        );
        Outcome::Nothing
    }

    pub(super) fn tc_client_connect(&self, c: proto::CommandTcClientConnectRequest) -> Outcome {
        let rid = c.request_id;
        let svc = self.txn_service();
        self.reply_later(async move {
            let r = match svc {
                Ok(s) => s
                    .coordinator
                    .connect(c.tc_id)
                    .await
                    .map_err(BrokerError::from),
                Err(e) => Err(e),
            };
            commands::tc_client_connect_response(rid, r.err().map(|e| code(&e)))
        })
    }

    pub(super) fn new_txn(&self, c: proto::CommandNewTxn) -> Outcome {
        let rid = c.request_id;
        let svc = self.txn_service();
        self.reply_later(async move {
            let r = match svc {
                Ok(s) => s
                    .coordinator
                    .new_txn(c.tc_id.unwrap_or(0), c.txn_ttl_millis.unwrap_or(0))
                    .await
                    .map_err(BrokerError::from),
                Err(e) => Err(e),
            };
            match r {
                Ok(t) => {
                    commands::new_txn_response(rid, Some((t.most_sig_bits, t.least_sig_bits)), None)
                }
                Err(e) => commands::new_txn_response(rid, None, Some(code(&e))),
            }
        })
    }

    pub(super) fn add_partition_to_txn(&self, c: proto::CommandAddPartitionToTxn) -> Outcome {
        let rid = c.request_id;
        let t = txn(c.txnid_most_bits, c.txnid_least_bits);
        let svc = self.txn_service();
        self.reply_later(async move {
            let (m, l) = t.map_or((0, 0), |t| (t.most_sig_bits, t.least_sig_bits));
            let r = match (svc, t) {
                (Err(e), _) => Err(e),
                (_, None) => {
                    Err(TxnError::NotAllowed("ADD_PARTITION_TO_TXN without a txnid".into()).into())
                }
                (Ok(s), Some(t)) => {
                    let topics = normalize_topics(&c.partitions);
                    match topics {
                        Ok(topics) => s.add_partitions(t, &topics).await,
                        Err(e) => Err(e),
                    }
                }
            };
            commands::add_partition_to_txn_response(rid, m, l, r.err().map(|e| code(&e)))
        })
    }

    pub(super) fn add_subscription_to_txn(&self, c: proto::CommandAddSubscriptionToTxn) -> Outcome {
        let rid = c.request_id;
        let t = txn(c.txnid_most_bits, c.txnid_least_bits);
        let svc = self.txn_service();
        self.reply_later(async move {
            let (m, l) = t.map_or((0, 0), |t| (t.most_sig_bits, t.least_sig_bits));
            let r = match (svc, t) {
                (Err(e), _) => Err(e),
                (_, None) => Err(TxnError::NotAllowed(
                    "ADD_SUBSCRIPTION_TO_TXN without a txnid".into(),
                )
                .into()),
                (Ok(s), Some(t)) => {
                    let topics: Vec<String> =
                        c.subscription.iter().map(|s| s.topic.clone()).collect();
                    match normalize_topics(&topics) {
                        Ok(topics) => {
                            let subs: Vec<SubRef> = topics
                                .into_iter()
                                .zip(&c.subscription)
                                .map(|(topic, s)| SubRef {
                                    topic,
                                    subscription: s.subscription.clone(),
                                })
                                .collect();
                            s.coordinator
                                .add_participants(t, &[], &subs)
                                .await
                                .map_err(BrokerError::from)
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            commands::add_subscription_to_txn_response(rid, m, l, r.err().map(|e| code(&e)))
        })
    }

    pub(super) fn end_txn(&self, c: proto::CommandEndTxn) -> Outcome {
        let rid = c.request_id;
        let t = txn(c.txnid_most_bits, c.txnid_least_bits);
        let svc = self.txn_service();
        let span = info_span!("end_txn", txn_id = tracing::field::Empty, request_id = rid);
        if let Some(t) = t {
            span.record("txn_id", tracing::field::display(t));
        }
        self.reply_later(
            async move {
                let (m, l) = t.map_or((0, 0), |t| (t.most_sig_bits, t.least_sig_bits));
                let action = match c.txn_action {
                    Some(0) => Some(EndAction::Commit),
                    Some(1) => Some(EndAction::Abort),
                    _ => None,
                };
                let r = match (svc, t, action) {
                    (Err(e), _, _) => Err(e),
                    (_, None, _) => {
                        Err(TxnError::NotAllowed("END_TXN without a txnid".into()).into())
                    }
                    (_, _, None) => Err(TxnError::NotAllowed(format!(
                        "END_TXN with an unknown txn_action {:?}",
                        c.txn_action
                    ))
                    .into()),
                    (Ok(s), Some(t), Some(a)) => {
                        s.coordinator.end_txn(t, a).await.map_err(BrokerError::from)
                    }
                };
                if let Err(e) = &r {
                    debug!(error = %e, "END_TXN refused");
                }
                commands::end_txn_response(rid, m, l, r.err().map(|e| code(&e)))
            }
            .instrument(span),
        )
    }

    /// WATCH_TC_ASSIGNMENTS: a full snapshot now, again on every leadership change, and every
    /// second while a partition has no leader.
    pub(super) fn watch_tc_assignments(&mut self, c: proto::CommandWatchTcAssignments) -> Outcome {
        let watch_id = c.watch_id;
        let svc = match self.txn_service() {
            Ok(s) => s,
            Err(e) => {
                return Outcome::Reply(commands::watch_tc_assignments_error(
                    watch_id,
                    ServerError::NotAllowedError,
                    e.to_string(),
                ));
            }
        };
        if self.tc_watches.len() >= MAX_TC_WATCHES && !self.tc_watches.contains_key(&watch_id) {
            return Outcome::Reply(commands::watch_tc_assignments_error(
                watch_id,
                ServerError::NotAllowedError,
                format!("at most {MAX_TC_WATCHES} coordinator watches per connection"),
            ));
        }
        let cancel = CancellationToken::new();
        if let Some(old) = self.tc_watches.insert(watch_id, cancel.clone()) {
            old.cancel();
        }
        let tx = self.tx.clone();
        let mut rx = svc.coordinator.member().view().subscribe();
        // The listener this connection's lookups named, if any: its clients reach the leaders
        // there (a connection that named none gets the default URLs).
        let listener = self.service.cluster().and_then(|c| c.listener_of(self.id));
        tokio::spawn(
            async move {
                loop {
                    let table = rx.borrow_and_update().clone();
                    let assignments: Vec<TcAssignment> = table
                        .leaders
                        .iter()
                        .enumerate()
                        .filter_map(|(n, l)| {
                            let (url, tls) = l.as_ref()?.urls_for(listener.as_deref());
                            Some(TcAssignment {
                                tc_id: n as u64,
                                broker_service_url: Some(url),
                                broker_service_url_tls: tls,
                            })
                        })
                        .collect();
                    let update = commands::watch_tc_assignments_update(
                        watch_id,
                        table.parallelism,
                        assignments,
                    );
                    if tx.send(OutFrame::command(update)).await.is_err() {
                        return;
                    }
                    let complete = table.is_complete();
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        r = rx.changed() => if r.is_err() { return },
                        _ = tokio::time::sleep(REPUSH_EVERY), if !complete => {}
                    }
                }
            }
            .in_current_span(),
        );
        Outcome::Nothing
    }

    pub(super) fn watch_tc_assignments_close(
        &mut self,
        c: proto::CommandWatchTcAssignmentsClose,
    ) -> Outcome {
        if let Some(w) = self.tc_watches.remove(&c.watch_id) {
            w.cancel();
        }
        Outcome::Nothing
    }
}

/// Topic names as the brokers key them (`persistent://tenant/ns/topic[-partition-N]`).
fn normalize_topics(names: &[String]) -> Result<Vec<String>, BrokerError> {
    names
        .iter()
        .map(|n| Ok(strobe_model::TopicName::parse(n)?.to_string()))
        .collect()
}
