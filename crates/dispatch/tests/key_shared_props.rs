//! Property tests: random interleavings of publish (keys, batches, stamps),
//! consumer join, leave, crash, flow, ack, negative ack and redelivery, for
//! AUTO_SPLIT (consistent hashing and split ranges), STICKY and entry buckets.
//! The model subscription in `key_shared_sim.rs` checks on every delivery that
//! (a) a hash (so a key, or a bucket) is delivered in publish order except for
//! explicit redelivery, (b) a hash is unacked at one consumer at most; after
//! every step that (d) nothing deliverable is left while its consumer has
//! permits; and at the end that (c) everything is acked exactly once.

#[path = "key_shared_sim.rs"]
mod sim;

use proptest::prelude::*;
use sim::Sim;
use strobe_dispatch::key_shared::{
    ConsumerAssignError, ConsumerId, HashRange, KeySharedConfig, KeySharedMode,
    equal_width_boundaries,
};
use strobe_model::murmur3_32;

#[derive(Debug, Clone)]
enum Op {
    Publish {
        key: u8,
        batch: u8,
        stamped: bool,
    },
    Join {
        name: u8,
        slices: u8,
    },
    Leave(u8),
    Crash(u8),
    Flow(u8, u8),
    Ack(u8, u8),
    AckAll(u8),
    Nack(u8, u8),
    RedeliverAll(u8),
    /// Start a read; the next operation happens while it is in flight.
    StartRead,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..16, 1u8..4, any::<bool>())
            .prop_map(|(key, batch, stamped)| Op::Publish { key, batch, stamped }),
        2 => (0u8..4, 1u8..16).prop_map(|(name, slices)| Op::Join { name, slices }),
        1 => any::<u8>().prop_map(Op::Leave),
        1 => any::<u8>().prop_map(Op::Crash),
        3 => (any::<u8>(), 1u8..6).prop_map(|(c, n)| Op::Flow(c, n)),
        3 => (any::<u8>(), any::<u8>()).prop_map(|(c, i)| Op::Ack(c, i)),
        1 => any::<u8>().prop_map(Op::AckAll),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(c, i)| Op::Nack(c, i)),
        1 => any::<u8>().prop_map(Op::RedeliverAll),
        3 => Just(Op::StartRead),
    ]
}

/// STICKY consumers claim some of four quarter-ring slices.
fn slices(mask: u8) -> Vec<HashRange> {
    (0..4u32)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| HashRange::new(i * 16_384, i * 16_384 + 16_383))
        .collect()
}

fn nth_consumer(sim: &Sim, i: u8) -> Option<ConsumerId> {
    let ids: Vec<ConsumerId> = sim.consumers.keys().copied().collect();
    (!ids.is_empty()).then(|| ids[i as usize % ids.len()])
}

fn nth_unacked(sim: &Sim, c: ConsumerId, i: u8) -> Option<strobe_model::Position> {
    let u: Vec<_> = sim.consumers[&c].unacked.keys().copied().collect();
    (!u.is_empty()).then(|| u[i as usize % u.len()])
}

