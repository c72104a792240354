//! END_TXN's wait for participants on other brokers: until their records of the transaction
//! (`/txn/part/...`) are gone. One watch of every record serves every wait of a coordinator.
//! A watch per wait, begun at the revision of the wait's own read, is one etcd often starts
//! behind the present, and etcd catches such watchers up only every 100 ms: a tenth of the
//! cluster's commits took 100 ms more.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use strobe_metadata::{EventKind, MetadataStore};
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::warn;

use crate::paths;

/// One END_TXN waiting for records to go.
#[derive(Debug)]
struct Waiter {
    left: Mutex<HashSet<String>>,
    done: Notify,
}

#[derive(Debug, Default)]
struct Shared {
    /// Record key → the waits for it.
    waiting: Mutex<HashMap<String, Vec<Arc<Waiter>>>>,
    /// The watch is established (else waits fall back to a watch of their own).
    ready: AtomicBool,
}

impl Shared {
    /// `key` is gone: every wait for it is told.
    fn gone(&self, key: &str) {
        let Some(ws) = self.waiting.lock().remove(key) else {
            return;
        };
        for w in ws {
            let mut left = w.left.lock();
            if left.remove(key) && left.is_empty() {
                w.done.notify_one();
            }
        }
    }

    fn forget(&self, w: &Arc<Waiter>) {
        let mut m = self.waiting.lock();
        for k in w.left.lock().iter() {
            if let Some(ws) = m.get_mut(k) {
                ws.retain(|x| !Arc::ptr_eq(x, w));
                if ws.is_empty() {
                    m.remove(k);
                }
            }
        }
    }
}

/// The waits of one coordinator, fed by one watch (see the module docs).
#[derive(Debug)]
pub(crate) struct PartWaits {
    shared: Arc<Shared>,
    store: Arc<dyn MetadataStore>,
    _watch: DropGuard,
}

impl PartWaits {
    pub(crate) fn start(store: Arc<dyn MetadataStore>) -> PartWaits {
        let shared = Arc::new(Shared::default());
        let cancel = CancellationToken::new();
        tokio::spawn(follow(store.clone(), shared.clone(), cancel.clone()));
        PartWaits {
            shared,
            store,
            _watch: cancel.drop_guard(),
        }
    }

    /// Waits until none of `keys` (records under `prefix`) is left, at most `limit`: true if
    /// none is; `None` while the shared watch is not established.
    pub(crate) async fn wait(
        &self,
        prefix: &str,
        keys: HashSet<String>,
        limit: Duration,
    ) -> Option<bool> {
        if !self.shared.ready.load(Ordering::Acquire) {
            return None;
        }
        let w = Arc::new(Waiter {
            left: Mutex::new(keys.clone()),
            done: Notify::new(),
        });
        {
            let mut m = self.shared.waiting.lock();
            for k in &keys {
                m.entry(k.clone()).or_default().push(w.clone());
            }
        }
        // Registered first, read second: a record deleted in between is seen by one or both.
        let present: HashSet<String> = match self.store.scan_prefix(prefix).await {
            Ok(scan) => scan.entries.into_iter().map(|kv| kv.key).collect(),
            Err(e) => {
                warn!(error = %e, "reading the participants' records failed");
                keys.clone()
            }
        };
        for k in keys.iter().filter(|k| !present.contains(*k)) {
            self.shared.gone(k);
        }
        let done = w.left.lock().is_empty()
            || tokio::time::timeout(limit, w.done.notified()).await.is_ok();
        self.shared.forget(&w);
        Some(done)
    }
}

/// Follows every participant record's deletion; re-established when it breaks (the records
/// waited for are then read again).
async fn follow(store: Arc<dyn MetadataStore>, shared: Arc<Shared>, cancel: CancellationToken) {
    loop {
        let watch = tokio::select! {
            _ = cancel.cancelled() => return,
            w = store.watch(paths::PART_PREFIX, 0) => w,
        };
        let mut watch = match watch {
            Ok(w) => w,
            Err(e) => {
                warn!(error = %e, "the participants' records cannot be watched; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => continue,
                }
            }
        };
        shared.ready.store(true, Ordering::Release);
        // Deletions missed while there was no watch: read what is waited for again.
        let waited: Vec<String> = shared.waiting.lock().keys().cloned().collect();
        for k in waited {
            if let Ok(None) = store.get(&k).await {
                shared.gone(&k);
            }
        }
        loop {
            let batch = tokio::select! {
                _ = cancel.cancelled() => return,
                b = watch.next() => b,
            };
            match batch {
                Some(Ok(b)) => {
                    for ev in b.events {
                        if ev.kind == EventKind::Deleted {
                            shared.gone(&ev.key);
                        }
                    }
                }
                Some(Err(e)) => {
                    warn!(error = %e, "the participants' records watch broke; restarting");
                    break;
                }
                None => break,
            }
        }
        shared.ready.store(false, Ordering::Release);
    }
}
