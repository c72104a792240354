//! PIP-486 entry buckets as the later revision spreads them
//! (`EntryBucketConsumerSelector`): the segment's bucket boundaries are fixed
//! when the subscription is created; every hash is normalised to its bucket's
//! canonical hash, `max(bucket_start, 1)`, so pending acks, replay and draining
//! all work per bucket; and the broker spreads whole buckets over the consumers
//! sorted by `(name, id)`: consumer `j` of `k` owns buckets
//! `[j*N/k, (j+1)*N/k)`. A join or leave therefore moves few whole buckets, and
//! more consumers than buckets simply leaves some consumers idle.

use strobe_model::sticky_hash_low16;

use super::MAX_HASH;
use super::consumer_id::ConsumerId;
use super::selector::{ConsumerAssignError, ConsumerSpec, StickyKeyConsumerSelector};
use super::snapshot::{AssignmentSnapshot, HashRange, HashRangeAssignment, ImpactedConsumers};

/// Checks a bucket boundary list: non-empty, ascending, contiguous, tiling
/// `[0, 65535]`, with bucket 0 at least `[0, 1]` (so hash 0 and the reserved
/// value's replacement 1 share bucket 0 and every canonical hash is in its bucket).
pub fn validate_boundaries(buckets: &[HashRange]) -> Result<(), ConsumerAssignError> {
    let bad = |why: String| Err(ConsumerAssignError::InvalidBoundaries(why));
    let (Some(first), Some(last)) = (buckets.first(), buckets.last()) else {
        return bad("no buckets".into());
    };
    if first.start != 0 {
        return bad(format!("the first bucket {first} does not start at 0"));
    }
    if first.end < 1 {
        return bad(format!("bucket 0 {first} must cover at least [0, 1]"));
    }
    if last.end != MAX_HASH {
        return bad(format!("the last bucket {last} does not end at {MAX_HASH}"));
    }
    for b in buckets {
        if b.start > b.end {
            return bad(format!("bucket {b} is empty"));
        }
    }
    for w in buckets.windows(2) {
        if w[1].start != w[0].end + 1 {
            return bad(format!("{} and {} are not contiguous", w[0], w[1]));
        }
    }
    Ok(())
}

/// `EntryBucketSplits.equalWidth(n)` as ranges: split points `i * 65536 / n`.
/// `n` is clamped to `[1, 32768]` so bucket 0 keeps at least `[0, 1]`.
pub fn equal_width_boundaries(n: u32) -> Vec<HashRange> {
    let n = u64::from(n.clamp(1, 32_768));
    let mut out = Vec::with_capacity(n as usize);
    let mut start = 0u32;
    for i in 1..=n {
        let end = if i == n {
            MAX_HASH
        } else {
            ((i * 65_536) / n) as u32 - 1
        };
        out.push(HashRange::new(start, end));
        start = end + 1;
    }
    out
}

#[derive(Debug, Clone)]
pub struct EntryBucketSelector {
    buckets: Vec<HashRange>,
    /// Consumers sorted by `(name, id)`.
    consumers: Vec<(String, ConsumerId)>,
    /// Owner of each bucket.
    owners: Vec<Option<ConsumerId>>,
    snapshot: AssignmentSnapshot,
}

impl EntryBucketSelector {
    /// A selector for a fixed, validated boundary list.
    pub fn new(buckets: Vec<HashRange>) -> Result<EntryBucketSelector, ConsumerAssignError> {
        validate_boundaries(&buckets)?;
        let n = buckets.len();
        Ok(EntryBucketSelector {
            buckets,
            consumers: Vec::new(),
            owners: vec![None; n],
            snapshot: AssignmentSnapshot::default(),
        })
    }

    pub fn buckets(&self) -> &[HashRange] {
        &self.buckets
    }

    /// Index of the bucket holding a 16-bit hash (binary search over starts).
    pub fn bucket_of(&self, hash: u32) -> usize {
        let hash = hash.min(MAX_HASH);
        self.buckets.partition_point(|b| b.start <= hash) - 1
    }

    /// The canonical hash of bucket `i`: `max(start_i, 1)`.
    pub fn canonical_hash_of_bucket(&self, i: usize) -> u32 {
        self.buckets[i].start.max(1)
    }

    /// Normalises any 16-bit hash (an entry's `entry_hash_min`, or a key's low-16
    /// hash) to its bucket's canonical hash.
    pub fn canonical_hash(&self, hash: u32) -> u32 {
        self.canonical_hash_of_bucket(self.bucket_of(hash))
    }

    /// The buckets (indexes) a consumer owns.
    pub fn buckets_of(&self, consumer: ConsumerId) -> Vec<usize> {
        (0..self.owners.len())
            .filter(|&i| self.owners[i] == Some(consumer))
            .collect()
    }

    fn respread(&mut self) -> ImpactedConsumers {
        let n = self.buckets.len() as u64;
        let k = self.consumers.len() as u64;
        self.owners.iter_mut().for_each(|o| *o = None);
        for (j, (_, id)) in self.consumers.iter().enumerate() {
            let j = j as u64;
            let (from, to) = ((j * n / k) as usize, ((j + 1) * n / k) as usize);
            for o in &mut self.owners[from..to] {
                *o = Some(*id);
            }
        }
        let list = self
            .buckets
            .iter()
            .zip(&self.owners)
            .filter_map(|(range, o)| {
                o.map(|consumer| HashRangeAssignment {
                    range: *range,
                    consumer,
                })
            })
            .collect();
        let after = AssignmentSnapshot::from_assignments(list);
        let impacted = self.snapshot.diff(&after);
        self.snapshot = after;
        impacted
    }
}

impl StickyKeyConsumerSelector for EntryBucketSelector {
    fn add_consumer(
        &mut self,
        consumer: &ConsumerSpec,
    ) -> Result<ImpactedConsumers, ConsumerAssignError> {
        if self.consumers.iter().any(|(_, id)| *id == consumer.id) {
            return Err(ConsumerAssignError::DuplicateConsumer(consumer.id));
        }
        if consumer.hash_ranges != self.buckets {
            validate_boundaries(&consumer.hash_ranges)?;
            return Err(ConsumerAssignError::BoundaryMismatch {
                expected: self.buckets.clone(),
                declared: consumer.hash_ranges.clone(),
            });
        }
        let key = (consumer.name.clone(), consumer.id);
        let at = self.consumers.partition_point(|c| *c < key);
        self.consumers.insert(at, key);
        Ok(self.respread())
    }

    fn remove_consumer(&mut self, consumer: ConsumerId) -> ImpactedConsumers {
        let Some(at) = self.consumers.iter().position(|(_, id)| *id == consumer) else {
            return ImpactedConsumers::default();
        };
        self.consumers.remove(at);
        self.respread()
    }

    /// `hash` is expected canonical already; any hash in a bucket selects the
    /// bucket's owner.
    fn select(&self, hash: u32) -> Option<ConsumerId> {
        self.owners[self.bucket_of(hash)]
    }

    fn snapshot(&self) -> &AssignmentSnapshot {
        &self.snapshot
    }

    /// The canonical hash of the key's bucket (by its low-16 hash).
    fn sticky_key_hash(&self, key: &[u8]) -> u32 {
        self.canonical_hash(sticky_hash_low16(key))
    }

    fn consumer_count(&self) -> usize {
        self.consumers.len()
    }
}
