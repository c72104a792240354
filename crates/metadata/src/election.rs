//! Leader election by create-if-absent of an ephemeral key (Pulsar's `LeaderElection`).
//!
//! Every candidate tries to create the key under its session's lease. The winner leads until its
//! session is lost (locally, before the server can expire the lease), it resigns, or the key is
//! deleted. The others watch the key and try again when it is deleted. After a session loss the
//! candidate campaigns again as soon as the session is re-established; if its old key still
//! lives on the server it simply follows it until it goes.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{MetadataError, Result};
use crate::session::{Session, SessionState};
use crate::store::{EventKind, Expect, MetadataStore, Op, Stat};

/// What a candidate knows about its election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderState<T> {
    /// No leader is known (not campaigning, session lost, or between leaders).
    NoLeader,
    /// This candidate leads; `version` is the leader key's version (the fencing token).
    Leading {
        /// Version of the leader key.
        version: u64,
        /// The session epoch this leadership belongs to.
        epoch: u64,
    },
    /// Another candidate leads with `leader` (`None` if its value cannot be decoded).
    Following {
        /// The leader's value.
        leader: Option<T>,
        /// Version of the leader key.
        version: u64,
    },
}

impl<T> LeaderState<T> {
    /// True for [`LeaderState::Leading`].
    pub fn is_leading(&self) -> bool {
        matches!(self, LeaderState::Leading { .. })
    }
}

/// Bounds for election values.
pub trait ElectionValue:
    Serialize + DeserializeOwned + Clone + Send + Sync + fmt::Debug + PartialEq + 'static
{
}
impl<T: Serialize + DeserializeOwned + Clone + Send + Sync + fmt::Debug + PartialEq + 'static>
    ElectionValue for T
{
}

/// One candidate in the election at `path`, carrying `value` (JSON-encoded in the key).
pub struct LeaderElection<T: ElectionValue> {
    path: String,
    value: T,
    store: Arc<dyn MetadataStore>,
    session_state: watch::Receiver<SessionState>,
    alive_in: AliveIn,
    state: watch::Sender<LeaderState<T>>,
    task: parking_lot::Mutex<Option<(CancellationToken, JoinHandle<()>)>>,
    _t: PhantomData<T>,
}

/// "Is the session alive right now, in this epoch?", without keeping the session alive.
type AliveIn = Arc<dyn Fn(u64) -> bool + Send + Sync>;

impl<T: ElectionValue> fmt::Debug for LeaderElection<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElection")
            .field("path", &self.path)
            .field("state", &*self.state.borrow())
            .finish_non_exhaustive()
    }
}

impl<T: ElectionValue> LeaderElection<T> {
    /// A candidate for `path` in `session`'s store. It does nothing until [`Self::campaign`].
    pub fn new(session: &Arc<Session>, path: &str, value: T) -> Result<Self> {
        crate::store::validate_key(path)?;
        let weak = Arc::downgrade(session);
        let alive_in: AliveIn =
            Arc::new(move |epoch| weak.upgrade().is_some_and(|s| s.is_alive_in(epoch)));
        Ok(LeaderElection {
            path: path.to_string(),
            value,
            store: session.store().clone(),
            session_state: session.subscribe(),
            alive_in,
            state: watch::channel(LeaderState::NoLeader).0,
            task: parking_lot::Mutex::new(None),
            _t: PhantomData,
        })
    }

    /// The election's key.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// This candidate's value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// Starts campaigning in the background (no-op if already campaigning). Leadership is
    /// reported through [`Self::state`] / [`Self::subscribe`].
    pub fn campaign(&self) {
        let mut task = self.task.lock();
        if task.as_ref().is_some_and(|(_, h)| !h.is_finished()) {
            return;
        }
        let cancel = CancellationToken::new();
        let worker = Worker {
            path: self.path.clone(),
            value: serde_json::to_vec(&self.value).unwrap_or_default(),
            store: self.store.clone(),
            alive_in: self.alive_in.clone(),
            session_state: self.session_state.clone(),
            state: self.state.clone(),
            cancel: cancel.clone(),
        };
        let handle = tokio::spawn(worker.run());
        *task = Some((cancel, handle));
    }

