//! Bundle math (Pulsar's `NamespaceBundles`): a namespace's topics are
//! split by the CRC-32 of their names into hash ranges, the unit a broker
//! owns. Pure: no store, no broker state.

use serde::{Deserialize, Serialize};
use strobe_model::TopicName;

use crate::error::ResourcesError;

/// Pulsar's `BundlesData`: the hash-range boundaries of a namespace's bundles.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct BundlesData {
    pub boundaries: Vec<String>,
    pub num_bundles: u32,
}

impl BundlesData {
    /// `n` bundles of equal width over the 32-bit hash range (Pulsar's default split).
    pub fn even(n: u32) -> BundlesData {
        let n = n.max(1);
        let step = 0x1_0000_0000u64 / u64::from(n);
        let mut boundaries: Vec<String> = (0..n)
            .map(|i| format!("0x{:08x}", u64::from(i) * step))
            .collect();
        boundaries.push("0xffffffff".into());
        BundlesData {
            boundaries,
            num_bundles: n,
        }
    }

    /// The boundaries as numbers (validated: at least two, increasing, 0 to 0xffffffff).
    pub fn parsed(&self) -> Result<Vec<u64>, ResourcesError> {
        let v: Result<Vec<u64>, _> = self
            .boundaries
            .iter()
            .map(|b| u64::from_str_radix(b.trim_start_matches("0x"), 16))
            .collect();
        let v = v.map_err(|_| {
            ResourcesError::Invalid(format!("invalid bundle boundaries {:?}", self.boundaries))
        })?;
        if v.len() < 2
            || v[0] != 0
            || *v.last().unwrap_or(&0) != 0xffff_ffff
            || v.windows(2).any(|w| w[0] >= w[1])
        {
            return Err(ResourcesError::Invalid(format!(
                "bundle boundaries must rise from 0x00000000 to 0xffffffff: {:?}",
                self.boundaries
            )));
        }
        Ok(v)
    }

    /// The boundaries parsed once, for placing many topics (a walk over
    /// every loaded topic parsed them again for each).
    pub fn index(&self) -> Result<BundleIndex, ResourcesError> {
        let bounds = self.parsed()?;
        let names = bounds.windows(2).map(|w| bundle_name(w[0], w[1])).collect();
        Ok(BundleIndex { bounds, names })
    }
}

/// A namespace's bundles, parsed: [`BundleIndex::position`] places a topic.
#[derive(Debug, Clone)]
pub struct BundleIndex {
    /// Validated boundaries: at least two, rising from 0 to 0xffffffff.
    bounds: Vec<u64>,
    /// Each bundle's name, `0xLOW_0xHIGH`.
    names: Vec<String>,
}

impl BundleIndex {
    /// The bundles' names, in hash order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The index (into [`BundleIndex::names`]) of the bundle holding topic
    /// `name` (Pulsar hashes the topic name with CRC-32): the last bundle
    /// holds 0xffffffff too.
    pub fn position_of(&self, name: &TopicName) -> usize {
        bound_below(&self.bounds, topic_name_hash(name))
    }
}

/// A bundle's name from its bounds: `0xLOW_0xHIGH`.
fn bundle_name(lo: u64, hi: u64) -> String {
    format!("0x{lo:08x}_0x{hi:08x}")
}

/// The index of the bundle of validated boundaries `bounds` holding hash
/// `h`: the one whose lower bound is the greatest not above `h` (the last
/// bundle holds 0xffffffff, its upper bound, too).
fn bound_below(bounds: &[u64], h: u32) -> usize {
    let at_or_below = bounds.partition_point(|b| *b <= u64::from(h));
    at_or_below.saturating_sub(1).min(bounds.len() - 2)
}

impl BundlesData {
    /// The hash range `[lo, hi)` of `bundle` (`0xLOW_0xHIGH`), which must be
    /// one of these bundles.
    pub fn range_of(&self, bundle: &str) -> Result<(u64, u64), ResourcesError> {
        let v = self.parsed()?;
        let (lo, hi) = bundle
            .split_once('_')
            .and_then(|(a, b)| {
                Some((
                    u64::from_str_radix(a.trim_start_matches("0x"), 16).ok()?,
                    u64::from_str_radix(b.trim_start_matches("0x"), 16).ok()?,
                ))
            })
            .ok_or_else(|| {
                ResourcesError::Invalid(format!("invalid bundle {bundle:?}: expected 0xLOW_0xHIGH"))
            })?;
        if !v.windows(2).any(|w| w[0] == lo && w[1] == hi) {
            return Err(ResourcesError::NotFound(format!(
                "bundle {bundle} is not one of the namespace's bundles"
            )));
        }
        Ok((lo, hi))
    }

