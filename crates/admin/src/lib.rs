//! Strobe's HTTP port: the admin API on Pulsar's paths (`/admin/v2/...`, the
//! REST side of Pulsar's `BrokersBase`, `TenantsBase`, `NamespacesBase`,
//! `PersistentTopicsBase`), HTTP lookups (`/lookup/v2/topic/...`, Pulsar's
//! `TopicLookup`), health checks and Prometheus `/metrics`.
//!
//! Handlers only translate HTTP to calls on [`BrokerService`]; every decision
//! stays in the broker. Errors answer with Pulsar's status codes and a JSON
//! body `{"reason": "..."}`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use strobe_broker::BrokerError;
use strobe_broker::policies::{
    AUTH_ACTIONS, BacklogQuotaJson, NamespacePolicies, RetentionPolicies, TenantInfo,
};
use strobe_broker::service::BrokerService;
use strobe_broker::subscription::{AdminOp, AdminReply, SeekTarget, StartPosition};
use strobe_broker::topic::Topic;
use strobe_model::TopicName;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::info;

type Svc = Arc<BrokerService>;

mod auth;
pub use auth::{PeerInfo, TlsListener};

/// An error in Pulsar's admin shape.
#[derive(Debug)]
struct ApiError(u16, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, axum::Json(json!({ "reason": self.1 }))).into_response()
    }
}

impl From<BrokerError> for ApiError {
    fn from(e: BrokerError) -> Self {
        ApiError(e.http_status(), e.to_string())
    }
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError(400, msg.into())
}

type ApiResult<T> = Result<T, ApiError>;

fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// Serves until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    service: Svc,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    info!(addr = %listener.local_addr()?, "admin HTTP API listening");
    axum::serve(
        listener,
        router(service).into_make_service_with_connect_info::<PeerInfo>(),
    )
    .with_graceful_shutdown(async move { shutdown.cancelled().await })
    .await
}

/// Serves HTTPS (the broker's TLS configuration; client certificates are the
/// "tls" provider's credentials) until `shutdown` is cancelled.
pub async fn serve_tls(
    listener: TcpListener,
    service: Svc,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let Some(cfg) = service.security.tls.clone() else {
        return Err(std::io::Error::other(
            "the HTTPS port needs tls_certificate_file and tls_key_file",
        ));
    };
    info!(addr = %listener.local_addr()?, "admin HTTPS API listening");
    let listener = TlsListener {
        listener,
        acceptor: strobe_security::acceptor(cfg),
    };
    axum::serve(
        listener,
        router(service).into_make_service_with_connect_info::<PeerInfo>(),
    )
    .with_graceful_shutdown(async move { shutdown.cancelled().await })
    .await
}

pub fn router(service: Svc) -> Router {
    Router::new()
        .route("/admin/v2/brokers/health", get(health))
        .route("/admin/v2/brokers/ready", get(ok))
        .route("/admin/v2/brokers/live", get(ok))
        .route("/status.html", get(ok))
        .route("/metrics", get(metrics))
        .route("/metrics/", get(metrics))
        .route("/admin/v2/clusters", get(clusters))
        .route(
            "/admin/v2/clusters/{cluster}",
            get(cluster).put(put_cluster).post(put_cluster),
        )
        .route("/admin/v2/tenants", get(tenants))
        .route(
            "/admin/v2/tenants/{tenant}",
            get(tenant)
                .put(create_tenant)
                .post(update_tenant)
                .delete(delete_tenant),
        )
        .route("/admin/v2/namespaces/{tenant}", get(namespaces))
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}",
            get(namespace_policies)
                .put(create_namespace)
                .delete(delete_namespace),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/topics",
            get(namespace_topics),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/deduplication",
            get(get_dedup).post(set_dedup).delete(remove_dedup),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/messageTTL",
            get(get_ttl).post(set_ttl).delete(remove_ttl),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/retention",
            get(get_retention)
                .post(set_retention)
                .delete(remove_retention),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/schemaCompatibilityStrategy",
            get(get_schema_strategy).put(set_schema_strategy),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/backlogQuotaMap",
            get(get_backlog_quotas),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/backlogQuota",
            axum::routing::post(set_backlog_quota).delete(remove_backlog_quota),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/permissions",
            get(get_permissions),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/permissions/{role}",
            axum::routing::post(grant_permission).delete(revoke_permission),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/permissions/subscription",
            get(get_subscription_permissions),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/permissions/subscription/{sub}",
            axum::routing::post(grant_subscription_permission),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/permissions/{sub}/{role}",
            axum::routing::delete(revoke_subscription_permission),
        )
        .route("/admin/v2/namespaces/{tenant}/{ns}/bundles", get(bundles))
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/unload",
            axum::routing::put(unload_namespace),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/{bundle}/unload",
            axum::routing::put(unload_bundle),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/{bundle}/split",
            axum::routing::put(split_bundle),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/compactionThreshold",
            get(get_compaction_threshold)
                .post(set_compaction_threshold)
                .delete(remove_compaction_threshold),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/isAllowAutoUpdateSchema",
            get(get_auto_update).post(set_auto_update),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/schemaValidationEnforced",
            get(get_validation_enforced).post(set_validation_enforced),
        )
        .route(
            "/admin/v2/schemas/{tenant}/{ns}/{topic}/schema",
            get(get_schema).post(post_schema).delete(delete_schema),
        )
        .route(
            "/admin/v2/schemas/{tenant}/{ns}/{topic}/schema/{version}",
            get(get_schema_version),
        )
        .route(
            "/admin/v2/schemas/{tenant}/{ns}/{topic}/schemas",
            get(get_all_schemas),
        )
        .route(
            "/admin/v2/schemas/{tenant}/{ns}/{topic}/compatibility",
            axum::routing::post(test_schema),
        )
        .route(
            "/admin/v2/schemas/{tenant}/{ns}/{topic}/version",
            axum::routing::post(schema_version_of),
        )
        .route("/admin/v2/{domain}/{tenant}/{ns}", get(domain_topics))
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/partitioned",
            get(partitioned_topics),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}",
            axum::routing::put(create_topic).delete(delete_topic),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/partitions",
            get(get_partitions)
                .put(create_partitions)
                .post(update_partitions)
                .delete(delete_partitioned),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/terminate",
            axum::routing::post(terminate),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/compaction",
            axum::routing::put(compact).get(compaction_status),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/terminate/partitions",
            axum::routing::post(terminate_partitioned),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/permissions",
            get(get_topic_permissions),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/permissions/{role}",
            axum::routing::post(grant_topic_permission).delete(revoke_topic_permission),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/stats",
            get(topic_stats),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/partitioned-stats",
            get(partitioned_stats),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/internalStats",
            get(internal_stats),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/unload",
            axum::routing::put(unload),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscriptions",
            get(subscriptions),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscription/{sub}",
            axum::routing::put(create_subscription).delete(delete_subscription),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscription/{sub}/skip/{n}",
            axum::routing::post(skip),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscription/{sub}/resetcursor/{time}",
            axum::routing::post(reset_by_time),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscription/{sub}/resetcursor",
            axum::routing::post(reset_by_id),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscription/{sub}/expireMessages/{secs}",
            axum::routing::post(expire),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscription/{sub}/position/{n}",
            get(peek),
        )
        .route(
            "/lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}",
            get(lookup),
        )
        .route(
            "/lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}/bundle",
            get(topic_bundle),
        )
        .layer(axum::middleware::from_fn_with_state(
            service.clone(),
            auth::layer,
        ))
        .with_state(service)
}

