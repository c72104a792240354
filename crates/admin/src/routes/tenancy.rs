//! The policies operators of a shared cluster set (issue 44): publish,
//! dispatch and subscribe rates, producer, consumer, subscription and topic
//! counts, and inactive-topic deletion, on a namespace
//! (`/admin/v2/namespaces/{t}/{ns}/...`) and on a single topic
//! (`/admin/v2/{domain}/{t}/{ns}/{topic}/...`, Pulsar's topic-level
//! policies), with Pulsar's paths and JSON shapes. A namespace keeps its
//! rates by cluster name, as Pulsar does; these routes read and write this
//! broker's cluster's.

use strobe_tenancy::{DispatchRate, InactiveTopicPolicies, PublishRate, SubscribeRate};

use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    let ns = |p: &str| format!("/admin/v2/namespaces/{{tenant}}/{{ns}}/{p}");
    let topic = |p: &str| format!("/admin/v2/{{domain}}/{{tenant}}/{{ns}}/{{topic}}/{p}");
    Router::new()
        .route(
            &ns("publishRate"),
            get(ns_get_publish)
                .post(ns_set_publish)
                .delete(ns_del_publish),
        )
        .route(
            &ns("dispatchRate"),
            get(ns_get_dispatch)
                .post(ns_set_dispatch)
                .delete(ns_del_dispatch),
        )
        .route(
            &ns("subscriptionDispatchRate"),
            get(ns_get_sub_dispatch)
                .post(ns_set_sub_dispatch)
                .delete(ns_del_sub_dispatch),
        )
        .route(
            &ns("subscribeRate"),
            get(ns_get_subscribe)
                .post(ns_set_subscribe)
                .delete(ns_del_subscribe),
        )
        .route(
            &ns("maxProducersPerTopic"),
            get(ns_get_max_producers)
                .post(ns_set_max_producers)
                .delete(ns_del_max_producers),
        )
        .route(
            &ns("maxConsumersPerTopic"),
            get(ns_get_max_consumers)
                .post(ns_set_max_consumers)
                .delete(ns_del_max_consumers),
        )
        .route(
            &ns("maxConsumersPerSubscription"),
            get(ns_get_max_sub_consumers)
                .post(ns_set_max_sub_consumers)
                .delete(ns_del_max_sub_consumers),
        )
        .route(
            &ns("maxSubscriptionsPerTopic"),
            get(ns_get_max_subs)
                .post(ns_set_max_subs)
                .delete(ns_del_max_subs),
        )
        .route(
            &ns("maxTopicsPerNamespace"),
            get(ns_get_max_topics)
                .post(ns_set_max_topics)
                .delete(ns_del_max_topics),
        )
        .route(
            &ns("inactiveTopicPolicies"),
            get(ns_get_inactive)
                .post(ns_set_inactive)
                .delete(ns_del_inactive),
        )
        .route(
            &topic("publishRate"),
            get(t_get_publish).post(t_set_publish).delete(t_del_publish),
        )
        .route(
            &topic("dispatchRate"),
            get(t_get_dispatch)
                .post(t_set_dispatch)
                .delete(t_del_dispatch),
        )
        .route(
            &topic("subscriptionDispatchRate"),
            get(t_get_sub_dispatch)
                .post(t_set_sub_dispatch)
                .delete(t_del_sub_dispatch),
        )
        .route(
            &topic("subscribeRate"),
            get(t_get_subscribe)
                .post(t_set_subscribe)
                .delete(t_del_subscribe),
        )
        .route(
            &topic("maxProducers"),
            get(t_get_max_producers)
                .post(t_set_max_producers)
                .delete(t_del_max_producers),
        )
        .route(
            &topic("maxConsumers"),
            get(t_get_max_consumers)
                .post(t_set_max_consumers)
                .delete(t_del_max_consumers),
        )
        .route(
            &topic("maxConsumersPerSubscription"),
            get(t_get_max_sub_consumers)
                .post(t_set_max_sub_consumers)
                .delete(t_del_max_sub_consumers),
        )
        .route(
            &topic("maxSubscriptionsPerTopic"),
            get(t_get_max_subs)
                .post(t_set_max_subs)
                .delete(t_del_max_subs),
        )
        .route(
            &topic("inactiveTopicPolicies"),
            get(t_get_inactive)
                .post(t_set_inactive)
                .delete(t_del_inactive),
        )
}

