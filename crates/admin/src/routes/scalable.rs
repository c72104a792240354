//! Scalable topics (Pulsar 5's `ScalableTopics` resource,
//! `/admin/v2/scalable/{tenant}/{ns}[/{topic}]`): create, list, read,
//! delete, stats, split, merge, and subscriptions across every segment.
//! Writes run at the topic's controller; `owner::layer` sends them there
//! when another broker leads it. Reads are served by any broker.

use std::collections::BTreeMap;

use strobe_broker::service::controllers::ControllerAt;
use strobe_scalable::Controller;

use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    Router::new()
        .route("/admin/v2/scalable/{tenant}/{ns}", get(list))
        .route(
            "/admin/v2/scalable/{tenant}/{ns}/{topic}",
            get(metadata).put(create).delete(delete),
        )
        .route("/admin/v2/scalable/{tenant}/{ns}/{topic}/stats", get(stats))
        .route(
            "/admin/v2/scalable/{tenant}/{ns}/{topic}/migrate",
            axum::routing::post(migrate),
        )
        .route(
            "/admin/v2/scalable/{tenant}/{ns}/{topic}/autoScalePolicy",
            get(get_autoscale)
                .post(set_autoscale)
                .delete(remove_autoscale),
        )
        .route(
            "/admin/v2/scalable/{tenant}/{ns}/{topic}/split/{segment}",
            axum::routing::post(split),
        )
        .route(
            "/admin/v2/scalable/{tenant}/{ns}/{topic}/merge/{a}/{b}",
            axum::routing::post(merge),
        )
        .route(
            "/admin/v2/scalable/{tenant}/{ns}/{topic}/subscriptions/{sub}",
            axum::routing::put(create_subscription).delete(delete_subscription),
        )
        .route(
            "/admin/v2/scalable/{tenant}/{ns}/{topic}/subscriptions/{sub}/seek",
            axum::routing::post(seek),
        )
        .route(
            "/admin/v2/scalable/{tenant}/{ns}/{topic}/subscriptions/{sub}/skip-all",
            axum::routing::post(skip_all),
        )
}

fn scalable_name(t: &str, ns: &str, topic: &str) -> ApiResult<TopicName> {
    TopicName::parse(&format!("topic://{t}/{ns}/{topic}")).map_err(|e| bad(e.to_string()))
}

/// The topic's controller, here: `owner::layer` forwarded the request if
/// another broker leads it, so one found elsewhere now is a leadership
/// moving under the request.
async fn here(s: &Svc, topic: &TopicName) -> ApiResult<Arc<Controller>> {
    match s.scalable_controller(topic).await? {
        ControllerAt::Here(c) => Ok(c),
        ControllerAt::Elsewhere { broker_id, .. } => Err(ApiError(
            503,
            format!("the controller of {topic} moved to broker {broker_id}; retry"),
        )),
    }
}

/// The topic's layout as stored, or 404.
async fn stored_layout(
    s: &Svc,
    name: &TopicName,
) -> ApiResult<strobe_resources::Versioned<strobe_layout::Layout>> {
    s.resources
        .layout(name.namespace(), name.local_name())
        .await
        .map_err(BrokerError::from)?
        .ok_or_else(|| ApiError(404, format!("scalable topic {name} does not exist")))
}

