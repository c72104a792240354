//! The `MetadataStore` trait and its vocabulary.

use std::collections::BTreeSet;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::DropGuard;

use crate::error::{MetadataError, Result};

/// A store revision. Every committed transaction gets the next one; a key's version is the
/// revision of its last modification.
pub type Revision = u64;

/// A lease (the server side of a [`crate::Session`]). Ephemeral keys are bound to one.
pub type LeaseId = i64;

/// What a write expects to find, checked atomically with the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// No condition.
    Any,
    /// The key must not exist ("create").
    Absent,
    /// The key must exist with exactly this version.
    Version(u64),
}

/// Metadata of a stored key (Pulsar's `Stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Revision of the key's last modification (etcd `mod_revision`). The CAS token.
    pub version: u64,
    /// Revision at which the key was created (etcd `create_revision`).
    pub created: u64,
    /// The lease the key is bound to, if it is ephemeral.
    pub lease: Option<LeaseId>,
}

impl Stat {
    /// True if the key vanishes with its session.
    pub fn is_ephemeral(&self) -> bool {
        self.lease.is_some()
    }
}

/// A value with its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The stored bytes.
    pub value: Vec<u8>,
    /// Version, creation revision, lease.
    pub stat: Stat,
}

/// A key with its value and metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The full key.
    pub key: String,
    /// The stored bytes.
    pub value: Vec<u8>,
    /// Version, creation revision, lease.
    pub stat: Stat,
}

/// The result of a prefix scan: a consistent view at `revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// The store revision the scan observed. Watch from `revision + 1` to follow it without a gap.
    pub revision: Revision,
    /// Matching keys in key order.
    pub entries: Vec<KeyValue>,
}

/// One operation of a multi-key transaction. All operations of a transaction succeed together or
/// none is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Write `value` at `key` if `expect` holds; bound to `lease` if given (ephemeral).
    Put {
        /// The key.
        key: String,
        /// The new value.
        value: Vec<u8>,
        /// The condition.
        expect: Expect,
        /// The lease for an ephemeral key.
        lease: Option<LeaseId>,
    },
    /// Delete `key`, which must exist (with `version`, if given).
    Delete {
        /// The key.
        key: String,
        /// The expected version, if any.
        version: Option<u64>,
    },
    /// Only check `expect` on `key` (a fence; e.g. the leader key's version).
    Check {
        /// The key.
        key: String,
        /// The condition.
        expect: Expect,
    },
}

impl Op {
    /// An unconditional persistent put.
    pub fn put(key: impl Into<String>, value: impl Into<Vec<u8>>) -> Op {
        Op::Put {
            key: key.into(),
            value: value.into(),
            expect: Expect::Any,
            lease: None,
        }
    }

    /// A conditional persistent put.
    pub fn put_if(key: impl Into<String>, value: impl Into<Vec<u8>>, expect: Expect) -> Op {
        Op::Put {
            key: key.into(),
            value: value.into(),
            expect,
            lease: None,
        }
    }

    /// A delete of an existing key, of exactly `version` if given.
    pub fn delete(key: impl Into<String>, version: Option<u64>) -> Op {
        Op::Delete {
            key: key.into(),
            version,
        }
    }

    /// A check.
    pub fn check(key: impl Into<String>, expect: Expect) -> Op {
        Op::Check {
            key: key.into(),
            expect,
        }
    }

    /// The key this operation touches.
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. } | Op::Delete { key, .. } | Op::Check { key, .. } => key,
        }
    }

    /// The condition this operation imposes, as an [`Expect`] (a delete without a version
    /// requires existence, which `Expect` cannot say; see [`Op::check_against`]).
    pub(crate) fn check_against(&self, current: Option<&Stat>) -> Result<()> {
        let key = self.key();
        match self {
            Op::Put { expect, .. } | Op::Check { expect, .. } => {
                check_expect(key, *expect, current)
            }
            Op::Delete { version, .. } => match (current, version) {
                (None, _) => Err(MetadataError::NotFound(key.to_string())),
                (Some(_), None) => Ok(()),
                (Some(stat), Some(v)) => check_expect(key, Expect::Version(*v), Some(stat)),
            },
        }
    }
}

fn check_expect(key: &str, expect: Expect, current: Option<&Stat>) -> Result<()> {
    match (expect, current) {
        (Expect::Any, _) => Ok(()),
        (Expect::Absent, None) => Ok(()),
        (Expect::Absent, Some(_)) => Err(MetadataError::AlreadyExists(key.to_string())),
        (Expect::Version(_), None) => Err(MetadataError::NotFound(key.to_string())),
        (Expect::Version(v), Some(stat)) if stat.version == v => Ok(()),
        (Expect::Version(v), Some(stat)) => Err(MetadataError::BadVersion {
            key: key.to_string(),
            expected: v,
            found: stat.version,
        }),
    }
}

