//! Consistent hashing over a ring of `[1, 65535]`
//! (`ConsistentHashingStickyKeyConsumerSelector`, the default for AUTO_SPLIT),
//! with `ConsumerNameIndexTracker` so consumers sharing a name get distinct points.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use strobe_model::sticky_hash_consistent;

use super::MAX_HASH;
use super::consumer_id::ConsumerId;
use super::selector::{ConsumerAssignError, ConsumerSpec, StickyKeyConsumerSelector};
use super::snapshot::{AssignmentSnapshot, HashRange, HashRangeAssignment, ImpactedConsumers};

/// `subscriptionKeySharedConsistentHashingReplicaPoints`.
pub const DEFAULT_REPLICA_POINTS: u32 = 100;

/// The lowest free index among consumers with the same name, so a consumer that
/// leaves and comes back under its name lands on the same ring points.
#[derive(Debug, Clone, Default)]
pub struct NameIndexTracker {
    used: HashMap<String, BTreeSet<u32>>,
    index_of: HashMap<ConsumerId, (String, u32)>,
}

impl NameIndexTracker {
    /// The consumer's index (allocating the lowest free one on first call).
    pub fn acquire(&mut self, id: ConsumerId, name: &str) -> u32 {
        if let Some((_, index)) = self.index_of.get(&id) {
            return *index;
        }
        let used = self.used.entry(name.to_owned()).or_default();
        let index = (0u32..)
            .find(|i| !used.contains(i))
            .expect("fewer than 2^32 consumers");
        used.insert(index);
        self.index_of.insert(id, (name.to_owned(), index));
        index
    }

    /// Frees the consumer's slot; returns the index it had.
    pub fn release(&mut self, id: ConsumerId) -> Option<u32> {
        let (name, index) = self.index_of.remove(&id)?;
        if let Some(used) = self.used.get_mut(&name) {
            used.remove(&index);
            if used.is_empty() {
                self.used.remove(&name);
            }
        }
        Some(index)
    }
}

#[derive(Debug, Clone)]
struct RingPoint {
    selected: ConsumerId,
    /// Later consumers whose point landed here (PR #23441: the first keeps it).
    colliding: Vec<ConsumerId>,
}

/// The consistent-hashing selector.
#[derive(Debug, Clone)]
pub struct ConsistentHashingSelector {
    points_per_consumer: u32,
    ring: BTreeMap<u32, RingPoint>,
    members: HashMap<ConsumerId, (String, u32)>,
    names: NameIndexTracker,
    snapshot: AssignmentSnapshot,
}

impl Default for ConsistentHashingSelector {
    fn default() -> Self {
        ConsistentHashingSelector::new(DEFAULT_REPLICA_POINTS)
    }
}

impl ConsistentHashingSelector {
    pub fn new(points_per_consumer: u32) -> ConsistentHashingSelector {
        ConsistentHashingSelector {
            points_per_consumer: points_per_consumer.max(1),
            ring: BTreeMap::new(),
            members: HashMap::new(),
            names: NameIndexTracker::default(),
            snapshot: AssignmentSnapshot::default(),
        }
    }

    /// The ring position of point `i` of a consumer:
    /// `makeStickyKeyHash(name + "\0" + nameIndex + "\0" + i)`.
    pub fn point_hash(name: &str, name_index: u32, i: u32) -> u32 {
        sticky_hash_consistent(format!("{name}\0{name_index}\0{i}").as_bytes())
    }

    /// The ring's points in order, with the consumer selected at each.
    pub fn ring_points(&self) -> impl Iterator<Item = (u32, ConsumerId)> + '_ {
        self.ring.iter().map(|(k, p)| (*k, p.selected))
    }

    fn refresh(&mut self) -> ImpactedConsumers {
        let after = self.compute_snapshot();
        let impacted = self.snapshot.diff(&after);
        self.snapshot = after;
        impacted
    }

    /// Each point `k` owns `[prev + 1, k]` (the first from 1); the tail after
    /// the last point wraps to the first point's consumer.
    fn compute_snapshot(&self) -> AssignmentSnapshot {
        let mut list = Vec::with_capacity(self.ring.len() + 1);
        let mut prev = 0u32;
        for (&k, p) in &self.ring {
            list.push(HashRangeAssignment {
                range: HashRange::new(prev + 1, k),
                consumer: p.selected,
            });
            prev = k;
        }
        if let Some((_, first)) = self.ring.iter().next()
            && prev < MAX_HASH
        {
            list.push(HashRangeAssignment {
                range: HashRange::new(prev + 1, MAX_HASH),
                consumer: first.selected,
            });
        }
        AssignmentSnapshot::from_assignments(list)
    }
}

