//! Which consumer of a subscription gets which entry, as plain data structures:
//! no I/O, no clock, no randomness. Mirrors Pulsar's dispatchers
//! (`PersistentDispatcherSingleActiveConsumer` for Exclusive and Failover,
//! `PersistentDispatcherMultipleConsumers` for Shared,
//! `PersistentStickyKeyDispatcherMultipleConsumers` for Key_Shared in
//! [`key_shared`]) and the state they keep beside them: redelivery counts
//! ([`RedeliveryTracker`]) and delayed messages ([`DelayedDeliveryTracker`]).
//!
//! The broker keeps the consumers and calls these functions for decisions, so
//! every rule can be tested without a socket.

mod delayed;
pub mod key_shared;
mod permits;
mod redelivery;
mod single_active;

pub use delayed::{DelayedDeliveryTracker, DelayedEntry};
pub use permits::{SharedSelector, permits_for_entry};
pub use redelivery::RedeliveryTracker;
pub use single_active::{ConsumerKey, failover_active};
