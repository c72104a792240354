//! Locks and counters (the rest of Pulsar's `CoordinationService`).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{MetadataError, Result};
use crate::session::{Session, SessionState};
use crate::store::{Expect, MetadataStore, Op};

/// An exclusive lock on a resource: an ephemeral key holding the owner's value (Pulsar's
/// `ResourceLock`, e.g. bundle ownership). It is held while the session lives in the epoch it was
/// acquired in; [`ResourceLock::is_held`] turns false *before* the server can expire the lease.
pub struct ResourceLock<T> {
    session: Arc<Session>,
    path: String,
    value: T,
    version: u64,
    epoch: u64,
}

impl<T: fmt::Debug> fmt::Debug for ResourceLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceLock")
            .field("path", &self.path)
            .field("value", &self.value)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl<T: Serialize + DeserializeOwned + fmt::Debug> ResourceLock<T> {
    /// Takes the lock at `path` with `value`, or fails with [`MetadataError::LockBusy`].
    pub async fn acquire(session: &Arc<Session>, path: &str, value: T) -> Result<Self> {
        let (lease, epoch) = session.lease().ok_or(MetadataError::SessionExpired)?;
        let bytes = encode(path, &value)?;
        match session
            .store()
            .put_ephemeral(path, &bytes, Expect::Absent, lease)
            .await
        {
            Ok(stat) => Ok(ResourceLock {
                session: session.clone(),
                path: path.to_string(),
                value,
                version: stat.version,
                epoch,
            }),
            Err(MetadataError::AlreadyExists(_)) => Err(MetadataError::LockBusy(path.to_string())),
            Err(e) => Err(e),
        }
    }

    /// The current owner's value, if the lock is taken.
    pub async fn owner(store: &dyn MetadataStore, path: &str) -> Result<Option<T>> {
        match store.get(path).await? {
            None => Ok(None),
            Some(v) => Ok(Some(decode(path, &v.value)?)),
        }
    }

    /// The lock's key.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The value stored in the lock.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// True while the session lives in the epoch the lock was taken in.
    pub fn is_held(&self) -> bool {
        self.session.is_alive_in(self.epoch)
    }

    /// The version the lock was written at (its key's store revision): every
    /// later acquisition of the same path has a higher one, so it serves as a
    /// fencing token for what the holder writes elsewhere.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// A check to put into every transaction made on behalf of the lock (fencing).
    pub fn fence(&self) -> Result<Op> {
        if !self.is_held() {
            return Err(MetadataError::SessionExpired);
        }
        Ok(Op::check(self.path.clone(), Expect::Version(self.version)))
    }

    /// Waits until the lock is lost (session lost or closed).
    pub async fn lost(&self) {
        let mut rx = self.session.subscribe();
        loop {
            if !self.is_held() {
                return;
            }
            if !matches!(*rx.borrow_and_update(), SessionState::Alive { epoch, .. } if epoch == self.epoch)
            {
                return;
            }
            tokio::select! {
                r = rx.changed() => if r.is_err() { return },
                // The local deadline can pass before the session task reports it.
                _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
            }
        }
    }

    /// Replaces the stored value (fenced by the lock's version).
    pub async fn update(&mut self, value: T) -> Result<()> {
        let lease = self.session.lease().filter(|(_, e)| *e == self.epoch);
        let (lease, _) = lease.ok_or(MetadataError::SessionExpired)?;
        let bytes = encode(&self.path, &value)?;
        let stat = self
            .session
            .store()
            .put_ephemeral(&self.path, &bytes, Expect::Version(self.version), lease)
            .await?;
        self.version = stat.version;
        self.value = value;
        Ok(())
    }

    /// Releases the lock (deletes the key if it is still ours).
    pub async fn release(self) -> Result<()> {
        match self
            .session
            .store()
            .delete(&self.path, Some(self.version))
            .await
        {
            Ok(()) | Err(MetadataError::NotFound(_)) | Err(MetadataError::BadVersion { .. }) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

fn encode<T: Serialize>(path: &str, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| MetadataError::Codec {
        key: path.to_string(),
        reason: e.to_string(),
    })
}

fn decode<T: DeserializeOwned>(path: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| MetadataError::Codec {
        key: path.to_string(),
        reason: e.to_string(),
    })
}

/// A monotonic counter stored at one key (decimal text: the next value to hand out). Values are
/// never handed out twice, across processes and restarts: each allocation is a CAS on the key's
/// version. Used for transaction sequence numbers (`/txn/tc-seq/<tcId>`).
#[derive(Debug, Clone)]
pub struct Counter {
    store: Arc<dyn MetadataStore>,
    path: String,
}

impl Counter {
    /// The counter at `path`. It starts at 0 if the key does not exist.
    pub fn new(store: Arc<dyn MetadataStore>, path: &str) -> Result<Self> {
        crate::store::validate_key(path)?;
        Ok(Counter {
            store,
            path: path.to_string(),
        })
    }

    /// The next value.
    pub async fn next(&self) -> Result<u64> {
        Ok(self.next_batch(1).await?.start)
    }

    /// Reserves `n` consecutive values (one round trip for many ids).
    pub async fn next_batch(&self, n: u64) -> Result<Range<u64>> {
        if n == 0 {
            return Err(MetadataError::InvalidTxn("empty counter batch".into()));
        }
        loop {
            let (current, expect) = match self.store.get(&self.path).await? {
                None => (0, Expect::Absent),
                Some(v) => {
                    let text = std::str::from_utf8(&v.value).ok();
                    let n = text
                        .and_then(|t| t.trim().parse::<u64>().ok())
                        .ok_or_else(|| MetadataError::Codec {
                            key: self.path.clone(),
                            reason: "not a number".into(),
                        })?;
                    (n, Expect::Version(v.stat.version))
                }
            };
            let end = current
                .checked_add(n)
                .ok_or_else(|| MetadataError::Backend(format!("counter {} overflow", self.path)))?;
            match self
                .store
                .put(&self.path, end.to_string().as_bytes(), expect)
                .await
            {
                Ok(_) => return Ok(current..end),
                Err(
                    MetadataError::BadVersion { .. }
                    | MetadataError::AlreadyExists(_)
                    | MetadataError::NotFound(_),
                ) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}
