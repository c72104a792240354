//! `strobe admin namespaces|topics set-…-rate / set-max-… /
//! set-inactive-topic-policies` and their get and remove verbs:
//! pulsar-admin's tenancy verbs, with its long option names, over the
//! admin API's namespace and topic-level policy routes.

use clap::{Args, Subcommand};
use serde_json::json;

/// A rate in messages and bytes (-1: no limit).
#[derive(Debug, Args)]
pub struct DispatchArgs {
    /// Messages per period (-1: no limit).
    #[arg(long = "msg-dispatch-rate", default_value_t = -1, allow_hyphen_values = true)]
    msg: i32,
    /// Bytes per period (-1: no limit).
    #[arg(long = "byte-dispatch-rate", default_value_t = -1, allow_hyphen_values = true)]
    byte: i64,
    /// The period in seconds.
    #[arg(long = "dispatch-rate-period", default_value_t = 1)]
    period: i32,
    /// The limit follows the publish rate.
    #[arg(long = "relative-to-publish-rate")]
    relative: bool,
}

#[derive(Debug, Args)]
pub struct PublishArgs {
    /// Messages per second (-1: no limit).
    #[arg(long = "msg-publish-rate", default_value_t = -1, allow_hyphen_values = true)]
    msg: i32,
    /// Bytes per second (-1: no limit).
    #[arg(long = "byte-publish-rate", default_value_t = -1, allow_hyphen_values = true)]
    byte: i64,
}

#[derive(Debug, Args)]
pub struct SubscribeArgs {
    /// Subscribes per consumer per period (-1: no limit).
    #[arg(long = "subscribe-rate", default_value_t = -1, allow_hyphen_values = true)]
    rate: i32,
    /// The period in seconds.
    #[arg(long = "subscribe-rate-period", default_value_t = 30)]
    period: i32,
}

#[derive(Debug, Args)]
pub struct InactiveArgs {
    /// Delete the topic once it was inactive long enough.
    #[arg(long = "enable-delete-while-inactive", conflicts_with = "disable")]
    enable: bool,
    #[arg(long = "disable-delete-while-inactive")]
    disable: bool,
    /// How long it stays inactive first: seconds, or with s, m, h, d.
    #[arg(long = "max-inactive-duration")]
    max_inactive_duration: String,
    /// delete_when_no_subscriptions or delete_when_subscriptions_caught_up.
    #[arg(long = "delete-mode")]
    delete_mode: String,
}

/// The namespace verbs.
#[derive(Debug, Subcommand)]
pub enum NamespaceTenancyCmd {
    SetPublishRate {
        namespace: String,
        #[command(flatten)]
        rate: PublishArgs,
    },
    GetPublishRate {
        namespace: String,
    },
    RemovePublishRate {
        namespace: String,
    },
    SetDispatchRate {
        namespace: String,
        #[command(flatten)]
        rate: DispatchArgs,
    },
    GetDispatchRate {
        namespace: String,
    },
    RemoveDispatchRate {
        namespace: String,
    },
    SetSubscriptionDispatchRate {
        namespace: String,
        #[command(flatten)]
        rate: DispatchArgs,
    },
    GetSubscriptionDispatchRate {
        namespace: String,
    },
    RemoveSubscriptionDispatchRate {
        namespace: String,
    },
    SetSubscribeRate {
        namespace: String,
        #[command(flatten)]
        rate: SubscribeArgs,
    },
    GetSubscribeRate {
        namespace: String,
    },
    RemoveSubscribeRate {
        namespace: String,
    },
    SetMaxProducersPerTopic {
        namespace: String,
        #[arg(short = 'p', long)]
        max_producers_per_topic: i32,
    },
    GetMaxProducersPerTopic {
        namespace: String,
    },
    RemoveMaxProducersPerTopic {
        namespace: String,
    },
    SetMaxConsumersPerTopic {
        namespace: String,
        #[arg(short = 'c', long)]
        max_consumers_per_topic: i32,
    },
    GetMaxConsumersPerTopic {
        namespace: String,
    },
    RemoveMaxConsumersPerTopic {
        namespace: String,
    },
    SetMaxConsumersPerSubscription {
        namespace: String,
        #[arg(short = 'c', long)]
        max_consumers_per_subscription: i32,
    },
    GetMaxConsumersPerSubscription {
        namespace: String,
    },
    RemoveMaxConsumersPerSubscription {
        namespace: String,
    },
    SetMaxSubscriptionsPerTopic {
        namespace: String,
        #[arg(short = 'm', long)]
        max_subscriptions_per_topic: i32,
    },
    GetMaxSubscriptionsPerTopic {
        namespace: String,
    },
    RemoveMaxSubscriptionsPerTopic {
        namespace: String,
    },
    SetMaxTopicsPerNamespace {
        namespace: String,
        #[arg(short = 't', long)]
        max_topics_per_namespace: i32,
    },
    GetMaxTopicsPerNamespace {
        namespace: String,
    },
    RemoveMaxTopicsPerNamespace {
        namespace: String,
    },
    SetInactiveTopicPolicies {
        namespace: String,
        #[command(flatten)]
        policy: InactiveArgs,
    },
    GetInactiveTopicPolicies {
        namespace: String,
    },
    RemoveInactiveTopicPolicies {
        namespace: String,
    },
}

