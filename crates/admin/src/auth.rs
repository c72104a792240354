//! Authentication and authorization of HTTP requests, and the TLS listener of
//! the HTTPS port. Every request is authenticated the way Pulsar's web
//! service does it (the `Authorization` header, the TLS client certificate, or
//! the anonymous role); the path and method then say which permission it needs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::{IncomingStream, Listener};
use strobe_broker::BrokerError;
use strobe_broker::security::Operation;
use strobe_model::TopicName;
use strobe_security::tls::rustls::pki_types::CertificateDer;
use strobe_security::tls::tokio_rustls::{TlsAcceptor, server::TlsStream};
use tokio::net::{TcpListener, TcpStream};
use tracing::warn;

use crate::{ApiError, Svc};

/// Who is on the other end of an HTTP connection.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub addr: SocketAddr,
    /// The verified client certificates of an HTTPS connection.
    pub certs: Arc<Vec<CertificateDer<'static>>>,
}

impl Connected<IncomingStream<'_, TcpListener>> for PeerInfo {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        PeerInfo {
            addr: *stream.remote_addr(),
            certs: Arc::new(Vec::new()),
        }
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for PeerInfo {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// The HTTPS listener: TCP accept, then the TLS handshake (bounded in time,
/// so a silent client cannot hold the port).
pub struct TlsListener {
    pub listener: TcpListener,
    pub acceptor: TlsAcceptor,
}

impl std::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsListener")
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = PeerInfo;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = match self.listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "HTTPS accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match tokio::time::timeout(Duration::from_secs(10), self.acceptor.accept(stream)).await
            {
                Ok(Ok(tls)) => {
                    let certs = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
                        .unwrap_or_default();
                    return (
                        tls,
                        PeerInfo {
                            addr,
                            certs: Arc::new(certs),
                        },
                    );
                }
                Ok(Err(e)) => warn!(%addr, error = %e, "HTTPS handshake failed"),
                Err(_) => warn!(%addr, "HTTPS handshake timed out"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(PeerInfo {
            addr: self.listener.local_addr()?,
            certs: Arc::new(Vec::new()),
        })
    }
}

/// The permission a request needs, from its method and path.
fn required(method: &axum::http::Method, path: &str) -> Option<Need> {
    let seg: Vec<&str> = path.trim_matches('/').split('/').collect();
    let read = method == axum::http::Method::GET;
    let ns = |t: &str, n: &str| format!("{t}/{n}");
    let topic =
        |d: &str, t: &str, n: &str, x: &str| TopicName::parse(&format!("{d}://{t}/{n}/{x}")).ok();
    Some(match seg.as_slice() {
        // Open to everyone, as in Pulsar (metrics are not authenticated by default).
        ["metrics"] | ["metrics", ""] | ["status.html"] => return None,
        ["admin", "v2", "brokers", "ready" | "live"] => return None,
        ["admin", "v2", "brokers", ..] => Need::Op(OpNeed::AdminTenant),
        ["admin", "v2", "clusters", ..] if read => Need::Authenticated,
        ["admin", "v2", "clusters", ..] => Need::Op(OpNeed::AdminTenant),
        ["admin", "v2", "tenants", t] if read => Need::Op(OpNeed::AdminNamespace(format!("{t}/"))),
        ["admin", "v2", "tenants", ..] => Need::Op(OpNeed::AdminTenant),
        ["admin", "v2", "namespaces", t] => Need::Op(OpNeed::AdminNamespace(format!("{t}/"))),
        ["admin", "v2", "namespaces", t, n, "topics"] => Need::Op(OpNeed::ListTopics(ns(t, n))),
        ["admin", "v2", "namespaces", t, n, ..] => Need::Op(OpNeed::AdminNamespace(ns(t, n))),
        ["admin", "v2", "schemas", t, n, x, ..] if read => match topic("persistent", t, n, x) {
            Some(tn) => Need::Op(OpNeed::Lookup(tn)),
            None => Need::Op(OpNeed::AdminNamespace(ns(t, n))),
        },
        ["admin", "v2", "schemas", t, n, ..] => Need::Op(OpNeed::AdminNamespace(ns(t, n))),
        ["admin", "v2", "persistent" | "non-persistent", t, n] => {
            Need::Op(OpNeed::ListTopics(ns(t, n)))
        }
        [
            "admin",
            "v2",
            d @ ("persistent" | "non-persistent"),
            t,
            n,
            x,
            "partitions",
        ] if read => match topic(d, t, n, x) {
            Some(tn) => Need::Op(OpNeed::Lookup(tn)),
            None => Need::Op(OpNeed::AdminNamespace(ns(t, n))),
        },
        ["admin", "v2", "persistent" | "non-persistent", t, n, ..] => {
            Need::Op(OpNeed::AdminNamespace(ns(t, n)))
        }
        ["lookup", "v2", "topic", d, t, n, x, ..] => match topic(d, t, n, x) {
            Some(tn) => Need::Op(OpNeed::Lookup(tn)),
            None => Need::Authenticated,
        },
        _ => Need::Op(OpNeed::AdminTenant),
    })
}

#[derive(Debug)]
enum Need {
    Authenticated,
    Op(OpNeed),
}

#[derive(Debug)]
enum OpNeed {
    Lookup(TopicName),
    ListTopics(String),
    AdminNamespace(String),
    AdminTenant,
}

/// The middleware: 401 when authentication fails, 403 when the role lacks the permission.
pub async fn layer(State(s): State<Svc>, req: Request, next: Next) -> Response {
    let Some(need) = required(req.method(), req.uri().path()) else {
        return next.run(req).await;
    };
    let (method_header, authorization) = {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        (header("X-Pulsar-Auth-Method-Name"), header("Authorization"))
    };
    let certs = req
        .extensions()
        .get::<ConnectInfo<PeerInfo>>()
        .map(|p| p.0.certs.clone())
        .unwrap_or_default();
    let authn = s.security.authenticator.authenticate_http(
        method_header.as_deref(),
        authorization.as_deref(),
        &certs,
        SystemTime::now(),
    );
    let role = match authn {
        Ok(a) => a.role,
        Err(e) => {
            return ApiError(401, format!("authentication required: {e}")).into_response();
        }
    };
    if let Need::Op(op) = &need {
        let op = match op {
            OpNeed::Lookup(t) => Operation::Lookup(t),
            OpNeed::ListTopics(ns) => Operation::ListTopics(ns),
            OpNeed::AdminNamespace(ns) => Operation::AdminNamespace(ns),
            OpNeed::AdminTenant => Operation::AdminTenant,
        };
        match s.authorize(role.as_deref(), op).await {
            Ok(()) => {}
            // An unknown tenant is the handler's 404 to give.
            Err(BrokerError::TopicNotFound(_)) => {}
            Err(e) => return ApiError::from(e).into_response(),
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn paths_map_to_permissions() {
        let need = |m: Method, p: &str| format!("{:?}", required(&m, p));
        assert_eq!(need(Method::GET, "/metrics"), "None");
        assert!(need(Method::PUT, "/admin/v2/tenants/x").contains("AdminTenant"));
        assert!(need(Method::GET, "/admin/v2/tenants/x").contains("AdminNamespace(\"x/\")"));
        assert!(
            need(
                Method::GET,
                "/admin/v2/persistent/public/default/t/partitions"
            )
            .contains("Lookup")
        );
        assert!(
            need(
                Method::PUT,
                "/admin/v2/persistent/public/default/t/partitions"
            )
            .contains("AdminNamespace(\"public/default\")")
        );
        assert!(need(Method::GET, "/lookup/v2/topic/persistent/a/b/c").contains("Lookup"));
        assert!(need(Method::GET, "/admin/v2/namespaces/a/b/topics").contains("ListTopics"));
        assert!(need(Method::GET, "/admin/v2/brokers/health").contains("AdminTenant"));
        assert_eq!(need(Method::GET, "/admin/v2/brokers/ready"), "None");
    }
}
