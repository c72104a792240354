//! A cluster broker's membership and bundle ownership (Pulsar's
//! `BrokerRegistry`, `OwnershipCache`, the lookup half of `NamespaceService`
//! and the extensible load manager). It knows nothing of topics: the broker
//! asks it who serves a bundle, takes and hands over bundles through it, and
//! reads the moves the load manager asks for.
//!
//! - **Membership.** A broker registers `/loadbalance/brokers/<id>` under its
//!   session's lease, with its URLs and load. The key vanishes when the lease
//!   expires (the broker died or lost etcd), so the set of keys *is* the set of
//!   live brokers. Every broker follows it through one watch.
//! - **Ownership.** A bundle's owner holds `/namespace/<tenant>/<ns>/<range>`
//!   (Pulsar's path) as an ephemeral lock under its lease: at most one owner,
//!   and none once the owner's lease is gone. The lock's version (its store
//!   revision) is the *fencing token* of every ledger the owner opens in that
//!   bundle: a later owner always has a higher one, so shared storage refuses a
//!   stale writer (see `strobe_ledger`'s object backend).
//! - **Assignment.** A lookup of an unowned bundle names the least loaded
//!   live broker (fewest owned bundles; ties broken by a hash of bundle and
//!   broker, so brokers agree). If that is this broker it takes the lock at
//!   once; otherwise the client connects there and that broker takes it when
//!   the topic is first used. Two brokers racing for one bundle: one lock wins,
//!   the other refuses the topic with `ServiceNotReady` and the client looks up
//!   again.
//! - **Loss.** When the session is lost every lock goes with it: the broker
//!   closes all its topics (clients look up again) and, once the session has a
//!   new lease, registers again and owns nothing until assigned.
//!
//! The crate reads bottom-up: `state` (the ownership states, pure),
//! `registry` (the records and the pure choices made from them), `balance`
//! (the load manager's decisions, pure), `cluster` (the shared handle), then
//! what acts through it: `membership`, `ownership`, `split`, `load_manager`.

mod cluster;
mod error;
mod load_manager;
mod membership;
mod ownership;
mod registry;
mod split;
#[cfg(test)]
mod testing;

pub mod balance;
pub mod state;

pub use cluster::{Cluster, TopicLoads};
pub use error::ClusterError;
pub use ownership::SETTLED_TOPIC_LOADS;
pub use registry::{
    AdvertisedListener, BROKERS, BrokerInfo, BrokerRef, NON_PERSISTENT, OWNERSHIP, OwnerInfo,
    Placement, RATE_REPORT_EVERY, bundle_path, listener_urls, parse_bundle_path, pick_broker,
};
pub use state::OwnerState;
