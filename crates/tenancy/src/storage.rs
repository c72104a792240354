//! The policies about a topic's storage that a namespace and a single
//! topic both set, in Pulsar's JSON shapes: retention, backlog quotas and
//! delayed delivery
//! (`org.apache.pulsar.common.policies.data`). What a topic makes of them
//! is the broker's (`strobe_broker::enforce`).

use serde::{Deserialize, Serialize};

/// Pulsar's `BacklogQuota` JSON.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, rename_all = "camelCase")]
pub struct BacklogQuotaJson {
    /// Deprecated alias of `limitSize`, still written by older clients.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_size: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_time: Option<i64>,
    pub policy: String,
}

/// Pulsar's `RetentionPolicies`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RetentionPolicies {
    pub retention_time_in_minutes: i64,
    #[serde(rename = "retentionSizeInMB")]
    pub retention_size_in_mb: i64,
}

/// Pulsar's `DelayedDeliveryPolicies`: whether messages sent with a delivery
/// time wait for it (`active`); Pulsar's tracker tick and largest delay ride
/// along (Strobe's dispatcher has no tick, and a refused send is not failed
/// by every client, so neither is enforced).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, rename_all = "camelCase")]
pub struct DelayedDelivery {
    pub active: bool,
    pub tick_time: i64,
    pub max_delivery_delay_in_millis: i64,
}
