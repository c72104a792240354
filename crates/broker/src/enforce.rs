//! What a topic enforces of its namespace's policy documents (from
//! `strobe_resources::policies`): backlog quotas and retention as the topic
//! and its ledger apply them. The topic depends on this file, not the other
//! way round.

use strobe_resources::policies::NamespacePolicies;

/// Pulsar's `BacklogQuota`: a limit and what happens when a backlog exceeds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BacklogQuota {
    /// Bytes (destination_storage) or seconds (message_age); negative: no limit.
    pub limit: i64,
    pub policy: RetentionPolicy,
}

/// Pulsar's `BacklogQuota.RetentionPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionPolicy {
    ProducerRequestHold,
    ProducerException,
    ConsumerBacklogEviction,
}

/// The two quota types Pulsar has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BacklogQuotas {
    pub size: Option<BacklogQuota>,
    pub age: Option<BacklogQuota>,
}

/// The quotas a topic enforces, from a namespace's policies.
pub fn quotas_of(p: &NamespacePolicies) -> BacklogQuotas {
    let one = |key: &str, size: bool| {
        p.backlog_quota_map.get(key).and_then(|q| {
            let policy = match q.policy.as_str() {
                "producer_exception" => RetentionPolicy::ProducerException,
                "consumer_backlog_eviction" => RetentionPolicy::ConsumerBacklogEviction,
                _ => RetentionPolicy::ProducerRequestHold,
            };
            let limit = if size {
                q.limit_size.or(q.limit).unwrap_or(-1)
            } else {
                q.limit_time.unwrap_or(-1)
            };
            (limit >= 0).then_some(BacklogQuota { limit, policy })
        })
    };
    BacklogQuotas {
        size: one("destination_storage", true),
        age: one("message_age", false),
    }
}

/// Pulsar's retention policy as the ledger applies it: -1 is "no limit", and
/// without a policy consumed ledgers go at once (Pulsar's default, 0 and 0).
pub fn retention_of(p: &NamespacePolicies) -> strobe_ledger::Retention {
    match &p.retention_policies {
        None => strobe_ledger::Retention::default(),
        Some(r) => strobe_ledger::Retention {
            time: (r.retention_time_in_minutes >= 0)
                .then(|| std::time::Duration::from_secs(r.retention_time_in_minutes as u64 * 60)),
            size_bytes: (r.retention_size_in_mb >= 0)
                .then_some((r.retention_size_in_mb as u64) << 20),
        },
    }
}