/// `?property=k=v` (repeatable; all must match, as Pulsar's list filter).
fn property_filters(query: Option<&str>) -> ApiResult<Vec<(String, String)>> {
    let mut out = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k != "property" {
            continue;
        }
        let v = percent_decode(v);
        let (pk, pv) = v
            .split_once('=')
            .ok_or_else(|| bad(format!("property filter {v:?} is not key=value")))?;
        out.push((pk.to_owned(), pv.to_owned()));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(v) => {
                    out.push(v);
                    i += 3;
                    continue;
                }
                None => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn list(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> ApiResult<axum::Json<Vec<String>>> {
    let namespace = format!("{t}/{ns}");
    if !s.namespace_exists(&namespace) {
        return Err(ApiError(
            404,
            format!("namespace {namespace} does not exist"),
        ));
    }
    let filters = property_filters(query.as_deref())?;
    let mut out = Vec::new();
    for local in s
        .resources
        .scalable_topics_of(&namespace)
        .await
        .map_err(BrokerError::from)?
    {
        if !filters.is_empty() {
            let Some(l) = s
                .resources
                .layout(&namespace, &local)
                .await
                .map_err(BrokerError::from)?
            else {
                continue;
            };
            if !filters
                .iter()
                .all(|(k, v)| l.value.properties.get(k) == Some(v))
            {
                continue;
            }
        }
        out.push(format!("topic://{namespace}/{local}"));
    }
    Ok(axum::Json(out))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateQuery {
    num_initial_segments: Option<u32>,
}

async fn create(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
    Query(q): Query<CreateQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    let name = scalable_name(&t, &ns, &topic)?;
    let properties: BTreeMap<String, String> = parse_json(&body)?;
    s.create_scalable_topic(&name, q.num_initial_segments.unwrap_or(1), properties)
        .await?;
    Ok(no_content())
}

async fn metadata(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let name = scalable_name(&t, &ns, &topic)?;
    let layout = stored_layout(&s, &name).await?;
    Ok(axum::Json(layout.value).into_response())
}

async fn delete(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
    Query(q): Query<ForceQuery>,
) -> ApiResult<Response> {
    let name = scalable_name(&t, &ns, &topic)?;
    let c = here(&s, &name).await?;
    s.delete_scalable_topic(&c, q.force.unwrap_or(false))
        .await?;
    Ok(no_content())
}

async fn stats(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let name = scalable_name(&t, &ns, &topic)?;
    let c = match s.scalable_controller(&name).await? {
        ControllerAt::Here(c) => c,
        // Stats need no leader: this broker reads the segments itself.
        ControllerAt::Elsewhere { .. } => Arc::new(Controller::new(
            name.clone(),
            s.resources.clone(),
            s.segment_topics(),
            None,
        )),
    };
    let (layout, segments) = c.stats().await.map_err(BrokerError::from)?;
    let mut subscriptions: BTreeMap<String, u64> = BTreeMap::new();
    let (mut producers, mut consumers) = (0, 0);
    let mut per_segment = serde_json::Map::new();
    for (id, st) in segments {
        let seg = layout.get(id).map_err(|e| ApiError(500, e.to_string()))?;
        if let Some(st) = &st {
            producers += st.producers;
            consumers += st.consumers;
            for (sub, backlog) in &st.backlogs {
                *subscriptions.entry(sub.clone()).or_default() += backlog;
            }
        }
        per_segment.insert(
            id.to_string(),
            json!({
                "descriptor": seg.descriptor().to_string(),
                "state": if seg.is_active() { "ACTIVE" } else { "SEALED" },
                "stats": st,
            }),
        );
    }
    // Each subscription's backlog over all segments, and the sealed
    // segments it has read to their end.
    let mut subs_json = serde_json::Map::new();
    for (sub, backlog) in subscriptions {
        let drained = s
            .resources
            .drained(name.namespace(), name.local_name(), &sub)
            .await
            .map_err(BrokerError::from)?;
        subs_json.insert(
            sub,
            json!({"msgBacklog": backlog, "drainedSegments": drained}),
        );
    }
    Ok(axum::Json(json!({
        "topic": name.to_string(),
        "epoch": layout.epoch,
        "activeSegments": layout.active().len(),
        "totalSegments": layout.segments.len(),
        "producers": producers,
        "consumers": consumers,
        "subscriptions": subs_json,
        "segments": per_segment,
    }))
    .into_response())
}

async fn get_autoscale(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let name = scalable_name(&t, &ns, &topic)?;
    let layout = stored_layout(&s, &name).await?;
    Ok(axum::Json(layout.value.auto_scale_policy).into_response())
}

/// Sets the topic's override, refused (400) when the policy it makes with
/// the broker's and the namespace's is unusable.
async fn set_autoscale(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let name = scalable_name(&t, &ns, &topic)?;
    let o: strobe_layout::AutoScalePolicyOverride =
        serde_json::from_slice(&body).map_err(|e| bad(format!("autoScalePolicy: {e}")))?;
    if let Some(why) = o.apply(&s.autoscale_policy(name.namespace())).invalid() {
        return Err(bad(format!("autoScalePolicy: {why}")));
    }
    here(&s, &name)
        .await?
        .set_autoscale_policy(Some(o))
        .await
        .map_err(BrokerError::from)?;
    Ok(no_content())
}

async fn remove_autoscale(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let name = scalable_name(&t, &ns, &topic)?;
    here(&s, &name)
        .await?
        .set_autoscale_policy(None)
        .await
        .map_err(BrokerError::from)?;
    Ok(no_content())
}

/// PIP-475: `persistent://{t}/{ns}/{topic}` becomes the scalable topic of
/// the same name; 409 if it already is one, or (without `force`) while v4
/// clients use it; 404 if it does not exist.
async fn migrate(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
    Query(q): Query<ForceQuery>,
) -> ApiResult<Response> {
    let v4 = TopicName::parse(&format!("persistent://{t}/{ns}/{topic}"))
        .map_err(|e| bad(e.to_string()))?;
    if v4.partition().is_some() {
        return Err(bad(format!(
            "{v4} is a partition: migrate its partitioned topic"
        )));
    }
    match s.migrate_to_scalable(&v4, q.force.unwrap_or(false)).await {
        Ok(_) => Ok(no_content()),
        Err(BrokerError::AlreadyExists(m) | BrokerError::Precondition(m)) => Err(ApiError(409, m)),
        Err(e) => Err(e.into()),
    }
}

async fn split(
    State(s): State<Svc>,
    Path((t, ns, topic, segment)): Path<(String, String, String, u64)>,
) -> ApiResult<Response> {
    let name = scalable_name(&t, &ns, &topic)?;
    let layout = here(&s, &name)
        .await?
        .split(segment)
        .await
        .map_err(BrokerError::from)?;
    Ok(axum::Json(layout).into_response())
}

async fn merge(
    State(s): State<Svc>,
    Path((t, ns, topic, a, b)): Path<(String, String, String, u64, u64)>,
) -> ApiResult<Response> {
    let name = scalable_name(&t, &ns, &topic)?;
    let layout = here(&s, &name)
        .await?
        .merge(a, b)
        .await
        .map_err(BrokerError::from)?;
    Ok(axum::Json(layout).into_response())
}

#[derive(Deserialize)]
struct TypeQuery {
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// What a subscription request does, at the topic's controller.
enum SubAction {
    Create(String),
    Delete,
    Seek(u64),
    SkipAll,
}

async fn on_subscription(
    s: &Svc,
    (t, ns, topic, sub): (String, String, String, String),
    action: SubAction,
) -> ApiResult<Response> {
    let name = scalable_name(&t, &ns, &topic)?;
    let c = here(s, &name).await?;
    match action {
        SubAction::Create(kind) => c.create_subscription(&sub, &kind).await,
        SubAction::Delete => c.delete_subscription(&sub).await,
        SubAction::Seek(ts) => c.seek(&sub, ts).await,
        SubAction::SkipAll => c.skip_all(&sub).await,
    }
    .map_err(BrokerError::from)?;
    Ok(no_content())
}

type SubPath = Path<(String, String, String, String)>;

async fn create_subscription(
    State(s): State<Svc>,
    Path(p): SubPath,
    Query(q): Query<TypeQuery>,
) -> ApiResult<Response> {
    let kind = q.kind.unwrap_or_else(|| "STREAM".into()).to_uppercase();
    if !matches!(kind.as_str(), "STREAM" | "QUEUE") {
        return Err(bad(format!("subscription type {kind}: STREAM or QUEUE")));
    }
    on_subscription(&s, p, SubAction::Create(kind)).await
}

async fn delete_subscription(State(s): State<Svc>, Path(p): SubPath) -> ApiResult<Response> {
    on_subscription(&s, p, SubAction::Delete).await
}

#[derive(Deserialize)]
struct SeekQuery {
    timestamp: Option<u64>,
}

async fn seek(
    State(s): State<Svc>,
    Path(p): SubPath,
    Query(q): Query<SeekQuery>,
) -> ApiResult<Response> {
    let ts = q
        .timestamp
        .ok_or_else(|| bad("seek needs ?timestamp=<ms since the epoch>"))?;
    on_subscription(&s, p, SubAction::Seek(ts)).await
}

async fn skip_all(State(s): State<Svc>, Path(p): SubPath) -> ApiResult<Response> {
    on_subscription(&s, p, SubAction::SkipAll).await
}
