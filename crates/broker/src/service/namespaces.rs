//! Tenants and namespaces (Pulsar's `TenantsBase` / `NamespacesBase` on the
//! broker side): creating and deleting them, changing a namespace's policies
//! (loaded topics follow at once), and its bundles (unload, split).

use std::sync::Arc;

use strobe_model::TopicName;
use tracing::info;

use super::BrokerService;
use crate::BrokerError;
use crate::namespace::BundlesData;
use crate::policies::{NamespacePolicies, TenantInfo, quotas_of, validate_actions};
use crate::topic::Topic;

fn tenant_missing(tenant: &str) -> BrokerError {
    BrokerError::TopicNotFound(format!("tenant {tenant} does not exist"))
}

fn namespace_missing(ns: &str) -> BrokerError {
    BrokerError::TopicNotFound(format!("namespace {ns} does not exist"))
}

impl BrokerService {
    pub async fn tenants(&self) -> Result<Vec<String>, BrokerError> {
        self.resources.tenants().await
    }

    pub async fn tenant(&self, tenant: &str) -> Result<TenantInfo, BrokerError> {
        match self.resources.tenant(tenant).await? {
            Some(v) => Ok(v.value),
            None => Err(tenant_missing(tenant)),
        }
    }

    /// Creates (`update` false, 409 if it exists) or updates (404 if it does not) a tenant.
    pub async fn put_tenant(
        &self,
        tenant: &str,
        info: &TenantInfo,
        update: bool,
    ) -> Result<(), BrokerError> {
        validate_name(tenant)?;
        if !update {
            return self.resources.create_tenant(tenant, info).await;
        }
        if self.resources.update_tenant(tenant, info).await? {
            Ok(())
        } else {
            Err(tenant_missing(tenant))
        }
    }

    pub async fn delete_tenant(&self, tenant: &str) -> Result<(), BrokerError> {
        if !self.resources.namespaces_of(tenant).is_empty() {
            return Err(BrokerError::Conflict(format!(
                "tenant {tenant} still has namespaces"
            )));
        }
        if !self.resources.tenant_exists(tenant).await? {
            return Err(tenant_missing(tenant));
        }
        self.resources.delete_tenant(tenant).await
    }

    pub fn namespaces_of(&self, tenant: &str) -> Vec<String> {
        self.resources.namespaces_of(tenant)
    }

    /// Creates a namespace (409 if it exists, 404 if its tenant does not).
    pub async fn create_namespace(
        &self,
        ns: &str,
        policies: NamespacePolicies,
    ) -> Result<(), BrokerError> {
        let Some((tenant, local)) = ns.split_once('/') else {
            return Err(BrokerError::NotAllowed(format!(
                "namespace {ns:?} is not <tenant>/<namespace>"
            )));
        };
        validate_name(local)?;
        let mut policies = policies;
        match &policies.bundles {
            Some(b) if !b.boundaries.is_empty() => {
                b.parsed()?;
            }
            Some(b) if b.num_bundles > 0 => {
                policies.bundles = Some(BundlesData::even(b.num_bundles.min(1024)));
            }
            _ => {
                policies.bundles = Some(BundlesData::even(
                    self.config.default_number_of_namespace_bundles,
                ));
            }
        }
        for (role, actions) in &policies.auth_policies.namespace_auth {
            validate_actions(role, actions)?;
        }
        if !self.resources.tenant_exists(tenant).await? {
            return Err(tenant_missing(tenant));
        }
        self.resources.create_namespace(ns, &policies).await
    }

    pub async fn delete_namespace(&self, ns: &str) -> Result<(), BrokerError> {
        if !self.namespace_exists(ns) {
            return Err(namespace_missing(ns));
        }
        if !self.topics_of_namespace(ns, true, true).await?.is_empty() {
            return Err(BrokerError::Conflict(format!(
                "namespace {ns} still has topics"
            )));
        }
        self.resources.delete_namespace(ns).await
    }

    /// Changes a namespace's policies with `f` and stores them; topics that are
    /// loaded follow (deduplication switches at once).
    pub async fn update_policies(
        &self,
        ns: &str,
        f: impl FnOnce(&mut NamespacePolicies),
    ) -> Result<NamespacePolicies, BrokerError> {
        let mut p = self
            .namespace_policies(ns)
            .ok_or_else(|| namespace_missing(ns))?;
        f(&mut p);
        self.resources.set_namespace_policies(ns, &p).await?;
        let dedup = self.deduplication_enabled(ns);
        let ttl = self.message_ttl_secs(ns);
        let quotas = quotas_of(&p);
        for t in self.loaded_topics_of(ns) {
            t.set_deduplication(dedup).await?;
            t.set_message_ttl(ttl);
            t.set_backlog_quota(quotas);
        }
        Ok(p)
    }

    /// A namespace's bundles (namespaces from before bundles were recorded get
    /// the default split).
    pub fn bundles(&self, ns: &str) -> Result<BundlesData, BrokerError> {
        let p = self
            .namespace_policies(ns)
            .ok_or_else(|| namespace_missing(ns))?;
        Ok(p.bundles
            .unwrap_or_else(|| BundlesData::even(self.config.default_number_of_namespace_bundles)))
    }

    /// The bundle a topic belongs to, `0xLOW_0xHIGH`.
    pub fn bundle_of(&self, topic: &TopicName) -> Result<String, BrokerError> {
        let bundles = self.bundles(topic.namespace())?;
        bundles
            .bundle_of(&topic.to_string())
            .ok_or_else(|| BrokerError::CorruptMetadata {
                path: crate::resources::paths::namespace(topic.namespace()),
                reason: format!("no bundle holds {topic}: {:?}", bundles.boundaries),
            })
    }

    /// Unloads every loaded topic of a namespace, or of one of its bundles.
    pub async fn unload_namespace(
        &self,
        ns: &str,
        bundle: Option<&str>,
    ) -> Result<(), BrokerError> {
        let bundles = self.bundles(ns)?;
        if let Some(b) = bundle {
            bundles.range_of(b)?;
        }
        let names: Vec<TopicName> = self
            .loaded_topics_of(ns)
            .iter()
            .filter(|t| {
                bundle.is_none() || bundles.bundle_of(&t.name.to_string()).as_deref() == bundle
            })
            .map(|t: &Arc<Topic>| t.name.clone())
            .collect();
        for n in names {
            // A topic unloaded meanwhile is no error.
            let _ = self.unload(&n).await;
        }
        Ok(())
    }

    /// Splits a bundle into two halves (Pulsar's range_equally_divide).
    pub async fn split_bundle(&self, ns: &str, bundle: &str) -> Result<(), BrokerError> {
        let split = self.bundles(ns)?.split(bundle)?;
        self.update_policies(ns, move |p| p.bundles = Some(split))
            .await?;
        info!(namespace = ns, bundle, "bundle split");
        Ok(())
    }
}

fn validate_name(n: &str) -> Result<(), BrokerError> {
    if n.is_empty()
        || !n
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '=' | ':' | '.' | '_'))
    {
        return Err(BrokerError::NotAllowed(format!(
            "invalid name {n:?}: only letters, digits and -=:._ are allowed"
        )));
    }
    Ok(())
}
