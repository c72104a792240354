//! The disk guard's state (the guard itself is `disk_guard`): while the data directory's
//! file system is full (at `disk_usage_threshold`, or a write refused for want of space)
//! the broker takes no new writes, and takes them again under `disk_usage_lwm_threshold` (Pulsar's bookies
//! go read-only the same way). The decision is `strobe_ledger::disk::DiskGuard`'s.
//!
//! Read-only, producers are closed and refused with
//! ProducerBlockedQuotaExceededException: the official clients fail their pending
//! sends with it and reconnect with their backoff (the C++ client answers any other
//! SEND_ERROR by closing the whole connection and resending at once, a reconnect
//! storm). Reads, dispatch and acks go on: the storage keeps what it cannot write yet
//! in memory, and the journal it writes first is preallocated.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use strobe_ledger::disk::ReadOnly;

/// The guard's state, for the producer path, `/metrics` and the health check.
#[derive(Debug, Default)]
pub struct DiskState {
    pub(super) read_only: Mutex<Option<ReadOnly>>,
    /// The last usage read, as `f64` bits (0 until read).
    pub(super) usage: AtomicU64,
    pub(super) free_bytes: AtomicU64,
    /// Whether a guard runs (a broker on a data directory).
    pub(super) watched: std::sync::atomic::AtomicBool,
    /// Times the broker went read-only.
    pub read_only_episodes: AtomicU64,
    /// Producers (and topic creations) refused while read-only.
    pub refusals: AtomicU64,
}

impl DiskState {
    /// Why writes are refused now, if they are.
    pub fn read_only(&self) -> Option<ReadOnly> {
        self.read_only.lock().clone()
    }

    /// The last usage read (blocks or inodes, the larger share) and the bytes free;
    /// `None` when no guard runs.
    pub fn usage(&self) -> Option<(f64, u64)> {
        self.watched.load(Ordering::Relaxed).then(|| {
            (
                f64::from_bits(self.usage.load(Ordering::Relaxed)),
                self.free_bytes.load(Ordering::Relaxed),
            )
        })
    }
}
