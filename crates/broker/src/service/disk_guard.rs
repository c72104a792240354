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

    /// The directories whose file systems take this broker's writes: a file store's
    /// directory (a cluster's shared `file://` store: every broker then sees the same
    /// usage and turns read-only with the others, as there is no other disk to move
    /// its bundles to) and a standalone broker's data directory (its metadata log).
    /// None for memory or an object store (a full bucket fails its puts: the topic
    /// is closed and loaded again by its next client, see `current`).
    fn watched_dirs(&self) -> Vec<std::path::PathBuf> {
        let mut dirs = Vec::new();
        if let Ok(strobe_ledger::StorageUrl::File(p)) = self.config.storage_url() {
            dirs.push(p);
        }
        if self.cluster.is_none() && !dirs.is_empty() {
            dirs.push(self.config.data_dir.clone());
        }
        dirs.retain(|d| d.is_dir());
        dirs
    }

    /// Reads the usage of the directories that take writes every
    /// `disk_check_interval_ms` (the fullest counts) and turns the broker read-only and
    /// back. Runs until `shutdown`; returns at once when no such directory exists.
    pub async fn run_disk_guard(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let dirs = self.watched_dirs();
        if dirs.is_empty() {
            return;
        }
        tracing::info!(dirs = ?dirs, threshold = self.config.disk_usage_threshold,
            lwm = self.config.disk_usage_lwm_threshold, "the disk guard watches");
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
            let read: Result<Vec<_>, _> = dirs.iter().map(|d| disk_usage(d)).collect();
            let usage = match read {
                Ok(us) => {
                    unread_logged = false;
                    let ratio = us.iter().map(|u| u.ratio).fold(0.0, f64::max);
                    let free = us.iter().map(|u| u.free_bytes).min().unwrap_or(0);
                    self.disk.usage.store(ratio.to_bits(), Ordering::Relaxed);
                    self.disk.free_bytes.store(free, Ordering::Relaxed);
                    Some(ratio)
                }
                Err(e) => {
                    if !unread_logged {
                        tracing::warn!(dirs = ?dirs, error = %e, "cannot read the disk usage");
                        unread_logged = true;
                    }
                    None
                }
            };
            let changed = guard.observe(usage, storage_full_errors(), Instant::now());
            let now = guard.read_only().cloned();
            *self.disk.read_only.lock() = now.clone();
            if !changed {
                continue;
            }
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
