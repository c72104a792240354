//! `strobe admin`: pulsar-admin's common verbs over Strobe's admin HTTP API.
//! Readable output by default, JSON with `--json`.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::Value;

use crate::admin_http::{Http, HttpArgs, seg, segs};
use crate::admin_output::Output;

#[derive(Debug, Args)]
pub struct AdminArgs {
    #[command(flatten)]
    http: HttpArgs,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// Clusters this broker serves.
    Clusters {
        #[command(subcommand)]
        cmd: crate::admin_clusters::ClustersCmd,
    },
    /// Tenants.
    Tenants {
        #[command(subcommand)]
        cmd: TenantsCmd,
    },
    /// Namespaces and their policies.
    Namespaces {
        #[command(subcommand)]
        cmd: NamespacesCmd,
    },
    /// Topics, their stats and their subscriptions.
    Topics {
        #[command(subcommand)]
        cmd: TopicsCmd,
    },
    /// Transactions: coordinators, one transaction, a topic's buffer.
    Transactions {
        #[command(subcommand)]
        cmd: TransactionsCmd,
    },
    /// This broker's metrics, topics and load.
    BrokerStats {
        #[command(subcommand)]
        cmd: BrokerStatsCmd,
    },
    /// Scalable topics (Pulsar 5): layouts of segments that split and merge.
    ScalableTopics {
        #[command(subcommand)]
        cmd: crate::admin_scalable::ScalableCmd,
    },
}

#[derive(Debug, Subcommand)]
enum BrokerStatsCmd {
    /// The metrics as JSON, one object per label set.
    MonitoringMetrics,
    /// The topics served, by namespace and bundle, with their stats.
    Topics,
    /// The broker's load: topics, producers, consumers, rates.
    LoadReport,
}

#[derive(Debug, Subcommand)]
enum TransactionsCmd {
    /// Every coordinator partition: leader, next sequence, open transactions.
    CoordinatorStats {
        /// Only this partition.
        #[arg(short = 'c', long)]
        coordinator_id: Option<u32>,
    },
    /// One transaction's status, times and participants.
    TransactionMetadata {
        /// TxnID mostSigBits (the coordinator partition).
        #[arg(short = 'm', long)]
        most_sig_bits: u64,
        /// TxnID leastSigBits.
        #[arg(short = 'l', long)]
        least_sig_bits: u64,
    },
    /// A topic's transaction buffer (on the broker that has it loaded).
    BufferStats { topic: String },
}

#[derive(Debug, Subcommand)]
enum TenantsCmd {
    List,
    Get {
        tenant: String,
    },
    Create {
        tenant: String,
        /// Admin roles, comma separated.
        #[arg(long, default_value = "")]
        admin_roles: String,
    },
    Delete {
        tenant: String,
    },
}

