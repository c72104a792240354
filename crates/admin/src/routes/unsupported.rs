//! Pulsar's admin routes for what Strobe does not do: tiered-storage
//! offload, geo-replication, shadow topics, bookie affinity groups, entry
//! filters, resource groups, cluster migration, BookKeeper persistence
//! policies, placement constraints (failure domains, isolation policies,
//! anti-affinity), resource quotas, the JVM's internals, dynamic
//! configuration and shutdown over HTTP. Each answers 405 (Pulsar's
//! "not allowed", `PulsarAdminException.NotAllowedException` in its admin
//! client) with a JSON reason naming the feature, never a bare 404: a tool
//! can tell "not here" from "no such route" or "no such topic". A read of a
//! setting Strobe cannot hold answers the same way rather than an empty
//! value that would claim the feature is configured off.

use axum::routing::MethodRouter;

use crate::api::*;

/// Why each feature is absent, in the words the reason carries.
const OFFLOAD: &str = "tiered-storage offload is not supported by Strobe: topics live in its own \
    storage (local files or the object store a cluster shares) and are never moved to a second tier";
const GEO: &str = "geo-replication is not supported by Strobe: a Strobe cluster serves one Pulsar \
    cluster, and nothing replicates its topics to another";
const SHADOW: &str = "shadow topics are not supported by Strobe";
const BOOKIE: &str = "bookie affinity groups are not supported by Strobe: it stores topics without \
    BookKeeper";
const ENTRY_FILTERS: &str = "entry filters are not supported by Strobe: it loads no broker plugins";
const RESOURCE_GROUPS: &str = "resource groups are not supported by Strobe yet: use the namespace \
    and topic rate and count policies";
const MIGRATION: &str = "cluster migration is not supported by Strobe: it does not replicate to \
    another cluster";
const BOOKIES: &str = "Strobe has no bookies: it stores topics without BookKeeper";
const PERSISTENCE: &str = "persistence policies (BookKeeper ensemble, write and ack quorums) do not \
    apply to Strobe: every acknowledged message is durable in its storage (fsynced files, or the \
    object store a cluster shares) before the producer hears of it";
const PLACEMENT: &str = "failure domains, namespace isolation policies and anti-affinity groups \
    are not supported by Strobe: its load manager places bundles by load alone";
const QUOTAS: &str = "resource quotas belong to Pulsar's legacy load manager and are not \
    supported by Strobe: limit namespaces and topics with their rate and count policies";
const JVM: &str = "Strobe is no JVM: it has no MBeans and no Netty allocators; /metrics has its \
    own figures";
const AVAILABILITY: &str = "broker resource availability is a report of Pulsar's modular load \
    manager, which Strobe does not run";
const SHUTDOWN: &str = "Strobe is not stopped through the admin API: send the process SIGTERM \
    (it closes its topics and hands them over first)";
const DYNAMIC: &str = "Strobe has no dynamic configuration: change the setting in the \
    configuration file and restart the broker (GET brokers/configuration/runtime shows what is in \
    force)";
const MAX_SIZE: &str = "a per-topic maxMessageSize is not supported by Strobe: Pulsar's clients \
    learn the largest message from the broker when they connect (max_message_size), and the C++ \
    and Python clients send a message the topic refused again rather than fail it";
const SUB_AUTH_MODE: &str = "subscription auth mode Prefix is not supported by Strobe: grant \
    roles per subscription with permissions/subscription";

async fn refuse(reason: &'static str) -> ApiError {
    ApiError(405, reason.to_owned())
}

