//! The policy documents of a shared cluster, in Pulsar's JSON shapes
//! (`org.apache.pulsar.common.policies.data`): rates, limits and the
//! inactive-topic policy, as a namespace or a single topic holds them, and
//! what a topic enforces once topic, namespace and broker have spoken.
//!
//! The most specific level that says something wins (topic, then
//! namespace, then broker), as in Pulsar's `PolicyHierarchyValue`. A level
//! that sets a negative count, or a rate with neither a message nor a byte
//! limit, says nothing and the next level speaks; 0 is "no limit".

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::rate::{Rate, Rates};

/// Pulsar's `PublishRate`: messages and bytes per second a topic takes from
/// all its producers together; -1 (or 0): no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PublishRate {
    pub publish_throttling_rate_in_msg: i32,
    pub publish_throttling_rate_in_byte: i64,
}

impl Default for PublishRate {
    fn default() -> Self {
        PublishRate {
            publish_throttling_rate_in_msg: -1,
            publish_throttling_rate_in_byte: -1,
        }
    }
}

impl PublishRate {
    fn rates(&self) -> Option<Rates> {
        let r = Rates {
            msgs: positive(self.publish_throttling_rate_in_msg.into()).map(Rate::per_second),
            bytes: positive(self.publish_throttling_rate_in_byte).map(Rate::per_second),
        };
        (!r.is_unlimited()).then_some(r)
    }
}

/// Pulsar's `DispatchRate`: messages and bytes a topic or a subscription
/// dispatches per `ratePeriodInSecond`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DispatchRate {
    pub dispatch_throttling_rate_in_msg: i32,
    pub dispatch_throttling_rate_in_byte: i64,
    /// The limit follows the topic's publish rate (the configured values are
    /// then added to it).
    pub relative_to_publish_rate: bool,
    pub rate_period_in_second: i32,
}

impl Default for DispatchRate {
    fn default() -> Self {
        DispatchRate {
            dispatch_throttling_rate_in_msg: -1,
            dispatch_throttling_rate_in_byte: -1,
            relative_to_publish_rate: false,
            rate_period_in_second: 1,
        }
    }
}

/// A dispatch limit as a dispatcher applies it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchLimit {
    pub rates: Rates,
    pub relative_to_publish_rate: bool,
}

impl DispatchLimit {
    /// The rates for a topic publishing `publish` (messages, bytes per
    /// second): with `relative_to_publish_rate`, the configured rates are
    /// added to what comes in, as Pulsar does.
    pub fn rates_at(&self, publish: (f64, f64)) -> Rates {
        if !self.relative_to_publish_rate {
            return self.rates;
        }
        let plus = |r: Option<Rate>, per_sec: f64| {
            r.map(|r| Rate {
                tokens: r.tokens + (per_sec.max(0.0) * r.period.as_secs_f64()) as u64,
                period: r.period,
            })
        };
        Rates {
            msgs: plus(self.rates.msgs, publish.0),
            bytes: plus(self.rates.bytes, publish.1),
        }
    }
}

impl DispatchRate {
    fn limit(&self) -> Option<DispatchLimit> {
        let period = Duration::from_secs(self.rate_period_in_second.max(1) as u64);
        let rate = |n: Option<u64>| n.map(|tokens| Rate { tokens, period });
        let rates = Rates {
            msgs: rate(positive(self.dispatch_throttling_rate_in_msg.into())),
            bytes: rate(positive(self.dispatch_throttling_rate_in_byte)),
        };
        (!rates.is_unlimited()).then_some(DispatchLimit {
            rates,
            relative_to_publish_rate: self.relative_to_publish_rate,
        })
    }
}

/// Pulsar's `SubscribeRate`: subscribes one consumer (its host, name and
/// id) may make per `ratePeriodInSecond`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SubscribeRate {
    pub subscribe_throttling_rate_per_consumer: i32,
    pub rate_period_in_second: i32,
}

