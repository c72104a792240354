//! Stores for tests of what uses a store: faults the real backends show
//! only under a dying etcd member.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use crate::{
    LeaseGrant, LeaseId, MetadataError, MetadataStore, Op, Result, Revision, Scan, TxnResponse,
    Versioned, WatchStream,
};

/// A store whose next writes are applied but answered with a transport
/// error, as when an etcd member dies with the request in flight: the
/// caller cannot tell whether its write landed.
#[derive(Debug)]
pub struct LostAnswers<S> {
    inner: S,
    fail: AtomicU32,
}

impl<S> LostAnswers<S> {
    pub fn new(inner: S) -> LostAnswers<S> {
        LostAnswers {
            inner,
            fail: AtomicU32::new(0),
        }
    }

    /// The next `n` writes (transactions) land and answer an error.
    pub fn fail_next(&self, n: u32) {
        self.fail.store(n, Ordering::Release);
    }

    /// Writes still to fail.
    pub fn failing(&self) -> u32 {
        self.fail.load(Ordering::Acquire)
    }
}

#[async_trait]
impl<S: MetadataStore> MetadataStore for LostAnswers<S> {
    fn backend_name(&self) -> &'static str {
        "lost-answers"
    }
    fn writes_made(&self) -> u64 {
        self.inner.writes_made()
    }
    fn write_time(&self) -> std::time::Duration {
        self.inner.write_time()
    }
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        self.inner.get(key).await
    }
    async fn scan_prefix(&self, prefix: &str) -> Result<Scan> {
        self.inner.scan_prefix(prefix).await
    }
    async fn txn(&self, ops: Vec<Op>) -> Result<TxnResponse> {
        let r = self.inner.txn(ops).await;
        if self
            .fail
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(MetadataError::Backend("operation was canceled".into()));
        }
        r
    }
    async fn watch(&self, prefix: &str, from: Revision) -> Result<WatchStream> {
        self.inner.watch(prefix, from).await
    }
    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseGrant> {
        self.inner.grant_lease(ttl).await
    }
    async fn keep_alive(&self, lease: LeaseId) -> Result<Option<Duration>> {
        self.inner.keep_alive(lease).await
    }
    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        self.inner.revoke_lease(lease).await
    }
}
