//! Sessions: a lease kept alive in the background, whose loss is an event.
//!
//! The rule that makes leadership safe: the holder must stop acting on its session *before* the
//! server can expire the lease. The server counts a lease's TTL from when it *received* the last
//! keep-alive, which is after we *sent* it; so the session counts from the send time and gives up
//! a safety margin earlier still. [`Session::is_alive`] compares against that local deadline
//! synchronously, so it turns false on time even if the background task is starved.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{MetadataError, Result};
use crate::store::{LeaseId, MetadataStore};

/// Session settings.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// How long others wait, at most, after this session's process dies before its ephemeral
    /// keys vanish (and its leaderships move). See `expiry_slack`.
    pub ttl: Duration,
    /// The lease asked of the server is `ttl - expiry_slack`, so that a server that expires
    /// leases on a tick still deletes the keys within `ttl`. etcd checks expiry every 500 ms and
    /// rounds TTLs up to whole seconds (at least 2 s): use 1 s there, with `ttl` ≥ 3 s. The
    /// session's own deadline follows the granted lease, so it still steps down before expiry.
    pub expiry_slack: Duration,
    /// Keep-alives are sent every `ttl / keepalive_divisor`.
    pub keepalive_divisor: u32,
    /// How much earlier than the server's earliest possible expiry the session declares itself
    /// lost. Defaults to a tenth of the TTL, at least 100 ms.
    pub margin: Option<Duration>,
    /// After a loss, grant a new lease and report [`SessionState::Alive`] with the next epoch
    /// (Pulsar's `SessionReestablished`). On by default.
    pub reestablish: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            ttl: Duration::from_secs(10),
            expiry_slack: Duration::ZERO,
            keepalive_divisor: 3,
            margin: None,
            reestablish: true,
        }
    }
}

impl SessionOptions {
    /// The lease TTL asked of the server.
    pub fn lease_ttl(&self) -> Duration {
        if self.expiry_slack < self.ttl {
            self.ttl - self.expiry_slack
        } else {
            self.ttl
        }
    }

    /// Defaults with this TTL.
    pub fn with_ttl(ttl: Duration) -> Self {
        SessionOptions {
            ttl,
            ..Default::default()
        }
    }
}

/// Where a session stands. The epoch counts leases: each re-established lease gets the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// The lease is held; keys put under it live.
    Alive {
        /// The lease.
        lease: LeaseId,
        /// Which lease of this session (0 for the first).
        epoch: u64,
    },
    /// The lease of `epoch` is lost (or about to be): whatever was owned under it is not any more.
    Lost {
        /// The epoch that ended.
        epoch: u64,
    },
    /// The session was closed by its owner.
    Closed,
}

/// A lease with a keep-alive task (the session part of Pulsar's `CoordinationService`).
/// Dropping it stops the keep-alives and revokes the lease in the background.
pub struct Session {
    shared: Arc<SessionShared>,
    cancel: CancellationToken,
}

struct SessionShared {
    store: Arc<dyn MetadataStore>,
    opts: SessionOptions,
    state: watch::Sender<SessionState>,
    /// The local deadline: act on this session only before it.
    valid_until: Mutex<Instant>,
    /// Fault injection: stop all lease traffic, as a network partition would.
    paused: AtomicBool,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("state", &*self.shared.state.borrow())
            .field("ttl", &self.shared.opts.ttl)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Grants a lease and starts keeping it alive.
    pub async fn start(store: Arc<dyn MetadataStore>, opts: SessionOptions) -> Result<Session> {
        let sent = Instant::now();
        let grant = store.grant_lease(opts.lease_ttl()).await?;
        let shared = Arc::new(SessionShared {
            state: watch::channel(SessionState::Alive {
                lease: grant.id,
                epoch: 0,
            })
            .0,
            valid_until: Mutex::new(sent),
            paused: AtomicBool::new(false),
            store,
            opts,
        });
        *shared.valid_until.lock() = shared.deadline_from(sent, grant.ttl);
        let cancel = CancellationToken::new();
        tokio::spawn(run(shared.clone(), grant.id, grant.ttl, cancel.clone()));
        Ok(Session { shared, cancel })
    }

    /// The store this session lives in.
    pub fn store(&self) -> &Arc<dyn MetadataStore> {
        &self.shared.store
    }

    /// The current state.
    pub fn state(&self) -> SessionState {
        *self.shared.state.borrow()
    }

    /// Follows state changes (loss, re-establishment, close).
    pub fn subscribe(&self) -> watch::Receiver<SessionState> {
        self.shared.state.subscribe()
    }

    /// The current lease and epoch, if the session is alive *right now* (checked against the
    /// local deadline, not only the last reported state).
    pub fn lease(&self) -> Option<(LeaseId, u64)> {
        match self.state() {
            SessionState::Alive { lease, epoch }
                if Instant::now() < *self.shared.valid_until.lock() =>
            {
                Some((lease, epoch))
            }
            _ => None,
        }
    }

    /// True if the session is alive right now. Someone acting as leader or owner must check this
    /// (or [`Session::is_alive_in`]) before each action.
    pub fn is_alive(&self) -> bool {
        self.lease().is_some()
    }