fn json_body<T: for<'de> Deserialize<'de>>(body: &Bytes, what: &str) -> ApiResult<T> {
    serde_json::from_slice(body).map_err(|e| bad(format!("{what}: {e}")))
}

/// A count a policy sets: 0 or more (Pulsar answers 412 otherwise).
fn count(body: &Bytes, what: &str) -> ApiResult<i32> {
    let v: i32 = parse_scalar(body, what)?;
    if v < 0 {
        return Err(ApiError(412, format!("{what} must be 0 or more")));
    }
    Ok(v)
}

/// GET, POST and DELETE of a namespace rate kept by cluster name.
macro_rules! ns_rate {
    ($get:ident, $set:ident, $del:ident, $field:ident, $ty:ty, $name:literal) => {
        async fn $get(
            State(s): State<Svc>,
            Path((t, ns)): Path<(String, String)>,
        ) -> ApiResult<axum::Json<Value>> {
            let p = policies(&s, &t, &ns)?;
            Ok(axum::Json(json!(p.$field.get(&s.config.cluster_name))))
        }

        async fn $set(
            State(s): State<Svc>,
            Path((t, ns)): Path<(String, String)>,
            body: Bytes,
        ) -> ApiResult<Response> {
            let v: $ty = json_body(&body, $name)?;
            let cluster = s.config.cluster_name.clone();
            update(&s, &t, &ns, move |p| {
                p.$field.insert(cluster, v);
            })
            .await
        }

        async fn $del(
            State(s): State<Svc>,
            Path((t, ns)): Path<(String, String)>,
        ) -> ApiResult<Response> {
            let cluster = s.config.cluster_name.clone();
            update(&s, &t, &ns, move |p| {
                p.$field.remove(&cluster);
            })
            .await
        }
    };
}

ns_rate!(
    ns_get_publish,
    ns_set_publish,
    ns_del_publish,
    publish_max_message_rate,
    PublishRate,
    "publishRate"
);
ns_rate!(
    ns_get_dispatch,
    ns_set_dispatch,
    ns_del_dispatch,
    topic_dispatch_rate,
    DispatchRate,
    "dispatchRate"
);
ns_rate!(
    ns_get_sub_dispatch,
    ns_set_sub_dispatch,
    ns_del_sub_dispatch,
    subscription_dispatch_rate,
    DispatchRate,
    "subscriptionDispatchRate"
);
ns_rate!(
    ns_get_subscribe,
    ns_set_subscribe,
    ns_del_subscribe,
    cluster_subscribe_rate,
    SubscribeRate,
    "subscribeRate"
);

policy_field!(
    ns_get_max_producers,
    ns_set_max_producers,
    ns_del_max_producers,
    max_producers_per_topic,
    |b: &Bytes| count(b, "maxProducersPerTopic")
);
policy_field!(
    ns_get_max_consumers,
    ns_set_max_consumers,
    ns_del_max_consumers,
    max_consumers_per_topic,
    |b: &Bytes| count(b, "maxConsumersPerTopic")
);
policy_field!(
    ns_get_max_sub_consumers,
    ns_set_max_sub_consumers,
    ns_del_max_sub_consumers,
    max_consumers_per_subscription,
    |b: &Bytes| count(b, "maxConsumersPerSubscription")
);
policy_field!(
    ns_get_max_subs,
    ns_set_max_subs,
    ns_del_max_subs,
    max_subscriptions_per_topic,
    |b: &Bytes| count(b, "maxSubscriptionsPerTopic")
);
policy_field!(
    ns_get_max_topics,
    ns_set_max_topics,
    ns_del_max_topics,
    max_topics_per_namespace,
    |b: &Bytes| count(b, "maxTopicsPerNamespace")
);
policy_field!(
    ns_get_inactive,
    ns_set_inactive,
    ns_del_inactive,
    inactive_topic_policies,
    |b: &Bytes| inactive(b)
);