/// Liveness and readiness: the HTTP server answers only while the broker runs.
async fn ok() -> &'static str {
    "ok"
}

/// Health: a metadata write and a storage round trip succeed.
async fn health(State(s): State<Svc>) -> ApiResult<&'static str> {
    s.health_check()
        .await
        .map_err(|e| ApiError(503, format!("unhealthy: {e}")))?;
    Ok("ok")
}

// --- clusters and tenants ------------------------------------------------------

async fn clusters(State(s): State<Svc>) -> axum::Json<Vec<String>> {
    axum::Json(vec![s.config.cluster_name.clone()])
}

async fn cluster(State(s): State<Svc>, Path(c): Path<String>) -> ApiResult<axum::Json<Value>> {
    if c != s.config.cluster_name {
        return Err(ApiError(404, format!("cluster {c} does not exist")));
    }
    let mut v = json!({
        "serviceUrl": format!("http://{}:{}", s.config.advertised_address, s.config.http_port),
        "brokerServiceUrl": s.service_url(),
    });
    if let Some(tls) = s.service_url_tls() {
        v["brokerServiceUrlTls"] = json!(tls);
    }
    if s.config.http_port_tls != 0 {
        v["serviceUrlTls"] = json!(format!(
            "https://{}:{}",
            s.config.advertised_address, s.config.http_port_tls
        ));
    }
    Ok(axum::Json(v))
}

/// This broker serves one cluster; re-declaring it (as Pulsar's test setups do) is accepted.
async fn put_cluster(State(s): State<Svc>, Path(c): Path<String>) -> ApiResult<Response> {
    if c != s.config.cluster_name {
        return Err(bad(format!(
            "this broker is cluster {}; it cannot serve cluster {c}",
            s.config.cluster_name
        )));
    }
    Ok(no_content())
}

async fn tenants(State(s): State<Svc>) -> ApiResult<axum::Json<Vec<String>>> {
    Ok(axum::Json(s.tenants().await?))
}

async fn tenant(State(s): State<Svc>, Path(t): Path<String>) -> ApiResult<axum::Json<TenantInfo>> {
    Ok(axum::Json(s.tenant(&t).await?))
}

fn parse_json<T: for<'de> Deserialize<'de> + Default>(body: &Bytes) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| bad(format!("invalid JSON body: {e}")))
}

async fn create_tenant(
    State(s): State<Svc>,
    Path(t): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    s.put_tenant(&t, &parse_json(&body)?, false).await?;
    Ok(no_content())
}

async fn update_tenant(
    State(s): State<Svc>,
    Path(t): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    s.put_tenant(&t, &parse_json(&body)?, true).await?;
    Ok(no_content())
}

async fn delete_tenant(State(s): State<Svc>, Path(t): Path<String>) -> ApiResult<Response> {
    s.delete_tenant(&t).await?;
    Ok(no_content())
}

// --- namespaces ---------------------------------------------------------------

async fn namespaces(
    State(s): State<Svc>,
    Path(t): Path<String>,
) -> ApiResult<axum::Json<Vec<String>>> {
    s.tenant(&t).await?;
    Ok(axum::Json(s.namespaces_of(&t)))
}

