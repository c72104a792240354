//! In a cluster, topic operations reach the topic's owner: a request about a
//! topic whose bundle another broker owns is forwarded to the same path on
//! that broker and its answer passed back, so any HTTP client (curl, urllib
//! with a PUT, `strobe admin`) works against any broker. A request that
//! cannot be forwarded as it is, because the owner is only reachable over
//! HTTPS or the caller proved its identity with a TLS client certificate
//! (which a forward cannot carry), is answered with HTTP 307 to the owner, as
//! Pulsar's web service does. A forwarded request is never forwarded again.
//! Metadata-only requests (partitioned topics' partition counts) and topics
//! nobody owns yet are served where they arrive.

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use strobe_model::TopicName;

use crate::api::{ApiError, Svc};
use crate::auth::PeerInfo;

/// Marks a request one broker forwarded to another.
const FORWARDED: &str = "x-strobe-forwarded-by";

fn client() -> &'static Client<HttpConnector, Body> {
    static CLIENT: OnceLock<Client<HttpConnector, Body>> = OnceLock::new();
    CLIENT.get_or_init(|| Client::builder(TokioExecutor::new()).build_http())
}

/// The topic a path is about: `/admin/v2/{domain}/{tenant}/{ns}/{topic}/...`,
/// or a segment's `/admin/v2/segments/{tenant}/{ns}/{topic}/{descriptor}/...`.
fn topic_of(path: &str) -> Option<TopicName> {
    let rest = path.strip_prefix("/admin/v2/")?;
    let mut parts = rest.split('/');
    let domain = parts.next()?;
    if domain == "segments" {
        let (tenant, ns, topic, d) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let topic = decode_component(topic)?;
        return crate::routes::segments::segment_name(tenant, ns, &topic, d).ok();
    }
    if domain != "persistent" && domain != "non-persistent" {
        return None;
    }
    let (tenant, ns, topic) = (parts.next()?, parts.next()?, parts.next()?);
    if topic.is_empty() || parts.next() == Some("partitions") {
        return None;
    }
    TopicName::parse(&format!("{domain}://{tenant}/{ns}/{topic}")).ok()
}

/// The bundle a path is about: `/admin/v2/namespaces/{tenant}/{ns}/{bundle}/unload`
/// or `…/split` (its owner does both).
fn bundle_of(path: &str) -> Option<(String, String)> {
    let rest = path.strip_prefix("/admin/v2/namespaces/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [t, ns, bundle, "unload" | "split"] if bundle.starts_with("0x") => {
            Some((format!("{t}/{ns}"), (*bundle).to_string()))
        }
        _ => None,
    }
}

