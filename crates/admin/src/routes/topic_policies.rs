//! A single topic's own storage and delivery policies (Pulsar's topic-level
//! policies): message TTL, deduplication, retention, backlog quotas and the
//! compaction threshold, the subscription types allowed (and its user
//! properties), on `/admin/v2/{domain}/{t}/{ns}/{topic}/...` with
//! Pulsar's shapes. Each is the topic's own value over its namespace's over
//! the broker's (`strobe_broker::enforce::effective`), in force on the
//! topic as soon as the call returns; `?applied=true` reads what the topic
//! enforces.

use strobe_tenancy::TopicPolicies;

use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    let topic = |p: &str| format!("/admin/v2/{{domain}}/{{tenant}}/{{ns}}/{{topic}}/{p}");
    Router::new()
        .route(
            &topic("messageTTL"),
            get(get_ttl).post(set_ttl).delete(del_ttl),
        )
        .route(
            &topic("deduplicationEnabled"),
            get(get_dedup).post(set_dedup).delete(del_dedup),
        )
        .route(
            &topic("retention"),
            get(get_retention).post(set_retention).delete(del_retention),
        )
        .route(
            &topic("compactionThreshold"),
            get(get_compaction)
                .post(set_compaction)
                .delete(del_compaction),
        )
        .route(
            &topic("subscriptionTypesEnabled"),
            get(get_sub_types).post(set_sub_types).delete(del_sub_types),
        )
        .route(
            &topic("properties"),
            get(get_properties)
                .put(put_properties)
                .delete(remove_property),
        )
        .route(
            &topic("autoSubscriptionCreation"),
            get(get_auto_sub).post(set_auto_sub).delete(del_auto_sub),
        )
        .route(
            &topic("schemaCompatibilityStrategy"),
            get(get_schema_strategy)
                .put(set_schema_strategy)
                .delete(del_schema_strategy),
        )
        .route(
            &topic("schemaValidationEnforced"),
            get(get_schema_enforced).post(set_schema_enforced),
        )
        .route(
            &topic("delayedDelivery"),
            get(get_delayed).post(set_delayed).delete(del_delayed),
        )
        .route(
            &topic("maxUnackedMessagesOnConsumer"),
            get(get_unacked_consumer)
                .post(set_unacked_consumer)
                .delete(del_unacked_consumer),
        )
        .route(
            &topic("maxUnackedMessagesOnSubscription"),
            get(get_unacked_sub)
                .post(set_unacked_sub)
                .delete(del_unacked_sub),
        )
        .route(&topic("backlogQuotaMap"), get(get_quotas))
        .route(
            &topic("backlogQuota"),
            axum::routing::post(set_quota).delete(del_quota),
        )
}

#[derive(Deserialize)]
struct TtlQuery {
    #[serde(rename = "messageTTL")]
    message_ttl: Option<i64>,
}

async fn get_ttl(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    Query(q): Query<AppliedQuery>,
) -> ApiResult<axum::Json<Value>> {
    topic_must_exist(&s, &name).await?;
    let own = s.topic_policies(&name).message_ttl_in_seconds;
    if own.is_none() && q.applied.unwrap_or(false) {
        return Ok(axum::Json(json!(s.effective_for(&name).message_ttl_secs)));
    }
    Ok(axum::Json(json!(own)))
}

/// Pulsar takes the TTL as the `messageTTL` query parameter here (the
/// namespace's route takes a body); a body is read too.
async fn set_ttl(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    Query(q): Query<TtlQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    let ttl = match q.message_ttl {
        Some(v) => v,
        None => parse_scalar(&body, "messageTTL")?,
    };
    if !(0..=i32::MAX as i64).contains(&ttl) {
        return Err(ApiError(412, format!("Invalid message TTL value {ttl}")));
    }
    change(&s, &name, move |p| {
        p.message_ttl_in_seconds = Some(ttl as i32)
    })
    .await
}

async fn del_ttl(State(s): State<Svc>, TopicPath(name): TopicPath) -> ApiResult<Response> {
    change(&s, &name, |p| p.message_ttl_in_seconds = None).await
}

topic_field!(
    get_dedup,
    set_dedup,
    del_dedup,
    deduplication_enabled,
    |b: &Bytes| parse_scalar::<bool>(b, "deduplicationEnabled"),
    |s: &Svc, name: &TopicName| json!(s.effective_for(name).deduplication)
);

topic_field!(
    get_retention,
    set_retention,
    del_retention,
    retention_policies,
    |b: &Bytes| retention(b),
    |s: &Svc, name: &TopicName| json!(
        s.namespace_policies(name.namespace())
            .and_then(|p| p.retention_policies)
            .unwrap_or_default()
    )
);

