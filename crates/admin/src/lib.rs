//! Strobe's HTTP port: the admin API on Pulsar's paths (`/admin/v2/...`, the
//! REST side of Pulsar's `BrokersBase`, `TenantsBase`, `NamespacesBase`,
//! `PersistentTopicsBase`), HTTP lookups (`/lookup/v2/topic/...`, Pulsar's
//! `TopicLookup`), health checks and Prometheus `/metrics`.
//!
//! Handlers only translate HTTP to calls on [`BrokerService`]; every decision
//! stays in the broker. Errors answer with Pulsar's status codes and a JSON
//! body `{"reason": "..."}`, built in one place ([`ApiError`]).
//!
//! Each resource's handlers and paths are in `routes/` (brokers, clusters and
//! tenants, namespaces, topics, subscriptions, schemas, lookup); `metrics`
//! renders `/metrics`; `auth` is the authentication and authorization layer
//! in front of every route.

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::info;

mod api;
mod auth;
mod metrics;
mod metrics_only;
mod owner;
mod routes;

use api::Svc;
pub use auth::{PeerInfo, TlsListener};
use metrics::metrics;

/// Serves until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    service: Svc,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    info!(addr = %listener.local_addr()?, "admin HTTP API listening");
    axum::serve(
        listener,
        router(service).into_make_service_with_connect_info::<PeerInfo>(),
    )
    .with_graceful_shutdown(async move { shutdown.cancelled().await })
    .await
}

/// Serves HTTPS (the broker's TLS configuration; client certificates are the
/// "tls" provider's credentials) until `shutdown` is cancelled.
pub async fn serve_tls(
    listener: TcpListener,
    service: Svc,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let Some(cfg) = service.security.tls.clone() else {
        return Err(std::io::Error::other(
            "the HTTPS port needs tls_certificate_file and tls_key_file",
        ));
    };
    info!(addr = %listener.local_addr()?, "admin HTTPS API listening");
    let listener = TlsListener::new(listener, strobe_security::acceptor(cfg))?;
    axum::serve(
        listener,
        router(service).into_make_service_with_connect_info::<PeerInfo>(),
    )
    .with_graceful_shutdown(async move { shutdown.cancelled().await })
    .await
}

/// Every route of the HTTP port, behind the authentication and
/// authorization layer.
pub fn router(service: Svc) -> Router {
    let mut api = Router::new()
        .route("/metrics", get(metrics))
        .route("/metrics/", get(metrics));
    for routes in [
        routes::brokers::routes(),
        routes::broker_stats::routes(),
        routes::clusters::routes(),
        routes::namespaces::routes(),
        routes::namespace_ops::routes(),
        routes::topics::routes(),
        routes::tenancy::routes(),
        routes::topic_policies::routes(),
        routes::subscriptions::routes(),
        routes::messages::routes(),
        routes::schemas::routes(),
        routes::lookup::routes(),
        routes::transactions::routes(),
        routes::scalable::routes(),
        routes::segments::routes(),
        routes::unsupported::routes(),
    ] {
        api = api.merge(routes);
    }
    // Layers run outside in: authentication first, then the owner redirect.
    api.layer(axum::middleware::from_fn_with_state(
        service.clone(),
        owner::layer,
    ))
    .layer(axum::middleware::from_fn_with_state(
        service.clone(),
        auth::layer,
    ))
    .with_state(service)
}

/// The HTTPS port end to end: TLS in front of the router, client
/// certificates as the peer's role.
#[cfg(test)]
mod tls_tests {
    use std::net::SocketAddr;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use axum::serve::Listener;
    use tokio::net::TcpStream;

    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use strobe_broker::{Broker, BrokerConfig};
    use strobe_security::tls::rustls::pki_types::ServerName;
    use strobe_security::tls::tokio_rustls::TlsConnector;
    use strobe_security::{ClientAuth, client_config, server_config};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_util::sync::CancellationToken;

    use super::*;

    fn write(dir: &Path, name: &str, contents: String) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    /// A CA, a "localhost" server certificate and a client certificate
    /// for the role "alice", all as PEM files: (ca, server cert, server
    /// key, client cert, client key).
    fn pki(dir: &Path) -> [PathBuf; 5] {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let leaf = |name: &str, cn: &str| {
            let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &ca).unwrap();
            (
                write(dir, &format!("{name}.pem"), cert.pem()),
                write(dir, &format!("{name}.key"), key.serialize_pem()),
            )
        };
        let (server_cert, server_key) = leaf("server", "localhost");
        let (client_cert, client_key) = leaf("client", "alice");
        let ca = write(dir, "ca.pem", ca.pem());
        [ca, server_cert, server_key, client_cert, client_key]
    }

    async fn get_metrics(addr: SocketAddr) -> String {
        let client = client_config(None, None, true, false).unwrap();
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut tls = TlsConnector::from(client)
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        tls.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        tls.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn a_silent_client_does_not_hold_up_other_https_clients() {
        let dir = tempfile::tempdir().unwrap();
        let [_, cert, key, _, _] = pki(dir.path());
        let config = BrokerConfig {
            storage: "memory".into(),
            advertised_address: "127.0.0.1".into(),
            // Only makes the broker build its TLS configuration: the test
            // binds the HTTPS listener itself.
            http_port_tls: 1,
            tls_certificate_file: cert.display().to_string(),
            tls_key_file: key.display().to_string(),
            ..BrokerConfig::default()
        };
        let binary = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let broker = Broker::bind_on(config, binary).await.unwrap().start();
        let https = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = https.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(crate::serve_tls(https, broker.service(), stop.clone()));

        // Connected first, so a serial accept would start on it and wait
        // for its handshake until the timeout.
        let silent = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;

        let answer = tokio::time::timeout(Duration::from_secs(2), get_metrics(addr))
            .await
            .expect("an HTTPS request answered while a silent client is connected");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

        drop(silent);
        stop.cancel();
        server.await.unwrap().unwrap();
        broker.shutdown().await;
    }

    #[tokio::test]
    async fn client_certificates_reach_the_peer_info() {
        let dir = tempfile::tempdir().unwrap();
        let [ca, cert, key, client_cert, client_key] = pki(dir.path());
        let server = server_config(&cert, &key, Some(&ca), ClientAuth::Optional).unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut listener = TlsListener::new(tcp, strobe_security::acceptor(server)).unwrap();
        let addr = listener.local_addr().unwrap().addr;

        let with_cert = client_config(None, Some((&client_cert, &client_key)), true, false);
        let without = client_config(None, None, true, false);
        for (client, expected) in [(with_cert.unwrap(), 1), (without.unwrap(), 0)] {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let name = ServerName::try_from("localhost").unwrap();
            let (client, (_, peer)) = tokio::join!(
                TlsConnector::from(client).connect(name, tcp),
                listener.accept()
            );
            client.unwrap();
            assert_eq!(peer.certs.len(), expected);
            if expected == 1 {
                assert_eq!(
                    strobe_security::peer_role(&peer.certs).as_deref(),
                    Some("alice")
                );
            }
        }
    }
}
