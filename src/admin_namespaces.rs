//! `strobe admin namespaces …`: pulsar-admin's verbs for a namespace's
//! subscription types, delayed delivery, unacknowledged limits, creating
//! topics and subscriptions on first use, encryption, properties, and
//! clearing backlogs or unsubscribing on all its topics, over the admin API.

use clap::Subcommand;
use serde_json::json;

use crate::admin_http::seg;
use crate::admin_tenancy::Call;
use crate::admin_topics::TopicCall;

#[derive(Debug, Subcommand)]
pub enum NamespaceMoreCmd {
    SetSubscriptionTypesEnabled {
        namespace: String,
        /// Exclusive, Shared, Failover, Key_Shared, comma separated.
        #[arg(long, value_delimiter = ',')]
        types: Vec<String>,
    },
    GetSubscriptionTypesEnabled {
        namespace: String,
    },
    RemoveSubscriptionTypesEnabled {
        namespace: String,
    },
    SetDelayedDelivery {
        namespace: String,
        #[command(flatten)]
        delayed: crate::admin_topics::DelayedArgs,
    },
    GetDelayedDelivery {
        namespace: String,
    },
    RemoveDelayedDelivery {
        namespace: String,
    },
    SetMaxUnackedMessagesPerConsumer {
        namespace: String,
        #[arg(short = 'c', long = "max-unacked-messages-per-consumer")]
        max: u32,
    },
    GetMaxUnackedMessagesPerConsumer {
        namespace: String,
    },
    RemoveMaxUnackedMessagesPerConsumer {
        namespace: String,
    },
    SetMaxUnackedMessagesPerSubscription {
        namespace: String,
        #[arg(short = 'c', long = "max-unacked-messages-per-subscription")]
        max: u32,
    },
    GetMaxUnackedMessagesPerSubscription {
        namespace: String,
    },
    RemoveMaxUnackedMessagesPerSubscription {
        namespace: String,
    },
    SetAutoTopicCreation {
        namespace: String,
        #[command(flatten)]
        switch: crate::admin_topics::Switch,
        /// partitioned or non-partitioned.
        #[arg(short = 't', long = "type", default_value = "non-partitioned")]
        topic_type: String,
        #[arg(short = 'n', long = "num-partitions")]
        partitions: Option<u32>,
    },
    GetAutoTopicCreation {
        namespace: String,
    },
    RemoveAutoTopicCreation {
        namespace: String,
    },
    SetAutoSubscriptionCreation {
        namespace: String,
        #[command(flatten)]
        switch: crate::admin_topics::Switch,
    },
    GetAutoSubscriptionCreation {
        namespace: String,
    },
    RemoveAutoSubscriptionCreation {
        namespace: String,
    },
    SetEncryptionRequired {
        namespace: String,
        #[command(flatten)]
        switch: crate::admin_topics::Switch,
    },
    GetEncryptionRequired {
        namespace: String,
    },
    SetProperty {
        namespace: String,
        #[arg(short, long)]
        key: String,
        #[arg(short, long)]
        value: String,
    },
    GetProperty {
        namespace: String,
        #[arg(short, long)]
        key: String,
    },
    RemoveProperty {
        namespace: String,
        #[arg(short, long)]
        key: String,
    },
    GetProperties {
        namespace: String,
    },
    ClearProperties {
        namespace: String,
    },
    /// Acknowledge everything on every topic (one subscription, or all).
    ClearBacklog {
        namespace: String,
        #[arg(short, long)]
        sub: Option<String>,
        /// Only the topics of this bundle.
        #[arg(short, long)]
        bundle: Option<String>,
    },
    /// Delete a subscription from every topic of the namespace.
    Unsubscribe {
        namespace: String,
        #[arg(short, long)]
        sub: String,
        #[arg(short, long)]
        bundle: Option<String>,
    },
}

fn call(method: &'static str, resource: &'static str, body: String) -> TopicCall {
    TopicCall::Policy(Call {
        method,
        resource,
        body,
        applied: false,
    })
}

