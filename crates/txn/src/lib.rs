//! Transactions: Pulsar's transaction coordinator, transaction buffer and pending acks, with every
//! piece of state in the metadata store or the topic's own log.
//!
//! **Responsibility:** deciding transactions and remembering what they touched.
//! - [`coordinator`]: `TransactionCoordinator` partitions. The broker elected leader of partition
//!   N (PIP-473, [`strobe_metadata::tc`]) is coordinator N; every transaction's header at
//!   `/txn/id/<N>_<seq>` is changed only by compare-and-set fenced by that leadership, and the CAS
//!   OPEN → COMMITTED | ABORTED is the one point that decides an outcome.
//! - [`buffer`]: the per-topic `TransactionBuffer` (Pulsar's v4 buffer: the topic's log holds the
//!   transactional entries and a TXN_COMMIT / TXN_ABORT marker after each outcome; a snapshot in the
//!   metadata store bounds the replay on load).
//! - [`pending_ack`]: the per-subscription `PendingAckHandle`: transactional acks held until the
//!   outcome, with Pulsar's conflict rules.
//! - [`participant`]: how participants learn outcomes (a watch on the headers, PIP-473 style, not
//!   `END_TXN_ON_*` RPCs) and the persistence of their state.
//!
//! [`header`], [`buffer`] and [`pending_ack`] are pure: no I/O, no clock.

pub mod buffer;
pub mod coordinator;
mod decided;
mod error;
pub mod header;
pub mod participant;
pub mod paths;
pub mod pending_ack;
mod waits;

pub use coordinator::{CoordinatorConfig, LocalParticipants, TcCounters, TransactionCoordinator};
pub use error::{Result, TxnError};
pub use header::{EndAction, TxnHeader, TxnState};
pub use strobe_model::TxnId;
