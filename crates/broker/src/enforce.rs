//! What a topic enforces of the policy documents (from
//! `strobe_resources::policies` and its own `TopicPolicies`): message TTL,
//! deduplication, backlog quotas, retention and the compaction threshold,
//! each the topic's own value, else its namespace's, else the broker's.
//! The topic depends on this file, not the other way round.

use std::collections::BTreeMap;

use strobe_resources::policies::{BacklogQuotaJson, NamespacePolicies, RetentionPolicies};
use strobe_tenancy::TopicPolicies;

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

/// The quotas a topic enforces: each type from the topic's own map when it
/// has that type, else from its namespace's.
pub fn quotas_of(
    topic: &BTreeMap<String, BacklogQuotaJson>,
    ns: &BTreeMap<String, BacklogQuotaJson>,
) -> BacklogQuotas {
    let one = |key: &str, size: bool| {
        topic.get(key).or_else(|| ns.get(key)).and_then(|q| {
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
pub fn retention_of(r: Option<&RetentionPolicies>) -> strobe_ledger::Retention {
    match r {
        None => strobe_ledger::Retention::default(),
        Some(r) => strobe_ledger::Retention {
            time: (r.retention_time_in_minutes >= 0)
                .then(|| std::time::Duration::from_secs(r.retention_time_in_minutes as u64 * 60)),
            size_bytes: (r.retention_size_in_mb >= 0)
                .then_some((r.retention_size_in_mb as u64) << 20),
        },
    }
}

/// The broker's own values, under the namespace's and the topic's.
#[derive(Debug, Clone, Copy, Default)]
pub struct BrokerDefaults {
    pub message_ttl_secs: u64,
    pub deduplication: bool,
}

/// What one topic enforces of the policies a topic and its namespace both set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effective {
    /// Seconds (0: messages never expire).
    pub message_ttl_secs: u64,
    pub deduplication: bool,
    pub quotas: BacklogQuotas,
    pub retention: strobe_ledger::Retention,
    /// Bytes after the last compaction that start the next (0: only when asked).
    pub compaction_threshold: u64,
    /// Messages with a delivery time wait for it (else go out at once).
    pub delayed_delivery: bool,
    /// Unacknowledged messages per Shared/Key_Shared consumer (0: none);
    /// `None`: the broker's setting.
    pub max_unacked_per_consumer: Option<u32>,
    /// Unacknowledged messages per Shared/Key_Shared subscription (0: none).
    pub max_unacked_per_subscription: u32,
}

/// Topic over namespace over broker (Pulsar's order for topic-level policies).
pub fn effective(
    topic: &TopicPolicies,
    ns: &NamespacePolicies,
    broker: BrokerDefaults,
) -> Effective {
    Effective {
        message_ttl_secs: topic
            .message_ttl_in_seconds
            .map(|v| v.max(0) as u64)
            .or(ns.message_ttl_in_seconds)
            .unwrap_or(broker.message_ttl_secs),
        deduplication: topic
            .deduplication_enabled
            .or(ns.deduplication_enabled)
            .unwrap_or(broker.deduplication),
        quotas: quotas_of(&topic.backlog_quota_map, &ns.backlog_quota_map),
        retention: retention_of(
            topic
                .retention_policies
                .as_ref()
                .or(ns.retention_policies.as_ref()),
        ),
        compaction_threshold: topic
            .compaction_threshold
            .map(|v| v.max(0) as u64)
            .or(ns.compaction_threshold)
            .unwrap_or(0),
        delayed_delivery: topic
            .delayed_delivery
            .or(ns.delayed_delivery_policies)
            .is_none_or(|d| d.active),
        max_unacked_per_consumer: topic
            .max_unacked_messages_on_consumer
            .or(ns.max_unacked_messages_per_consumer)
            .map(|v| v.max(0) as u32),
        max_unacked_per_subscription: topic
            .max_unacked_messages_on_subscription
            .or(ns.max_unacked_messages_per_subscription)
            .map_or(0, |v| v.max(0) as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_value_wins_over_its_namespace_and_the_broker() {
        let broker = BrokerDefaults {
            message_ttl_secs: 5,
            deduplication: false,
        };
        let mut ns = NamespacePolicies::default();
        let mut topic = TopicPolicies::default();
        let e = effective(&topic, &ns, broker);
        assert_eq!((e.message_ttl_secs, e.deduplication), (5, false));
        assert_eq!(e.retention, strobe_ledger::Retention::default());
        ns.message_ttl_in_seconds = Some(60);
        ns.deduplication_enabled = Some(true);
        ns.retention_policies = Some(RetentionPolicies {
            retention_time_in_minutes: 10,
            retention_size_in_mb: -1,
        });
        ns.backlog_quota_map.insert(
            "destination_storage".into(),
            BacklogQuotaJson {
                limit_size: Some(100),
                policy: "producer_exception".into(),
                ..Default::default()
            },
        );
        let e = effective(&topic, &ns, broker);
        assert_eq!((e.message_ttl_secs, e.deduplication), (60, true));
        assert_eq!(e.retention.time, Some(std::time::Duration::from_secs(600)));
        assert_eq!(e.retention.size_bytes, None);
        assert_eq!(e.quotas.size.unwrap().limit, 100);
        topic.message_ttl_in_seconds = Some(0);
        topic.deduplication_enabled = Some(false);
        topic.retention_policies = Some(RetentionPolicies {
            retention_time_in_minutes: -1,
            retention_size_in_mb: 1,
        });
        topic.backlog_quota_map.insert(
            "message_age".into(),
            BacklogQuotaJson {
                limit_time: Some(30),
                policy: "consumer_backlog_eviction".into(),
                ..Default::default()
            },
        );
        topic.compaction_threshold = Some(1 << 20);
        let e = effective(&topic, &ns, broker);
        assert_eq!((e.message_ttl_secs, e.deduplication), (0, false));
        assert_eq!(e.retention.time, None);
        assert_eq!(e.retention.size_bytes, Some(1 << 20));
        // Each quota type on its own: the namespace's size quota stays.
        assert_eq!(e.quotas.size.unwrap().limit, 100);
        assert_eq!(
            e.quotas.age.unwrap().policy,
            RetentionPolicy::ConsumerBacklogEviction
        );
        assert_eq!(e.compaction_threshold, 1 << 20);
    }
}
