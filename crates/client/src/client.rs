//! [`Client`]: connections to a cluster's brokers, shared by every
//! producer, consumer and reader made from it, and the lookups and
//! partitioned-topic metadata they need (Pulsar's `PulsarClientImpl`). The
//! builders' constructors (`Client::producer`, `consumer`, `reader`) sit
//! beside their builders.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use strobe_wire::Command;
use strobe_wire::commands;
use strobe_wire::proto::command_lookup_topic_response::LookupType;

use crate::connection::{self, ConnOptions, Connection, Pool, socket_addr};
use crate::error::{Error, Result};
use crate::util::{Backoff, full_topic_name};

/// Builds a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    url: String,
    opts: ConnOptions,
    max_lookup_redirects: u32,
}

impl ClientBuilder {
    /// Seconds of silence before a PING, and again before the connection is
    /// given up (Pulsar's `keepAliveIntervalSeconds`, 30 by default).
    pub fn keepalive(mut self, d: Duration) -> Self {
        self.opts.keepalive = d;
        self
    }

    /// How long a request (lookup, subscribe, ...) may take (30 s by default).
    pub fn operation_timeout(mut self, d: Duration) -> Self {
        self.opts.operation_timeout = d;
        self
    }

    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.opts.connect_timeout = d;
        self
    }

    /// Authentication sent with CONNECT, e.g. `("token", b"...")`.
    pub fn auth(mut self, method: &str, data: impl Into<Bytes>) -> Self {
        self.opts.auth = Some((method.to_owned(), data.into()));
        self
    }

    /// Connects to the service URL once, so that a wrong address fails here. A URL may name
    /// several brokers (`pulsar://h1:6650,h2:6650`): the first that answers is used (the
    /// build fails only when none does), and the service connection moves to the next one
    /// when the current one fails.
    pub async fn build(self) -> Result<Client> {
        let service_addr = socket_addr(&self.url)?;
        let rest = self.url.strip_prefix("pulsar://").unwrap_or("");
        let mut service_addrs: Vec<String> = rest
            .trim_end_matches('/')
            .split(',')
            .skip(1)
            .map(|h| socket_addr(&format!("pulsar://{}", h.trim_start_matches("pulsar://"))))
            .collect::<Result<_>>()?;
        service_addrs.insert(0, service_addr);
        let inner = Arc::new(ClientInner {
            service_addrs,
            current_service: std::sync::atomic::AtomicUsize::new(0),
            pool: Pool::default(),
            opts: self.opts,
            next_id: AtomicU64::new(1),
            max_lookup_redirects: self.max_lookup_redirects,
            tc_conns: Default::default(),
            next_tc: AtomicU64::new(0),
            tc_parallelism: AtomicU64::new(0),
            tc_lock: tokio::sync::Mutex::new(()),
        });
        let mut failed = None;
        for (i, addr) in inner.service_addrs.iter().enumerate() {
            match inner.pool.get(addr, &inner.opts).await {
                Ok(_) => {
                    inner
                        .current_service
                        .store(i, std::sync::atomic::Ordering::Relaxed);
                    return Ok(Client { inner });
                }
                Err(e) => failed = Some(e),
            }
        }
        Err(failed.expect("a service URL names at least one broker"))
    }
}

#[derive(Debug)]
pub(crate) struct ClientInner {
    /// Every broker the service URL names.
    pub(crate) service_addrs: Vec<String>,
    /// The one the service connection goes to now.
    pub(crate) current_service: std::sync::atomic::AtomicUsize,
    pub(crate) pool: Pool,
    pub(crate) opts: ConnOptions,
    pub(crate) next_id: AtomicU64,
    pub(crate) max_lookup_redirects: u32,
    /// Connections to coordinator leaders, by partition (TC_CLIENT_CONNECT done).
    pub(crate) tc_conns:
        std::sync::Mutex<std::collections::HashMap<u64, Arc<connection::Connection>>>,
    /// Round robin over coordinators for new transactions.
    pub(crate) next_tc: AtomicU64,
    /// The coordinator parallelism once discovered (0: not yet).
    pub(crate) tc_parallelism: AtomicU64,
    /// Serializes coordinator discovery and connection.
    pub(crate) tc_lock: tokio::sync::Mutex<()>,
}

/// A handle on a set of connections to a Pulsar-protocol service. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