/// Checks the shape of a transaction, identically for every backend: valid keys, and at most one
/// write (put or delete) per key, as etcd requires.
pub(crate) fn validate_ops(ops: &[Op]) -> Result<()> {
    if ops.is_empty() {
        return Err(MetadataError::InvalidTxn("empty transaction".into()));
    }
    let mut written = BTreeSet::new();
    for op in ops {
        validate_key(op.key())?;
        if !matches!(op, Op::Check { .. }) && !written.insert(op.key()) {
            return Err(MetadataError::InvalidTxn(format!(
                "two writes to {}",
                op.key()
            )));
        }
    }
    Ok(())
}

/// The outcome of one operation of a successful transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpResult {
    /// The key's new metadata.
    Put(Stat),
    /// The key was deleted.
    Delete,
    /// The check held.
    Check,
}

/// A committed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResponse {
    /// The revision the transaction committed at (unchanged if it only checked).
    pub revision: Revision,
    /// One result per operation, in order.
    pub results: Vec<OpResult>,
}

/// A granted lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGrant {
    /// Its id.
    pub id: LeaseId,
    /// The TTL the server granted (it may round up the requested one).
    pub ttl: Duration,
}

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The key did not exist before.
    Created,
    /// The key existed and got a new value.
    Modified,
    /// The key was deleted (explicitly, or because its session ended).
    Deleted,
}

/// One change to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// Created, modified or deleted.
    pub kind: EventKind,
    /// The key.
    pub key: String,
    /// The new value, `None` for a delete.
    pub value: Option<Vec<u8>>,
    /// The key's new metadata, `None` for a delete.
    pub stat: Option<Stat>,
}

/// The events of one committed transaction that match a watch, all at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchBatch {
    /// The revision the transaction committed at.
    pub revision: Revision,
    /// Its events under the watched prefix, in the transaction's order.
    pub events: Vec<WatchEvent>,
}

/// A stream of [`WatchBatch`]es for a prefix, in revision order, each revision exactly once.
/// Dropping it cancels the watch. It ends with `Err(Compacted)` if the watcher fell so far behind
/// that the store no longer has the history (then re-read with a scan and watch again).
pub struct WatchStream {
    rx: mpsc::Receiver<Result<WatchBatch>>,
    _cancel: Option<DropGuard>,
}

impl fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchStream").finish_non_exhaustive()
    }
}

/// Capacity of a watch's channel between the backend and the consumer. Watch batches are small;
/// a slow consumer applies back-pressure to its own feeder task only.
pub(crate) const WATCH_CHANNEL: usize = 256;

impl WatchStream {
    pub(crate) fn new(rx: mpsc::Receiver<Result<WatchBatch>>, cancel: Option<DropGuard>) -> Self {
        WatchStream {
            rx,
            _cancel: cancel,
        }
    }

    /// The next batch, or `None` when the watch ended (the store was closed).
    pub async fn next(&mut self) -> Option<Result<WatchBatch>> {
        self.rx.recv().await
    }
}

impl futures::Stream for WatchStream {
    type Item = Result<WatchBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

/// A versioned key-value store with CAS, prefix watches and ephemeral keys (Pulsar's
/// `MetadataStoreExtended`). Keys are `/`-separated paths (see [`validate_key`]). Implementations
/// are shared as `Arc<dyn MetadataStore>`.
#[async_trait]
pub trait MetadataStore: Send + Sync + fmt::Debug + 'static {
    /// A short name of the backend, for logs ("embedded", "etcd").
    fn backend_name(&self) -> &'static str;

    /// Writes made to the backend so far, for the metric of writes per transaction: log fsyncs
    /// (a group of concurrent commits is one) embedded, transactions sent to etcd.
    fn writes_made(&self) -> u64 {
        0
    }

    /// The time those writes took, summed (etcd: from a transaction's send to its answer), for
    /// the mean latency of a write; zero where the backend does not measure it.
    fn write_time(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// The value and metadata at `key`, if any.
    async fn get(&self, key: &str) -> Result<Option<Versioned>>;

    /// Every key that starts with `prefix` (a plain string prefix), at one revision.
    async fn scan_prefix(&self, prefix: &str) -> Result<Scan>;

    /// The keys that start with `prefix`, without values.
    async fn list_keys(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .scan_prefix(prefix)
            .await?
            .entries
            .into_iter()
            .map(|kv| kv.key)
            .collect())
    }

