//! Scalable-topic layouts (Pulsar 5's PIP-460 and PIP-468): a `topic://` is a
//! DAG of `segment://` topics, each owning a range of the 16-bit key-hash
//! ring. This crate decides the layout document and nothing else: its
//! invariants ([`Layout::validate`]) and its transitions (create, split,
//! merge, prune), each a pure function from one layout to the next, as
//! Pulsar's `ScalableTopicController` computes them before its
//! compare-and-set. No store, no clock (times are passed in), no tokio: the
//! controller that runs the transitions against the metadata store and the
//! segment topics lives elsewhere (see `docs/architecture.md`).
//!
//! Files, bottom-up: `segment` (one segment and its JSON), `buckets`
//! (PIP-486's bucket counts), `layout` (the document and its invariants),
//! `transitions`, `assignment` (which consumers of a subscription read which
//! segments), `policy` (PIP-483's policy and its overrides), `autoscale` (which resize to make), `operation` (a resize as the controller records it
//! before its first step, and its plan).

mod assignment;
mod autoscale;
mod buckets;
mod error;
mod layout;
mod operation;
mod policy;
mod segment;
mod transitions;

pub use assignment::{AssignedSegment, ReaderKind, assign, bucket_ranges};
pub use autoscale::{Clock, Decision, decide};
pub use buckets::{MAX_BUCKETS, equal_width};
pub use error::LayoutError;
pub use layout::Layout;
pub use operation::{PendingResize, Resize, ResizePlan};
pub use policy::{AutoScalePolicy, AutoScalePolicyOverride, Rates, SegmentLoad};
pub use segment::{Segment, SegmentState};
pub use transitions::MAX_INITIAL_SEGMENTS;
