//! What the cluster writes in the metadata store: broker registrations
//! ([`BrokerInfo`]), ownership records ([`OwnerInfo`]) and their paths, and
//! the pure choices made from them (a listener's URLs, the broker for an
//! unowned bundle).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ClusterError;
use crate::state::OwnerState;

/// One named listener of `advertised_listeners` (Pulsar's `AdvertisedListener`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdvertisedListener {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_service_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_service_url_tls: Option<String>,
}

/// The most often a broker rewrites its bundles' rates in its registration.
pub const RATE_REPORT_EVERY: Duration = Duration::from_secs(5);

/// Where the live brokers register.
pub const BROKERS: &str = "/loadbalance/brokers";
/// Where bundle owners hold their locks.
pub const OWNERSHIP: &str = "/namespace";
/// Where brokers announce the non-persistent topics they have loaded (these
/// exist only while loaded, so a namespace's list asks the store).
pub const NON_PERSISTENT: &str = "/loadbalance/non-persistent";

/// What a broker publishes of itself (Pulsar's `BrokerLookupData`, trimmed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerInfo {
    pub broker_id: String,
    pub service_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_url_tls: Option<String>,
    pub web_service_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_service_url_tls: Option<String>,
    /// Its named addresses (`advertised_listeners`); `service_url` is the internal one's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advertised_listeners: Vec<AdvertisedListener>,
    /// Bundles owned when the registration was last written.
    #[serde(default)]
    pub bundles: u32,
    /// Topics loaded when the registration was last written.
    #[serde(default)]
    pub topics: u32,
    /// Messages per second in and out of each owned bundle's topics (by
    /// bundle path), as last reported: the load the load manager balances.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bundle_rates: BTreeMap<String, u64>,
}

/// A broker as an ownership record names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerRef {
    pub broker_id: String,
    pub service_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_url_tls: Option<String>,
    pub web_service_url: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advertised_listeners: Vec<AdvertisedListener>,
}

impl From<&BrokerInfo> for BrokerRef {
    fn from(b: &BrokerInfo) -> BrokerRef {
        BrokerRef {
            broker_id: b.broker_id.clone(),
            service_url: b.service_url.clone(),
            service_url_tls: b.service_url_tls.clone(),
            web_service_url: b.web_service_url.clone(),
            advertised_listeners: b.advertised_listeners.clone(),
        }
    }
}

impl BrokerRef {
    /// The broker's binary URLs (plain, TLS) for a client that named
    /// `listener` (`None`: the internal ones). A name the broker does not
    /// advertise is refused as Pulsar refuses it.
    pub fn urls_for(
        &self,
        listener: Option<&str>,
    ) -> Result<(String, Option<String>), ClusterError> {
        listener_urls(
            &self.advertised_listeners,
            listener,
            (&self.service_url, self.service_url_tls.as_deref()),
        )
    }
}

/// `listener`'s URLs among `listeners`, or `default` when `listener` is `None`.
pub fn listener_urls(
    listeners: &[AdvertisedListener],
    listener: Option<&str>,
    default: (&str, Option<&str>),
) -> Result<(String, Option<String>), ClusterError> {
    let Some(name) = listener else {
        return Ok((default.0.to_string(), default.1.map(str::to_string)));
    };
    match listeners.iter().find(|l| l.name == name) {
        // A TLS-only listener answers its TLS URL in both fields, as Pulsar does.
        Some(l) => Ok((
            l.broker_service_url
                .clone()
                .or_else(|| l.broker_service_url_tls.clone())
                .unwrap_or_default(),
            l.broker_service_url_tls.clone(),
        )),
        None => Err(ClusterError::NotReady(format!(
            "the broker do not have {name} listener (advertised listeners: {})",
            if listeners.is_empty() {
                "none".to_string()
            } else {
                listeners
                    .iter()
                    .map(|l| l.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ))),
    }
}

/// A bundle's ownership record (Pulsar's `ServiceUnitStateData`): who holds
/// it, in which state, and during a transfer where it goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerInfo {
    #[serde(flatten)]
    pub broker: BrokerRef,
    #[serde(default)]
    pub state: OwnerState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<BrokerRef>,
    /// When a transfer (an operator's or the load manager's) brought the
    /// bundle to its owner, in ms since the epoch: the load manager leaves
    /// it there for its shedding grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_at: Option<u64>,
}

impl OwnerInfo {
    pub fn owned_by(b: &BrokerInfo) -> OwnerInfo {
        OwnerInfo {
            broker: BrokerRef::from(b),
            state: OwnerState::Owned,
            dst: None,
            moved_at: None,
        }
    }

    /// The broker clients should go to: the destination while moving.
    pub fn serving(&self) -> &BrokerRef {
        match (&self.state, &self.dst) {
            (OwnerState::Releasing | OwnerState::Assigning, Some(d)) => d,
            _ => &self.broker,
        }
    }
}

/// Where a lookup sends a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub owner: BrokerRef,
    /// This broker owns the bundle (or was just assigned it, or it is moving here).
    pub local: bool,
}

