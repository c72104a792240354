//! Transactions in the broker: the coordinator partitions this broker leads (commands in
//! `cnx::txn`), and the participants' side — which loaded topics and subscriptions hold which
//! transaction, and applying an outcome to them when the decision watch reports it.
//!
//! The decisions themselves are made in `strobe-txn`; this module wires them to topics.

//!
//! [`context`] is what topics and subscriptions see; `apply` starts the
//! services and applies outcomes through the topic service; `admin` answers
//! lookups and the admin API.

mod admin;
mod apply;
mod context;
mod push;

pub use admin::{
    CoordinatorSummary, TC_ASSIGN_TOPIC, assign_lookup, assign_partitions, coordinator_stats,
    pending_ack_of, txn_metadata,
};
pub use apply::{apply_pushed, start};
pub use context::{OwnerCheck, Registration, TxnContext, TxnService};
pub use push::{OutcomePush, PUSH_PATH};
