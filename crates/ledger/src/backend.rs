//! What a storage backend provides to [`crate::ManagedLedger`].
//!
//! The traits speak of ledgers, entries and opaque cursor snapshots only:
//! nothing here assumes local files, so a backend that keeps ledgers on object
//! storage (the cluster issue) implements the same two traits.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::Result;

/// Called exactly once when an appended entry is durable (by the backend's
/// sync policy) or has failed. Runs on the backend's completion path (for the
/// file backend, its flusher thread), so it must be cheap and must not block.
pub type AppendCallback = Box<dyn FnOnce(Result<()>) + Send + 'static>;

/// A sealed (or recovered) ledger as the backend knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerMeta {
    pub ledger_id: u64,
    /// Entries `0..entries` exist.
    pub entries: u64,
    /// Sum of the entries' data lengths.
    pub bytes: u64,
    /// Append time (ms since the Unix epoch) of the first and last entry.
    pub first_ts_ms: u64,
    pub last_ts_ms: u64,
}

/// What `open_topic` recovered.
#[derive(Debug, Clone, Default)]
pub struct RecoveredTopic {
    /// Non-empty ledgers, oldest first.
    pub ledgers: Vec<LedgerMeta>,
    /// A ledger id greater than every id this topic ever used (including
    /// trimmed and empty ledgers): the id of the new ledger this open starts.
    pub next_ledger_id: u64,
    /// The last persisted snapshot of every durable cursor.
    pub cursors: Vec<(String, Bytes)>,
}

/// Opens topics. One implementation per storage kind (memory, file, later
/// object storage); chosen at run time by configuration.
pub trait LedgerBackend: Send + Sync + fmt::Debug + 'static {
    /// Opens the storage of `topic`, recovering it if needed. At most one open
    /// handle per topic exists at a time; a second open fails with
    /// [`crate::LedgerError::AlreadyOpen`] until the first is closed or dropped.
    /// `fence` is the opener's fencing token: an open with a token below the
    /// highest this backend saw for the topic fails with
    /// [`crate::LedgerError::Fenced`] (for a backend shared by several
    /// processes the check must be atomic in the shared storage).
    fn open_topic(
        &self,
        topic: &str,
        fence: u64,
    ) -> BoxFuture<'static, Result<(Arc<dyn TopicStorage>, RecoveredTopic)>>;

    /// A short name for logs and test output ("memory", "file").
    fn kind(&self) -> &'static str;

    /// The storage engine's own figures (group commits, fsyncs, ...), named
    /// as the metrics page shows them; empty for a backend with nothing to
    /// report (memory). The broker renders them without knowing the backend.
    fn engine_stats(&self) -> Vec<EngineMetric> {
        Vec::new()
    }

    /// Stops the backend's threads after everything queued is durable.
    /// Called once, at shutdown, after every topic was closed.
    fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// Whether a metric only grows or may go down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
}

/// A metric's value: a count, or a quantity shown with three decimals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MetricValue {
    Int(u64),
    Float(f64),
}

/// One figure of a storage engine, in backend-neutral terms.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineMetric {
    /// The metric's full name, e.g. `strobe_storage_journal_fsyncs_total`.
    pub name: String,
    pub help: &'static str,
    pub kind: MetricKind,
    pub value: MetricValue,
}

impl EngineMetric {
    pub fn counter(name: impl Into<String>, help: &'static str, value: u64) -> EngineMetric {
        EngineMetric {
            name: name.into(),
            help,
            kind: MetricKind::Counter,
            value: MetricValue::Int(value),
        }
    }
}

/// One open topic's storage. The single writer of the topic.
pub trait TopicStorage: Send + Sync + fmt::Debug {
    /// Queues entry `entry_id` of ledger `ledger_id`. Called in strictly
    /// increasing position order; the first entry of a new ledger id starts
    /// that ledger and seals the previous one. `done` runs once the entry is
    /// durable, in the order the entries were queued. `crc` is CRC-32C of
    /// `data` (a backend may derive its records' checksums from it rather
    /// than read the bytes again).
    fn append(
        &self,
        ledger_id: u64,
        entry_id: u64,
        ts_ms: u64,
        data: Bytes,
        crc: u32,
        done: AppendCallback,
    );

    /// Entries `first..=last` of `ledger_id`, all of which were confirmed durable.
    fn read(&self, ledger_id: u64, first: u64, last: u64)
    -> BoxFuture<'static, Result<Vec<Bytes>>>;

    /// Deletes these ledgers; `first_kept` is the id below which no ledger
    /// will ever be read again (persisted so recovery never resurrects them).
    fn delete_ledgers(&self, first_kept: u64, ids: Vec<u64>) -> BoxFuture<'static, Result<()>>;

    /// Stores the snapshot of a durable cursor (`None` deletes the cursor).
    /// Resolves once the snapshot is durable.
    fn persist_cursor(&self, name: &str, snapshot: Option<Bytes>)
    -> BoxFuture<'static, Result<()>>;

    /// Waits until every queued append has completed, then releases the topic.
    fn close(&self) -> BoxFuture<'static, Result<()>>;
}
