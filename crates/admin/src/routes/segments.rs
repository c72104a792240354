//! Segment topics (Pulsar 5's `Segments` resource,
//! `/admin/v2/segments/{tenant}/{ns}/{topic}/{descriptor}`): what a
//! scalable topic's controller asks of a segment's owner. `owner::layer`
//! forwards each request to the broker owning the segment's bundle.

use strobe_scalable::SubscriptionOp;

use crate::api::*;

const BASE: &str = "/admin/v2/segments/{tenant}/{ns}/{topic}/{descriptor}";

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    let at = |suffix: &str| format!("{BASE}{suffix}");
    Router::new()
        .route(BASE, axum::routing::put(create).delete(delete))
        .route(&at("/stats"), get(stats))
        .route(&at("/terminate"), axum::routing::post(terminate))
        .route(
            &at("/subscription/{sub}"),
            axum::routing::put(create_subscription).delete(delete_subscription),
        )
        .route(&at("/subscription/{sub}/backlog"), get(backlog))
        .route(
            &at("/subscription/{sub}/skip-all"),
            axum::routing::post(skip_all),
        )
        .route(&at("/subscription/{sub}/seek"), axum::routing::post(seek))
}

/// The segment a path names: a `segment://`, or the v4 topic of a legacy
/// segment (PIP-475) under the descriptor [`LEGACY_DESCRIPTOR`].
///
/// [`LEGACY_DESCRIPTOR`]: strobe_broker::service::segments::LEGACY_DESCRIPTOR
pub(crate) fn segment_name(t: &str, ns: &str, topic: &str, d: &str) -> ApiResult<TopicName> {
    let name = if d == strobe_broker::service::segments::LEGACY_DESCRIPTOR {
        format!("persistent://{t}/{ns}/{topic}")
    } else {
        format!("segment://{t}/{ns}/{topic}/{d}")
    };
    TopicName::parse(&name).map_err(|e| bad(e.to_string()))
}

type SegmentPath = Path<(String, String, String, String)>;
type SubPath = Path<(String, String, String, String, String)>;

async fn create(
    State(s): State<Svc>,
    Path((t, ns, topic, d)): SegmentPath,
    body: Bytes,
) -> ApiResult<Response> {
    let name = segment_name(&t, &ns, &topic, &d)?;
    let subs: Vec<String> = parse_json(&body)?;
    s.create_segment(&name, &subs).await?;
    Ok(no_content())
}

async fn delete(State(s): State<Svc>, Path((t, ns, topic, d)): SegmentPath) -> ApiResult<Response> {
    s.delete_segment(&segment_name(&t, &ns, &topic, &d)?)
        .await?;
    Ok(no_content())
}

async fn stats(State(s): State<Svc>, Path((t, ns, topic, d)): SegmentPath) -> ApiResult<Response> {
    let name = segment_name(&t, &ns, &topic, &d)?;
    match s.segment_stats(&name).await? {
        Some(st) => Ok(axum::Json(st).into_response()),
        None => Err(ApiError(404, format!("segment {name} has no topic"))),
    }
}

async fn terminate(
    State(s): State<Svc>,
    Path((t, ns, topic, d)): SegmentPath,
) -> ApiResult<Response> {
    s.terminate_segment(&segment_name(&t, &ns, &topic, &d)?)
        .await?;
    Ok(no_content())
}

async fn backlog(
    State(s): State<Svc>,
    Path((t, ns, topic, d, sub)): SubPath,
) -> ApiResult<Response> {
    let name = segment_name(&t, &ns, &topic, &d)?;
    let st = s
        .segment_stats(&name)
        .await?
        .ok_or_else(|| ApiError(404, format!("segment {name} has no topic")))?;
    match st.backlogs.get(&sub) {
        Some(b) => Ok(axum::Json(json!({ "backlog": b })).into_response()),
        None => Err(ApiError(
            404,
            format!("segment {name} has no subscription {sub}"),
        )),
    }
}

async fn sub_op(
    s: &Svc,
    (t, ns, topic, d, sub): (String, String, String, String, String),
    op: SubscriptionOp,
) -> ApiResult<Response> {
    let name = segment_name(&t, &ns, &topic, &d)?;
    s.segment_subscription(&name, &sub, op).await?;
    Ok(no_content())
}

async fn create_subscription(State(s): State<Svc>, Path(p): SubPath) -> ApiResult<Response> {
    sub_op(&s, p, SubscriptionOp::Create).await
}

async fn delete_subscription(State(s): State<Svc>, Path(p): SubPath) -> ApiResult<Response> {
    sub_op(&s, p, SubscriptionOp::Delete).await
}

async fn skip_all(State(s): State<Svc>, Path(p): SubPath) -> ApiResult<Response> {
    sub_op(&s, p, SubscriptionOp::SkipAll).await
}

#[derive(Deserialize)]
struct SeekQuery {
    timestamp: Option<u64>,
    earliest: Option<bool>,
}

async fn seek(
    State(s): State<Svc>,
    Path(p): SubPath,
    Query(q): Query<SeekQuery>,
) -> ApiResult<Response> {
    let op = match (q.earliest, q.timestamp) {
        (Some(true), _) => SubscriptionOp::SeekEarliest,
        (_, Some(ts)) => SubscriptionOp::SeekTime(ts),
        _ => return Err(bad("seek needs ?timestamp=<ms> or ?earliest=true")),
    };
    sub_op(&s, p, op).await
}
