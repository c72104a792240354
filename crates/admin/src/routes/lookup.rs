//! HTTP lookups (Pulsar's `TopicLookup`): the broker that serves a topic, and its bundle.

use crate::*;

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

async fn lookup(State(s): State<Svc>, TopicPath(name): TopicPath) -> ApiResult<axum::Json<Value>> {
    if !s.namespace_exists(name.namespace()) {
        return Err(ApiError(
            404,
            format!("namespace {} does not exist", name.namespace()),
        ));
    }
    let t = s.lookup_target(&name).await?;
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
