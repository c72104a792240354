//! One async lock per key, created on first use and dropped with its last
//! user: the broker serialises the load, unload and deletion of one topic
//! while other topics load at the same time (a broker taking over a bundle
//! loads many topics at once).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;

#[derive(Debug, Default)]
pub(crate) struct KeyedLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Holds one key's lock; the lock's entry goes when nobody else waits for it.
#[derive(Debug)]
pub(crate) struct KeyGuard<'a> {
    owner: &'a KeyedLocks,
    key: String,
    lock: Arc<tokio::sync::Mutex<()>>,
    guard: Option<OwnedMutexGuard<()>>,
}

impl KeyedLocks {
    /// Waits for `key`'s lock.
    pub(crate) async fn lock(&self, key: &str) -> KeyGuard<'_> {
        let lock = self.locks.lock().entry(key.to_owned()).or_default().clone();
        let guard = lock.clone().lock_owned().await;
        KeyGuard {
            owner: self,
            key: key.to_owned(),
            lock,
            guard: Some(guard),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.locks.lock().len()
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut locks = self.owner.locks.lock();
        // The map's reference and ours: nobody else holds or awaits this
        // lock, and nobody can take a new reference while the map is locked.
        if Arc::strong_count(&self.lock) == 2 {
            locks.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::KeyedLocks;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn one_key_is_serial_other_keys_are_not() {
        let locks = Arc::new(KeyedLocks::default());
        let a = locks.lock("a").await;
        // Another key is free at once.
        let b = tokio::time::timeout(Duration::from_millis(1), locks.lock("b")).await;
        assert!(b.is_ok());
        drop(b);
        // The same key waits until the holder is done.
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let _g = locks.lock("a").await;
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        drop(a);
        waiter.await.unwrap();
        assert_eq!(locks.len(), 0, "entries go with their last user");
    }

    #[tokio::test]
    async fn entries_are_kept_while_someone_waits() {
        let locks = Arc::new(KeyedLocks::default());
        let first = locks.lock("t").await;
        let mut waiters = Vec::new();
        for _ in 0..8 {
            let locks = locks.clone();
            waiters.push(tokio::spawn(async move {
                let _g = locks.lock("t").await;
                tokio::task::yield_now().await;
            }));
        }
        tokio::task::yield_now().await;
        drop(first);
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(locks.len(), 0);
    }
}
