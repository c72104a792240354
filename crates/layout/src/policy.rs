//! The autoscale policy (PIP-483): the broker's keys, and the namespace's
//! and the topic's overrides of them. Its own file because the layout
//! document carries a topic's override and the evaluator reads the layout.

use serde::{Deserialize, Serialize};

/// Rates of one segment (Pulsar's `SegmentLoadStats`) and since when they
/// have not moved (the load record's last write).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SegmentLoad {
    pub msg_rate_in: f64,
    pub bytes_rate_in: f64,
    pub msg_rate_out: f64,
    pub bytes_rate_out: f64,
    /// When these rates were recorded (ms since the epoch).
    #[serde(default)]
    pub since_ms: u64,
}

/// The four rates a threshold is set on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rates {
    pub msg_rate_in: f64,
    pub bytes_rate_in: f64,
    pub msg_rate_out: f64,
    pub bytes_rate_out: f64,
}

impl Rates {
    /// `load`'s largest rate as a share of these thresholds.
    pub(crate) fn ratio(&self, load: &SegmentLoad) -> f64 {
        [
            load.msg_rate_in / self.msg_rate_in,
            load.bytes_rate_in / self.bytes_rate_in,
            load.msg_rate_out / self.msg_rate_out,
            load.bytes_rate_out / self.bytes_rate_out,
        ]
        .into_iter()
        .fold(0.0, f64::max)
    }

    /// Whether every rate of `load` is under these thresholds.
    pub(crate) fn all_under(&self, load: &SegmentLoad) -> bool {
        load.msg_rate_in < self.msg_rate_in
            && load.bytes_rate_in < self.bytes_rate_in
            && load.msg_rate_out < self.msg_rate_out
            && load.bytes_rate_out < self.bytes_rate_out
    }

    /// `load`'s rates, each as a share of its threshold, together.
    pub(crate) fn share(&self, load: &SegmentLoad) -> f64 {
        load.msg_rate_in / self.msg_rate_in
            + load.bytes_rate_in / self.bytes_rate_in
            + load.msg_rate_out / self.msg_rate_out
            + load.bytes_rate_out / self.bytes_rate_out
    }

    pub(crate) fn valid(&self) -> bool {
        [
            self.msg_rate_in,
            self.bytes_rate_in,
            self.msg_rate_out,
            self.bytes_rate_out,
        ]
        .iter()
        .all(|r| r.is_finite() && *r > 0.0)
    }
}

/// The policy, with Pulsar's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AutoScalePolicy {
    pub enabled: bool,
    pub min_segments: u32,
    pub max_segments: u32,
    pub max_dag_depth: u32,
    pub split_cooldown_ms: u64,
    pub merge_cooldown_ms: u64,
    pub merge_window_ms: u64,
    pub split: Rates,
    pub merge: Rates,
}

impl Default for AutoScalePolicy {
    fn default() -> Self {
        AutoScalePolicy {
            enabled: true,
            min_segments: 1,
            max_segments: 64,
            max_dag_depth: 10,
            split_cooldown_ms: 60_000,
            merge_cooldown_ms: 300_000,
            merge_window_ms: 300_000,
            split: Rates {
                msg_rate_in: 10_000.0,
                bytes_rate_in: 50_000_000.0,
                msg_rate_out: 50_000.0,
                bytes_rate_out: 250_000_000.0,
            },
            merge: Rates {
                msg_rate_in: 1_000.0,
                bytes_rate_in: 5_000_000.0,
                msg_rate_out: 5_000.0,
                bytes_rate_out: 25_000_000.0,
            },
        }
    }
}

impl AutoScalePolicy {
    /// Why this policy cannot be used (Pulsar then turns auto-scaling off
    /// for the topic), or `None`.
    pub fn invalid(&self) -> Option<String> {
        if self.min_segments < 1 || self.min_segments > self.max_segments {
            return Some(format!(
                "min_segments {} must be in 1..=max_segments {}",
                self.min_segments, self.max_segments
            ));
        }
        if !(self.split.valid() && self.merge.valid()) {
            return Some("every threshold must be a positive number".into());
        }
        let merge_below_split = self.merge.msg_rate_in < self.split.msg_rate_in
            && self.merge.bytes_rate_in < self.split.bytes_rate_in
            && self.merge.msg_rate_out < self.split.msg_rate_out
            && self.merge.bytes_rate_out < self.split.bytes_rate_out;
        if !merge_below_split {
            // Else a merged segment could be split at once, and back.
            return Some("every merge threshold must be below its split threshold".into());
        }
        None
    }
}

