//! `strobe admin topics …`: pulsar-admin's verbs for a topic's messages
//! (last-message-id, get-message-id, examine-message, get-message-by-id,
//! skip-all, expire-messages-all-subscriptions, truncate, analyze-backlog,
//! internal-info) and its topic-level storage and delivery policies (set,
//! get and remove of message TTL, retention, deduplication, compaction
//! threshold, subscription types, delayed delivery, the unacknowledged
//! limits, backlog quotas, auto subscription creation and the schema
//! compatibility strategy and validation), with pulsar-admin's option names, over the admin API.

use clap::{Args, Subcommand};
use serde_json::json;

use crate::admin_tenancy::Call;

#[derive(Debug, Subcommand)]
pub enum TopicMoreCmd {
    /// The id of the topic's last message.
    LastMessageId {
        topic: String,
    },
    /// The id of the first message published at or after a time.
    GetMessageId {
        topic: String,
        /// Milliseconds since the epoch.
        #[arg(short = 'd', long = "datetime")]
        datetime: u64,
    },
    /// The message at a position, counted from the newest (latest) or the oldest (earliest).
    ExamineMessage {
        topic: String,
        #[arg(short = 'i', long = "initialPosition", default_value = "latest")]
        initial_position: String,
        #[arg(short = 'm', long = "messagePosition", default_value_t = 1)]
        message_position: u64,
    },
    /// One message by its id.
    GetMessageById {
        topic: String,
        #[arg(short = 'l', long = "ledgerId")]
        ledger_id: u64,
        #[arg(short = 'e', long = "entryId")]
        entry_id: u64,
    },
    /// A subscription acknowledges everything stored.
    SkipAll {
        topic: String,
        #[arg(short, long)]
        subscription: String,
    },
    /// Every subscription expires what is older than this many seconds.
    ExpireMessagesAllSubscriptions {
        topic: String,
        #[arg(short = 't', long = "expireTime")]
        expire_time: u64,
    },
    /// Every subscription to the end, every ledger they passed deleted.
    Truncate {
        topic: String,
    },
    /// A subscription's unacknowledged entries and messages.
    AnalyzeBacklog {
        topic: String,
        #[arg(short, long)]
        subscription: String,
    },
    /// The topic's ledgers.
    InternalInfo {
        topic: String,
    },
    SetMessageTtl {
        topic: String,
        #[arg(short = 't', long = "ttl")]
        ttl: u32,
    },
    GetMessageTtl {
        topic: String,
        #[arg(short, long)]
        applied: bool,
    },
    RemoveMessageTtl {
        topic: String,
    },
    SetRetention {
        topic: String,
        /// Minutes (-1: no limit).
        #[arg(long, allow_hyphen_values = true)]
        time: i64,
        /// MB (-1: no limit).
        #[arg(long, allow_hyphen_values = true)]
        size: i64,
    },
    GetRetention {
        topic: String,
        #[arg(short, long)]
        applied: bool,
    },
    RemoveRetention {
        topic: String,
    },
    SetDeduplication {
        topic: String,
        #[command(flatten)]
        switch: Switch,
    },
    GetDeduplication {
        topic: String,
        #[arg(short, long)]
        applied: bool,
    },
    RemoveDeduplication {
        topic: String,
    },
    SetCompactionThreshold {
        topic: String,
        /// Bytes.
        #[arg(short = 't', long)]
        threshold: u64,
    },
    GetCompactionThreshold {
        topic: String,
        #[arg(short, long)]
        applied: bool,
    },
    RemoveCompactionThreshold {
        topic: String,
    },
    SetSubscriptionTypesEnabled {
        topic: String,
        /// Exclusive, Shared, Failover, Key_Shared, comma separated.
        #[arg(long, value_delimiter = ',')]
        types: Vec<String>,
    },
    GetSubscriptionTypesEnabled {
        topic: String,
        #[arg(short, long)]
        applied: bool,
    },
    RemoveSubscriptionTypesEnabled {
        topic: String,
    },
    SetDelayedDelivery {
        topic: String,
        #[command(flatten)]
        delayed: DelayedArgs,
    },
    GetDelayedDelivery {
        topic: String,
        #[arg(short, long)]
        applied: bool,
    },
    RemoveDelayedDelivery {
        topic: String,
    },
    SetMaxUnackedMessagesPerConsumer {
        topic: String,
        #[arg(short = 'm', long = "maxNum")]
        max: u32,
    },
    GetMaxUnackedMessagesPerConsumer {
        topic: String,
        #[arg(short, long)]
        applied: bool,
    },
    RemoveMaxUnackedMessagesPerConsumer {
        topic: String,
    },
    SetMaxUnackedMessagesPerSubscription {
        topic: String,
        #[arg(short = 'm', long = "maxNum")]
        max: u32,
    },
    GetMaxUnackedMessagesPerSubscription {
        topic: String,
        #[arg(short, long)]
        applied: bool,
    },
    RemoveMaxUnackedMessagesPerSubscription {
        topic: String,
    },
    /// The topic's backlog quotas (with `--applied`, its namespace's for the types it does not set).
    GetBacklogQuotas {
        topic: String,
        #[arg(short, long)]
        applied: bool,
    },
    SetBacklogQuota {
        topic: String,
        #[command(flatten)]
        quota: QuotaArgs,
    },
    RemoveBacklogQuota {
        topic: String,
        /// destination_storage or message_age.
        #[arg(long = "backlogQuotaType", default_value = "destination_storage")]
        backlog_quota_type: String,
    },
    /// Whether a consumer may create a subscription by subscribing.
    SetAutoSubscriptionCreation {
        topic: String,
        #[command(flatten)]
        switch: Switch,
    },
    GetAutoSubscriptionCreation {
        topic: String,
        #[arg(short, long)]
        applied: bool,
    },
    RemoveAutoSubscriptionCreation {
        topic: String,
    },
    /// The schema compatibility strategy (BACKWARD, FORWARD, FULL, ALWAYS_COMPATIBLE, …).
    SetSchemaCompatibilityStrategy {
        topic: String,
        #[arg(short, long)]
        strategy: String,
    },
    GetSchemaCompatibilityStrategy {
        topic: String,
        #[arg(short, long)]
        applied: bool,
    },
    RemoveSchemaCompatibilityStrategy {
        topic: String,
    },
    /// Whether producers without a schema are refused once the topic has one.
    SetSchemaValidationEnforced {
        topic: String,
        #[command(flatten)]
        switch: Switch,
    },
    GetSchemaValidationEnforced {
        topic: String,
        #[arg(short, long)]
        applied: bool,
    },
}