/// The topic verbs (Pulsar's topic-level policies).
#[derive(Debug, Subcommand)]
pub enum TopicTenancyCmd {
    SetPublishRate {
        topic: String,
        #[command(flatten)]
        rate: PublishArgs,
    },
    GetPublishRate {
        topic: String,
        #[arg(long)]
        applied: bool,
    },
    RemovePublishRate {
        topic: String,
    },
    SetDispatchRate {
        topic: String,
        #[command(flatten)]
        rate: DispatchArgs,
    },
    GetDispatchRate {
        topic: String,
        #[arg(long)]
        applied: bool,
    },
    RemoveDispatchRate {
        topic: String,
    },
    SetSubscriptionDispatchRate {
        topic: String,
        #[command(flatten)]
        rate: DispatchArgs,
    },
    GetSubscriptionDispatchRate {
        topic: String,
        #[arg(long)]
        applied: bool,
    },
    RemoveSubscriptionDispatchRate {
        topic: String,
    },
    SetSubscribeRate {
        topic: String,
        #[command(flatten)]
        rate: SubscribeArgs,
    },
    GetSubscribeRate {
        topic: String,
        #[arg(long)]
        applied: bool,
    },
    RemoveSubscribeRate {
        topic: String,
    },
    SetMaxProducers {
        topic: String,
        #[arg(short = 'p', long)]
        max_producers: i32,
    },
    GetMaxProducers {
        topic: String,
        #[arg(long)]
        applied: bool,
    },
    RemoveMaxProducers {
        topic: String,
    },
    SetMaxConsumers {
        topic: String,
        #[arg(short = 'c', long)]
        max_consumers: i32,
    },
    GetMaxConsumers {
        topic: String,
        #[arg(long)]
        applied: bool,
    },
    RemoveMaxConsumers {
        topic: String,
    },
    SetMaxConsumersPerSubscription {
        topic: String,
        #[arg(short = 'c', long)]
        max_consumers_per_subscription: i32,
    },
    GetMaxConsumersPerSubscription {
        topic: String,
        #[arg(long)]
        applied: bool,
    },
    RemoveMaxConsumersPerSubscription {
        topic: String,
    },
    SetMaxSubscriptionsPerTopic {
        topic: String,
        #[arg(short = 's', long)]
        max_subscriptions_per_topic: i32,
    },
    GetMaxSubscriptionsPerTopic {
        topic: String,
        #[arg(long)]
        applied: bool,
    },
    RemoveMaxSubscriptionsPerTopic {
        topic: String,
    },
    SetInactiveTopicPolicies {
        topic: String,
        #[command(flatten)]
        policy: InactiveArgs,
    },
    GetInactiveTopicPolicies {
        topic: String,
        #[arg(long)]
        applied: bool,
    },
    RemoveInactiveTopicPolicies {
        topic: String,
    },
}

/// One call of the admin API.
pub struct Call {
    pub method: &'static str,
    /// Below the namespace's or the topic's path.
    pub resource: &'static str,
    pub body: String,
    /// `?applied=true` (topic GETs).
    pub applied: bool,
}

fn get(resource: &'static str, applied: bool) -> Call {
    Call {
        method: "GET",
        resource,
        body: String::new(),
        applied,
    }
}

fn post(resource: &'static str, body: serde_json::Value) -> Call {
    Call {
        method: "POST",
        resource,
        body: body.to_string(),
        applied: false,
    }
}

fn delete(resource: &'static str) -> Call {
    Call {
        method: "DELETE",
        resource,
        body: String::new(),
        applied: false,
    }
}

fn publish(r: &PublishArgs) -> serde_json::Value {
    json!({ "publishThrottlingRateInMsg": r.msg, "publishThrottlingRateInByte": r.byte })
}

fn dispatch(r: &DispatchArgs) -> serde_json::Value {
    json!({
        "dispatchThrottlingRateInMsg": r.msg,
        "dispatchThrottlingRateInByte": r.byte,
        "ratePeriodInSecond": r.period,
        "relativeToPublishRate": r.relative,
    })
}

