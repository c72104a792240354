//! A topic's messages through the admin API (Pulsar's `PersistentTopics`
//! verbs around them): the last message id, the id of the first message
//! at or after a time, examining the message at a position, getting one by
//! id, clearing or expiring a subscription's backlog, and the internal and
//! offline views of the log.

use axum::routing::post;
use strobe_broker::subscription::find_by_publish_time;
use strobe_model::Position;

use super::subscriptions::{MessageIdJson, message_response, sub_op};
use super::topics::{internal_stats_json, message_id_json, partitions};
use crate::api::*;

type SubPath = (String, String, String, String, String);

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    let topic = |p: &str| format!("/admin/v2/{{domain}}/{{tenant}}/{{ns}}/{{topic}}/{p}");
    Router::new()
        .route(&topic("lastMessageId"), get(last_message_id))
        .route(&topic("messageid/{timestamp}"), get(message_id_by_time))
        .route(&topic("examinemessage"), get(examine))
        .route(&topic("ledger/{ledger}/entry/{entry}"), get(by_id))
        .route(&topic("subscription/{sub}/skip_all"), post(skip_all))
        .route(
            &topic("subscription/{sub}/expireMessages"),
            post(expire_up_to),
        )
        .route(
            &topic("all_subscription/expireMessages/{secs}"),
            post(expire_all),
        )
        .route(&topic("internal-info"), get(internal_info))
        .route(
            &topic("partitioned-internalStats"),
            get(partitioned_internal_stats),
        )
        .route(&topic("backlog"), get(backlog))
        .route(&topic("createMissedPartitions"), post(create_missed))
        .route(&topic("truncate"), axum::routing::delete(truncate))
        .route(
            &topic("subscription/{sub}/analyzeBacklog"),
            post(analyze_backlog),
        )
}

/// A partitioned topic's messages are its partitions': these verbs name one.
async fn not_partitioned(s: &Svc, name: &TopicName, what: &str) -> ApiResult<()> {
    if s.partitioned_metadata(name, false).await? > 0 {
        return Err(ApiError(
            405,
            format!(
                "{what} is not allowed on partitioned topic {name}: name one of its partitions"
            ),
        ));
    }
    Ok(())
}

async fn last_message_id(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
) -> ApiResult<axum::Json<Value>> {
    not_partitioned(&s, &name, "lastMessageId").await?;
    let topic = s.topic(&name, false).await?;
    Ok(axum::Json(match topic.last_dispatchable().await? {
        Some(p) => message_id_json(Some(p), -1),
        // An empty topic: entry -1 of its current ledger, as Pulsar answers.
        None => json!({
            "ledgerId": topic.ledger.stats().current_ledger_id,
            "entryId": -1,
            "partitionIndex": -1,
        }),
    }))
}

async fn message_id_by_time(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, ts)): Path<(String, String, String, String, u64)>,
) -> ApiResult<axum::Json<Value>> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    not_partitioned(&s, &name, "messageid").await?;
    let topic = s.topic(&name, false).await?;
    let p = find_by_publish_time(&topic.ledger, ts).await?;
    if topic.ledger.last_confirmed().is_none_or(|last| p > last) {
        return Err(ApiError(
            404,
            format!("no message of {name} was published at or after {ts}"),
        ));
    }
    Ok(axum::Json(message_id_json(Some(p), -1)))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExamineQuery {
    initial_position: Option<String>,
    message_position: Option<u64>,
}

/// Pulsar's examine: the `messagePosition`th message (1-based) counted from
/// the oldest stored (`initialPosition=earliest`) or the newest (`latest`,
/// the default), whatever the subscriptions acknowledged.
async fn examine(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    Query(q): Query<ExamineQuery>,
) -> ApiResult<Response> {
    not_partitioned(&s, &name, "examinemessage").await?;
    let n = q.message_position.unwrap_or(1);
    if n == 0 {
        return Err(ApiError(412, "messagePosition starts at 1".into()));
    }
    let earliest = match q.initial_position.as_deref() {
        None | Some("latest") => false,
        Some("earliest") => true,
        Some(other) => {
            return Err(bad(format!(
                "initialPosition {other:?}: expected earliest or latest"
            )));
        }
    };
    let topic = s.topic(&name, false).await?;
    let ledger = &topic.ledger;
    let missing = || ApiError(404, format!("{name} has no message at position {n}"));
    let Some(last) = ledger.last_confirmed() else {
        return Err(missing());
    };
    if !earliest && n == 1 {
        let e = ledger.read(last, 1).await?;
        return message_response(e.first().ok_or_else(missing)?);
    }
    // Forward from the oldest entry: the nth, or (latest) the nth from the
    // end, keeping only the last n seen.
    let mut window = std::collections::VecDeque::new();
    let mut seen = 0u64;
    let mut from = ledger.first_position();
    loop {
        let entries = ledger.read(from, 500).await?;
        let Some(tail) = entries.last() else { break };
        from = Position::new(tail.position.ledger_id, tail.position.entry_id + 1);
        for e in entries {
            if e.position > last {
                break;
            }
            seen += 1;
            if earliest {
                if seen == n {
                    return message_response(&e);
                }
                continue;
            }
            window.push_back(e);
            if window.len() as u64 > n {
                window.pop_front();
            }
        }
        if from > last {
            break;
        }
    }
    if !earliest && window.len() as u64 == n {
        return message_response(&window[0]);
    }
    Err(missing())
}