topic_field!(
    get_compaction,
    set_compaction,
    del_compaction,
    compaction_threshold,
    |b: &Bytes| threshold(b),
    |s: &Svc, name: &TopicName| json!(s.effective_for(name).compaction_threshold)
);

topic_field!(
    get_sub_types,
    set_sub_types,
    del_sub_types,
    subscription_types_enabled,
    |b: &Bytes| sub_types(b),
    |s: &Svc, name: &TopicName| {
        let ns = s.namespace_policies(name.namespace()).unwrap_or_default();
        json!(
            ns.subscription_types_enabled
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| strobe_tenancy::SUBSCRIPTION_TYPES
                    .iter()
                    .map(|t| t.to_string())
                    .collect())
        )
    }
);

topic_field!(
    get_auto_sub,
    set_auto_sub,
    del_auto_sub,
    auto_subscription_creation,
    |b: &Bytes| serde_json::from_slice::<strobe_tenancy::AutoSubscriptionCreation>(b)
        .map_err(|e| bad(format!("autoSubscriptionCreation: {e}"))),
    |s: &Svc, name: &TopicName| json!(
        s.namespace_policies(name.namespace())
            .and_then(|p| p.auto_subscription_creation)
            .unwrap_or(strobe_tenancy::AutoSubscriptionCreation {
                allow_auto_subscription_creation: true
            })
    )
);

topic_field!(
    get_schema_strategy,
    set_schema_strategy,
    del_schema_strategy,
    schema_compatibility_strategy,
    |b: &Bytes| schema_strategy(b),
    |s: &Svc, name: &TopicName| {
        let ns = s.namespace_policies(name.namespace()).unwrap_or_default();
        json!(strobe_broker::schemas::policy_of(&ns, None).strategy.name())
    }
);

topic_field!(
    get_schema_enforced,
    set_schema_enforced,
    _del_schema_enforced,
    schema_validation_enforced,
    |b: &Bytes| parse_scalar::<bool>(b, "schemaValidationEnforced"),
    |s: &Svc, name: &TopicName| json!(
        s.namespace_policies(name.namespace())
            .and_then(|p| p.schema_validation_enforced)
            .unwrap_or(false)
    )
);

/// A schema compatibility strategy by Pulsar's name (`"BACKWARD"`).
pub(crate) fn schema_strategy(body: &Bytes) -> ApiResult<String> {
    let name: String = parse_scalar(body, "schemaCompatibilityStrategy")?;
    strobe_schema::SchemaCompatibilityStrategy::from_name(&name)
        .map_err(|e| bad(format!("schemaCompatibilityStrategy: {e}")))?;
    Ok(name)
}

topic_field!(
    get_delayed,
    set_delayed,
    del_delayed,
    delayed_delivery,
    |b: &Bytes| delayed(b),
    |s: &Svc, name: &TopicName| json!(
        s.namespace_policies(name.namespace())
            .and_then(|p| p.delayed_delivery_policies)
            .unwrap_or(strobe_tenancy::storage::DelayedDelivery {
                active: true,
                tick_time: 1000,
                max_delivery_delay_in_millis: 0
            })
    )
);

/// Pulsar's `DelayedDeliveryPolicies` JSON.
pub(crate) fn delayed(body: &Bytes) -> ApiResult<strobe_tenancy::storage::DelayedDelivery> {
    let d: strobe_tenancy::storage::DelayedDelivery =
        serde_json::from_slice(body).map_err(|e| bad(format!("delayedDelivery: {e}")))?;
    if d.tick_time < 0 || d.max_delivery_delay_in_millis < 0 {
        return Err(bad(
            "delayedDelivery: tickTime and maxDeliveryDelayInMillis must be 0 or more",
        ));
    }
    Ok(d)
}

topic_field!(
    get_unacked_consumer,
    set_unacked_consumer,
    del_unacked_consumer,
    max_unacked_messages_on_consumer,
    |b: &Bytes| unacked(b, "maxUnackedMessagesOnConsumer"),
    |s: &Svc, name: &TopicName| json!(
        s.namespace_policies(name.namespace())
            .and_then(|p| p.max_unacked_messages_per_consumer)
            .unwrap_or(s.config.max_unacked_messages_per_consumer as i32)
    )
);

topic_field!(
    get_unacked_sub,
    set_unacked_sub,
    del_unacked_sub,
    max_unacked_messages_on_subscription,
    |b: &Bytes| unacked(b, "maxUnackedMessagesOnSubscription"),
    |s: &Svc, name: &TopicName| json!(
        s.namespace_policies(name.namespace())
            .and_then(|p| p.max_unacked_messages_per_subscription)
            .unwrap_or(0)
    )
);

/// An unacknowledged-messages limit: 0 (none) or more.
pub(crate) fn unacked(body: &Bytes, what: &str) -> ApiResult<i32> {
    let v: i32 = parse_scalar(body, what)?;
    if v < 0 {
        return Err(ApiError(412, format!("{what} must be 0 or more")));
    }
    Ok(v)
}

