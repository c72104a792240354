//! Strobe's broker: Pulsar's `BrokerService`, `ServerCnx`, `PersistentTopic`
//! and its subscriptions. It accepts connections (`server`), serves each
//! one (`cnx`, one module per command family), loads topics and
//! administers namespaces ([`service`]), and runs each subscription's
//! dispatcher ([`subscription`]). Decisions that need no socket live in the
//! pure crates (`strobe-dispatch`, `strobe-schema`, `strobe-security`,
//! `strobe-config`); the metadata documents in `strobe-resources`; a cluster
//! broker's membership and bundle ownership in `strobe-cluster`, which knows
//! no topic. The crate reads top-down: `server` and `cnx` over `service` over
//! `topic` and `subscription`, with `txn`'s context and `enforce` beneath
//! them (`tests/module_cycles.py` keeps every import one-way).

pub mod accept;
mod cnx;
pub mod compaction;
pub mod cpus;
pub mod enforce;
mod error;
pub mod limits;
pub mod schemas;
pub mod security;
mod server;
pub mod service;
pub mod subscription;
mod tell;
pub mod topic;
pub mod txn;

pub use error::BrokerError;
pub use server::{Backends, Broker, BrokerHandle};
/// The configuration, from its own crate; `strobe_broker::config` stays the
/// path callers know.
pub use strobe_config as config;
pub use strobe_config::{BrokerConfig, ConfigError};

/// The version string sent in CONNECTED, e.g. "Strobe 0.1.0".
pub const SERVER_VERSION: &str = concat!("Strobe ", env!("CARGO_PKG_VERSION"));
