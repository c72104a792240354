//! Strobe's storage, with one responsibility: keep each topic's entries and
//! each subscription's acknowledgements durable.
//!
//! It mirrors two Pulsar classes:
//! * [`ManagedLedger`] (Pulsar's `ManagedLedger`): a topic's append-only log
//!   of opaque entries at positions `(ledger_id, entry_id)`. The log is a
//!   sequence of ledgers; a ledger rolls over by entries, size or age, and
//!   opening a topic always starts a new ledger (what later makes ownership
//!   handoff and fencing simple). Consumed ledgers are trimmed by retention.
//! * [`ManagedCursor`] (Pulsar's `ManagedCursor`): a subscription's
//!   mark-delete position, individually deleted ranges and batch-index acks,
//!   persisted with a bounded window (see [`ManagedCursor`]); non-durable
//!   cursors serve readers.
//!
//! Backends implement [`LedgerBackend`] / [`TopicStorage`], which assume
//! nothing about local files: [`MemoryBackend`] for tests and
//! [`FileBackend`] (the default: a broker-wide group-commit journal plus
//! per-topic segment files with an index; see its docs for the on-disk
//! format, [`SyncMode`] and recovery). Every backend passes the shared suite
//! in [`testing`].

mod backend;
mod batch;
mod config;
pub mod crc;
mod cursor;
mod cursor_state;
pub mod disk;
mod error;
mod factory;
pub mod file;
mod latency;
mod ledger;
mod ledger_state;
mod memory;
#[cfg(feature = "object")]
pub mod object;
pub mod test_fs;
pub mod testing;

pub use backend::{
    AppendCallback, EngineMetric, LedgerBackend, LedgerMeta, MetricKind, MetricValue,
    RecoveredTopic, TopicStorage,
};
pub use batch::append_batch;
pub use config::{Clock, FailureCount, LedgerConfig, Retention, SyncMode};
pub use cursor::ManagedCursor;
pub use error::{LedgerError, Result, names_out_of_descriptors};
#[cfg(feature = "object")]
pub use factory::open_shared_backend;
pub use factory::{StorageUrl, open_backend};
pub use file::{FileBackend, FileBackendConfig, FileBackendStats};
pub use latency::{JournalSyncBounds, LatencyBounds, LatencyBuckets};
pub use ledger::{AppendFuture, InitialPosition, LedgerStats, ManagedLedger};
pub use ledger_state::Entry;
pub use memory::MemoryBackend;
#[cfg(feature = "object")]
pub use object::{ObjectBackend, ObjectBackendConfig, probe_create_only};
pub use strobe_model::Position;
