//! A memory backend a test can impair (and count the entries read from):
//! its reads fail while told to (the store cut off), and its appends wait at a gate while it is shut, to be
//! stored or failed when the test opens it (an append still in flight).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::{
    AppendCallback, LedgerBackend, LedgerError, MemoryBackend, RecoveredTopic, Result, TopicStorage,
};

/// See the module's documentation. Clones share their state.
#[derive(Debug, Clone, Default)]
pub struct Impaired {
    inner: MemoryBackend,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    failing_reads: AtomicBool,
    /// Entries read from the store (asked for: `last - first + 1` a read).
    entries_read: AtomicU64,
    /// Appends waiting at the gate; `None`: the gate is open.
    waiting: Mutex<Option<Vec<Waiting>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("failing_reads", &self.failing_reads)
            .field("entries_read", &self.entries_read)
            .finish_non_exhaustive()
    }
}

/// An append waiting at the gate, with the storage it goes to once let through.
struct Waiting {
    to: Arc<dyn TopicStorage>,
    at: (u64, u64, u64),
    data: Bytes,
    crc: u32,
    done: AppendCallback,
}

impl Impaired {
    /// Reads fail (`true`) or work again.
    pub fn fail_reads(&self, on: bool) {
        self.shared.failing_reads.store(on, Ordering::Release);
    }

    /// Entries read from the store so far (what a cache answered is not).
    pub fn entries_read(&self) -> u64 {
        self.shared.entries_read.load(Ordering::Acquire)
    }

    /// Appends from now on wait at the gate.
    pub fn shut_gate(&self) {
        let mut waiting = self.shared.waiting.lock();
        if waiting.is_none() {
            *waiting = Some(Vec::new());
        }
    }

    /// How many appends wait at the gate.
    pub fn held(&self) -> usize {
        self.shared.waiting.lock().as_ref().map_or(0, Vec::len)
    }

    /// Opens the gate: what waited is stored (`store`) or fails, in the
    /// order it came.
    pub fn open_gate(&self, store: bool) {
        let waiting = self.shared.waiting.lock().take().unwrap_or_default();
        for w in waiting {
            if store {
                let (l, e, ts) = w.at;
                w.to.append(l, e, ts, w.data, w.crc, w.done);
            } else {
                (w.done)(Err(LedgerError::Closed("the store is cut off".into())));
            }
        }
    }
}

#[derive(Debug)]
struct ImpairedTopic {
    inner: Arc<dyn TopicStorage>,
    shared: Arc<Shared>,
}

impl LedgerBackend for Impaired {
    fn open_topic(
        &self,
        topic: &str,
        fence: u64,
    ) -> BoxFuture<'static, Result<(Arc<dyn TopicStorage>, RecoveredTopic)>> {
        let open = self.inner.open_topic(topic, fence);
        let shared = self.shared.clone();
        async move {
            let (inner, rec) = open.await?;
            let t: Arc<dyn TopicStorage> = Arc::new(ImpairedTopic { inner, shared });
            Ok((t, rec))
        }
        .boxed()
    }

    fn kind(&self) -> &'static str {
        "impaired"
    }
}

impl TopicStorage for ImpairedTopic {
    fn append(&self, l: u64, e: u64, ts: u64, data: Bytes, crc: u32, done: AppendCallback) {
        let mut waiting = self.shared.waiting.lock();
        match waiting.as_mut() {
            Some(w) => w.push(Waiting {
                to: self.inner.clone(),
                at: (l, e, ts),
                data,
                crc,
                done,
            }),
            None => {
                drop(waiting);
                self.inner.append(l, e, ts, data, crc, done)
            }
        }
    }

    fn read(&self, l: u64, first: u64, last: u64) -> BoxFuture<'static, Result<Vec<Bytes>>> {
        if self.shared.failing_reads.load(Ordering::Acquire) {
            return async { Err(LedgerError::Closed("the store is cut off".into())) }.boxed();
        }
        self.shared
            .entries_read
            .fetch_add(last.saturating_sub(first) + 1, Ordering::AcqRel);
        self.inner.read(l, first, last)
    }

    fn delete_ledgers(&self, first_kept: u64, ids: Vec<u64>) -> BoxFuture<'static, Result<()>> {
        self.inner.delete_ledgers(first_kept, ids)
    }

    fn persist_cursor(
        &self,
        name: &str,
        snapshot: Option<Bytes>,
    ) -> BoxFuture<'static, Result<()>> {
        self.inner.persist_cursor(name, snapshot)
    }

    fn close(&self) -> BoxFuture<'static, Result<()>> {
        self.inner.close()
    }
}
