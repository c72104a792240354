//! Arbitrary bytes as the body of every admin route that reads one, sent through
//! the broker's real router (authentication and owner layers included) to a
//! standalone broker on memory storage. A bad body is a 4xx with Pulsar's
//! `{"reason": ...}`; a panic, a hang or a 5xx is a bug.
//!
//! Input: a byte that picks the route, a byte that picks the names in its path
//! (a handful, so state stays small and routes meet what earlier inputs made),
//! then the body.
#![no_main]

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{Method, Request};
use libfuzzer_sys::fuzz_target;
use strobe_broker::{Broker, BrokerConfig};
use tower::ServiceExt;

struct Fixture {
    rt: tokio::runtime::Runtime,
    router: axum::Router,
    // Kept (not leaked) so the broker's tasks and storage live as long as the
    // process and LeakSanitizer still sees them.
    _broker: strobe_broker::BrokerHandle,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (router, broker) = rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let config = BrokerConfig {
                storage: "memory".into(),
                advertised_address: "127.0.0.1".into(),
                cluster_name: "fuzz".into(),
                ..BrokerConfig::default()
            };
            let broker = Broker::bind_on(config, listener).await.unwrap().start();
            let service = broker.service();
            // A tenant and namespace of its own besides public/default, so the
            // routes above find something to change.
            let router = strobe_admin::router(service);
            for (method, uri, body) in [
                (
                    "PUT",
                    "/admin/v2/tenants/fz",
                    r#"{"allowedClusters":["fuzz"]}"#,
                ),
                ("PUT", "/admin/v2/namespaces/fz/n1", ""),
                (
                    "PUT",
                    "/admin/v2/persistent/public/default/a/partitions",
                    "2",
                ),
            ] {
                let req = Request::builder()
                    .method(method)
                    .uri(uri)
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .unwrap();
                let res = router.clone().oneshot(req).await.unwrap();
                assert!(res.status().is_success(), "{uri}: {}", res.status());
            }
            (router, broker)
        });
        Fixture {
            rt,
            router,
            _broker: broker,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let [route, names, body @ ..] = data else {
        return;
    };
    let (method, path) = strobe_fuzz::admin_request(*route, *names);
    let f = fixture();
    let req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(&path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .unwrap();
    let router = f.router.clone();
    f.rt.block_on(async move {
        let res = tokio::time::timeout(std::time::Duration::from_secs(10), router.oneshot(req))
            .await
            .expect("the admin API answers within 10 s")
            .unwrap();
        let status = res.status();
        let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap();
        assert!(
            !status.is_server_error(),
            "{method} {path} answered {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        if status.is_client_error() {
            let v: serde_json::Value = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{method} {path} {status}: body not JSON: {e}"));
            assert!(v.get("reason").is_some(), "{method} {path} {status}: {v}");
        }
    });
});