/// The entry at `{ledger}:{entry}` (Pulsar's get message by id).
async fn by_id(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, l, e)): Path<(String, String, String, String, u64, u64)>,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    not_partitioned(&s, &name, "getting a message by id").await?;
    let topic = s.topic(&name, false).await?;
    let want = Position::new(l, e);
    let entries = if topic
        .ledger
        .last_confirmed()
        .is_some_and(|last| want <= last)
    {
        topic.ledger.read(want, 1).await?
    } else {
        Vec::new()
    };
    match entries.first() {
        Some(entry) if entry.position == want => message_response(entry),
        _ => Err(ApiError(
            404,
            format!("Message {l}:{e} not found in {name}"),
        )),
    }
}

/// Pulsar's `skip_all`: the subscription acknowledges everything stored.
async fn skip_all(State(s): State<Svc>, Path(p): Path<SubPath>) -> ApiResult<Response> {
    sub_op(&s, p, AdminOp::ClearBacklog).await?;
    Ok(no_content())
}

/// Pulsar's expire by message id (`ResetCursorData`): everything up to the
/// position is acknowledged, the position itself unless `isExcluded`.
async fn expire_up_to(
    State(s): State<Svc>,
    Path(p): Path<SubPath>,
    body: Bytes,
) -> ApiResult<Response> {
    let id: MessageIdJson = parse_json(&body)?;
    let pos = id
        .position()
        .ok_or_else(|| bad("expireMessages needs {\"ledgerId\": L, \"entryId\": E}"))?;
    sub_op(&s, p, AdminOp::AckUpTo(pos, !id.is_excluded)).await?;
    Ok(no_content())
}

/// Every subscription of the topic (or of each partition) expires what is
/// older than `secs`.
async fn expire_all(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, secs)): Path<(String, String, String, String, u64)>,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    for part in parts_of(&s, &name).await? {
        every_subscription(&s.topic(&part, false).await?, || {
            AdminOp::ExpireOlderThan(secs)
        })
        .await?;
    }
    Ok(no_content())
}

/// Runs `op` on every subscription of `topic`.
async fn every_subscription(topic: &Arc<Topic>, op: impl Fn() -> AdminOp) -> ApiResult<()> {
    for sub in topic.all_subscription_names() {
        topic
            .subscription_for_admin(&sub)
            .await?
            .admin(op())
            .await?;
    }
    Ok(())
}

/// A partitioned topic's partitions, or the topic itself.
async fn parts_of(s: &Svc, name: &TopicName) -> ApiResult<Vec<TopicName>> {
    let n = s.partitioned_metadata(name, false).await?;
    Ok(if n > 0 {
        (0..n).map(|i| name.partition_name(i)).collect()
    } else {
        vec![name.clone()]
    })
}

/// Pulsar's `ManagedLedgerInfo`: the topic's ledgers and where it ended.
async fn internal_info(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
) -> ApiResult<axum::Json<Value>> {
    not_partitioned(&s, &name, "internal-info").await?;
    let topic = s.topic(&name, false).await?;
    let ls = topic.ledger.stats();
    let terminated = topic
        .terminated()
        .map(|last| last.map(|p| json!({ "ledgerId": p.ledger_id, "entryId": p.entry_id })));
    Ok(axum::Json(json!({
        "ledgers": topic.ledger.ledger_ids().iter()
            .map(|id| json!({ "ledgerId": id })).collect::<Vec<_>>(),
        "terminatedPosition": terminated.flatten(),
        "entries": ls.entries,
        "size": ls.bytes,
        "lastConfirmedEntry": ls.last_confirmed.map(|p| p.to_string()),
        "cursors": topic.ledger.cursor_names(),
    })))
}

async fn partitioned_internal_stats(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
) -> ApiResult<axum::Json<Value>> {
    let n = partitions(&s, &name).await?;
    let mut out = serde_json::Map::new();
    for i in 0..n {
        let p = name.partition_name(i);
        out.insert(
            p.to_string(),
            internal_stats_json(&s.topic(&p, true).await?).await,
        );
    }
    Ok(axum::Json(json!({
        "metadata": { "partitions": n },
        "partitions": out,
    })))
}

