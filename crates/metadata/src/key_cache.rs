//! A read-through cache of single keys under a prefix, kept true by a watch
//! of the prefix: a key read once is answered from memory, absent keys
//! included, until a write to it (here or on another broker) is seen.
//!
//! For documents read far more often than written, one key at a time, where
//! holding the whole prefix ([`crate::PrefixCache`]) would cost too much: a
//! topic's schema history is read by every PRODUCER and SUBSCRIBE, and with
//! 100,000 topics a broker taking over a lost broker's topics read it once
//! per producer, the most frequent request etcd saw during the reload
//! (issue 47).
//!
//! **Why it is never staler than the watch.** A read that misses takes the
//! cache's generation, reads the store, and keeps the answer only if the
//! generation has not moved meanwhile; every event the watch delivers removes
//! its key and moves the generation, under the same lock. A write that
//! landed after the read's answer therefore either moved the generation
//! before the answer is kept (it is dropped) or removes it after. Until the
//! watch is established, and from the moment it ends (the store compacted
//! past it, or closed) until it is established again, nothing is kept and
//! everything kept is dropped: reads go to the store.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::{MetadataError, Result};
use crate::store::{MetadataStore, Versioned};

/// See the module documentation.
pub struct KeyCache {
    store: Arc<dyn MetadataStore>,
    prefix: String,
    state: Arc<Mutex<State>>,
    _task: DropGuard,
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// Whether the watch is established (answers may be kept).
    live: bool,
    /// Moves with every change seen, and whenever the watch starts or ends.
    generation: u64,
    entries: HashMap<String, Option<Versioned>>,
    /// At most this many keys are kept; at the bound the cache starts over.
    capacity: usize,
}

impl State {
    fn forget_all(&mut self) {
        self.entries.clear();
        self.generation += 1;
    }
}

impl KeyCache {
    /// Starts following `prefix`; keeps at most `capacity` keys.
    pub fn start(store: Arc<dyn MetadataStore>, prefix: &str, capacity: usize) -> KeyCache {
        let state = Arc::new(Mutex::new(State {
            capacity: capacity.max(1),
            ..State::default()
        }));
        let cancel = CancellationToken::new();
        tokio::spawn(follow(
            store.clone(),
            prefix.to_string(),
            state.clone(),
            cancel.clone(),
        ));
        KeyCache {
            store,
            prefix: prefix.to_string(),
            state,
            _task: cancel.drop_guard(),
        }
    }

    /// The value at `key` (which must start with the prefix), from memory
    /// when it was read before and not written since.
    pub async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        debug_assert!(
            key.starts_with(&self.prefix),
            "{key} outside {}",
            self.prefix
        );
        let generation = {
            let s = self.state.lock();
            if s.live
                && let Some(v) = s.entries.get(key)
            {
                return Ok(v.clone());
            }
            s.generation
        };
        let v = self.store.get(key).await?;
        self.keep(key, generation, &v);
        Ok(v)
    }

    /// Keeps `v`, read at `generation`, unless a change was seen since.
    fn keep(&self, key: &str, generation: u64, v: &Option<Versioned>) {
        let mut s = self.state.lock();
        if s.live && s.generation == generation {
            if s.entries.len() >= s.capacity {
                s.forget_all();
            } else {
                s.entries.insert(key.to_string(), v.clone());
            }
        }
    }

    /// Forgets `key` now: this process wrote it, and its next read must see
    /// that write without waiting for the watch.
    pub fn forget(&self, key: &str) {
        let mut s = self.state.lock();
        s.entries.remove(key);
        s.generation += 1;
    }

    /// Keys held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.state.lock().entries.len()
    }
}

