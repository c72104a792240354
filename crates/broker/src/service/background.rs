//! The broker's periodic work: topic rates for stats and metrics, the
//! compaction threshold, and backlog quota enforcement (Pulsar's
//! `BacklogQuotaManager`).

use std::sync::Arc;

use tracing::info;

use super::BrokerService;
use crate::topic::Topic;

impl BrokerService {
    /// The broker's periodic work: rates for stats and metrics, and backlog
    /// quota enforcement. Runs until `shutdown`.
    pub async fn run_background(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let mut stats = tokio::time::interval(std::time::Duration::from_secs(
            self.config.stats_update_interval_secs,
        ));
        let mut quota = tokio::time::interval(std::time::Duration::from_secs(
            self.config.backlog_quota_check_interval_secs,
        ));
        stats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        quota.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A cluster broker: ownership checks and load reports.
        let mut ownership = tokio::time::interval(std::time::Duration::from_secs(1));
        ownership.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // And splits of its busy bundles, once a load manager round.
        let auto_split = self.cluster().is_some()
            && self.config.load_balancer_enabled
            && self.config.load_balancer_auto_bundle_split_enabled;
        let mut split = tokio::time::interval(std::time::Duration::from_secs(
            self.config.load_balancer_interval_secs.max(1),
        ));
        split.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        split.tick().await;
        self.resume_resizes().await;
        // Terminated segments that their subscriptions have read to the end.
        let mut drained = tokio::time::interval(std::time::Duration::from_secs(1));
        drained.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Policies changed here or on another broker: loaded topics follow.
        let mut policy_changes = self.resources.policy_changes();
        let mut following = true;
        // Inactive topics (Pulsar: brokerDeleteInactiveTopicsFrequencySeconds).
        let mut inactive = tokio::time::interval(std::time::Duration::from_secs(
            self.config.broker_delete_inactive_topics_frequency_seconds,
        ));
        inactive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        inactive.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                r = policy_changes.changed(), if following => {
                    if r.is_err() {
                        // The caches stopped (the broker is shutting down).
                        following = false;
                        continue;
                    }
                    self.apply_policies().await;
                }
                _ = inactive.tick() => self.delete_inactive_topics().await,
                _ = ownership.tick(), if self.cluster().is_some() => {
                    self.check_ownership().await;
                }
                _ = split.tick(), if auto_split => {
                    self.split_busy_bundle().await;
                }
                _ = stats.tick() => {
                    for t in self.loaded_topics() {
                        t.counters.update_rates();
                        let r = *t.counters.rates.lock();
                        t.limits.follow_publish_rate(r.msg_in, r.bytes_in);
                    }
                    self.walks.rates_updated();
                    let now_ms = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis() as u64)
                        .unwrap_or(0);
                    self.report_segment_loads(now_ms).await;
                    // One reading of each namespace's policies for all its
                    // topics, and a yield every thousand topics: with 100,000
                    // of them this walk held a worker for long enough to show
                    // in every producer's p99 (issue 47).
                    let mut by_ns: std::collections::HashMap<String, strobe_resources::policies::NamespacePolicies> =
                        std::collections::HashMap::new();
                    for (i, t) in self.loaded_topics().into_iter().enumerate() {
                        if i % 1000 == 999 {
                            tokio::task::yield_now().await;
                        }
                        let ns = by_ns
                            .entry(t.name.namespace().to_owned())
                            .or_insert_with(|| self.namespace_policies(t.name.namespace()).unwrap_or_default());
                        self.maybe_compact(&t, ns).await;
                        if let Err(e) = t.snapshot_txn().await {
                            tracing::warn!(topic = %t.name, error = %e, "transaction buffer snapshot failed");
                        }
                    }
                }
                _ = quota.tick() => self.check_backlog_quotas().await,
                _ = drained.tick() => self.mark_drained_segments().await,
            }
        }
    }

    /// Enforces every loaded topic's backlog quotas now (the periodic check;
    /// the admin API's `brokers/backlog-quota-check`).
    pub async fn check_backlog_quotas(&self) {
        for t in self.loaded_topics() {
            enforce_quota(&t).await;
        }
    }
}

impl BrokerService {
    /// Closes topics this broker no longer owns (a lost session, a log sealed
    /// by another broker) and reports its load when it changed.
    async fn check_ownership(&self) {
        let Some(c) = self.cluster().cloned() else {
            return;
        };
        let held = c.held_fences();
        let served: Vec<String> = held.iter().map(|(p, _)| p.clone()).collect();
        let now = super::walks::OwnershipSeen {
            held,
            ledger_failures: self.ledger_config.failures.get(),
            policies: self.resources.policy_generation(),
        };
        if self.walks.ownership_due(now) {
            self.close_unowned_topics().await;
        }
        let rates = self.walks.bundle_rates(served, || {
            self.bundle_loads(&c)
                .into_iter()
                .map(|(b, (_, r))| (b, r))
                .collect()
        });
        c.report_load(self.loaded_topic_count() as u32, rates).await;
        // Moves the load manager asked of this broker.
        let owned = c.owned_bundles();
        for (key, r) in c.move_requests() {
            let parsed = strobe_cluster::parse_bundle_path(&r.bundle);
            if owned.contains(&r.bundle)
                && let Some((ns, bundle)) = parsed
                && let Err(e) = self.transfer_bundle(ns, bundle, &r.to).await
            {
                tracing::warn!(bundle = %r.bundle, to = %r.to, error = %e, "a move the load manager asked for failed");
            }
            c.done_with(&key).await;
        }
    }
}