/// The path of a bundle's ownership lock.
pub fn bundle_path(namespace: &str, bundle: &str) -> String {
    format!("{OWNERSHIP}/{namespace}/{bundle}")
}

/// The namespace and bundle of an ownership lock's path.
pub fn parse_bundle_path(path: &str) -> Option<(&str, &str)> {
    path.strip_prefix(OWNERSHIP)?
        .strip_prefix('/')?
        .rsplit_once('/')
}

/// Picks the broker for an unowned bundle: the fewest owned bundles, ties
/// broken by a hash of (bundle, broker id) so every broker picks the same one
/// and equal brokers split the bundles between them. Pure, for tests.
pub fn pick_broker<'a>(
    bundle: &str,
    brokers: &'a [BrokerInfo],
    owned: &HashMap<String, u32>,
) -> Option<&'a BrokerInfo> {
    brokers.iter().min_by_key(|b| {
        let load = owned.get(&b.broker_id).copied().unwrap_or(0);
        let tiebreak = crc32fast::hash(format!("{bundle}|{}", b.broker_id).as_bytes());
        (load, tiebreak)
    })
}

/// A record this broker holds.
#[derive(Debug, Clone)]
pub struct Held {
    /// The record's version as this broker last wrote it.
    pub version: u64,
    /// The session epoch it was written in (a later epoch holds nothing).
    pub epoch: u64,
    /// The fencing token of the bundle's ledgers here: the version of the
    /// write that made this broker the owner (the halves of a split keep
    /// their parent's: the same broker goes on writing the same logs).
    pub fence: u64,
    pub info: OwnerInfo,
}

/// A registration as a test writes it: named `id`, no load, no listeners.
#[cfg(test)]
pub(crate) fn broker(id: &str) -> BrokerInfo {
    BrokerInfo {
        broker_id: id.into(),
        service_url: format!("pulsar://{id}"),
        service_url_tls: None,
        web_service_url: format!("http://{id}"),
        web_service_url_tls: None,
        advertised_listeners: Vec::new(),
        bundles: 0,
        topics: 0,
        bundle_rates: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_are_chosen_by_name_and_old_records_still_decode() {
        let mut b = broker("a");
        b.advertised_listeners = vec![
            AdvertisedListener {
                name: "internal".into(),
                broker_service_url: Some("pulsar://a:6650".into()),
                broker_service_url_tls: None,
            },
            AdvertisedListener {
                name: "external".into(),
                broker_service_url: Some("pulsar://h:7000".into()),
                broker_service_url_tls: None,
            },
        ];
        let r = BrokerRef::from(&b);
        assert_eq!(r.urls_for(None).unwrap().0, "pulsar://a");
        assert_eq!(r.urls_for(Some("external")).unwrap().0, "pulsar://h:7000");
        let err = r.urls_for(Some("nope")).unwrap_err().to_string();
        assert!(err.contains("do not have nope listener"), "{err}");
        // Registrations and ownership records written before listeners existed.
        let old = r#"{"brokerId":"a","serviceUrl":"pulsar://a","webServiceUrl":"http://a"}"#;
        let info: BrokerInfo = serde_json::from_str(old).unwrap();
        assert!(info.advertised_listeners.is_empty());
        let owner: OwnerInfo = serde_json::from_str(old).unwrap();
        assert!(owner.broker.advertised_listeners.is_empty());
        // And a record with listeners round-trips.
        let json = serde_json::to_string(&OwnerInfo::owned_by(&b)).unwrap();
        let back: OwnerInfo = serde_json::from_str(&json).unwrap();
        assert_eq!(back.broker, r);
    }

    #[test]
    fn the_least_loaded_broker_is_picked_and_ties_spread() {
        let bs = vec![broker("a"), broker("b"), broker("c")];
        let mut load = HashMap::new();
        load.insert("a".to_string(), 3);
        load.insert("b".to_string(), 1);
        load.insert("c".to_string(), 2);
        assert_eq!(
            pick_broker("/namespace/t/n/0x0_0x1", &bs, &load)
                .unwrap()
                .broker_id,
            "b"
        );
        // With equal loads, different bundles go to different brokers, and
        // every caller picks the same broker for one bundle.
        let none = HashMap::new();
        let picks: std::collections::BTreeSet<String> = (0..16)
            .map(|i| {
                pick_broker(&format!("/namespace/t/n/{i}"), &bs, &none)
                    .unwrap()
                    .broker_id
                    .clone()
            })
            .collect();
        assert!(picks.len() >= 2, "{picks:?}");
        let again = pick_broker("/namespace/t/n/7", &bs, &none).unwrap();
        assert_eq!(again, pick_broker("/namespace/t/n/7", &bs, &none).unwrap());
        assert!(pick_broker("x", &[], &none).is_none());
    }
}
