//! A namespace's bundles parsed for placing topics, kept while the policy
//! caches stay at one generation (`BrokerService::ns_bundles`).

use strobe_model::TopicName;
use strobe_resources::{BundleIndex, BundlesData};

use crate::BrokerError;

/// A namespace's bundles as of one generation of the policy caches.
#[derive(Debug)]
pub(crate) struct NsBundles {
    pub(crate) generation: u64,
    pub(crate) index: BundleIndex,
    /// Each bundle's ownership-lock path, in the index's order.
    pub(crate) paths: Vec<String>,
}

impl NsBundles {
    /// `bundles` of namespace `ns` parsed; boundaries that do not parse are
    /// corrupt metadata, named by the namespace's path.
    pub(crate) fn parse(
        ns: &str,
        bundles: &BundlesData,
        generation: u64,
    ) -> Result<NsBundles, BrokerError> {
        let index = bundles.index().map_err(|e| BrokerError::CorruptMetadata {
            path: strobe_resources::paths::namespace(ns),
            reason: e.to_string(),
        })?;
        let paths = index
            .names()
            .iter()
            .map(|b| strobe_cluster::bundle_path(ns, b))
            .collect();
        Ok(NsBundles {
            generation,
            index,
            paths,
        })
    }

    /// The ownership-lock path of the bundle holding topic `name`.
    pub(crate) fn path_of(&self, name: &TopicName) -> &str {
        &self.paths[self.index.position_of(name)]
    }

    /// The bundle (`0xLOW_0xHIGH`) holding topic `name`.
    pub(crate) fn bundle_of(&self, name: &TopicName) -> &str {
        &self.index.names()[self.index.position_of(name)]
    }
}
