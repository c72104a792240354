//! Topic names, parsed as Pulsar's `TopicName` parses them.

use std::fmt;

use crate::scalable::SegmentDescriptor;

/// Persistent topics are stored; non-persistent ones are dispatched or
/// dropped. Pulsar 5's scalable topics add two (PIP-460): `topic://`, the
/// scalable topic itself, which no producer or consumer attaches to, and
/// `segment://`, one of its segments, a persistent topic like any other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Domain {
    Persistent,
    NonPersistent,
    Topic,
    Segment,
}

impl Domain {
    pub fn as_str(self) -> &'static str {
        match self {
            Domain::Persistent => "persistent",
            Domain::NonPersistent => "non-persistent",
            Domain::Topic => "topic",
            Domain::Segment => "segment",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicNameError {
    #[error("Invalid topic name '{name}': {reason}")]
    Invalid { name: String, reason: &'static str },
}

const PARTITION_SUFFIX: &str = "-partition-";

/// A fully qualified topic name: `domain://tenant/namespace/local`.
///
/// Short forms are accepted as Pulsar accepts them: `local` means
/// `persistent://public/default/local` and `tenant/ns/local` means
/// `persistent://tenant/ns/local`. The V1 form with a cluster
/// (`persistent://tenant/cluster/ns/local`) keeps `tenant/cluster/ns` as its namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicName {
    domain: Domain,
    tenant: String,
    namespace: String, // "tenant/ns" (or "tenant/cluster/ns" for V1 names)
    local: String,
    partition: Option<u32>,
}

impl TopicName {
    pub fn parse(name: &str) -> Result<TopicName, TopicNameError> {
        let invalid = |reason| TopicNameError::Invalid {
            name: name.to_owned(),
            reason,
        };
        let full;
        let name_full: &str = if name.contains("://") {
            name
        } else {
            let parts: Vec<&str> = name.split('/').collect();
            full = match parts.len() {
                1 => format!("persistent://public/default/{name}"),
                3 => format!("persistent://{name}"),
                _ => {
                    return Err(invalid(
                        "a short name is either <topic> or <tenant>/<namespace>/<topic>",
                    ));
                }
            };
            &full
        };
        let (domain, rest) = name_full
            .split_once("://")
            .ok_or(invalid("missing domain"))?;
        let domain = match domain {
            "persistent" => Domain::Persistent,
            "non-persistent" => Domain::NonPersistent,
            "topic" => Domain::Topic,
            "segment" => Domain::Segment,
            _ => {
                return Err(invalid(
                    "the domain must be persistent, non-persistent, topic or segment",
                ));
            }
        };
        // A scalable topic's local name may hold '/' (and a segment's ends
        // with its descriptor), so these have no V1 form with a cluster.
        let scalable = matches!(domain, Domain::Topic | Domain::Segment);
        let parts: Vec<&str> = rest.splitn(if scalable { 3 } else { 4 }, '/').collect();
        let (tenant, namespace, local) = match parts.as_slice() {
            [t, ns, local] => (*t, format!("{t}/{ns}"), *local),
            [t, cluster, ns, local] => (*t, format!("{t}/{cluster}/{ns}"), *local),
            _ => return Err(invalid("expected <domain>://<tenant>/<namespace>/<topic>")),
        };
        if tenant.is_empty() || namespace.split('/').any(|p| p.is_empty()) {
            return Err(invalid("empty tenant or namespace"));
        }
        if !namespace.split('/').all(valid_namespace_part) {
            return Err(invalid(
                "tenant and namespace may only hold letters, digits and -=:._",
            ));
        }
        if local.is_empty() {
            return Err(invalid("empty topic"));
        }
        // The metadata store's paths hold the name (ZooKeeper's and etcd's refuse
        // control characters too): refused here, as a name, not later as a
        // metadata error that a client takes for a transient one and retries.
        if local.chars().any(char::is_control) {
            return Err(invalid("the topic may not hold control characters"));
        }
        if domain == Domain::Segment {
            let (parent, descriptor) = local.rsplit_once('/').ok_or(invalid(
                "a segment is segment://<tenant>/<namespace>/<topic>/<descriptor>",
            ))?;
            if parent.is_empty() || descriptor.parse::<SegmentDescriptor>().is_err() {
                return Err(invalid(
                    "a segment's last element is its descriptor, e.g. 0000-7fff-1",
                ));
            }
        }
        if scalable && local.split('/').any(str::is_empty) {
            return Err(invalid("empty element in the topic"));
        }
        // Scalable topics have no partitions: a "-partition-N" suffix is
        // part of their name.
        let partition = (!scalable)
            .then(|| {
                local
                    .rfind(PARTITION_SUFFIX)
                    .and_then(|i| local[i + PARTITION_SUFFIX.len()..].parse::<u32>().ok())
            })
            .flatten();
        Ok(TopicName {
            domain,
            tenant: tenant.to_owned(),
            namespace,
            local: local.to_owned(),
            partition,
        })
    }

    pub fn domain(&self) -> Domain {
        self.domain
    }
    /// Stored: `persistent://` topics and scalable topics' segments.
    pub fn is_persistent(&self) -> bool {
        matches!(self.domain, Domain::Persistent | Domain::Segment)
    }
    /// The descriptor of a `segment://` name.
    pub fn segment(&self) -> Option<SegmentDescriptor> {
        if self.domain != Domain::Segment {
            return None;
        }
        self.local.rsplit_once('/')?.1.parse().ok()
    }
    /// The `topic://` a `segment://` belongs to.
    pub fn scalable_parent(&self) -> Option<TopicName> {
        let (parent, _) = self.local.rsplit_once('/')?;
        (self.domain == Domain::Segment).then(|| TopicName {
            domain: Domain::Topic,
            local: parent.to_owned(),
            ..self.clone()
        })
    }
    /// Segment `d` of this `topic://`.
    pub fn segment_name(&self, d: SegmentDescriptor) -> Option<TopicName> {
        (self.domain == Domain::Topic).then(|| TopicName {
            domain: Domain::Segment,
            local: format!("{}/{d}", self.local),
            ..self.clone()
        })
    }
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
    /// `tenant/namespace`.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
    /// The part after the namespace, with any partition suffix.
    pub fn local_name(&self) -> &str {
        &self.local
    }
    /// The partition index when this names one partition of a partitioned topic.
    pub fn partition(&self) -> Option<u32> {
        self.partition
    }
    /// The partitioned topic this partition belongs to (itself when not a partition).
    pub fn partitioned_parent(&self) -> TopicName {
        match self.partition {
            None => self.clone(),
            Some(_) => {
                let i = self
                    .local
                    .rfind(PARTITION_SUFFIX)
                    .unwrap_or(self.local.len());
                TopicName {
                    local: self.local[..i].to_owned(),
                    partition: None,
                    ..self.clone()
                }
            }
        }
    }
    /// Partition `index` of this topic.
    pub fn partition_name(&self, index: u32) -> TopicName {
        let base = self.partitioned_parent();
        TopicName {
            local: format!("{}{PARTITION_SUFFIX}{index}", base.local),
            partition: Some(index),
            ..base
        }
    }
}

fn valid_namespace_part(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '=' | ':' | '.' | '_'))
}

