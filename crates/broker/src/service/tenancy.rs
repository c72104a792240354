//! The tenancy policies at the service level: what each loaded topic
//! enforces (topic over namespace over broker, `strobe_tenancy`), kept up
//! to date as policies change anywhere in the cluster (the metadata
//! caches' watch), the namespace's topic count, and the deletion of
//! inactive topics.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use strobe_model::TopicName;
use strobe_resources::policies::NamespacePolicies;
use strobe_tenancy::Limits;
use strobe_tenancy::inactive::{Verdict, check};
use tracing::{info, warn};

use super::BrokerService;
use crate::BrokerError;
use crate::enforce::{BrokerDefaults, Effective, effective};
use crate::topic::Topic;

impl BrokerService {
    /// What `name` enforces, given its namespace's policies.
    fn limits_with(&self, name: &TopicName, ns: &NamespacePolicies) -> Limits {
        let topic = self.resources.topic_policies(name);
        Limits::resolve(
            topic.as_ref(),
            &ns.level(&self.config.cluster_name),
            &self.config.tenancy_level(),
        )
    }

    /// The broker's own values for the policies a namespace and a topic
    /// may override.
    pub fn broker_defaults(&self) -> BrokerDefaults {
        BrokerDefaults {
            message_ttl_secs: self.config.message_ttl_secs,
            deduplication: self.config.deduplication_enabled,
        }
    }

    /// What `name` enforces of TTL, deduplication, quotas, retention and
    /// compaction, given its namespace's policies.
    pub fn effective_with(&self, name: &TopicName, ns: &NamespacePolicies) -> Effective {
        effective(&self.topic_policies(name), ns, self.broker_defaults())
    }

    /// The same, with the namespace's policies as they are now.
    pub fn effective_for(&self, name: &TopicName) -> Effective {
        let ns = self
            .namespace_policies(name.namespace())
            .unwrap_or_default();
        self.effective_with(name, &ns)
    }

    /// Puts `e` in force on a loaded topic.
    pub(crate) async fn apply_effective(&self, t: &Topic, e: Effective) -> Result<(), BrokerError> {
        t.set_message_ttl(e.message_ttl_secs);
        t.dispatch_policy.set(&e);
        t.set_backlog_quota(e.quotas);
        t.ledger.set_retention(e.retention);
        t.set_deduplication(e.deduplication).await
    }

    /// Whether a topic of namespace `ns` is created on first use, and how:
    /// the namespace's override (Pulsar's `autoTopicCreationOverride`),
    /// else the broker's settings. `(allowed, partitions)`: 0 partitions
    /// for a non-partitioned topic.
    pub fn auto_topic_creation(&self, ns: &str) -> (bool, u32) {
        let broker = (
            self.config.allow_auto_topic_creation,
            if self.config.auto_topic_creation_type == "partitioned" {
                self.config.default_num_partitions
            } else {
                0
            },
        );
        match self
            .namespace_policies(ns)
            .and_then(|p| p.auto_topic_creation)
        {
            Some(o) if o.topic_type == "partitioned" => (
                o.allow_auto_topic_creation,
                o.default_num_partitions
                    .unwrap_or(self.config.default_num_partitions),
            ),
            Some(o) => (o.allow_auto_topic_creation, 0),
            None => broker,
        }
    }

    /// What `name` enforces now.
    pub fn limits_for(&self, name: &TopicName) -> Limits {
        let ns = self
            .namespace_policies(name.namespace())
            .unwrap_or_default();
        self.limits_with(name, &ns)
    }

    /// Applies the current policies to every loaded topic (called whenever
    /// a namespace's or a topic's policies change, here or on another
    /// broker): deduplication, TTL, backlog quotas and the tenancy limits.
    pub async fn apply_policies(&self) {
        let mut by_ns: HashMap<String, NamespacePolicies> = HashMap::new();
        for t in self.loaded_topics() {
            let ns = t.name.namespace().to_owned();
            let policies = by_ns
                .entry(ns.clone())
                .or_insert_with(|| self.namespace_policies(&ns).unwrap_or_default())
                .clone();
            let e = self.effective_with(&t.name, &policies);
            if let Err(err) = self.apply_effective(&t, e).await {
                warn!(topic = %t.name, error = %err, "switching deduplication failed");
            }
            let limits = self.limits_with(&t.name, &policies);
            if limits != t.limits.get() {
                info!(topic = %t.name, ?limits, "tenancy limits changed");
                t.limits.set(limits);
            }
        }
    }

    /// Refuses a topic that would take namespace `ns` over its topic count
    /// (`adding` topics: a partitioned topic's partitions each count).
    /// `admin`: the REST path's 412, else the binary protocol's NotAllowed.
    pub async fn check_topic_count(
        &self,
        ns: &str,
        adding: u32,
        admin: bool,
    ) -> Result<(), BrokerError> {
        let max = self
            .namespace_policies(ns)
            .and_then(|p| p.max_topics_per_namespace)
            .filter(|m| *m >= 0)
            .unwrap_or(self.config.max_topics_per_namespace);
        if max <= 0 {
            return Ok(());
        }
        let partitioned = self.resources.partitioned_topics_of(ns);
        let parents: std::collections::HashSet<String> =
            partitioned.iter().map(|(t, _)| t.to_string()).collect();
        let alone = self
            .resources
            .recorded_topics_of(ns)
            .await?
            .iter()
            .filter(|t| {
                TopicName::parse(t)
                    .map(|t| !parents.contains(&t.partitioned_parent().to_string()))
                    .unwrap_or(true)
            })
            .count();
        let count = alone + partitioned.iter().map(|(_, n)| *n as usize).sum::<usize>();
        if count + adding as usize > max as usize {
            let m = "Exceed maximum number of topics in namespace.".to_owned();
            return Err(if admin {
                BrokerError::Precondition(m)
            } else {
                BrokerError::NotAllowed(m)
            });
        }
        Ok(())
    }