    /// Applies `ops` atomically: either every check holds and every write is applied at one new
    /// revision, or nothing changes and the error names the first operation that failed
    /// ([`MetadataError::BadVersion`], [`MetadataError::NotFound`], [`MetadataError::AlreadyExists`],
    /// or [`MetadataError::SessionExpired`] for a put bound to a lease that is gone).
    async fn txn(&self, ops: Vec<Op>) -> Result<TxnResponse>;

    /// Watches every key starting with `prefix`, from `from_revision` on (inclusive). `0` means
    /// "from the next revision". To follow a scan without a gap or a repeat, pass
    /// `scan.revision + 1`.
    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream>;

    /// Grants a lease of (at least) `ttl`. The lease expires unless kept alive.
    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseGrant>;

    /// Renews a lease. `Ok(Some(ttl))` is the renewed TTL counted from (no earlier than) the call;
    /// `Ok(None)` means the lease is gone.
    async fn keep_alive(&self, lease: LeaseId) -> Result<Option<Duration>>;

    /// Ends a lease now, deleting its ephemeral keys. Revoking a lease that is gone is not an error.
    async fn revoke_lease(&self, lease: LeaseId) -> Result<()>;

    /// Puts a persistent value if `expect` holds; returns the new metadata.
    async fn put(&self, key: &str, value: &[u8], expect: Expect) -> Result<Stat> {
        let op = Op::Put {
            key: key.to_string(),
            value: value.to_vec(),
            expect,
            lease: None,
        };
        single_put_stat(self.txn(vec![op]).await?)
    }

    /// Puts an ephemeral value bound to `lease` if `expect` holds.
    async fn put_ephemeral(
        &self,
        key: &str,
        value: &[u8],
        expect: Expect,
        lease: LeaseId,
    ) -> Result<Stat> {
        let op = Op::Put {
            key: key.to_string(),
            value: value.to_vec(),
            expect,
            lease: Some(lease),
        };
        single_put_stat(self.txn(vec![op]).await?)
    }

    /// Deletes `key`, which must exist (with `version`, if given).
    async fn delete(&self, key: &str, version: Option<u64>) -> Result<()> {
        self.txn(vec![Op::delete(key, version)]).await.map(|_| ())
    }

    /// The names of the direct children of `path` (Pulsar's `getChildren`), sorted. A child
    /// exists if any key lies below it; `/a/b/c` makes `b` a child of `/a`.
    async fn list_children(&self, path: &str) -> Result<Vec<String>> {
        validate_prefix(path)?;
        let prefix = if path.ends_with('/') {
            path.to_string()
        } else {
            format!("{path}/")
        };
        let keys = self.list_keys(&prefix).await?;
        let mut children = BTreeSet::new();
        for key in &keys {
            let rest = &key[prefix.len()..];
            let child = rest.split('/').next().unwrap_or(rest);
            if !child.is_empty() {
                children.insert(child.to_string());
            }
        }
        Ok(children.into_iter().collect())
    }

    /// True if `key` exists.
    async fn exists(&self, key: &str) -> Result<bool> {
        Ok(self.get(key).await?.is_some())
    }
}

fn single_put_stat(resp: TxnResponse) -> Result<Stat> {
    match resp.results.first() {
        Some(OpResult::Put(stat)) => Ok(*stat),
        other => Err(MetadataError::Backend(format!(
            "unexpected txn result {other:?}"
        ))),
    }
}

/// A key is an absolute `/`-separated path: it starts with `/`, has no empty segment, does not end
/// with `/`, and has no control characters. The same rule on every backend keeps them
/// interchangeable.
pub fn validate_key(key: &str) -> Result<()> {
    let bad = |reason| {
        Err(MetadataError::InvalidPath {
            path: key.to_string(),
            reason,
        })
    };
    if !key.starts_with('/') {
        return bad("must start with '/'");
    }
    if key.len() == 1 {
        return bad("the root is not a key");
    }
    if key.ends_with('/') {
        return bad("must not end with '/'");
    }
    if key.contains("//") {
        return bad("empty path segment");
    }
    if key.chars().any(char::is_control) {
        return bad("control character");
    }
    Ok(())
}

/// A prefix (for scans and watches) starts with `/` and has no control characters.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    if !prefix.starts_with('/') {
        return Err(MetadataError::InvalidPath {
            path: prefix.to_string(),
            reason: "must start with '/'",
        });
    }
    if prefix.chars().any(char::is_control) {
        return Err(MetadataError::InvalidPath {
            path: prefix.to_string(),
            reason: "control character",
        });
    }
    Ok(())
}