    /// The last known state. While `Leading`, also check [`Self::is_leader`] before acting: it
    /// accounts for a session deadline that passed a moment ago.
    pub fn state(&self) -> LeaderState<T> {
        self.state.borrow().clone()
    }

    /// Follows state changes.
    pub fn subscribe(&self) -> watch::Receiver<LeaderState<T>> {
        self.state.subscribe()
    }

    /// True if this candidate leads right now (its session is alive in the epoch it won in).
    pub fn is_leader(&self) -> bool {
        match *self.state.borrow() {
            LeaderState::Leading { epoch, .. } => (self.alive_in)(epoch),
            _ => false,
        }
    }

    /// A check that fails unless this candidate still holds the leader key at the version it won
    /// with. Put it into every transaction a leader makes (leadership is advisory; this fences).
    pub fn fence(&self) -> Result<Op> {
        match *self.state.borrow() {
            LeaderState::Leading { version, epoch } if (self.alive_in)(epoch) => {
                Ok(Op::check(self.path.clone(), Expect::Version(version)))
            }
            _ => Err(MetadataError::SessionExpired),
        }
    }

    /// Reads the current leader and its key's metadata from the store.
    pub async fn leader(&self) -> Result<Option<(T, Stat)>> {
        match self.store.get(&self.path).await? {
            None => Ok(None),
            Some(v) => {
                let leader =
                    serde_json::from_slice(&v.value).map_err(|e| MetadataError::Codec {
                        key: self.path.clone(),
                        reason: e.to_string(),
                    })?;
                Ok(Some((leader, v.stat)))
            }
        }
    }