async fn follow(
    store: Arc<dyn MetadataStore>,
    prefix: String,
    state: Arc<Mutex<State>>,
    cancel: CancellationToken,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let watch = tokio::select! {
            _ = cancel.cancelled() => return,
            w = store.watch(&prefix, 0) => w,
        };
        match watch {
            Ok(mut w) => {
                {
                    let mut s = state.lock();
                    s.forget_all();
                    s.live = true;
                }
                backoff = Duration::from_millis(50);
                let ended = loop {
                    let next = tokio::select! {
                        _ = cancel.cancelled() => return,
                        n = w.next() => n,
                    };
                    match next {
                        Some(Ok(batch)) => {
                            let mut s = state.lock();
                            for e in &batch.events {
                                s.entries.remove(&e.key);
                            }
                            s.generation += 1;
                        }
                        Some(Err(e)) => break Some(e),
                        None => break None,
                    }
                };
                {
                    let mut s = state.lock();
                    s.live = false;
                    s.forget_all();
                }
                match ended {
                    None | Some(MetadataError::Closed) => return,
                    Some(e) => {
                        tracing::info!(%prefix, error = %e, "key cache watch ended; following again")
                    }
                }
            }
            Err(MetadataError::Closed) => return,
            Err(e) => tracing::warn!(%prefix, error = %e, "key cache watch failed; retrying"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EmbeddedStore, Expect};

    /// Counts the reads that reach the store.
    #[derive(Debug)]
    struct Counting {
        inner: Arc<dyn MetadataStore>,
        gets: std::sync::atomic::AtomicU64,
    }

    #[async_trait::async_trait]
    impl MetadataStore for Counting {
        fn backend_name(&self) -> &'static str {
            "counting"
        }
        async fn get(&self, key: &str) -> Result<Option<Versioned>> {
            self.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.inner.get(key).await
        }
        async fn scan_prefix(&self, prefix: &str) -> Result<crate::Scan> {
            self.inner.scan_prefix(prefix).await
        }
        async fn txn(&self, ops: Vec<crate::Op>) -> Result<crate::TxnResponse> {
            self.inner.txn(ops).await
        }
        async fn watch(&self, prefix: &str, from: crate::Revision) -> Result<crate::WatchStream> {
            self.inner.watch(prefix, from).await
        }
        async fn grant_lease(&self, ttl: Duration) -> Result<crate::LeaseGrant> {
            self.inner.grant_lease(ttl).await
        }
        async fn keep_alive(&self, lease: crate::LeaseId) -> Result<Option<Duration>> {
            self.inner.keep_alive(lease).await
        }
        async fn revoke_lease(&self, lease: crate::LeaseId) -> Result<()> {
            self.inner.revoke_lease(lease).await
        }
    }

    async fn live(c: &KeyCache) {
        for _ in 0..200 {
            if c.state.lock().live {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the watch never started");
    }

    #[tokio::test]
    async fn a_key_is_read_once_until_another_writer_changes_it() {
        let inner: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
        let counting = Arc::new(Counting {
            inner: inner.clone(),
            gets: Default::default(),
        });
        let gets = || counting.gets.load(std::sync::atomic::Ordering::SeqCst);
        let cache = KeyCache::start(counting.clone(), "/s/", 100);
        live(&cache).await;
        // Absent, then absent from memory.
        assert_eq!(cache.get("/s/a").await.unwrap(), None);
        assert_eq!(cache.get("/s/a").await.unwrap(), None);
        assert_eq!(gets(), 1);
        // Another writer (straight to the store): the watch drops the key.
        inner.put("/s/a", b"one", Expect::Any).await.unwrap();
        let mut seen = None;
        for _ in 0..200 {
            seen = cache.get("/s/a").await.unwrap();
            if seen.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(seen.unwrap().value, b"one");
        let before = gets();
        assert_eq!(cache.get("/s/a").await.unwrap().unwrap().value, b"one");
        assert_eq!(gets(), before, "read from memory");
        // A write and its forget: seen at once.
        inner.put("/s/a", b"two", Expect::Any).await.unwrap();
        cache.forget("/s/a");
        assert_eq!(cache.get("/s/a").await.unwrap().unwrap().value, b"two");
        inner.delete("/s/a", None).await.unwrap();
        cache.forget("/s/a");
        assert_eq!(cache.get("/s/a").await.unwrap(), None);
    }

    #[tokio::test]
    async fn an_answer_read_while_the_key_changed_is_not_kept() {
        let inner: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
        let cache = KeyCache::start(inner.clone(), "/s/", 100);
        live(&cache).await;
        // The read's generation, then a change seen before the answer is
        // kept: as if the store answered the old value after the write.
        let g = cache.state.lock().generation;
        inner.put("/s/k", b"new", Expect::Any).await.unwrap();
        for _ in 0..200 {
            if cache.state.lock().generation != g {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_ne!(cache.state.lock().generation, g, "the watch saw the write");
        cache.keep("/s/k", g, &None);
        assert_eq!(cache.get("/s/k").await.unwrap().unwrap().value, b"new");
    }

    #[tokio::test]
    async fn at_its_bound_the_cache_starts_over() {
        let inner: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
        let cache = KeyCache::start(inner.clone(), "/s/", 3);
        live(&cache).await;
        for k in ["/s/1", "/s/2", "/s/3"] {
            cache.get(k).await.unwrap();
        }
        assert_eq!(cache.len(), 3);
        cache.get("/s/4").await.unwrap();
        assert_eq!(cache.len(), 0);
    }
}