/// A set of Pulsar's subscription type names (`["Shared", "Key_Shared"]`).
pub(crate) fn sub_types(body: &Bytes) -> ApiResult<BTreeSet<String>> {
    let set: BTreeSet<String> =
        serde_json::from_slice(body).map_err(|e| bad(format!("subscriptionTypesEnabled: {e}")))?;
    strobe_tenancy::subscription_types_refused(Some(&set))
        .map_err(|e| bad(format!("subscriptionTypesEnabled: {e}")))?;
    Ok(set)
}

fn retention(body: &Bytes) -> ApiResult<RetentionPolicies> {
    let r: RetentionPolicies =
        serde_json::from_slice(body).map_err(|e| bad(format!("retention: {e}")))?;
    if r.retention_time_in_minutes < -1 || r.retention_size_in_mb < -1 {
        return Err(ApiError(
            412,
            "retention: time and size must be -1 (no limit) or more".into(),
        ));
    }
    Ok(r)
}

fn threshold(body: &Bytes) -> ApiResult<i64> {
    let v: i64 = parse_scalar(body, "compactionThreshold")?;
    if v < 0 {
        return Err(ApiError(
            412,
            "compactionThreshold must be 0 or more".into(),
        ));
    }
    Ok(v)
}

#[derive(Deserialize)]
struct QuotaQuery {
    #[serde(rename = "backlogQuotaType")]
    backlog_quota_type: Option<String>,
}

/// Pulsar's `BacklogQuotaType` (default `destination_storage`).
fn quota_type(q: &QuotaQuery) -> ApiResult<String> {
    match q.backlog_quota_type.as_deref() {
        None | Some("destination_storage") => Ok("destination_storage".into()),
        Some("message_age") => Ok("message_age".into()),
        Some(other) => Err(bad(format!(
            "backlogQuotaType {other:?}: expected destination_storage or message_age"
        ))),
    }
}

async fn get_quotas(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    Query(q): Query<AppliedQuery>,
) -> ApiResult<axum::Json<Value>> {
    topic_must_exist(&s, &name).await?;
    let mut map = s.topic_policies(&name).backlog_quota_map;
    if q.applied.unwrap_or(false) {
        // Each type the topic does not set comes from its namespace.
        let ns = s.namespace_policies(name.namespace()).unwrap_or_default();
        for (k, v) in ns.backlog_quota_map {
            map.entry(k).or_insert(v);
        }
    }
    Ok(axum::Json(json!(map)))
}

async fn set_quota(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    Query(q): Query<QuotaQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    let kind = quota_type(&q)?;
    let mut quota: BacklogQuotaJson =
        serde_json::from_slice(&body).map_err(|e| bad(format!("backlogQuota: {e}")))?;
    if !matches!(
        quota.policy.as_str(),
        "producer_request_hold" | "producer_exception" | "consumer_backlog_eviction"
    ) {
        return Err(bad(format!(
            "backlogQuota: policy {:?} is none of producer_request_hold, producer_exception, \
             consumer_backlog_eviction",
            quota.policy
        )));
    }
    if kind == "destination_storage" && quota.limit_size.is_none() {
        quota.limit_size = quota.limit;
    }
    change(&s, &name, move |p| {
        p.backlog_quota_map.insert(kind, quota);
    })
    .await
}

async fn del_quota(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    Query(q): Query<QuotaQuery>,
) -> ApiResult<Response> {
    let kind = quota_type(&q)?;
    change(&s, &name, move |p| {
        p.backlog_quota_map.remove(&kind);
    })
    .await
}

async fn get_properties(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
) -> ApiResult<axum::Json<Value>> {
    topic_must_exist(&s, &name).await?;
    Ok(axum::Json(json!(s.topic_policies(&name).properties)))
}

/// Adds (or replaces) the properties of the body, keeping the others.
async fn put_properties(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    body: Bytes,
) -> ApiResult<Response> {
    let add: std::collections::BTreeMap<String, String> =
        serde_json::from_slice(&body).map_err(|e| bad(format!("properties: {e}")))?;
    change(&s, &name, move |p| p.properties.extend(add)).await
}

#[derive(Deserialize)]
struct KeyQuery {
    key: Option<String>,
}

async fn remove_property(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
    Query(q): Query<KeyQuery>,
) -> ApiResult<Response> {
    let key = q
        .key
        .ok_or_else(|| bad("removing a topic property needs ?key=..."))?;
    change(&s, &name, move |p| {
        p.properties.remove(&key);
    })
    .await
}

async fn change(
    s: &Svc,
    name: &TopicName,
    f: impl FnOnce(&mut TopicPolicies) + Send,
) -> ApiResult<Response> {
    s.update_topic_policies(name, f).await?;
    Ok(no_content())
}
