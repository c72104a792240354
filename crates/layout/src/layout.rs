//! A scalable topic's layout (Pulsar's `ScalableTopicMetadata` and
//! `SegmentLayout`): its epoch, the next segment id, and every segment not
//! yet pruned, active and sealed. [`Layout::validate`] states the invariants
//! every transition keeps and every layout read from the store is checked
//! against.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use strobe_model::scalable::{MAX_HASH, RING_SIZE};

use crate::error::LayoutError;
use crate::segment::{Segment, SegmentState};

/// The layout document, with Pulsar's JSON field names (`segments` is a map
/// keyed by the segment id, written as a string as Jackson writes it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Layout {
    /// Grows by one with every split, merge and prune.
    pub epoch: u64,
    /// Ids are never reused: every id given out is below this.
    pub next_segment_id: u64,
    pub segments: BTreeMap<u64, Segment>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// The topic's changes to its namespace's and the broker's autoscale
    /// policy. Writing it leaves the epoch as it is: the segments did not
    /// change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_scale_policy: Option<crate::policy::AutoScalePolicyOverride>,
}

impl Layout {
    pub fn get(&self, id: u64) -> Result<&Segment, LayoutError> {
        self.segments.get(&id).ok_or(LayoutError::NotFound(id))
    }

    /// The active segments, in ring order: they tile the ring.
    pub fn active(&self) -> Vec<&Segment> {
        let mut v: Vec<&Segment> = self.segments.values().filter(|s| s.is_active()).collect();
        v.sort_by_key(|s| (s.hash_range, s.segment_id));
        v
    }

    /// The active segment holding `hash` (a key's [`segment_hash`]).
    ///
    /// [`segment_hash`]: strobe_model::scalable::segment_hash
    pub fn segment_of(&self, hash: u16) -> Option<&Segment> {
        self.segments
            .values()
            .find(|s| s.is_active() && s.hash_range.contains(hash))
    }

    /// Checks every invariant, naming the first one broken:
    /// - each segment is filed under its own id, and every id is below
    ///   `next_segment_id`;
    /// - the active segments tile the ring `0..=0xFFFF` exactly once;
    /// - an active segment has no children and no seal; a sealed one has
    ///   both seal stamps, no later than the layout's epoch;
    /// - edges are mutual and name segments in the layout (pruning rewrites
    ///   them), and every parent was sealed no later than its child was
    ///   created: a child is never visible before its parents are sealed;
    /// - a segment's bucket boundaries rise strictly within the bucket ring.
    pub fn validate(&self) -> Result<(), LayoutError> {
        let bad = |m: String| Err(LayoutError::Corrupt(m));
        for (id, s) in &self.segments {
            if *id != s.segment_id {
                return bad(format!("segment {} is filed under id {id}", s.segment_id));
            }
            if s.segment_id >= self.next_segment_id {
                return bad(format!(
                    "segment {} is not below the next id {}",
                    s.segment_id, self.next_segment_id
                ));
            }
            if s.created_at_epoch > self.epoch {
                return bad(format!("segment {id} was created after the layout's epoch"));
            }
            match s.state {
                SegmentState::Active => {
                    if !s.child_ids.is_empty()
                        || s.sealed_at_epoch.is_some()
                        || s.sealed_at_ms.is_some()
                    {
                        return bad(format!("active segment {id} has children or a seal"));
                    }
                }
                SegmentState::Sealed => match (s.sealed_at_epoch, s.sealed_at_ms) {
                    (Some(e), Some(_)) if e <= self.epoch && e >= s.created_at_epoch => {}
                    _ => return bad(format!("sealed segment {id} has no valid seal stamps")),
                },
            }
            for c in &s.child_ids {
                match self.segments.get(c) {
                    Some(child) if child.parent_ids.contains(id) => {}
                    _ => {
                        return bad(format!(
                            "segment {id} names child {c}, which does not name it"
                        ));
                    }
                }
            }
            for p in &s.parent_ids {
                let Some(parent) = self.segments.get(p) else {
                    return bad(format!(
                        "segment {id} names parent {p}, which is not in the layout"
                    ));
                };
                if !parent.child_ids.contains(id) {
                    return bad(format!(
                        "segment {id} names parent {p}, which does not name it"
                    ));
                }
                if parent
                    .sealed_at_epoch
                    .is_none_or(|e| e > s.created_at_epoch)
                {
                    return bad(format!(
                        "segment {id} was visible before its parent {p} was sealed"
                    ));
                }
            }
            let mut last = 0;
            for &b in &s.entry_bucket_splits {
                if b <= last || b >= RING_SIZE {
                    return bad(format!(
                        "segment {id} has bucket boundaries out of order or range"
                    ));
                }
                last = b;
            }
            let unique: BTreeSet<&u64> = s.parent_ids.iter().chain(&s.child_ids).collect();
            if unique.len() != s.parent_ids.len() + s.child_ids.len() || unique.contains(id) {
                return bad(format!("segment {id} repeats an edge or names itself"));
            }
        }
        let mut next: u32 = 0;
        for s in self.active() {
            if u32::from(s.hash_range.start) != next {
                return bad(format!(
                    "the active segments do not tile the ring: {:#06x} is where segment {} starts, {next:#06x} was expected",
                    s.hash_range.start, s.segment_id
                ));
            }
            next = u32::from(s.hash_range.end) + 1;
        }
        if next != u32::from(MAX_HASH) + 1 {
            return bad(format!(
                "the active segments do not tile the ring: they end before {next:#06x}"
            ));
        }
        Ok(())
    }
}
