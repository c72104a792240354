//! The selector trait (`StickyKeyConsumerSelector`), what a joining consumer
//! tells it, and the assignment error (`ConsumerAssignException`).

use std::fmt;

use super::consumer_id::ConsumerId;
use super::snapshot::{AssignmentSnapshot, HashRange, ImpactedConsumers};

/// What a selector needs to know about a joining consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSpec {
    pub id: ConsumerId,
    /// The consumer name from SUBSCRIBE; consistent hashing places points by it,
    /// entry buckets sort by it.
    pub name: String,
    /// `KeySharedMeta.hashRanges`: the ranges a STICKY consumer claims, or the
    /// segment's full bucket boundary list for entry-bucket dispatch. Ignored by
    /// the AUTO_SPLIT selectors.
    pub hash_ranges: Vec<HashRange>,
}

impl ConsumerSpec {
    pub fn new(id: u64, name: impl Into<String>) -> ConsumerSpec {
        ConsumerSpec {
            id: ConsumerId(id),
            name: name.into(),
            hash_ranges: Vec::new(),
        }
    }
    pub fn with_ranges(mut self, ranges: Vec<HashRange>) -> ConsumerSpec {
        self.hash_ranges = ranges;
        self
    }
}

/// Why a consumer cannot join a Key_Shared subscription. The broker answers
/// SUBSCRIBE with `ConsumerAssignError` for all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerAssignError {
    /// STICKY ranges that are empty, reversed, out of `[0, 65535]` or overlap
    /// each other.
    InvalidRanges(String),
    /// A STICKY range that overlaps another consumer's.
    RangeConflict {
        range: HashRange,
        consumer: ConsumerId,
        name: String,
        conflicting: HashRange,
    },
    /// Entry-bucket boundaries that do not tile `[0, 65535]`.
    InvalidBoundaries(String),
    /// A joiner declaring other bucket boundaries than the subscription's:
    /// a stale layout on the client, not a race.
    BoundaryMismatch {
        expected: Vec<HashRange>,
        declared: Vec<HashRange>,
    },
    /// The auto-split selector has no range left to split.
    NoRangeLeft { consumers: usize },
    /// The id is already a consumer of this subscription.
    DuplicateConsumer(ConsumerId),
}

impl fmt::Display for ConsumerAssignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsumerAssignError::InvalidRanges(why) => write!(f, "Invalid hash ranges: {why}"),
            ConsumerAssignError::RangeConflict {
                range,
                consumer,
                name,
                conflicting,
            } => write!(
                f,
                "Range conflict with consumer {name} (id {consumer}): {range} overlaps {conflicting}"
            ),
            ConsumerAssignError::InvalidBoundaries(why) => {
                write!(f, "Invalid entry bucket boundaries: {why}")
            }
            ConsumerAssignError::BoundaryMismatch { expected, declared } => write!(
                f,
                "Entry bucket boundaries differ from the subscription's: declared {} buckets {:?}, \
                 expected {} buckets {:?} (stale layout?)",
                declared.len(),
                declared.first().zip(declared.last()),
                expected.len(),
                expected.first().zip(expected.last()),
            ),
            ConsumerAssignError::NoRangeLeft { consumers } => write!(
                f,
                "No more range can be assigned to a new consumer, assigned consumers {consumers}"
            ),
            ConsumerAssignError::DuplicateConsumer(id) => {
                write!(f, "Consumer {id} is already connected")
            }
        }
    }
}

impl std::error::Error for ConsumerAssignError {}

/// Maps sticky-key hashes to consumers. Adding or removing a consumer returns
/// the ranges that moved, which the dispatcher turns into draining hashes.
pub trait StickyKeyConsumerSelector: fmt::Debug + Send {
    /// Adds a consumer; on error nothing changed.
    fn add_consumer(
        &mut self,
        consumer: &ConsumerSpec,
    ) -> Result<ImpactedConsumers, ConsumerAssignError>;
    /// Removes a consumer (unknown ids change nothing).
    fn remove_consumer(&mut self, consumer: ConsumerId) -> ImpactedConsumers;
    /// The consumer for a sticky-key hash, `None` when nobody covers it.
    fn select(&self, hash: u32) -> Option<ConsumerId>;
    /// Current ownership as sorted, non-overlapping ranges.
    fn snapshot(&self) -> &AssignmentSnapshot;
    /// The hash of a sticky key as this selector's ranges expect it
    /// (`makeStickyKeyHash`).
    fn sticky_key_hash(&self, key: &[u8]) -> u32;
    /// Number of consumers.
    fn consumer_count(&self) -> usize;
}