/// The namespace a verb names and its call below the namespace's path.
pub fn namespace_more_call(cmd: NamespaceMoreCmd) -> anyhow::Result<(String, TopicCall)> {
    use NamespaceMoreCmd as C;
    let get = |r| call("GET", r, String::new());
    let set = |r, b: serde_json::Value| call("POST", r, b.to_string());
    let del = |r| call("DELETE", r, String::new());
    let in_bundle = |b: &Option<String>| {
        b.as_ref()
            .map(|b| format!("{}/", seg(b)))
            .unwrap_or_default()
    };
    Ok(match cmd {
        C::SetSubscriptionTypesEnabled { namespace, types } => {
            (namespace, set("subscriptionTypesEnabled", json!(types)))
        }
        C::GetSubscriptionTypesEnabled { namespace } => {
            (namespace, get("subscriptionTypesEnabled"))
        }
        C::RemoveSubscriptionTypesEnabled { namespace } => {
            (namespace, del("subscriptionTypesEnabled"))
        }
        C::SetDelayedDelivery { namespace, delayed } => (
            namespace,
            set(
                "delayedDelivery",
                crate::admin_topics::delayed_body(&delayed)?,
            ),
        ),
        C::GetDelayedDelivery { namespace } => (namespace, get("delayedDelivery")),
        C::RemoveDelayedDelivery { namespace } => (namespace, del("delayedDelivery")),
        C::SetMaxUnackedMessagesPerConsumer { namespace, max } => {
            (namespace, set("maxUnackedMessagesPerConsumer", json!(max)))
        }
        C::GetMaxUnackedMessagesPerConsumer { namespace } => {
            (namespace, get("maxUnackedMessagesPerConsumer"))
        }
        C::RemoveMaxUnackedMessagesPerConsumer { namespace } => {
            (namespace, del("maxUnackedMessagesPerConsumer"))
        }
        C::SetMaxUnackedMessagesPerSubscription { namespace, max } => (
            namespace,
            set("maxUnackedMessagesPerSubscription", json!(max)),
        ),
        C::GetMaxUnackedMessagesPerSubscription { namespace } => {
            (namespace, get("maxUnackedMessagesPerSubscription"))
        }
        C::RemoveMaxUnackedMessagesPerSubscription { namespace } => {
            (namespace, del("maxUnackedMessagesPerSubscription"))
        }
        C::SetAutoTopicCreation {
            namespace,
            switch,
            topic_type,
            partitions,
        } => {
            let mut body = json!({
                "allowAutoTopicCreation": switch.on()?,
                "topicType": topic_type,
            });
            if let Some(n) = partitions {
                body["defaultNumPartitions"] = json!(n);
            }
            (namespace, set("autoTopicCreation", body))
        }
        C::GetAutoTopicCreation { namespace } => (namespace, get("autoTopicCreation")),
        C::RemoveAutoTopicCreation { namespace } => (namespace, del("autoTopicCreation")),
        C::SetAutoSubscriptionCreation { namespace, switch } => (
            namespace,
            set(
                "autoSubscriptionCreation",
                json!({ "allowAutoSubscriptionCreation": switch.on()? }),
            ),
        ),
        C::GetAutoSubscriptionCreation { namespace } => {
            (namespace, get("autoSubscriptionCreation"))
        }
        C::RemoveAutoSubscriptionCreation { namespace } => {
            (namespace, del("autoSubscriptionCreation"))
        }
        C::SetEncryptionRequired { namespace, switch } => {
            (namespace, set("encryptionRequired", json!(switch.on()?)))
        }
        C::GetEncryptionRequired { namespace } => (namespace, get("encryptionRequired")),
        C::SetProperty {
            namespace,
            key,
            value,
        } => (
            namespace,
            TopicCall::Other(
                "PUT",
                format!("property/{}/{}", seg(&key), seg(&value)),
                String::new(),
            ),
        ),
        C::GetProperty { namespace, key } => (
            namespace,
            TopicCall::Other("GET", format!("property/{}", seg(&key)), String::new()),
        ),
        C::RemoveProperty { namespace, key } => (
            namespace,
            TopicCall::Other("DELETE", format!("property/{}", seg(&key)), String::new()),
        ),
        C::GetProperties { namespace } => (namespace, get("properties")),
        C::ClearProperties { namespace } => (namespace, del("properties")),
        C::ClearBacklog {
            namespace,
            sub,
            bundle,
        } => {
            let tail = sub.map(|s| format!("/{}", seg(&s))).unwrap_or_default();
            let path = format!("{}clearBacklog{tail}", in_bundle(&bundle));
            (namespace, TopicCall::Other("POST", path, String::new()))
        }
        C::Unsubscribe {
            namespace,
            sub,
            bundle,
        } => {
            let path = format!("{}unsubscribe/{}", in_bundle(&bundle), seg(&sub));
            (namespace, TopicCall::Other("POST", path, String::new()))
        }
    })
}
