//! Namespaces (Pulsar's `NamespacesBase`): policies, backlog quotas,
//! permissions and bundles.

use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    Router::new()
        .route("/admin/v2/namespaces/{tenant}", get(namespaces))
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}",
            get(namespace_policies)
                .put(create_namespace)
                .delete(delete_namespace),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/topics",
            get(namespace_topics),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/deduplication",
            get(get_dedup).post(set_dedup).delete(remove_dedup),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/messageTTL",
            get(get_ttl).post(set_ttl).delete(remove_ttl),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/retention",
            get(get_retention)
                .post(set_retention)
                .delete(remove_retention),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/schemaCompatibilityStrategy",
            get(get_schema_strategy).put(set_schema_strategy),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/backlogQuotaMap",
            get(get_backlog_quotas),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/backlogQuota",
            axum::routing::post(set_backlog_quota).delete(remove_backlog_quota),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/permissions",
            get(get_permissions),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/permissions/{role}",
            axum::routing::post(grant_permission).delete(revoke_permission),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/permissions/subscription",
            get(get_subscription_permissions),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/permissions/subscription/{sub}",
            axum::routing::post(grant_subscription_permission),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/permissions/{sub}/{role}",
            axum::routing::delete(revoke_subscription_permission),
        )
        .route("/admin/v2/namespaces/{tenant}/{ns}/bundles", get(bundles))
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/unload",
            axum::routing::put(unload_namespace),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/{bundle}/unload",
            axum::routing::put(unload_bundle),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/{bundle}/split",
            axum::routing::put(split_bundle),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/compactionThreshold",
            get(get_compaction_threshold)
                .post(set_compaction_threshold)
                .put(set_compaction_threshold)
                .delete(remove_compaction_threshold),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/scalableTopicAutoScalePolicy",
            get(get_autoscale)
                .post(set_autoscale)
                .delete(remove_autoscale),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/isAllowAutoUpdateSchema",
            get(get_auto_update).post(set_auto_update),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{ns}/schemaValidationEnforced",
            get(get_validation_enforced).post(set_validation_enforced),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/permissions",
            get(get_topic_permissions),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{ns}/{topic}/permissions/{role}",
            axum::routing::post(grant_topic_permission).delete(revoke_topic_permission),
        )
}

async fn namespaces(
    State(s): State<Svc>,
    Path(t): Path<String>,
) -> ApiResult<axum::Json<Vec<String>>> {
    s.tenant(&t).await?;
    Ok(axum::Json(s.namespaces_of(&t)))
}

async fn namespace_policies(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<NamespacePolicies>> {
    let name = format!("{t}/{ns}");
    s.namespace_policies(&name)
        .map(axum::Json)
        .ok_or_else(|| ApiError(404, format!("namespace {name} does not exist")))
}

async fn create_namespace(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    s.create_namespace(&format!("{t}/{ns}"), parse_json(&body)?)
        .await?;
    Ok(no_content())
}

async fn delete_namespace(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<Response> {
    s.delete_namespace(&format!("{t}/{ns}")).await?;
    Ok(no_content())
}

#[derive(Deserialize)]
struct ModeQuery {
    mode: Option<String>,
}

async fn namespace_topics(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    Query(q): Query<ModeQuery>,
) -> ApiResult<axum::Json<Vec<String>>> {
    let name = format!("{t}/{ns}");
    if !s.namespace_exists(&name) {
        return Err(ApiError(404, format!("namespace {name} does not exist")));
    }
    let (p, np) = match q.mode.as_deref().unwrap_or("PERSISTENT") {
        "PERSISTENT" => (true, false),
        "NON_PERSISTENT" => (false, true),
        "ALL" => (true, true),
        other => {
            return Err(bad(format!(
                "mode must be PERSISTENT, NON_PERSISTENT or ALL, not {other}"
            )));
        }
    };
    Ok(axum::Json(s.topics_of_namespace(&name, p, np).await?))
}

policy_field!(
    get_dedup,
    set_dedup,
    remove_dedup,
    deduplication_enabled,
    |b: &Bytes| { parse_scalar::<bool>(b, "deduplication") }
);
policy_field!(
    get_compaction_threshold,
    set_compaction_threshold,
    remove_compaction_threshold,
    compaction_threshold,
    |b: &Bytes| { parse_scalar::<u64>(b, "compactionThreshold") }
);
policy_field!(
    get_ttl,
    set_ttl,
    remove_ttl,
    message_ttl_in_seconds,
    |b: &Bytes| { parse_scalar::<u64>(b, "messageTTL") }
);
policy_field!(
    get_retention,
    set_retention,
    remove_retention,
    retention_policies,
    |b: &Bytes| {
        serde_json::from_slice::<RetentionPolicies>(b).map_err(|e| bad(format!("retention: {e}")))
    }
);

async fn get_autoscale(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!(
        policies(&s, &t, &ns)?.scalable_topic_auto_scale_policy
    )))
}