impl Default for SubscribeRate {
    fn default() -> Self {
        SubscribeRate {
            subscribe_throttling_rate_per_consumer: -1,
            rate_period_in_second: 30,
        }
    }
}

impl SubscribeRate {
    fn rate(&self) -> Option<Rate> {
        let tokens = positive(self.subscribe_throttling_rate_per_consumer.into())?;
        let period = positive(self.rate_period_in_second.into())?;
        Some(Rate {
            tokens,
            period: Duration::from_secs(period),
        })
    }
}

/// Pulsar's `InactiveTopicDeleteMode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InactiveTopicDeleteMode {
    /// Deleted when it has no subscriptions and no producers.
    #[default]
    DeleteWhenNoSubscriptions,
    /// Deleted (with its subscriptions) when every subscription has read
    /// everything and no producer or consumer is connected.
    DeleteWhenSubscriptionsCaughtUp,
}

impl InactiveTopicDeleteMode {
    pub fn as_str(&self) -> &'static str {
        match self {
            InactiveTopicDeleteMode::DeleteWhenNoSubscriptions => "delete_when_no_subscriptions",
            InactiveTopicDeleteMode::DeleteWhenSubscriptionsCaughtUp => {
                "delete_when_subscriptions_caught_up"
            }
        }
    }

    pub fn parse(s: &str) -> Option<InactiveTopicDeleteMode> {
        match s {
            "delete_when_no_subscriptions" => {
                Some(InactiveTopicDeleteMode::DeleteWhenNoSubscriptions)
            }
            "delete_when_subscriptions_caught_up" => {
                Some(InactiveTopicDeleteMode::DeleteWhenSubscriptionsCaughtUp)
            }
            _ => None,
        }
    }
}

/// Pulsar's `InactiveTopicPolicies`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct InactiveTopicPolicies {
    pub inactive_topic_delete_mode: InactiveTopicDeleteMode,
    pub max_inactive_duration_seconds: i32,
    pub delete_while_inactive: bool,
}

/// A topic's own policies (Pulsar's `TopicPolicies`, the part of it these
/// controls use), stored for a topic and, for a partitioned topic, shared by
/// its partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TopicPolicies {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish_rate: Option<PublishRate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_rate: Option<DispatchRate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription_dispatch_rate: Option<DispatchRate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscribe_rate: Option<SubscribeRate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_producer_per_topic: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_consumer_per_topic: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_consumers_per_subscription: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_subscriptions_per_topic: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inactive_topic_policies: Option<InactiveTopicPolicies>,
    /// Seconds after which unacknowledged messages expire (0: never).
    #[serde(
        rename = "messageTTLInSeconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub message_ttl_in_seconds: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deduplication_enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_policies: Option<crate::storage::RetentionPolicies>,
    /// Quotas by type, `destination_storage` and `message_age` (Pulsar's
    /// field name, with its capital L).
    #[serde(
        rename = "backLogQuotaMap",
        skip_serializing_if = "std::collections::BTreeMap::is_empty"
    )]
    pub backlog_quota_map: std::collections::BTreeMap<String, crate::storage::BacklogQuotaJson>,
    /// Bytes after the last compaction that start the next (0: only when asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction_threshold: Option<i64>,
    /// The subscription types consumers may use (Pulsar's names; none or
    /// empty: the namespace's, else all four).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription_types_enabled: Option<std::collections::BTreeSet<String>>,
    /// May a subscribe create a subscription that does not exist (Pulsar's
    /// `AutoSubscriptionCreationOverride`)?
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_subscription_creation: Option<AutoSubscriptionCreation>,
    /// The schema compatibility strategy (Pulsar's name), over the namespace's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_compatibility_strategy: Option<String>,
    /// Must producers bring a schema when the topic has one?
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_validation_enforced: Option<bool>,
    /// Whether delivery times are honoured (Pulsar's `delayedDeliveryEnabled`
    /// and its tick, as the topic policy's `DelayedDeliveryPolicies`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delayed_delivery: Option<crate::storage::DelayedDelivery>,
    /// Unacknowledged messages a Shared or Key_Shared consumer may hold (0: no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unacked_messages_on_consumer: Option<i32>,
    /// Unacknowledged messages a Shared or Key_Shared subscription may hold (0: no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unacked_messages_on_subscription: Option<i32>,
    /// User metadata (Pulsar's topic properties), kept with the policies.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub properties: std::collections::BTreeMap<String, String>,
}

