//! Which broker serves a topic (the decision half of Pulsar's
//! `NamespaceService.findBrokerServiceUrl`), shared by binary and HTTP lookups.

use strobe_model::TopicName;

use super::BrokerService;
use crate::BrokerError;

/// Where a client should connect for a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupTarget {
    pub service_url: String,
    pub service_url_tls: Option<String>,
    pub http_url: String,
    pub http_url_tls: Option<String>,
    /// This broker serves the topic.
    pub local: bool,
}

impl BrokerService {
    /// This broker's HTTP URL.
    pub fn web_service_url(&self) -> String {
        format!(
            "http://{}:{}",
            self.config.advertised_address, self.config.http_port
        )
    }

    /// This broker's HTTPS URL, when that listener is on.
    pub fn web_service_url_tls(&self) -> Option<String> {
        (self.config.http_port_tls != 0).then(|| {
            format!(
                "https://{}:{}",
                self.config.advertised_address, self.config.http_port_tls
            )
        })
    }

    fn local_target(&self) -> LookupTarget {
        LookupTarget {
            service_url: self.service_url(),
            service_url_tls: self.service_url_tls(),
            http_url: self.web_service_url(),
            http_url_tls: self.web_service_url_tls(),
            local: true,
        }
    }

    /// The broker that serves `topic`. Standalone: this one. In a cluster:
    /// the owner of the topic's bundle, or for an unowned bundle the broker
    /// picked for it (this one takes it at once if picked). Lookups answer
    /// `Connect` with that broker's URL from any broker, as Pulsar's
    /// extensible load manager does: one hop, no redirect chain.
    pub async fn lookup_target(&self, topic: &TopicName) -> Result<LookupTarget, BrokerError> {
        self.cluster_counters
            .lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(cluster) = self.cluster() else {
            return Ok(self.local_target());
        };
        let placement = cluster.place(&self.bundle_path(topic)?).await?;
        if placement.local {
            return Ok(self.local_target());
        }
        let o = placement.owner;
        Ok(LookupTarget {
            service_url: o.service_url,
            service_url_tls: o.service_url_tls,
            http_url: o.web_service_url,
            http_url_tls: None,
            local: false,
        })
    }
}
