//! The Key_Shared dispatcher's decisions
//! (`PersistentStickyKeyDispatcherMultipleConsumers`, and for PIP-486
//! `PersistentEntryBucketDispatcherMultipleConsumers`): one struct owning the
//! selector, the draining tracker, the pending acks and the replay queue. The
//! broker's subscription actor drives it:
//!
//! - on SUBSCRIBE: [`KeySharedDispatcher::add_consumer`]; on close or a dropped
//!   connection: [`KeySharedDispatcher::remove_consumer`] (its unacked entries
//!   go back to the replay queue);
//! - to dispatch: [`KeySharedDispatcher::next_read`] says whether to read replay
//!   positions or new entries; every entry read goes through
//!   [`KeySharedDispatcher::on_entry`], which answers dispatch to X, or hold (the
//!   entry waits in the replay queue);
//! - on ACK: [`KeySharedDispatcher::on_ack`]; on a negative ack or
//!   REDELIVER_UNACKNOWLEDGED_MESSAGES: [`KeySharedDispatcher::redeliver`].
//!
//! After any of these, the actor runs `next_read` again until it says
//! [`NextRead::Idle`]: every rule that holds an entry back is re-checked there,
//! so no notification has to be caught to make progress (the unblocked hashes
//! returned are for stats and logs).
//!
//! Departures from Pulsar, each closing a way a subscription could get stuck or
//! reorder:
//! - a replay read keeps key order by itself (an entry waits while an earlier
//!   entry of its hash waits), instead of dropping a whole read when a consumer
//!   left during it (`minReplayedPosition`);
//! - draining counts are exact (see [`super::DrainingHashesTracker`]);
//! - the look-ahead limit counts only waiting entries whose hash has a consumer,
//!   so entries no STICKY consumer covers (#15898) cannot stop the others;
//! - the replay positions proposed by `next_read` are exactly those `on_entry`
//!   will dispatch, so a replay read never comes back empty-handed and the
//!   look-ahead trigger (`skipNextReplayToTriggerLookAhead`) is not needed.

use std::collections::{BTreeMap, HashMap, HashSet};

use strobe_model::{Position, sticky_hash_low16};

use super::auto_split::AutoSplitSelector;
use super::consistent::{ConsistentHashingSelector, DEFAULT_REPLICA_POINTS};
use super::consumer_id::ConsumerId;
use super::draining::{ConsumerDrainingStats, DrainingHashesTracker};
use super::entry_bucket::EntryBucketSelector;
use super::exclusive::ExclusiveRangeSelector;
use super::pending::{PendingAck, PendingAcks};
use super::replay::{ReplayEntry, ReplayQueue};
use super::selector::{ConsumerAssignError, ConsumerSpec, StickyKeyConsumerSelector};
use super::snapshot::{AssignmentSnapshot, HashRange, ImpactedConsumers};

/// How hashes are assigned to consumers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySharedMode {
    /// `KeySharedMode.AUTO_SPLIT`: the broker spreads hashes, by consistent
    /// hashing (the default) or by splitting ranges.
    AutoSplit {
        consistent_hashing: bool,
        /// Ring points per consumer for consistent hashing (100).
        replica_points: u32,
    },
    /// `KeySharedMode.STICKY`: consumers declare exclusive ranges.
    Sticky,
    /// PIP-486 entry-bucket dispatch with the segment's bucket boundaries.
    EntryBuckets { boundaries: Vec<HashRange> },
}

impl KeySharedMode {
    /// AUTO_SPLIT with Pulsar's defaults (consistent hashing, 100 points).
    pub fn auto_split() -> KeySharedMode {
        KeySharedMode::AutoSplit {
            consistent_hashing: true,
            replica_points: DEFAULT_REPLICA_POINTS,
        }
    }
    /// AUTO_SPLIT over split hash ranges.
    pub fn auto_split_ranges() -> KeySharedMode {
        KeySharedMode::AutoSplit {
            consistent_hashing: false,
            replica_points: DEFAULT_REPLICA_POINTS,
        }
    }
}