/// Each operation with whether the broker runs its dispatch loop right after
/// it; skipping lets publishes pile up and reads be in flight during events.
fn run(mode: KeySharedMode, small_look_ahead: bool, ops: Vec<(Op, bool)>) {
    let sticky = mode == KeySharedMode::Sticky;
    let buckets = match &mode {
        KeySharedMode::EntryBuckets { boundaries } => Some(boundaries.clone()),
        _ => None,
    };
    let mut config = KeySharedConfig::new(mode);
    if small_look_ahead {
        config.look_ahead_per_consumer = 3;
        config.look_ahead_per_subscription = 8;
        config.max_read_batch = 4;
    }
    let mut sim = Sim::new(config);
    for (op, pump) in ops {
        match op {
            Op::StartRead => {
                sim.start_read();
                continue;
            }
            Op::Publish {
                key,
                batch,
                stamped,
            } => {
                let key = format!("key-{key}");
                // Producers batch per key (per bucket for entry buckets), and a
                // PIP-486 producer stamps the batch's low-16 hash.
                let stamp =
                    (buckets.is_some() && stamped).then(|| murmur3_32(key.as_bytes(), 0) & 0xffff);
                sim.publish_stamped(&key, u32::from(batch), stamp);
            }
            Op::Join { name, slices: mask } => {
                let name = format!("c{name}");
                if sticky {
                    let want = slices(mask);
                    let taken: Vec<HashRange> = sim
                        .consumers
                        .values()
                        .flat_map(|s| s.ranges.clone())
                        .collect();
                    let conflict = want.iter().any(|r| taken.iter().any(|t| t.overlaps(r)));
                    match sim.join_with(&name, want) {
                        Ok(_) => assert!(!conflict),
                        Err(ConsumerAssignError::RangeConflict { .. }) => assert!(conflict),
                        Err(e) => panic!("unexpected {e}"),
                    }
                } else if let Some(b) = &buckets {
                    sim.join_with(&name, b.clone()).expect("same boundaries");
                } else {
                    sim.join(&name);
                }
            }
            Op::Leave(i) => {
                if let Some(c) = nth_consumer(&sim, i) {
                    sim.leave(c);
                }
            }
            Op::Crash(i) => {
                if let Some(c) = nth_consumer(&sim, i) {
                    sim.crash(c);
                }
            }
            Op::Flow(i, n) => {
                if let Some(c) = nth_consumer(&sim, i) {
                    sim.flow(c, u32::from(n));
                }
            }
            Op::Ack(i, j) => {
                if let Some(c) = nth_consumer(&sim, i)
                    && let Some(p) = nth_unacked(&sim, c, j)
                {
                    sim.ack(c, p);
                }
            }
            Op::AckAll(i) => {
                if let Some(c) = nth_consumer(&sim, i) {
                    sim.ack_all(c);
                }
            }
            Op::Nack(i, j) => {
                if let Some(c) = nth_consumer(&sim, i)
                    && let Some(p) = nth_unacked(&sim, c, j)
                {
                    sim.nack(c, p);
                }
            }
            Op::RedeliverAll(i) => {
                if let Some(c) = nth_consumer(&sim, i) {
                    sim.redeliver_all(c);
                }
            }
        }
        if pump {
            sim.pump();
        }
    }
    sim.pump();
    // Make sure every hash has a consumer, then drain.
    if sticky {
        let taken: Vec<HashRange> = sim
            .consumers
            .values()
            .flat_map(|s| s.ranges.clone())
            .collect();
        let free: Vec<HashRange> = slices(0b1111)
            .into_iter()
            .filter(|r| !taken.iter().any(|t| t.overlaps(r)))
            .collect();
        if !free.is_empty() {
            sim.join_with("closer", free).expect("free slices");
        }
    } else if sim.consumers.is_empty() {
        match &buckets {
            Some(b) => sim.join_with("closer", b.clone()).expect("join"),
            None => sim.join("closer"),
        };
    }
    sim.drain_everything();
}

fn ops() -> impl Strategy<Value = Vec<(Op, bool)>> {
    prop::collection::vec((op(), prop::bool::weighted(0.6)), 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn auto_split_consistent_hashing(small in any::<bool>(), ops in ops()) {
        run(KeySharedMode::auto_split(), small, ops);
    }

    #[test]
    fn auto_split_hash_ranges(small in any::<bool>(), ops in ops()) {
        run(KeySharedMode::auto_split_ranges(), small, ops);
    }

    #[test]
    fn sticky_ranges(small in any::<bool>(), ops in ops()) {
        run(KeySharedMode::Sticky, small, ops);
    }

    #[test]
    fn entry_buckets(n in prop::sample::select(vec![1u32, 2, 3, 4, 7, 16]), small in any::<bool>(), ops in ops()) {
        run(KeySharedMode::EntryBuckets { boundaries: equal_width_boundaries(n) }, small, ops);
    }
}