/// Sets the namespace's override of the broker's autoscale policy, refused
/// (400) when the policy it makes is unusable, rather than stored and
/// turning autoscaling off on every tick.
async fn set_autoscale(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let o: strobe_layout::AutoScalePolicyOverride = serde_json::from_slice(&body)
        .map_err(|e| bad(format!("scalableTopicAutoScalePolicy: {e}")))?;
    if let Some(why) = o.apply(&s.broker_autoscale_policy()).invalid() {
        return Err(bad(format!("scalableTopicAutoScalePolicy: {why}")));
    }
    update(&s, &t, &ns, move |p| {
        p.scalable_topic_auto_scale_policy = Some(o).filter(|o| !o.is_empty())
    })
    .await
}

async fn remove_autoscale(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<Response> {
    update(&s, &t, &ns, |p| p.scalable_topic_auto_scale_policy = None).await
}

const STRATEGIES: &[&str] = &[
    "UNDEFINED",
    "ALWAYS_INCOMPATIBLE",
    "ALWAYS_COMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
];

async fn get_schema_strategy(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let p = policies(&s, &t, &ns)?;
    Ok(axum::Json(json!(
        p.schema_compatibility_strategy
            .unwrap_or_else(|| "UNDEFINED".into())
    )))
}

async fn set_schema_strategy(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let v: String = parse_scalar(&body, "schemaCompatibilityStrategy")?;
    if !STRATEGIES.contains(&v.as_str()) {
        return Err(bad(format!("unknown schema compatibility strategy {v:?}")));
    }
    s.update_policies(&format!("{t}/{ns}"), |p| {
        p.schema_compatibility_strategy = Some(v)
    })
    .await?;
    Ok(no_content())
}

/// GET and POST of a boolean namespace policy that reads as `default` when unset.
macro_rules! policy_flag {
    ($get:ident, $set:ident, $field:ident, $name:literal, $default:expr) => {
        async fn $get(
            State(s): State<Svc>,
            Path((t, ns)): Path<(String, String)>,
        ) -> ApiResult<axum::Json<Value>> {
            Ok(axum::Json(json!(
                policies(&s, &t, &ns)?.$field.unwrap_or($default)
            )))
        }

        async fn $set(
            State(s): State<Svc>,
            Path((t, ns)): Path<(String, String)>,
            body: Bytes,
        ) -> ApiResult<Response> {
            let v: bool = parse_scalar(&body, $name)?;
            update(&s, &t, &ns, move |p| p.$field = Some(v)).await
        }
    };
}

policy_flag!(
    get_auto_update,
    set_auto_update,
    is_allow_auto_update_schema,
    "isAllowAutoUpdateSchema",
    true
);
policy_flag!(
    get_validation_enforced,
    set_validation_enforced,
    schema_validation_enforced,
    "schemaValidationEnforced",
    false
);

// --- backlog quotas, permissions, bundles ------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QuotaQuery {
    backlog_quota_type: Option<String>,
}