impl TopicPolicies {
    pub fn is_empty(&self) -> bool {
        *self == TopicPolicies::default()
    }
}

/// What a namespace says, for this broker's cluster (Pulsar keeps the rates
/// by cluster name; the caller picks its cluster's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NamespaceLevel {
    pub publish_rate: Option<PublishRate>,
    pub dispatch_rate: Option<DispatchRate>,
    pub subscription_dispatch_rate: Option<DispatchRate>,
    pub subscribe_rate: Option<SubscribeRate>,
    pub max_producers_per_topic: Option<i32>,
    pub max_consumers_per_topic: Option<i32>,
    pub max_consumers_per_subscription: Option<i32>,
    pub max_subscriptions_per_topic: Option<i32>,
    pub inactive_topic_policies: Option<InactiveTopicPolicies>,
    /// The subscription types it refuses ([`subscription_types_refused`]).
    pub subscription_types_refused: Option<u8>,
    pub auto_subscription_creation: Option<AutoSubscriptionCreation>,
}

/// Pulsar's `AutoSubscriptionCreationOverride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AutoSubscriptionCreation {
    pub allow_auto_subscription_creation: bool,
}

/// The four subscription types by Pulsar's names, each a bit of a mask.
pub const SUBSCRIPTION_TYPES: [&str; 4] = ["Exclusive", "Shared", "Failover", "Key_Shared"];

/// The bit of subscription type `name` (Pulsar's name), if it is one.
pub fn subscription_type_bit(name: &str) -> Option<u8> {
    SUBSCRIPTION_TYPES
        .iter()
        .position(|t| *t == name)
        .map(|i| 1 << i)
}

/// The mask of the types a set of enabled types leaves out: `None` for no
/// set or an empty one (Pulsar: not set), an error naming a type that is
/// none of the four.
pub fn subscription_types_refused(
    enabled: Option<&std::collections::BTreeSet<String>>,
) -> Result<Option<u8>, String> {
    let Some(enabled) = enabled.filter(|e| !e.is_empty()) else {
        return Ok(None);
    };
    let mut allowed = 0u8;
    for t in enabled {
        allowed |= subscription_type_bit(t).ok_or_else(|| {
            format!(
                "{t:?} is no subscription type: expected {}",
                SUBSCRIPTION_TYPES.join(", ")
            )
        })?;
    }
    Ok(Some(0b1111 & !allowed))
}

/// The broker's defaults (its configuration; 0: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BrokerLevel {
    pub publish_rate: PublishRate,
    pub dispatch_rate: DispatchRate,
    pub subscription_dispatch_rate: DispatchRate,
    pub subscribe_rate: SubscribeRate,
    pub max_producers_per_topic: i32,
    pub max_consumers_per_topic: i32,
    pub max_consumers_per_subscription: i32,
    pub max_subscriptions_per_topic: i32,
    pub inactive_topic_policies: InactiveTopicPolicies,
}

/// What a topic enforces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub publish: Rates,
    pub dispatch: DispatchLimit,
    pub subscription_dispatch: DispatchLimit,
    /// Subscribes per consumer; None: no limit.
    pub subscribe: Option<Rate>,
    pub max_producers: Option<u32>,
    pub max_consumers: Option<u32>,
    pub max_consumers_per_subscription: Option<u32>,
    pub max_subscriptions: Option<u32>,
    pub inactive: InactiveTopicPolicies,
    /// Subscription types consumers may not use, as bits of
    /// [`subscription_type_bit`] (0: all four allowed).
    pub subscription_types_refused: u8,
    /// A subscribe may not create a subscription (Pulsar's
    /// `allowAutoSubscriptionCreation` false).
    pub auto_subscription_refused: bool,
}

