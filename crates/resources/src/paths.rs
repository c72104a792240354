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
/// Topic-level policies (Pulsar keeps them in a system topic; here they are
/// documents like the namespaces'), one per topic, a partitioned topic's
/// shared by its partitions.
pub const TOPIC_POLICIES: &str = "/admin/topic-policies";

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

/// A topic's own policies: a partition's are its partitioned topic's.
pub fn topic_policies(t: &TopicName) -> String {
    format!("{TOPIC_POLICIES}/{}", topic_key(&t.partitioned_parent()))
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

/// Scalable topics' layouts (PIP-460): `<root>/<tenant>/<ns>/<encoded local
/// name>`, with the controller's election and the subscriptions beneath.
pub const SCALABLE_TOPICS: &str = "/topics";

/// A scalable topic's local name as a path element: Java's
/// `URLEncoder.encode` (Pulsar's `Codec.encode`), since the local name of a
/// `topic://` may hold `/`.
pub fn encode_local(local: &str) -> String {
    let mut out = String::with_capacity(local.len());
    for b in local.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'*' | b'_' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The layout document of `topic://<ns>/<local>` (`ns` is `<tenant>/<namespace>`).
pub fn scalable_topic(ns: &str, local: &str) -> String {
    format!("{SCALABLE_TOPICS}/{ns}/{}", encode_local(local))
}

/// The prefix of a namespace's scalable topics' documents.
pub fn scalable_topics_of(ns: &str) -> String {
    format!("{SCALABLE_TOPICS}/{ns}/")
}

/// The controller's leader-election key of a scalable topic.
pub fn scalable_controller(ns: &str, local: &str) -> String {
    format!("{}/controller", scalable_topic(ns, local))
}

/// A scalable topic's resize in progress (see `strobe_layout::PendingResize`).
pub fn scalable_resize(ns: &str, local: &str) -> String {
    format!("{}/resize", scalable_topic(ns, local))
}

/// The prefix of a scalable topic's subscriptions.
pub fn scalable_subscriptions(ns: &str, local: &str) -> String {
    format!("{}/subscriptions/", scalable_topic(ns, local))
}

/// One subscription of a scalable topic (its name URL-encoded).
pub fn scalable_subscription(ns: &str, local: &str, sub: &str) -> String {
    format!("{}{}", scalable_subscriptions(ns, local), encode_local(sub))
}

/// The load record of a segment of a scalable topic (PIP-483).
pub fn scalable_segment_load(ns: &str, local: &str, segment: u64) -> String {
    format!("{}/segments/{segment}/load", scalable_topic(ns, local))
}

/// A consumer's registration in a subscription of a scalable topic.
pub fn scalable_consumer(ns: &str, local: &str, sub: &str, name: &str) -> String {
    format!(
        "{}/consumers/{}",
        scalable_subscription(ns, local, sub),
        encode_local(name)
    )
}

/// The marker that subscription `sub` has read segment `segment` of a
/// scalable topic to its sealed end.
pub fn scalable_drained(ns: &str, local: &str, sub: &str, segment: u64) -> String {
    format!(
        "{}/drained/{segment}",
        scalable_subscription(ns, local, sub)
    )
}

/// [`encode_local`] undone; `None` for what it never writes.
pub fn decode_local(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = encoded.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}
