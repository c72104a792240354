//! Topics as the admin API and lookups see them (Pulsar's
//! `PersistentTopicsBase` on the broker side): partitioned-topic metadata and
//! auto-creation, listing a namespace's topics, deletion and termination.

use std::sync::Arc;

use strobe_ledger::{LedgerConfig, Position};
use strobe_model::{Domain, TopicName};
use tracing::info;

use super::BrokerService;
use crate::BrokerError;
use crate::topic::Topic;
use strobe_resources::StoredPosition;

fn topic_missing(name: &TopicName) -> BrokerError {
    BrokerError::TopicNotFound(format!("topic {name} does not exist"))
}

fn partitioned_missing(name: &TopicName) -> BrokerError {
    BrokerError::TopicNotFound(format!("partitioned topic {name} does not exist"))
}

/// How many producers and consumers a loaded topic has.
pub(super) fn clients_of(t: &Topic) -> (usize, usize) {
    let consumers = t.subscriptions().iter().map(|s| s.consumer_count()).sum();
    (t.producer_names().len(), consumers)
}

impl BrokerService {
    /// Changes the partition count of a partitioned topic (only upwards, as Pulsar).
    pub async fn update_partitions(
        &self,
        topic: &TopicName,
        partitions: u32,
    ) -> Result<(), BrokerError> {
        let current = self
            .resources
            .partitions(topic)
            .ok_or_else(|| partitioned_missing(topic))?;
        if partitions < current {
            return Err(BrokerError::NotAllowed(format!(
                "the number of partitions can only grow ({current} -> {partitions} refused)"
            )));
        }
        Ok(self.resources.set_partitions(topic, partitions).await?)
    }

    /// The partitioned topics of a namespace.
    pub fn partitioned_topics_of(&self, ns: &str) -> Vec<String> {
        self.resources
            .partitioned_topics_of(ns)
            .into_iter()
            .map(|(t, _)| t.to_string())
            .collect()
    }

    /// Partitions of `topic` if it is a partitioned topic (0 otherwise). With
    /// `create`, a topic that does not exist yet is created as the broker's
    /// auto-creation settings say.
    pub async fn partitioned_metadata(
        &self,
        topic: &TopicName,
        create: bool,
    ) -> Result<u32, BrokerError> {
        if topic.partition().is_some() {
            return Ok(0);
        }
        if let Some(n) = self.resources.partitions(topic) {
            return Ok(n);
        }
        if !self.namespace_exists(topic.namespace()) {
            return Err(BrokerError::TopicNotFound(format!(
                "namespace {} does not exist",
                topic.namespace()
            )));
        }
        let (allowed, partitions) = self.auto_topic_creation(topic.namespace());
        let auto_partitioned = allowed && partitions > 0 && topic.domain() == Domain::Persistent;
        if create && auto_partitioned && !self.topic_exists(topic).await? {
            self.check_topic_count(topic.namespace(), partitions, false)
                .await?;
            self.create_partitioned(topic, partitions).await?;
            return Ok(partitions);
        }
        Ok(0)
    }

    /// Records a partitioned topic with `partitions` partitions.
    pub async fn create_partitioned(
        &self,
        topic: &TopicName,
        partitions: u32,
    ) -> Result<(), BrokerError> {
        match self.resources.create_partitioned(topic, partitions).await {
            // Pulsar answers a second create with 409 on the REST path and
            // NotAllowed on the binary one; this broker has always said NotAllowed.
            Err(strobe_resources::ResourcesError::AlreadyExists(m)) => {
                Err(BrokerError::NotAllowed(m))
            }
            Err(e) => Err(e.into()),
            Ok(()) => {
                info!(%topic, partitions, "created partitioned topic");
                Ok(())
            }
        }
    }

    async fn topic_exists(&self, topic: &TopicName) -> Result<bool, BrokerError> {
        if self.loaded_topic(topic).is_some() {
            return Ok(true);
        }
        Ok(self.resources.topic_recorded(topic).await?)
    }

