//! A run's counters and latency histograms, shared by its producers,
//! consumers and the status lines.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

pub(super) fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

#[derive(Debug)]
pub(super) struct Stats {
    pub(super) sent: AtomicU64,
    pub(super) acked: AtomicU64,
    pub(super) acked_bytes: AtomicU64,
    pub(super) received: AtomicU64,
    pub(super) received_bytes: AtomicU64,
    pub(super) errors: AtomicU64,
    /// Messages received again: a sequence id at or below the highest one
    /// already seen from the same producer on the same consumer (exact
    /// duplicates for Exclusive and Failover; may count reordering on Shared).
    pub(super) duplicates: AtomicU64,
    pub(super) pub_lat: Mutex<(Histogram<u64>, Histogram<u64>)>,
    pub(super) e2e_lat: Mutex<(Histogram<u64>, Histogram<u64>)>,
    pub(super) stop_producing: AtomicBool,
    /// Cancelled when consumers should stop (they wait on it, not poll).
    pub(super) stop_consuming: tokio_util::sync::CancellationToken,
    /// Microseconds from the start to the last receipt and the last receive.
    pub(super) last_ack_us: AtomicU64,
    pub(super) last_recv_us: AtomicU64,
    pub(super) start: Instant,
}

impl Stats {
    pub(super) fn new() -> Stats {
        Stats {
            sent: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            acked_bytes: AtomicU64::new(0),
            received: AtomicU64::new(0),
            received_bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            pub_lat: Mutex::new((hist(), hist())),
            e2e_lat: Mutex::new((hist(), hist())),
            stop_producing: AtomicBool::new(false),
            stop_consuming: tokio_util::sync::CancellationToken::new(),
            last_ack_us: AtomicU64::new(0),
            last_recv_us: AtomicU64::new(0),
            start: Instant::now(),
        }
    }
}

pub(super) fn record(h: &Mutex<(Histogram<u64>, Histogram<u64>)>, us: u64) {
    let us = us.clamp(1, 60_000_000);
    let mut g = h.lock().expect("histogram lock");
    let _ = g.0.record(us);
    let _ = g.1.record(us);
}

pub(super) fn wall_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
