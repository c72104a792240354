//! The schema registry (Pulsar's `SchemasResource`).

use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    Router::new()
        .route(
            "/admin/v2/schemas/{tenant}/{ns}/{topic}/schema",
            get(get_schema).post(post_schema).delete(delete_schema),
        )
        .route(
            "/admin/v2/schemas/{tenant}/{ns}/{topic}/schema/{version}",
            get(get_schema_version),
        )
        .route(
            "/admin/v2/schemas/{tenant}/{ns}/{topic}/schemas",
            get(get_all_schemas),
        )
        .route(
            "/admin/v2/schemas/{tenant}/{ns}/{topic}/compatibility",
            axum::routing::post(test_schema),
        )
        .route(
            "/admin/v2/schemas/{tenant}/{ns}/{topic}/version",
            axum::routing::post(schema_version_of),
        )
}

fn schema_topic(t: &str, ns: &str, topic: &str) -> ApiResult<TopicName> {
    topic_name("persistent", t, ns, topic)
}

/// Pulsar's `GetSchemaResponse` JSON: the definition as text (KeyValue as
/// `{"key": ..., "value": ...}`).
fn schema_json(v: strobe_schema::SchemaVersion, s: &strobe_schema::SchemaData, ts: u64) -> Value {
    let data = if s.schema_type == strobe_schema::SchemaType::KeyValue {
        strobe_schema::key_value::key_value_data_to_rest_json(s).unwrap_or_else(|_| s.data_text())
    } else {
        s.data_text()
    };
    json!({
        "version": v.0,
        "type": s.schema_type.name(),
        "timestamp": ts,
        "data": data,
        "properties": s.properties,
    })
}

/// Pulsar's `PostSchemaPayload`: `{"type": "AVRO", "schema": "...", "properties": {}}`.
#[derive(Deserialize)]
struct PostSchemaPayload {
    #[serde(rename = "type")]
    schema_type: String,
    #[serde(default)]
    schema: String,
    #[serde(default)]
    properties: std::collections::BTreeMap<String, String>,
}

fn payload_schema(body: &Bytes) -> ApiResult<strobe_schema::SchemaData> {
    let p: PostSchemaPayload =
        serde_json::from_slice(body).map_err(|e| bad(format!("schema payload: {e}")))?;
    let t = strobe_schema::SchemaType::from_name(&p.schema_type).map_err(|e| bad(e.to_string()))?;
    let data = if t == strobe_schema::SchemaType::KeyValue {
        strobe_schema::key_value::key_value_data_from_rest_json(&p.schema)
            .map_err(|e| bad(e.to_string()))?
    } else {
        p.schema.into_bytes()
    };
    Ok(strobe_schema::SchemaData::new(t, data).with_properties(p.properties))
}

async fn get_schema(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let (v, sd, ts) = s
        .schemas
        .get_schema(&schema_topic(&t, &ns, &topic)?, None)
        .await?;
    Ok(axum::Json(schema_json(v, &sd, ts)))
}

async fn get_schema_version(
    State(s): State<Svc>,
    Path((t, ns, topic, version)): Path<(String, String, String, i64)>,
) -> ApiResult<axum::Json<Value>> {
    let (v, sd, ts) = s
        .schemas
        .get_schema(
            &schema_topic(&t, &ns, &topic)?,
            Some(strobe_schema::SchemaVersion(version)),
        )
        .await?;
    Ok(axum::Json(schema_json(v, &sd, ts)))
}

async fn get_all_schemas(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<Value>> {
    let all = s
        .schemas
        .all_schemas(&schema_topic(&t, &ns, &topic)?)
        .await?;
    Ok(axum::Json(json!({
        "getSchemaResponses": all.iter().map(|(v, sd, ts)| schema_json(*v, sd, *ts)).collect::<Vec<_>>(),
    })))
}

async fn post_schema(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<axum::Json<Value>> {
    let schema = payload_schema(&body)?;
    let v = s
        .schemas
        .post_schema(&schema_topic(&t, &ns, &topic)?, &schema)
        .await?;
    Ok(axum::Json(json!({ "version": v.0 })))
}

async fn delete_schema(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
    Query(q): Query<ForceQuery>,
) -> ApiResult<axum::Json<Value>> {
    let v = s
        .schemas
        .delete_schema(&schema_topic(&t, &ns, &topic)?, q.force.unwrap_or(false))
        .await?;
    Ok(axum::Json(json!({ "version": v })))
}

async fn test_schema(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<axum::Json<Value>> {
    let schema = payload_schema(&body)?;
    let (ok, strategy) = s
        .schemas
        .test_schema(&schema_topic(&t, &ns, &topic)?, &schema)
        .await?;
    Ok(axum::Json(json!({
        "isCompatibility": ok,
        "schemaCompatibilityStrategy": strategy.name(),
    })))
}

async fn schema_version_of(
    State(s): State<Svc>,
    Path((t, ns, topic)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<axum::Json<Value>> {
    let schema = payload_schema(&body)?;
    let all = s
        .schemas
        .all_schemas(&schema_topic(&t, &ns, &topic)?)
        .await?;
    let v = all
        .iter()
        .find(|(_, sd, _)| sd.same_hash(&schema))
        .map(|(v, _, _)| v.0)
        .ok_or_else(|| ApiError(404, "no version of the topic's schema matches".into()))?;
    Ok(axum::Json(json!({ "version": v })))
}