fn subscribe(r: &SubscribeArgs) -> serde_json::Value {
    json!({ "subscribeThrottlingRatePerConsumer": r.rate, "ratePeriodInSecond": r.period })
}

fn inactive(p: &InactiveArgs) -> anyhow::Result<serde_json::Value> {
    if p.enable == p.disable {
        anyhow::bail!(
            "give exactly one of --enable-delete-while-inactive and --disable-delete-while-inactive"
        );
    }
    if !matches!(
        p.delete_mode.as_str(),
        "delete_when_no_subscriptions" | "delete_when_subscriptions_caught_up"
    ) {
        anyhow::bail!(
            "--delete-mode: delete_when_no_subscriptions or delete_when_subscriptions_caught_up, not {:?}",
            p.delete_mode
        );
    }
    Ok(json!({
        "inactiveTopicDeleteMode": p.delete_mode,
        "maxInactiveDurationSeconds": duration_secs(&p.max_inactive_duration)?,
        "deleteWhileInactive": p.enable,
    }))
}

/// `90`, `90s`, `15m`, `2h`, `1d` to seconds (pulsar-admin's time units).
fn duration_secs(s: &str) -> anyhow::Result<i64> {
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = digits
        .parse()
        .map_err(|_| anyhow::anyhow!("duration {s:?}: expected a number with s, m, h or d"))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => anyhow::bail!("duration {s:?}: unit must be s, m, h or d"),
    };
    Ok(n * mult)
}

/// The namespace verb's call and the namespace it names.
pub fn namespace_call(cmd: NamespaceTenancyCmd) -> anyhow::Result<(String, Call)> {
    use NamespaceTenancyCmd as C;
    Ok(match cmd {
        C::SetPublishRate { namespace, rate } => (namespace, post("publishRate", publish(&rate))),
        C::GetPublishRate { namespace } => (namespace, get("publishRate", false)),
        C::RemovePublishRate { namespace } => (namespace, delete("publishRate")),
        C::SetDispatchRate { namespace, rate } => {
            (namespace, post("dispatchRate", dispatch(&rate)))
        }
        C::GetDispatchRate { namespace } => (namespace, get("dispatchRate", false)),
        C::RemoveDispatchRate { namespace } => (namespace, delete("dispatchRate")),
        C::SetSubscriptionDispatchRate { namespace, rate } => {
            (namespace, post("subscriptionDispatchRate", dispatch(&rate)))
        }
        C::GetSubscriptionDispatchRate { namespace } => {
            (namespace, get("subscriptionDispatchRate", false))
        }
        C::RemoveSubscriptionDispatchRate { namespace } => {
            (namespace, delete("subscriptionDispatchRate"))
        }
        C::SetSubscribeRate { namespace, rate } => {
            (namespace, post("subscribeRate", subscribe(&rate)))
        }
        C::GetSubscribeRate { namespace } => (namespace, get("subscribeRate", false)),
        C::RemoveSubscribeRate { namespace } => (namespace, delete("subscribeRate")),
        C::SetMaxProducersPerTopic {
            namespace,
            max_producers_per_topic: n,
        } => (namespace, post("maxProducersPerTopic", json!(n))),
        C::GetMaxProducersPerTopic { namespace } => (namespace, get("maxProducersPerTopic", false)),
        C::RemoveMaxProducersPerTopic { namespace } => (namespace, delete("maxProducersPerTopic")),
        C::SetMaxConsumersPerTopic {
            namespace,
            max_consumers_per_topic: n,
        } => (namespace, post("maxConsumersPerTopic", json!(n))),
        C::GetMaxConsumersPerTopic { namespace } => (namespace, get("maxConsumersPerTopic", false)),
        C::RemoveMaxConsumersPerTopic { namespace } => (namespace, delete("maxConsumersPerTopic")),
        C::SetMaxConsumersPerSubscription {
            namespace,
            max_consumers_per_subscription: n,
        } => (namespace, post("maxConsumersPerSubscription", json!(n))),
        C::GetMaxConsumersPerSubscription { namespace } => {
            (namespace, get("maxConsumersPerSubscription", false))
        }
        C::RemoveMaxConsumersPerSubscription { namespace } => {
            (namespace, delete("maxConsumersPerSubscription"))
        }
        C::SetMaxSubscriptionsPerTopic {
            namespace,
            max_subscriptions_per_topic: n,
        } => (namespace, post("maxSubscriptionsPerTopic", json!(n))),
        C::GetMaxSubscriptionsPerTopic { namespace } => {
            (namespace, get("maxSubscriptionsPerTopic", false))
        }
        C::RemoveMaxSubscriptionsPerTopic { namespace } => {
            (namespace, delete("maxSubscriptionsPerTopic"))
        }
        C::SetMaxTopicsPerNamespace {
            namespace,
            max_topics_per_namespace: n,
        } => (namespace, post("maxTopicsPerNamespace", json!(n))),
        C::GetMaxTopicsPerNamespace { namespace } => {
            (namespace, get("maxTopicsPerNamespace", false))
        }
        C::RemoveMaxTopicsPerNamespace { namespace } => {
            (namespace, delete("maxTopicsPerNamespace"))
        }
        C::SetInactiveTopicPolicies { namespace, policy } => {
            (namespace, post("inactiveTopicPolicies", inactive(&policy)?))
        }
        C::GetInactiveTopicPolicies { namespace } => {
            (namespace, get("inactiveTopicPolicies", false))
        }
        C::RemoveInactiveTopicPolicies { namespace } => {
            (namespace, delete("inactiveTopicPolicies"))
        }
    })
}

