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

async fn topic_bundle(State(s): State<Svc>, TopicPath(name): TopicPath) -> ApiResult<String> {
    Ok(s.bundle_of(&name)?)
}