async fn namespace_policies(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<NamespacePolicies>> {
    let name = format!("{t}/{ns}");
    s.namespace_policies(&name)
        .map(axum::Json)
        .ok_or_else(|| ApiError(404, format!("namespace {name} does not exist")))
}

async fn create_namespace(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    s.create_namespace(&format!("{t}/{ns}"), parse_json(&body)?)
        .await?;
    Ok(no_content())
}

async fn delete_namespace(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<Response> {
    s.delete_namespace(&format!("{t}/{ns}")).await?;
    Ok(no_content())
}

#[derive(Deserialize)]
struct ModeQuery {
    mode: Option<String>,
}

async fn namespace_topics(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    Query(q): Query<ModeQuery>,
) -> ApiResult<axum::Json<Vec<String>>> {
    let name = format!("{t}/{ns}");
    if !s.namespace_exists(&name) {
        return Err(ApiError(404, format!("namespace {name} does not exist")));
    }
    let (p, np) = match q.mode.as_deref().unwrap_or("PERSISTENT") {
        "PERSISTENT" => (true, false),
        "NON_PERSISTENT" => (false, true),
        "ALL" => (true, true),
        other => {
            return Err(bad(format!(
                "mode must be PERSISTENT, NON_PERSISTENT or ALL, not {other}"
            )));
        }
    };
    Ok(axum::Json(s.topics_of_namespace(&name, p, np).await?))
}

fn parse_scalar<T: std::str::FromStr>(body: &Bytes, what: &str) -> ApiResult<T> {
    let text = std::str::from_utf8(body).map_err(|_| bad(format!("{what}: body is not UTF-8")))?;
    text.trim()
        .trim_matches('"')
        .parse()
        .map_err(|_| bad(format!("{what}: cannot read {:?}", text.trim())))
}

async fn update(
    s: &Svc,
    t: &str,
    ns: &str,
    f: impl FnOnce(&mut NamespacePolicies),
) -> ApiResult<Response> {
    s.update_policies(&format!("{t}/{ns}"), f).await?;
    Ok(no_content())
}

/// GET, POST and DELETE of one namespace policy field.
macro_rules! policy_field {
    ($get:ident, $set:ident, $remove:ident, $field:ident, $parse:expr) => {
        async fn $get(
            State(s): State<Svc>,
            Path((t, ns)): Path<(String, String)>,
        ) -> ApiResult<axum::Json<Value>> {
            Ok(axum::Json(json!(policies(&s, &t, &ns)?.$field)))
        }

        async fn $set(
            State(s): State<Svc>,
            Path((t, ns)): Path<(String, String)>,
            body: Bytes,
        ) -> ApiResult<Response> {
            let v = ($parse)(&body)?;
            update(&s, &t, &ns, move |p| p.$field = Some(v)).await
        }

        async fn $remove(
            State(s): State<Svc>,
            Path((t, ns)): Path<(String, String)>,
        ) -> ApiResult<Response> {
            update(&s, &t, &ns, |p| p.$field = None).await
        }
    };
}

policy_field!(
    get_dedup,
    set_dedup,
    remove_dedup,
    deduplication_enabled,
    |b: &Bytes| { parse_scalar::<bool>(b, "deduplication") }
);
policy_field!(
    get_compaction_threshold,
    set_compaction_threshold,
    remove_compaction_threshold,
    compaction_threshold,
    |b: &Bytes| { parse_scalar::<u64>(b, "compactionThreshold") }
);
policy_field!(
    get_ttl,
    set_ttl,
    remove_ttl,
    message_ttl_in_seconds,
    |b: &Bytes| { parse_scalar::<u64>(b, "messageTTL") }
);
policy_field!(
    get_retention,
    set_retention,
    remove_retention,
    retention_policies,
    |b: &Bytes| {
        serde_json::from_slice::<RetentionPolicies>(b).map_err(|e| bad(format!("retention: {e}")))
    }
);

const STRATEGIES: &[&str] = &[
    "UNDEFINED",
    "ALWAYS_INCOMPATIBLE",
    "ALWAYS_COMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
];

async fn get_schema_strategy(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let p = policies(&s, &t, &ns)?;
    Ok(axum::Json(json!(
        p.schema_compatibility_strategy
            .unwrap_or_else(|| "UNDEFINED".into())
    )))
}

async fn set_schema_strategy(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let v: String = parse_scalar(&body, "schemaCompatibilityStrategy")?;
    if !STRATEGIES.contains(&v.as_str()) {
        return Err(bad(format!("unknown schema compatibility strategy {v:?}")));
    }
    s.update_policies(&format!("{t}/{ns}"), |p| {
        p.schema_compatibility_strategy = Some(v)
    })
    .await?;
    Ok(no_content())
}

/// GET and POST of a boolean namespace policy that reads as `default` when unset.
macro_rules! policy_flag {
    ($get:ident, $set:ident, $field:ident, $name:literal, $default:expr) => {
        async fn $get(
            State(s): State<Svc>,
            Path((t, ns)): Path<(String, String)>,
        ) -> ApiResult<axum::Json<Value>> {
            Ok(axum::Json(json!(
                policies(&s, &t, &ns)?.$field.unwrap_or($default)
            )))
        }

        async fn $set(
            State(s): State<Svc>,
            Path((t, ns)): Path<(String, String)>,
            body: Bytes,
        ) -> ApiResult<Response> {
            let v: bool = parse_scalar(&body, $name)?;
            update(&s, &t, &ns, move |p| p.$field = Some(v)).await
        }
    };
}

policy_flag!(
    get_auto_update,
    set_auto_update,
    is_allow_auto_update_schema,
    "isAllowAutoUpdateSchema",
    true
);
policy_flag!(
    get_validation_enforced,
    set_validation_enforced,
    schema_validation_enforced,
    "schemaValidationEnforced",
    false
);

fn policies(s: &Svc, t: &str, ns: &str) -> ApiResult<NamespacePolicies> {
    s.namespace_policies(&format!("{t}/{ns}"))
        .ok_or_else(|| ApiError(404, format!("namespace {t}/{ns} does not exist")))
}

// --- backlog quotas, permissions, bundles ------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QuotaQuery {
    backlog_quota_type: Option<String>,
}

fn quota_type(q: &QuotaQuery) -> ApiResult<String> {
    let t = q
        .backlog_quota_type
        .clone()
        .unwrap_or_else(|| "destination_storage".into());
    if !matches!(t.as_str(), "destination_storage" | "message_age") {
        return Err(bad(format!(
            "backlogQuotaType must be destination_storage or message_age, not {t:?}"
        )));
    }
    Ok(t)
}

async fn get_backlog_quotas(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!(policies(&s, &t, &ns)?.backlog_quota_map)))
}

async fn set_backlog_quota(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    Query(q): Query<QuotaQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    let kind = quota_type(&q)?;
    let quota: BacklogQuotaJson =
        serde_json::from_slice(&body).map_err(|e| bad(format!("backlog quota: {e}")))?;
    if !matches!(
        quota.policy.as_str(),
        "producer_request_hold" | "producer_exception" | "consumer_backlog_eviction"
    ) {
        return Err(bad(format!(
            "policy must be producer_request_hold, producer_exception or consumer_backlog_eviction, not {:?}",
            quota.policy
        )));
    }
    if kind == "message_age" && quota.limit_time.is_none() {
        return Err(bad("a message_age quota needs limitTime (seconds)"));
    }
    if kind == "destination_storage" && quota.limit_size.or(quota.limit).is_none() {
        return Err(bad("a destination_storage quota needs limitSize (bytes)"));
    }
    update(&s, &t, &ns, move |p| {
        p.backlog_quota_map.insert(kind, quota);
    })
    .await
}

async fn remove_backlog_quota(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    Query(q): Query<QuotaQuery>,
) -> ApiResult<Response> {
    let kind = quota_type(&q)?;
    update(&s, &t, &ns, move |p| {
        p.backlog_quota_map.remove(&kind);
    })
    .await
}

fn parse_actions(body: &Bytes) -> ApiResult<BTreeSet<String>> {
    let actions: BTreeSet<String> =
        serde_json::from_slice(body).map_err(|e| bad(format!("actions: {e}")))?;
    if let Some(a) = actions.iter().find(|a| !AUTH_ACTIONS.contains(&a.as_str())) {
        return Err(bad(format!(
            "unknown action {a:?}: expected some of {}",
            AUTH_ACTIONS.join(", ")
        )));
    }
    Ok(actions)
}

async fn get_permissions(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!(
        policies(&s, &t, &ns)?.auth_policies.namespace_auth
    )))
}

async fn grant_permission(
    State(s): State<Svc>,
    Path((t, ns, role)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let actions = parse_actions(&body)?;
    update(&s, &t, &ns, move |p| {
        p.auth_policies.namespace_auth.insert(role, actions);
    })
    .await
}

async fn revoke_permission(
    State(s): State<Svc>,
    Path((t, ns, role)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    update(&s, &t, &ns, move |p| {
        p.auth_policies.namespace_auth.remove(&role);
    })
    .await
}

async fn get_subscription_permissions(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!(
        policies(&s, &t, &ns)?.auth_policies.subscription_auth_roles
    )))
}

