//! PIP-84 consumer epochs. A redeliver-all raises the consumer's epoch and
//! sends the new one with REDELIVER_UNACKNOWLEDGED_MESSAGES; the broker
//! stamps every message it sends afterwards with it. A message stamped with
//! an older epoch was sent before the redeliver (queued here, or still on
//! the wire), will come again, and is dropped: without this, a consumer
//! that gives back what it holds (a transaction with a cumulative ack that
//! aborted) would see those messages out of order or twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One consumer's epoch, shared with what may raise it from outside (a
/// transaction). Clones share it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Epoch(Arc<AtomicU64>);

impl Epoch {
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Raises the epoch; returns the new one.
    pub fn raise(&self) -> u64 {
        self.0.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Whether a message stamped `stamped` was sent before the latest
    /// raise (a broker that stamps nothing is taken at its word).
    pub fn is_stale(&self, stamped: Option<u64>) -> bool {
        stamped.is_some_and(|e| e < self.current())
    }

    pub fn same(&self, other: &Epoch) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_stamped_before_a_raise_are_stale() {
        let e = Epoch::default();
        assert!(!e.is_stale(Some(0)));
        assert!(!e.is_stale(None));
        let shared = e.clone();
        assert_eq!(shared.raise(), 1);
        assert!(e.is_stale(Some(0)), "a clone raised it");
        assert!(!e.is_stale(Some(1)));
        assert!(!e.is_stale(None), "unstamped messages are kept");
        assert!(e.same(&shared) && !e.same(&Epoch::default()));
    }
}
