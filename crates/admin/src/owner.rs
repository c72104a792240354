//! In a cluster, topic operations reach the topic's owner: a request about a
//! topic whose bundle another broker owns is answered with HTTP 307 to the
//! same path on that broker, as Pulsar's web service redirects. Metadata-only
//! requests (partitioned topics' partition counts) and topics nobody owns yet
//! are served where they arrive.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use strobe_model::TopicName;

use crate::Svc;

/// The topic a path is about: `/admin/v2/{domain}/{tenant}/{ns}/{topic}/...`.
fn topic_of(path: &str) -> Option<TopicName> {
    let rest = path.strip_prefix("/admin/v2/")?;
    let mut parts = rest.split('/');
    let domain = parts.next()?;
    if domain != "persistent" && domain != "non-persistent" {
        return None;
    }
    let (tenant, ns, topic) = (parts.next()?, parts.next()?, parts.next()?);
    if topic.is_empty() || parts.next() == Some("partitions") {
        return None;
    }
    TopicName::parse(&format!("{domain}://{tenant}/{ns}/{topic}")).ok()
}

/// The layer: a 307 to the owner for another broker's topic.
pub(crate) async fn layer(State(s): State<Svc>, req: Request, next: Next) -> Response {
    let Some(cluster) = s.cluster() else {
        return next.run(req).await;
    };
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
    match cluster.owner_of(&path) {
        Some(owner) if owner.broker_id != cluster.broker_id() => {
            let target = format!(
                "{}{}",
                owner.web_service_url.trim_end_matches('/'),
                req.uri()
                    .path_and_query()
                    .map(|p| p.as_str())
                    .unwrap_or("/")
            );
            (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, target)]).into_response()
        }
        _ => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::topic_of;

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
    }
}