fn inactive(body: &Bytes) -> ApiResult<InactiveTopicPolicies> {
    let p: InactiveTopicPolicies = json_body(body, "inactiveTopicPolicies")?;
    if p.max_inactive_duration_seconds < 0 {
        return Err(ApiError(
            412,
            "inactiveTopicPolicies: maxInactiveDurationSeconds must be 0 or more".into(),
        ));
    }
    Ok(p)
}

type Ns = strobe_tenancy::NamespaceLevel;
type Broker = strobe_tenancy::BrokerLevel;

/// What a tenancy limit's `?applied=true` reads when the topic has no value
/// of its own: `f` of its namespace's level and the broker's.
fn applied(f: impl Fn(&Ns, &Broker) -> Value) -> impl Fn(&Svc, &TopicName) -> Value {
    move |s, name| {
        let ns = s.namespace_policies(name.namespace()).unwrap_or_default();
        f(&ns.level(&s.config.cluster_name), &s.config.tenancy_level())
    }
}

topic_field!(
    t_get_publish,
    t_set_publish,
    t_del_publish,
    publish_rate,
    |b: &Bytes| json_body::<PublishRate>(b, "publishRate"),
    applied(|n: &Ns, b: &Broker| json!(n.publish_rate.unwrap_or(b.publish_rate)))
);
topic_field!(
    t_get_dispatch,
    t_set_dispatch,
    t_del_dispatch,
    dispatch_rate,
    |b: &Bytes| json_body::<DispatchRate>(b, "dispatchRate"),
    applied(|n: &Ns, b: &Broker| json!(n.dispatch_rate.unwrap_or(b.dispatch_rate)))
);
topic_field!(
    t_get_sub_dispatch,
    t_set_sub_dispatch,
    t_del_sub_dispatch,
    subscription_dispatch_rate,
    |b: &Bytes| json_body::<DispatchRate>(b, "subscriptionDispatchRate"),
    applied(|n: &Ns, b: &Broker| json!(
        n.subscription_dispatch_rate
            .unwrap_or(b.subscription_dispatch_rate)
    ))
);
topic_field!(
    t_get_subscribe,
    t_set_subscribe,
    t_del_subscribe,
    subscribe_rate,
    |b: &Bytes| json_body::<SubscribeRate>(b, "subscribeRate"),
    applied(|n: &Ns, b: &Broker| json!(n.subscribe_rate.unwrap_or(b.subscribe_rate)))
);
topic_field!(
    t_get_max_producers,
    t_set_max_producers,
    t_del_max_producers,
    max_producer_per_topic,
    |b: &Bytes| count(b, "maxProducers"),
    applied(|n: &Ns, b: &Broker| json!(
        n.max_producers_per_topic
            .filter(|v| *v >= 0)
            .unwrap_or(b.max_producers_per_topic)
    ))
);
topic_field!(
    t_get_max_consumers,
    t_set_max_consumers,
    t_del_max_consumers,
    max_consumer_per_topic,
    |b: &Bytes| count(b, "maxConsumers"),
    applied(|n: &Ns, b: &Broker| json!(
        n.max_consumers_per_topic
            .filter(|v| *v >= 0)
            .unwrap_or(b.max_consumers_per_topic)
    ))
);
topic_field!(
    t_get_max_sub_consumers,
    t_set_max_sub_consumers,
    t_del_max_sub_consumers,
    max_consumers_per_subscription,
    |b: &Bytes| count(b, "maxConsumersPerSubscription"),
    applied(|n: &Ns, b: &Broker| json!(
        n.max_consumers_per_subscription
            .filter(|v| *v >= 0)
            .unwrap_or(b.max_consumers_per_subscription)
    ))
);
topic_field!(
    t_get_max_subs,
    t_set_max_subs,
    t_del_max_subs,
    max_subscriptions_per_topic,
    |b: &Bytes| count(b, "maxSubscriptionsPerTopic"),
    applied(|n: &Ns, b: &Broker| json!(
        n.max_subscriptions_per_topic
            .filter(|v| *v >= 0)
            .unwrap_or(b.max_subscriptions_per_topic)
    ))
);
topic_field!(
    t_get_inactive,
    t_set_inactive,
    t_del_inactive,
    inactive_topic_policies,
    |b: &Bytes| inactive(b),
    applied(|n: &Ns, b: &Broker| json!(
        n.inactive_topic_policies
            .unwrap_or(b.inactive_topic_policies)
    ))
);
