//! The registry of the scalable topics' controllers this broker takes part
//! in (see `controllers` for what the broker does with them).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use strobe_metadata::LeaderElection;
use strobe_scalable::Controller;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::BrokerError;

/// The controllers of the scalable topics this broker touched.
#[derive(Default)]
pub(crate) struct Controllers {
    pub(super) slots: Mutex<HashMap<String, Arc<Slot>>>,
}

pub(super) struct Slot {
    pub(super) controller: Arc<Controller>,
    /// `None` in standalone: this broker is the only candidate.
    pub(super) election: Option<Arc<LeaderElection<String>>>,
    /// The leadership (the leader key's version; 0 in standalone) whose
    /// recovery finished.
    pub(super) recovered: tokio::sync::Mutex<Option<u64>>,
    pub(super) stop: CancellationToken,
    /// The subscriptions' coordinators, while this broker leads.
    pub(super) coordinators:
        tokio::sync::Mutex<HashMap<String, Arc<super::coordinator::Coordinator>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Where a topic's controller acts.
#[derive(Debug, Clone)]
pub enum ControllerAt {
    /// Here: this broker leads it, and has finished what a previous leader left.
    Here(Arc<Controller>),
    /// At another broker: its id and its admin URL.
    Elsewhere { broker_id: String, web_url: String },
}

/// Runs recovery once per leadership.
pub(super) async fn ensure_recovered(slot: &Slot, version: u64) -> Result<(), BrokerError> {
    let mut recovered = slot.recovered.lock().await;
    if *recovered == Some(version) {
        return Ok(());
    }
    let layout = slot.controller.recover().await?;
    info!(topic = %slot.controller.topic(), epoch = layout.epoch, leadership = version, "controller ready");
    *recovered = Some(version);
    Ok(())
}
