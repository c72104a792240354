//! Broker endpoints (Pulsar's `BrokersBase`): health, readiness and
//! liveness, the live brokers and what they own, the configuration in
//! force, the version, the backlog quota check.

use std::collections::BTreeMap;

use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    Router::new()
        .route("/admin/v2/brokers/health", get(health))
        .route("/admin/v2/brokers/ready", get(ok))
        .route("/admin/v2/brokers/live", get(ok))
        .route("/status.html", get(ok))
        .route("/admin/v2/brokers", get(local_brokers))
        .route("/admin/v2/brokers/version", get(version))
        .route("/admin/v2/brokers/leaderBroker", get(leader))
        .route(
            "/admin/v2/brokers/backlog-quota-check",
            get(backlog_quota_check),
        )
        .route(
            "/admin/v2/brokers/internal-configuration",
            get(internal_configuration),
        )
        // No setting changes without a restart: no dynamic names, no
        // dynamic values (the refusals are in `unsupported`).
        .route(
            "/admin/v2/brokers/configuration",
            get(|| async { axum::Json(Vec::<String>::new()) }),
        )
        .route(
            "/admin/v2/brokers/configuration/values",
            get(|| async { axum::Json(json!({})) }),
        )
        .route("/admin/v2/brokers/configuration/runtime", get(runtime))
        .route("/admin/v2/brokers/{cluster}", get(active_brokers))
        .route(
            "/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces",
            get(owned_namespaces),
        )
}

/// The live brokers of the cluster (Pulsar: `host:webPort` ids; ours are the
/// configured broker ids). Standalone: this broker.
async fn active_brokers(
    State(s): State<Svc>,
    Path(cluster): Path<String>,
) -> ApiResult<axum::Json<Vec<String>>> {
    if cluster != s.config.cluster_name {
        return Err(ApiError(404, format!("cluster {cluster} does not exist")));
    }
    let mut ids: Vec<String> = match s.cluster() {
        Some(c) => c.live_brokers().into_iter().map(|b| b.broker_id).collect(),
        None => vec![format!(
            "{}:{}",
            s.config.advertised_address, s.config.http_port
        )],
    };
    ids.sort();
    Ok(axum::Json(ids))
}

/// The live brokers of this broker's cluster.
async fn local_brokers(State(s): State<Svc>) -> ApiResult<axum::Json<Vec<String>>> {
    let cluster = s.config.cluster_name.clone();
    active_brokers(State(s), Path(cluster)).await
}

async fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Pulsar's `BrokerInfo` of the load manager's leader: the broker holding
/// the cluster's leadership, or this one standalone.
async fn leader(State(s): State<Svc>) -> ApiResult<axum::Json<Value>> {
    let web = |addr: &str, port: u16| format!("http://{addr}:{port}");
    let (id, url) = match s.cluster() {
        Some(c) => match c.load_manager_leader().await.map_err(BrokerError::from)? {
            Some(b) => (b.broker_id, b.web_service_url),
            None => return Err(ApiError(503, "the cluster has no leader right now".into())),
        },
        None => (
            format!("{}:{}", s.config.advertised_address, s.config.http_port),
            web(&s.config.advertised_address, s.config.http_port),
        ),
    };
    Ok(axum::Json(json!({ "brokerId": id, "serviceUrl": url })))
}

async fn backlog_quota_check(State(s): State<Svc>) -> Response {
    s.check_backlog_quotas().await;
    no_content()
}

/// Pulsar's `InternalConfigurationData`: where the metadata lives.
async fn internal_configuration(State(s): State<Svc>) -> axum::Json<Value> {
    let store = if s.config.metadata_store_url.is_empty() {
        format!("file:{}", s.config.data_dir.join("metadata").display())
    } else {
        s.config.metadata_store_url.clone()
    };
    axum::Json(json!({
        "metadataStoreUrl": store,
        "configurationMetadataStoreUrl": store,
        "ledgersRootPath": Value::Null,
        "bookkeeperMetadataServiceUri": Value::Null,
        "stateStorageServiceUrl": Value::Null,
    }))
}

/// Every setting in force, as strings (Pulsar's runtime configuration);
/// secrets are withheld.
async fn runtime(State(s): State<Svc>) -> axum::Json<BTreeMap<String, String>> {
    let Ok(Value::Object(map)) = serde_json::to_value(&s.config) else {
        return axum::Json(BTreeMap::new());
    };
    axum::Json(
        map.into_iter()
            .map(|(k, v)| {
                let secret = [
                    "secret",
                    "password",
                    "private",
                    "token_public_key",
                    "key_file",
                ]
                .iter()
                .any(|w| k.contains(w));
                let text = match v {
                    Value::String(s) if secret && !s.is_empty() => "******".into(),
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                (k, text)
            })
            .collect(),
    )
}

/// The bundles a broker owns, as Pulsar's `{"<ns>/<range>": {...}}` map.
async fn owned_namespaces(
    State(s): State<Svc>,
    Path((cluster, broker)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    if cluster != s.config.cluster_name {
        return Err(ApiError(404, format!("cluster {cluster} does not exist")));
    }
    let Some(c) = s.cluster() else {
        return Ok(axum::Json(json!({})));
    };
    let prefix = format!("{}/", strobe_cluster::OWNERSHIP);
    let mut out = serde_json::Map::new();
    for (path, owner) in c.owners() {
        if owner.broker.broker_id == broker {
            let bundle = path.strip_prefix(&prefix).unwrap_or(&path).to_string();
            out.insert(
                bundle,
                json!({"broker_assignment": "primary", "is_controlled": false, "is_active": true}),
            );
        }
    }
    Ok(axum::Json(Value::Object(out)))
}

/// Liveness and readiness: the HTTP server answers only while the broker runs.
async fn ok() -> &'static str {
    "ok"
}

/// Health: a metadata write and a storage round trip succeed, and the disk takes writes
/// (a read-only broker answers 503 with its disk's usage and its descriptors in use).
async fn health(State(s): State<Svc>) -> ApiResult<&'static str> {
    if let Some(why) = s.disk.read_only() {
        let (ratio, free) = s.disk.usage().unwrap_or((0.0, 0));
        let limit = strobe_broker::accept::files_limit()
            .map(|(soft, _)| soft.to_string())
            .unwrap_or_else(|_| "?".into());
        return Err(ApiError(
            503,
            format!(
                "unhealthy: read-only: {why} (disk {:.1}% used, {free} bytes free; {} of {limit} file descriptors open)",
                ratio * 100.0,
                strobe_broker::accept::open_files()
            ),
        ));
    }
    s.health_check()
        .await
        .map_err(|e| ApiError(503, format!("unhealthy: {e}")))?;
    Ok("ok")
}
