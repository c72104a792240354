//! The broker's level of the tenancy policies, from its keys (Pulsar's
//! broker.conf defaults for what neither a topic nor its namespace sets).

use crate::BrokerConfig;

impl BrokerConfig {
    /// The broker's level of the tenancy policies: what a topic enforces
    /// when neither it nor its namespace says otherwise.
    pub fn tenancy_level(&self) -> strobe_tenancy::BrokerLevel {
        use strobe_tenancy::{DispatchRate, InactiveTopicPolicies, PublishRate, SubscribeRate};
        let dispatch = |msg: i32, byte: i64| DispatchRate {
            dispatch_throttling_rate_in_msg: msg,
            dispatch_throttling_rate_in_byte: byte,
            relative_to_publish_rate: false,
            rate_period_in_second: 1,
        };
        strobe_tenancy::BrokerLevel {
            publish_rate: PublishRate {
                publish_throttling_rate_in_msg: self.max_publish_rate_per_topic_in_messages,
                publish_throttling_rate_in_byte: self.max_publish_rate_per_topic_in_bytes,
            },
            dispatch_rate: dispatch(
                self.dispatch_throttling_rate_per_topic_in_msg,
                self.dispatch_throttling_rate_per_topic_in_byte,
            ),
            subscription_dispatch_rate: dispatch(
                self.dispatch_throttling_rate_per_subscription_in_msg,
                self.dispatch_throttling_rate_per_subscription_in_byte,
            ),
            subscribe_rate: SubscribeRate {
                subscribe_throttling_rate_per_consumer: self.subscribe_throttling_rate_per_consumer,
                rate_period_in_second: self.subscribe_rate_period_per_consumer_in_second,
            },
            max_producers_per_topic: self.max_producers_per_topic,
            max_consumers_per_topic: self.max_consumers_per_topic,
            max_consumers_per_subscription: self.max_consumers_per_subscription,
            max_subscriptions_per_topic: self.max_subscriptions_per_topic,
            inactive_topic_policies: InactiveTopicPolicies {
                inactive_topic_delete_mode: self.broker_delete_inactive_topics_mode,
                max_inactive_duration_seconds: self
                    .broker_delete_inactive_topics_max_inactive_duration_seconds
                    .unwrap_or(
                        self.broker_delete_inactive_topics_frequency_seconds
                            .min(i32::MAX as u64) as i32,
                    ),
                delete_while_inactive: self.broker_delete_inactive_topics_enabled,
            },
        }
    }
}
