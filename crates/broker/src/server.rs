//! The accept loop (Pulsar's `BrokerService` listener), the storage and
//! metadata backends chosen by configuration, and the shutdown tree.

use std::net::SocketAddr;
use std::sync::Arc;

use strobe_metadata::{EmbeddedOptions, EmbeddedStore, MetadataStore};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::BrokerError;
use crate::cnx;
use crate::config::BrokerConfig;
use crate::service::BrokerService;

/// What a broker runs on.
#[derive(Debug)]
pub struct Backends {
    /// Where topics' logs and cursors live.
    pub storage: Arc<dyn strobe_ledger::LedgerBackend>,
    /// Where tenants, namespaces, policies, schemas and ownership live.
    pub metadata: Arc<dyn MetadataStore>,
    /// A cluster broker's membership (`None`: standalone, owning everything).
    pub cluster: Option<Arc<strobe_cluster::Cluster>>,
}

/// A broker bound to its port, with its storage open, not yet serving.
#[derive(Debug)]
pub struct Broker {
    service: Arc<BrokerService>,
    listener: TcpListener,
    /// The TLS listener of the binary protocol, when broker_port_tls is set.
    tls_listener: Option<TcpListener>,
}

impl Broker {
    /// Binds the binary-protocol listener (port 0 picks a free port) and opens
    /// storage and metadata under the data directory.
    pub async fn bind(config: BrokerConfig) -> Result<Broker, BrokerError> {
        let addr = config
            .broker_listen_addr()
            .map_err(|e| BrokerError::Config(e.to_string()))?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| BrokerError::Bind {
                addr: addr.to_string(),
                source,
            })?;
        Broker::bind_on(config, listener).await
    }

    /// As [`Broker::bind`], on a listener the caller bound (tests bind
    /// `127.0.0.1:0` and keep the address, so no port is guessed).
    pub async fn bind_on(
        config: BrokerConfig,
        listener: TcpListener,
    ) -> Result<Broker, BrokerError> {
        let url = config
            .storage_url()
            .map_err(|e| BrokerError::Config(e.to_string()))?;
        let tuning = strobe_ledger::FileBackendConfig {
            sync: config.sync,
            min_sync_interval: std::time::Duration::from_micros(config.sync_min_interval_us),
            max_sync_interval: std::time::Duration::from_micros(config.sync_max_interval_us),
            page_cache_window: config.page_cache_window_mb << 20,
            page_cache_budget: config.page_cache_budget_mb << 20,
            max_open_segment_files: config.max_open_segment_files,
            ..strobe_ledger::FileBackendConfig::new("")
        };
        let backend = strobe_ledger::open_backend(&url, tuning)?;
        // Metadata lives beside the data, or in memory with memory storage.
        let metadata: Arc<dyn MetadataStore> = if url == strobe_ledger::StorageUrl::Memory {
            Arc::new(EmbeddedStore::in_memory())
        } else {
            std::fs::create_dir_all(&config.data_dir)?;
            Arc::new(EmbeddedStore::open(
                config.data_dir.join("metadata"),
                EmbeddedOptions::default(),
            )?)
        };
        info!(storage = backend.kind(), sync = %config.sync, data_dir = %config.data_dir.display(), "storage open");
        Broker::bind_with(
            config,
            listener,
            Backends {
                storage: backend,
                metadata,
                cluster: None,
            },
        )
        .await
    }

    /// A broker on backends the caller opened: a cluster broker's shared
    /// storage, etcd and membership.
    pub async fn bind_with(
        config: BrokerConfig,
        listener: TcpListener,
        backends: Backends,
    ) -> Result<Broker, BrokerError> {
        let port = listener.local_addr()?.port();
        let tls_listener = if config.broker_port_tls != 0 {
            let tls_addr = format!("{}:{}", config.bind_address, config.broker_port_tls);
            Some(
                TcpListener::bind(&tls_addr)
                    .await
                    .map_err(|source| BrokerError::Bind {
                        addr: tls_addr,
                        source,
                    })?,
            )
        } else {
            None
        };
        let service = BrokerService::open(
            config,
            port,
            backends.storage,
            backends.metadata,
            backends.cluster,
        )
        .await?;
        crate::txn::start(&service).await?;
        Ok(Broker {
            service,
            listener,
            tls_listener,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn service(&self) -> Arc<BrokerService> {
        self.service.clone()
    }

    /// Starts serving. The handle stops the broker.
    pub fn start(self) -> BrokerHandle {
        let stop_accepting = CancellationToken::new();
        let connections = CancellationToken::new();
        let tracker = TaskTracker::new();
        let addr = self.local_addr();
        let service = self.service.clone();
        tokio::spawn(self.service.clone().run_background(stop_accepting.clone()));
        tokio::spawn(self.service.clone().run_disk_guard(stop_accepting.clone()));
        let slots = Arc::new(Semaphore::new(self.service.config.max_connections));
        let tls = match (self.tls_listener, self.service.security.tls.clone()) {
            (Some(l), Some(cfg)) => Some(tokio::spawn(accept_loop(
                self.service.clone(),
                l,
                Some(strobe_security::acceptor(cfg)),
                slots.clone(),
                stop_accepting.clone(),
                connections.clone(),
                tracker.clone(),
            ))),
            _ => None,
        };
        let plain = tokio::spawn(accept_loop(
            self.service.clone(),
            self.listener,
            None,
            slots,
            stop_accepting.clone(),
            connections.clone(),
            tracker.clone(),
        ));
        let accept = tokio::spawn(async move {
            let _ = plain.await;
            if let Some(t) = tls {
                let _ = t.await;
            }
        });
        BrokerHandle {
            addr,
            service,
            stop_accepting,
            connections,
            tracker,
            accept,
        }
    }
}

/// A running broker.
#[derive(Debug)]
pub struct BrokerHandle {
    addr: SocketAddr,
    service: Arc<BrokerService>,
    stop_accepting: CancellationToken,
    connections: CancellationToken,
    tracker: TaskTracker,
    accept: JoinHandle<()>,
}

impl BrokerHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn service(&self) -> Arc<BrokerService> {
        self.service.clone()
    }

    /// The shutdown tree, in order: stop accepting; close every topic (its
    /// producers get CLOSE_PRODUCER, its consumers CLOSE_CONSUMER, cursors
    /// and ledgers are flushed); close the connections; close storage.
    pub async fn shutdown(self) {
        if let Some(c) = self.service.cluster() {
            c.begin_leave();
            // PIP-307 on shutdown: the bundles move to the other brokers and
            // their clients follow without a lookup.
            self.service.hand_off_bundles().await;
        }
        self.stop_accepting.cancel();
        if let Err(e) = self.accept.await {
            warn!(error = %e, "accept loop ended abnormally");
        }
        self.service.shutdown().await;
        if let Some(c) = self.service.cluster() {
            // Bundles are released at once, so other brokers take them
            // without waiting for the lease to expire.
            c.leave().await;
        }
        self.connections.cancel();
        self.tracker.close();
        self.tracker.wait().await;
        if let Err(e) = self.service.close_storage() {
            warn!(error = %e, "closing storage failed");
        }
        info!("broker stopped");
    }
}

async fn accept_loop(
    service: Arc<BrokerService>,
    listener: TcpListener,
    tls: Option<strobe_security::tls::tokio_rustls::TlsAcceptor>,
    slots: Arc<Semaphore>,
    stop: CancellationToken,
    connections: CancellationToken,
    tracker: TaskTracker,
) {
    let max = service.config.max_connections;
    info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), tls = tls.is_some(), "accepting Pulsar connections");
    let mut errors = crate::accept::AcceptErrors::new(if tls.is_some() {
        "Pulsar TLS"
    } else {
        "Pulsar"
    });
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(s) => {
                errors.accepted();
                s
            }
            Err(e) => {
                let pause = errors.failed(&e);
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(pause) => continue,
                }
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            warn!(%peer, limit = max, "connection refused: too many connections");
            drop(stream);
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            warn!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let service = service.clone();
        let token = connections.child_token();
        let tls = tls.clone();
        tracker.spawn(async move {
            match tls {
                None => {
                    let (read, write) = stream.into_split();
                    cnx::serve(read, write, peer, Vec::new(), service, token).await;
                }
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(
                        std::time::Duration::from_secs(service.config.handshake_timeout_secs),
                        acceptor.accept(stream),
                    )
                    .await;
                    match handshake {
                        Ok(Ok(tls_stream)) => {
                            let certs: Vec<_> = tls_stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
                                .unwrap_or_default();
                            let (read, write) = tokio::io::split(tls_stream);
                            cnx::serve(read, write, peer, certs, service, token).await;
                        }
                        Ok(Err(e)) => warn!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => warn!(%peer, "TLS handshake timed out"),
                    }
                }
            }
            drop(slot);
        });
    }
    info!("stopped accepting connections");
}
