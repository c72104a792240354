//! Exclusive, consumer-declared hash ranges for STICKY mode
//! (`HashRangeExclusiveStickyKeyConsumerSelector`). Hashes nobody declared have
//! no consumer: their entries wait in the replay queue until someone claims them.

use std::collections::{BTreeMap, HashMap};

use strobe_model::sticky_hash_low16;

use super::MAX_HASH;
use super::consumer_id::ConsumerId;
use super::selector::{ConsumerAssignError, ConsumerSpec, StickyKeyConsumerSelector};
use super::snapshot::{AssignmentSnapshot, HashRange, HashRangeAssignment, ImpactedConsumers};

#[derive(Debug, Clone, Default)]
pub struct ExclusiveRangeSelector {
    /// Range start → (range end, consumer).
    ranges: BTreeMap<u32, (u32, ConsumerId)>,
    members: HashMap<ConsumerId, (String, Vec<HashRange>)>,
    snapshot: AssignmentSnapshot,
}

impl ExclusiveRangeSelector {
    pub fn new() -> ExclusiveRangeSelector {
        ExclusiveRangeSelector::default()
    }

    /// Checks a consumer's own ranges: at least one, each `start <= end <=
    /// 65535`, not overlapping each other. Returns them sorted.
    pub fn validate(ranges: &[HashRange]) -> Result<Vec<HashRange>, ConsumerAssignError> {
        if ranges.is_empty() {
            return Err(ConsumerAssignError::InvalidRanges(
                "STICKY mode needs at least one hash range".into(),
            ));
        }
        let mut sorted = ranges.to_vec();
        sorted.sort();
        for r in &sorted {
            if r.start > r.end || r.end > MAX_HASH {
                return Err(ConsumerAssignError::InvalidRanges(format!(
                    "{r} is not within [0, {MAX_HASH}] with start <= end"
                )));
            }
        }
        for w in sorted.windows(2) {
            if w[0].overlaps(&w[1]) {
                return Err(ConsumerAssignError::InvalidRanges(format!(
                    "{} overlaps {}",
                    w[0], w[1]
                )));
            }
        }
        Ok(sorted)
    }

    /// The declared range that overlaps `r`, with its owner.
    fn conflict(&self, r: &HashRange) -> Option<(HashRange, ConsumerId)> {
        let (&start, &(end, c)) = self.ranges.range(..=r.end).next_back()?;
        (end >= r.start).then_some((HashRange::new(start, end), c))
    }

    fn refresh(&mut self) -> ImpactedConsumers {
        let list = self
            .ranges
            .iter()
            .map(|(&start, &(end, c))| HashRangeAssignment {
                range: HashRange::new(start, end),
                consumer: c,
            })
            .collect();
        let after = AssignmentSnapshot::from_assignments(list);
        let impacted = self.snapshot.diff(&after);
        self.snapshot = after;
        impacted
    }
}

impl StickyKeyConsumerSelector for ExclusiveRangeSelector {
    fn add_consumer(
        &mut self,
        consumer: &ConsumerSpec,
    ) -> Result<ImpactedConsumers, ConsumerAssignError> {
        if self.members.contains_key(&consumer.id) {
            return Err(ConsumerAssignError::DuplicateConsumer(consumer.id));
        }
        let ranges = Self::validate(&consumer.hash_ranges)?;
        for r in &ranges {
            if let Some((conflicting, owner)) = self.conflict(r) {
                return Err(ConsumerAssignError::RangeConflict {
                    range: *r,
                    consumer: owner,
                    name: self.members[&owner].0.clone(),
                    conflicting,
                });
            }
        }
        for r in &ranges {
            self.ranges.insert(r.start, (r.end, consumer.id));
        }
        self.members
            .insert(consumer.id, (consumer.name.clone(), ranges));
        Ok(self.refresh())
    }

    fn remove_consumer(&mut self, consumer: ConsumerId) -> ImpactedConsumers {
        let Some((_, ranges)) = self.members.remove(&consumer) else {
            return ImpactedConsumers::default();
        };
        for r in ranges {
            self.ranges.remove(&r.start);
        }
        self.refresh()
    }

    fn select(&self, hash: u32) -> Option<ConsumerId> {
        let (_, &(end, c)) = self.ranges.range(..=hash).next_back()?;
        (hash <= end).then_some(c)
    }

    fn snapshot(&self) -> &AssignmentSnapshot {
        &self.snapshot
    }

    fn sticky_key_hash(&self, key: &[u8]) -> u32 {
        sticky_hash_low16(key)
    }

    fn consumer_count(&self) -> usize {
        self.members.len()
    }
}
