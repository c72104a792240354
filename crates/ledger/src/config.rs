use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::LedgerError;

/// When an appended entry counts as durable, i.e. when `append` resolves.
///
/// * `Always` (the default): after the group commit's `fdatasync` that covers it.
///   Nothing acknowledged is lost on `kill -9` or power loss.
/// * `Interval(ms)`: after the entry is written to the OS; the flusher runs
///   `fdatasync` at least every `ms` milliseconds. A power loss (not a process
///   crash) may lose up to that window of acknowledged entries.
/// * `Never`: after the entry is written to the OS; only the background
///   checkpoint syncs. Survives a process crash, not a power loss.
///
/// In the config file: `sync = "always"`, `sync = "interval(5)"` or `"interval:5ms"`, `sync = "never"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum SyncMode {
    #[default]
    Always,
    Interval(u64),
    Never,
}

impl fmt::Display for SyncMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncMode::Always => f.write_str("always"),
            SyncMode::Interval(ms) => write!(f, "interval({ms})"),
            SyncMode::Never => f.write_str("never"),
        }
    }
}

impl FromStr for SyncMode {
    type Err = LedgerError;
    fn from_str(s: &str) -> Result<Self, LedgerError> {
        let s = s.trim();
        match s {
            "always" => return Ok(SyncMode::Always),
            "never" => return Ok(SyncMode::Never),
            _ => {}
        }
        let bad = || {
            LedgerError::Config(format!(
                "sync = {s:?}: expected always, interval(MS) or never"
            ))
        };
        let rest = s.strip_prefix("interval").ok_or_else(bad)?;
        let digits = rest
            .trim_start_matches(['(', ':', ' '])
            .trim_end_matches(')')
            .trim_end_matches("ms");
        let ms: u64 = digits.trim().parse().map_err(|_| bad())?;
        if ms == 0 {
            return Err(bad());
        }
        Ok(SyncMode::Interval(ms))
    }
}

impl TryFrom<String> for SyncMode {
    type Error = LedgerError;
    fn try_from(s: String) -> Result<Self, LedgerError> {
        s.parse()
    }
}

impl From<SyncMode> for String {
    fn from(m: SyncMode) -> String {
        m.to_string()
    }
}

/// Retention of *consumed* data (Pulsar's `retentionTimeInMinutes` /
/// `retentionSizeInMB`). A sealed ledger that every durable cursor has passed
/// is deleted once it is older than `time` or once the consumed ledgers exceed
/// `size_bytes`. `None` means no limit in that dimension; both `None` keeps
/// everything. The default (both zero) deletes a ledger as soon as it is consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub time: Option<Duration>,
    pub size_bytes: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            time: Some(Duration::ZERO),
            size_bytes: Some(0),
        }
    }
}

impl Retention {
    /// Keep everything forever.
    pub const INFINITE: Retention = Retention {
        time: None,
        size_bytes: None,
    };
}

/// Per-topic settings of a [`crate::ManagedLedger`].
#[derive(Debug, Clone)]
pub struct LedgerConfig {
    /// Roll over to a new ledger once the current one holds this many entries.
    pub max_entries_per_ledger: u64,
    /// ... or this many bytes of entry data.
    pub max_ledger_bytes: u64,
    /// ... or when its first entry is older than this (checked on append and on `trim`).
    pub max_ledger_age: Duration,
    /// Retention of consumed ledgers.
    pub retention: Retention,
    /// Largest accepted entry.
    pub max_entry_bytes: usize,
    /// How often dirty durable cursors are persisted. This is the window of
    /// acknowledgements that a crash may forget (they are redelivered).
    pub cursor_flush_interval: Duration,
    /// At most this many individually-deleted ranges (plus batch-index ack sets)
    /// are persisted per cursor; acks beyond them are redelivered after a crash
    /// (Pulsar's `managedLedgerMaxUnackedRangesToPersist`).
    pub max_persisted_ranges: usize,
    /// How often the ledger applies retention (and age-based rollover) on its
    /// own; `None` leaves it to explicit [`crate::ManagedLedger::trim`] calls.
    pub trim_interval: Option<Duration>,
    /// The clock stamped on entries and used for ages and retention.
    pub clock: Clock,
    /// The opener's fencing token (its ownership epoch): an open with a
    /// token below the highest one the backend has seen for the topic is
    /// refused with [`crate::LedgerError::Fenced`], so a topic has exactly
    /// one writer even when an old owner tries again.
    pub fence: u64,
    /// Counts the ledgers that failed (fenced out of their log, a write
    /// refused); ledgers opened from clones of one config share it, so a
    /// broker learns that one of its topics failed without asking each.
    pub failures: FailureCount,
}

/// A count of failed ledgers shared by the clones of a [`LedgerConfig`].
#[derive(Debug, Clone, Default)]
pub struct FailureCount(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl FailureCount {
    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn bump(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Release);
    }
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            max_entries_per_ledger: 50_000,
            max_ledger_bytes: 256 << 20,
            max_ledger_age: Duration::from_secs(4 * 3600),
            retention: Retention::default(),
            max_entry_bytes: 16 << 20,
            cursor_flush_interval: Duration::from_secs(1),
            max_persisted_ranges: 10_000,
            trim_interval: Some(Duration::from_secs(60)),
            clock: Clock::system(),
            fence: 0,
            failures: FailureCount::default(),
        }
    }
}

/// Milliseconds since the Unix epoch; replaceable in tests.
#[derive(Clone)]
pub struct Clock(std::sync::Arc<dyn Fn() -> u64 + Send + Sync>);

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Clock({})", self.now_ms())
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl Clock {
    /// The system's wall clock.
    pub fn system() -> Clock {
        Clock(std::sync::Arc::new(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0)
        }))
    }
    /// A clock that reads `ms`; tests move it by storing into the atomic.
    pub fn manual(ms: std::sync::Arc<std::sync::atomic::AtomicU64>) -> Clock {
        Clock(std::sync::Arc::new(move || {
            ms.load(std::sync::atomic::Ordering::SeqCst)
        }))
    }
    pub fn now_ms(&self) -> u64 {
        (self.0)()
    }
}
