//! Pulsar's `BrokerStats` resource: this broker's metrics as JSON, the
//! stats of the topics it serves by namespace and bundle, and its load.

use std::collections::BTreeMap;

use super::topics::stats_json;
use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    Router::new()
        .route("/admin/v2/broker-stats/metrics", get(metrics))
        .route("/admin/v2/broker-stats/topics", get(topics))
        .route("/admin/v2/broker-stats/load-report", get(load_report))
}

/// The `/metrics` page in Pulsar's JSON form: one object per label set
/// (`dimensions`) with the values of every metric that has it (`metrics`).
async fn metrics(State(s): State<Svc>) -> axum::Json<Vec<Value>> {
    let mut by_labels: BTreeMap<String, (Value, serde_json::Map<String, Value>)> = BTreeMap::new();
    for line in crate::metrics::render(&s).lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let entry = by_labels.entry(labels.to_owned()).or_insert_with(|| {
            let mut dims = serde_json::Map::new();
            for kv in labels.split("\",").filter(|kv| !kv.is_empty()) {
                if let Some((k, v)) = kv.split_once('=') {
                    dims.insert(k.to_owned(), json!(v.trim_matches('"')));
                }
            }
            (Value::Object(dims), serde_json::Map::new())
        });
        entry.1.insert(name.to_owned(), json!(value));
    }
    axum::Json(
        by_labels
            .into_values()
            .map(|(dimensions, metrics)| json!({ "dimensions": dimensions, "metrics": metrics }))
            .collect(),
    )
}

/// The topics this broker serves: namespace, then bundle, then domain, then
/// each topic's stats.
async fn topics(State(s): State<Svc>) -> ApiResult<axum::Json<Value>> {
    let mut out = serde_json::Map::new();
    for t in s.loaded_topics() {
        let bundle = s.bundle_of(&t.name)?;
        let domain = if t.name.is_persistent() {
            "persistent"
        } else {
            "non-persistent"
        };
        let ns = out
            .entry(t.name.namespace().to_owned())
            .or_insert_with(|| json!({}));
        ns[&bundle][domain][t.name.to_string()] = stats_json(&t).await;
    }
    Ok(axum::Json(Value::Object(out)))
}

/// Pulsar's `LocalBrokerData`, from the topics this broker serves: their
/// count, producers, consumers, bundles and rates.
async fn load_report(State(s): State<Svc>) -> ApiResult<axum::Json<Value>> {
    let (mut producers, mut consumers) = (0usize, 0usize);
    let (mut rate_in, mut rate_out, mut tput_in, mut tput_out) = (0.0, 0.0, 0.0, 0.0);
    let mut bundles = BTreeSet::new();
    let topics = s.loaded_topics();
    for t in &topics {
        let st = stats_json(t).await;
        producers += st["publishers"].as_array().map_or(0, Vec::len);
        if let Some(subs) = st["subscriptions"].as_object() {
            consumers += subs
                .values()
                .map(|v| v["consumers"].as_array().map_or(0, Vec::len))
                .sum::<usize>();
        }
        rate_in += st["msgRateIn"].as_f64().unwrap_or(0.0);
        rate_out += st["msgRateOut"].as_f64().unwrap_or(0.0);
        tput_in += st["msgThroughputIn"].as_f64().unwrap_or(0.0);
        tput_out += st["msgThroughputOut"].as_f64().unwrap_or(0.0);
        bundles.insert(format!("{}/{}", t.name.namespace(), s.bundle_of(&t.name)?));
    }
    let web = format!(
        "http://{}:{}",
        s.config.advertised_address, s.config.http_port
    );
    Ok(axum::Json(json!({
        "webServiceUrl": web,
        "pulsarServiceUrl": s.service_url(),
        "numTopics": topics.len(),
        "numProducers": producers,
        "numConsumers": consumers,
        "numBundles": bundles.len(),
        "bundles": bundles,
        "msgRateIn": rate_in,
        "msgRateOut": rate_out,
        "msgThroughputIn": tput_in,
        "msgThroughputOut": tput_out,
        "lastUpdate": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    })))
}
