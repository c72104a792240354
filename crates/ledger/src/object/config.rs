//! The object-store backend's settings.

use std::time::Duration;

/// Tuning of the object-store backend.
#[derive(Debug, Clone)]
pub struct ObjectBackendConfig {
    /// How long a flush waits for more entries before its put (0: it puts as
    /// soon as the topic's previous put returned; entries arriving during a
    /// put share the next one).
    pub flush_delay: Duration,
    /// The most entry bytes one put carries.
    pub max_batch_bytes: usize,
    /// Bytes of decoded objects kept per topic for reads.
    pub cache_bytes: usize,
    /// A checkpoint every this many data puts (and after trims, and at a close that leaves
    /// more than a few objects past the newest).
    pub checkpoint_every: u64,
    /// Attempts of one put before the topic fails (transient errors only).
    pub put_attempts: u32,
}

impl Default for ObjectBackendConfig {
    fn default() -> Self {
        ObjectBackendConfig {
            flush_delay: Duration::ZERO,
            max_batch_bytes: 8 << 20,
            cache_bytes: 64 << 20,
            checkpoint_every: 256,
            put_attempts: 8,
        }
    }
}
