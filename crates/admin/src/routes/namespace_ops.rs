//! A namespace's remaining policies and operations (Pulsar's
//! `NamespacesBase`): the subscription types allowed, delayed delivery,
//! creating topics and
//! subscriptions on first use, user properties,
//! the replication clusters of a single-cluster system, and clearing the
//! backlog of, or unsubscribing, a subscription on every topic of the
//! namespace or of one of its bundles.

use axum::routing::post;
use strobe_broker::subscription::AdminOp as Op;

use super::topic_policies::sub_types;
use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    let ns = |p: &str| format!("/admin/v2/namespaces/{{tenant}}/{{ns}}/{p}");
    Router::new()
        .route(
            &ns("subscriptionTypesEnabled"),
            get(get_sub_types).post(set_sub_types).delete(del_sub_types),
        )
        .route(
            &ns("properties"),
            get(get_properties)
                .put(put_properties)
                .delete(clear_properties),
        )
        .route(
            &ns("property/{key}"),
            get(get_property).delete(remove_property),
        )
        .route(
            &ns("property/{key}/{value}"),
            axum::routing::put(set_property),
        )
        .route(
            &ns("replication"),
            get(get_replication).post(set_replication),
        )
        .route(
            &ns("schemaAutoUpdateCompatibilityStrategy"),
            get(get_auto_update).put(set_auto_update),
        )
        .route(
            &ns("delayedDelivery"),
            get(get_delayed).post(set_delayed).delete(del_delayed),
        )
        .route(
            &ns("maxUnackedMessagesPerConsumer"),
            get(get_unacked_consumer)
                .post(set_unacked_consumer)
                .delete(del_unacked_consumer),
        )
        .route(
            &ns("maxUnackedMessagesPerSubscription"),
            get(get_unacked_sub)
                .post(set_unacked_sub)
                .delete(del_unacked_sub),
        )
        .route(
            &ns("encryptionRequired"),
            get(get_encryption).post(set_encryption),
        )
        .route(
            &ns("autoTopicCreation"),
            get(get_auto_topic)
                .post(set_auto_topic)
                .delete(del_auto_topic),
        )
        .route(
            &ns("autoSubscriptionCreation"),
            get(get_auto_sub).post(set_auto_sub).delete(del_auto_sub),
        )
        .route(&ns("clearBacklog"), post(clear_ns))
        .route(&ns("clearBacklog/{sub}"), post(clear_ns_sub))
        .route(&ns("{bundle}/clearBacklog"), post(clear_bundle))
        .route(&ns("{bundle}/clearBacklog/{sub}"), post(clear_bundle_sub))
        .route(&ns("{bundle}/topicHashPositions"), get(hash_positions))
        .route(&ns("{bundle}"), axum::routing::delete(delete_bundle))
        .route(&ns("unsubscribe/{sub}"), post(unsubscribe_ns))
        .route(&ns("{bundle}/unsubscribe/{sub}"), post(unsubscribe_bundle))
}

async fn get_sub_types(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!(
        policies(&s, &t, &ns)?
            .subscription_types_enabled
            .unwrap_or_default()
    )))
}

async fn set_sub_types(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let set = sub_types(&body)?;
    update(&s, &t, &ns, move |p| {
        p.subscription_types_enabled = Some(set)
    })
    .await
}

async fn del_sub_types(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<Response> {
    update(&s, &t, &ns, |p| p.subscription_types_enabled = None).await
}

async fn get_properties(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!(policies(&s, &t, &ns)?.properties)))
}

/// Adds (or replaces) the properties of the body, keeping the others.
async fn put_properties(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let add: std::collections::BTreeMap<String, String> =
        serde_json::from_slice(&body).map_err(|e| bad(format!("properties: {e}")))?;
    update(&s, &t, &ns, move |p| p.properties.extend(add)).await
}

async fn clear_properties(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<Response> {
    update(&s, &t, &ns, |p| p.properties.clear()).await
}

async fn get_property(
    State(s): State<Svc>,
    Path((t, ns, key)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!(
        policies(&s, &t, &ns)?.properties.get(&key)
    )))
}

async fn set_property(
    State(s): State<Svc>,
    Path((t, ns, key, value)): Path<(String, String, String, String)>,
) -> ApiResult<Response> {
    update(&s, &t, &ns, move |p| {
        p.properties.insert(key, value);
    })
    .await
}

