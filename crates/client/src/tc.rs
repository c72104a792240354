//! PIP-473 `WatchTcAssignments` (client side of
//! `WatchTcAssignmentsDiscovery`): one watch on any broker connection, a full
//! snapshot of transaction-coordinator partition leaders at once and on every
//! change.

use std::sync::Arc;

use strobe_wire::Command;
use strobe_wire::proto::{CommandWatchTcAssignments, CommandWatchTcAssignmentsClose};
use tokio::sync::mpsc;

use crate::client::Client;
use crate::connection::{Connection, server_error};
use crate::error::{Error, Result};

/// One coordinator partition and the broker that leads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcAssignment {
    pub tc_id: u64,
    pub url: Option<String>,
    pub url_tls: Option<String>,
}

/// An open watch. Each [`TcAssignmentsWatcher::next`] yields the next full snapshot.
#[derive(Debug)]
pub struct TcAssignmentsWatcher {
    conn: Arc<Connection>,
    watch_id: u64,
    rx: mpsc::UnboundedReceiver<Command>,
}

impl Client {
    /// Opens a `WATCH_TC_ASSIGNMENTS` watch. Fails with
    /// [`Error::Unexpected`] when the broker does not advertise
    /// `supports_tc_metadata_discovery`.
    pub async fn watch_tc_assignments(&self) -> Result<TcAssignmentsWatcher> {
        let conn = self.service_connection().await?;
        if conn.features.supports_tc_metadata_discovery != Some(true) {
            return Err(Error::Unexpected(
                "the broker does not advertise supports_tc_metadata_discovery".into(),
            ));
        }
        let watch_id = self.next_id();
        let (tx, rx) = mpsc::unbounded_channel();
        conn.register_watcher(watch_id, tx);
        conn.send_command(CommandWatchTcAssignments { watch_id })?;
        Ok(TcAssignmentsWatcher { conn, watch_id, rx })
    }
}

impl TcAssignmentsWatcher {
    /// The next snapshot: `(parallelism, assignments)`.
    pub async fn next(&mut self) -> Result<(u32, Vec<TcAssignment>)> {
        match self.rx.recv().await {
            Some(Command::WatchTcAssignmentsUpdate(u)) => {
                if let Some(e) = u.error {
                    return Err(server_error(e, u.message.unwrap_or_default()));
                }
                let s = u.snapshot.unwrap_or_default();
                let a = s
                    .assignments
                    .into_iter()
                    .map(|a| TcAssignment {
                        tc_id: a.tc_id,
                        url: a.broker_service_url,
                        url_tls: a.broker_service_url_tls,
                    })
                    .collect();
                Ok((s.parallelism, a))
            }
            Some(other) => Err(Error::Unexpected(format!("{:?}", other.kind()))),
            None => Err(Error::Disconnected(self.conn.addr.clone())),
        }
    }
}

impl Drop for TcAssignmentsWatcher {
    fn drop(&mut self) {
        self.conn.unregister_watcher(self.watch_id);
        let _ = self.conn.send_command(CommandWatchTcAssignmentsClose {
            watch_id: self.watch_id,
        });
    }
}
