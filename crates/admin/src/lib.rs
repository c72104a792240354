//! Strobe's HTTP port: the admin API on Pulsar's paths (`/admin/v2/...`, the
//! REST side of Pulsar's `BrokersBase`, `TenantsBase`, `NamespacesBase`,
//! `PersistentTopicsBase`), HTTP lookups (`/lookup/v2/topic/...`, Pulsar's
//! `TopicLookup`), health checks and Prometheus `/metrics`.
//!
//! Handlers only translate HTTP to calls on [`BrokerService`]; every decision
//! stays in the broker. Errors answer with Pulsar's status codes and a JSON
//! body `{"reason": "..."}`, built in one place ([`ApiError`]).
//!
//! Each resource's handlers and paths are in `routes/` (brokers, clusters and
//! tenants, namespaces, topics, subscriptions, schemas, lookup); `metrics`
//! renders `/metrics`; `auth` is the authentication and authorization layer
//! in front of every route.

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
mod metrics;
mod owner;
mod routes;

pub use auth::{PeerInfo, TlsListener};
use metrics::metrics;

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
    let listener = TlsListener::new(listener, strobe_security::acceptor(cfg))?;
    axum::serve(
        listener,
        router(service).into_make_service_with_connect_info::<PeerInfo>(),
    )
    .with_graceful_shutdown(async move { shutdown.cancelled().await })
    .await
}

fn parse_json<T: for<'de> Deserialize<'de> + Default>(body: &Bytes) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| bad(format!("invalid JSON body: {e}")))
}

fn parse_scalar<T: std::str::FromStr>(body: &Bytes, what: &str) -> ApiResult<T> {
    let text = std::str::from_utf8(body).map_err(|_| bad(format!("{what}: body is not UTF-8")))?;
    text.trim()
        .trim_matches('"')
        .parse()
        .map_err(|_| bad(format!("{what}: cannot read {:?}", text.trim())))
}

fn topic_name(domain: &str, t: &str, ns: &str, topic: &str) -> ApiResult<TopicName> {
    if !matches!(domain, "persistent" | "non-persistent") {
        return Err(ApiError(404, format!("unknown domain {domain}")));
    }
    TopicName::parse(&format!("{domain}://{t}/{ns}/{topic}")).map_err(|e| bad(e.to_string()))
}

/// A topic named by the path's `{domain}/{tenant}/{ns}/{topic}` segments:
/// an unknown domain is 404, a bad name 400.
struct TopicPath(TopicName);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for TopicPath {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        let Path((domain, t, ns, topic)) =
            Path::<(String, String, String, String)>::from_request_parts(parts, state)
                .await
                .map_err(IntoResponse::into_response)?;
        topic_name(&domain, &t, &ns, &topic)
            .map(TopicPath)
            .map_err(IntoResponse::into_response)
    }
}

#[derive(Deserialize)]
struct ForceQuery {
    force: Option<bool>,
}

/// Every route of the HTTP port, behind the authentication and
/// authorization layer.
pub fn router(service: Svc) -> Router {
    let mut api = Router::new()
        .route("/metrics", get(metrics))
        .route("/metrics/", get(metrics));
    for routes in [
        routes::brokers::routes(),
        routes::clusters::routes(),
        routes::namespaces::routes(),
        routes::topics::routes(),
        routes::subscriptions::routes(),
        routes::schemas::routes(),
        routes::lookup::routes(),
        routes::transactions::routes(),
    ] {
        api = api.merge(routes);
    }
    // Layers run outside in: authentication first, then the owner redirect.
    api.layer(axum::middleware::from_fn_with_state(
        service.clone(),
        owner::layer,
    ))
    .layer(axum::middleware::from_fn_with_state(
        service.clone(),
        auth::layer,
    ))
    .with_state(service)
}
