//! Namespaces as the broker divides them (Pulsar's `NamespaceService` and
//! `NamespaceBundles`): a namespace's topics are split into bundles, hash
//! ranges of the topic name, and a bundle is the unit a broker owns and
//! moves. The bundle math is pure ([`bundles`]); the administration of
//! namespaces (create, policies, unload, split) is in `service::namespaces`,
//! where the loaded topics are.

pub mod bundles;

pub use bundles::BundlesData;