#[derive(Debug, Subcommand)]
enum NamespacesCmd {
    /// Namespaces of a tenant.
    List {
        tenant: String,
    },
    Create {
        namespace: String,
    },
    Delete {
        namespace: String,
    },
    /// All policies of a namespace.
    Policies {
        namespace: String,
    },
    SetDeduplication {
        namespace: String,
        #[command(flatten)]
        switch: crate::admin_topics::Switch,
    },
    SetMessageTtl {
        namespace: String,
        /// Seconds; 0 = messages never expire.
        #[arg(long)]
        ttl: u64,
    },
    SetRetention {
        namespace: String,
        /// Minutes to keep consumed messages (-1: no limit).
        #[arg(long, allow_hyphen_values = true)]
        time: i64,
        /// Megabytes of consumed messages to keep (-1: no limit).
        #[arg(long, allow_hyphen_values = true)]
        size: i64,
    },
    /// Backlog quotas of a namespace.
    GetBacklogQuotas {
        namespace: String,
    },
    SetBacklogQuota {
        namespace: String,
        #[command(flatten)]
        quota: crate::admin_topics::QuotaArgs,
    },
    RemoveBacklogQuota {
        namespace: String,
        /// destination_storage or message_age.
        #[arg(long, default_value = "destination_storage")]
        backlog_quota_type: String,
    },
    /// Roles and the actions they may take on a namespace.
    Permissions {
        namespace: String,
    },
    GrantPermission {
        namespace: String,
        #[arg(long)]
        role: String,
        /// Comma separated: produce, consume, functions, sources, sinks, packages.
        #[arg(long)]
        actions: String,
    },
    RevokePermission {
        namespace: String,
        #[arg(long)]
        role: String,
    },
    /// Bundles (hash ranges) of a namespace.
    Bundles {
        namespace: String,
    },
    /// Unloads a namespace's topics, or one bundle's; with -d the bundle moves
    /// to that broker (a cluster's broker id or host:webPort) and its clients
    /// follow without a lookup.
    Unload {
        namespace: String,
        #[arg(short, long)]
        bundle: Option<String>,
        #[arg(short = 'd', long = "destinationBroker", requires = "bundle")]
        destination_broker: Option<String>,
    },
    SplitBundle {
        namespace: String,
        #[arg(short, long)]
        bundle: String,
    },
    #[command(flatten)]
    Tenancy(crate::admin_tenancy::NamespaceTenancyCmd),
    #[command(flatten)]
    More(crate::admin_namespaces::NamespaceMoreCmd),
}

#[derive(Debug, Subcommand)]
enum TopicsCmd {
    /// Topics of a namespace.
    List {
        namespace: String,
    },
    Create {
        topic: String,
    },
    CreatePartitionedTopic {
        topic: String,
        #[arg(short, long)]
        partitions: u32,
    },
    UpdatePartitionedTopic {
        topic: String,
        #[arg(short, long)]
        partitions: u32,
    },
    PartitionedMetadata {
        topic: String,
    },
    Stats {
        topic: String,
    },
    PartitionedStats {
        topic: String,
    },
    InternalStats {
        topic: String,
    },
    Unload {
        topic: String,
    },
    Delete {
        topic: String,
        /// Disconnect producers and consumers first.
        #[arg(short, long)]
        force: bool,
    },
    DeletePartitionedTopic {
        topic: String,
        #[arg(short, long)]
        force: bool,
    },
    /// No more messages are accepted; consumers get REACHED_END_OF_TOPIC at the end.
    Terminate {
        topic: String,
    },
    Subscriptions {
        topic: String,
    },
    CreateSubscription {
        topic: String,
        #[arg(short, long)]
        subscription: String,
    },
    Unsubscribe {
        topic: String,
        #[arg(short, long)]
        subscription: String,
    },
    Skip {
        topic: String,
        #[arg(short, long)]
        subscription: String,
        #[arg(short = 'n', long)]
        count: u64,
    },
    ResetCursor {
        topic: String,
        #[arg(short, long)]
        subscription: String,
        /// Publish time in ms since the epoch.
        #[arg(long, conflicts_with = "message_id")]
        time: Option<u64>,
        /// LEDGER:ENTRY
        #[arg(long)]
        message_id: Option<String>,
    },
    ExpireMessages {
        topic: String,
        #[arg(short, long)]
        subscription: String,
        /// Expire messages older than this many seconds.
        #[arg(short = 't', long)]
        expire_time: u64,
    },
    PeekMessages {
        topic: String,
        #[arg(short, long)]
        subscription: String,
        #[arg(short = 'n', long, default_value_t = 1)]
        count: u64,
    },
    #[command(flatten)]
    Tenancy(crate::admin_tenancy::TopicTenancyCmd),
    #[command(flatten)]
    More(crate::admin_topics::TopicMoreCmd),
}

