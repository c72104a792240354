//! A resize the controller has begun and not finished. Pulsar's controller
//! keeps its steps (children created, parent terminated, layout replaced) in
//! memory only, so a leader that dies between sealing a parent and writing
//! the layout leaves a terminated segment the layout still calls active;
//! Pulsar's own comment admits the window. Strobe's controller records the
//! operation, with the layout epoch it was computed against, before its
//! first step; every step is idempotent, so whoever leads next replays the
//! same operation from the start and reaches the same layout.

use serde::{Deserialize, Serialize};

use crate::error::LayoutError;
use crate::layout::Layout;

/// What the controller is doing to a layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Resize {
    /// Split one active segment into two children.
    Split { segment: u64 },
    /// Merge two adjacent active segments into one.
    Merge { segments: [u64; 2] },
    /// Remove sealed segments from the DAG (their topics are deleted after).
    Prune { segments: Vec<u64> },
}

/// A [`Resize`] as recorded before its first step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingResize {
    pub resize: Resize,
    /// The epoch of the layout it was computed against: a layout past it
    /// has taken the resize already.
    pub base_epoch: u64,
    /// The time the new segments are stamped with, the same on every replay.
    pub at_ms: u64,
    /// Subscriptions whose cursors the new segments are created with.
    #[serde(default)]
    pub subscriptions: Vec<String>,
    /// A prune's segment topics, named while the layout still has them: they
    /// are deleted after it no longer does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_topics: Vec<String>,
}

/// What a resize does to the segment topics, and the layout after it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResizePlan {
    pub layout: Layout,
    /// Segments whose topics are created (with cursors) first.
    pub created: Vec<u64>,
    /// Segments whose topics are terminated next, in order.
    pub sealed: Vec<u64>,
    /// Segments whose topics are deleted once the layout is written.
    pub removed: Vec<u64>,
}

impl Layout {
    /// The plan of `resize` against this layout.
    pub fn plan(&self, resize: &Resize, now_ms: u64) -> Result<ResizePlan, LayoutError> {
        match resize {
            Resize::Split { segment } => {
                let (layout, children) = self.split(*segment, now_ms)?;
                Ok(ResizePlan {
                    layout,
                    created: children.to_vec(),
                    sealed: vec![*segment],
                    removed: Vec::new(),
                })
            }
            Resize::Merge { segments: [a, b] } => {
                let (layout, child) = self.merge(*a, *b, now_ms)?;
                Ok(ResizePlan {
                    layout,
                    created: vec![child],
                    sealed: vec![*a, *b],
                    removed: Vec::new(),
                })
            }
            Resize::Prune { segments } => {
                if segments.is_empty() {
                    return Err(LayoutError::Invalid("nothing to prune".into()));
                }
                // One epoch for the whole prune, as Pulsar's single CAS.
                let mut layout = self.clone();
                for id in segments {
                    layout = layout.prune(*id)?;
                }
                layout.epoch = self.epoch + 1;
                Ok(ResizePlan {
                    layout,
                    created: Vec::new(),
                    sealed: Vec::new(),
                    removed: segments.clone(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn plans_replay_to_the_same_layout() {
        let l = Layout::create(1, 4, BTreeMap::new(), 1).unwrap();
        let split = Resize::Split { segment: 0 };
        let a = l.plan(&split, 5).unwrap();
        assert_eq!(a, l.plan(&split, 5).unwrap());
        assert_eq!((a.created.clone(), a.sealed.clone()), (vec![1, 2], vec![0]));
        let merge = Resize::Merge { segments: [1, 2] };
        let m = a.layout.plan(&merge, 6).unwrap();
        assert_eq!((m.created.clone(), m.sealed.clone()), (vec![3], vec![1, 2]));
        let prune = Resize::Prune {
            segments: vec![0, 1, 2],
        };
        let p = m.layout.plan(&prune, 7).unwrap();
        assert_eq!(p.layout.epoch, m.layout.epoch + 1);
        assert_eq!(
            p.layout.segments.keys().copied().collect::<Vec<_>>(),
            vec![3]
        );
        assert_eq!(p.removed, vec![0, 1, 2]);
        // A split of what is no longer active is refused, not replayed twice.
        assert_eq!(
            a.layout.plan(&split, 5).unwrap_err(),
            LayoutError::NotActive(0)
        );
        let json = serde_json::to_string(&PendingResize {
            resize: merge,
            base_epoch: 1,
            at_ms: 6,
            subscriptions: vec!["s".into()],
            removed_topics: Vec::new(),
        })
        .unwrap();
        assert_eq!(
            json,
            r#"{"resize":{"kind":"merge","segments":[1,2]},"baseEpoch":1,"atMs":6,"subscriptions":["s"]}"#
        );
    }
}
