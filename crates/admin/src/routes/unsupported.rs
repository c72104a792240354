//! Pulsar's admin routes for what Strobe does not do: tiered-storage
//! offload, geo-replication, shadow topics, bookie affinity groups, entry
//! filters, resource groups, cluster migration. Each answers 405 (Pulsar's
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
