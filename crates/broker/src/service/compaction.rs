//! Compaction runs (Pulsar's `PersistentTopic.triggerCompaction` and the
//! compaction threshold): starting one, recording its horizon and compacted
//! ledger, and dropping the previous one. The algorithm itself is
//! [`crate::compaction`].

use std::sync::Arc;

use strobe_model::TopicName;
use tracing::{info, warn};

use super::BrokerService;
use crate::BrokerError;
use crate::topic::Topic;
use strobe_resources::{CompactionMeta, StoredPosition};

impl BrokerService {
    /// Starts a compaction of the topic (Pulsar's `PUT .../compaction`); 409
    /// while one runs. The status is [`BrokerService::compaction_status`].
    pub async fn compact(self: &Arc<Self>, name: &TopicName) -> Result<(), BrokerError> {
        use crate::compaction::CompactionStatus;
        if !name.is_persistent() {
            return Err(BrokerError::NotAllowed(
                "only persistent topics can be compacted".into(),
            ));
        }
        let topic = self.topic(name, name.partition().is_some()).await?;
        {
            let mut st = topic.compaction_status.lock();
            if *st == CompactionStatus::Running {
                return Err(BrokerError::Conflict(format!(
                    "a compaction of {name} is already running"
                )));
            }
            *st = CompactionStatus::Running;
        }
        let svc = self.clone();
        let name = name.clone();
        tokio::spawn(async move {
            let r = svc.run_compaction(&name, &topic).await;
            *topic.compaction_status.lock() = match r {
                Ok(()) => CompactionStatus::Success,
                Err(e) => {
                    warn!(topic = %name, error = %e, "compaction failed");
                    CompactionStatus::Error(e.to_string())
                }
            };
        });
        Ok(())
    }

    async fn run_compaction(
        &self,
        name: &TopicName,
        topic: &Arc<Topic>,
    ) -> Result<(), BrokerError> {
        let started = std::time::Instant::now();
        let previous = topic.compacted_view();
        let generation = previous
            .as_ref()
            .and_then(|v| v.ledger_name.rsplit('-').next()?.parse::<u64>().ok())
            .map_or(0, |g| g + 1);
        let ledger_name = format!("{name}/__compacted-{generation}");
        let Some(view) = crate::compaction::compact(
            &topic.ledger,
            previous.as_deref(),
            self.backend.as_ref(),
            self.fenced_ledger_config(topic.ledger.config().fence),
            &ledger_name,
            &|m| crate::topic::txn_of(m).is_some_and(|t| topic.txn_aborted(t)),
            self.config.max_message_size,
        )
        .await?
        else {
            return Ok(());
        };
        let horizon = view.horizon;
        let kept = view.len();
        self.resources
            .update_topic_meta(name, |m| {
                m.compaction = Some(CompactionMeta {
                    horizon: StoredPosition::at(Some(horizon)),
                    ledger: ledger_name.clone(),
                    generation,
                })
            })
            .await?;
        *topic.compacted.lock() = Some(Arc::new(view));
        // The entries after the horizon stay until the next compaction.
        let cursor = topic
            .ledger
            .open_cursor(
                crate::compaction::COMPACTION_CURSOR,
                strobe_ledger::InitialPosition::Earliest,
            )
            .await?;
        cursor.mark_delete(horizon);
        cursor.flush().await?;
        if let Some(old) = previous {
            old.close().await;
            if let Err(e) = crate::compaction::drop_ledger(
                self.backend.as_ref(),
                self.fenced_ledger_config(topic.ledger.config().fence),
                &old.ledger_name,
            )
            .await
            {
                warn!(topic = %name, error = %e, "dropping the previous compacted ledger failed");
            }
        }
        info!(topic = %name, %horizon, kept, elapsed_ms = started.elapsed().as_millis() as u64, "compaction done");
        Ok(())
    }

    /// Pulsar's compaction threshold: a topic with more than its
    /// `compaction_threshold` (its own, else its namespace's) bytes after its
    /// last compaction is compacted.
    /// `ns`: the topic's namespace policies (the caller reads them once per
    /// namespace for all its topics).
    pub(super) async fn maybe_compact(
        self: &Arc<Self>,
        t: &Arc<Topic>,
        ns: &strobe_resources::policies::NamespacePolicies,
    ) {
        if !t.name.is_persistent() {
            return;
        }
        let threshold = self.effective_with(&t.name, ns).compaction_threshold;
        if threshold == 0
            || *t.compaction_status.lock() == crate::compaction::CompactionStatus::Running
        {
            return;
        }
        let ls = t.ledger.stats();
        let pending = match t.compacted_view() {
            None => ls.bytes,
            Some(v) => {
                let mean = ls.bytes.checked_div(ls.entries).unwrap_or(0);
                let behind = match ls.last_confirmed {
                    Some(l) if l > v.horizon => t
                        .ledger
                        .open_cursor(
                            crate::compaction::COMPACTION_CURSOR,
                            strobe_ledger::InitialPosition::Earliest,
                        )
                        .await
                        .map(|c| c.backlog())
                        .unwrap_or(0),
                    _ => 0,
                };
                behind * mean
            }
        };
        if pending > threshold {
            info!(topic = %t.name, pending, threshold, "compaction threshold reached");
            if let Err(e) = self.compact(&t.name).await {
                warn!(topic = %t.name, error = %e, "could not start a compaction");
            }
        }
    }

    /// The compaction status of a topic: (status name, last error).
    pub async fn compaction_status(
        &self,
        name: &TopicName,
    ) -> Result<(String, Option<String>), BrokerError> {
        let topic = self.topic(name, false).await?;
        let st = topic.compaction_status.lock().clone();
        let err = match &st {
            crate::compaction::CompactionStatus::Error(e) => Some(e.clone()),
            _ => None,
        };
        Ok((st.name().to_owned(), err))
    }
}