/// A path segment's percent-encoding undone (`None`: not UTF-8).
fn decode_component(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The scalable topic a write is about: any method but GET on
/// `/admin/v2/scalable/{tenant}/{ns}/{topic}/...` other than its creation
/// (which any broker does: the layout is a metadata document).
fn scalable_write_of(method: &axum::http::Method, path: &str) -> Option<TopicName> {
    if method == axum::http::Method::GET {
        return None;
    }
    let rest = path.strip_prefix("/admin/v2/scalable/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    // Creation and migration make the topic: it has no controller yet.
    if parts.len() < 3
        || (parts.len() == 3 && method == axum::http::Method::PUT)
        || (parts.len() == 4 && parts[3] == "migrate")
    {
        return None;
    }
    let topic = decode_component(parts[2])?;
    TopicName::parse(&format!("topic://{}/{}/{topic}", parts[0], parts[1])).ok()
}

/// The layer: a request about another broker's topic or bundle goes there,
/// and a write to a scalable topic goes to the broker leading its controller.
pub(crate) async fn layer(State(s): State<Svc>, req: Request, next: Next) -> Response {
    let Some(cluster) = s.cluster() else {
        return next.run(req).await;
    };
    if let Some(topic) = scalable_write_of(req.method(), req.uri().path()) {
        use strobe_broker::service::controllers::ControllerAt;
        return match s.scalable_controller(&topic).await {
            Ok(ControllerAt::Elsewhere { web_url, .. })
                if !req.headers().contains_key(FORWARDED) =>
            {
                send_to(req, &web_url, &cluster.broker_id()).await
            }
            // Here (or a forwarded request meeting a leadership on the
            // move: the handler answers 503 and the caller retries).
            Ok(_) => next.run(req).await,
            Err(e) => ApiError::from(e).into_response(),
        };
    }
    let path = if let Some((ns, bundle)) = bundle_of(req.uri().path()) {
        strobe_cluster::bundle_path(&ns, &bundle)
    } else {
        let Some(topic) = topic_of(req.uri().path()) else {
            return next.run(req).await;
        };
        // A partitioned topic's own path (not one partition's) is metadata.
        if topic.partition().is_none() && s.resources.partitions(&topic).is_some() {
            return next.run(req).await;
        }
        let Ok(path) = s.bundle_path(&topic) else {
            return next.run(req).await;
        };
        path
    };
    let owner = match cluster.owner_of(&path) {
        Some(o) if o.serving().broker_id != cluster.broker_id() => o.serving().clone(),
        _ => return next.run(req).await,
    };
    if req.headers().contains_key(FORWARDED) {
        // The sender thought this broker owns it; the views disagree for a
        // moment (a bundle moving). Serve it here rather than bounce it.
        return next.run(req).await;
    }
    send_to(req, &owner.web_service_url, &cluster.broker_id()).await
}

/// `req` sent on to the same path at `base` (another broker's web URL):
/// forwarded over plain HTTP, or redirected (307) when it cannot be.
async fn send_to(req: Request, base: &str, me: &str) -> Response {
    let target = format!(
        "{}{}",
        base.trim_end_matches('/'),
        req.uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    );
    let has_cert = req
        .extensions()
        .get::<ConnectInfo<PeerInfo>>()
        .is_some_and(|c| !c.0.certs.is_empty());
    if has_cert || !target.starts_with("http://") {
        return (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, target)]).into_response();
    }
    forward(req, &target, me)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// Sends `req` to `target` and passes the answer back.
async fn forward(mut req: Request, target: &str, me: &str) -> Result<Response, ApiError> {
    let uri: axum::http::Uri = target
        .parse()
        .map_err(|e| ApiError(500, format!("owner URL {target}: {e}")))?;
    if let Some(host) = uri
        .authority()
        .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        req.headers_mut().insert(header::HOST, host);
    }
    req.headers_mut().insert(
        FORWARDED,
        HeaderValue::from_str(me).unwrap_or(HeaderValue::from_static("broker")),
    );
    *req.uri_mut() = uri;
    let answer = tokio::time::timeout(Duration::from_secs(30), client().request(req))
        .await
        .map_err(|_| {
            ApiError(
                504,
                format!("the topic's owner did not answer {target} within 30 s"),
            )
        })?
        .map_err(|e| {
            ApiError(
                503,
                format!("forwarding to the topic's owner at {target}: {e}"),
            )
        })?;
    Ok(answer.map(Body::new))
}

#[cfg(test)]
mod tests {
    use super::topic_of;

    #[test]
    fn bundle_unloads_name_their_bundle() {
        assert_eq!(
            super::bundle_of("/admin/v2/namespaces/t/n/0x00000000_0x40000000/unload"),
            Some(("t/n".to_string(), "0x00000000_0x40000000".to_string()))
        );
        assert_eq!(super::bundle_of("/admin/v2/namespaces/t/n/unload"), None);
        assert_eq!(
            super::bundle_of("/admin/v2/namespaces/t/n/0x0_0x1/split"),
            Some(("t/n".to_string(), "0x0_0x1".to_string()))
        );
        assert_eq!(
            super::bundle_of("/admin/v2/namespaces/t/n/0x0_0x1/other"),
            None
        );
    }

    #[test]
    fn topic_paths_name_their_topic() {
        assert_eq!(
            topic_of("/admin/v2/persistent/t/n/x/stats")
                .unwrap()
                .to_string(),
            "persistent://t/n/x"
        );
        assert_eq!(
            topic_of("/admin/v2/non-persistent/t/n/x")
                .unwrap()
                .to_string(),
            "non-persistent://t/n/x"
        );
        assert!(topic_of("/admin/v2/persistent/t/n").is_none());
        assert!(topic_of("/admin/v2/persistent/t/n/x/partitions").is_none());
        assert!(topic_of("/admin/v2/namespaces/t/n").is_none());
        assert!(topic_of("/lookup/v2/topic/persistent/t/n/x").is_none());
        assert_eq!(
            topic_of("/admin/v2/segments/t/n/a%2Fb/0000-7fff-1/terminate")
                .unwrap()
                .to_string(),
            "segment://t/n/a/b/0000-7fff-1"
        );
        use axum::http::Method;
        assert_eq!(
            super::scalable_write_of(&Method::POST, "/admin/v2/scalable/t/n/x/split/0")
                .unwrap()
                .to_string(),
            "topic://t/n/x"
        );
        assert!(super::scalable_write_of(&Method::PUT, "/admin/v2/scalable/t/n/x").is_none());
        assert!(
            super::scalable_write_of(&Method::POST, "/admin/v2/scalable/t/n/x/migrate").is_none()
        );
        assert!(super::scalable_write_of(&Method::DELETE, "/admin/v2/scalable/t/n/x").is_some());
        assert!(super::scalable_write_of(&Method::GET, "/admin/v2/scalable/t/n/x/stats").is_none());
    }
}
