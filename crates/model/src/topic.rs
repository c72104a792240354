//! Topic names, parsed as Pulsar's `TopicName` parses them.

use std::fmt;

/// Persistent topics are stored; non-persistent ones are dispatched or dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Domain {
    Persistent,
    NonPersistent,
}

impl Domain {
    pub fn as_str(self) -> &'static str {
        match self {
            Domain::Persistent => "persistent",
            Domain::NonPersistent => "non-persistent",
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
            _ => return Err(invalid("the domain must be persistent or non-persistent")),
        };
        let parts: Vec<&str> = rest.splitn(4, '/').collect();
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
        let partition = local
            .rfind(PARTITION_SUFFIX)
            .and_then(|i| local[i + PARTITION_SUFFIX.len()..].parse::<u32>().ok());
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
    pub fn is_persistent(&self) -> bool {
        self.domain == Domain::Persistent
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