impl StickyKeyConsumerSelector for ConsistentHashingSelector {
    fn add_consumer(
        &mut self,
        consumer: &ConsumerSpec,
    ) -> Result<ImpactedConsumers, ConsumerAssignError> {
        if self.members.contains_key(&consumer.id) {
            return Err(ConsumerAssignError::DuplicateConsumer(consumer.id));
        }
        let index = self.names.acquire(consumer.id, &consumer.name);
        for i in 0..self.points_per_consumer {
            let h = Self::point_hash(&consumer.name, index, i);
            match self.ring.get_mut(&h) {
                Some(p) => p.colliding.push(consumer.id),
                None => {
                    self.ring.insert(
                        h,
                        RingPoint {
                            selected: consumer.id,
                            colliding: Vec::new(),
                        },
                    );
                }
            }
        }
        self.members
            .insert(consumer.id, (consumer.name.clone(), index));
        Ok(self.refresh())
    }

    fn remove_consumer(&mut self, consumer: ConsumerId) -> ImpactedConsumers {
        let Some((name, index)) = self.members.remove(&consumer) else {
            return ImpactedConsumers::default();
        };
        self.names.release(consumer);
        for i in 0..self.points_per_consumer {
            let h = Self::point_hash(&name, index, i);
            let Some(p) = self.ring.get_mut(&h) else {
                continue;
            };
            if p.selected == consumer {
                // #23447: the first colliding consumer takes the point over.
                if p.colliding.is_empty() {
                    self.ring.remove(&h);
                } else {
                    p.selected = p.colliding.remove(0);
                }
            } else if let Some(pos) = p.colliding.iter().position(|c| *c == consumer) {
                p.colliding.remove(pos);
            }
        }
        self.refresh()
    }

    fn select(&self, hash: u32) -> Option<ConsumerId> {
        self.ring
            .range(hash..)
            .next()
            .or_else(|| self.ring.iter().next())
            .map(|(_, p)| p.selected)
    }

    fn snapshot(&self) -> &AssignmentSnapshot {
        &self.snapshot
    }

    fn sticky_key_hash(&self, key: &[u8]) -> u32 {
        sticky_hash_consistent(key)
    }

    fn consumer_count(&self) -> usize {
        self.members.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_index_reuses_lowest_free_slot() {
        let mut t = NameIndexTracker::default();
        assert_eq!(t.acquire(ConsumerId(1), "a"), 0);
        assert_eq!(t.acquire(ConsumerId(2), "a"), 1);
        assert_eq!(t.acquire(ConsumerId(3), "b"), 0);
        assert_eq!(t.acquire(ConsumerId(1), "a"), 0);
        assert_eq!(t.release(ConsumerId(1)), Some(0));
        assert_eq!(t.acquire(ConsumerId(4), "a"), 0);
        assert_eq!(t.release(ConsumerId(9)), None);
    }

    #[test]
    fn collisions_keep_the_first_and_promote_on_removal() {
        // 2,000 points each on 65,535 slots: dozens of collisions.
        let mut s = ConsistentHashingSelector::new(2000);
        s.add_consumer(&ConsumerSpec::new(1, "a")).unwrap();
        s.add_consumer(&ConsumerSpec::new(2, "b")).unwrap();
        let a: BTreeSet<u32> = (0..2000)
            .map(|i| ConsistentHashingSelector::point_hash("a", 0, i))
            .collect();
        let b: BTreeSet<u32> = (0..2000)
            .map(|i| ConsistentHashingSelector::point_hash("b", 0, i))
            .collect();
        let shared: Vec<u32> = a.intersection(&b).copied().collect();
        assert!(!shared.is_empty());
        let ring: HashMap<u32, ConsumerId> = s.ring_points().collect();
        for h in &shared {
            assert_eq!(
                ring[h],
                ConsumerId(1),
                "the first consumer keeps a collided point"
            );
        }
        s.remove_consumer(ConsumerId(1));
        let ring: HashMap<u32, ConsumerId> = s.ring_points().collect();
        assert_eq!(ring.len(), b.len());
        assert!(b.iter().all(|h| ring[h] == ConsumerId(2)));
        s.remove_consumer(ConsumerId(2));
        assert_eq!(s.ring_points().count(), 0);
        assert!(s.snapshot().is_empty());
    }
}
