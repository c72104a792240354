//! Topics (Pulsar's `PersistentTopicsBase`): creation, deletion, partitions,
//! termination, compaction and stats.

use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    Router::new()
        .route("/admin/v2/{domain}/{tenant}/{ns}", get(domain_topics))
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/partitioned",
            get(partitioned_topics),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}",
            axum::routing::put(create_topic).delete(delete_topic),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/partitions",
            get(get_partitions)
                .put(create_partitions)
                .post(update_partitions)
                .delete(delete_partitioned),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/terminate",
            axum::routing::post(terminate),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/compaction",
            axum::routing::put(compact).get(compaction_status),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/terminate/partitions",
            axum::routing::post(terminate_partitioned),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/stats",
            get(topic_stats),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/partitioned-stats",
            get(partitioned_stats),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/internalStats",
            get(internal_stats),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/unload",
            axum::routing::put(unload),
        )
}

async fn domain_topics(
    State(s): State<Svc>,
    Path((domain, t, ns)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<Vec<String>>> {
    check_domain(&domain)?;
    let name = format!("{t}/{ns}");
    if !s.namespace_exists(&name) {
        return Err(ApiError(404, format!("namespace {name} does not exist")));
    }
    let persistent = domain == "persistent";
    Ok(axum::Json(
        s.topics_of_namespace(&name, persistent, !persistent)
            .await?,
    ))
}

async fn partitioned_topics(
    State(s): State<Svc>,
    Path((_domain, t, ns)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<Vec<String>>> {
    Ok(axum::Json(s.partitioned_topics_of(&format!("{t}/{ns}"))))
}

async fn create_topic(State(s): State<Svc>, TopicPath(name): TopicPath) -> ApiResult<Response> {
    if s.partitioned_metadata(&name, false).await? > 0 || s.loaded_topic(&name).is_some() {
        return Err(ApiError(409, format!("topic {name} already exists")));
    }
    s.check_topic_count(name.namespace(), 1, true).await?;
    if name.is_persistent() {
        s.refuse_if_read_only()?;
    }
    s.topic(&name, true).await?;
    Ok(no_content())
}

async fn delete_topic(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    Query(q): Query<ForceQuery>,
) -> ApiResult<Response> {
    s.delete_topic(&name, q.force.unwrap_or(false)).await?;
    Ok(no_content())
}

async fn delete_partitioned(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    Query(q): Query<ForceQuery>,
) -> ApiResult<Response> {
    s.delete_partitioned(&name, q.force.unwrap_or(false))
        .await?;
    Ok(no_content())
}

pub(crate) fn message_id_json(p: Option<strobe_model::Position>, partition: i32) -> Value {
    match p {
        Some(p) => {
            json!({ "ledgerId": p.ledger_id, "entryId": p.entry_id, "partitionIndex": partition })
        }
        None => json!({ "ledgerId": -1, "entryId": -1, "partitionIndex": partition }),
    }
}

async fn terminate(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
) -> ApiResult<axum::Json<Value>> {
    if s.partitioned_metadata(&name, false).await? > 0 {
        return Err(ApiError(
            405,
            format!("{name} is a partitioned topic: terminate it through terminate/partitions"),
        ));
    }
    let last = s.terminate(&name).await?;
    Ok(axum::Json(message_id_json(last, -1)))
}

async fn terminate_partitioned(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
) -> ApiResult<axum::Json<Value>> {
    let n = partitions(&s, &name).await?;
    let mut out = serde_json::Map::new();
    for i in 0..n {
        let last = s.terminate(&name.partition_name(i)).await?;
        out.insert(i.to_string(), message_id_json(last, i as i32));
    }
    Ok(axum::Json(Value::Object(out)))
}

/// The topics a request is about: the partitions of a partitioned topic, or itself.
async fn topic_or_partitions(s: &Svc, name: &TopicName) -> ApiResult<Vec<TopicName>> {
    let n = s.partitioned_metadata(name, false).await?;
    Ok(if n == 0 {
        vec![name.clone()]
    } else {
        (0..n).map(|i| name.partition_name(i)).collect()
    })
}

async fn compact(State(s): State<Svc>, TopicPath(name): TopicPath) -> ApiResult<Response> {
    for p in topic_or_partitions(&s, &name).await? {
        s.compact(&p).await?;
    }
    Ok(no_content())
}

/// Pulsar's `LongRunningProcessStatus`: NOT_RUN, RUNNING, SUCCESS or ERROR.
async fn compaction_status(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
) -> ApiResult<axum::Json<Value>> {
    let mut status = "SUCCESS";
    let mut last_error = String::new();
    let mut any = false;
    for p in topic_or_partitions(&s, &name).await? {
        let (st, err) = s.compaction_status(&p).await?;
        any = true;
        let rank = |x: &str| match x {
            "ERROR" => 3,
            "RUNNING" => 2,
            "NOT_RUN" => 1,
            _ => 0,
        };
        if rank(&st) > rank(status) {
            status = match st.as_str() {
                "ERROR" => "ERROR",
                "RUNNING" => "RUNNING",
                _ => "NOT_RUN",
            };
        }
        if let Some(e) = err {
            last_error = e;
        }
    }
    if !any {
        status = "NOT_RUN";
    }
    Ok(axum::Json(
        json!({ "status": status, "lastError": last_error }),
    ))
}

async fn get_partitions(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> ApiResult<axum::Json<Value>> {
    let create = q.get("checkAllowAutoCreation").is_some_and(|v| v == "true");
    let n = s.partitioned_metadata(&name, create).await?;
    Ok(axum::Json(json!({ "partitions": n })))
}

async fn create_partitions(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    body: Bytes,
) -> ApiResult<Response> {
    let n: u32 = parse_scalar(&body, "partitions")?;
    if n == 0 {
        return Err(bad("the number of partitions must be at least 1"));
    }
    s.check_topic_count(name.namespace(), n, true).await?;
    s.create_partitioned(&name, n).await.map_err(|e| match e {
        BrokerError::NotAllowed(m) if m.contains("already exists") => ApiError(409, m),
        other => other.into(),
    })?;
    Ok(no_content())
}

async fn update_partitions(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    body: Bytes,
) -> ApiResult<Response> {
    let n: u32 = parse_scalar(&body, "partitions")?;
    s.update_partitions(&name, n).await?;
    Ok(no_content())
}

async fn topic_stats(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
) -> ApiResult<axum::Json<Value>> {
    let topic = s.topic(&name, false).await?;
    Ok(axum::Json(stats_json(&topic).await))
}

pub(crate) async fn stats_json(topic: &Arc<Topic>) -> Value {
    let ls = topic.ledger.stats();
    let c = &topic.counters;
    let mut subs = serde_json::Map::new();
    for name in topic.all_subscription_names() {
        let Ok(h) = topic.subscription_for_admin(&name).await else {
            continue;
        };
        let info = match h.admin(AdminOp::Info).await {
            Ok(AdminReply::Info(i)) => i,
            _ => continue,
        };
        let consumers: Vec<Value> = info
            .consumers
            .iter()
            .map(|c| {
                let mut v = json!({
                    "consumerName": c.name,
                    "availablePermits": c.permits,
                    "unackedMessages": c.unacked_messages,
                });
                if info.sub_type == Some(strobe_model::SubType::KeyShared) {
                    v["keyHashRanges"] = json!(
                        c.key_hash_ranges
                            .iter()
                            .map(|(a, b)| format!("[{a}, {b}]"))
                            .collect::<Vec<_>>()
                    );
                    v["assignedBuckets"] = json!(c.buckets);
                    v["drainingHashesCount"] = json!(c.draining_hashes.len());
                    v["drainingHashesClearedTotal"] = json!(c.draining_hashes_cleared_total);
                    v["drainingHashesUnackedMessages"] = json!(
                        c.draining_hashes
                            .iter()
                            .map(|d| u64::from(d.1))
                            .sum::<u64>()
                    );
                    v["drainingHashes"] = json!(c
                        .draining_hashes
                        .iter()
                        .map(|(h, n, b)| json!({ "hash": h, "unackMsgs": n, "blockedAttempts": b }))
                        .collect::<Vec<_>>());
                    v["waitingForHashes"] = json!(
                        c.waiting_for
                            .iter()
                            .map(|(h, owner)| json!({ "hash": h, "drainingAt": owner }))
                            .collect::<Vec<_>>()
                    );
                }
                v
            })
            .collect();
        subs.insert(
            name.clone(),
            json!({
                "msgBacklog": info.backlog,
                "type": info.sub_type.map(|t| t.as_str()),
                "isDurable": h.durable,
                "consumers": consumers,
            }),
        );
    }
    let rates = *c.rates.lock();
    json!({
        "msgRateIn": rates.msg_in,
        "msgThroughputIn": rates.bytes_in,
        "msgRateOut": rates.msg_out,
        "msgThroughputOut": rates.bytes_out,
        "backlogSize": topic.backlog_bytes(),
        "msgInCounter": c.msg_in.load(Relaxed),
        "bytesInCounter": c.bytes_in.load(Relaxed),
        "msgOutCounter": c.msg_out.load(Relaxed),
        "bytesOutCounter": c.bytes_out.load(Relaxed),
        "storageSize": ls.bytes,
        "entries": ls.entries,
        "ledgers": ls.ledgers,
        "publishers": topic.producer_names().into_iter().map(|n| json!({ "producerName": n })).collect::<Vec<_>>(),
        "subscriptions": subs,
    })
}

async fn partitioned_stats(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
) -> ApiResult<axum::Json<Value>> {
    let n = partitions(&s, &name).await?;
    let mut partitions = serde_json::Map::new();
    let (mut msg_in, mut storage) = (0u64, 0u64);
    for i in 0..n {
        let p = name.partition_name(i);
        let st = stats_json(&s.topic(&p, true).await?).await;
        msg_in += st["msgInCounter"].as_u64().unwrap_or(0);
        storage += st["storageSize"].as_u64().unwrap_or(0);
        partitions.insert(p.to_string(), st);
    }
    Ok(axum::Json(json!({
        "metadata": { "partitions": n },
        "msgInCounter": msg_in,
        "storageSize": storage,
        "partitions": partitions,
    })))
}

async fn internal_stats(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
) -> ApiResult<axum::Json<Value>> {
    let topic = s.topic(&name, false).await?;
    Ok(axum::Json(internal_stats_json(&topic).await))
}

/// Pulsar's `PersistentTopicInternalStats` of a loaded topic.
pub(crate) async fn internal_stats_json(topic: &Arc<Topic>) -> Value {
    let ls = topic.ledger.stats();
    let mut cursors = serde_json::Map::new();
    for sub in topic.all_subscription_names() {
        if let Ok(h) = topic.subscription_for_admin(&sub).await {
            let md = h.cursor.mark_delete_position();
            cursors.insert(
                sub,
                json!({
                    "markDeletePosition": md.map(|p| p.to_string()),
                    "readPosition": h.cursor.read_position().to_string(),
                    "messagesConsumedCounter": Value::Null,
                    "numberOfEntriesSinceFirstNotAckedMessage": h.cursor.backlog(),
                    "individuallyDeletedMessages": h.cursor.individually_deleted().iter()
                        .map(|(a, b)| format!("({a}..{b}]")).collect::<Vec<_>>(),
                }),
            );
        }
    }
    json!({
        "entriesAddedCounter": ls.entries,
        "numberOfEntries": ls.entries,
        "totalSize": ls.bytes,
        "currentLedgerEntries": Value::Null,
        "lastConfirmedEntry": ls.last_confirmed.map(|p| p.to_string()),
        "state": if topic.terminated().is_some() { "Terminated" } else { "LedgerOpened" },
        "ledgers": topic.ledger.ledger_ids().iter().map(|id| json!({ "ledgerId": id })).collect::<Vec<_>>(),
        "cursors": cursors,
    })
}

async fn unload(State(s): State<Svc>, TopicPath(name): TopicPath) -> ApiResult<Response> {
    s.unload(&name).await?;
    Ok(no_content())
}

/// The partition count of partitioned topic `name`; 404 if it is not one.
pub(crate) async fn partitions(s: &Svc, name: &TopicName) -> ApiResult<u32> {
    let n = s.partitioned_metadata(name, false).await?;
    if n == 0 {
        return Err(ApiError(404, format!("{name} is not a partitioned topic")));
    }
    Ok(n)
}