impl Limits {
    /// Topic over namespace over broker.
    pub fn resolve(
        topic: Option<&TopicPolicies>,
        ns: &NamespaceLevel,
        broker: &BrokerLevel,
    ) -> Limits {
        let t = topic.cloned().unwrap_or_default();
        let count = |t: Option<i32>, n: Option<i32>, b: i32| {
            let v = [t, n].into_iter().flatten().find(|v| *v >= 0).unwrap_or(b);
            (v > 0).then_some(v as u32)
        };
        Limits {
            publish: [t.publish_rate, ns.publish_rate, Some(broker.publish_rate)]
                .into_iter()
                .flatten()
                .find_map(|r| r.rates())
                .unwrap_or_default(),
            dispatch: [
                t.dispatch_rate,
                ns.dispatch_rate,
                Some(broker.dispatch_rate),
            ]
            .into_iter()
            .flatten()
            .find_map(|r| r.limit())
            .unwrap_or_default(),
            subscription_dispatch: [
                t.subscription_dispatch_rate,
                ns.subscription_dispatch_rate,
                Some(broker.subscription_dispatch_rate),
            ]
            .into_iter()
            .flatten()
            .find_map(|r| r.limit())
            .unwrap_or_default(),
            subscribe: [
                t.subscribe_rate,
                ns.subscribe_rate,
                Some(broker.subscribe_rate),
            ]
            .into_iter()
            .flatten()
            .find_map(|r| r.rate()),
            max_producers: count(
                t.max_producer_per_topic,
                ns.max_producers_per_topic,
                broker.max_producers_per_topic,
            ),
            max_consumers: count(
                t.max_consumer_per_topic,
                ns.max_consumers_per_topic,
                broker.max_consumers_per_topic,
            ),
            max_consumers_per_subscription: count(
                t.max_consumers_per_subscription,
                ns.max_consumers_per_subscription,
                broker.max_consumers_per_subscription,
            ),
            max_subscriptions: count(
                t.max_subscriptions_per_topic,
                ns.max_subscriptions_per_topic,
                broker.max_subscriptions_per_topic,
            ),
            inactive: t
                .inactive_topic_policies
                .or(ns.inactive_topic_policies)
                .unwrap_or(broker.inactive_topic_policies),
            subscription_types_refused: subscription_types_refused(
                t.subscription_types_enabled.as_ref(),
            )
            .ok()
            .flatten()
            .or(ns.subscription_types_refused)
            .unwrap_or(0),
            auto_subscription_refused: !t
                .auto_subscription_creation
                .or(ns.auto_subscription_creation)
                .is_none_or(|a| a.allow_auto_subscription_creation),
        }
    }
}