/// `persistent://t/ns/x` or `t/ns/x` or `x` to the REST path `persistent/t/ns/x`.
fn topic_path(topic: &str) -> anyhow::Result<String> {
    let (domain, rest) = match topic.split_once("://") {
        Some((d, r)) => (d, r.to_owned()),
        None if topic.matches('/').count() == 2 => ("persistent", topic.to_owned()),
        None if !topic.contains('/') => ("persistent", format!("public/default/{topic}")),
        None => bail!(
            "topic {topic:?}: expected <topic>, <tenant>/<ns>/<topic> or <domain>://<tenant>/<ns>/<topic>"
        ),
    };
    Ok(format!("{}/{}", seg(domain), segs(&rest)))
}

pub fn run(args: AdminArgs) -> anyhow::Result<()> {
    let http = Http::new(&args.http)?;
    use AdminCommand as A;
    let out: Output = match args.command {
        A::Clusters { cmd } => crate::admin_clusters::clusters(&http, cmd)?,
        A::BrokerStats { cmd } => http
            .get(match cmd {
                BrokerStatsCmd::MonitoringMetrics => "/admin/v2/broker-stats/metrics",
                BrokerStatsCmd::Topics => "/admin/v2/broker-stats/topics",
                BrokerStatsCmd::LoadReport => "/admin/v2/broker-stats/load-report",
            })?
            .into(),
        A::Tenants { cmd } => match cmd {
            TenantsCmd::List => http.get("/admin/v2/tenants")?.into(),
            TenantsCmd::Get { tenant } => http
                .get(&format!(
                    "/admin/v2/tenants/{tenant}",
                    tenant = seg(&tenant)
                ))?
                .into(),
            TenantsCmd::Create {
                tenant,
                admin_roles,
            } => {
                let roles: Vec<&str> = admin_roles.split(',').filter(|r| !r.is_empty()).collect();
                let body = serde_json::json!({ "adminRoles": roles, "allowedClusters": [] });
                http.send(
                    "PUT",
                    &format!("/admin/v2/tenants/{tenant}", tenant = seg(&tenant)),
                    &body.to_string(),
                )?;
                Output::Done(format!("created tenant {tenant}"))
            }
            TenantsCmd::Delete { tenant } => {
                http.send(
                    "DELETE",
                    &format!("/admin/v2/tenants/{tenant}", tenant = seg(&tenant)),
                    "",
                )?;
                Output::Done(format!("deleted tenant {tenant}"))
            }
        },
        A::Namespaces { cmd } => match cmd {
            NamespacesCmd::List { tenant } => http
                .get(&format!(
                    "/admin/v2/namespaces/{tenant}",
                    tenant = seg(&tenant)
                ))?
                .into(),
            NamespacesCmd::Create { namespace } => {
                http.send(
                    "PUT",
                    &format!(
                        "/admin/v2/namespaces/{namespace}",
                        namespace = segs(&namespace)
                    ),
                    "",
                )?;
                Output::Done(format!("created namespace {namespace}"))
            }
            NamespacesCmd::Delete { namespace } => {
                http.send(
                    "DELETE",
                    &format!(
                        "/admin/v2/namespaces/{namespace}",
                        namespace = segs(&namespace)
                    ),
                    "",
                )?;
                Output::Done(format!("deleted namespace {namespace}"))
            }
            NamespacesCmd::Policies { namespace } => http
                .get(&format!(
                    "/admin/v2/namespaces/{namespace}",
                    namespace = segs(&namespace)
                ))?
                .into(),
            NamespacesCmd::SetDeduplication { namespace, switch } => {
                let enable = switch.on()?;
                http.send(
                    "POST",
                    &format!(
                        "/admin/v2/namespaces/{namespace}/deduplication",
                        namespace = segs(&namespace)
                    ),
                    &enable.to_string(),
                )?;
                Output::Done(format!(
                    "deduplication {} on {namespace}",
                    if enable { "enabled" } else { "disabled" }
                ))
            }
            NamespacesCmd::SetMessageTtl { namespace, ttl } => {
                http.send(
                    "POST",
                    &format!(
                        "/admin/v2/namespaces/{namespace}/messageTTL",
                        namespace = segs(&namespace)
                    ),
                    &ttl.to_string(),
                )?;
                Output::Done(format!("message TTL of {namespace} set to {ttl} s"))
            }
            NamespacesCmd::SetRetention {
                namespace,
                time,
                size,
            } => {
                let body = serde_json::json!({ "retentionTimeInMinutes": time, "retentionSizeInMB": size });
                http.send(
                    "POST",
                    &format!(
                        "/admin/v2/namespaces/{namespace}/retention",
                        namespace = segs(&namespace)
                    ),
                    &body.to_string(),
                )?;
                Output::Done(format!(
                    "retention of {namespace} set to {time} min / {size} MB"
                ))
            }
            NamespacesCmd::GetBacklogQuotas { namespace } => http
                .get(&format!(
                    "/admin/v2/namespaces/{namespace}/backlogQuotaMap",
                    namespace = segs(&namespace)
                ))?
                .into(),
            NamespacesCmd::SetBacklogQuota { namespace, quota } => {
                let (kind, body) = crate::admin_topics::quota_body(&quota)?;
                let policy = &quota.policy;
                http.send(
                    "POST",
                    &format!(
                        "/admin/v2/namespaces/{namespace}/backlogQuota?backlogQuotaType={kind}",
                        namespace = segs(&namespace)
                    ),
                    &body.to_string(),
                )?;
                Output::Done(format!("{kind} quota of {namespace} set ({policy})"))
            }
            NamespacesCmd::RemoveBacklogQuota {
                namespace,
                backlog_quota_type,
            } => {
                http.send(
                    "DELETE",
                    &format!(
                        "/admin/v2/namespaces/{namespace}/backlogQuota?backlogQuotaType={backlog_quota_type}", namespace = segs(&namespace)),
                    "",
                )?;
                Output::Done(format!("{backlog_quota_type} quota of {namespace} removed"))
            }
            NamespacesCmd::Permissions { namespace } => http
                .get(&format!(
                    "/admin/v2/namespaces/{namespace}/permissions",
                    namespace = segs(&namespace)
                ))?
                .into(),
            NamespacesCmd::GrantPermission {
                namespace,
                role,
                actions,
            } => {
                let list: Vec<&str> = actions.split(',').filter(|a| !a.is_empty()).collect();
                http.send(
                    "POST",
                    &format!(
                        "/admin/v2/namespaces/{namespace}/permissions/{role}",
                        namespace = segs(&namespace),
                        role = seg(&role)
                    ),
                    &serde_json::json!(list).to_string(),
                )?;
                Output::Done(format!("granted {actions} on {namespace} to {role}"))
            }
            NamespacesCmd::RevokePermission { namespace, role } => {
                http.send(
                    "DELETE",
                    &format!(
                        "/admin/v2/namespaces/{namespace}/permissions/{role}",
                        namespace = segs(&namespace),
                        role = seg(&role)
                    ),
                    "",
                )?;
                Output::Done(format!("revoked the permissions of {role} on {namespace}"))
            }
            NamespacesCmd::Bundles { namespace } => http
                .get(&format!(
                    "/admin/v2/namespaces/{namespace}/bundles",
                    namespace = segs(&namespace)
                ))?
                .into(),
            NamespacesCmd::Unload {
                namespace,
                bundle,
                destination_broker,
            } => {
                let path = match (&bundle, &destination_broker) {
                    (Some(b), Some(d)) => {
                        format!(
                            "/admin/v2/namespaces/{namespace}/{b}/unload?destinationBroker={d}",
                            namespace = segs(&namespace),
                            b = seg(b),
                            d = seg(d)
                        )
                    }
                    (Some(b), None) => format!(
                        "/admin/v2/namespaces/{namespace}/{b}/unload",
                        namespace = segs(&namespace),
                        b = seg(b)
                    ),
                    (None, _) => format!(
                        "/admin/v2/namespaces/{namespace}/unload",
                        namespace = segs(&namespace)
                    ),
                };
                http.send("PUT", &path, "")?;
                Output::Done(format!("unloaded {namespace}"))
            }
            NamespacesCmd::SplitBundle { namespace, bundle } => {
                http.send(
                    "PUT",
                    &format!(
                        "/admin/v2/namespaces/{namespace}/{bundle}/split",
                        namespace = segs(&namespace),
                        bundle = seg(&bundle)
                    ),
                    "",
                )?;
                Output::Done(format!("split bundle {bundle} of {namespace}"))
            }
            NamespacesCmd::More(cmd) => {
                let (namespace, call) = crate::admin_namespaces::namespace_more_call(cmd)?;
                let base = format!("/admin/v2/namespaces/{}", segs(&namespace));
                more_call(&http, &base, &namespace, call)?
            }
            NamespacesCmd::Tenancy(cmd) => {
                let (namespace, call) = crate::admin_tenancy::namespace_call(cmd)?;
                let path = format!(
                    "/admin/v2/namespaces/{}/{}",
                    segs(&namespace),
                    call.resource
                );
                tenancy_call(&http, &path, call, &namespace)?
            }
        },
        A::Topics { cmd } => topics(&http, cmd)?,
        A::ScalableTopics { cmd } => match crate::admin_scalable::run(&http, cmd)? {
            crate::admin_scalable::Answer::Json(v) => Output::Json(v),
            crate::admin_scalable::Answer::Done(s) => Output::Done(s),
        },
        A::Transactions { cmd } => match cmd {
            TransactionsCmd::CoordinatorStats { coordinator_id } => {
                let q = coordinator_id.map_or(String::new(), |c| format!("?coordinatorId={c}"));
                http.get(&format!("/admin/v3/transactions/coordinatorStats{q}"))?
                    .into()
            }
            TransactionsCmd::TransactionMetadata {
                most_sig_bits,
                least_sig_bits,
            } => http
                .get(&format!(
                    "/admin/v3/transactions/transactionMetadata/{most_sig_bits}/{least_sig_bits}"
                ))?
                .into(),
            TransactionsCmd::BufferStats { topic } => {
                let path = topic_path(&topic)?;
                let rest = path
                    .strip_prefix("persistent/")
                    .ok_or_else(|| anyhow::anyhow!("transactions are on persistent topics only"))?;
                http.get(&format!(
                    "/admin/v3/transactions/transactionBufferStats/{rest}"
                ))?
                .into()
            }
        },
    };
    out.print(args.json)
}