/// Pulsar's `PersistentOfflineTopicStats`: the backlog as storage sees it.
async fn backlog(State(s): State<Svc>, TopicPath(name): TopicPath) -> ApiResult<axum::Json<Value>> {
    not_partitioned(&s, &name, "backlog").await?;
    let topic = s.topic(&name, false).await?;
    let ls = topic.ledger.stats();
    let mut cursors = serde_json::Map::new();
    let mut most = 0;
    for sub in topic.all_subscription_names() {
        if let Ok(h) = topic.subscription_for_admin(&sub).await {
            let b = h.cursor.backlog();
            most = most.max(b);
            cursors.insert(sub, json!({ "cursorBacklog": b, "cursorLedgerId": -1 }));
        }
    }
    Ok(axum::Json(json!({
        "storageSize": ls.bytes,
        "totalMessages": ls.entries,
        "messageBacklog": most,
        "brokerName": s.config.advertised_address,
        "topicName": name.to_string(),
        "dataLedgerDetails": topic.ledger.ledger_ids().iter()
            .map(|id| json!({ "ledgerId": id })).collect::<Vec<_>>(),
        "cursorDetails": cursors,
        "statGeneratedAt": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    })))
}

/// Creates the partitions of a partitioned topic that do not exist yet.
async fn create_missed(State(s): State<Svc>, TopicPath(name): TopicPath) -> ApiResult<Response> {
    let n = partitions(&s, &name).await?;
    for i in 0..n {
        s.topic(&name.partition_name(i), true).await?;
    }
    Ok(no_content())
}

/// Pulsar's truncate: every subscription moves to the end, and every ledger
/// they have all passed is deleted, retention or not (a partitioned topic:
/// each partition).
async fn truncate(State(s): State<Svc>, TopicPath(name): TopicPath) -> ApiResult<Response> {
    if !name.is_persistent() {
        return Err(ApiError(
            405,
            "truncate is for persistent topics: a non-persistent topic stores nothing".into(),
        ));
    }
    for part in parts_of(&s, &name).await? {
        let topic = s.topic(&part, false).await?;
        every_subscription(&topic, || AdminOp::ClearBacklog).await?;
        topic.ledger.flush_cursors().await?;
        topic.ledger.truncate().await?;
    }
    Ok(no_content())
}

/// The most entries one analysis reads before it gives up (`aborted`), as
/// Pulsar's `subscriptionBacklogScanMaxEntries`.
const ANALYZE_MAX_ENTRIES: u64 = 10_000;

/// Pulsar's `AnalyzeSubscriptionBacklogResult`: the subscription's
/// unacknowledged entries and messages (no entry filters here: all pass).
async fn analyze_backlog(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, sub)): Path<SubPath>,
) -> ApiResult<axum::Json<Value>> {
    let name = topic_name(&domain, &t, &ns, &topic)?;
    not_partitioned(&s, &name, "analyzeBacklog").await?;
    let topic = s.topic(&name, false).await?;
    let h = topic.subscription_for_admin(&sub).await?;
    let (mut entries, mut messages, mut aborted) = (0u64, 0u64, false);
    let (mut first, mut last_seen) = (None, None);
    if let Some(last) = topic.ledger.last_confirmed() {
        let mut from = h.cursor.first_unacked_floor();
        'scan: loop {
            let batch = topic.ledger.read(from, 500).await?;
            let Some(tail) = batch.last() else { break };
            from = Position::new(tail.position.ledger_id, tail.position.entry_id + 1);
            for e in batch {
                if e.position > last {
                    break 'scan;
                }
                if h.cursor.is_acked(e.position) {
                    continue;
                }
                if entries == ANALYZE_MAX_ENTRIES {
                    aborted = true;
                    break 'scan;
                }
                entries += 1;
                messages += strobe_wire::payload::peek_metadata(&e.data)
                    .ok()
                    .and_then(|m| m.num_messages_in_batch)
                    .map_or(1, |n| n.max(1) as u64);
                first.get_or_insert(e.position);
                last_seen = Some(e.position);
            }
        }
    }
    Ok(axum::Json(json!({
        "entries": entries,
        "messages": messages,
        "filterAcceptedEntries": entries,
        "filterAcceptedMessages": messages,
        "filterRejectedEntries": 0,
        "filterRejectedMessages": 0,
        "filterRescheduledEntries": 0,
        "filterRescheduledMessages": 0,
        "aborted": aborted,
        "firstPosition": first.map(|p| p.to_string()),
        "lastPosition": last_seen.map(|p| p.to_string()),
    })))
}
