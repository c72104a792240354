//! Broker endpoints (Pulsar's `BrokersBase`): health, readiness and liveness.

use crate::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    Router::new()
        .route("/admin/v2/brokers/health", get(health))
        .route("/admin/v2/brokers/ready", get(ok))
        .route("/admin/v2/brokers/live", get(ok))
        .route("/status.html", get(ok))
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
