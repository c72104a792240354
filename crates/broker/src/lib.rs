//! Strobe's broker: Pulsar's `BrokerService` and `ServerCnx`. It accepts
//! connections, runs the handshake and keep-alive, and (as later issues land)
//! serves topics, producers and subscriptions.

mod cnx;
pub mod compaction;
pub mod config;
mod error;
pub mod namespace;
pub mod policies;
pub mod resources;
pub mod schemas;
pub mod security;
mod server;
pub mod service;
pub mod subscription;
pub mod topic;

pub use config::{BrokerConfig, ConfigError};
pub use error::BrokerError;
pub use server::{Broker, BrokerHandle};

/// The version string sent in CONNECTED, e.g. "Strobe 0.1.0".
pub const SERVER_VERSION: &str = concat!("Strobe ", env!("CARGO_PKG_VERSION"));
