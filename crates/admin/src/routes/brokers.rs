//! Broker endpoints (Pulsar's `BrokersBase`): health, readiness and liveness.

use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    Router::new()
        .route("/admin/v2/brokers/health", get(health))
        .route("/admin/v2/brokers/ready", get(ok))
        .route("/admin/v2/brokers/live", get(ok))
        .route("/status.html", get(ok))
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

/// Health: a metadata write and a storage round trip succeed.
async fn health(State(s): State<Svc>) -> ApiResult<&'static str> {
    s.health_check()
        .await
        .map_err(|e| ApiError(503, format!("unhealthy: {e}")))?;
    Ok("ok")
}
