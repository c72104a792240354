//! The append queue between the topics and the group commit: the requests
//! they queue (see `topic::Req`) wait here, with the thresholds that wake a
//! second flusher thread.

use std::collections::VecDeque;

use super::config::FileBackendConfig;
use super::pacing::SyncPacer;
use super::topic::Req;
use crate::LedgerError;

#[derive(Debug)]
pub struct Queue {
    pub reqs: VecDeque<Req>,
    pub bytes: usize,
    pub shutdown: bool,
    /// Shut down with a final checkpoint.
    pub clean: bool,
    pub failed: Option<LedgerError>,
    /// Flusher threads asleep on the condvar (appends wake one when all are).
    pub waiting: usize,
    /// The interval `flusher::sync_pause` keeps between journal syncs, and when
    /// the last one started.
    pub pacer: SyncPacer,
}

/// Queued requests (or bytes) that make a thread about to wait on the disk
/// wake the other flusher thread to write the next group commit meanwhile
/// (see `flusher::run`). A group's CPU work grows with its requests (grouping,
/// framing, completions); a few large entries cost little more than the
/// wake-up would (a single topic's batched produce: +5% broker CPU when
/// woken from 32 KiB queued).
pub const PIPELINE_REQS: usize = 64;
pub const PIPELINE_BYTES: usize = 1 << 20;

impl Queue {
    pub fn new(cfg: &FileBackendConfig) -> Queue {
        Queue {
            reqs: VecDeque::new(),
            bytes: 0,
            shutdown: false,
            clean: false,
            failed: None,
            waiting: 0,
            pacer: SyncPacer::new(cfg.min_sync_interval, cfg.max_sync_interval),
        }
    }
}

impl Queue {
    /// At least [`PIPELINE_REQS`] requests or [`PIPELINE_BYTES`] queued:
    /// enough for a second thread to write while the first waits on the disk.
    pub(super) fn enough_to_pipeline(&self) -> bool {
        self.reqs.len() >= PIPELINE_REQS || self.bytes >= PIPELINE_BYTES
    }
}