/// The topic verb's call and the topic it names.
pub fn topic_call(cmd: TopicTenancyCmd) -> anyhow::Result<(String, Call)> {
    use TopicTenancyCmd as C;
    Ok(match cmd {
        C::SetPublishRate { topic, rate } => (topic, post("publishRate", publish(&rate))),
        C::GetPublishRate { topic, applied } => (topic, get("publishRate", applied)),
        C::RemovePublishRate { topic } => (topic, delete("publishRate")),
        C::SetDispatchRate { topic, rate } => (topic, post("dispatchRate", dispatch(&rate))),
        C::GetDispatchRate { topic, applied } => (topic, get("dispatchRate", applied)),
        C::RemoveDispatchRate { topic } => (topic, delete("dispatchRate")),
        C::SetSubscriptionDispatchRate { topic, rate } => {
            (topic, post("subscriptionDispatchRate", dispatch(&rate)))
        }
        C::GetSubscriptionDispatchRate { topic, applied } => {
            (topic, get("subscriptionDispatchRate", applied))
        }
        C::RemoveSubscriptionDispatchRate { topic } => (topic, delete("subscriptionDispatchRate")),
        C::SetSubscribeRate { topic, rate } => (topic, post("subscribeRate", subscribe(&rate))),
        C::GetSubscribeRate { topic, applied } => (topic, get("subscribeRate", applied)),
        C::RemoveSubscribeRate { topic } => (topic, delete("subscribeRate")),
        C::SetMaxProducers {
            topic,
            max_producers: n,
        } => (topic, post("maxProducers", json!(n))),
        C::GetMaxProducers { topic, applied } => (topic, get("maxProducers", applied)),
        C::RemoveMaxProducers { topic } => (topic, delete("maxProducers")),
        C::SetMaxConsumers {
            topic,
            max_consumers: n,
        } => (topic, post("maxConsumers", json!(n))),
        C::GetMaxConsumers { topic, applied } => (topic, get("maxConsumers", applied)),
        C::RemoveMaxConsumers { topic } => (topic, delete("maxConsumers")),
        C::SetMaxConsumersPerSubscription {
            topic,
            max_consumers_per_subscription: n,
        } => (topic, post("maxConsumersPerSubscription", json!(n))),
        C::GetMaxConsumersPerSubscription { topic, applied } => {
            (topic, get("maxConsumersPerSubscription", applied))
        }
        C::RemoveMaxConsumersPerSubscription { topic } => {
            (topic, delete("maxConsumersPerSubscription"))
        }
        C::SetMaxSubscriptionsPerTopic {
            topic,
            max_subscriptions_per_topic: n,
        } => (topic, post("maxSubscriptionsPerTopic", json!(n))),
        C::GetMaxSubscriptionsPerTopic { topic, applied } => {
            (topic, get("maxSubscriptionsPerTopic", applied))
        }
        C::RemoveMaxSubscriptionsPerTopic { topic } => (topic, delete("maxSubscriptionsPerTopic")),
        C::SetInactiveTopicPolicies { topic, policy } => {
            (topic, post("inactiveTopicPolicies", inactive(&policy)?))
        }
        C::GetInactiveTopicPolicies { topic, applied } => {
            (topic, get("inactiveTopicPolicies", applied))
        }
        C::RemoveInactiveTopicPolicies { topic } => (topic, delete("inactiveTopicPolicies")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_pulsar_admins_units() {
        assert_eq!(duration_secs("90").unwrap(), 90);
        assert_eq!(duration_secs("15m").unwrap(), 900);
        assert_eq!(duration_secs("2h").unwrap(), 7200);
        assert_eq!(duration_secs("1d").unwrap(), 86_400);
        assert!(duration_secs("5w").is_err());
        assert!(duration_secs("m").is_err());
    }
}