/// A Key_Shared subscription's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySharedConfig {
    pub mode: KeySharedMode,
    /// `KeySharedMeta.allowOutOfOrderDelivery`: no draining and no key-order
    /// holds. Ignored for entry buckets, which always drain.
    pub allow_out_of_order_delivery: bool,
    /// `keySharedLookAheadMsgInReplayThresholdPerConsumer` (4000).
    pub look_ahead_per_consumer: usize,
    /// `keySharedLookAheadMsgInReplayThresholdPerSubscription` (40000); 0 means
    /// no subscription-wide cap.
    pub look_ahead_per_subscription: usize,
    /// Most entries proposed for one read (`dispatcherMaxReadBatchSize`, 100).
    pub max_read_batch: usize,
}

impl KeySharedConfig {
    pub fn new(mode: KeySharedMode) -> KeySharedConfig {
        KeySharedConfig {
            mode,
            allow_out_of_order_delivery: false,
            look_ahead_per_consumer: 4000,
            look_ahead_per_subscription: 40_000,
            max_read_batch: 100,
        }
    }
}

/// Where a read came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadType {
    /// New entries past the cursor's read position.
    Normal,
    /// Positions from the replay queue.
    Replay,
}

/// What the actor should read next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextRead {
    /// Read these replay positions (ascending); each will be dispatched.
    Replay(Vec<Position>),
    /// Read up to this many new entries, if there are any.
    Normal { max_entries: usize },
    /// Nothing can move until permits, acks, publishes or membership change.
    Idle,
}

/// Why an entry was not dispatched. It waits in the replay queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldReason {
    /// No consumer covers the hash (STICKY gap, or no consumers).
    NoConsumer,
    /// The consumer for the hash has no permits.
    NoPermits(ConsumerId),
    /// An earlier entry of the same hash was held in this read.
    BlockedEarlierInRead,
    /// An earlier entry of the same hash waits in the replay queue.
    BehindReplay,
    /// The hash is draining: `owner` still holds unacked entries of it.
    Draining { owner: ConsumerId },
}

/// The verdict for one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send it to this consumer now (and charge its permits); it is recorded as
    /// pending there.
    Dispatch(ConsumerId),
    /// Keep it in the replay queue (a normal-read entry is added to it).
    Hold(HoldReason),
    /// Nothing to do: a replay position that no longer waits (acked meanwhile),
    /// or a normal-read position already delivered or waiting.
    Skip,
}

/// The state of one read, for the entries of that read in order
/// (`alreadyBlockedHashes`).
#[derive(Debug, Clone)]
pub struct ReadPass {
    read_type: ReadType,
    blocked: HashSet<u32>,
    /// Entries dispatched in this read.
    pub dispatched: usize,
    /// Entries held in this read.
    pub held: usize,
}

impl ReadPass {
    pub fn read_type(&self) -> ReadType {
        self.read_type
    }
}

/// Result of a join.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinOutcome {
    pub impacted: ImpactedConsumers,
    /// Hashes that started draining (someone else still holds entries of them).
    pub draining_started: Vec<u32>,
}

/// Result of a leave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaveOutcome {
    pub impacted: ImpactedConsumers,
    /// The consumer's unacked positions, now in the replay queue.
    pub replay: Vec<Position>,
    /// Hashes that started draining at the remaining consumers (entry buckets
    /// re-spread, so a leave can move buckets between the others).
    pub draining_started: Vec<u32>,
}

/// Result of an ack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckOutcome {
    /// Who held the position (it may be acked through another consumer).
    pub holder: Option<ConsumerId>,
    /// Hashes that stopped draining and had blocked someone
    /// (`stickyKeyHashUnblocked`): a dispatch pass may now move them.
    pub unblocked: Vec<u32>,
}

/// What an operator needs to see why a key waits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySharedConsumerStats {
    /// Hash ranges the consumer owns.
    pub assigned_ranges: Vec<HashRange>,
    /// For entry buckets, the bucket indexes it owns.
    pub assigned_buckets: Vec<usize>,
    /// Entries delivered and not acked.
    pub unacked_entries: usize,
    /// The hashes it still holds after they moved away.
    pub draining: ConsumerDrainingStats,
    /// Hashes it owns but waits for: (hash, the consumer still draining it).
    pub waiting_for: Vec<(u32, ConsumerId)>,
}