/// pulsar-admin's `set-backlog-quota` options, for a topic or a namespace.
#[derive(Debug, Args)]
pub struct QuotaArgs {
    /// Size limit in bytes (destination_storage).
    #[arg(long, conflicts_with = "limit_time")]
    pub limit_size: Option<i64>,
    /// Age limit in seconds (message_age).
    #[arg(long)]
    pub limit_time: Option<i64>,
    /// producer_request_hold, producer_exception or consumer_backlog_eviction.
    #[arg(short, long)]
    pub policy: String,
}

/// The quota's type and Pulsar's `BacklogQuota` JSON of the options.
pub fn quota_body(q: &QuotaArgs) -> anyhow::Result<(&'static str, serde_json::Value)> {
    Ok(match (q.limit_size, q.limit_time) {
        (Some(b), None) => (
            "destination_storage",
            json!({ "limitSize": b, "policy": q.policy }),
        ),
        (None, Some(t)) => ("message_age", json!({ "limitTime": t, "policy": q.policy })),
        _ => anyhow::bail!("give --limit-size or --limit-time"),
    })
}

/// pulsar-admin's `set-delayed-delivery` options, for a topic or a namespace.
#[derive(Debug, Args)]
pub struct DelayedArgs {
    #[command(flatten)]
    switch: Switch,
    /// The tick in milliseconds.
    #[arg(short = 't', long, default_value_t = 1000)]
    time: i64,
}

/// Pulsar's `DelayedDeliveryPolicies` of the options.
pub fn delayed_body(d: &DelayedArgs) -> anyhow::Result<serde_json::Value> {
    Ok(json!({ "active": d.switch.on()?, "tickTime": d.time }))
}

