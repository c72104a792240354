//! Auto-split hash ranges (`HashRangeAutoSplitStickyKeyConsumerSelector`), the
//! AUTO_SPLIT selector when `subscriptionKeySharedUseConsistentHashing=false`.
//!
//! A map from each range's upper bound to its consumer; the first consumer owns
//! everything (bound 65536), a joiner takes the lower half of the biggest range,
//! and a leaver's range goes to its upper neighbour (or, for the topmost range,
//! to its lower neighbour).

use std::collections::{BTreeMap, HashMap};

use strobe_model::sticky_hash_low16;

use super::MAX_HASH;
use super::consumer_id::ConsumerId;
use super::selector::{ConsumerAssignError, ConsumerSpec, StickyKeyConsumerSelector};
use super::snapshot::{AssignmentSnapshot, HashRange, HashRangeAssignment, ImpactedConsumers};

/// `DEFAULT_RANGE_SIZE`: the ring is `[0, 65535]`, bounds go up to 65536.
const RANGE_SIZE: u32 = MAX_HASH + 1;

#[derive(Debug, Clone, Default)]
pub struct AutoSplitSelector {
    /// Upper bound (inclusive, up to 65536) → consumer; a key `k` owns
    /// `(previous key, k]`, the first one from 0.
    range_map: BTreeMap<u32, ConsumerId>,
    consumer_range: HashMap<ConsumerId, u32>,
    snapshot: AssignmentSnapshot,
}

impl AutoSplitSelector {
    pub fn new() -> AutoSplitSelector {
        AutoSplitSelector::default()
    }

    fn biggest_range(&self) -> u32 {
        let mut best = (0u32, RANGE_SIZE);
        let mut lower = 0u32;
        for &k in self.range_map.keys() {
            if k - lower > best.0 {
                best = (k - lower, k);
            }
            lower = k;
        }
        best.1
    }

    fn refresh(&mut self) -> ImpactedConsumers {
        let mut list = Vec::with_capacity(self.range_map.len());
        let mut start = 0u32;
        for (&end, &c) in &self.range_map {
            list.push(HashRangeAssignment {
                range: HashRange::new(start, end.min(MAX_HASH)),
                consumer: c,
            });
            start = end + 1;
        }
        let after = AssignmentSnapshot::from_assignments(list);
        let impacted = self.snapshot.diff(&after);
        self.snapshot = after;
        impacted
    }
}

impl StickyKeyConsumerSelector for AutoSplitSelector {
    fn add_consumer(
        &mut self,
        consumer: &ConsumerSpec,
    ) -> Result<ImpactedConsumers, ConsumerAssignError> {
        if self.consumer_range.contains_key(&consumer.id) {
            return Err(ConsumerAssignError::DuplicateConsumer(consumer.id));
        }
        if self.range_map.is_empty() {
            self.range_map.insert(RANGE_SIZE, consumer.id);
            self.consumer_range.insert(consumer.id, RANGE_SIZE);
        } else {
            let range = self.biggest_range();
            let lower = self
                .range_map
                .range(..range)
                .next_back()
                .map_or(0, |(k, _)| *k);
            if range - lower <= 1 {
                return Err(ConsumerAssignError::NoRangeLeft {
                    consumers: self.range_map.len(),
                });
            }
            let split = range - ((range - lower) >> 1);
            self.range_map.insert(split, consumer.id);
            self.consumer_range.insert(consumer.id, split);
        }
        Ok(self.refresh())
    }

    fn remove_consumer(&mut self, consumer: ConsumerId) -> ImpactedConsumers {
        let Some(key) = self.consumer_range.remove(&consumer) else {
            return ImpactedConsumers::default();
        };
        if key == RANGE_SIZE && self.range_map.len() > 1 {
            // The topmost range has no upper neighbour: the lower one grows.
            let (&lower_key, &lower) = self
                .range_map
                .range(..key)
                .next_back()
                .expect("more than one range");
            self.range_map.remove(&lower_key);
            self.range_map.insert(key, lower);
            self.consumer_range.insert(lower, key);
        } else {
            self.range_map.remove(&key);
        }
        self.refresh()
    }

    fn select(&self, hash: u32) -> Option<ConsumerId> {
        self.range_map.range(hash..).next().map(|(_, c)| *c)
    }

    fn snapshot(&self) -> &AssignmentSnapshot {
        &self.snapshot
    }

    fn sticky_key_hash(&self, key: &[u8]) -> u32 {
        sticky_hash_low16(key)
    }

    fn consumer_count(&self) -> usize {
        self.consumer_range.len()
    }
}
