//! Tenants and namespaces (Pulsar's `TenantsBase` / `NamespacesBase` on the
//! broker side): creating and deleting them, changing a namespace's policies
//! (loaded topics follow at once), and its bundles (unload, split).

use std::sync::Arc;

use strobe_model::TopicName;
use tracing::info;

use super::BrokerService;
use super::ns_bundles::NsBundles;
use crate::BrokerError;
use crate::topic::Topic;
use strobe_resources::BundlesData;
use strobe_resources::policies::{NamespacePolicies, TenantInfo, validate_actions};

fn tenant_missing(tenant: &str) -> BrokerError {
    BrokerError::TopicNotFound(format!("tenant {tenant} does not exist"))
}

fn namespace_missing(ns: &str) -> BrokerError {
    BrokerError::TopicNotFound(format!("namespace {ns} does not exist"))
}

impl BrokerService {
    pub async fn tenants(&self) -> Result<Vec<String>, BrokerError> {
        Ok(self.resources.tenants().await?)
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
            return Ok(self.resources.create_tenant(tenant, info).await?);
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
        Ok(self.resources.delete_tenant(tenant).await?)
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
        Ok(self.resources.create_namespace(ns, &policies).await?)
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
        Ok(self.resources.delete_namespace(ns).await?)
    }

    /// Changes a namespace's policies with `f` and stores them; topics that are
    /// loaded follow (deduplication switches at once).
    pub async fn update_policies(
        &self,
        ns: &str,
        f: impl FnOnce(&mut NamespacePolicies),
    ) -> Result<NamespacePolicies, BrokerError> {
        // Read from the store, not the cache, and written back only over
        // that version: another broker's change (a bundle split's new
        // boundaries) is never overwritten with an older copy.
        let current = self.resources.namespace_policies_now(ns).await?;
        let mut p = current.value;
        f(&mut p);
        self.resources
            .replace_namespace_policies(ns, &p, current.version)
            .await?;
        for t in self.loaded_topics_of(ns) {
            self.apply_effective(&t, self.effective_with(&t.name, &p))
                .await?;
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
        let b = self.ns_bundles(topic.namespace())?;
        Ok(b.bundle_of(topic).to_string())
    }

    /// A namespace's bundles, parsed once per generation of the policy
    /// caches: every lookup, load and ownership check places a topic, and
    /// parsing the boundaries (and with none recorded, making the even ones)
    /// for each was a twentieth of a cluster broker's CPU while it reloaded
    /// a lost broker's topics (issue 47).
    pub(crate) fn ns_bundles(&self, ns: &str) -> Result<Arc<NsBundles>, BrokerError> {
        // Read before the policies: a change landing meanwhile leaves an
        // older generation on what is kept, so the next call derives again.
        let generation = self.resources.policy_generation();
        if let Some(b) = self.ns_bundles.lock().get(ns)
            && b.generation == generation
        {
            return Ok(b.clone());
        }
        let b = Arc::new(NsBundles::parse(ns, &self.bundles(ns)?, generation)?);
        self.ns_bundles.lock().insert(ns.to_string(), b.clone());
        Ok(b)
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
        let index = self.ns_bundles(ns)?;
        let names: Vec<TopicName> = self
            .loaded_topics_of(ns)
            .iter()
            .filter(|t| bundle.is_none_or(|b| index.bundle_of(&t.name) == b))
            .map(|t: &Arc<Topic>| t.name.clone())
            .collect();
        for n in names {
            // A topic unloaded meanwhile is no error.
            let _ = self.unload(&n).await;
        }
        Ok(())
    }

    /// Splits a bundle into two halves (Pulsar's range_equally_divide). In
    /// a cluster the bundle's owner does it (the admin layer sends the
    /// request there; a free bundle is taken first) through the Splitting
    /// and Deleted states, and goes on serving both halves: no client is
    /// disconnected. The load manager may move a half away later.
    pub async fn split_bundle(&self, ns: &str, bundle: &str) -> Result<(), BrokerError> {
        let (split, _) = self.bundles(ns)?.split(bundle)?;
        let Some(c) = self.cluster().cloned() else {
            self.update_policies(ns, move |p| p.bundles = Some(split))
                .await?;
            info!(namespace = ns, bundle, "bundle split");
            return Ok(());
        };
        let parent = strobe_cluster::bundle_path(ns, bundle);
        c.acquire(&parent).await?;
        c.begin_split(&parent).await?;
        let done = self.finish_split(&c, ns, bundle, &parent).await;
        if done.is_ok() {
            self.cluster_counters
                .splits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if let Err(e) = &done {
            // Splitting → Free: its topics close, their clients look them up.
            tracing::warn!(bundle = %parent, error = %e, "splitting a bundle failed; released it");
            c.release(&parent).await;
        }
        done
    }

    /// The split's transaction, against the namespace's policies as the
    /// store has them (retried if they change meanwhile).
    async fn finish_split(
        &self,
        c: &Arc<strobe_cluster::Cluster>,
        ns: &str,
        bundle: &str,
        parent: &str,
    ) -> Result<(), BrokerError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let current = self.resources.namespace_policies_now(ns).await?;
            let mut p = current.value;
            let bundles = p.bundles.clone().unwrap_or_else(|| {
                BundlesData::even(self.config.default_number_of_namespace_bundles)
            });
            let (split, halves) = bundles.split(bundle)?;
            p.bundles = Some(split);
            let paths: Vec<String> = halves
                .iter()
                .map(|h| strobe_cluster::bundle_path(ns, h))
                .collect();
            let op = self
                .resources
                .namespace_policies_op(ns, &p, current.version);
            let resources = &self.resources;
            let written = p.clone();
            match c
                .finish_split(parent, &paths, vec![op], |revision| {
                    resources.policies_written(ns, written, revision)
                })
                .await
            {
                Err(strobe_cluster::ClusterError::Metadata(
                    strobe_metadata::MetadataError::BadVersion { key, .. },
                )) if key == strobe_resources::paths::namespace(ns) && attempts < 5 => {
                    continue;
                }
                r => return Ok(r?),
            }
        }
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
