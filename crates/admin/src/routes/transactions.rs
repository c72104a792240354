//! Transactions (Pulsar's `TransactionsBase`, `/admin/v3/transactions/...`): coordinator stats,
//! one transaction's metadata, and what a topic or subscription holds of it. Coordinator state
//! lives in the metadata store, so any broker answers the coordinator and transaction paths;
//! buffer stats come from the broker that has the topic loaded.

use strobe_model::TxnId;

use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    Router::new()
        .route("/admin/v3/transactions/coordinatorStats", get(coordinator_stats))
        .route(
            strobe_broker::txn::PUSH_PATH,
            axum::routing::post(end_on_participants),
        )
        .route(
            "/admin/v3/transactions/transactionMetadata/{most}/{least}",
            get(transaction_metadata),
        )
        .route(
            "/admin/v3/transactions/transactionBufferStats/{tenant}/{ns}/{topic}",
            get(buffer_stats),
        )
        .route(
            "/admin/v3/transactions/transactionInBufferStats/{tenant}/{ns}/{topic}/{most}/{least}",
            get(in_buffer_stats),
        )
        .route(
            "/admin/v3/transactions/transactionInPendingAckStats/{tenant}/{ns}/{topic}/{sub}/{most}/{least}",
            get(in_pending_ack_stats),
        )
}

#[derive(Deserialize)]
struct CoordinatorQuery {
    #[serde(rename = "coordinatorId")]
    coordinator_id: Option<u32>,
}

/// `{"<id>": {"state", "leastSigBits", "lowWaterMark", "ongoingTxnSize", "leader"}}`.
async fn coordinator_stats(
    State(s): State<Svc>,
    Query(q): Query<CoordinatorQuery>,
) -> ApiResult<axum::Json<Value>> {
    let stats = strobe_broker::txn::coordinator_stats(&s).await?;
    let mut out = serde_json::Map::new();
    for c in stats {
        if q.coordinator_id.is_some_and(|id| id != c.tc_id) {
            continue;
        }
        out.insert(
            c.tc_id.to_string(),
            json!({
                "state": if c.leader.is_some() { "Ready" } else { "None" },
                "leastSigBits": c.next_sequence,
                "lowWaterMark": 0,
                "ongoingTxnSize": c.ongoing,
                "leader": c.leader,
            }),
        );
    }
    if let Some(id) = q.coordinator_id
        && out.is_empty()
    {
        return Err(ApiError(
            404,
            format!("transaction coordinator {id} does not exist"),
        ));
    }
    Ok(axum::Json(Value::Object(out)))
}

fn txn(most: u64, least: u64) -> TxnId {
    TxnId {
        most_sig_bits: most,
        least_sig_bits: least,
    }
}

/// Pulsar's `TransactionMetadata`: id, status, times and participants.
async fn transaction_metadata(
    State(s): State<Svc>,
    Path((most, least)): Path<(u64, u64)>,
) -> ApiResult<axum::Json<Value>> {
    let t = txn(most, least);
    let Some(h) = strobe_broker::txn::txn_metadata(&s, t).await? else {
        return Err(ApiError(404, format!("transaction {t} not found")));
    };
    let produced: serde_json::Map<String, Value> = h
        .partitions
        .iter()
        .map(|p| (p.clone(), json!({})))
        .collect();
    let mut acked = serde_json::Map::new();
    for sub in &h.subscriptions {
        let entry = acked.entry(sub.topic.clone()).or_insert_with(|| json!({}));
        entry[sub.subscription.as_str()] = json!({});
    }
    Ok(axum::Json(json!({
        "txnId": format!("({most},{least})"),
        "status": h.state.pulsar_name(),
        "openTimestamp": h.created_at,
        "timeoutAt": h.timeout_at,
        "finalizedAt": h.finalized_at,
        "timedOut": h.timed_out,
        "owner": h.owner,
        "producedPartitions": produced,
        "ackedPartitions": acked,
    })))
}

fn loaded(s: &Svc, tenant: &str, ns: &str, topic: &str) -> ApiResult<Arc<Topic>> {
    let name = topic_name("persistent", tenant, ns, topic)?;
    s.loaded_topic(&name)
        .ok_or_else(|| ApiError(404, format!("topic {name} is not loaded on this broker")))
}

/// Pulsar's `TransactionBufferStats` of one topic.
async fn buffer_stats(
    State(s): State<Svc>,
    Path((tenant, ns, topic)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let t = loaded(&s, &tenant, &ns, &topic)?;
    let Some(st) = t.txn_stats() else {
        return Err(ApiError(
            400,
            "transactions are not enabled on this broker".into(),
        ));
    };
    Ok(axum::Json(json!({
        "state": "Ready",
        "maxReadPosition": st.max_read_position.map(|p| p.to_string()),
        "ongoingTxnSize": st.ongoing,
        "abortedTxnSize": st.aborted_kept,
        "committedTxnCount": st.committed_total,
        "abortedTxnCount": st.aborted_total,
    })))
}

/// Pulsar's `TransactionInBufferStats`: where the transaction starts in the topic, and whether
/// it aborted.
async fn in_buffer_stats(
    State(s): State<Svc>,
    Path((tenant, ns, topic, most, least)): Path<(String, String, String, u64, u64)>,
) -> ApiResult<axum::Json<Value>> {
    let t = loaded(&s, &tenant, &ns, &topic)?;
    let id = txn(most, least);
    Ok(axum::Json(json!({
        "startPosition": t.txn_first_position(id).map(|p| p.to_string()),
        "aborted": t.txn_aborted(id),
    })))
}

/// Pulsar's `TransactionInPendingAckStats`, with the held acks.
async fn in_pending_ack_stats(
    State(s): State<Svc>,
    Path((tenant, ns, topic, sub, most, least)): Path<(String, String, String, String, u64, u64)>,
) -> ApiResult<axum::Json<Value>> {
    let name = topic_name("persistent", &tenant, &ns, &topic)?;
    let acks =
        strobe_broker::txn::pending_ack_of(&s, &name.to_string(), &sub, txn(most, least)).await?;
    let acks = acks.unwrap_or_default();
    Ok(axum::Json(json!({
        "cumulativeAckPosition": acks.cumulative.map(|(l, e)| format!("{l}:{e}")),
        "individualAcks": acks
            .individual
            .iter()
            .map(|e| format!("{}:{}", e.ledger, e.entry))
            .collect::<Vec<_>>(),
    })))
}

/// A decided outcome another broker's coordinator pushes to the participants served here
/// (Pulsar's `END_TXN_ON_PARTITION` / `END_TXN_ON_SUBSCRIPTION`; see `strobe_broker::txn`'s
/// `push.rs`): answers the participants that applied it durably.
async fn end_on_participants(
    State(s): State<Svc>,
    axum::Json(push): axum::Json<strobe_broker::txn::OutcomePush>,
) -> ApiResult<axum::Json<Vec<String>>> {
    Ok(axum::Json(
        strobe_broker::txn::apply_pushed(&s, push).await?,
    ))
}