    /// Waits until `pred` holds for the state, at most `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&LeaderState<T>) -> bool,
    ) -> Result<LeaderState<T>> {
        let mut rx = self.state.subscribe();
        let fut = async {
            loop {
                let cur = rx.borrow_and_update().clone();
                if pred(&cur) {
                    return Ok(cur);
                }
                if rx.changed().await.is_err() {
                    return Err(MetadataError::Closed);
                }
            }
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| MetadataError::Backend(format!("election {} timed out", self.path)))?
    }

    /// Stops campaigning and, if leading, deletes the leader key (fenced by its version) so
    /// another candidate takes over at once. Campaign again with [`Self::campaign`].
    pub async fn resign(&self) -> Result<()> {
        let task = self.task.lock().take();
        if let Some((cancel, handle)) = task {
            cancel.cancel();
            let _ = handle.await;
        }
        let prev = self.state.send_replace(LeaderState::NoLeader);
        if let LeaderState::Leading { version, .. } = prev {
            match self.store.delete(&self.path, Some(version)).await {
                Ok(())
                | Err(MetadataError::NotFound(_))
                | Err(MetadataError::BadVersion { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl<T: ElectionValue> Drop for LeaderElection<T> {
    fn drop(&mut self) {
        if let Some((cancel, _)) = self.task.lock().take() {
            cancel.cancel();
        }
    }
}

struct Worker<T> {
    path: String,
    value: Vec<u8>,
    store: Arc<dyn MetadataStore>,
    alive_in: AliveIn,
    session_state: watch::Receiver<SessionState>,
    state: watch::Sender<LeaderState<T>>,
    cancel: CancellationToken,
}

enum Outcome {
    /// Try to create the key again now.
    Campaign,
    /// The session epoch ended; wait for the next one.
    SessionEnded,
    /// Cancelled or closed.
    Stop,
}

impl<T: ElectionValue> Worker<T> {
    async fn run(mut self) {
        loop {
            // Wait for a live session.
            let (lease, epoch) = loop {
                let st = *self.session_state.borrow_and_update();
                match st {
                    SessionState::Alive { lease, epoch } if (self.alive_in)(epoch) => {
                        break (lease, epoch);
                    }
                    SessionState::Closed => {
                        self.state.send_replace(LeaderState::NoLeader);
                        return;
                    }
                    _ => {}
                }
                tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    r = self.session_state.changed() => if r.is_err() { return },
                    // The local deadline can pass without a state change yet.
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            };
            let mut backoff = Duration::from_millis(50);
            loop {
                match self.round(lease, epoch).await {
                    Ok(Outcome::Campaign) => backoff = Duration::from_millis(50),
                    Ok(Outcome::SessionEnded) => break,
                    Ok(Outcome::Stop) => return,
                    Err(e) => {
                        tracing::debug!(path = %self.path, error = %e, "election round failed; retrying");
                        if matches!(e, MetadataError::SessionExpired) {
                            self.state.send_replace(LeaderState::NoLeader);
                            break;
                        }
                        if matches!(e, MetadataError::Closed) {
                            return;
                        }
                        tokio::select! {
                            _ = self.cancel.cancelled() => return,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                    }
                }
            }
            self.state.send_replace(LeaderState::NoLeader);
        }
    }

    /// One round: try to create the key, then observe it until something changes.
    async fn round(&mut self, lease: i64, epoch: u64) -> Result<Outcome> {
        if !(self.alive_in)(epoch) {
            return Ok(Outcome::SessionEnded);
        }
        match self
            .store
            .put_ephemeral(&self.path, &self.value, Expect::Absent, lease)
            .await
        {
            Ok(stat) => {
                tracing::info!(path = %self.path, version = stat.version, "became leader");
                self.state.send_replace(LeaderState::Leading {
                    version: stat.version,
                    epoch,
                });
            }
            Err(MetadataError::AlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
        // Read the key at a revision and watch from the next one: no change is missed.
        let scan = self.store.scan_prefix(&self.path).await?;
        let current = scan.entries.into_iter().find(|kv| kv.key == self.path);
        let Some(current) = current else {
            return Ok(Outcome::Campaign);
        };
        self.publish(current.stat, &current.value, lease, epoch);
        let mut watch = self.store.watch(&self.path, scan.revision + 1).await?;
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return Ok(Outcome::Stop),
                r = self.session_state.changed() => {
                    if r.is_err() {
                        return Ok(Outcome::Stop);
                    }
                    let st = *self.session_state.borrow_and_update();
                    if st != (SessionState::Alive { lease, epoch }) {
                        // Lost (or closed): stop acting at once.
                        self.state.send_replace(LeaderState::NoLeader);
                        return Ok(Outcome::SessionEnded);
                    }
                }
                batch = watch.next() => {
                    let batch = match batch {
                        Some(Ok(b)) => b,
                        Some(Err(e)) => return Err(e),
                        None => return Err(MetadataError::Closed),
                    };
                    for ev in batch.events.iter().filter(|e| e.key == self.path) {
                        match ev.kind {
                            EventKind::Deleted => {
                                self.state.send_replace(LeaderState::NoLeader);
                                return Ok(Outcome::Campaign);
                            }
                            EventKind::Created | EventKind::Modified => {
                                if let (Some(stat), Some(value)) = (ev.stat, ev.value.as_ref()) {
                                    self.publish(stat, value, lease, epoch);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    fn publish(&self, stat: Stat, value: &[u8], lease: i64, epoch: u64) {
        let next = if stat.lease == Some(lease) {
            LeaderState::Leading {
                version: stat.version,
                epoch,
            }
        } else {
            let leader = serde_json::from_slice(value).ok();
            if leader.is_none() {
                tracing::warn!(path = %self.path, "leader value cannot be decoded");
            }
            LeaderState::Following {
                leader,
                version: stat.version,
            }
        };
        self.state.send_if_modified(|cur| {
            if *cur == next {
                false
            } else {
                *cur = next;
                true
            }
        });
    }
}