fn quota_type(q: &QuotaQuery) -> ApiResult<String> {
    let t = q
        .backlog_quota_type
        .clone()
        .unwrap_or_else(|| "destination_storage".into());
    if !matches!(t.as_str(), "destination_storage" | "message_age") {
        return Err(bad(format!(
            "backlogQuotaType must be destination_storage or message_age, not {t:?}"
        )));
    }
    Ok(t)
}

async fn get_backlog_quotas(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!(policies(&s, &t, &ns)?.backlog_quota_map)))
}

async fn set_backlog_quota(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    Query(q): Query<QuotaQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    let kind = quota_type(&q)?;
    let quota: BacklogQuotaJson =
        serde_json::from_slice(&body).map_err(|e| bad(format!("backlog quota: {e}")))?;
    if !matches!(
        quota.policy.as_str(),
        "producer_request_hold" | "producer_exception" | "consumer_backlog_eviction"
    ) {
        return Err(bad(format!(
            "policy must be producer_request_hold, producer_exception or consumer_backlog_eviction, not {:?}",
            quota.policy
        )));
    }
    if kind == "message_age" && quota.limit_time.is_none() {
        return Err(bad("a message_age quota needs limitTime (seconds)"));
    }
    if kind == "destination_storage" && quota.limit_size.or(quota.limit).is_none() {
        return Err(bad("a destination_storage quota needs limitSize (bytes)"));
    }
    update(&s, &t, &ns, move |p| {
        p.backlog_quota_map.insert(kind, quota);
    })
    .await
}

async fn remove_backlog_quota(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    Query(q): Query<QuotaQuery>,
) -> ApiResult<Response> {
    let kind = quota_type(&q)?;
    update(&s, &t, &ns, move |p| {
        p.backlog_quota_map.remove(&kind);
    })
    .await
}

fn parse_actions(body: &Bytes) -> ApiResult<BTreeSet<String>> {
    let actions: BTreeSet<String> =
        serde_json::from_slice(body).map_err(|e| bad(format!("actions: {e}")))?;
    if let Some(a) = actions.iter().find(|a| !AUTH_ACTIONS.contains(&a.as_str())) {
        return Err(bad(format!(
            "unknown action {a:?}: expected some of {}",
            AUTH_ACTIONS.join(", ")
        )));
    }
    Ok(actions)
}

async fn get_permissions(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!(
        policies(&s, &t, &ns)?.auth_policies.namespace_auth
    )))
}

async fn grant_permission(
    State(s): State<Svc>,
    Path((t, ns, role)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let actions = parse_actions(&body)?;
    update(&s, &t, &ns, move |p| {
        p.auth_policies.namespace_auth.insert(role, actions);
    })
    .await
}

async fn revoke_permission(
    State(s): State<Svc>,
    Path((t, ns, role)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    update(&s, &t, &ns, move |p| {
        p.auth_policies.namespace_auth.remove(&role);
    })
    .await
}

async fn get_subscription_permissions(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!(
        policies(&s, &t, &ns)?.auth_policies.subscription_auth_roles
    )))
}