async fn grant_subscription_permission(
    State(s): State<Svc>,
    Path((t, ns, sub)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let roles: BTreeSet<String> =
        serde_json::from_slice(&body).map_err(|e| bad(format!("roles: {e}")))?;
    update(&s, &t, &ns, move |p| {
        p.auth_policies.subscription_auth_roles.insert(sub, roles);
    })
    .await
}

async fn revoke_subscription_permission(
    State(s): State<Svc>,
    Path((t, ns, sub, role)): Path<(String, String, String, String)>,
) -> ApiResult<Response> {
    update(&s, &t, &ns, move |p| {
        if let Some(roles) = p.auth_policies.subscription_auth_roles.get_mut(&sub) {
            roles.remove(&role);
        }
    })
    .await
}

async fn get_topic_permissions(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    let p = policies(&s, &t, &ns)?;
    // A topic's permissions: the namespace's, plus those granted on the topic.
    let mut all = p.auth_policies.namespace_auth.clone();
    if let Some(own) = p.auth_policies.destination_auth.get(&name.to_string()) {
        for (role, actions) in own {
            all.entry(role.clone())
                .or_default()
                .extend(actions.iter().cloned());
        }
    }
    Ok(axum::Json(json!(all)))
}

async fn grant_topic_permission(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, role)): Path<(String, String, String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?.to_string();
    let actions = parse_actions(&body)?;
    update(&s, &t, &ns, move |p| {
        p.auth_policies
            .destination_auth
            .entry(name)
            .or_default()
            .insert(role, actions);
    })
    .await
}

async fn revoke_topic_permission(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, role)): Path<(String, String, String, String, String)>,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?.to_string();
    let p = policies(&s, &t, &ns)?;
    if !p
        .auth_policies
        .destination_auth
        .get(&name)
        .is_some_and(|m| m.contains_key(&role))
    {
        return Err(ApiError(
            412,
            format!("role {role} has no permission granted on {name}"),
        ));
    }
    update(&s, &t, &ns, move |p| {
        if let Some(m) = p.auth_policies.destination_auth.get_mut(&name) {
            m.remove(&role);
            if m.is_empty() {
                p.auth_policies.destination_auth.remove(&name);
            }
        }
    })
    .await
}

async fn bundles(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!(s.bundles(&format!("{t}/{ns}"))?)))
}