#[derive(Debug, Clone)]
enum Selector {
    Consistent(ConsistentHashingSelector),
    AutoSplit(AutoSplitSelector),
    Exclusive(ExclusiveRangeSelector),
    Buckets(EntryBucketSelector),
}

impl Selector {
    fn get(&self) -> &dyn StickyKeyConsumerSelector {
        match self {
            Selector::Consistent(s) => s,
            Selector::AutoSplit(s) => s,
            Selector::Exclusive(s) => s,
            Selector::Buckets(s) => s,
        }
    }
    fn get_mut(&mut self) -> &mut dyn StickyKeyConsumerSelector {
        match self {
            Selector::Consistent(s) => s,
            Selector::AutoSplit(s) => s,
            Selector::Exclusive(s) => s,
            Selector::Buckets(s) => s,
        }
    }
}

/// A Key_Shared subscription's dispatch state. See the module docs.
#[derive(Debug, Clone)]
pub struct KeySharedDispatcher {
    config: KeySharedConfig,
    selector: Selector,
    draining_required: bool,
    ordered: bool,
    draining: DrainingHashesTracker,
    pending: PendingAcks,
    replay: ReplayQueue,
    consumers: BTreeMap<ConsumerId, String>,
}

impl KeySharedDispatcher {
    /// A dispatcher for `config`; fails only for invalid bucket boundaries.
    pub fn new(config: KeySharedConfig) -> Result<KeySharedDispatcher, ConsumerAssignError> {
        let (selector, draining_required, ordered) = match &config.mode {
            KeySharedMode::AutoSplit {
                consistent_hashing,
                replica_points,
            } => {
                let s = if *consistent_hashing {
                    Selector::Consistent(ConsistentHashingSelector::new(*replica_points))
                } else {
                    Selector::AutoSplit(AutoSplitSelector::new())
                };
                let in_order = !config.allow_out_of_order_delivery;
                (s, in_order, in_order)
            }
            KeySharedMode::Sticky => (
                Selector::Exclusive(ExclusiveRangeSelector::new()),
                false,
                !config.allow_out_of_order_delivery,
            ),
            KeySharedMode::EntryBuckets { boundaries } => (
                Selector::Buckets(EntryBucketSelector::new(boundaries.clone())?),
                true,
                true,
            ),
        };
        Ok(KeySharedDispatcher {
            config,
            selector,
            draining_required,
            ordered,
            draining: DrainingHashesTracker::new(),
            pending: PendingAcks::new(),
            replay: ReplayQueue::new(),
            consumers: BTreeMap::new(),
        })
    }

    pub fn config(&self) -> &KeySharedConfig {
        &self.config
    }

    /// Whether hashes drain on reassignment (AUTO_SPLIT in order, entry buckets).
    pub fn draining_required(&self) -> bool {
        self.draining_required
    }

    /// The selector in use.
    pub fn selector(&self) -> &dyn StickyKeyConsumerSelector {
        self.selector.get()
    }

    /// The entry-bucket selector, in entry-bucket mode.
    pub fn entry_buckets(&self) -> Option<&EntryBucketSelector> {
        match &self.selector {
            Selector::Buckets(b) => Some(b),
            _ => None,
        }
    }

    /// The sticky hash of an entry, computed once when it is read and passed to
    /// [`Self::on_entry`]. `key` is [`super::resolve_sticky_key`]'s result;
    /// `entry_hash_min` is `MessageMetadata.entry_hash_min`, used only by
    /// entry-bucket dispatch (a plain Key_Shared subscription routes stamped
    /// entries by key).
    pub fn entry_hash(&self, key: &[u8], entry_hash_min: Option<u32>) -> u32 {
        match &self.selector {
            Selector::Buckets(b) => {
                b.canonical_hash(entry_hash_min.unwrap_or_else(|| sticky_hash_low16(key)))
            }
            s => s.get().sticky_key_hash(key),
        }
    }

