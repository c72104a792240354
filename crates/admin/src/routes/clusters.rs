//! Clusters and tenants (Pulsar's `ClustersBase` and `TenantsBase`).

use crate::api::*;

/// This resource's routes.
pub(crate) fn routes() -> Router<Svc> {
    Router::new()
        .route("/admin/v2/clusters", get(clusters))
        .route(
            "/admin/v2/clusters/{cluster}",
            get(cluster)
                .put(put_cluster)
                .post(put_cluster)
                .delete(delete_cluster),
        )
        .route("/admin/v2/tenants", get(tenants))
        .route(
            "/admin/v2/tenants/{tenant}",
            get(tenant)
                .put(create_tenant)
                .post(update_tenant)
                .delete(delete_tenant),
        )
}

async fn clusters(State(s): State<Svc>) -> axum::Json<Vec<String>> {
    axum::Json(vec![s.config.cluster_name.clone()])
}

/// The one cluster a Strobe cluster serves cannot go (Pulsar refuses to
/// delete a cluster its namespaces use, 412); any other does not exist.
async fn delete_cluster(State(s): State<Svc>, Path(c): Path<String>) -> ApiError {
    if c == s.config.cluster_name {
        ApiError(
            412,
            format!("cluster {c} is the cluster this broker serves: it cannot be deleted"),
        )
    } else {
        ApiError(404, format!("cluster {c} does not exist"))
    }
}

async fn cluster(State(s): State<Svc>, Path(c): Path<String>) -> ApiResult<axum::Json<Value>> {
    if c != s.config.cluster_name {
        return Err(ApiError(404, format!("cluster {c} does not exist")));
    }
    let mut v = json!({
        "serviceUrl": format!("http://{}:{}", s.config.advertised_address, s.config.http_port),
        "brokerServiceUrl": s.service_url(),
    });
    if let Some(tls) = s.service_url_tls() {
        v["brokerServiceUrlTls"] = json!(tls);
    }
    if s.config.http_port_tls != 0 {
        v["serviceUrlTls"] = json!(format!(
            "https://{}:{}",
            s.config.advertised_address, s.config.http_port_tls
        ));
    }
    Ok(axum::Json(v))
}

/// This broker serves one cluster; re-declaring it (as Pulsar's test setups do) is accepted.
async fn put_cluster(State(s): State<Svc>, Path(c): Path<String>) -> ApiResult<Response> {
    if c != s.config.cluster_name {
        return Err(bad(format!(
            "this broker is cluster {}; it cannot serve cluster {c}",
            s.config.cluster_name
        )));
    }
    Ok(no_content())
}

async fn tenants(State(s): State<Svc>) -> ApiResult<axum::Json<Vec<String>>> {
    Ok(axum::Json(s.tenants().await?))
}

async fn tenant(State(s): State<Svc>, Path(t): Path<String>) -> ApiResult<axum::Json<TenantInfo>> {
    Ok(axum::Json(s.tenant(&t).await?))
}

async fn create_tenant(
    State(s): State<Svc>,
    Path(t): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    s.put_tenant(&t, &parse_json(&body)?, false).await?;
    Ok(no_content())
}

async fn update_tenant(
    State(s): State<Svc>,
    Path(t): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    s.put_tenant(&t, &parse_json(&body)?, true).await?;
    Ok(no_content())
}

async fn delete_tenant(State(s): State<Svc>, Path(t): Path<String>) -> ApiResult<Response> {
    s.delete_tenant(&t).await?;
    Ok(no_content())
}