fn positive(v: i64) -> Option<u64> {
    (v > 0).then_some(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker() -> BrokerLevel {
        BrokerLevel {
            max_producers_per_topic: 10,
            inactive_topic_policies: InactiveTopicPolicies {
                inactive_topic_delete_mode: InactiveTopicDeleteMode::DeleteWhenNoSubscriptions,
                max_inactive_duration_seconds: 60,
                delete_while_inactive: true,
            },
            ..Default::default()
        }
    }

    #[test]
    fn the_most_specific_level_that_says_something_wins() {
        let ns = NamespaceLevel {
            max_producers_per_topic: Some(3),
            publish_rate: Some(PublishRate {
                publish_throttling_rate_in_msg: 1000,
                publish_throttling_rate_in_byte: -1,
            }),
            ..Default::default()
        };
        let l = Limits::resolve(None, &ns, &broker());
        assert_eq!(l.max_producers, Some(3));
        assert_eq!(l.publish.msgs, Some(Rate::per_second(1000)));
        assert_eq!(l.publish.bytes, None);

        let topic = TopicPolicies {
            max_producer_per_topic: Some(0), // the topic lifts the limit
            publish_rate: Some(PublishRate {
                publish_throttling_rate_in_msg: 50,
                publish_throttling_rate_in_byte: 4096,
            }),
            ..Default::default()
        };
        let l = Limits::resolve(Some(&topic), &ns, &broker());
        assert_eq!(l.max_producers, None);
        assert_eq!(l.publish.msgs, Some(Rate::per_second(50)));
        assert_eq!(l.publish.bytes, Some(Rate::per_second(4096)));
    }

    #[test]
    fn a_negative_count_or_an_empty_rate_defers_to_the_next_level() {
        let ns = NamespaceLevel {
            max_producers_per_topic: Some(-1),
            publish_rate: Some(PublishRate::default()),
            ..Default::default()
        };
        let mut b = broker();
        b.publish_rate.publish_throttling_rate_in_msg = 7;
        let l = Limits::resolve(None, &ns, &b);
        assert_eq!(l.max_producers, Some(10));
        assert_eq!(l.publish.msgs, Some(Rate::per_second(7)));
        // The broker's 0 is no limit.
        let l = Limits::resolve(None, &NamespaceLevel::default(), &BrokerLevel::default());
        assert_eq!(l, Limits::default());
    }

    #[test]
    fn dispatch_rates_keep_their_period_and_can_follow_the_publish_rate() {
        let ns = NamespaceLevel {
            dispatch_rate: Some(DispatchRate {
                dispatch_throttling_rate_in_msg: 100,
                dispatch_throttling_rate_in_byte: -1,
                relative_to_publish_rate: true,
                rate_period_in_second: 10,
            }),
            ..Default::default()
        };
        let l = Limits::resolve(None, &ns, &broker());
        let ten = Duration::from_secs(10);
        assert_eq!(
            l.dispatch.rates.msgs,
            Some(Rate {
                tokens: 100,
                period: ten
            })
        );
        assert_eq!(
            l.dispatch.rates_at((5.0, 0.0)).msgs,
            Some(Rate {
                tokens: 150,
                period: ten
            })
        );
        assert!(l.subscription_dispatch.rates.is_unlimited());
    }

    #[test]
    fn subscribe_rates_need_a_count_and_a_period() {
        let mut ns = NamespaceLevel {
            subscribe_rate: Some(SubscribeRate {
                subscribe_throttling_rate_per_consumer: 2,
                rate_period_in_second: 0,
            }),
            ..Default::default()
        };
        assert_eq!(Limits::resolve(None, &ns, &broker()).subscribe, None);
        ns.subscribe_rate = Some(SubscribeRate {
            subscribe_throttling_rate_per_consumer: 2,
            rate_period_in_second: 30,
        });
        assert_eq!(
            Limits::resolve(None, &ns, &broker()).subscribe,
            Some(Rate {
                tokens: 2,
                period: Duration::from_secs(30)
            })
        );
    }

    #[test]
    fn json_shapes_are_pulsars() {
        let p: InactiveTopicPolicies = serde_json::from_str(
            r#"{"inactiveTopicDeleteMode":"delete_when_subscriptions_caught_up","maxInactiveDurationSeconds":30,"deleteWhileInactive":true}"#,
        )
        .unwrap();
        assert_eq!(
            p.inactive_topic_delete_mode,
            InactiveTopicDeleteMode::DeleteWhenSubscriptionsCaughtUp
        );
        let d: DispatchRate = serde_json::from_str(r#"{"dispatchThrottlingRateInMsg":5}"#).unwrap();
        assert_eq!(d.dispatch_throttling_rate_in_byte, -1);
        assert_eq!(d.rate_period_in_second, 1);
        let t = TopicPolicies {
            max_producer_per_topic: Some(2),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"maxProducerPerTopic":2}"#
        );
        assert_eq!(
            serde_json::to_value(PublishRate::default()).unwrap(),
            serde_json::json!({"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": -1})
        );
    }
}