/// A namespace's or a topic's changes to the broker's policy (Pulsar's
/// `AutoScalePolicyOverride`): every field may be absent, and the most
/// specific level that sets a field wins for that field. The JSON names are
/// the broker keys' without their `scalableTopic` prefix; Pulsar's own are
/// not published, so this is a reasoned guess.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AutoScalePolicyOverride {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_segments: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_segments: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_dag_depth: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split_cooldown_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_cooldown_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_window_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split_msg_rate_in_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split_bytes_rate_in_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split_msg_rate_out_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split_bytes_rate_out_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_msg_rate_in_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_bytes_rate_in_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_msg_rate_out_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_bytes_rate_out_threshold: Option<f64>,
}

impl AutoScalePolicyOverride {
    /// `base` with every field this override sets replaced.
    pub fn apply(&self, base: &AutoScalePolicy) -> AutoScalePolicy {
        let mut p = base.clone();
        let secs = |v: Option<u64>, d: u64| v.map_or(d, |s| s.saturating_mul(1000));
        p.enabled = self.enabled.unwrap_or(p.enabled);
        p.min_segments = self.min_segments.unwrap_or(p.min_segments);
        p.max_segments = self.max_segments.unwrap_or(p.max_segments);
        p.max_dag_depth = self.max_dag_depth.unwrap_or(p.max_dag_depth);
        p.split_cooldown_ms = secs(self.split_cooldown_seconds, p.split_cooldown_ms);
        p.merge_cooldown_ms = secs(self.merge_cooldown_seconds, p.merge_cooldown_ms);
        p.merge_window_ms = secs(self.merge_window_seconds, p.merge_window_ms);
        let r = |v: Option<f64>, d: f64| v.unwrap_or(d);
        p.split.msg_rate_in = r(self.split_msg_rate_in_threshold, p.split.msg_rate_in);
        p.split.bytes_rate_in = r(self.split_bytes_rate_in_threshold, p.split.bytes_rate_in);
        p.split.msg_rate_out = r(self.split_msg_rate_out_threshold, p.split.msg_rate_out);
        p.split.bytes_rate_out = r(self.split_bytes_rate_out_threshold, p.split.bytes_rate_out);
        p.merge.msg_rate_in = r(self.merge_msg_rate_in_threshold, p.merge.msg_rate_in);
        p.merge.bytes_rate_in = r(self.merge_bytes_rate_in_threshold, p.merge.bytes_rate_in);
        p.merge.msg_rate_out = r(self.merge_msg_rate_out_threshold, p.merge.msg_rate_out);
        p.merge.bytes_rate_out = r(self.merge_bytes_rate_out_threshold, p.merge.bytes_rate_out);
        p
    }

    /// Whether it sets nothing.
    pub fn is_empty(&self) -> bool {
        *self == AutoScalePolicyOverride::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_replaces_only_the_fields_it_sets() {
        let base = AutoScalePolicy::default();
        let ns: AutoScalePolicyOverride =
            serde_json::from_str(r#"{"maxSegments":8,"splitCooldownSeconds":5}"#).unwrap();
        let topic: AutoScalePolicyOverride =
            serde_json::from_str(r#"{"maxSegments":4,"mergeMsgRateInThreshold":10}"#).unwrap();
        let p = topic.apply(&ns.apply(&base));
        assert_eq!(p.max_segments, 4, "the topic's wins");
        assert_eq!(p.split_cooldown_ms, 5_000, "the namespace's stays");
        assert_eq!(p.merge.msg_rate_in, 10.0);
        assert_eq!(p.min_segments, base.min_segments);
        assert_eq!(p.split, base.split);
        assert!(AutoScalePolicyOverride::default().is_empty());
        assert_eq!(
            serde_json::to_string(&topic).unwrap(),
            r#"{"maxSegments":4,"mergeMsgRateInThreshold":10.0}"#
        );
    }
}