fn topics(http: &Http, cmd: TopicsCmd) -> anyhow::Result<Output> {
    use TopicsCmd as T;
    let base = |t: &str| -> anyhow::Result<String> { Ok(format!("/admin/v2/{}", topic_path(t)?)) };
    Ok(match cmd {
        T::Tenancy(cmd) => {
            let (topic, call) = crate::admin_tenancy::topic_call(cmd)?;
            let path = format!("{}/{}", base(&topic)?, call.resource);
            tenancy_call(http, &path, call, &topic)?
        }
        T::More(cmd) => {
            let (topic, call) = crate::admin_topics::topic_more_call(cmd)?;
            more_call(http, &base(&topic)?, &topic, call)?
        }
        T::List { namespace } => http
            .get(&format!(
                "/admin/v2/namespaces/{namespace}/topics?mode=ALL",
                namespace = segs(&namespace)
            ))?
            .into(),
        T::Create { topic } => {
            http.send("PUT", &base(&topic)?, "")?;
            Output::Done(format!("created {topic}"))
        }
        T::CreatePartitionedTopic { topic, partitions } => {
            http.send(
                "PUT",
                &format!("{}/partitions", base(&topic)?),
                &partitions.to_string(),
            )?;
            Output::Done(format!("created {topic} with {partitions} partitions"))
        }
        T::UpdatePartitionedTopic { topic, partitions } => {
            http.send(
                "POST",
                &format!("{}/partitions", base(&topic)?),
                &partitions.to_string(),
            )?;
            Output::Done(format!("{topic} now has {partitions} partitions"))
        }
        T::PartitionedMetadata { topic } => {
            http.get(&format!("{}/partitions", base(&topic)?))?.into()
        }
        T::Stats { topic } => http.get(&format!("{}/stats", base(&topic)?))?.into(),
        T::PartitionedStats { topic } => http
            .get(&format!("{}/partitioned-stats", base(&topic)?))?
            .into(),
        T::InternalStats { topic } => http
            .get(&format!("{}/internalStats", base(&topic)?))?
            .into(),
        T::Unload { topic } => {
            http.send("PUT", &format!("{}/unload", base(&topic)?), "")?;
            Output::Done(format!("unloaded {topic}"))
        }
        T::Delete { topic, force } => {
            http.send("DELETE", &format!("{}?force={force}", base(&topic)?), "")?;
            Output::Done(format!("deleted {topic}"))
        }
        T::DeletePartitionedTopic { topic, force } => {
            http.send(
                "DELETE",
                &format!("{}/partitions?force={force}", base(&topic)?),
                "",
            )?;
            Output::Done(format!("deleted partitioned topic {topic}"))
        }
        T::Terminate { topic } => {
            let (code, _, body) =
                http.request("POST", &format!("{}/terminate", base(&topic)?), "")?;
            if code != 200 {
                bail!("HTTP {code}: {}", String::from_utf8_lossy(&body));
            }
            let id: Value = serde_json::from_slice(&body)?;
            Output::Done(format!(
                "terminated {topic}; last message id {}:{}",
                id["ledgerId"], id["entryId"]
            ))
        }
        T::Subscriptions { topic } => http
            .get(&format!("{}/subscriptions", base(&topic)?))?
            .into(),
        T::CreateSubscription {
            topic,
            subscription,
        } => {
            http.send(
                "PUT",
                &format!(
                    "{}/subscription/{subscription}",
                    base(&topic)?,
                    subscription = seg(&subscription)
                ),
                "",
            )?;
            Output::Done(format!("created subscription {subscription} on {topic}"))
        }
        T::Unsubscribe {
            topic,
            subscription,
        } => {
            http.send(
                "DELETE",
                &format!(
                    "{}/subscription/{subscription}",
                    base(&topic)?,
                    subscription = seg(&subscription)
                ),
                "",
            )?;
            Output::Done(format!("deleted subscription {subscription} of {topic}"))
        }
        T::Skip {
            topic,
            subscription,
            count,
        } => {
            http.send(
                "POST",
                &format!(
                    "{}/subscription/{subscription}/skip/{count}",
                    base(&topic)?,
                    subscription = seg(&subscription)
                ),
                "",
            )?;
            Output::Done(format!("skipped {count} messages on {subscription}"))
        }
        T::ResetCursor {
            topic,
            subscription,
            time,
            message_id,
        } => {
            let path = format!(
                "{}/subscription/{subscription}/resetcursor",
                base(&topic)?,
                subscription = seg(&subscription)
            );
            match (time, message_id) {
                (Some(t), None) => http.send("POST", &format!("{path}/{t}", t = seg(t)), "")?,
                (None, Some(id)) => {
                    let (l, e) = id.split_once(':').context("--message-id is LEDGER:ENTRY")?;
                    let body = serde_json::json!({ "ledgerId": l.parse::<i64>()?, "entryId": e.parse::<i64>()? });
                    http.send("POST", &path, &body.to_string())?
                }
                _ => bail!("give --time or --message-id"),
            };
            Output::Done(format!("reset {subscription} on {topic}"))
        }
        T::ExpireMessages {
            topic,
            subscription,
            expire_time,
        } => {
            let path = format!(
                "{}/subscription/{subscription}/expireMessages/{expire_time}",
                base(&topic)?,
                subscription = seg(&subscription)
            );
            http.send("POST", &path, "")?;
            Output::Done(format!(
                "expired messages older than {expire_time} s on {subscription}"
            ))
        }
        T::PeekMessages {
            topic,
            subscription,
            count,
        } => {
            let mut shown = Vec::new();
            for n in 1..=count {
                let path = format!(
                    "{}/subscription/{subscription}/position/{n}",
                    base(&topic)?,
                    subscription = seg(&subscription),
                    n = seg(n)
                );
                match http.request("GET", &path, "") {
                    Ok((200, headers, body)) => shown.push(serde_json::json!({
                        "messageId": header(&headers, "x-pulsar-message-id"),
                        "publishTime": header(&headers, "x-pulsar-publish-time"),
                        "payload": String::from_utf8_lossy(&body),
                    })),
                    Ok((404, _, _)) => break,
                    Ok((code, _, body)) => bail!("HTTP {code}: {}", String::from_utf8_lossy(&body)),
                    Err(e) => return Err(e),
                }
            }
            Output::Json(Value::Array(shown))
        }
    })
}