    /// One round of the inactive-topic check (Pulsar's `checkGC`) over the
    /// loaded topics: an unused one past its policy's duration is deleted;
    /// and, when the broker says so, a partitioned topic whose partitions
    /// all went.
    pub async fn delete_inactive_topics(&self) {
        let now = Instant::now();
        for t in self.loaded_topics() {
            if t.name.segment().is_some() || t.name.local_name().starts_with("__") {
                // Segments live and die with their scalable topic; system topics stay.
                continue;
            }
            let limits = t.limits.get();
            let retention = if t.name.is_persistent() {
                self.retention_time(&t.name)
            } else {
                Some(std::time::Duration::ZERO)
            };
            match check(
                &limits.inactive,
                &t.usage(),
                t.limits.last_active(),
                retention,
                now,
            ) {
                Verdict::Active => t.limits.mark_active(now),
                Verdict::Wait => {}
                Verdict::Delete => self.delete_inactive(&t, limits).await,
            }
        }
    }

    /// The retention time keeping an inactive topic (None: for ever).
    fn retention_time(&self, name: &TopicName) -> Option<std::time::Duration> {
        let p = self
            .namespace_policies(name.namespace())
            .unwrap_or_default();
        match p.retention_policies {
            Some(r) if r.retention_time_in_minutes < 0 => None,
            Some(r) => Some(std::time::Duration::from_secs(
                r.retention_time_in_minutes as u64 * 60,
            )),
            None => Some(std::time::Duration::ZERO),
        }
    }

    async fn delete_inactive(&self, t: &Arc<Topic>, limits: Limits) {
        let mode = limits.inactive.inactive_topic_delete_mode;
        if !t.close_if_unused(mode) {
            return;
        }
        info!(topic = %t.name, mode = mode.as_str(), secs = limits.inactive.max_inactive_duration_seconds, "deleting an inactive topic");
        if let Err(e) = self.delete_topic(&t.name, true).await {
            warn!(topic = %t.name, error = %e, "deleting an inactive topic failed");
            return;
        }
        if t.name.partition().is_none() {
            return;
        }
        if !self
            .config
            .broker_delete_inactive_partitioned_topic_metadata_enabled
        {
            return;
        }
        let parent = t.name.partitioned_parent();
        let Some(n) = self.resources.partitions(&parent) else {
            return;
        };
        for i in 0..n {
            let p = parent.partition_name(i);
            if self.loaded_topic(&p).is_some() {
                return;
            }
            match self.resources.topic_recorded(&p).await {
                Ok(false) => {}
                Ok(true) => return,
                Err(e) => {
                    warn!(topic = %p, error = %e, "reading a partition's record failed");
                    return;
                }
            }
        }
        match self.delete_partitioned(&parent, false).await {
            Ok(()) => info!(topic = %parent, "deleted an inactive partitioned topic"),
            Err(e) => {
                warn!(topic = %parent, error = %e, "deleting an inactive partitioned topic failed")
            }
        }
    }
}

impl BrokerService {
    /// Whether `name` exists (a partitioned topic, a recorded or loaded topic).
    pub async fn topic_known(&self, name: &TopicName) -> Result<bool, BrokerError> {
        if self.resources.partitions(name).is_some() || self.loaded_topic(name).is_some() {
            return Ok(true);
        }
        Ok(self.resources.topic_recorded(name).await?)
    }

    /// A topic's own policies (empty when it has none).
    pub fn topic_policies(&self, name: &TopicName) -> strobe_tenancy::TopicPolicies {
        self.resources.topic_policies(name).unwrap_or_default()
    }

    /// Changes a topic's own policies (a partition's are its partitioned
    /// topic's); loaded topics here follow at once, the other brokers' when
    /// their caches see the write.
    pub async fn update_topic_policies(
        &self,
        name: &TopicName,
        f: impl FnOnce(&mut strobe_tenancy::TopicPolicies),
    ) -> Result<strobe_tenancy::TopicPolicies, BrokerError> {
        if !self.topic_known(name).await? {
            return Err(BrokerError::TopicNotFound(format!(
                "Topic {name} not found"
            )));
        }
        let p = self.resources.update_topic_policies(name, f).await?;
        // This topic's instances here at once (the call returns with the
        // policy in force); the watch brings it to the other brokers.
        let parent = name.partitioned_parent();
        let ns = self
            .namespace_policies(name.namespace())
            .unwrap_or_default();
        for t in self.loaded_topics() {
            if t.name.partitioned_parent() == parent {
                t.limits.set(self.limits_with(&t.name, &ns));
                self.apply_effective(&t, self.effective_with(&t.name, &ns))
                    .await?;
            }
        }
        Ok(p)
    }
}
