//! The metadata documents: every path the brokers keep in the metadata store
//! ([`paths`]), and the typed documents stored there (Pulsar's
//! `PulsarResources`: `TenantResources`, `NamespaceResources`,
//! `PartitionedTopicResources`, `ManagedLedger` metadata, `SchemaStorage`;
//! the policy documents of [`policies`]; the bundle math of [`bundles`]).
//! Nothing else spells a path or decodes a stored value: a value that does
//! not decode is an error naming its path ([`ResourcesError::Corrupt`]),
//! never a silent default. This crate knows the store and the names of the
//! model, never topics, connections or brokers.
//!
//! Namespace policies and partition counts are read on every lookup, so they
//! are cached here. Each cache follows its prefix through one watch
//! (`strobe_metadata::PrefixCache`), so a namespace or partitioned topic
//! another broker of the cluster creates or changes is seen here too; this
//! broker's own writes show at once (a snapshot older than our last write is
//! not applied, so the cache never steps back behind what we wrote).

mod error;
mod scalable;
mod store;

pub mod bundles;
pub mod paths;
pub mod policies;

pub use bundles::{BundleIndex, BundlesData};
pub use error::ResourcesError;
pub use scalable::{
    LayoutChange, LayoutWatch, ScalableSubscription, ScalableTopics, ScalableTopicsWatch,
    TopicsChange, TreeWatch,
};
pub use store::{CompactionMeta, Resources, StoredPosition, TopicMeta, Versioned, expect_version};