/// Answers the removed value, as Pulsar does.
async fn remove_property(
    State(s): State<Svc>,
    Path((t, ns, key)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let old = policies(&s, &t, &ns)?.properties.get(&key).cloned();
    update(&s, &t, &ns, move |p| {
        p.properties.remove(&key);
    })
    .await?;
    Ok(axum::Json(json!(old)))
}

fn auto_topic(body: &Bytes) -> ApiResult<strobe_resources::policies::AutoTopicCreation> {
    let o: strobe_resources::policies::AutoTopicCreation =
        serde_json::from_slice(body).map_err(|e| bad(format!("autoTopicCreation: {e}")))?;
    match (o.topic_type.as_str(), o.default_num_partitions) {
        ("partitioned", Some(n)) if n > 0 => Ok(o),
        ("partitioned", _) => Err(bad(
            "autoTopicCreation: defaultNumPartitions must be 1 or more for partitioned topics",
        )),
        ("non-partitioned", None) => Ok(o),
        ("non-partitioned", Some(_)) => Err(bad(
            "autoTopicCreation: defaultNumPartitions is not allowed for non-partitioned topics",
        )),
        (other, _) => Err(bad(format!(
            "autoTopicCreation: topicType {other:?}: expected partitioned or non-partitioned"
        ))),
    }
}

policy_field!(
    get_auto_topic,
    set_auto_topic,
    del_auto_topic,
    auto_topic_creation,
    auto_topic
);

policy_field!(
    get_auto_sub,
    set_auto_sub,
    del_auto_sub,
    auto_subscription_creation,
    |b: &Bytes| serde_json::from_slice::<strobe_tenancy::AutoSubscriptionCreation>(b)
        .map_err(|e| bad(format!("autoSubscriptionCreation: {e}")))
);

policy_field!(
    get_auto_update,
    set_auto_update,
    _del_auto_update,
    schema_auto_update_compatibility_strategy,
    |b: &Bytes| {
        let name: String = parse_scalar(b, "schemaAutoUpdateCompatibilityStrategy")?;
        strobe_schema::AutoUpdateStrategy::from_name(&name)
            .map_err(|e| bad(format!("schemaAutoUpdateCompatibilityStrategy: {e}")))?;
        Ok::<_, ApiError>(name)
    }
);

policy_field!(
    get_delayed,
    set_delayed,
    del_delayed,
    delayed_delivery_policies,
    super::topic_policies::delayed
);

policy_field!(
    get_unacked_consumer,
    set_unacked_consumer,
    del_unacked_consumer,
    max_unacked_messages_per_consumer,
    |b: &Bytes| super::topic_policies::unacked(b, "maxUnackedMessagesPerConsumer")
);

policy_field!(
    get_unacked_sub,
    set_unacked_sub,
    del_unacked_sub,
    max_unacked_messages_per_subscription,
    |b: &Bytes| super::topic_policies::unacked(b, "maxUnackedMessagesPerSubscription")
);

policy_field!(
    get_encryption,
    set_encryption,
    _del_encryption,
    encryption_required,
    |b: &Bytes| parse_scalar::<bool>(b, "encryptionRequired")
);

/// A Strobe cluster is one Pulsar cluster: a namespace replicates to it alone.
async fn get_replication(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<axum::Json<Vec<String>>> {
    let p = policies(&s, &t, &ns)?;
    Ok(axum::Json(
        p.replication_clusters
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| vec![s.config.cluster_name.clone()]),
    ))
}

async fn set_replication(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let clusters: Vec<String> =
        serde_json::from_slice(&body).map_err(|e| bad(format!("replication clusters: {e}")))?;
    if clusters.iter().any(|c| *c != s.config.cluster_name) {
        return Err(ApiError(
            405,
            format!(
                "geo-replication is not supported by Strobe: a namespace is served by its one \
                 cluster, {}",
                s.config.cluster_name
            ),
        ));
    }
    update(&s, &t, &ns, move |p| {
        p.replication_clusters = Some(clusters)
    })
    .await
}

/// What to do on each topic of a namespace (or one bundle of it).
enum Act {
    /// Clear the backlog of one subscription, or of every one.
    Clear(Option<String>),
    /// Delete one subscription (it must have no consumers).
    Unsubscribe(String),
}

/// 404 unless namespace `ns` exists and `bundle` is one of its bundles.
fn check_bundle(s: &Svc, ns: &str, bundle: &str) -> ApiResult<()> {
    if !s.namespace_exists(ns) {
        return Err(ApiError(404, format!("namespace {ns} does not exist")));
    }
    s.bundles(ns)?.range_of(bundle).map_err(BrokerError::from)?;
    Ok(())
}

/// The topics of namespace `ns` (404 if there is none), or of one of its
/// bundles (which must be one of them).
async fn topics_in(s: &Svc, ns: &str, bundle: Option<&str>) -> ApiResult<Vec<TopicName>> {
    match bundle {
        Some(b) => check_bundle(s, ns, b)?,
        None if !s.namespace_exists(ns) => {
            return Err(ApiError(404, format!("namespace {ns} does not exist")));
        }
        None => {}
    }
    let mut out = Vec::new();
    for name in s.topics_of_namespace(ns, true, true).await? {
        let Ok(name) = TopicName::parse(&name) else {
            continue;
        };
        if bundle.is_none_or(|b| s.bundle_of(&name).is_ok_and(|of| of == b)) {
            out.push(name);
        }
    }
    Ok(out)
}

async fn each_topic(s: &Svc, ns: String, bundle: Option<String>, act: Act) -> ApiResult<Response> {
    for name in topics_in(s, &ns, bundle.as_deref()).await? {
        let topic = s.topic(&name, false).await?;
        let subs = match &act {
            Act::Clear(None) => topic.all_subscription_names(),
            Act::Clear(Some(sub)) | Act::Unsubscribe(sub) => {
                if !topic.all_subscription_names().contains(sub) {
                    continue;
                }
                vec![sub.clone()]
            }
        };
        for sub in subs {
            let h = topic.subscription_for_admin(&sub).await?;
            match &act {
                Act::Clear(_) => {
                    h.admin(Op::ClearBacklog).await?;
                }
                Act::Unsubscribe(_) => h.delete().await?,
            }
        }
    }
    Ok(no_content())
}

async fn clear_ns(
    State(s): State<Svc>,
    Path((t, ns)): Path<(String, String)>,
) -> ApiResult<Response> {
    each_topic(&s, format!("{t}/{ns}"), None, Act::Clear(None)).await
}

async fn clear_ns_sub(
    State(s): State<Svc>,
    Path((t, ns, sub)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    each_topic(&s, format!("{t}/{ns}"), None, Act::Clear(Some(sub))).await
}

async fn clear_bundle(
    State(s): State<Svc>,
    Path((t, ns, b)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    each_topic(&s, format!("{t}/{ns}"), Some(b), Act::Clear(None)).await
}

async fn clear_bundle_sub(
    State(s): State<Svc>,
    Path((t, ns, b, sub)): Path<(String, String, String, String)>,
) -> ApiResult<Response> {
    each_topic(&s, format!("{t}/{ns}"), Some(b), Act::Clear(Some(sub))).await
}

async fn unsubscribe_ns(
    State(s): State<Svc>,
    Path((t, ns, sub)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    each_topic(&s, format!("{t}/{ns}"), None, Act::Unsubscribe(sub)).await
}

async fn unsubscribe_bundle(
    State(s): State<Svc>,
    Path((t, ns, b, sub)): Path<(String, String, String, String)>,
) -> ApiResult<Response> {
    each_topic(&s, format!("{t}/{ns}"), Some(b), Act::Unsubscribe(sub)).await
}

/// Pulsar's `TopicHashPositions`: where each topic (`?topics=` names, or
/// every topic of the bundle) falls in the namespace's hash space, the
/// CRC-32 of its name that picks its bundle.
async fn hash_positions(
    State(s): State<Svc>,
    Path((t, ns, bundle)): Path<(String, String, String)>,
    Query(q): Query<Vec<(String, String)>>,
) -> ApiResult<axum::Json<Value>> {
    let namespace = format!("{t}/{ns}");
    let mut asked: Vec<String> = q
        .into_iter()
        .filter(|(k, _)| k == "topics")
        .map(|(_, v)| v)
        .collect();
    // Names asked for need only the bundle checked; none: the bundle's topics.
    if asked.is_empty() {
        asked = topics_in(&s, &namespace, Some(&bundle))
            .await?
            .iter()
            .map(ToString::to_string)
            .collect();
    } else {
        check_bundle(&s, &namespace, &bundle)?;
    }
    let mut out = serde_json::Map::new();
    for name in asked {
        let full = if name.contains("://") {
            name.clone()
        } else {
            format!("persistent://{namespace}/{name}")
        };
        let Ok(topic) = TopicName::parse(&full) else {
            return Err(bad(format!("{name} is no topic name")));
        };
        if s.bundle_of(&topic)? == bundle {
            out.insert(name, json!(strobe_resources::bundles::topic_hash(&full)));
        }
    }
    Ok(axum::Json(json!({
        "namespace": namespace,
        "bundle": bundle,
        "topicHashPositions": out,
    })))
}

/// Pulsar's delete of a namespace bundle: refused while the bundle holds
/// topics (409), unless `force`, which deletes them. The bundle itself is a
/// hash range of the namespace and stays one.
async fn delete_bundle(
    State(s): State<Svc>,
    Path((t, ns, bundle)): Path<(String, String, String)>,
    Query(q): Query<ForceQuery>,
) -> ApiResult<Response> {
    let namespace = format!("{t}/{ns}");
    let held = topics_in(&s, &namespace, Some(&bundle)).await?;
    if !held.is_empty() && !q.force.unwrap_or(false) {
        return Err(ApiError(
            409,
            format!(
                "Cannot delete non empty bundle {namespace}/{bundle}: it holds {} topics",
                held.len()
            ),
        ));
    }
    for topic in held {
        s.delete_topic(&topic, true).await?;
    }
    Ok(no_content())
}
