//! The cluster's counters that the topic service keeps (lookups answered,
//! transfers, unloads, splits), read by `/metrics`.

/// Counters of transfers and lookups, for `/metrics`.
#[derive(Debug, Default)]
pub struct ClusterCounters {
    pub lookups: std::sync::atomic::AtomicU64,
    pub transfers: std::sync::atomic::AtomicU64,
    pub transfers_failed: std::sync::atomic::AtomicU64,
    /// Time spent closing topics (Releasing → Assigning), microseconds.
    pub transfer_close_us: std::sync::atomic::AtomicU64,
    /// Time from Assigning until the destination owned the bundle, microseconds.
    pub transfer_take_us: std::sync::atomic::AtomicU64,
    pub unloads: std::sync::atomic::AtomicU64,
    pub splits: std::sync::atomic::AtomicU64,
}
