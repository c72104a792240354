//! What every topic of the object-store backend shares: the store under the
//! backend's prefix, the topics' keys, the puts and gets with their counters,
//! and the errors they turn into. The backend opens topics, and topics use
//! these, so they live apart from both.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use parking_lot::Mutex;

use super::config::ObjectBackendConfig;
use super::format;
use crate::{LedgerError, Result};

/// Counters of the backend, shared by its topics.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub puts: AtomicU64,
    pub put_bytes: AtomicU64,
    pub put_micros: AtomicU64,
    pub put_retries: AtomicU64,
    pub gets: AtomicU64,
    pub fenced: AtomicU64,
}

/// What every topic of the backend shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub store: Arc<dyn ObjectStore>,
    pub prefix: Path,
    pub cfg: ObjectBackendConfig,
    pub counters: Counters,
    /// Topics open through this backend (one handle per topic).
    pub open: Mutex<HashSet<String>>,
}

impl Shared {
    pub fn topic_dir(&self, topic: &str) -> Path {
        self.prefix
            .clone()
            .join("topics")
            .join(format::escape(topic).as_str())
    }

    pub fn log_key(&self, topic: &str, seq: u64) -> Path {
        self.topic_dir(topic)
            .join("log")
            .join(format!("{seq:020}").as_str())
    }

    pub async fn get(&self, key: &Path) -> Result<Option<Bytes>> {
        self.counters.gets.fetch_add(1, Ordering::Relaxed);
        match self.store.get(key).await {
            Ok(r) => Ok(Some(r.bytes().await.map_err(|e| io("read", key, e))?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(io("get", key, e)),
        }
    }

    /// Keys under `dir` after `offset` (all if `None`), in order.
    pub async fn list(&self, dir: &Path, offset: Option<&Path>) -> Result<Vec<Path>> {
        let stream = match offset {
            Some(o) => self.store.list_with_offset(Some(dir), o),
            None => self.store.list(Some(dir)),
        };
        let mut keys: Vec<Path> = stream
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .map_err(|e| io("list", dir, e))?;
        keys.sort();
        Ok(keys)
    }

    /// A create-only put. `Ok(true)`: written; `Ok(false)`: the key exists.
    pub async fn create(&self, key: &Path, bytes: Bytes) -> Result<bool> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let started = std::time::Instant::now();
        let len = bytes.len() as u64;
        match self
            .store
            .put_opts(key, PutPayload::from_bytes(bytes), opts)
            .await
        {
            Ok(_) => {
                let c = &self.counters;
                c.puts.fetch_add(1, Ordering::Relaxed);
                c.put_bytes.fetch_add(len, Ordering::Relaxed);
                c.put_micros
                    .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                Ok(true)
            }
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(io("put", key, e)),
        }
    }

    /// [`Shared::create`], retried on errors (a timeout, a 5xx) with the same
    /// bytes: a retry that finds the key taken may be finding its own earlier
    /// attempt, which the caller tells by the put id inside.
    pub async fn create_retrying(&self, key: &Path, bytes: Bytes) -> Result<bool> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.create(key, bytes.clone()).await {
                Err(e) if attempt < self.cfg.put_attempts => {
                    self.counters.put_retries.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%key, attempt, error = %e, "put failed; retrying the same object");
                    tokio::time::sleep(Duration::from_millis(20 << attempt.min(7))).await;
                }
                r => return r,
            }
        }
    }

    /// An overwriting put (checkpoints, cursors).
    pub async fn overwrite(&self, key: &Path, bytes: Bytes) -> Result<()> {
        self.counters.puts.fetch_add(1, Ordering::Relaxed);
        self.counters
            .put_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.store
            .put(key, PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|e| io("put", key, e))
    }

    pub async fn delete(&self, key: &Path) -> Result<()> {
        match self.store.delete(key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(io("delete", key, e)),
        }
    }
}

pub(crate) fn io(op: &'static str, key: &Path, e: object_store::Error) -> LedgerError {
    LedgerError::Io {
        op,
        path: key.as_ref().into(),
        message: e.to_string(),
    }
}

pub(crate) fn corrupt(topic: &str, key: &Path, reason: String) -> LedgerError {
    LedgerError::Corrupt {
        topic: topic.to_string(),
        path: key.as_ref().into(),
        offset: 0,
        reason,
    }
}

/// A put id no other put will have: the process, the time, a counter.
pub(crate) fn put_id() -> u128 {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    (nanos << 40) ^ (u128::from(std::process::id()) << 24) ^ u128::from(n) ^ (u128::from(n) << 96)
}
