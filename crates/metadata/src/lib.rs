//! Strobe's metadata store and the coordination built on it.
//!
//! **Responsibility:** this crate is the only place cluster state lives and the only way brokers
//! coordinate. It offers a versioned key-value store with compare-and-set, prefix watches and
//! ephemeral keys bound to a session ([`MetadataStore`]), and on top of it the coordination
//! primitives the broker and the transaction coordinator stand on: [`Session`], [`LeaderElection`],
//! [`ResourceLock`], [`Counter`], a prefix cache ([`PrefixCache`]) and PIP-473's
//! transaction-coordinator elections ([`tc`]).
//!
//! **Pulsar classes it mirrors:**
//! - `org.apache.pulsar.metadata.api.MetadataStore` / `MetadataStoreExtended` → [`MetadataStore`]
//!   (`get` → value plus [`Stat`], `put` with an expected version, `delete`, `getChildren` →
//!   [`MetadataStore::list_children`], ephemeral puts, notifications → [`MetadataStore::watch`]).
//! - `org.apache.pulsar.metadata.api.coordination.CoordinationService` → [`Session`] plus the
//!   constructors of [`LeaderElection`], [`ResourceLock`] and [`Counter`] (Pulsar's
//!   `getNextCounterValue`).
//! - `org.apache.pulsar.metadata.api.coordination.LeaderElection` / `LeaderElectionState` →
//!   [`LeaderElection`] / [`LeaderState`].
//! - `org.apache.pulsar.metadata.api.coordination.ResourceLock` → [`ResourceLock`].
//! - `org.apache.pulsar.metadata.api.MetadataCache` → [`PrefixCache`] (one watch per prefix feeding
//!   a cache that always publishes complete snapshots) and [`KeyCache`] (single keys read through,
//!   absent ones too, each dropped when the prefix's watch sees it change).
//! - PIP-473's `TransactionCoordinatorV5` election part (`TcLeader`, `/txn/tc/parallelism`,
//!   `/txn/tc/leader/<N>`) → [`tc`].
//!
//! **Backends** (chosen at run time; both pass the shared suite in `tests/suite.rs`):
//! - [`EmbeddedStore`] (standalone): durable under a data directory (a write-ahead log of
//!   committed transactions, fsynced before a write is acknowledged or visible, compacted into a
//!   snapshot), with the same versions, CAS, watches and leases. Ephemeral keys are bound to the
//!   process: they vanish when their session ends and never survive a restart.
//! - `EtcdStore` (feature `etcd`): CAS through etcd transactions on `mod_revision`, sessions as
//!   leases, watches resumed from the last seen revision after a reconnect.
//!
//! **Versions.** A key's version ([`Stat::version`]) is the store revision of its last
//! modification (etcd's `mod_revision`), so versions of one store are totally ordered and a
//! `Check` on a version is a fence. Leadership is advisory: a leader fences its writes with
//! [`LeaderElection::fence`].

mod batch;
mod cache;
mod coordination;
mod election;
mod embedded;
mod error;
#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "etcd")]
mod etcd_call;
#[cfg(feature = "etcd")]
mod etcd_reads;
mod key_cache;
mod once;
mod session;
mod store;
pub mod tc;
pub mod testing;

pub use batch::Batcher;
pub use cache::{CacheSnapshot, PrefixCache};
pub use coordination::{Counter, ResourceLock};
pub use election::{LeaderElection, LeaderState};
pub use embedded::{EmbeddedOptions, EmbeddedStore};
pub use error::{MetadataError, Result};
#[cfg(feature = "etcd")]
pub use etcd::{EtcdOptions, EtcdStore};
pub use key_cache::KeyCache;
pub use once::{create_once, delete_once, delete_once_checked};
pub use session::{Session, SessionOptions, SessionState};
pub use store::{
    EventKind, Expect, KeyValue, LeaseGrant, LeaseId, MetadataStore, Op, OpResult, Revision, Scan,
    Stat, TxnResponse, Versioned, WatchBatch, WatchEvent, WatchStream, validate_key,
    validate_prefix,
};
