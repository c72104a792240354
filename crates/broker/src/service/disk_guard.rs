//! The disk guard (its state: `disk`): reads the data directory's usage and turns the
//! broker read-only and back.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use strobe_ledger::disk::{DiskGuard, Watermarks, disk_usage, storage_full_errors};

use super::BrokerService;
use crate::BrokerError;

impl BrokerService {
    /// Refuses a new producer (and the topic it would create) while the disk is full.
    pub fn refuse_if_read_only(&self) -> Result<(), BrokerError> {
        match self.disk.read_only() {
            Some(why) => {
                self.disk.refusals.fetch_add(1, Ordering::Relaxed);
                Err(BrokerError::DiskFull(why.to_string()))
            }
            None => Ok(()),
        }
    }

    /// Reads the data directory's usage every `disk_check_interval_ms` and turns the
    /// broker read-only and back. Runs until `shutdown`; returns at once without a
    /// data directory (memory storage).
    pub async fn run_disk_guard(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let dir = self.config.data_dir.clone();
        if self.backend.kind() == "memory" || !dir.is_dir() {
            return;
        }
        let marks = match Watermarks::new(
            self.config.disk_usage_threshold,
            self.config.disk_usage_lwm_threshold,
        ) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(error = %e, "the disk guard does not run");
                return;
            }
        };
        self.disk.watched.store(true, Ordering::Relaxed);
        let mut guard = DiskGuard::new(marks, storage_full_errors());
        let mut tick =
            tokio::time::interval(Duration::from_millis(self.config.disk_check_interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut unread_logged = false;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let usage = match disk_usage(&dir) {
                Ok(u) => {
                    unread_logged = false;
                    self.disk.usage.store(u.ratio.to_bits(), Ordering::Relaxed);
                    self.disk.free_bytes.store(u.free_bytes, Ordering::Relaxed);
                    Some(u.ratio)
                }
                Err(e) => {
                    if !unread_logged {
                        tracing::warn!(dir = %dir.display(), error = %e, "cannot read the data directory's disk usage");
                        unread_logged = true;
                    }
                    None
                }
            };
            if !guard.observe(usage, storage_full_errors(), Instant::now()) {
                *self.disk.read_only.lock() = guard.read_only().cloned();
                continue;
            }
            let now = guard.read_only().cloned();
            *self.disk.read_only.lock() = now.clone();
            match now {
                Some(why) => {
                    self.disk.read_only_episodes.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(reason = %why, "the broker is read-only: producers are closed and refused");
                    // Their clients come back and are refused, which fails their
                    // pending sends.
                    for t in self.loaded_topics() {
                        if t.name.is_persistent() {
                            t.disconnect_producers();
                        }
                    }
                }
                None => tracing::warn!(
                    usage_pct = usage.unwrap_or(0.0) * 100.0,
                    "the broker takes writes again"
                ),
            }
        }
    }
}
