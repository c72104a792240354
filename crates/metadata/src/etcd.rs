//! The etcd backend (feature `etcd`).
//!
//! - CAS: every write is an etcd transaction whose compares are `version == 0` (must not exist)
//!   or `mod_revision == v` (expected version). When a compare fails, the `else` branch reads every
//!   key of the transaction in the same transaction, so the error names the first failing
//!   operation against a consistent state.
//! - Sessions are leases; ephemeral keys are puts bound to the lease.
//! - A watch is one etcd watch per prefix. Its feeder remembers the next revision it owes the
//!   consumer and, when the connection breaks (etcd restarted, network), re-creates the watch from
//!   that revision: events are neither missed nor repeated. Only etcd's own compaction past that
//!   revision ends the watch, with [`MetadataError::Compacted`].
//! - An optional root prefix namespaces every key (tests share one etcd this way).

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::{MetadataError, Result};
use crate::etcd_call::{backend, idempotent, stat_of};
use crate::store::{
    EventKind, KeyValue, LeaseGrant, LeaseId, MetadataStore, Op, OpResult, Revision, Scan, Stat,
    TxnResponse, Versioned, WATCH_CHANNEL, WatchBatch, WatchEvent, WatchStream, validate_ops,
    validate_prefix,
};

/// How to reach etcd.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// Client URLs, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// A prefix put in front of every key (no trailing `/`), or empty.
    pub root: String,
    /// Deadline of each unary request.
    pub request_timeout: Duration,
    /// Deadline of establishing a connection.
    pub connect_timeout: Duration,
}

impl EtcdOptions {
    /// Options for these endpoints with default timeouts and no root prefix.
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        EtcdOptions {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            root: String::new(),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
        }
    }

    /// Parses a comma-separated endpoint list (the `ETCD_ENDPOINTS` format).
    pub fn from_list(list: &str) -> Self {
        Self::new(list.split(',').map(str::trim).filter(|s| !s.is_empty()))
    }

    /// Namespaces every key under `root` (e.g. `/strobe-test-1`).
    pub fn with_root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into().trim_end_matches('/').to_string();
        self
    }
}

/// The etcd [`MetadataStore`].
pub struct EtcdStore {
    client: Client,
    opts: EtcdOptions,
    /// TTLs of the leases this store granted (keep-alive answers report them).
    ttls: Mutex<HashMap<LeaseId, Duration>>,
    /// Transactions sent (see [`MetadataStore::writes_made`]).
    writes: std::sync::atomic::AtomicU64,
    /// Microseconds those transactions took, from send to answer (see [`MetadataStore::write_time`]).
    write_micros: std::sync::atomic::AtomicU64,
    /// Concurrent single-key reads, grouped (see `etcd_reads`).
    reads: std::sync::Arc<crate::etcd_reads::ReadGroups>,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.opts.endpoints)
            .field("root", &self.opts.root)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects to etcd.
    pub async fn connect(opts: EtcdOptions) -> Result<EtcdStore> {
        if opts.endpoints.is_empty() {
            return Err(MetadataError::Backend("no etcd endpoints given".into()));
        }
        let copts = ConnectOptions::new()
            .with_connect_timeout(opts.connect_timeout)
            // HTTP/2 pings detect a dead peer on idle watch and keep-alive streams.
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true);
        let client = tokio::time::timeout(
            opts.connect_timeout + Duration::from_secs(1),
            Client::connect(opts.endpoints.clone(), Some(copts)),
        )
        .await
        .map_err(|_| {
            MetadataError::Backend(format!("etcd connect to {:?} timed out", opts.endpoints))
        })?
        .map_err(backend)?;
        Ok(EtcdStore {
            reads: crate::etcd_reads::ReadGroups::new(client.kv_client(), opts.request_timeout),
            client,
            opts,
            ttls: Mutex::new(HashMap::new()),
            writes: Default::default(),
            write_micros: Default::default(),
        })
    }

    fn full(&self, key: &str) -> String {
        format!("{}{}", self.opts.root, key)
    }

    fn strip(&self, key: &[u8]) -> Option<String> {
        let key = std::str::from_utf8(key).ok()?;
        key.strip_prefix(self.opts.root.as_str())
            .map(str::to_string)
    }

    async fn timed<T>(
        &self,
        fut: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        tokio::time::timeout(self.opts.request_timeout, fut)
            .await
            .map_err(|_| MetadataError::Backend("etcd request timed out".into()))?
            .map_err(backend)
    }

    /// [`idempotent`] within this store's request timeout.
    async fn idempotent<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        idempotent(self.opts.request_timeout, op).await
    }

    /// Requests that single-key reads took so far (a group of concurrent reads is one).
    pub fn read_requests(&self) -> u64 {
        self.reads.sent()
    }

    /// The current revision of the etcd cluster.
    pub async fn revision(&self) -> Result<Revision> {
        let resp = self
            .idempotent(|| {
                let mut kv = self.client.kv_client();
                let key = self.full("/");
                async move { kv.get(key, Some(GetOptions::new().with_count_only())).await }
            })
            .await?;
        Ok(resp.header().map_or(0, |h| h.revision() as u64))
    }
}

