//! HTTP lookups (Pulsar's `TopicLookup`): the broker that serves a topic, and its bundle.

use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    Router::new()
        .route(
            "/lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}",
            get(lookup),
        )
        .route(
            "/lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}/bundle",
            get(topic_bundle),
        )
}

/// Pulsar's `?listenerName=` (or the `X-Pulsar-ListenerName` header): which
/// advertised listener's URLs the answer carries.
#[derive(Deserialize)]
struct ListenerQuery {
    #[serde(rename = "listenerName")]
    listener_name: Option<String>,
}

async fn lookup(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    Query(q): Query<ListenerQuery>,
    headers: axum::http::HeaderMap,
) -> ApiResult<axum::Json<Value>> {
    let listener = q
        .listener_name
        .or_else(|| {
            headers
                .get("X-Pulsar-ListenerName")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        })
        .filter(|l| !l.is_empty());
    if !s.namespace_exists(name.namespace()) {
        return Err(ApiError(
            404,
            format!("namespace {} does not exist", name.namespace()),
        ));
    }
    let t = s.lookup_target_for(&name, listener.as_deref()).await?;
    // The C++ client wants brokerUrl and one of brokerUrlTls / brokerUrlSsl.
    Ok(axum::Json(json!({
        "brokerUrl": t.service_url,
        "httpUrl": t.http_url,
        "nativeUrl": t.service_url,
        "brokerUrlTls": t.service_url_tls.clone().unwrap_or_default(),
        "brokerUrlSsl": "",
        "httpUrlTls": t.http_url_tls.unwrap_or_default(),
    })))
}

async fn topic_bundle(State(s): State<Svc>, TopicPath(name): TopicPath) -> ApiResult<String> {
    Ok(s.bundle_of(&name)?)
}