    /// Topics of a namespace (partitions listed by their partition names, as
    /// Pulsar lists them), sorted: persistent ones from the metadata store,
    /// non-persistent ones while they are loaded.
    pub async fn topics_of_namespace(
        &self,
        ns: &str,
        persistent: bool,
        non_persistent: bool,
    ) -> Result<Vec<String>, BrokerError> {
        let mut names = Vec::new();
        if persistent {
            names = self.resources.recorded_topics_of(ns).await?;
            for (t, n) in self.resources.partitioned_topics_of(ns) {
                names.extend((0..n).map(|i| t.partition_name(i).to_string()));
            }
        }
        if non_persistent {
            for t in self.loaded_topics_of(ns) {
                if !t.name.is_persistent() {
                    names.push(t.name.to_string());
                }
            }
            // In a cluster the others' too: they announce what they load.
            if let Some(c) = self.cluster() {
                let keys = c.announced(&format!("{ns}/non-persistent/")).await?;
                names.extend(
                    keys.iter()
                        .filter_map(|k| strobe_resources::paths::name_from_key(k)),
                );
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Deletes a topic: its data, its subscriptions and its record. Refused
    /// (412) while producers or consumers are connected unless `force`, which
    /// disconnects them first (Pulsar's `deleteTopic`).
    pub async fn delete_topic(&self, name: &TopicName, force: bool) -> Result<(), BrokerError> {
        if name.partition().is_none() && self.resources.partitions(name).is_some() {
            return Err(BrokerError::Conflict(format!(
                "{name} is a partitioned topic: delete it through its partitions path"
            )));
        }
        let key = name.to_string();
        let _deleting = self.topic_locks.lock(&key).await;
        let loaded = self.loaded_topic(name);
        if let Some(t) = &loaded
            && !force
        {
            let (producers, consumers) = clients_of(t);
            if producers > 0 || consumers > 0 {
                return Err(BrokerError::Precondition(format!(
                    "topic {name} has {producers} producer(s) and {consumers} consumer(s) connected"
                )));
            }
        }
        if !name.is_persistent() {
            let t = loaded.ok_or_else(|| topic_missing(name))?;
            self.topics.lock().remove(&key);
            t.close().await;
            info!(topic = %name, "topic deleted");
            return Ok(());
        }
        if loaded.is_none() && !self.resources.topic_recorded(name).await? {
            return Err(topic_missing(name));
        }
        let removed = self.topics.lock().remove(&key);
        if let Some(t) = removed {
            t.close().await;
        }
        // Reopen the log alone, without retention, and drop every cursor and ledger.
        let config = LedgerConfig {
            retention: strobe_ledger::Retention::default(),
            trim_interval: None,
            ..self.fenced_ledger_config(self.fence_for(name).await?)
        };
        let ledger =
            strobe_ledger::ManagedLedger::open(self.backend.as_ref(), &key, config).await?;
        for c in ledger.cursor_names() {
            ledger.delete_cursor(&c).await?;
        }
        ledger.rollover();
        ledger.trim().await?;
        ledger.close().await?;
        self.resources.delete_topic_record(name).await?;
        if name.partition().is_none() {
            self.resources.delete_topic_policies(name).await?;
        }
        info!(topic = %name, "topic deleted");
        Ok(())
    }

    /// Deletes a partitioned topic: every partition, then its record.
    pub async fn delete_partitioned(
        &self,
        name: &TopicName,
        force: bool,
    ) -> Result<(), BrokerError> {
        let n = self
            .resources
            .partitions(name)
            .ok_or_else(|| partitioned_missing(name))?;
        if !force {
            for i in 0..n {
                if let Some(t) = self.loaded_topic(&name.partition_name(i)) {
                    let (producers, consumers) = clients_of(&t);
                    if producers > 0 || consumers > 0 {
                        return Err(BrokerError::Precondition(format!(
                            "partition {i} of {name} has producers or consumers connected"
                        )));
                    }
                }
            }
        }
        for i in 0..n {
            match self.delete_topic(&name.partition_name(i), true).await {
                Ok(()) | Err(BrokerError::TopicNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.resources.delete_partitioned(name).await?;
        self.resources.delete_topic_policies(name).await?;
        info!(topic = %name, partitions = n, "partitioned topic deleted");
        Ok(())
    }

    /// Terminates a topic (see [`Topic::terminate`]) and records it, so it
    /// stays terminated across restarts. Returns the last message's position.
    pub async fn terminate(&self, name: &TopicName) -> Result<Option<Position>, BrokerError> {
        if !name.is_persistent() {
            return Err(BrokerError::NotAllowed(
                "only persistent topics can be terminated".into(),
            ));
        }
        // A partition of a partitioned topic exists even before its first use.
        let topic: Arc<Topic> = self.topic(name, name.partition().is_some()).await?;
        let last = topic.terminate().await;
        self.resources
            .update_topic_meta(name, |m| m.terminated = Some(StoredPosition::at(last)))
            .await?;
        Ok(last)
    }
}