impl Client {
    /// A builder for `pulsar://host:port`.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            opts: ConnOptions {
                keepalive: Duration::from_secs(30),
                operation_timeout: Duration::from_secs(30),
                connect_timeout: Duration::from_secs(10),
                auth: None,
            },
            max_lookup_redirects: 20,
        }
    }

    /// The broker's `server_version`, from the CONNECTED of the service connection.
    pub async fn server_version(&self) -> Result<String> {
        Ok(self.service_connection().await?.server_version.clone())
    }

    /// Closes every connection. Producers and consumers still open fail.
    pub async fn close(&self) {
        self.inner.pool.close_all().await;
    }

    /// A fresh id for a producer, consumer or watcher.
    pub(crate) fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) async fn service_connection(&self) -> Result<Arc<Connection>> {
        let addrs = &self.inner.service_addrs;
        let first = self.inner.current_service.load(Ordering::Relaxed);
        let mut last_err = None;
        for i in 0..addrs.len() {
            let k = (first + i) % addrs.len();
            match self.inner.pool.get(&addrs[k], &self.inner.opts).await {
                Ok(c) => {
                    self.inner.current_service.store(k, Ordering::Relaxed);
                    return Ok(c);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or(Error::Closed))
    }

    /// The number of partitions of `topic` (0 for a non-partitioned topic).
    pub async fn partitions(&self, topic: &str) -> Result<u32> {
        let topic = full_topic_name(topic)?;
        let conn = self.service_connection().await?;
        let id = conn.next_request_id();
        match conn
            .request(id, commands::partitioned_metadata_request(id, &topic))
            .await?
        {
            Command::PartitionedMetadataResponse(r) => {
                if let Some(e) = r.error {
                    return Err(connection::server_error(e, r.message.unwrap_or_default()));
                }
                Ok(r.partitions.unwrap_or(0))
            }
            other => Err(Error::Unexpected(format!("{:?}", other.kind()))),
        }
    }

    /// The broker that serves `topic`, as `pulsar://host:port`.
    pub async fn lookup_url(&self, topic: &str) -> Result<String> {
        let topic = full_topic_name(topic)?;
        Ok(format!("pulsar://{}", self.lookup(&topic).await?.addr))
    }

    /// Finds the broker that serves `topic` (LOOKUP, following redirects) and
    /// returns a connection to it.
    pub(crate) async fn lookup(&self, topic: &str) -> Result<Arc<Connection>> {
        let mut conn = self.service_connection().await?;
        let mut authoritative = false;
        for _ in 0..=self.inner.max_lookup_redirects {
            let id = conn.next_request_id();
            let reply = conn
                .request(id, commands::lookup_topic(id, topic, authoritative))
                .await?;
            let Command::LookupResponse(r) = reply else {
                return Err(Error::Unexpected(format!("{:?} to LOOKUP", reply.kind())));
            };
            let kind = r.response.and_then(|k| LookupType::try_from(k).ok());
            match kind {
                Some(LookupType::Connect) => {
                    if r.proxy_through_service_url.unwrap_or(false) {
                        return Ok(conn);
                    }
                    let Some(url) = r.broker_service_url else {
                        return Err(Error::Lookup("Connect without a broker URL".into()));
                    };
                    let addr = socket_addr(&url)?;
                    return self.inner.pool.get(&addr, &self.inner.opts).await;
                }
                Some(LookupType::Redirect) => {
                    let Some(url) = r.broker_service_url else {
                        return Err(Error::Lookup("Redirect without a broker URL".into()));
                    };
                    authoritative = r.authoritative.unwrap_or(false);
                    conn = self
                        .inner
                        .pool
                        .get(&socket_addr(&url)?, &self.inner.opts)
                        .await?;
                }
                _ => {
                    return Err(match r.error {
                        Some(e) => connection::server_error(e, r.message.unwrap_or_default()),
                        None => Error::Lookup(r.message.unwrap_or_else(|| "failed".into())),
                    });
                }
            }
        }
        Err(Error::Lookup(format!(
            "more than {} redirects",
            self.inner.max_lookup_redirects
        )))
    }

    /// Lookup with retries and exponential backoff, for (re)connecting
    /// producers and consumers. Gives up after `deadline`.
    pub(crate) async fn lookup_with_backoff(
        &self,
        topic: &str,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Arc<Connection>> {
        let mut backoff = Backoff::new();
        loop {
            match self.lookup(topic).await {
                Ok(c) => return Ok(c),
                Err(e) if e.is_retriable() => {
                    let wait = backoff.next();
                    if deadline.is_some_and(|d| tokio::time::Instant::now() + wait > d) {
                        return Err(e);
                    }
                    tracing::debug!(topic, error = %e, ?wait, "lookup failed, retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}