async fn unload_namespace(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<Response> {
    s.unload_namespace(&format!("{t}/{ns}"), None).await?;
    Ok(no_content())
}

async fn unload_bundle(
    State(s): State<Svc>,
    Path((t, ns, bundle)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    s.unload_namespace(&format!("{t}/{ns}"), Some(&bundle))
        .await?;
    Ok(no_content())
}

async fn split_bundle(
    State(s): State<Svc>,
    Path((t, ns, bundle)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    s.split_bundle(&format!("{t}/{ns}"), &bundle).await?;
    Ok(no_content())
}

async fn topic_bundle(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<String> {
    Ok(s.bundle_of(&topic_name(&domain, &t, &ns, &topic)?)?)
}

// --- topics -------------------------------------------------------------------

fn topic_name(domain: &str, t: &str, ns: &str, topic: &str) -> ApiResult<TopicName> {
    if !matches!(domain, "persistent" | "non-persistent") {
        return Err(ApiError(404, format!("unknown domain {domain}")));
    }
    TopicName::parse(&format!("{domain}://{t}/{ns}/{topic}")).map_err(|e| bad(e.to_string()))
}

async fn domain_topics(
    State(s): State<Svc>,
    Path((domain, t, ns)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<Vec<String>>> {
    let name = format!("{t}/{ns}");
    if !s.namespace_exists(&name) {
        return Err(ApiError(404, format!("namespace {name} does not exist")));
    }
    let persistent = domain == "persistent";
    Ok(axum::Json(
        s.topics_of_namespace(&name, persistent, !persistent)
            .await?,
    ))
}

async fn partitioned_topics(
    State(s): State<Svc>,
    Path((_domain, t, ns)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<Vec<String>>> {
    Ok(axum::Json(s.partitioned_topics_of(&format!("{t}/{ns}"))))
}

async fn create_topic(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    if s.partitioned_metadata(&name, false).await? > 0 || s.loaded_topic(&name).is_some() {
        return Err(ApiError(409, format!("topic {name} already exists")));
    }
    s.topic(&name, true).await?;
    Ok(no_content())
}

#[derive(Deserialize)]
struct ForceQuery {
    force: Option<bool>,
}

async fn delete_topic(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
    Query(q): Query<ForceQuery>,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    s.delete_topic(&name, q.force.unwrap_or(false)).await?;
    Ok(no_content())
}

async fn delete_partitioned(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
    Query(q): Query<ForceQuery>,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    s.delete_partitioned(&name, q.force.unwrap_or(false))
        .await?;
    Ok(no_content())
}

fn message_id_json(p: Option<strobe_model::Position>, partition: i32) -> Value {
    match p {
        Some(p) => {
            json!({ "ledgerId": p.ledger_id, "entryId": p.entry_id, "partitionIndex": partition })
        }
        None => json!({ "ledgerId": -1, "entryId": -1, "partitionIndex": partition }),
    }
}

async fn terminate(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    if s.partitioned_metadata(&name, false).await? > 0 {
        return Err(ApiError(
            405,
            format!("{name} is a partitioned topic: terminate it through terminate/partitions"),
        ));
    }
    let last = s.terminate(&name).await?;
    Ok(axum::Json(message_id_json(last, -1)))
}

async fn terminate_partitioned(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    let n = s.partitioned_metadata(&name, false).await?;
    if n == 0 {
        return Err(ApiError(404, format!("{name} is not a partitioned topic")));
    }
    let mut out = serde_json::Map::new();
    for i in 0..n {
        let last = s.terminate(&name.partition_name(i)).await?;
        out.insert(i.to_string(), message_id_json(last, i as i32));
    }
    Ok(axum::Json(Value::Object(out)))
}

/// The topics a request is about: the partitions of a partitioned topic, or itself.
async fn topic_or_partitions(s: &Svc, name: &TopicName) -> ApiResult<Vec<TopicName>> {
    let n = s.partitioned_metadata(name, false).await?;
    Ok(if n == 0 {
        vec![name.clone()]
    } else {
        (0..n).map(|i| name.partition_name(i)).collect()
    })
}

async fn compact(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    for p in topic_or_partitions(&s, &name).await? {
        s.compact(&p).await?;
    }
    Ok(no_content())
}

/// Pulsar's `LongRunningProcessStatus`: NOT_RUN, RUNNING, SUCCESS or ERROR.
async fn compaction_status(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    let mut status = "SUCCESS";
    let mut last_error = String::new();
    let mut any = false;
    for p in topic_or_partitions(&s, &name).await? {
        let (st, err) = s.compaction_status(&p).await?;
        any = true;
        let rank = |x: &str| match x {
            "ERROR" => 3,
            "RUNNING" => 2,
            "NOT_RUN" => 1,
            _ => 0,
        };
        if rank(&st) > rank(status) {
            status = match st.as_str() {
                "ERROR" => "ERROR",
                "RUNNING" => "RUNNING",
                _ => "NOT_RUN",
            };
        }
        if let Some(e) = err {
            last_error = e;
        }
    }
    if !any {
        status = "NOT_RUN";
    }
    Ok(axum::Json(
        json!({ "status": status, "lastError": last_error }),
    ))
}

async fn get_partitions(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> ApiResult<axum::Json<Value>> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    let create = q.get("checkAllowAutoCreation").is_some_and(|v| v == "true");
    let n = s.partitioned_metadata(&name, create).await?;
    Ok(axum::Json(json!({ "partitions": n })))
}

async fn create_partitions(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    let n: u32 = parse_scalar(&body, "partitions")?;
    if n == 0 {
        return Err(bad("the number of partitions must be at least 1"));
    }
    s.create_partitioned(&name, n).await.map_err(|e| match e {
        BrokerError::NotAllowed(m) if m.contains("already exists") => ApiError(409, m),
        other => other.into(),
    })?;
    Ok(no_content())
}

async fn update_partitions(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    let n: u32 = parse_scalar(&body, "partitions")?;
    s.update_partitions(&name, n).await?;
    Ok(no_content())
}

async fn topic_stats(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    let topic = s.topic(&name, false).await?;
    Ok(axum::Json(stats_json(&topic).await))
}

async fn stats_json(topic: &Arc<Topic>) -> Value {
    let ls = topic.ledger.stats();
    let c = &topic.counters;
    let mut subs = serde_json::Map::new();
    for name in topic.all_subscription_names() {
        let Ok(h) = topic.subscription_for_admin(&name).await else {
            continue;
        };
        let info = match h.admin(AdminOp::Info).await {
            Ok(AdminReply::Info(i)) => i,
            _ => continue,
        };
        let consumers: Vec<Value> = info
            .consumers
            .iter()
            .map(|c| {
                let mut v = json!({
                    "consumerName": c.name,
                    "availablePermits": c.permits,
                    "unackedMessages": c.unacked_messages,
                });
                if info.sub_type == Some(strobe_model::SubType::KeyShared) {
                    v["keyHashRanges"] = json!(
                        c.key_hash_ranges
                            .iter()
                            .map(|(a, b)| format!("[{a}, {b}]"))
                            .collect::<Vec<_>>()
                    );
                    v["assignedBuckets"] = json!(c.buckets);
                    v["drainingHashesCount"] = json!(c.draining_hashes.len());
                    v["drainingHashesClearedTotal"] = json!(c.draining_hashes_cleared_total);
                    v["drainingHashesUnackedMessages"] = json!(
                        c.draining_hashes
                            .iter()
                            .map(|d| u64::from(d.1))
                            .sum::<u64>()
                    );
                    v["drainingHashes"] = json!(c
                        .draining_hashes
                        .iter()
                        .map(|(h, n, b)| json!({ "hash": h, "unackMsgs": n, "blockedAttempts": b }))
                        .collect::<Vec<_>>());
                    v["waitingForHashes"] = json!(
                        c.waiting_for
                            .iter()
                            .map(|(h, owner)| json!({ "hash": h, "drainingAt": owner }))
                            .collect::<Vec<_>>()
                    );
                }
                v
            })
            .collect();
        subs.insert(
            name.clone(),
            json!({
                "msgBacklog": info.backlog,
                "type": info.sub_type.map(|t| t.as_str()),
                "isDurable": h.durable,
                "consumers": consumers,
            }),
        );
    }
    let rates = *c.rates.lock();
    json!({
        "msgRateIn": rates.msg_in,
        "msgThroughputIn": rates.bytes_in,
        "msgRateOut": rates.msg_out,
        "msgThroughputOut": rates.bytes_out,
        "backlogSize": topic.backlog_bytes(),
        "msgInCounter": c.msg_in.load(Relaxed),
        "bytesInCounter": c.bytes_in.load(Relaxed),
        "msgOutCounter": c.msg_out.load(Relaxed),
        "bytesOutCounter": c.bytes_out.load(Relaxed),
        "storageSize": ls.bytes,
        "entries": ls.entries,
        "ledgers": ls.ledgers,
        "publishers": topic.producer_names().into_iter().map(|n| json!({ "producerName": n })).collect::<Vec<_>>(),
        "subscriptions": subs,
    })
}

async fn partitioned_stats(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    let n = s.partitioned_metadata(&name, false).await?;
    if n == 0 {
        return Err(ApiError(404, format!("{name} is not a partitioned topic")));
    }
    let mut partitions = serde_json::Map::new();
    let (mut msg_in, mut storage) = (0u64, 0u64);
    for i in 0..n {
        let p = name.partition_name(i);
        let st = stats_json(&s.topic(&p, true).await?).await;
        msg_in += st["msgInCounter"].as_u64().unwrap_or(0);
        storage += st["storageSize"].as_u64().unwrap_or(0);
        partitions.insert(p.to_string(), st);
    }
    Ok(axum::Json(json!({
        "metadata": { "partitions": n },
        "msgInCounter": msg_in,
        "storageSize": storage,
        "partitions": partitions,
    })))
}

async fn internal_stats(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    let topic = s.topic(&name, false).await?;
    let ls = topic.ledger.stats();
    let mut cursors = serde_json::Map::new();
    for sub in topic.all_subscription_names() {
        if let Ok(h) = topic.subscription_for_admin(&sub).await {
            let md = h.cursor.mark_delete_position();
            cursors.insert(
                sub,
                json!({
                    "markDeletePosition": md.map(|p| p.to_string()),
                    "readPosition": h.cursor.read_position().to_string(),
                    "messagesConsumedCounter": Value::Null,
                    "numberOfEntriesSinceFirstNotAckedMessage": h.cursor.backlog(),
                    "individuallyDeletedMessages": h.cursor.individually_deleted().iter()
                        .map(|(a, b)| format!("({a}..{b}]")).collect::<Vec<_>>(),
                }),
            );
        }
    }
    Ok(axum::Json(json!({
        "entriesAddedCounter": ls.entries,
        "numberOfEntries": ls.entries,
        "totalSize": ls.bytes,
        "currentLedgerEntries": Value::Null,
        "lastConfirmedEntry": ls.last_confirmed.map(|p| p.to_string()),
        "state": if topic.terminated().is_some() { "Terminated" } else { "LedgerOpened" },
        "ledgers": topic.ledger.ledger_ids().iter().map(|id| json!({ "ledgerId": id })).collect::<Vec<_>>(),
        "cursors": cursors,
    })))
}

async fn unload(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<Response> {
    s.unload(&topic_name(&domain, &t, &ns, &topic)?).await?;
    Ok(no_content())
}

async fn subscriptions(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<axum::Json<Vec<String>>> {
    let topic = s
        .topic(&topic_name(&domain, &t, &ns, &topic)?, false)
        .await?;
    Ok(axum::Json(topic.all_subscription_names()))
}

/// Pulsar's `ResetCursorData` / `MessageIdImpl` JSON.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct MessageIdJson {
    ledger_id: Option<i64>,
    entry_id: Option<i64>,
    batch_index: Option<i32>,
}

impl MessageIdJson {
    fn position(&self) -> Option<strobe_model::Position> {
        match (self.ledger_id, self.entry_id) {
            (Some(l), Some(e)) if l >= 0 && e >= 0 => {
                Some(strobe_model::Position::new(l as u64, e as u64))
            }
            _ => None,
        }
    }
}

async fn create_subscription(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub)): Path<(String, String, String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let topic = s
        .topic(&topic_name(&domain, &t, &ns, &topic)?, true)
        .await?;
    let id: MessageIdJson = parse_json(&body)?;
    topic.create_subscription(&sub, id.position()).await?;
    Ok(no_content())
}

async fn delete_subscription(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub)): Path<(String, String, String, String, String)>,
) -> ApiResult<Response> {
    let topic = s
        .topic(&topic_name(&domain, &t, &ns, &topic)?, false)
        .await?;
    topic.subscription_for_admin(&sub).await?.delete().await?;
    Ok(no_content())
}

async fn sub_op(
    s: &Svc,
    (domain, t, ns, topic, sub): (String, String, String, String, String),
    op: AdminOp,
) -> ApiResult<AdminReply> {
    let topic = s
        .topic(&topic_name(&domain, &t, &ns, &topic)?, false)
        .await?;
    Ok(topic.subscription_for_admin(&sub).await?.admin(op).await?)
}

async fn skip(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub, n)): Path<(String, String, String, String, String, u64)>,
) -> ApiResult<Response> {
    sub_op(&s, (domain, t, ns, topic, sub), AdminOp::Skip(n)).await?;
    Ok(no_content())
}

async fn reset_by_time(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub, time)): Path<(String, String, String, String, String, u64)>,
) -> ApiResult<Response> {
    sub_op(
        &s,
        (domain, t, ns, topic, sub),
        AdminOp::Reset(SeekTarget::PublishTime(time)),
    )
    .await?;
    Ok(no_content())
}

async fn reset_by_id(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub)): Path<(String, String, String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let id: MessageIdJson = parse_json(&body)?;
    let p = id
        .position()
        .ok_or_else(|| bad("resetcursor needs {\"ledgerId\": L, \"entryId\": E}"))?;
    let start = StartPosition {
        ledger_id: p.ledger_id,
        entry_id: p.entry_id,
        batch_index: id.batch_index.unwrap_or(-1),
    };
    sub_op(
        &s,
        (domain, t, ns, topic, sub),
        AdminOp::Reset(SeekTarget::Message(start)),
    )
    .await?;
    Ok(no_content())
}

async fn expire(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub, secs)): Path<(String, String, String, String, String, u64)>,
) -> ApiResult<Response> {
    sub_op(
        &s,
        (domain, t, ns, topic, sub),
        AdminOp::ExpireOlderThan(secs),
    )
    .await?;
    Ok(no_content())
}

