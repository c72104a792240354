//! The accept loop (Pulsar's `BrokerService` listener) and the shutdown tree.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::cnx;
use crate::config::BrokerConfig;

/// State shared by every connection of one broker.
#[derive(Debug)]
pub(crate) struct Shared {
    pub config: BrokerConfig,
}

/// A broker bound to its port but not yet serving.
#[derive(Debug)]
pub struct Broker {
    shared: Arc<Shared>,
    listener: TcpListener,
}

impl Broker {
    /// Binds the binary-protocol listener. Port 0 picks a free port.
    pub async fn bind(config: BrokerConfig) -> Result<Broker, crate::BrokerError> {
        let addr = config
            .broker_listen_addr()
            .map_err(|e| crate::BrokerError::NotAllowed(e.to_string()))?;
        let listener = TcpListener::bind(addr).await?;
        Ok(Broker {
            shared: Arc::new(Shared { config }),
            listener,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Starts serving. The handle stops the broker.
    pub fn start(self) -> BrokerHandle {
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let addr = self.local_addr();
        let accept = tokio::spawn(accept_loop(self, shutdown.clone(), tracker.clone()));
        BrokerHandle {
            addr,
            shutdown,
            tracker,
            accept,
        }
    }
}

/// A running broker.
#[derive(Debug)]
pub struct BrokerHandle {
    addr: SocketAddr,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    accept: JoinHandle<()>,
}

impl BrokerHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes every connection and waits for their tasks.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        if let Err(e) = self.accept.await {
            warn!(error = %e, "accept loop ended abnormally");
        }
        self.tracker.close();
        self.tracker.wait().await;
        info!("broker stopped");
    }
}

async fn accept_loop(broker: Broker, shutdown: CancellationToken, tracker: TaskTracker) {
    let Broker { shared, listener } = broker;
    let slots = Arc::new(Semaphore::new(shared.config.max_connections));
    info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "accepting Pulsar connections");
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Usually EMFILE or a connection reset before accept; keep serving.
                warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            warn!(%peer, limit = shared.config.max_connections, "connection refused: too many connections");
            drop(stream);
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            warn!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let shared = shared.clone();
        let token = shutdown.child_token();
        tracker.spawn(async move {
            cnx::serve(stream, peer, shared, token).await;
            drop(slot);
        });
    }
    info!("stopped accepting connections");
}