    /// The consumer a hash goes to now.
    pub fn select(&self, hash: u32) -> Option<ConsumerId> {
        self.selector.get().select(hash)
    }

    pub fn snapshot(&self) -> &AssignmentSnapshot {
        self.selector.get().snapshot()
    }

    pub fn consumers(&self) -> impl Iterator<Item = ConsumerId> + '_ {
        self.consumers.keys().copied()
    }

    pub fn draining(&self) -> &DrainingHashesTracker {
        &self.draining
    }

    pub fn pending(&self) -> &PendingAcks {
        &self.pending
    }

    pub fn replay(&self) -> &ReplayQueue {
        &self.replay
    }

    /// Adds a consumer. Hashes it takes over from consumers that still hold
    /// unacked entries of them start draining.
    pub fn add_consumer(
        &mut self,
        spec: &ConsumerSpec,
    ) -> Result<JoinOutcome, ConsumerAssignError> {
        if self.consumers.contains_key(&spec.id) {
            return Err(ConsumerAssignError::DuplicateConsumer(spec.id));
        }
        let impacted = self.selector.get_mut().add_consumer(spec)?;
        self.consumers.insert(spec.id, spec.name.clone());
        let draining_started = self.register_draining(&impacted);
        Ok(JoinOutcome {
            impacted,
            draining_started,
        })
    }

    /// Removes a consumer (closed, or its connection dropped): its unacked
    /// entries go back to the replay queue, hashes it was draining clear without
    /// notifications, and its ranges move to the others.
    pub fn remove_consumer(&mut self, id: ConsumerId) -> LeaveOutcome {
        if self.consumers.remove(&id).is_none() {
            return LeaveOutcome::default();
        }
        let held = self.pending.remove_consumer(id);
        self.draining.remove_owner(id);
        let replay = held.iter().map(|(p, _)| *p).collect();
        for (p, a) in held {
            self.replay.add(
                p,
                ReplayEntry {
                    hash: a.hash,
                    batch_size: a.batch_size,
                },
            );
        }
        let impacted = self.selector.get_mut().remove_consumer(id);
        let draining_started = self.register_draining(&impacted);
        LeaveOutcome {
            impacted,
            replay,
            draining_started,
        }
    }

    /// `registerDrainingHashes`: every consumer that lost ranges drains the
    /// hashes it still holds there; a hash that came back to its drainer stops
    /// draining.
    fn register_draining(&mut self, impacted: &ImpactedConsumers) -> Vec<u32> {
        if !self.draining_required {
            return Vec::new();
        }
        let mut started = Vec::new();
        for &c in impacted.removed.keys() {
            let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
            for (_, a) in self.pending.of(c) {
                if impacted.removed_from(c, a.hash) {
                    *counts.entry(a.hash).or_default() += 1;
                }
            }
            for (h, n) in counts {
                self.draining.start_draining(c, h, n);
                started.push(h);
            }
        }
        for &c in impacted.added.keys() {
            let returned: Vec<u32> = self
                .draining
                .iter()
                .filter(|(h, e)| e.owner == c && impacted.added_to(c, *h))
                .map(|(h, _)| h)
                .collect();
            for h in returned {
                self.draining.hash_returned(c, h);
            }
        }
        started.sort_unstable();
        started
    }

    /// `getMaxEntriesReadLimit`'s limit: `min(per consumer × consumers, per
    /// subscription)`.
    pub fn look_ahead_limit(&self) -> usize {
        let per_consumers = self
            .config
            .look_ahead_per_consumer
            .saturating_mul(self.consumers.len());
        match self.config.look_ahead_per_subscription {
            0 => per_consumers,
            cap => per_consumers.min(cap),
        }
        .max(1)
    }

    /// Waiting entries that count against the look-ahead limit: those whose
    /// hash some consumer covers.
    pub fn look_ahead_used(&self) -> usize {
        let sel = self.selector.get();
        self.replay
            .hashes()
            .filter(|(h, _)| sel.select(*h).is_some())
            .map(|(_, n)| n)
            .sum()
    }

    /// `isNormalReadAllowed`: some consumer has permits and the replay queue
    /// is below the look-ahead limit.
    pub fn is_normal_read_allowed(&self, permits: impl Fn(ConsumerId) -> u32) -> bool {
        self.consumers.keys().any(|c| permits(*c) > 0)
            && self.look_ahead_used() < self.look_ahead_limit()
    }

    /// What to read next (`getMessagesToReplayNow` with `ReplayPositionFilter`,
    /// then the normal read). `permits` gives each consumer's available permits.
    pub fn next_read(&self, permits: impl Fn(ConsumerId) -> u32) -> NextRead {
        let mut budget: HashMap<ConsumerId, i64> = self
            .consumers
            .keys()
            .map(|c| (*c, i64::from(permits(*c))))
            .collect();
        let mut with_budget = budget.values().filter(|b| **b > 0).count();
        if with_budget == 0 {
            return NextRead::Idle;
        }
        let sel = self.selector.get();
        let mut blocked: HashSet<u32> = HashSet::new();
        let mut out = Vec::new();
        for (pos, e) in self.replay.iter() {
            if with_budget == 0 || out.len() >= self.config.max_read_batch.max(1) {
                break;
            }
            if blocked.contains(&e.hash) {
                continue;
            }
            let target = sel.select(e.hash).filter(|c| {
                budget.get(c).is_some_and(|b| *b > 0)
                    && !(self.draining_required && self.draining.is_blocked(*c, e.hash))
            });
            let Some(c) = target else {
                blocked.insert(e.hash);
                continue;
            };
            let b = budget.get_mut(&c).expect("known consumer");
            *b -= i64::from(e.batch_size.max(1));
            if *b <= 0 {
                with_budget -= 1;
            }
            out.push(pos);
        }
        if !out.is_empty() {
            return NextRead::Replay(out);
        }
        let limit = self.look_ahead_limit();
        let used = self.look_ahead_used();
        if used < limit {
            NextRead::Normal {
                max_entries: (limit - used).min(self.config.max_read_batch).max(1),
            }
        } else {
            NextRead::Idle
        }
    }

    /// Starts a read of the given type; pass it to every [`Self::on_entry`]
    /// call for the entries of that read, in read order.
    pub fn begin_read(&self, read_type: ReadType) -> ReadPass {
        ReadPass {
            read_type,
            blocked: HashSet::new(),
            dispatched: 0,
            held: 0,
        }
    }

    /// The per-entry decision (`filterAndGroupEntriesForDispatching` and
    /// `canDispatchEntry`). `hash` is [`Self::entry_hash`] of the entry,
    /// `batch_size` its message count, `permits` the consumers' available
    /// permits *including* what earlier entries of this read used (the actor
    /// charges a consumer after each `Dispatch`).
    pub fn on_entry(
        &mut self,
        pass: &mut ReadPass,
        position: Position,
        hash: u32,
        batch_size: u32,
        permits: impl Fn(ConsumerId) -> u32,
    ) -> Decision {
        let mut hash = match &self.selector {
            Selector::Buckets(b) => b.canonical_hash(hash),
            _ => hash,
        };
        match pass.read_type {
            ReadType::Replay => match self.replay.get(position) {
                // The queue's hash is the one the entry was first read with.
                Some(e) => hash = e.hash,
                None => return Decision::Skip,
            },
            ReadType::Normal => {
                if self.replay.contains(position) || self.pending.holder(position).is_some() {
                    return Decision::Skip;
                }
            }
        }
        match self.check(pass, position, hash, &permits) {
            Ok(c) => {
                if pass.read_type == ReadType::Replay {
                    self.replay.remove(position);
                }
                self.pending
                    .add(c, position, PendingAck { hash, batch_size });
                pass.dispatched += 1;
                Decision::Dispatch(c)
            }
            Err(reason) => {
                pass.blocked.insert(hash);
                pass.held += 1;
                if pass.read_type == ReadType::Normal {
                    self.replay.add(position, ReplayEntry { hash, batch_size });
                }
                Decision::Hold(reason)
            }
        }
    }

    fn check(
        &mut self,
        pass: &ReadPass,
        position: Position,
        hash: u32,
        permits: &impl Fn(ConsumerId) -> u32,
    ) -> Result<ConsumerId, HoldReason> {
        if pass.blocked.contains(&hash) {
            return Err(HoldReason::BlockedEarlierInRead);
        }
        let c = self.select(hash).ok_or(HoldReason::NoConsumer)?;
        if permits(c) == 0 {
            return Err(HoldReason::NoPermits(c));
        }
        if self.ordered {
            let behind = match pass.read_type {
                ReadType::Normal => self.replay.contains_hash(hash),
                ReadType::Replay => self.replay.earliest_of_hash(hash) < Some(position),
            };
            if behind {
                return Err(HoldReason::BehindReplay);
            }
        }
        if self.draining_required && self.draining.should_block(c, hash) {
            let owner = self.draining.get(hash).map_or(c, |e| e.owner);
            return Err(HoldReason::Draining { owner });
        }
        Ok(c)
    }

    /// An entry was acked (by any consumer of the subscription). Also drops it
    /// from the replay queue if it waited there.
    pub fn on_ack(&mut self, position: Position) -> AckOutcome {
        self.replay.remove(position);
        let Some((holder, a)) = self.pending.remove(position) else {
            return AckOutcome::default();
        };
        let unblocked = if self.draining_required {
            self.draining
                .reduce_ref_count(holder, a.hash, false)
                .into_iter()
                .collect()
        } else {
            Vec::new()
        };
        AckOutcome {
            holder: Some(holder),
            unblocked,
        }
    }

    /// A negative ack or REDELIVER_UNACKNOWLEDGED_MESSAGES: the consumer's listed
    /// unacked positions (all of them when `positions` is `None`) go back to the
    /// replay queue. Positions the consumer does not hold are ignored. Returns
    /// hashes that stopped draining.
    pub fn redeliver(&mut self, consumer: ConsumerId, positions: Option<&[Position]>) -> Vec<u32> {
        let list: Vec<Position> = match positions {
            Some(ps) => ps
                .iter()
                .copied()
                .filter(|p| self.pending.holder(*p) == Some(consumer))
                .collect(),
            None => self.pending.of(consumer).map(|(p, _)| p).collect(),
        };
        let mut unblocked = Vec::new();
        for p in list {
            let Some((holder, a)) = self.pending.remove(p) else {
                continue;
            };
            if self.draining_required
                && let Some(h) = self.draining.reduce_ref_count(holder, a.hash, false)
            {
                unblocked.push(h);
            }
            self.replay.add(
                p,
                ReplayEntry {
                    hash: a.hash,
                    batch_size: a.batch_size,
                },
            );
        }
        unblocked
    }

    /// Puts an entry in the replay queue from outside (a delayed message that
    /// became due, for instance). Key order is then kept as for any waiting entry.
    pub fn add_to_replay(&mut self, position: Position, hash: u32, batch_size: u32) {
        if self.pending.holder(position).is_none() {
            let hash = match &self.selector {
                Selector::Buckets(b) => b.canonical_hash(hash),
                _ => hash,
            };
            self.replay.add(position, ReplayEntry { hash, batch_size });
        }
    }

    /// Stats for one consumer.
    pub fn consumer_stats(&self, consumer: ConsumerId) -> KeySharedConsumerStats {
        let sel = self.selector.get();
        KeySharedConsumerStats {
            assigned_ranges: sel.snapshot().ranges_of(consumer),
            assigned_buckets: self
                .entry_buckets()
                .map(|b| b.buckets_of(consumer))
                .unwrap_or_default(),
            unacked_entries: self.pending.count(consumer),
            draining: self.draining.stats(consumer),
            waiting_for: self
                .draining
                .iter()
                .filter(|(h, _)| sel.select(*h) == Some(consumer))
                .map(|(h, e)| (h, e.owner))
                .collect(),
        }
    }
}