/// Every method in `methods` of one path, refused with `reason`.
fn refused(methods: &[&str], reason: &'static str) -> MethodRouter<Svc> {
    let mut r = MethodRouter::new();
    for m in methods {
        let h = move || refuse(reason);
        r = match *m {
            "GET" => r.get(h),
            "PUT" => r.put(h),
            "POST" => r.post(h),
            "DELETE" => r.delete(h),
            other => unreachable!("no such method {other}"),
        };
    }
    r
}

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    let ns = |p: &str| format!("/admin/v2/namespaces/{{tenant}}/{{ns}}/{p}");
    let topic = |p: &str| format!("/admin/v2/{{domain}}/{{tenant}}/{{ns}}/{{topic}}/{p}");
    const ALL: &[&str] = &["GET", "POST", "DELETE"];
    Router::new()
        // Offload.
        .route(&ns("offloadPolicies"), refused(&["GET", "POST"], OFFLOAD))
        .route(&ns("removeOffloadPolicies"), refused(&["DELETE"], OFFLOAD))
        .route(&ns("offloadThreshold"), refused(&["GET", "PUT"], OFFLOAD))
        .route(
            &ns("offloadThresholdInSeconds"),
            refused(&["GET", "PUT"], OFFLOAD),
        )
        .route(
            &ns("offloadDeletionLagMs"),
            refused(&["GET", "PUT", "DELETE"], OFFLOAD),
        )
        .route(&ns("scanOffloadedLedgers"), refused(&["GET"], OFFLOAD))
        .route(&topic("offload"), refused(&["GET", "PUT"], OFFLOAD))
        .route(&topic("offloadPolicies"), refused(ALL, OFFLOAD))
        // Geo-replication.
        .route(&ns("replicatorDispatchRate"), refused(ALL, GEO))
        .route(&topic("replication"), refused(ALL, GEO))
        .route(&topic("replicatorDispatchRate"), refused(ALL, GEO))
        .route(
            &topic("subscription/{sub}/replicatedSubscriptionStatus"),
            refused(&["GET", "POST"], GEO),
        )
        .route(
            "/admin/v2/clusters/{cluster}/peers",
            refused(&["GET", "POST"], GEO),
        )
        .route(
            "/admin/v2/clusters/{cluster}/migrate",
            refused(&["POST"], MIGRATION),
        )
        // Shadow topics.
        .route(
            &topic("shadowTopics"),
            refused(&["GET", "PUT", "DELETE"], SHADOW),
        )
        // Bookie affinity.
        .route(&ns("persistence/bookieAffinity"), refused(ALL, BOOKIE))
        .route(
            "/admin/v2/broker-stats/bookieops",
            refused(&["GET"], BOOKIES),
        )
        // Entry filters.
        .route(&ns("entryFilters"), refused(ALL, ENTRY_FILTERS))
        .route(&topic("entryFilters"), refused(ALL, ENTRY_FILTERS))
        // BookKeeper persistence policies.
        .route(&ns("persistence"), refused(ALL, PERSISTENCE))
        .route(&topic("persistence"), refused(ALL, PERSISTENCE))
        // Placement constraints.
        .route(
            "/admin/v2/clusters/{cluster}/failureDomains",
            refused(&["GET"], PLACEMENT),
        )
        .route(
            "/admin/v2/clusters/{cluster}/failureDomains/{domain}",
            refused(ALL, PLACEMENT),
        )
        .route(
            "/admin/v2/clusters/{cluster}/namespaceIsolationPolicies",
            refused(&["GET"], PLACEMENT),
        )
        .route(
            "/admin/v2/clusters/{cluster}/namespaceIsolationPolicies/brokers",
            refused(&["GET"], PLACEMENT),
        )
        .route(
            "/admin/v2/clusters/{cluster}/namespaceIsolationPolicies/brokers/{broker}",
            refused(&["GET"], PLACEMENT),
        )
        .route(
            "/admin/v2/clusters/{cluster}/namespaceIsolationPolicies/{policy}",
            refused(ALL, PLACEMENT),
        )
        .route(&ns("antiAffinity"), refused(ALL, PLACEMENT))
        .route(
            "/admin/v2/namespaces/{tenant}/antiAffinity/{group}",
            refused(&["GET"], PLACEMENT),
        )
        .route(
            &ns("subscriptionAuthMode"),
            refused(&["GET", "POST"], SUB_AUTH_MODE),
        )
        // The legacy load manager's quotas, the JVM's internals.
        .route(
            "/admin/v2/resource-quotas",
            refused(&["GET", "POST"], QUOTAS),
        )
        .route(
            "/admin/v2/resource-quotas/{tenant}/{ns}/{bundle}",
            refused(ALL, QUOTAS),
        )
        .route("/admin/v2/broker-stats/mbeans", refused(&["GET"], JVM))
        .route(
            "/admin/v2/broker-stats/allocator-stats/{allocator}",
            refused(&["GET"], JVM),
        )
        .route(
            "/admin/v2/broker-stats/broker-resource-availability/{tenant}/{ns}",
            refused(&["GET"], AVAILABILITY),
        )
        .route("/admin/v2/brokers/shutdown", refused(&["POST"], SHUTDOWN))
        .route(
            "/admin/v2/brokers/configuration/{name}",
            refused(&["DELETE"], DYNAMIC),
        )
        .route(
            "/admin/v2/brokers/configuration/{name}/{value}",
            refused(&["POST"], DYNAMIC),
        )
        .route(&topic("maxMessageSize"), refused(ALL, MAX_SIZE))
        // Resource groups.
        .route(
            "/admin/v2/resourcegroups",
            refused(&["GET"], RESOURCE_GROUPS),
        )
        .route(
            "/admin/v2/resourcegroups/{group}",
            refused(&["GET", "PUT", "DELETE"], RESOURCE_GROUPS),
        )
        .route(
            &ns("resourcegroup"),
            refused(&["GET", "DELETE"], RESOURCE_GROUPS),
        )
        .route(
            &ns("resourcegroup/{group}"),
            refused(&["POST"], RESOURCE_GROUPS),
        )
}
