//! One segment of a scalable topic as its layout records it (Pulsar's
//! `SegmentInfo`), with Pulsar's JSON field names, so a layout written by
//! either broker reads in the other.

use serde::{Deserialize, Serialize};
use strobe_model::scalable::{HashRange, SegmentDescriptor};

/// Whether a segment takes new messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SegmentState {
    /// Producers write here; its range is part of the ring's current tiling.
    Active,
    /// Terminated: read to its end, then its children take over.
    Sealed,
}

/// A hash range as Pulsar's JSON writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct RangeJson {
    start: u16,
    end: u16,
}

/// One segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Segment {
    pub segment_id: u64,
    #[serde(with = "range_json")]
    pub hash_range: HashRange,
    pub state: SegmentState,
    #[serde(default)]
    pub parent_ids: Vec<u64>,
    #[serde(default)]
    pub child_ids: Vec<u64>,
    pub created_at_epoch: u64,
    /// `None` while active (Pulsar writes -1).
    #[serde(with = "minus_one", default)]
    pub sealed_at_epoch: Option<u64>,
    pub created_at_ms: u64,
    /// `None` while active (Pulsar writes -1).
    #[serde(with = "minus_one", default)]
    pub sealed_at_ms: Option<u64>,
    /// The v4 topic a migrated (PIP-475) or synthetic segment stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legacy_topic_name: Option<String>,
    /// PIP-486: the entry-bucket boundaries (on the 16-bit bucket hash) of
    /// this segment; `n` boundaries make `n + 1` buckets.
    #[serde(default)]
    pub entry_bucket_splits: Vec<u32>,
}

impl Segment {
    pub fn is_active(&self) -> bool {
        self.state == SegmentState::Active
    }

    /// The topic holding its messages, for scalable topic `topic`: the v4
    /// topic of a legacy segment (PIP-475), else its `segment://` name.
    pub fn topic_name(&self, topic: &strobe_model::TopicName) -> Option<strobe_model::TopicName> {
        match &self.legacy_topic_name {
            Some(legacy) => strobe_model::TopicName::parse(legacy).ok(),
            None => topic.segment_name(self.descriptor()),
        }
    }

    /// Whether it stands for a v4 topic (PIP-475).
    pub fn is_legacy(&self) -> bool {
        self.legacy_topic_name.is_some()
    }

    /// The descriptor of its `segment://` name.
    pub fn descriptor(&self) -> SegmentDescriptor {
        SegmentDescriptor {
            range: self.hash_range,
            id: self.segment_id,
        }
    }

    /// How many entry buckets it has.
    pub fn buckets(&self) -> u32 {
        self.entry_bucket_splits.len() as u32 + 1
    }
}

mod range_json {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use strobe_model::scalable::HashRange;

    use super::RangeJson;

    pub fn serialize<S: Serializer>(r: &HashRange, s: S) -> Result<S::Ok, S::Error> {
        RangeJson {
            start: r.start,
            end: r.end,
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HashRange, D::Error> {
        let r = RangeJson::deserialize(d)?;
        HashRange::new(r.start, r.end).map_err(serde::de::Error::custom)
    }
}

/// Pulsar's sentinel: -1 stands for "not yet".
mod minus_one {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_u64(*v),
            None => s.serialize_i64(-1),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let v = i64::deserialize(d)?;
        Ok(u64::try_from(v).ok())
    }
}
