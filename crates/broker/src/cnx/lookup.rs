//! Topic discovery on a connection (Pulsar's lookup service over the binary
//! protocol): LOOKUP, PARTITIONED_METADATA and GET_TOPICS_OF_NAMESPACE.

use strobe_model::TopicName;
use strobe_wire::proto::command_get_topics_of_namespace::Mode as GetTopicsMode;
use strobe_wire::proto::{self};
use strobe_wire::{Command, commands};

use super::ServerCnx;
use crate::BrokerError;
use crate::security::Operation;

impl ServerCnx {
    /// LOOKUP: `Connect` to the broker that serves the topic (this one in
    /// standalone; the bundle's owner in a cluster). A client that names an
    /// advertised listener gets that listener's URLs, and a `Redirect` when
    /// another broker serves the topic: it then looks up again there, on the
    /// connection its producers and consumers will use, so that broker
    /// knows the connection's listener when it hands the topic off.
    pub(super) async fn lookup(
        &self,
        c: &proto::CommandLookupTopic,
    ) -> Result<Command, BrokerError> {
        let topic = TopicName::parse(&c.topic)?;
        if let Some(leader) = crate::txn::assign_lookup(
            &self.service,
            &topic,
            c.advertised_listener_name
                .as_deref()
                .filter(|l| !l.is_empty()),
        ) {
            let (url, tls) = leader?;
            return Ok(commands::lookup_connect(
                c.request_id,
                &url,
                tls.as_deref(),
                false,
            ));
        }
        let listener = c
            .advertised_listener_name
            .as_deref()
            .filter(|l| !l.is_empty());
        if !self.service.namespace_exists(topic.namespace()) {
            return Err(BrokerError::TopicNotFound(format!(
                "namespace {} does not exist",
                topic.namespace()
            )));
        }
        self.service
            .authorize(self.role(), Operation::Lookup(&topic))
            .await?;
        let target = self
            .service
            .lookup_target_as(&topic, listener, c.authoritative.unwrap_or(false))
            .await?;
        if let (Some(l), Some(cluster)) = (listener, self.service.cluster()) {
            cluster.remember_listener(self.id, &self.tx, l);
        }
        let (url, tls) = (&target.service_url, target.service_url_tls.as_deref());
        Ok(if listener.is_some() && !target.local {
            commands::lookup_redirect(c.request_id, url, tls, true)
        } else {
            commands::lookup_connect(c.request_id, url, tls, false)
        })
    }

    /// PARTITIONED_METADATA, creating the topic when the client allows it
    /// and the broker's auto-creation says so.
    pub(super) async fn partitioned_metadata(
        &self,
        c: &proto::CommandPartitionedTopicMetadata,
    ) -> Result<Command, BrokerError> {
        let topic = TopicName::parse(&c.topic)?;
        if let Some(n) = crate::txn::assign_partitions(&self.service, &topic) {
            return Ok(commands::partitioned_metadata(c.request_id, n));
        }
        self.service
            .authorize(self.role(), Operation::Lookup(&topic))
            .await?;
        let create = c.metadata_auto_creation_enabled.unwrap_or(true);
        let n = self.service.partitioned_metadata(&topic, create).await?;
        Ok(commands::partitioned_metadata(c.request_id, n))
    }

    /// GET_TOPICS_OF_NAMESPACE, with Pulsar's topics hash so a client whose
    /// list is current is told nothing changed.
    pub(super) async fn topics_of_namespace(
        &self,
        c: &proto::CommandGetTopicsOfNamespace,
    ) -> Result<Command, BrokerError> {
        let (persistent, non_persistent) = match c.mode() {
            GetTopicsMode::Persistent => (true, false),
            GetTopicsMode::NonPersistent => (false, true),
            GetTopicsMode::All => (true, true),
        };
        self.service
            .authorize(self.role(), Operation::ListTopics(&c.namespace))
            .await?;
        let topics = self
            .service
            .topics_of_namespace(&c.namespace, persistent, non_persistent)
            .await?;
        let hash = topics_hash(&topics);
        let changed = c.topics_hash.as_deref() != Some(hash.as_str());
        Ok(commands::topics_of_namespace(
            c.request_id,
            topics,
            false,
            hash,
            changed,
        ))
    }
}

/// Pulsar's topic-list hash (`TopicList.calculateHash`): CRC-32C over the
/// sorted names joined by ',', printed as Guava prints a HashCode (the
/// checksum's little-endian bytes in hex).
pub(super) fn topics_hash(sorted: &[String]) -> String {
    let joined = sorted.join(",");
    let crc = strobe_wire::payload::crc32c(joined.as_bytes());
    crc.to_le_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::topics_hash;

    #[test]
    fn hash_is_little_endian_hex() {
        let names = vec!["a".to_string(), "b".to_string()];
        let crc = strobe_wire::payload::crc32c(b"a,b");
        let h = topics_hash(&names);
        assert_eq!(h.len(), 8);
        assert_eq!(u32::from_str_radix(&h, 16).unwrap().swap_bytes(), crc);
    }
}