impl BrokerService {
    /// Each owned bundle's loaded topics and message rate (in and out).
    fn bundle_loads(
        &self,
        c: &strobe_cluster::Cluster,
    ) -> std::collections::BTreeMap<String, (u32, u64)> {
        let mut loads: std::collections::BTreeMap<String, (u32, u64)> =
            c.owned_bundles().into_iter().map(|b| (b, (0, 0))).collect();
        // Summed by bundle position first: finding each topic's bundle by
        // its path string was a twentieth of a survivor's CPU at 100,000
        // topics (issue 47).
        let mut by_bundle: std::collections::HashMap<(usize, usize), (String, u32, u64)> =
            std::collections::HashMap::new();
        self.for_each_loaded_with_bundle(|t, at| {
            if let Some((b, i)) = at {
                let (_, topics, rate) = by_bundle
                    .entry((Arc::as_ptr(b) as usize, i))
                    .or_insert_with(|| (b.paths[i].clone(), 0, 0));
                let tr = t.counters.rates.lock();
                *topics += 1;
                *rate += (tr.msg_in + tr.msg_out).round() as u64;
            }
        });
        for (path, topics, rate) in by_bundle.into_values() {
            if let Some(l) = loads.get_mut(&path) {
                l.0 += topics;
                l.1 += rate;
            }
        }
        loads
    }

    /// Splits the owned bundle furthest over the split limits, if any
    /// (Pulsar's automatic bundle split; see `cluster::balance::to_split`).
    async fn split_busy_bundle(&self) {
        let Some(c) = self.cluster().cloned() else {
            return;
        };
        let limits = strobe_cluster::balance::SplitLimits {
            max_topics: self.config.load_balancer_namespace_bundle_max_topics,
            max_msg_rate: self.config.load_balancer_namespace_bundle_max_msg_rate,
            max_bundles: self.config.load_balancer_namespace_maximum_bundles,
        };
        let count = |ns: &str| {
            self.bundles(ns)
                .map(|b| b.boundaries.len().saturating_sub(1) as u32)
                .unwrap_or(u32::MAX)
        };
        let Some(path) = strobe_cluster::balance::to_split(&self.bundle_loads(&c), count, limits)
        else {
            return;
        };
        let Some((ns, bundle)) = strobe_cluster::parse_bundle_path(&path) else {
            return;
        };
        info!(bundle = %path, "load manager: splitting a busy bundle");
        if let Err(e) = self.split_bundle(ns, bundle).await {
            tracing::warn!(bundle = %path, error = %e, "splitting a busy bundle failed");
        }
    }
}

/// One backlog quota check of a topic (Pulsar's `BacklogQuotaManager`):
/// consumer_backlog_eviction skips the oldest messages of subscriptions over
/// the limit; producer_exception disconnects the producers.
async fn enforce_quota(t: &Arc<Topic>) {
    use crate::subscription::AdminOp;
    use crate::topic::RetentionPolicy;
    let q = t.backlog_quota();
    if let Some(size) = q.size {
        let backlog = t.backlog_bytes();
        if size.limit >= 0 && backlog > size.limit as u64 {
            match size.policy {
                RetentionPolicy::ConsumerBacklogEviction => {
                    let ls = t.ledger.stats();
                    let mean = ls.bytes.checked_div(ls.entries).unwrap_or(1).max(1);
                    let keep = size.limit as u64 / mean;
                    for s in t.subscriptions().iter().filter(|s| s.durable) {
                        let over = s.cursor.backlog().saturating_sub(keep);
                        if over > 0 {
                            info!(topic = %t.name, subscription = %s.name, skipped = over, "backlog quota exceeded: oldest messages evicted");
                            let _ = s.admin(AdminOp::Skip(over)).await;
                        }
                    }
                }
                RetentionPolicy::ProducerException => {
                    info!(topic = %t.name, backlog, limit = size.limit, "backlog quota exceeded: producers disconnected");
                    t.disconnect_producers();
                }
                RetentionPolicy::ProducerRequestHold => {}
            }
        }
    }
    if let Some(age) = q.age
        && age.limit >= 0
        && age.policy == RetentionPolicy::ConsumerBacklogEviction
    {
        for s in t.subscriptions().iter().filter(|s| s.durable) {
            let _ = s.admin(AdminOp::ExpireOlderThan(age.limit as u64)).await;
        }
    }
}