    /// These bundles with `bundle` split into two halves (Pulsar's
    /// `range_equally_divide`), and the halves' names.
    pub fn split(&self, bundle: &str) -> Result<(BundlesData, [String; 2]), ResourcesError> {
        let (lo, hi) = self.range_of(bundle)?;
        if hi - lo < 2 {
            return Err(ResourcesError::Precondition(format!(
                "bundle {bundle} is too small to split"
            )));
        }
        let mid = lo + (hi - lo) / 2;
        let mut v = self.parsed()?;
        let at = v.iter().position(|x| *x == hi).unwrap_or(v.len());
        v.insert(at, mid);
        let split = BundlesData {
            boundaries: v.iter().map(|x| format!("0x{x:08x}")).collect(),
            num_bundles: (v.len() - 1) as u32,
        };
        let halves = [bundle_name(lo, mid), bundle_name(mid, hi)];
        Ok((split, halves))
    }
}

/// Where topic `name` falls in its namespace's hash space (CRC-32 of the
/// name, as Pulsar hashes it to pick the bundle).
pub fn topic_hash(name: &str) -> u32 {
    crc32fast::hash(name.as_bytes())
}

/// [`topic_hash`] of `name`'s full form, hashed part by part: placing every
/// loaded topic each second wrote each name out only to hash it.
pub fn topic_name_hash(name: &TopicName) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for part in [
        name.domain().as_str(),
        "://",
        name.namespace(),
        "/",
        name.local_name(),
    ] {
        h.update(part.as_bytes());
    }
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::BundlesData;
    use strobe_model::TopicName;

    #[test]
    fn even_bundles_cover_the_hash_range() {
        let b = BundlesData::even(4);
        assert_eq!(
            b.boundaries,
            [
                "0x00000000",
                "0x40000000",
                "0x80000000",
                "0xc0000000",
                "0xffffffff"
            ]
        );
        assert_eq!(b.parsed().unwrap().len(), 5);
        // Every name lands in exactly one of the bundles.
        for name in [
            "persistent://a/b/c",
            "persistent://public/default/x-partition-3",
        ] {
            let index = b.index().unwrap();
            let bundle = &index.names()[index.position_of(&TopicName::parse(name).unwrap())];
            b.range_of(bundle).unwrap();
        }
    }

    #[test]
    fn the_index_places_every_topic_in_the_bundle_whose_range_holds_its_hash() {
        // Uneven boundaries (a split), each topic checked against the range
        // it lands in: [lo, hi), the last bundle's hi included.
        let (b, _) = BundlesData::even(3).split("0x55555555_0xaaaaaaaa").unwrap();
        let index = b.index().unwrap();
        assert_eq!(index.names().len(), 4);
        for i in 0..20_000 {
            let name = format!("persistent://t/n/topic-{i}");
            let bundle = &index.names()[index.position_of(&TopicName::parse(&name).unwrap())];
            let (lo, hi) = b.range_of(bundle).unwrap();
            let h = u64::from(super::topic_hash(&name));
            assert!(
                h >= lo && (h < hi || hi == 0xffff_ffff),
                "{name} ({h:#x}) in {bundle}"
            );
        }
    }

    #[test]
    fn a_parsed_name_hashes_as_its_full_form() {
        for name in [
            "persistent://public/default/t",
            "persistent://a/b/c-partition-7",
            "non-persistent://a/b/c",
            "persistent://prop/cluster/ns/old-style",
            "segment://acme/orders/eu/in/0000-7fff-1",
            "short-name",
        ] {
            let t = strobe_model::TopicName::parse(name).unwrap();
            assert_eq!(
                super::topic_name_hash(&t),
                super::topic_hash(&t.to_string()),
                "{name}"
            );
        }
    }

    #[test]
    fn split_halves_one_bundle_and_keeps_the_rest() {
        let b = BundlesData::even(2);
        let (s, halves) = b.split("0x00000000_0x80000000").unwrap();
        assert_eq!(
            s.boundaries,
            ["0x00000000", "0x40000000", "0x80000000", "0xffffffff"]
        );
        assert_eq!(s.num_bundles, 3);
        assert_eq!(halves, ["0x00000000_0x40000000", "0x40000000_0x80000000"]);
        for h in &halves {
            s.range_of(h).unwrap();
        }
        assert!(b.split("0x00000000_0x40000000").is_err(), "not a bundle");
        assert!(b.range_of("nonsense").is_err());
    }

    #[test]
    fn boundaries_must_rise_over_the_whole_range() {
        let bad = BundlesData {
            boundaries: vec!["0x00000000".into(), "0x10".into()],
            num_bundles: 1,
        };
        assert!(bad.parsed().is_err());
    }
}