#[async_trait]
impl MetadataStore for EtcdStore {
    fn backend_name(&self) -> &'static str {
        "etcd"
    }

    fn writes_made(&self) -> u64 {
        self.writes.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn write_time(&self) -> Duration {
        Duration::from_micros(self.write_micros.load(std::sync::atomic::Ordering::Relaxed))
    }

    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        crate::store::validate_key(key)?;
        tracing::trace!(key, "etcd get");
        let full = self.full(key);
        self.reads
            .get(full.clone(), || async {
                let resp = self
                    .idempotent(|| {
                        let mut kv = self.client.kv_client();
                        let key = full.clone();
                        async move { kv.get(key, None).await }
                    })
                    .await?;
                Ok(resp.kvs().first().map(|kv| Versioned {
                    value: kv.value().to_vec(),
                    stat: stat_of(kv),
                }))
            })
            .await
    }

    async fn scan_prefix(&self, prefix: &str) -> Result<Scan> {
        validate_prefix(prefix)?;
        tracing::trace!(prefix, "etcd scan");
        let resp = self
            .idempotent(|| {
                let mut kv = self.client.kv_client();
                let key = self.full(prefix);
                async move { kv.get(key, Some(GetOptions::new().with_prefix())).await }
            })
            .await?;
        let entries = resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                Some(KeyValue {
                    key: self.strip(kv.key())?,
                    value: kv.value().to_vec(),
                    stat: stat_of(kv),
                })
            })
            .collect();
        Ok(Scan {
            revision: resp.header().map_or(0, |h| h.revision() as u64),
            entries,
        })
    }

    async fn list_keys(&self, prefix: &str) -> Result<Vec<String>> {
        validate_prefix(prefix)?;
        tracing::trace!(prefix, "etcd list keys");
        let resp = self
            .idempotent(|| {
                let mut kv = self.client.kv_client();
                let key = self.full(prefix);
                async move {
                    kv.get(key, Some(GetOptions::new().with_prefix().with_keys_only()))
                        .await
                }
            })
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| self.strip(kv.key()))
            .collect())
    }

    async fn txn(&self, ops: Vec<Op>) -> Result<TxnResponse> {
        validate_ops(&ops)?;
        tracing::trace!(
            first = ops.first().map(Op::key),
            ops = ops.len(),
            "etcd txn"
        );
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut compares = Vec::new();
        let mut then = Vec::new();
        let mut otherwise = Vec::new();
        for op in &ops {
            let key = self.full(op.key());
            let expect = match op {
                Op::Put { expect, .. } | Op::Check { expect, .. } => Some(*expect),
                Op::Delete {
                    version: Some(v), ..
                } => Some(crate::Expect::Version(*v)),
                Op::Delete { version: None, .. } => {
                    compares.push(Compare::version(key.clone(), CompareOp::Greater, 0));
                    None
                }
            };
            match expect {
                Some(crate::Expect::Absent) => {
                    compares.push(Compare::version(key.clone(), CompareOp::Equal, 0))
                }
                Some(crate::Expect::Version(v)) => compares.push(Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    v as i64,
                )),
                Some(crate::Expect::Any) | None => {}
            }
            match op {
                Op::Put { value, lease, .. } => {
                    let mut po = PutOptions::new().with_prev_key();
                    if let Some(l) = lease {
                        po = po.with_lease(*l);
                    }
                    then.push(TxnOp::put(key.clone(), value.clone(), Some(po)));
                }
                Op::Delete { .. } => then.push(TxnOp::delete(key.clone(), None)),
                Op::Check { .. } => {}
            }
            otherwise.push(TxnOp::get(key, None));
        }
        let txn = Txn::new().when(compares).and_then(then).or_else(otherwise);
        let mut kv = self.client.kv_client();
        let sent = std::time::Instant::now();
        let resp = self.timed(kv.txn(txn)).await;
        self.write_micros.fetch_add(
            sent.elapsed().as_micros() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        let resp = resp?;
        let revision = resp.header().map_or(0, |h| h.revision() as u64);
        let responses = resp.op_responses();
        if !resp.succeeded() {
            // The else branch read every key: find the first operation whose condition fails.
            for (op, r) in ops.iter().zip(&responses) {
                let current = match r {
                    TxnOpResponse::Get(g) => g.kvs().first().map(stat_of),
                    _ => None,
                };
                op.check_against(current.as_ref())?;
            }
            return Err(MetadataError::Backend(
                "etcd transaction failed without a failed check".into(),
            ));
        }
        let mut results = Vec::with_capacity(ops.len());
        let mut writes = responses.iter();
        for op in &ops {
            match op {
                Op::Put { lease, .. } => {
                    let created = match writes.next() {
                        Some(TxnOpResponse::Put(p)) => p
                            .prev_key()
                            .map_or(revision, |prev| prev.create_revision() as u64),
                        _ => revision,
                    };
                    results.push(OpResult::Put(Stat {
                        version: revision,
                        created,
                        lease: *lease,
                    }));
                }
                Op::Delete { .. } => {
                    writes.next();
                    results.push(OpResult::Delete);
                }
                Op::Check { .. } => results.push(OpResult::Check),
            }
        }
        Ok(TxnResponse { revision, results })
    }

    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream> {
        validate_prefix(prefix)?;
        let from = if from_revision == 0 {
            self.revision().await? + 1
        } else {
            from_revision
        };
        let (tx, rx) = mpsc::channel(WATCH_CHANNEL);
        let cancel = CancellationToken::new();
        tokio::spawn(feed_watch(
            self.client.clone(),
            self.opts.root.clone(),
            self.full(prefix),
            from,
            tx,
            cancel.clone(),
        ));
        Ok(WatchStream::new(rx, Some(cancel.drop_guard())))
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseGrant> {
        let secs = ttl.as_secs_f64().ceil().max(1.0) as i64;
        // Sent again, a grant that did take effect leaves a lease no one
        // keeps alive: it expires.
        let resp = self
            .idempotent(|| {
                let mut lc = self.client.lease_client();
                async move { lc.grant(secs, None).await }
            })
            .await?;
        let granted = Duration::from_secs(resp.ttl().max(1) as u64);
        self.ttls.lock().insert(resp.id(), granted);
        Ok(LeaseGrant {
            id: resp.id(),
            ttl: granted,
        })
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Option<Duration>> {
        let mut lc = self.client.lease_client();
        // One request/response on a fresh keep-alive stream: the client refuses a TTL <= 0
        // ("lease not found"), so success means renewed. Short-lived streams survive reconnects.
        match tokio::time::timeout(self.opts.request_timeout, lc.keep_alive(lease)).await {
            Err(_) => Err(MetadataError::Backend("etcd keep-alive timed out".into())),
            Ok(Ok(_)) => {
                let ttl = self.ttls.lock().get(&lease).copied();
                match ttl {
                    Some(ttl) => Ok(Some(ttl)),
                    None => {
                        let resp = self.timed(lc.time_to_live(lease, None)).await?;
                        Ok((resp.granted_ttl() > 0)
                            .then(|| Duration::from_secs(resp.granted_ttl() as u64)))
                    }
                }
            }
            Ok(Err(e)) if e.to_string().contains("lease not found") => {
                self.ttls.lock().remove(&lease);
                Ok(None)
            }
            Ok(Err(e)) => Err(backend(e)),
        }
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        let mut lc = self.client.lease_client();
        self.ttls.lock().remove(&lease);
        match self.timed(lc.revoke(lease)).await {
            Ok(_) | Err(MetadataError::SessionExpired) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Feeds one watcher from an etcd watch, re-creating it from the next owed revision after any
/// disconnect.
async fn feed_watch(
    client: Client,
    root: String,
    full_prefix: String,
    mut next: Revision,
    tx: mpsc::Sender<Result<WatchBatch>>,
    cancel: CancellationToken,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(next as i64);
        let mut wc = client.watch_client();
        let created = tokio::select! {
            _ = cancel.cancelled() => return,
            r = tokio::time::timeout(Duration::from_secs(5), wc.watch(full_prefix.clone(), Some(opts))) => r,
        };
        let mut stream = match created {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(prefix = %full_prefix, error = %e, "etcd watch could not be created; retrying");
                sleep_or_cancel(&cancel, &mut backoff).await;
                continue;
            }
            Err(_) => {
                tracing::debug!(prefix = %full_prefix, "etcd watch creation timed out; retrying");
                sleep_or_cancel(&cancel, &mut backoff).await;
                continue;
            }
        };
        loop {
            let msg = tokio::select! {
                _ = cancel.cancelled() => return,
                m = stream.message() => m,
            };
            let resp = match msg {
                Ok(Some(resp)) => resp,
                Ok(None) => {
                    tracing::info!(prefix = %full_prefix, next, "etcd watch stream ended; resuming");
                    break;
                }
                Err(e) => {
                    tracing::info!(prefix = %full_prefix, next, error = %e, "etcd watch broke; resuming");
                    break;
                }
            };
            if resp.compact_revision() > 0 {
                let err = MetadataError::Compacted {
                    requested: next,
                    compacted: resp.compact_revision() as u64,
                };
                let _ = tx.send(Err(err)).await;
                return;
            }
            if resp.canceled() {
                tracing::info!(prefix = %full_prefix, reason = resp.cancel_reason(), "etcd cancelled the watch; resuming");
                break;
            }
            backoff = Duration::from_millis(50);
            // Group events by revision: one batch per committed transaction.
            let mut batches: Vec<WatchBatch> = Vec::new();
            for ev in resp.events() {
                let Some(kv) = ev.kv() else { continue };
                let rev = kv.mod_revision() as u64;
                if rev < next {
                    continue; // already delivered before a reconnect
                }
                let Some(key) = std::str::from_utf8(kv.key())
                    .ok()
                    .and_then(|k| k.strip_prefix(root.as_str()))
                    .map(str::to_string)
                else {
                    continue;
                };
                let event = match ev.event_type() {
                    EventType::Put => WatchEvent {
                        kind: if kv.version() == 1 {
                            EventKind::Created
                        } else {
                            EventKind::Modified
                        },
                        key,
                        value: Some(kv.value().to_vec()),
                        stat: Some(stat_of(kv)),
                    },
                    EventType::Delete => WatchEvent {
                        kind: EventKind::Deleted,
                        key,
                        value: None,
                        stat: None,
                    },
                };
                match batches.last_mut() {
                    Some(b) if b.revision == rev => b.events.push(event),
                    _ => batches.push(WatchBatch {
                        revision: rev,
                        events: vec![event],
                    }),
                }
            }
            for batch in batches {
                let rev = batch.revision;
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    sent = tx.send(Ok(batch)) => if sent.is_err() { return },
                }
                next = rev + 1;
            }
        }
        sleep_or_cancel(&cancel, &mut backoff).await;
    }
}

async fn sleep_or_cancel(cancel: &CancellationToken, backoff: &mut Duration) {
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::time::sleep(*backoff) => {}
    }
    *backoff = (*backoff * 2).min(Duration::from_secs(1));
}
