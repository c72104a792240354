//! The policy documents the metadata store holds, with Pulsar's JSON field
//! names (Pulsar's `org.apache.pulsar.common.policies.data`): tenants,
//! namespace policies, retention and backlog quotas. What a topic makes of
//! them is the broker's (`strobe_broker::enforce`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
pub use strobe_tenancy::storage::{BacklogQuotaJson, RetentionPolicies};
use strobe_tenancy::{
    DispatchRate, InactiveTopicPolicies, NamespaceLevel, PublishRate, SubscribeRate,
};

use crate::error::ResourcesError;

/// A namespace's policies, stored as JSON at `/admin/policies/<tenant>/<ns>`
/// with Pulsar's field names.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, rename_all = "snake_case")]
pub struct NamespacePolicies {
    #[serde(
        rename = "deduplicationEnabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub deduplication_enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_ttl_in_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_policies: Option<RetentionPolicies>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_compatibility_strategy: Option<String>,
    /// The older, deprecated strategy setting (Pulsar's
    /// `SchemaAutoUpdateCompatibilityStrategy`), used when the above is unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_auto_update_compatibility_strategy: Option<String>,
    /// May producers register new schemas (Pulsar: is_allow_auto_update_schema, default true)?
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_allow_auto_update_schema: Option<bool>,
    /// Compact a topic once this many bytes follow its last compaction
    /// (Pulsar: compaction_threshold; 0 or none: only when asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction_threshold: Option<u64>,
    /// Must producers of a topic with a schema bring one (default false)?
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_validation_enforced: Option<bool>,
    pub auth_policies: AuthPolicies,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication_clusters: Option<Vec<String>>,
    /// Quotas by type: `destination_storage` (bytes) and `message_age` (seconds).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub backlog_quota_map: BTreeMap<String, BacklogQuotaJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundles: Option<crate::bundles::BundlesData>,
    /// The namespace's changes to the broker's autoscale policy for its
    /// scalable topics (PIP-483); a topic's own override wins over it.
    #[serde(
        rename = "scalableTopicAutoScalePolicy",
        skip_serializing_if = "Option::is_none"
    )]
    pub scalable_topic_auto_scale_policy: Option<strobe_layout::AutoScalePolicyOverride>,
    /// Publish rates by cluster name (Pulsar's `publishMaxMessageRate`).
    #[serde(
        rename = "publishMaxMessageRate",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub publish_max_message_rate: BTreeMap<String, PublishRate>,
    /// Dispatch rates of each topic, by cluster name.
    #[serde(
        rename = "topicDispatchRate",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub topic_dispatch_rate: BTreeMap<String, DispatchRate>,
    /// The deprecated name of `topicDispatchRate`, still read.
    #[serde(
        rename = "clusterDispatchRate",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub cluster_dispatch_rate: BTreeMap<String, DispatchRate>,
    /// Dispatch rates of each subscription, by cluster name.
    #[serde(
        rename = "subscriptionDispatchRate",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub subscription_dispatch_rate: BTreeMap<String, DispatchRate>,
    /// Subscribe rates per consumer, by cluster name.
    #[serde(
        rename = "clusterSubscribeRate",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub cluster_subscribe_rate: BTreeMap<String, SubscribeRate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_producers_per_topic: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_consumers_per_topic: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_consumers_per_subscription: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_subscriptions_per_topic: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_topics_per_namespace: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inactive_topic_policies: Option<InactiveTopicPolicies>,
    /// The subscription types consumers may use (none or empty: all four).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription_types_enabled: Option<std::collections::BTreeSet<String>>,
    #[serde(
        rename = "autoSubscriptionCreationOverride",
        skip_serializing_if = "Option::is_none"
    )]
    pub auto_subscription_creation: Option<strobe_tenancy::AutoSubscriptionCreation>,
    #[serde(
        rename = "autoTopicCreationOverride",
        skip_serializing_if = "Option::is_none"
    )]
    pub auto_topic_creation: Option<AutoTopicCreation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delayed_delivery_policies: Option<strobe_tenancy::storage::DelayedDelivery>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unacked_messages_per_consumer: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unacked_messages_per_subscription: Option<i32>,
    /// Must producers encrypt their messages (Pulsar's `encryption_required`)?
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encryption_required: Option<bool>,
    /// User metadata (Pulsar's namespace properties).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

impl NamespacePolicies {
    /// What this namespace says to the topics of `cluster`.
    pub fn level(&self, cluster: &str) -> NamespaceLevel {
        NamespaceLevel {
            publish_rate: self.publish_max_message_rate.get(cluster).copied(),
            dispatch_rate: self
                .topic_dispatch_rate
                .get(cluster)
                .or_else(|| self.cluster_dispatch_rate.get(cluster))
                .copied(),
            subscription_dispatch_rate: self.subscription_dispatch_rate.get(cluster).copied(),
            subscribe_rate: self.cluster_subscribe_rate.get(cluster).copied(),
            max_producers_per_topic: self.max_producers_per_topic,
            max_consumers_per_topic: self.max_consumers_per_topic,
            max_consumers_per_subscription: self.max_consumers_per_subscription,
            max_subscriptions_per_topic: self.max_subscriptions_per_topic,
            inactive_topic_policies: self.inactive_topic_policies,
            subscription_types_refused: strobe_tenancy::subscription_types_refused(
                self.subscription_types_enabled.as_ref(),
            )
            .ok()
            .flatten(),
            auto_subscription_creation: self.auto_subscription_creation,
        }
    }
}

/// Pulsar's `AutoTopicCreationOverride`: a namespace's own say on creating
/// topics on first use.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct AutoTopicCreation {
    pub allow_auto_topic_creation: bool,
    /// `partitioned` or `non-partitioned`.
    pub topic_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_num_partitions: Option<u32>,
}

/// Pulsar's `AuthPolicies`: permissions by role on the namespace, on single
/// topics, and the roles allowed on each subscription.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct AuthPolicies {
    pub namespace_auth: BTreeMap<String, std::collections::BTreeSet<String>>,
    pub destination_auth: BTreeMap<String, BTreeMap<String, std::collections::BTreeSet<String>>>,
    pub subscription_auth_roles: BTreeMap<String, std::collections::BTreeSet<String>>,
}

/// The actions a role may be granted (Pulsar's `AuthAction`).
pub const AUTH_ACTIONS: &[&str] = &[
    "produce",
    "consume",
    "functions",
    "sources",
    "sinks",
    "packages",
];

/// Pulsar's `TenantInfo`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct TenantInfo {
    pub admin_roles: Vec<String>,
    pub allowed_clusters: Vec<String>,
}

/// Refuses an action Pulsar does not know (`AuthAction`).
pub fn validate_actions(
    role: &str,
    actions: &std::collections::BTreeSet<String>,
) -> Result<(), ResourcesError> {
    if let Some(a) = actions.iter().find(|a| !AUTH_ACTIONS.contains(&a.as_str())) {
        return Err(ResourcesError::Invalid(format!(
            "unknown action {a:?} for role {role}: expected one of {}",
            AUTH_ACTIONS.join(", ")
        )));
    }
    Ok(())
}
