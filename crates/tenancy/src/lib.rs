//! What the operators of a shared cluster limit, as plain data and
//! decisions: no I/O, no clock (times are passed in), no tokio.
//!
//! - [`rate`]: token buckets for publish, dispatch and subscribe rates
//!   (Pulsar's PIP-322 rate limiters).
//! - [`policy`]: the policy documents in Pulsar's JSON shapes and how a
//!   topic's limits follow from its topic, namespace and broker levels.
//! - [`inactive`]: when an inactive topic is deleted.
//! - [`subscribe`]: the subscribe rate, per consumer.
//! - [`storage`]: retention and backlog quotas, as namespaces and topics set them.

pub mod inactive;
pub mod policy;
pub mod rate;
pub mod storage;
pub mod subscribe;

pub use policy::{
    AutoSubscriptionCreation, BrokerLevel, DispatchLimit, DispatchRate, InactiveTopicDeleteMode,
    InactiveTopicPolicies, Limits, NamespaceLevel, PublishRate, SUBSCRIPTION_TYPES, SubscribeRate,
    TopicPolicies, subscription_type_bit, subscription_types_refused,
};
pub use rate::{Rate, RateLimiter, Rates, TokenBucket};