/// Pulsar's peek: the message's payload as the body, its metadata in headers.
async fn peek(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub, n)): Path<(String, String, String, String, String, u64)>,
) -> ApiResult<Response> {
    let entry = match sub_op(&s, (domain, t, ns, topic, sub), AdminOp::Peek(n)).await? {
        AdminReply::Peeked(Some(e)) => e,
        _ => return Err(ApiError(404, format!("no message at position {n}"))),
    };
    let parsed =
        strobe_wire::payload::parse(&entry.data).map_err(|e| ApiError(500, e.to_string()))?;
    let m = &parsed.metadata;
    let mut resp = Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(
            "X-Pulsar-Message-ID",
            format!("{}:{}", entry.position.ledger_id, entry.position.entry_id),
        )
        .header("X-Pulsar-publish-time", m.publish_time.to_string())
        .header("X-Pulsar-producer-name", m.producer_name.clone())
        .header("X-Pulsar-sequence-id", m.sequence_id.to_string());
    if let Some(n) = m.num_messages_in_batch {
        resp = resp.header("X-Pulsar-num-batch-message", n.to_string());
    }
    if let Some(k) = &m.partition_key {
        resp = resp.header("X-Pulsar-partition-key", k.clone());
    }
    for kv in &m.properties {
        if let Ok(v) = axum::http::HeaderValue::from_str(&kv.value) {
            resp = resp.header(format!("X-Pulsar-PROPERTY-{}", kv.key), v);
        }
    }
    resp.body(axum::body::Body::from(parsed.payload))
        .map_err(|e| ApiError(500, e.to_string()))
}