impl fmt::Display for TopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}/{}",
            self.domain.as_str(),
            self.namespace,
            self.local
        )
    }
}

impl std::str::FromStr for TopicName {
    type Err = TopicNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TopicName::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_full_forms() {
        let t = TopicName::parse("my-topic").unwrap();
        assert_eq!(t.to_string(), "persistent://public/default/my-topic");
        let t = TopicName::parse("acme/orders/in").unwrap();
        assert_eq!(t.to_string(), "persistent://acme/orders/in");
        assert_eq!(t.namespace(), "acme/orders");
        let t = TopicName::parse("non-persistent://a/b/c").unwrap();
        assert_eq!(t.domain(), Domain::NonPersistent);
        let t = TopicName::parse("persistent://a/cluster/b/c").unwrap();
        assert_eq!(t.namespace(), "a/cluster/b");
        assert_eq!(t.local_name(), "c");
    }

    #[test]
    fn partitions() {
        let t = TopicName::parse("persistent://a/b/t-partition-3").unwrap();
        assert_eq!(t.partition(), Some(3));
        assert_eq!(t.partitioned_parent().to_string(), "persistent://a/b/t");
        assert_eq!(
            t.partitioned_parent().partition_name(7).to_string(),
            "persistent://a/b/t-partition-7"
        );
        assert_eq!(TopicName::parse("t-partition-x").unwrap().partition(), None);
    }

    #[test]
    fn scalable_names() {
        let t = TopicName::parse("topic://acme/orders/eu/in").unwrap();
        assert_eq!(t.domain(), Domain::Topic);
        assert_eq!((t.namespace(), t.local_name()), ("acme/orders", "eu/in"));
        assert!(!t.is_persistent());
        let d: SegmentDescriptor = "0000-7fff-1".parse().unwrap();
        let s = t.segment_name(d).unwrap();
        assert_eq!(s.to_string(), "segment://acme/orders/eu/in/0000-7fff-1");
        let back = TopicName::parse(&s.to_string()).unwrap();
        assert_eq!((back.segment(), back.is_persistent()), (Some(d), true));
        assert_eq!(back.scalable_parent().unwrap(), t);
        assert_eq!(back.partition(), None);
        assert_eq!(
            TopicName::parse("topic://a/b/c-partition-1")
                .unwrap()
                .partition(),
            None
        );
        for bad in [
            "segment://a/b/c",
            "segment://a/b/0000-ffff-0",
            "segment://a/b/c/0000-FFFF-0",
            "topic://a/b",
            "topic://a/b/c//d",
            "segment://a/b/c/ffff-0000-1",
        ] {
            assert!(TopicName::parse(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(t.segment().is_none() && t.scalable_parent().is_none());
        assert!(s.segment_name(d).is_none());
    }

    #[test]
    fn invalid_names() {
        for bad in [
            "",
            "a/b",
            "a/b/c/d",
            "http://a/b/c",
            "persistent://a/b",
            "persistent://a/b/",
            "persistent://a b/c/d",
            "persistent:///b/c",
            "persistent://a/b/line\nbreak",
            "a\u{0}b",
            "persistent://a/b/del\u{7f}",
            "persistent://a/b/c1\u{85}",
        ] {
            assert!(TopicName::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