    /// True if the session is alive right now and still in `epoch`.
    pub fn is_alive_in(&self, epoch: u64) -> bool {
        self.lease().is_some_and(|(_, e)| e == epoch)
    }

    /// The lease, or [`MetadataError::SessionExpired`].
    pub fn require_lease(&self) -> Result<LeaseId> {
        self.lease()
            .map(|(l, _)| l)
            .ok_or(MetadataError::SessionExpired)
    }

    /// The TTL asked for.
    pub fn ttl(&self) -> Duration {
        self.shared.opts.ttl
    }

    /// Fault injection for tests and drills: `true` stops every keep-alive (and re-grant) as a
    /// network partition between this process and the store would; `false` resumes.
    pub fn pause_keepalives(&self, paused: bool) {
        self.shared.paused.store(paused, Ordering::SeqCst);
    }

    /// Stops the keep-alives and revokes the lease, deleting its ephemeral keys now.
    pub async fn close(&self) -> Result<()> {
        self.cancel.cancel();
        let lease = match self.state() {
            SessionState::Alive { lease, .. } => Some(lease),
            _ => None,
        };
        self.shared.state.send_replace(SessionState::Closed);
        if let Some(lease) = lease {
            self.shared.store.revoke_lease(lease).await?;
        }
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.cancel.is_cancelled() {
            return;
        }
        self.cancel.cancel();
        let prev = self.shared.state.send_replace(SessionState::Closed);
        if let SessionState::Alive { lease, .. } = prev
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let store = self.shared.store.clone();
            handle.spawn(async move {
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), store.revoke_lease(lease)).await;
            });
        }
    }
}

impl SessionShared {
    fn margin(&self) -> Duration {
        self.opts
            .margin
            .unwrap_or_else(|| (self.opts.ttl / 10).max(Duration::from_millis(100)))
    }

    fn deadline_from(&self, sent: Instant, ttl: Duration) -> Instant {
        sent + ttl.saturating_sub(self.margin())
    }

    fn interval(&self, ttl: Duration) -> Duration {
        (ttl / self.opts.keepalive_divisor.max(2)).max(Duration::from_millis(10))
    }

    fn paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }
}

/// The keep-alive loop: keep the lease, declare it lost at the local deadline, re-establish.
async fn run(
    shared: Arc<SessionShared>,
    mut lease: LeaseId,
    mut ttl: Duration,
    cancel: CancellationToken,
) {
    let mut epoch = 0u64;
    loop {
        // Alive: renew every interval until the local deadline passes or the lease is gone.
        let mut next = Instant::now() + shared.interval(ttl);
        loop {
            let deadline = *shared.valid_until.lock();
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(next.min(deadline)) => {}
            }
            if Instant::now() >= *shared.valid_until.lock() {
                tracing::warn!(
                    lease,
                    epoch,
                    "metadata session lost: keep-alives not acknowledged in time"
                );
                break;
            }
            if Instant::now() < next || shared.paused() {
                next = Instant::now() + shared.interval(ttl);
                continue;
            }
            let sent = Instant::now();
            let budget = (*shared.valid_until.lock()).saturating_duration_since(sent);
            match tokio::time::timeout(budget, shared.store.keep_alive(lease)).await {
                Ok(Ok(Some(granted))) => {
                    ttl = granted;
                    *shared.valid_until.lock() = shared.deadline_from(sent, granted);
                    next = sent + shared.interval(granted);
                }
                Ok(Ok(None)) => {
                    tracing::warn!(lease, epoch, "metadata session lost: the lease is gone");
                    break;
                }
                Ok(Err(e)) => {
                    tracing::debug!(lease, error = %e, "keep-alive failed; retrying");
                    next = Instant::now() + Duration::from_millis(200).min(shared.interval(ttl));
                }
                Err(_) => {} // the deadline passed; the loop head declares the loss
            }
        }
        *shared.valid_until.lock() = Instant::now();
        shared.state.send_replace(SessionState::Lost { epoch });
        // The lease may still live on the server; revoking it frees what we owned sooner.
        let store = shared.store.clone();
        if !shared.paused() {
            let old = lease;
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(5), store.revoke_lease(old)).await;
            });
        }
        if !shared.opts.reestablish {
            return;
        }
        // Re-establish with backoff.
        let mut backoff = Duration::from_millis(100);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            if shared.paused() {
                continue;
            }
            let sent = Instant::now();
            match shared.store.grant_lease(shared.opts.lease_ttl()).await {
                Ok(grant) => {
                    lease = grant.id;
                    ttl = grant.ttl;
                    epoch += 1;
                    *shared.valid_until.lock() = shared.deadline_from(sent, grant.ttl);
                    if cancel.is_cancelled() {
                        let _ = shared.store.revoke_lease(lease).await;
                        return;
                    }
                    tracing::info!(lease, epoch, "metadata session re-established");
                    shared
                        .state
                        .send_replace(SessionState::Alive { lease, epoch });
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "could not re-establish the metadata session");
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}