async fn lookup(
    State(s): State<Svc>,
    Path((domain, t, ns, topic)): Path<(String, String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    if !s.namespace_exists(name.namespace()) {
        return Err(ApiError(
            404,
            format!("namespace {} does not exist", name.namespace()),
        ));
    }
    Ok(axum::Json(json!({
        "brokerUrl": s.service_url(),
        "httpUrl": format!("http://{}:{}", s.config.advertised_address, s.config.http_port),
        "nativeUrl": s.service_url(),
        "brokerUrlTls": s.service_url_tls().unwrap_or_default(),
        "httpUrlTls": if s.config.http_port_tls != 0 {
            format!("https://{}:{}", s.config.advertised_address, s.config.http_port_tls)
        } else {
            String::new()
        },
    })))
}

// --- schemas ------------------------------------------------------------------

fn schema_topic(t: &str, ns: &str, topic: &str) -> ApiResult<TopicName> {
    topic_name("persistent", t, ns, topic)
}

/// Pulsar's `GetSchemaResponse` JSON: the definition as text (KeyValue as
/// `{"key": ..., "value": ...}`).
fn schema_json(v: strobe_schema::SchemaVersion, s: &strobe_schema::SchemaData, ts: u64) -> Value {
    let data = if s.schema_type == strobe_schema::SchemaType::KeyValue {
        strobe_schema::key_value::key_value_data_to_rest_json(s).unwrap_or_else(|_| s.data_text())
    } else {
        s.data_text()
    };
    json!({
        "version": v.0,
        "type": s.schema_type.name(),
        "timestamp": ts,
        "data": data,
        "properties": s.properties,
    })
}

/// Pulsar's `PostSchemaPayload`: `{"type": "AVRO", "schema": "...", "properties": {}}`.
#[derive(Deserialize)]
struct PostSchemaPayload {
    #[serde(rename = "type")]
    schema_type: String,
    #[serde(default)]
    schema: String,
    #[serde(default)]
    properties: std::collections::BTreeMap<String, String>,
}

fn payload_schema(body: &Bytes) -> ApiResult<strobe_schema::SchemaData> {
    let p: PostSchemaPayload =
        serde_json::from_slice(body).map_err(|e| bad(format!("schema payload: {e}")))?;
    let t = strobe_schema::SchemaType::from_name(&p.schema_type).map_err(|e| bad(e.to_string()))?;
    let data = if t == strobe_schema::SchemaType::KeyValue {
        strobe_schema::key_value::key_value_data_from_rest_json(&p.schema)
            .map_err(|e| bad(e.to_string()))?
    } else {
        p.schema.into_bytes()
    };
    Ok(strobe_schema::SchemaData::new(t, data).with_properties(p.properties))
}

async fn get_schema(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let (v, sd, ts) = s
        .schemas
        .get_schema(&schema_topic(&t, &ns, &topic)?, None)
        .await?;
    Ok(axum::Json(schema_json(v, &sd, ts)))
}

async fn get_schema_version(
    State(s): State<Svc>,
    Path((t, ns, topic, version)): Path<(String, String, String, i64)>,
) -> ApiResult<axum::Json<Value>> {
    let (v, sd, ts) = s
        .schemas
        .get_schema(
            &schema_topic(&t, &ns, &topic)?,
            Some(strobe_schema::SchemaVersion(version)),
        )
        .await?;
    Ok(axum::Json(schema_json(v, &sd, ts)))
}

async fn get_all_schemas(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let all = s
        .schemas
        .all_schemas(&schema_topic(&t, &ns, &topic)?)
        .await?;
    Ok(axum::Json(json!({
        "getSchemaResponses": all.iter().map(|(v, sd, ts)| schema_json(*v, sd, *ts)).collect::<Vec<_>>(),
    })))
}

async fn post_schema(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<axum::Json<Value>> {
    let schema = payload_schema(&body)?;
    let v = s
        .schemas
        .post_schema(&schema_topic(&t, &ns, &topic)?, &schema)
        .await?;
    Ok(axum::Json(json!({ "version": v.0 })))
}

async fn delete_schema(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
    Query(q): Query<ForceQuery>,
) -> ApiResult<axum::Json<Value>> {
    let v = s
        .schemas
        .delete_schema(&schema_topic(&t, &ns, &topic)?, q.force.unwrap_or(false))
        .await?;
    Ok(axum::Json(json!({ "version": v })))
}

async fn test_schema(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<axum::Json<Value>> {
    let schema = payload_schema(&body)?;
    let (ok, strategy) = s
        .schemas
        .test_schema(&schema_topic(&t, &ns, &topic)?, &schema)
        .await?;
    Ok(axum::Json(json!({
        "isCompatibility": ok,
        "schemaCompatibilityStrategy": strategy.name(),
    })))
}

async fn schema_version_of(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<axum::Json<Value>> {
    let schema = payload_schema(&body)?;
    let all = s
        .schemas
        .all_schemas(&schema_topic(&t, &ns, &topic)?)
        .await?;
    let v = all
        .iter()
        .find(|(_, sd, _)| sd.same_hash(&schema))
        .map(|(v, _, _)| v.0)
        .ok_or_else(|| ApiError(404, "no version of the topic's schema matches".into()))?;
    Ok(axum::Json(json!({ "version": v })))
}

// --- metrics ------------------------------------------------------------------

async fn metrics(State(s): State<Svc>) -> Response {
    let mut out = String::new();
    let cluster = &s.config.cluster_name;
    let families: [(&str, &str, &str); 10] = [
        (
            "pulsar_in_messages_total",
            "counter",
            "Messages published to the topic",
        ),
        (
            "pulsar_in_bytes_total",
            "counter",
            "Bytes published to the topic",
        ),
        (
            "pulsar_out_messages_total",
            "counter",
            "Messages dispatched from the topic",
        ),
        (
            "pulsar_out_bytes_total",
            "counter",
            "Bytes dispatched from the topic",
        ),
        (
            "pulsar_storage_read_entries_total",
            "counter",
            "Entries read from storage by the topic's dispatchers (Pulsar exposes the rate as pulsar_storage_read_rate)",
        ),
        ("pulsar_storage_size", "gauge", "Bytes stored for the topic"),
        (
            "pulsar_storage_entries",
            "gauge",
            "Entries stored for the topic",
        ),
        (
            "pulsar_subscriptions_count",
            "gauge",
            "Subscriptions of the topic",
        ),
        (
            "pulsar_producers_count",
            "gauge",
            "Producers connected to the topic",
        ),
        (
            "pulsar_msg_backlog",
            "gauge",
            "Entries not yet acknowledged, summed over subscriptions",
        ),
    ];
    let topics = s.loaded_topics();
    for (name, kind, help) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for t in &topics {
            let ls = t.ledger.stats();
            let subs = t.subscriptions();
            let v = match name {
                "pulsar_in_messages_total" => t.counters.msg_in.load(Relaxed),
                "pulsar_in_bytes_total" => t.counters.bytes_in.load(Relaxed),
                "pulsar_out_messages_total" => t.counters.msg_out.load(Relaxed),
                "pulsar_out_bytes_total" => t.counters.bytes_out.load(Relaxed),
                "pulsar_storage_read_entries_total" => t.counters.entries_read.load(Relaxed),
                "pulsar_storage_size" => ls.bytes,
                "pulsar_storage_entries" => ls.entries,
                "pulsar_subscriptions_count" => subs.len() as u64,
                "pulsar_producers_count" => t.producer_names().len() as u64,
                _ => subs.iter().map(|s| s.cursor.backlog()).sum(),
            };
            let _ = writeln!(
                out,
                "{name}{{cluster=\"{cluster}\",namespace=\"{}\",topic=\"{}\"}} {v}",
                t.name.namespace(),
                t.name
            );
        }
    }
    let rates: [(&str, &str); 4] = [
        (
            "pulsar_rate_in",
            "Messages per second published to the topic",
        ),
        (
            "pulsar_rate_out",
            "Messages per second dispatched from the topic",
        ),
        (
            "pulsar_throughput_in",
            "Bytes per second published to the topic",
        ),
        (
            "pulsar_throughput_out",
            "Bytes per second dispatched from the topic",
        ),
    ];
    for (name, help) in rates {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for t in &topics {
            let r = *t.counters.rates.lock();
            let v = match name {
                "pulsar_rate_in" => r.msg_in,
                "pulsar_rate_out" => r.msg_out,
                "pulsar_throughput_in" => r.bytes_in,
                _ => r.bytes_out,
            };
            let _ = writeln!(
                out,
                "{name}{{cluster=\"{cluster}\",namespace=\"{}\",topic=\"{}\"}} {v:.3}",
                t.name.namespace(),
                t.name
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP pulsar_storage_backlog_size Estimated bytes not yet acknowledged by the slowest subscription\n# TYPE pulsar_storage_backlog_size gauge"
    );
    for t in &topics {
        let _ = writeln!(
            out,
            "pulsar_storage_backlog_size{{cluster=\"{cluster}\",namespace=\"{}\",topic=\"{}\"}} {}",
            t.name.namespace(),
            t.name,
            t.backlog_bytes()
        );
    }
    storage_latency_metrics(&mut out, cluster, &topics);
    if let Some(st) = s.storage_engine_stats() {
        let families = [
            (
                "strobe_storage_group_commits_total",
                "Group commits written to the journal",
                st.batches,
            ),
            (
                "strobe_storage_journal_fsyncs_total",
                "fdatasync calls on the journal",
                st.syncs,
            ),
            (
                "strobe_storage_entries_written_total",
                "Entries written, through the journal or once, straight to their segment",
                st.entries,
            ),
            (
                "strobe_storage_journal_bytes_total",
                "Bytes written to the journal",
                st.journal_bytes,
            ),
            (
                "strobe_storage_write_once_entries_total",
                "Entries of large group commits written once, straight to their segment",
                st.direct_entries,
            ),
            (
                "strobe_storage_write_once_bytes_total",
                "Segment bytes written that way",
                st.direct_bytes,
            ),
            (
                "strobe_storage_segment_fsyncs_total",
                "fdatasync calls on segments for write-once group commits",
                st.segment_syncs,
            ),
            (
                "strobe_storage_checkpoints_total",
                "Checkpoints completed (segments synced, journal files recycled)",
                st.checkpoints,
            ),
            (
                "strobe_storage_page_cache_dropped_bytes_total",
                "Segment bytes dropped from the page cache behind the page-cache window",
                st.page_cache_dropped_bytes,
            ),
            (
                "strobe_storage_sync_interval_raises_total",
                "Times a stalled journal fdatasync raised the interval kept between syncs",
                st.sync_interval_raises,
            ),
        ];
        storage_engine_metrics(&mut out, cluster, &families);
        for (name, v) in st.named_journal_sync_buckets("strobe_storage_journal_fsync_latency") {
            let _ = writeln!(
                out,
                "# HELP {name} Journal fdatasyncs whose duration fell in this bucket (ms)\n# TYPE {name} counter\n{name}{{cluster=\"{cluster}\"}} {v}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP strobe_storage_journal_fsync_latency_sum Total duration of the journal fdatasyncs (ms)\n# TYPE strobe_storage_journal_fsync_latency_sum counter\nstrobe_storage_journal_fsync_latency_sum{{cluster=\"{cluster}\"}} {:.3}",
            st.journal_sync_micros as f64 / 1000.0
        );
        let _ = writeln!(
            out,
            "# HELP strobe_storage_sync_interval_us Interval now kept between journal fdatasyncs (sync = always)\n# TYPE strobe_storage_sync_interval_us gauge\nstrobe_storage_sync_interval_us{{cluster=\"{cluster}\"}} {}",
            st.sync_interval_us
        );
    }
    let _ = writeln!(
        out,
        "# HELP pulsar_topics_count Topics loaded on this broker\n# TYPE pulsar_topics_count gauge"
    );
    let _ = writeln!(
        out,
        "pulsar_topics_count{{cluster=\"{cluster}\"}} {}",
        topics.len()
    );
    process_metrics(&mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// The file backend's own counters (Pulsar has no such family: its
/// BookKeeper bookies export their journal's figures themselves). They tell
/// how many entries one fsync covers (`entries / journal_fsyncs`), how much
/// goes straight to segments, and what checkpoints cost.
fn storage_engine_metrics(out: &mut String, cluster: &str, families: &[(&str, &str, u64)]) {
    for (name, help, v) in families {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{cluster=\"{cluster}\"}} {v}"
        );
    }
}

/// Pulsar's storage write latency buckets (publish to durable), per topic:
/// `pulsar_storage_write_latency_le_0_5` … `_le_1000`, `_overflow`, `_count`
/// and `_sum` (milliseconds).
fn storage_latency_metrics(out: &mut String, cluster: &str, topics: &[Arc<Topic>]) {
    let names = strobe_broker::topic::LatencyBuckets::bucket_names("pulsar_storage_write_latency");
    for (i, name) in names.iter().enumerate() {
        let _ = writeln!(
            out,
            "# HELP {name} Entries whose publish-to-durable latency fell in this bucket\n# TYPE {name} gauge"
        );
        for t in topics {
            let _ = writeln!(
                out,
                "{name}{{cluster=\"{cluster}\",namespace=\"{}\",topic=\"{}\"}} {}",
                t.name.namespace(),
                t.name,
                t.counters.write_latency.buckets[i].load(Relaxed)
            );
        }
    }
    let _ = writeln!(
        out,
        "# TYPE pulsar_storage_write_latency_count gauge\n# TYPE pulsar_storage_write_latency_sum gauge"
    );
    for t in topics {
        let l = &t.counters.write_latency;
        let labels = format!(
            "cluster=\"{cluster}\",namespace=\"{}\",topic=\"{}\"",
            t.name.namespace(),
            t.name
        );
        let _ = writeln!(
            out,
            "pulsar_storage_write_latency_count{{{labels}}} {}\npulsar_storage_write_latency_sum{{{labels}}} {:.3}",
            l.count(),
            l.sum_micros.load(Relaxed) as f64 / 1000.0
        );
    }
}

/// Resident memory and CPU time, read from /proc (Linux).
fn process_metrics(out: &mut String) {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        for line in status.lines() {
            if let Some(kb) = line.strip_prefix("VmRSS:") {
                let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                let _ = writeln!(
                    out,
                    "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {}",
                    kb * 1024
                );
            }
        }
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some(rest) = stat.rsplit(')').next()
    {
        let f: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat (12 and 13 after the command).
        if f.len() > 13 {
            let ticks: u64 = f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
            let _ = writeln!(
                out,
                "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {}",
                ticks as f64 / 100.0
            );
        }
    }
}
