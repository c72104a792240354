//! One watch per prefix feeding a cache (Pulsar's `MetadataCache`, prefix-wide).
//!
//! The cache only ever publishes *complete* snapshots of its prefix at a revision: the initial
//! one comes from a scan, and each later one is the previous snapshot with one committed
//! transaction's events applied. A reader therefore never sees a key missing because it was not
//! loaded yet (the cache-miss race PIP-473's review found in the TC assignment view). If the watch
//! falls behind the store's history, the cache re-scans and publishes the new complete state.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::{MetadataError, Result};
use crate::store::{EventKind, MetadataStore, Revision, Versioned};

/// The complete content of a prefix at one revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheSnapshot {
    /// The revision this snapshot reflects.
    pub revision: Revision,
    /// Every key under the prefix.
    pub entries: BTreeMap<String, Versioned>,
}

/// A cache of every key under a prefix, kept current by one watch.
#[derive(Debug)]
pub struct PrefixCache {
    prefix: String,
    rx: watch::Receiver<Arc<CacheSnapshot>>,
    _task: DropGuard,
}

impl PrefixCache {
    /// Loads the prefix and starts following it. Returns once the first complete snapshot is
    /// published.
    pub async fn start(store: Arc<dyn MetadataStore>, prefix: &str) -> Result<PrefixCache> {
        crate::store::validate_prefix(prefix)?;
        let first = load(&*store, prefix).await?;
        let (tx, rx) = watch::channel(Arc::new(first));
        let cancel = CancellationToken::new();
        tokio::spawn(follow(store, prefix.to_string(), tx, cancel.clone()));
        Ok(PrefixCache {
            prefix: prefix.to_string(),
            rx,
            _task: cancel.drop_guard(),
        })
    }

    /// The cached prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The newest complete snapshot.
    pub fn snapshot(&self) -> Arc<CacheSnapshot> {
        self.rx.borrow().clone()
    }

    /// Follows snapshots; each is complete.
    pub fn subscribe(&self) -> watch::Receiver<Arc<CacheSnapshot>> {
        self.rx.clone()
    }

    /// Waits until a snapshot satisfies `pred`, at most `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&CacheSnapshot) -> bool,
    ) -> Result<Arc<CacheSnapshot>> {
        let mut rx = self.rx.clone();
        let fut = async {
            loop {
                let snap = rx.borrow_and_update().clone();
                if pred(&snap) {
                    return Ok(snap);
                }
                if rx.changed().await.is_err() {
                    return Err(MetadataError::Closed);
                }
            }
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| MetadataError::Backend(format!("cache {} wait timed out", self.prefix)))?
    }
}

async fn load(store: &dyn MetadataStore, prefix: &str) -> Result<CacheSnapshot> {
    let scan = store.scan_prefix(prefix).await?;
    Ok(CacheSnapshot {
        revision: scan.revision,
        entries: scan
            .entries
            .into_iter()
            .map(|kv| {
                (
                    kv.key,
                    Versioned {
                        value: kv.value,
                        stat: kv.stat,
                    },
                )
            })
            .collect(),
    })
}

async fn follow(
    store: Arc<dyn MetadataStore>,
    prefix: String,
    tx: watch::Sender<Arc<CacheSnapshot>>,
    cancel: CancellationToken,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let from = tx.borrow().revision + 1;
        let res = tokio::select! {
            _ = cancel.cancelled() => return,
            r = apply_watch(&*store, &prefix, from, &tx) => r,
        };
        match res {
            Ok(()) => return, // the store closed
            Err(MetadataError::Compacted { .. }) => {
                // Fell behind the history: reload the complete state and continue from there.
                tracing::info!(prefix = %prefix, "metadata cache reloading after compaction");
                match load(&*store, &prefix).await {
                    Ok(snap) => {
                        tx.send_replace(Arc::new(snap));
                        backoff = Duration::from_millis(50);
                        continue;
                    }
                    Err(e) => tracing::warn!(prefix = %prefix, error = %e, "cache reload failed"),
                }
            }
            Err(MetadataError::Closed) => return,
            Err(e) => tracing::warn!(prefix = %prefix, error = %e, "cache watch failed; retrying"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

async fn apply_watch(
    store: &dyn MetadataStore,
    prefix: &str,
    from: Revision,
    tx: &watch::Sender<Arc<CacheSnapshot>>,
) -> Result<()> {
    let mut watch = store.watch(prefix, from).await?;
    while let Some(batch) = watch.next().await {
        let batch = batch?;
        let mut snap = CacheSnapshot::clone(&tx.borrow());
        if batch.revision <= snap.revision {
            continue;
        }
        for ev in batch.events {
            match (ev.kind, ev.value, ev.stat) {
                (EventKind::Deleted, _, _) => {
                    snap.entries.remove(&ev.key);
                }
                (_, Some(value), Some(stat)) => {
                    snap.entries.insert(ev.key, Versioned { value, stat });
                }
                _ => {}
            }
        }
        snap.revision = batch.revision;
        tx.send_replace(Arc::new(snap));
    }
    Ok(())
}
