//! How decided headers leave the store: each one `forget_after` once every participant applied
//! it, and a periodic collection of those older than the retention that this missed.

use strobe_metadata::{MetadataStore, Op};
use strobe_model::TxnId;
use tracing::debug;

use super::{FORGET_QUEUE, TransactionCoordinator, decode, now_ms};
use crate::paths;

impl TransactionCoordinator {
    /// Deletes the header of `t`, decided and applied by every participant, `forget_after`
    /// (25 s) from now: kept for `transaction_retention_secs`, decided headers filled the store (at
    /// thousands of transactions a second, minutes are millions of keys, every one in each
    /// snapshot of the embedded store). Not at once: a participant that is not what it says
    /// (a topic instance about to be closed, whose owner has moved) would find the header gone
    /// when it loads elsewhere, and take the transaction for aborted; the wait is longer than
    /// twice the participants' reconciliation period. A retried END_TXN and the admin API find
    /// the header among the decided ones kept in memory; what this misses, the periodic
    /// collection deletes.
    pub(super) fn forget_header(&self, t: TxnId, version: u64) {
        let mut q = self.forget.lock();
        if q.len() < FORGET_QUEUE {
            q.push_back((
                std::time::Instant::now() + self.cfg.forget_after,
                t,
                version,
            ));
        }
    }

    /// Deletes the headers whose time has come (see [`Self::forget_header`]).
    pub(super) async fn forget_due(&self) {
        let now = std::time::Instant::now();
        let due: Vec<(TxnId, u64)> = {
            let mut q = self.forget.lock();
            let mut due = Vec::new();
            while q.front().is_some_and(|(at, _, _)| *at <= now) {
                if let Some((_, t, v)) = q.pop_front() {
                    due.push((t, v));
                }
            }
            due
        };
        // Concurrently: the batcher sends them as a few metadata transactions.
        let mut deletes = tokio::task::JoinSet::new();
        for (t, version) in due {
            let n = t.most_sig_bits;
            let Some(fence) = self.member.election(n as u32).and_then(|e| e.fence().ok()) else {
                continue;
            };
            let writes = self.writes.clone();
            deletes.spawn(async move {
                let ops = vec![fence, Op::delete(paths::header_path(t), Some(version))];
                if let Err(e) = writes.txn(ops).await {
                    debug!(txn_id = %t, error = %e, "a decided header stays for the collection");
                }
            });
        }
        while deletes.join_next().await.is_some() {}
    }

    /// Deletes decided headers older than the retention whose participants all applied them.
    pub(super) async fn collect(&self) {
        let horizon = now_ms().saturating_sub(self.cfg.retention.as_millis() as u64);
        for n in 0..self.parts.len() as u64 {
            let Ok(fence) = self.leadership(n).await else {
                continue;
            };
            let Ok(scan) = self.store.scan_prefix(&paths::header_prefix_of(n)).await else {
                continue;
            };
            for kv in scan.entries {
                let Some(t) = paths::txn_of_header(&kv.key) else {
                    continue;
                };
                let Ok(h) = decode(&kv.key, &kv.value) else {
                    continue;
                };
                if h.finalized_at.is_none_or(|f| f >= horizon) {
                    continue;
                }
                match self.store.list_keys(&paths::part_prefix(t)).await {
                    Ok(left) if left.is_empty() => {}
                    _ => continue,
                }
                let ops = vec![
                    fence.clone(),
                    Op::delete(kv.key.clone(), Some(kv.stat.version)),
                ];
                if let Err(e) = self.store.txn(ops).await {
                    debug!(txn_id = %t, error = %e, "header not collected");
                }
            }
        }
    }
}
