//! The admin API's routes, one module per resource as Pulsar's REST
//! resources are split; each module's `routes()` contributes its paths to
//! [`crate::router`].

pub(crate) mod broker_stats;
pub(crate) mod brokers;
pub(crate) mod clusters;
pub(crate) mod lookup;
pub(crate) mod messages;
pub(crate) mod namespace_ops;
pub(crate) mod namespaces;
pub(crate) mod scalable;
pub(crate) mod schemas;
pub(crate) mod segments;
pub(crate) mod subscriptions;
pub(crate) mod tenancy;
pub(crate) mod topic_policies;
pub(crate) mod topics;
pub(crate) mod transactions;
pub(crate) mod unsupported;