/// Runs a verb's call below `base` (a topic's or a namespace's path).
fn more_call(
    http: &Http,
    base: &str,
    target: &str,
    call: crate::admin_topics::TopicCall,
) -> anyhow::Result<Output> {
    let (method, sub, body) = match call {
        crate::admin_topics::TopicCall::Policy(call) => {
            let path = format!("{base}/{}", call.resource);
            return tenancy_call(http, &path, call, target);
        }
        crate::admin_topics::TopicCall::Other(method, sub, body) => (method, sub, body),
    };
    let path = format!("{base}/{sub}");
    Ok(match http.request(method, &path, &body)? {
        (code, _, body) if code >= 300 => {
            bail!("HTTP {code}: {}", String::from_utf8_lossy(&body))
        }
        // A message: its id and payload (examine-message, get-message-by-id).
        (_, headers, body) if !header(&headers, "x-pulsar-message-id").is_empty() => {
            Output::Json(serde_json::json!({
                "messageId": header(&headers, "x-pulsar-message-id"),
                "publishTime": header(&headers, "x-pulsar-publish-time"),
                "payload": String::from_utf8_lossy(&body),
            }))
        }
        (_, _, body) if body.is_empty() => Output::Done(format!("{sub} of {target}: done")),
        (_, _, body) => serde_json::from_slice::<Value>(&body)
            .with_context(|| format!("the answer to {path}"))?
            .into(),
    })
}

fn header(headers: &[(String, String)], name: &str) -> String {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// Runs a tenancy verb's call on `path` (of `target`, for the message).
fn tenancy_call(
    http: &Http,
    path: &str,
    call: crate::admin_tenancy::Call,
    target: &str,
) -> anyhow::Result<Output> {
    if call.method == "GET" {
        let q = if call.applied { "?applied=true" } else { "" };
        return Ok(http.get(&format!("{path}{q}"))?.into());
    }
    http.send(call.method, path, &call.body)?;
    Ok(Output::Done(match call.method {
        "DELETE" => format!("{} of {target} removed", call.resource),
        _ => format!("{} of {target} set to {}", call.resource, call.body),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_paths() {
        assert_eq!(topic_path("t").unwrap(), "persistent/public/default/t");
        assert_eq!(topic_path("a/b/c").unwrap(), "persistent/a/b/c");
        assert_eq!(
            topic_path("non-persistent://a/b/c").unwrap(),
            "non-persistent/a/b/c"
        );
        assert!(topic_path("a/b").is_err());
    }
}
