//! Every path the broker keeps in the metadata store, in Pulsar's layout.
//! Nothing else spells one.

use strobe_model::TopicName;

/// Tenants (`<root>/<tenant>`) and namespaces (`<root>/<tenant>/<ns>`).
pub const POLICIES: &str = "/admin/policies";
/// Partitioned topics' partition counts.
pub const PARTITIONED_TOPICS: &str = "/admin/partitioned-topics";
/// Persistent topics that exist, with what the broker records of each.
pub const MANAGED_LEDGERS: &str = "/managed-ledgers";
/// Schema histories (partitions share their partitioned topic's).
pub const SCHEMAS: &str = "/schemas";
/// The health check's write.
pub const HEALTH: &str = "/admin/health";

pub fn tenant(tenant: &str) -> String {
    format!("{POLICIES}/{tenant}")
}

/// `ns` is `<tenant>/<namespace>`.
pub fn namespace(ns: &str) -> String {
    format!("{POLICIES}/{ns}")
}

/// `<tenant>/<ns>/<domain>/<local>`: the key layout of a topic under a root.
pub fn topic_key(t: &TopicName) -> String {
    format!(
        "{}/{}/{}",
        t.namespace(),
        t.domain().as_str(),
        t.local_name()
    )
}

/// `topic_key` back to a topic name.
pub fn name_from_key(key: &str) -> Option<String> {
    let parts: Vec<&str> = key.splitn(4, '/').collect();
    match parts.as_slice() {
        [tenant, ns, domain, local] => Some(format!("{domain}://{tenant}/{ns}/{local}")),
        _ => None,
    }
}

pub fn partitioned_topic(t: &TopicName) -> String {
    format!("{PARTITIONED_TOPICS}/{}", topic_key(t))
}

pub fn managed_ledger(t: &TopicName) -> String {
    format!("{MANAGED_LEDGERS}/{}", topic_key(t))
}

/// The prefix under which a namespace's persistent topics are recorded.
pub fn persistent_topics_of(ns: &str) -> String {
    format!("{MANAGED_LEDGERS}/{ns}/persistent/")
}

pub fn schema(t: &TopicName) -> String {
    let base = t.partitioned_parent();
    format!("{SCHEMAS}/{}/{}", base.namespace(), base.local_name())
}

pub fn health(broker_port: u16) -> String {
    format!("{HEALTH}/{broker_port}")
}
