//! The controller of a scalable topic (Pulsar's `ScalableTopicController`):
//! split, merge and prune, run against the layout document in the metadata
//! store and against the segment topics, in PIP-468's order: the new
//! segments' topics and their subscriptions' cursors first, then the old
//! segments terminated, then the layout by compare-and-set. Unlike Pulsar's,
//! the controller records each resize before its first step
//! ([`strobe_layout::PendingResize`]), so a leader that dies at any step
//! leaves work the next leader finishes rather than a terminated segment
//! the layout still calls active.
//!
//! The decisions (what a resize does to the layout) are `strobe-layout`'s;
//! the segment topics are reached through [`SegmentTopics`], which the
//! broker implements (locally, or at the segment's owner over HTTP). Who
//! leads is the broker's business too: the controller takes a fence (the
//! leader key's version check) into every write it makes.
//!
//! Files: `failpoint`, `error`, `segments` (the trait), `controller`.

mod controller;
mod error;
mod failpoint;
mod migrate;
mod segments;

pub use controller::Controller;
pub use error::ScalableError;
pub use failpoint::Failpoint;
pub use migrate::{Migration, migrate};
pub use segments::{SegmentStats, SegmentTopics, SubscriptionOp};
