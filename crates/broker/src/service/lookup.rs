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

    fn local_target(&self, listener: Option<&str>) -> Result<LookupTarget, BrokerError> {
        let (service_url, service_url_tls) = strobe_cluster::listener_urls(
            &self.config.listeners().unwrap_or_default(),
            listener,
            (&self.service_url(), self.service_url_tls().as_deref()),
        )?;
        Ok(LookupTarget {
            service_url,
            service_url_tls,
            http_url: self.web_service_url(),
            http_url_tls: self.web_service_url_tls(),
            local: true,
        })
    }

    /// The broker that serves `topic`. Standalone: this one. In a cluster:
    /// the owner of the topic's bundle, or for an unowned bundle the broker
    /// picked for it (this one takes it at once if picked). Lookups answer
    /// `Connect` with that broker's URL from any broker, as Pulsar's
    /// extensible load manager does: one hop, no redirect chain.
    pub async fn lookup_target(&self, topic: &TopicName) -> Result<LookupTarget, BrokerError> {
        self.lookup_target_for(topic, None).await
    }

    /// [`Self::lookup_target`] for a client that named an advertised
    /// listener (`None`: the internal one): that broker's URLs on the
    /// listener, or ServiceNotReady when it has no listener of that name.
    pub async fn lookup_target_for(
        &self,
        topic: &TopicName,
        listener: Option<&str>,
    ) -> Result<LookupTarget, BrokerError> {
        self.lookup_target_as(topic, listener, false).await
    }

    /// [`Self::lookup_target_for`] for a LOOKUP that says whether it is `authoritative`
    /// (sent here by another broker's redirect): a free bundle is then taken here.
    pub async fn lookup_target_as(
        &self,
        topic: &TopicName,
        listener: Option<&str>,
        authoritative: bool,
    ) -> Result<LookupTarget, BrokerError> {
        self.cluster_counters
            .lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(cluster) = self.cluster() else {
            return self.local_target(listener);
        };
        let placement = cluster
            .place_as(&self.bundle_path(topic)?, authoritative)
            .await?;
        if placement.local {
            return self.local_target(listener);
        }
        let o = placement.owner;
        let (service_url, service_url_tls) = o.urls_for(listener)?;
        Ok(LookupTarget {
            service_url,
            service_url_tls,
            http_url: o.web_service_url,
            http_url_tls: None,
            local: false,
        })
    }

    /// The URLs a handoff gives clients whose connections are `conns`
    /// (PIP-307's assigned broker URL) to reach `dst`: on the listener
    /// those connections' lookups named. Without advertised listeners, the
    /// destination's URLs. With them, `None` when the connections named no
    /// listener, or different ones: those clients look the topic up (with
    /// their own listener name) instead of being sent to an address their
    /// network may not reach.
    pub fn assigned_urls(
        &self,
        dst: &strobe_cluster::BrokerInfo,
        conns: &[u64],
    ) -> Option<(String, Option<String>)> {
        let dst = strobe_cluster::BrokerRef::from(dst);
        let cluster = self.cluster()?;
        if self.config.advertised_listeners.trim().is_empty() && dst.advertised_listeners.is_empty()
        {
            return dst.urls_for(None).ok();
        }
        let mut named = conns.iter().map(|c| cluster.listener_of(*c));
        let first = named.next()??;
        if named.any(|l| l.as_deref() != Some(&*first)) {
            return None;
        }
        dst.urls_for(Some(&first)).ok()
    }
}
