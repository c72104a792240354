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
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::task::AbortOnDropHandle;
use tracing::warn;

use crate::api::{ApiError, Svc};

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

/// How many TLS handshakes may run at once. Past it the listener stops
/// accepting, and new connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 256;

/// How long a client may take over its handshake before it is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTPS listener. A background task accepts TCP connections and runs
/// each one's TLS handshake as a task of its own (at most [`MAX_HANDSHAKES`]
/// at once, each bounded in time), so a client that connects and stays silent
/// holds up only its own connection; finished TLS streams come to
/// [`Listener::accept`] through a bounded channel. Dropping the listener
/// stops the accept task and every handshake still under way.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, PeerInfo)>,
    local: SocketAddr,
    _accepting: AbortOnDropHandle<()>,
}

impl TlsListener {
    /// Starts accepting on `listener` (needs a tokio runtime).
    pub fn new(listener: TcpListener, acceptor: TlsAcceptor) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        // Small: axum takes streams off as fast as they come, and a full
        // channel only makes finished handshakes keep their permits a while.
        let (tx, ready) = mpsc::channel(32);
        let accepting = AbortOnDropHandle::new(tokio::spawn(accept_loop(listener, acceptor, tx)));
        Ok(TlsListener {
            ready,
            local,
            _accepting: accepting,
        })
    }
}

impl std::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsListener")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

/// Accepts TCP connections for as long as the listener lives, one handshake
/// task per connection once a handshake permit is free.
async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<(TlsStream<TcpStream>, PeerInfo)>,
) {
    let permits = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    // Owning the handshakes here means they are aborted with this task.
    let mut handshakes = JoinSet::new();
    let mut errors = strobe_broker::accept::AcceptErrors::new("HTTPS");
    loop {
        while handshakes.try_join_next().is_some() {}
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (stream, addr) = match listener.accept().await {
            Ok(s) => {
                errors.accepted();
                s
            }
            Err(e) => {
                tokio::time::sleep(errors.failed(&e)).await;
                continue;
            }
        };
        handshakes.spawn(handshake(
            acceptor.clone(),
            stream,
            addr,
            tx.clone(),
            permit,
        ));
    }
}

/// One connection's TLS handshake; the permit is held until the stream is
/// handed over or dropped.
async fn handshake(
    acceptor: TlsAcceptor,
    stream: TcpStream,
    addr: SocketAddr,
    tx: mpsc::Sender<(TlsStream<TcpStream>, PeerInfo)>,
    _permit: OwnedSemaphorePermit,
) {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            let certs = tls
                .get_ref()
                .1
                .peer_certificates()
                .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
                .unwrap_or_default();
            let peer = PeerInfo {
                addr,
                certs: Arc::new(certs),
            };
            // A closed channel means the server is shutting down.
            let _ = tx.send((tls, peer)).await;
        }
        Ok(Err(e)) => warn!(%addr, error = %e, "HTTPS handshake failed"),
        Err(_) => warn!(%addr, "HTTPS handshake timed out"),
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = PeerInfo;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            None => {
                // The accept task only ends by panicking; axum's accept has
                // no way to report that, so the port goes quiet.
                tracing::error!(addr = %self.local, "the HTTPS accept task ended");
                std::future::pending().await
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(PeerInfo {
            addr: self.local,
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
        // Scalable topics: listing as topics are listed; split and merge
        // are the superuser's (as Pulsar's); the rest the namespace admin's.
        ["admin", "v2", "scalable", t, n] => Need::Op(OpNeed::ListTopics(ns(t, n))),
        ["admin", "v2", "scalable", _, _, _, "split" | "merge", ..] => {
            Need::Op(OpNeed::AdminTenant)
        }
        ["admin", "v2", "scalable", t, n, ..] => Need::Op(OpNeed::AdminNamespace(ns(t, n))),
        // What controllers ask of segments' owners: the superuser's.
        ["admin", "v2", "segments", ..] => Need::Op(OpNeed::AdminTenant),
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
