//! What a listener does when `accept` fails ([`AcceptErrors`]): out of file descriptors (or
//! memory for sockets), the pending connection stays in the kernel's queue and every retry
//! fails at once, so the loop backs off (50 ms doubling to 1 s while it lasts) and says so at
//! ERROR, once per 10 s with the count of failures since; a peer that reset its connection
//! before it was accepted is that peer's business (DEBUG, no pause). Service resumes by itself
//! when descriptors are free.

use std::io;
use std::time::{Duration, Instant};

use tracing::{debug, error};

/// The shortest and longest pause after a failed accept for want of resources.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const LONGEST_PAUSE: Duration = Duration::from_secs(1);
/// The most often an exhausted listener logs.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// One listener's accept failures (see the module docs).
#[derive(Debug)]
pub struct AcceptErrors {
    listener: &'static str,
    pause: Duration,
    last_log: Option<Instant>,
    unlogged: u64,
}

/// Whether `e` means the process or the system is out of something a connection needs.
pub fn out_of_resources(e: &io::Error) -> bool {
    use nix::errno::Errno;
    e.raw_os_error().is_some_and(|n| {
        matches!(
            Errno::from_raw(n),
            Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM
        )
    })
}

impl AcceptErrors {
    /// For the listener named `listener` in logs ("Pulsar", "HTTPS", ...).
    pub fn new(listener: &'static str) -> AcceptErrors {
        AcceptErrors {
            listener,
            pause: FIRST_PAUSE,
            last_log: None,
            unlogged: 0,
        }
    }

    /// An accept failed with `e`: how long to wait before the next.
    pub fn failed(&mut self, e: &io::Error) -> Duration {
        if !out_of_resources(e) {
            debug!(listener = self.listener, error = %e, "accept failed");
            return Duration::ZERO;
        }
        self.unlogged += 1;
        let now = Instant::now();
        if self
            .last_log
            .is_none_or(|t| now.duration_since(t) >= LOG_EVERY)
        {
            error!(
                listener = self.listener,
                error = %e,
                failures = self.unlogged,
                open_files = open_files(),
                "cannot accept connections: out of file descriptors or socket memory; retrying (raise the open-files limit, or close topics and connections)"
            );
            self.last_log = Some(now);
            self.unlogged = 0;
        }
        let pause = self.pause;
        self.pause = (self.pause * 2).min(LONGEST_PAUSE);
        pause
    }

    /// An accept succeeded: the next failure starts over with the shortest pause.
    pub fn accepted(&mut self) {
        if self.pause != FIRST_PAUSE {
            tracing::info!(listener = self.listener, "accepting connections again");
        }
        self.pause = FIRST_PAUSE;
    }
}

/// A topic that failed to load: the client is told (a retryable error: it tries again with
/// its backoff); the log says so too, at WARN, or for want of descriptors at ERROR once per
/// 10 s for all topics (every client's retry would be a line).
pub fn log_load_failure(topic: &strobe_model::TopicName, e: &crate::BrokerError) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_MS: AtomicU64 = AtomicU64::new(0);
    static SINCE: AtomicU64 = AtomicU64::new(0);
    match e {
        crate::BrokerError::TopicNotFound(_) | crate::BrokerError::NotAllowed(_) => {}
        e if strobe_ledger::names_out_of_descriptors(&e.to_string()) => {
            let failed = SINCE.fetch_add(1, Ordering::Relaxed) + 1;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let last = LAST_MS.load(Ordering::Relaxed);
            if now.saturating_sub(last) >= LOG_EVERY.as_millis() as u64
                && LAST_MS
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                SINCE.store(0, Ordering::Relaxed);
                error!(
                    %topic,
                    error = %e,
                    failed,
                    open_files = open_files(),
                    "topics cannot load: out of file descriptors (raise the open-files limit, or unload topics); their clients are told and retry"
                );
            }
        }
        e => tracing::warn!(%topic, error = %e, "loading the topic failed"),
    }
}

/// Descriptors this process has open (Linux; 0 where /proc is not there).
pub fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// The process's limit of open files: (soft, hard).
pub fn files_limit() -> io::Result<(u64, u64)> {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_err(io::Error::from)
}

/// Raises the soft limit of open files to the hard limit (a broker holds a descriptor per
/// connection and per open segment); returns (before, after, hard).
pub fn raise_files_limit() -> io::Result<(u64, u64, u64)> {
    let (soft, hard) = files_limit()?;
    if soft >= hard {
        return Ok((soft, soft, hard));
    }
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard)
        .map_err(io::Error::from)?;
    Ok((soft, hard, hard))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_failures_back_off_and_others_do_not() {
        let mut a = AcceptErrors::new("test");
        let emfile = io::Error::from_raw_os_error(nix::errno::Errno::EMFILE as i32);
        let reset = io::Error::from_raw_os_error(nix::errno::Errno::ECONNABORTED as i32);
        assert_eq!(a.failed(&reset), Duration::ZERO);
        let pauses: Vec<Duration> = (0..7).map(|_| a.failed(&emfile)).collect();
        assert_eq!(pauses[0], FIRST_PAUSE);
        assert_eq!(pauses[1], FIRST_PAUSE * 2);
        assert_eq!(*pauses.last().unwrap(), LONGEST_PAUSE);
        assert_eq!(a.unlogged, 6, "logged once, counted since");
        a.accepted();
        assert_eq!(a.failed(&emfile), FIRST_PAUSE);
    }

    #[test]
    fn the_limit_is_read() {
        let (soft, hard) = files_limit().unwrap();
        assert!(soft > 0 && soft <= hard);
        assert!(open_files() > 0);
    }
}
