//! Which consumer of a subscription gets which entry, as plain data structures:
//! no I/O, no clock, no randomness. Mirrors Pulsar's dispatchers
//! (`PersistentDispatcherSingleActiveConsumer` for Exclusive and Failover,
//! `PersistentDispatcherMultipleConsumers` for Shared); the Key_Shared
//! selectors join them in their own issue.
//!
//! The broker keeps the consumers and calls these functions for decisions, so
//! every rule can be tested without a socket.

pub mod key_shared;
mod permits;
mod single_active;

pub use permits::{SharedSelector, permits_for_entry};
pub use single_active::{ConsumerKey, failover_active};
