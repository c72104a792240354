//! A read the store fails must not move a cursor past what it did not read.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use strobe_ledger::{
    AppendCallback, InitialPosition, LedgerBackend, LedgerConfig, LedgerError, ManagedLedger,
    MemoryBackend, RecoveredTopic, TopicStorage,
};

/// A memory backend whose reads fail while `failing` is set (the store cut off).
#[derive(Debug, Clone)]
struct Flaky {
    inner: MemoryBackend,
    failing: Arc<AtomicBool>,
}

#[derive(Debug)]
struct FlakyTopic {
    inner: Arc<dyn TopicStorage>,
    failing: Arc<AtomicBool>,
}

impl LedgerBackend for Flaky {
    fn open_topic(
        &self,
        topic: &str,
        fence: u64,
    ) -> BoxFuture<'static, strobe_ledger::Result<(Arc<dyn TopicStorage>, RecoveredTopic)>> {
        let open = self.inner.open_topic(topic, fence);
        let failing = self.failing.clone();
        async move {
            let (inner, rec) = open.await?;
            let t: Arc<dyn TopicStorage> = Arc::new(FlakyTopic { inner, failing });
            Ok((t, rec))
        }
        .boxed()
    }
    fn kind(&self) -> &'static str {
        "flaky"
    }
}

impl TopicStorage for FlakyTopic {
    fn append(&self, l: u64, e: u64, ts: u64, data: Bytes, crc: u32, done: AppendCallback) {
        self.inner.append(l, e, ts, data, crc, done)
    }
    fn read(
        &self,
        l: u64,
        first: u64,
        last: u64,
    ) -> BoxFuture<'static, strobe_ledger::Result<Vec<Bytes>>> {
        if self.failing.load(Ordering::Acquire) {
            return async { Err(LedgerError::Closed("the store is cut off".into())) }.boxed();
        }
        self.inner.read(l, first, last)
    }
    fn delete_ledgers(
        &self,
        first_kept: u64,
        ids: Vec<u64>,
    ) -> BoxFuture<'static, strobe_ledger::Result<()>> {
        self.inner.delete_ledgers(first_kept, ids)
    }
    fn persist_cursor(
        &self,
        name: &str,
        snapshot: Option<Bytes>,
    ) -> BoxFuture<'static, strobe_ledger::Result<()>> {
        self.inner.persist_cursor(name, snapshot)
    }
    fn close(&self) -> BoxFuture<'static, strobe_ledger::Result<()>> {
        self.inner.close()
    }
}

#[tokio::test]
async fn a_failed_read_leaves_the_cursor_where_it_was() {
    let backend = Flaky {
        inner: MemoryBackend::default(),
        failing: Arc::new(AtomicBool::new(false)),
    };
    let ml = ManagedLedger::open(&backend, "t", LedgerConfig::default())
        .await
        .unwrap();
    for i in 0..10u32 {
        ml.append(Bytes::from(i.to_string())).await.unwrap();
    }
    let c = ml
        .open_cursor("c", InitialPosition::Earliest)
        .await
        .unwrap();
    let first = c.read(3).await.unwrap();
    assert_eq!(first.len(), 3);
    backend.failing.store(true, Ordering::Release);
    for _ in 0..3 {
        assert!(c.read(3).await.is_err());
    }
    backend.failing.store(false, Ordering::Release);
    let rest = c.read(100).await.unwrap();
    let got: Vec<Bytes> = rest.iter().map(|e| e.data.clone()).collect();
    let want: Vec<Bytes> = (3..10u32).map(|i| Bytes::from(i.to_string())).collect();
    assert_eq!(
        got, want,
        "the entries the failed reads did not read come next"
    );
}