async fn grant_subscription_permission(
    State(s): State<Svc>,
    Path((t, ns, sub)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let roles: BTreeSet<String> =
        serde_json::from_slice(&body).map_err(|e| bad(format!("roles: {e}")))?;
    update(&s, &t, &ns, move |p| {
        p.auth_policies.subscription_auth_roles.insert(sub, roles);
    })
    .await
}

async fn revoke_subscription_permission(
    State(s): State<Svc>,
    Path((t, ns, sub, role)): Path<(String, String, String, String)>,
) -> ApiResult<Response> {
    update(&s, &t, &ns, move |p| {
        if let Some(roles) = p.auth_policies.subscription_auth_roles.get_mut(&sub) {
            roles.remove(&role);
        }
    })
    .await
}

async fn get_topic_permissions(
    State(s): State<Svc>,
    TopicPath(name): TopicPath,
) -> ApiResult<axum::Json<Value>> {
    let (t, ns) = name.namespace().split_once('/').unwrap_or_default();
    let p = policies(&s, t, ns)?;
    // A topic's permissions: the namespace's, plus those granted on the topic.
    let mut all = p.auth_policies.namespace_auth.clone();
    if let Some(own) = p.auth_policies.destination_auth.get(&name.to_string()) {
        for (role, actions) in own {
            all.entry(role.clone())
                .or_default()
                .extend(actions.iter().cloned());
        }
    }
    Ok(axum::Json(json!(all)))
}

async fn grant_topic_permission(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, role)): Path<(String, String, String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?.to_string();
    let actions = parse_actions(&body)?;
    update(&s, &t, &ns, move |p| {
        p.auth_policies
            .destination_auth
            .entry(name)
            .or_default()
            .insert(role, actions);
    })
    .await
}

async fn revoke_topic_permission(
    State(s): State<Svc>,
    Path((domain, t, ns, topic, role)): Path<(String, String, String, String, String)>,
) -> ApiResult<Response> {
    let name = topic_name(&domain, &t, &ns, &topic)?.to_string();
    let p = policies(&s, &t, &ns)?;
    if !p
        .auth_policies
        .destination_auth
        .get(&name)
        .is_some_and(|m| m.contains_key(&role))
    {
        return Err(ApiError(
            412,
            format!("role {role} has no permission granted on {name}"),
        ));
    }
    update(&s, &t, &ns, move |p| {
        if let Some(m) = p.auth_policies.destination_auth.get_mut(&name) {
            m.remove(&role);
            if m.is_empty() {
                p.auth_policies.destination_auth.remove(&name);
            }
        }
    })
    .await
}

async fn bundles(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!(s.bundles(&format!("{t}/{ns}"))?)))
}

async fn unload_namespace(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<Response> {
    s.unload_namespace(&format!("{t}/{ns}"), None).await?;
    Ok(no_content())
}

#[derive(Deserialize)]
struct UnloadQuery {
    #[serde(rename = "destinationBroker")]
    destination_broker: Option<String>,
}

/// Unloads a bundle. In a cluster with `destinationBroker` (a broker id or
/// its `host:webPort`) the bundle is transferred there and its clients
/// reconnect to it without a lookup (PIP-307); without one, the bundle is
/// freed and its clients look up again.
async fn unload_bundle(
    State(s): State<Svc>,
    Path((t, ns, bundle)): Path<(String, String, String)>,
    Query(q): Query<UnloadQuery>,
) -> ApiResult<Response> {
    let ns = format!("{t}/{ns}");
    // In a task of its own: an HTTP client that hangs up (its timeout, a
    // paused broker) drops this handler's future, and a move cancelled
    // half-way leaves topics closed whose clients were never told.
    let dst = q.destination_broker.filter(|d| !d.is_empty());
    run_detached(async move {
        match dst {
            Some(dst) => s.transfer_bundle(&ns, &bundle, &dst).await,
            None => s.release_bundle(&ns, &bundle).await,
        }
    })
    .await?;
    Ok(no_content())
}

/// Runs `f` to its end even if the request is dropped.
async fn run_detached<T: Send + 'static>(
    f: impl std::future::Future<Output = Result<T, strobe_broker::BrokerError>> + Send + 'static,
) -> Result<T, strobe_broker::BrokerError> {
    tokio::spawn(f).await.unwrap_or_else(|e| {
        Err(strobe_broker::BrokerError::ServiceNotReady(format!(
            "the operation's task failed: {e}"
        )))
    })
}

async fn split_bundle(
    State(s): State<Svc>,
    Path((t, ns, bundle)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let ns = format!("{t}/{ns}");
    run_detached(async move { s.split_bundle(&ns, &bundle).await }).await?;
    Ok(no_content())
}
