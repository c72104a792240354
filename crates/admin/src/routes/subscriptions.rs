//! Subscriptions of a topic (Pulsar's `PersistentTopicsBase` subscription
//! endpoints): create, delete, skip, reset, expire, peek.

use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    Router::new()
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscriptions",
            get(subscriptions),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscription/{sub}",
            axum::routing::put(create_subscription).delete(delete_subscription),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscription/{sub}/skip/{n}",
            axum::routing::post(skip),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscription/{sub}/resetcursor/{time}",
            axum::routing::post(reset_by_time),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscription/{sub}/resetcursor",
            axum::routing::post(reset_by_id),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscription/{sub}/expireMessages/{secs}",
            axum::routing::post(expire),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/subscription/{sub}/position/{n}",
            get(peek),
        )
}

async fn subscriptions(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
) -> ApiResult<axum::Json<Vec<String>>> {
    let topic = s.topic(&name, false).await?;
    Ok(axum::Json(topic.all_subscription_names()))
}

/// Pulsar's `ResetCursorData` / `MessageIdImpl` JSON.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct MessageIdJson {
    pub(crate) ledger_id: Option<i64>,
    pub(crate) entry_id: Option<i64>,
    pub(crate) batch_index: Option<i32>,
    /// `ResetCursorData.isExcluded`: the position itself is left out.
    pub(crate) is_excluded: bool,
}

impl MessageIdJson {
    pub(crate) fn position(&self) -> Option<strobe_model::Position> {
        match (self.ledger_id, self.entry_id) {
            (Some(l), Some(e)) if l >= 0 && e >= 0 => {
                Some(strobe_model::Position::new(l as u64, e as u64))
            }
            _ => None,
        }
    }
}

async fn create_subscription(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub)): Path<(String, String, String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let topic = s
        .topic(&topic_name(&domain, &t, &ns, &topic)?, true)
        .await?;
    let id: MessageIdJson = parse_json(&body)?;
    topic.create_subscription(&sub, id.position()).await?;
    Ok(no_content())
}

async fn delete_subscription(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub)): Path<(String, String, String, String, String)>,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    let topic = s.topic(&name, false).await?;
    topic.subscription_for_admin(&sub).await?.delete().await?;
    Ok(no_content())
}

pub(crate) async fn sub_op(
    s: &Svc,
    (domain, t, ns, topic, sub): (String, String, String, String, String),
    op: AdminOp,
) -> ApiResult<AdminReply> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    let topic = s.topic(&name, false).await?;
    Ok(topic.subscription_for_admin(&sub).await?.admin(op).await?)
}

async fn skip(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub, n)): Path<(String, String, String, String, String, u64)>,
) -> ApiResult<Response> {
    sub_op(&s, (domain, t, ns, topic, sub), AdminOp::Skip(n)).await?;
    Ok(no_content())
}

async fn reset_by_time(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub, time)): Path<(String, String, String, String, String, u64)>,
) -> ApiResult<Response> {
    sub_op(
        &s,
        (domain, t, ns, topic, sub),
        AdminOp::Reset(SeekTarget::PublishTime(time)),
    )
    .await?;
    Ok(no_content())
}

async fn reset_by_id(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub)): Path<(String, String, String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let id: MessageIdJson = parse_json(&body)?;
    let p = id
        .position()
        .ok_or_else(|| bad("resetcursor needs {\"ledgerId\": L, \"entryId\": E}"))?;
    let start = StartPosition {
        ledger_id: p.ledger_id,
        entry_id: p.entry_id,
        batch_index: id.batch_index.unwrap_or(-1),
    };
    sub_op(
        &s,
        (domain, t, ns, topic, sub),
        AdminOp::Reset(SeekTarget::Message(start)),
    )
    .await?;
    Ok(no_content())
}

async fn expire(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub, secs)): Path<(String, String, String, String, String, u64)>,
) -> ApiResult<Response> {
    sub_op(
        &s,
        (domain, t, ns, topic, sub),
        AdminOp::ExpireOlderThan(secs),
    )
    .await?;
    Ok(no_content())
}

/// Pulsar's peek: the message's payload as the body, its metadata in headers.
async fn peek(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub, n)): Path<(String, String, String, String, String, u64)>,
) -> ApiResult<Response> {
    let entry = match sub_op(&s, (domain, t, ns, topic, sub), AdminOp::Peek(n)).await? {
        AdminReply::Peeked(Some(e)) => e,
        _ => return Err(ApiError(404, format!("no message at position {n}"))),
    };
    message_response(&entry)
}

/// A stored entry as Pulsar's admin API returns a message (peek, examine,
/// get by id): the payload as the body, the metadata in `X-Pulsar-*` headers.
pub(crate) fn message_response(entry: &strobe_ledger::Entry) -> ApiResult<Response> {
    let parsed =
        strobe_wire::payload::parse(&entry.data).map_err(|e| ApiError(500, e.to_string()))?;
    let m = &parsed.metadata;
    let mut resp = Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(
            "X-Pulsar-Message-ID",
            format!("{}:{}", entry.position.ledger_id, entry.position.entry_id),
        )
        .header("X-Pulsar-publish-time", m.publish_time.to_string())
        .header("X-Pulsar-producer-name", m.producer_name.clone())
        .header("X-Pulsar-sequence-id", m.sequence_id.to_string());
    if let Some(n) = m.num_messages_in_batch {
        resp = resp.header("X-Pulsar-num-batch-message", n.to_string());
    }
    if let Some(k) = &m.partition_key {
        resp = resp.header("X-Pulsar-partition-key", k.clone());
    }
    for kv in &m.properties {
        if let Ok(v) = axum::http::HeaderValue::from_str(&kv.value) {
            resp = resp.header(format!("X-Pulsar-PROPERTY-{}", kv.key), v);
        }
    }
    resp.body(axum::body::Body::from(parsed.payload))
        .map_err(|e| ApiError(500, e.to_string()))
}
