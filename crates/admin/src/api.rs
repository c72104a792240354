//! What every handler of the HTTP port shares: the imports the route files
//! take with `use crate::api::*`, the error in Pulsar's admin shape
//! ([`ApiError`]: a status and `{"reason": "..."}`, built here and nowhere
//! else), and the extractors and body parsers.

pub(crate) use std::fmt::Write as _;
pub(crate) use std::sync::Arc;
pub(crate) use std::sync::atomic::Ordering::Relaxed;

pub(crate) use axum::Router;
pub(crate) use axum::body::Bytes;
pub(crate) use axum::extract::{Path, Query, State};
pub(crate) use axum::http::{StatusCode, header};
pub(crate) use axum::response::{IntoResponse, Response};
pub(crate) use axum::routing::get;
pub(crate) use serde::Deserialize;
pub(crate) use serde_json::{Value, json};
pub(crate) use std::collections::BTreeSet;
pub(crate) use strobe_broker::BrokerError;
pub(crate) use strobe_broker::service::BrokerService;
pub(crate) use strobe_broker::subscription::{AdminOp, AdminReply, SeekTarget, StartPosition};
pub(crate) use strobe_broker::topic::Topic;
pub(crate) use strobe_model::TopicName;
pub(crate) use strobe_resources::policies::{
    AUTH_ACTIONS, BacklogQuotaJson, NamespacePolicies, RetentionPolicies, TenantInfo,
};

pub(crate) type Svc = Arc<BrokerService>;

/// An error in Pulsar's admin shape.
#[derive(Debug)]
pub(crate) struct ApiError(pub(crate) u16, pub(crate) String);

impl ApiError {
    /// No such route: the paths with a `{domain}` segment also match paths
    /// of other resources (`/admin/v2/clusters/{c}/peers` fits
    /// `/admin/v2/{domain}/{tenant}/{ns}`); for a segment that is no
    /// domain they answer as the router does for a path it does not know,
    /// 404 with no body, so "no such route" stays distinct from "no such
    /// topic".
    pub(crate) fn no_route() -> ApiError {
        ApiError(404, String::new())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.0 == 404 && self.1.is_empty() {
            return StatusCode::NOT_FOUND.into_response();
        }
        let status = StatusCode::from_u16(self.0).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, axum::Json(json!({ "reason": self.1 }))).into_response()
    }
}

impl From<strobe_ledger::LedgerError> for ApiError {
    fn from(e: strobe_ledger::LedgerError) -> Self {
        BrokerError::from(e).into()
    }
}

impl From<BrokerError> for ApiError {
    fn from(e: BrokerError) -> Self {
        ApiError(e.http_status(), e.to_string())
    }
}

pub(crate) fn bad(msg: impl Into<String>) -> ApiError {
    ApiError(400, msg.into())
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

pub(crate) fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

pub(crate) fn parse_json<T: for<'de> Deserialize<'de> + Default>(body: &Bytes) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| bad(format!("invalid JSON body: {e}")))
}

pub(crate) fn parse_scalar<T: std::str::FromStr>(body: &Bytes, what: &str) -> ApiResult<T> {
    let text = std::str::from_utf8(body).map_err(|_| bad(format!("{what}: body is not UTF-8")))?;
    text.trim()
        .trim_matches('"')
        .parse()
        .map_err(|_| bad(format!("{what}: cannot read {:?}", text.trim())))
}

pub(crate) fn topic_name(domain: &str, t: &str, ns: &str, topic: &str) -> ApiResult<TopicName> {
    check_domain(domain)?;
    TopicName::parse(&format!("{domain}://{t}/{ns}/{topic}")).map_err(|e| bad(e.to_string()))
}

/// A path's `{domain}` segment: `persistent` or `non-persistent`, else
/// no such route ([`ApiError::no_route`]).
pub(crate) fn check_domain(domain: &str) -> ApiResult<()> {
    match domain {
        "persistent" | "non-persistent" => Ok(()),
        _ => Err(ApiError::no_route()),
    }
}

/// A topic named by the path's `{domain}/{tenant}/{ns}/{topic}` segments:
/// an unknown domain is 404, a bad name 400.
pub(crate) struct TopicPath(pub(crate) TopicName);

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
pub(crate) struct ForceQuery {
    pub(crate) force: Option<bool>,
}

/// A namespace's policies (404 if it does not exist).
pub(crate) fn policies(s: &Svc, t: &str, ns: &str) -> ApiResult<NamespacePolicies> {
    s.namespace_policies(&format!("{t}/{ns}"))
        .ok_or_else(|| ApiError(404, format!("namespace {t}/{ns} does not exist")))
}

/// Changes a namespace's policies with `f`: 204.
pub(crate) async fn update(
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
pub(crate) use policy_field;

/// 404 unless topic `name` exists (a topic-level policy's routes).
pub(crate) async fn topic_must_exist(s: &Svc, name: &TopicName) -> ApiResult<()> {
    if !s.topic_known(name).await? {
        return Err(ApiError(404, format!("Topic {name} not found")));
    }
    Ok(())
}

#[derive(Deserialize)]
pub(crate) struct AppliedQuery {
    pub(crate) applied: Option<bool>,
}

/// GET, POST and DELETE of a topic-level policy; `?applied=true` reads
/// what the topic enforces: its own value, else `$applied(&svc, &name)`
/// (its namespace's, else the broker's).
macro_rules! topic_field {
    ($get:ident, $set:ident, $del:ident, $field:ident, $parse:expr, $applied:expr) => {
        async fn $get(
            State(s): State<Svc>,
            TopicPath(name): TopicPath,
            Query(q): Query<AppliedQuery>,
        ) -> ApiResult<axum::Json<Value>> {
            topic_must_exist(&s, &name).await?;
            let own = s.topic_policies(&name).$field;
            if own.is_none() && q.applied.unwrap_or(false) {
                return Ok(axum::Json(($applied)(&s, &name)));
            }
            Ok(axum::Json(json!(own)))
        }

        async fn $set(
            State(s): State<Svc>,
            TopicPath(name): TopicPath,
            body: Bytes,
        ) -> ApiResult<Response> {
            let v = ($parse)(&body)?;
            s.update_topic_policies(&name, move |p: &mut strobe_tenancy::TopicPolicies| {
                p.$field = Some(v)
            })
            .await?;
            Ok(no_content())
        }

        async fn $del(State(s): State<Svc>, TopicPath(name): TopicPath) -> ApiResult<Response> {
            s.update_topic_policies(&name, |p: &mut strobe_tenancy::TopicPolicies| {
                p.$field = None
            })
            .await?;
            Ok(no_content())
        }
    };
}
pub(crate) use topic_field;