/// What a verb asks of the API, below the topic's path.
pub enum TopicCall {
    /// A policy's set, get or remove (as the tenancy verbs).
    Policy(Call),
    /// Any other call: method, path below the topic, body.
    Other(&'static str, String, String),
}

fn policy(method: &'static str, resource: &'static str, body: String, applied: bool) -> TopicCall {
    TopicCall::Policy(Call {
        method,
        resource,
        body,
        applied,
    })
}

// pulsar-admin's `--enable` / `--disable` pair, of which exactly one is given (a
// plain comment: a doc comment would become the help text of every verb using it).
#[derive(Debug, Args)]
pub struct Switch {
    #[arg(short, long, conflicts_with = "disable")]
    enable: bool,
    #[arg(short, long)]
    disable: bool,
}

impl Switch {
    /// Which of the two was given.
    pub fn on(&self) -> anyhow::Result<bool> {
        if self.enable == self.disable {
            anyhow::bail!("give exactly one of --enable and --disable");
        }
        Ok(self.enable)
    }
}

/// The topic a verb names and its call.
pub fn topic_more_call(cmd: TopicMoreCmd) -> anyhow::Result<(String, TopicCall)> {
    use TopicMoreCmd as C;
    let get = |r, a| policy("GET", r, String::new(), a);
    let set = |r, b: serde_json::Value| policy("POST", r, b.to_string(), false);
    let del = |r| policy("DELETE", r, String::new(), false);
    let other = |m, p: String, b: String| TopicCall::Other(m, p, b);
    Ok(match cmd {
        C::LastMessageId { topic } => (topic, other("GET", "lastMessageId".into(), String::new())),
        C::GetMessageId { topic, datetime } => (
            topic,
            other("GET", format!("messageid/{datetime}"), String::new()),
        ),
        C::ExamineMessage {
            topic,
            initial_position,
            message_position,
        } => (
            topic,
            other(
                "GET",
                format!(
                    "examinemessage?initialPosition={initial_position}&messagePosition={message_position}"
                ),
                String::new(),
            ),
        ),
        C::GetMessageById {
            topic,
            ledger_id,
            entry_id,
        } => (
            topic,
            other(
                "GET",
                format!("ledger/{ledger_id}/entry/{entry_id}"),
                String::new(),
            ),
        ),
        C::SkipAll {
            topic,
            subscription,
        } => (
            topic,
            other(
                "POST",
                format!(
                    "subscription/{}/skip_all",
                    crate::admin_http::seg(&subscription)
                ),
                String::new(),
            ),
        ),
        C::ExpireMessagesAllSubscriptions { topic, expire_time } => (
            topic,
            other(
                "POST",
                format!("all_subscription/expireMessages/{expire_time}"),
                String::new(),
            ),
        ),
        C::Truncate { topic } => (topic, other("DELETE", "truncate".into(), String::new())),
        C::AnalyzeBacklog {
            topic,
            subscription,
        } => (
            topic,
            other(
                "POST",
                format!(
                    "subscription/{}/analyzeBacklog",
                    crate::admin_http::seg(&subscription)
                ),
                String::new(),
            ),
        ),
        C::InternalInfo { topic } => (topic, other("GET", "internal-info".into(), String::new())),
        C::SetMessageTtl { topic, ttl } => (topic, set("messageTTL", json!(ttl))),
        C::GetMessageTtl { topic, applied } => (topic, get("messageTTL", applied)),
        C::RemoveMessageTtl { topic } => (topic, del("messageTTL")),
        C::SetRetention { topic, time, size } => (
            topic,
            set(
                "retention",
                json!({ "retentionTimeInMinutes": time, "retentionSizeInMB": size }),
            ),
        ),
        C::GetRetention { topic, applied } => (topic, get("retention", applied)),
        C::RemoveRetention { topic } => (topic, del("retention")),
        C::SetDeduplication { topic, switch } => {
            (topic, set("deduplicationEnabled", json!(switch.on()?)))
        }
        C::GetDeduplication { topic, applied } => (topic, get("deduplicationEnabled", applied)),
        C::RemoveDeduplication { topic } => (topic, del("deduplicationEnabled")),
        C::SetCompactionThreshold { topic, threshold } => {
            (topic, set("compactionThreshold", json!(threshold)))
        }
        C::GetCompactionThreshold { topic, applied } => {
            (topic, get("compactionThreshold", applied))
        }
        C::RemoveCompactionThreshold { topic } => (topic, del("compactionThreshold")),
        C::SetSubscriptionTypesEnabled { topic, types } => {
            (topic, set("subscriptionTypesEnabled", json!(types)))
        }
        C::GetSubscriptionTypesEnabled { topic, applied } => {
            (topic, get("subscriptionTypesEnabled", applied))
        }
        C::RemoveSubscriptionTypesEnabled { topic } => (topic, del("subscriptionTypesEnabled")),
        C::SetDelayedDelivery { topic, delayed } => {
            (topic, set("delayedDelivery", delayed_body(&delayed)?))
        }
        C::GetDelayedDelivery { topic, applied } => (topic, get("delayedDelivery", applied)),
        C::RemoveDelayedDelivery { topic } => (topic, del("delayedDelivery")),
        C::SetMaxUnackedMessagesPerConsumer { topic, max } => {
            (topic, set("maxUnackedMessagesOnConsumer", json!(max)))
        }
        C::GetMaxUnackedMessagesPerConsumer { topic, applied } => {
            (topic, get("maxUnackedMessagesOnConsumer", applied))
        }
        C::RemoveMaxUnackedMessagesPerConsumer { topic } => {
            (topic, del("maxUnackedMessagesOnConsumer"))
        }
        C::SetMaxUnackedMessagesPerSubscription { topic, max } => {
            (topic, set("maxUnackedMessagesOnSubscription", json!(max)))
        }
        C::GetMaxUnackedMessagesPerSubscription { topic, applied } => {
            (topic, get("maxUnackedMessagesOnSubscription", applied))
        }
        C::RemoveMaxUnackedMessagesPerSubscription { topic } => {
            (topic, del("maxUnackedMessagesOnSubscription"))
        }
        C::GetBacklogQuotas { topic, applied } => {
            let q = if applied { "?applied=true" } else { "" };
            (
                topic,
                other("GET", format!("backlogQuotaMap{q}"), String::new()),
            )
        }
        C::SetBacklogQuota { topic, quota } => {
            let (kind, body) = quota_body(&quota)?;
            (
                topic,
                other(
                    "POST",
                    format!("backlogQuota?backlogQuotaType={kind}"),
                    body.to_string(),
                ),
            )
        }
        C::RemoveBacklogQuota {
            topic,
            backlog_quota_type,
        } => (
            topic,
            other(
                "DELETE",
                format!("backlogQuota?backlogQuotaType={backlog_quota_type}"),
                String::new(),
            ),
        ),
        C::SetAutoSubscriptionCreation { topic, switch } => (
            topic,
            set(
                "autoSubscriptionCreation",
                json!({ "allowAutoSubscriptionCreation": switch.on()? }),
            ),
        ),
        C::GetAutoSubscriptionCreation { topic, applied } => {
            (topic, get("autoSubscriptionCreation", applied))
        }
        C::RemoveAutoSubscriptionCreation { topic } => (topic, del("autoSubscriptionCreation")),
        C::SetSchemaCompatibilityStrategy { topic, strategy } => (
            topic,
            policy(
                "PUT",
                "schemaCompatibilityStrategy",
                json!(strategy.to_uppercase()).to_string(),
                false,
            ),
        ),
        C::GetSchemaCompatibilityStrategy { topic, applied } => {
            (topic, get("schemaCompatibilityStrategy", applied))
        }
        C::RemoveSchemaCompatibilityStrategy { topic } => {
            (topic, del("schemaCompatibilityStrategy"))
        }
        C::SetSchemaValidationEnforced { topic, switch } => {
            (topic, set("schemaValidationEnforced", json!(switch.on()?)))
        }
        C::GetSchemaValidationEnforced { topic, applied } => {
            (topic, get("schemaValidationEnforced", applied))
        }
    })
}
