//! Named regression tests: the ways Key_Shared hurt Pulsar users
//! (peers-and-client-suites.md §5.1) and the PIP-486 review findings, each
//! replayed against the dispatcher. The model subscription checks per-key order
//! and one holder per key on every delivery and "no stuck subscription" after
//! every dispatch loop.

#[path = "key_shared_sim.rs"]
mod sim;

use sim::Sim;
use strobe_dispatch::key_shared::{
    ConsumerId, Decision, HashRange, HoldReason, KeySharedConfig, KeySharedDispatcher,
    KeySharedMode, NextRead, ReadType, equal_width_boundaries,
};
use strobe_model::Position;

fn auto_split() -> Sim {
    Sim::new(KeySharedConfig::new(KeySharedMode::auto_split()))
}

fn small_look_ahead(mode: KeySharedMode) -> Sim {
    let mut config = KeySharedConfig::new(mode);
    config.look_ahead_per_consumer = 3;
    config.look_ahead_per_subscription = 8;
    config.max_read_batch = 4;
    Sim::new(config)
}

fn buckets(n: u32) -> (Sim, Vec<HashRange>) {
    let b = equal_width_boundaries(n);
    let sim = Sim::new(KeySharedConfig::new(KeySharedMode::EntryBuckets {
        boundaries: b.clone(),
    }));
    (sim, b)
}

/// The first key `k<i>` (from `from`) whose entry hash satisfies `pred`.
fn key_where(sim: &Sim, from: usize, pred: impl Fn(u32) -> bool) -> String {
    (from..)
        .map(|i| format!("k{i}"))
        .find(|k| pred(sim.d.entry_hash(k.as_bytes(), None)))
        .expect("some key")
}

fn key_of(sim: &Sim, from: usize, c: ConsumerId) -> String {
    key_where(sim, from, |h| sim.d.select(h) == Some(c))
}

fn bucket_key(sim: &Sim, bucket: usize) -> String {
    let b = sim.d.entry_buckets().unwrap();
    key_where(sim, 0, |h| b.bucket_of(h) == bucket)
}

fn hash(sim: &Sim, key: &str) -> u32 {
    sim.d.entry_hash(key.as_bytes(), None)
}

/// #8115 "Some partitions get stuck after adding additional consumers":
/// consumers join while the first holds unacked entries of every key; keys it
/// does not hold flow to the joiners at once, the rest once it acks.
#[test]
fn issue_8115_adding_consumers_never_sticks_the_subscription() {
    let mut sim = auto_split();
    let a = sim.join("a");
    sim.flow(a, 1000);
    for i in 0..40 {
        sim.publish(&format!("old-{i}"));
    }
    sim.pump();
    assert_eq!(sim.received_by(a).len(), 40);
    let b = sim.join("b");
    let c = sim.join("c");
    sim.flow(b, 1000);
    sim.flow(c, 1000);
    for i in 0..40 {
        sim.publish(&format!("new-{i}"));
        sim.publish(&format!("old-{i}"));
    }
    sim.pump();
    assert!(
        !sim.received_by(b).is_empty() && !sim.received_by(c).is_empty(),
        "joiners get the keys nobody holds without waiting for acks"
    );
    sim.ack_all(a);
    sim.pump();
    sim.drain_everything();
}

/// #10284 "Occasional consumer stuck when restarting consumers": a rolling
/// restart while permits come from one consumer and keys belong to another.
#[test]
fn issue_10284_rolling_restart_never_sticks() {
    let mut sim = auto_split();
    let mut ids: Vec<ConsumerId> = (0..3).map(|i| sim.join(&format!("c{i}"))).collect();
    for round in 0..6 {
        for i in 0..30 {
            sim.publish(&format!("key-{}", (i * 7 + round) % 25));
        }
        // Only one consumer has permits at a time.
        sim.flow(ids[round % 3], 20);
        sim.pump();
        // Restart one consumer under its name, with unacked entries.
        let victim = ids[(round + 1) % 3];
        sim.crash(victim);
        ids[(round + 1) % 3] = sim.join(&format!("c{}", (round + 1) % 3));
        // The others ack half of what they have.
        for c in ids.clone() {
            let half: Vec<Position> = sim.consumers[&c]
                .unacked
                .keys()
                .step_by(2)
                .copied()
                .collect();
            for p in half {
                sim.ack(c, p);
            }
        }
        sim.pump();
    }
    sim.drain_everything();
}

/// #7792 "Every few days consumers stop receiving messages": a long churn of
/// joins, leaves, crashes, partial acks and redeliveries never stops delivery.
#[test]
fn issue_7792_long_churn_never_stops_delivery() {
    for mode in [
        KeySharedMode::auto_split(),
        KeySharedMode::auto_split_ranges(),
    ] {
        let mut sim = small_look_ahead(mode);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut live: Vec<ConsumerId> = vec![sim.join("c0")];
        for step in 0..3000 {
            let r = next();
            match r % 10 {
                0..=3 => {
                    sim.publish(&format!("key-{}", next() % 30));
                }
                4 if live.len() < 5 => live.push(sim.join(&format!("c{}", step % 4))),
                5 if live.len() > 1 => {
                    let c = live.remove((next() as usize) % live.len());
                    if r % 2 == 0 {
                        sim.crash(c)
                    } else {
                        sim.leave(c)
                    }
                }
                6 => {
                    let c = live[(next() as usize) % live.len()];
                    sim.flow(c, (next() % 5) as u32 + 1);
                }
                7 | 8 => {
                    let c = live[(next() as usize) % live.len()];
                    if let Some(p) = sim.consumers[&c].unacked.keys().next().copied() {
                        sim.ack(c, p);
                    }
                }
                _ => {
                    let c = live[(next() as usize) % live.len()];
                    if let Some(p) = sim.consumers[&c].unacked.keys().last().copied() {
                        sim.nack(c, p);
                    }
                }
            }
            sim.pump();
        }
        sim.drain_everything();
    }
}

/// #7455 "consumers with different subscriptions get messages out of order":
/// each subscription has its own dispatcher, and each keeps key order.
#[test]
fn issue_7455_each_subscription_keeps_its_own_order() {
    let mut subs = [
        auto_split(),
        small_look_ahead(KeySharedMode::auto_split_ranges()),
    ];
    for (n, sim) in subs.iter_mut().enumerate() {
        for i in 0..=n {
            let c = sim.join(&format!("s{n}-{i}"));
            sim.flow(c, 7);
        }
    }
    for i in 0..200 {
        for sim in subs.iter_mut() {
            sim.publish(&format!("key-{}", i % 13));
            if i % 10 == 0 {
                let c = *sim.consumers.keys().next().unwrap();
                sim.ack_all(c);
                sim.flow(c, 5);
            }
            sim.pump();
        }
    }
    for sim in subs.iter_mut() {
        sim.drain_everything();
    }
}

/// #8703 "Delayed messages + Key_Shared causes blocked consumers": a delayed
/// entry is held outside the dispatcher; it blocks nothing while it waits and
/// is dispatched when it becomes due.
#[test]
fn issue_8703_delayed_messages_do_not_block_consumers() {
    let mut d =
        KeySharedDispatcher::new(KeySharedConfig::new(KeySharedMode::auto_split())).unwrap();
    let a = ConsumerId(1);
    d.add_consumer(&strobe_dispatch::key_shared::ConsumerSpec::new(1, "a"))
        .unwrap();
    let permits = |_| 10;
    let h = d.entry_hash(b"k", None);
    let other = d.entry_hash(b"other", None);
    let (p0, p1, p2) = (
        Position::new(1, 0),
        Position::new(1, 1),
        Position::new(1, 2),
    );
    // The broker's delayed-delivery tracker keeps p0; p1 and p2 are read.
    let mut pass = d.begin_read(ReadType::Normal);
    assert_eq!(
        d.on_entry(&mut pass, p1, h, 1, permits),
        Decision::Dispatch(a)
    );
    assert_eq!(
        d.on_entry(&mut pass, p2, other, 1, permits),
        Decision::Dispatch(a)
    );
    // p0 becomes due.
    d.add_to_replay(p0, h, 1);
    assert_eq!(d.next_read(permits), NextRead::Replay(vec![p0]));
    let mut pass = d.begin_read(ReadType::Replay);
    assert_eq!(
        d.on_entry(&mut pass, p0, h, 1, permits),
        Decision::Dispatch(a)
    );
    assert!(matches!(d.next_read(permits), NextRead::Normal { .. }));
}

/// #10750 "Consumer cannot consume messages when key_shared mode" with
/// consistent hashing and the same consumer name: both get keys.
#[test]
fn issue_10750_same_name_consumers_both_receive() {
    let mut sim = auto_split();
    let a = sim.join("same");
    let b = sim.join("same");
    sim.flow(a, 1000);
    sim.flow(b, 1000);
    for i in 0..200 {
        sim.publish(&format!("key-{i}"));
    }
    sim.pump();
    assert!(
        sim.received_by(a).len() > 20,
        "{}",
        sim.received_by(a).len()
    );
    assert!(
        sim.received_by(b).len() > 20,
        "{}",
        sim.received_by(b).len()
    );
    sim.drain_everything();
}

/// #14902 / #15705 "New KeyShared consumers will not get any messages until a
/// consumer that did get messages disconnects or acks": only the hashes the old
/// consumer still holds wait; the stats say which and for whom.
#[test]
fn issue_15705_new_consumers_get_messages_before_old_ones_ack() {
    let mut sim = auto_split();
    let a = sim.join("a");
    sim.flow(a, 1000);
    for i in 0..30 {
        sim.publish(&format!("key-{i}"));
    }
    sim.pump();
    let b = sim.join("b");
    sim.flow(b, 1000);
    let held_key = (0..30)
        .map(|i| format!("key-{i}"))
        .find(|k| sim.d.select(hash(&sim, k)) == Some(b))
        .expect("b took some held key");
    let fresh = key_where(&sim, 1000, |h| {
        sim.d.select(h) == Some(b) && !sim.consumers[&a].unacked.values().any(|x| *x == h)
    });
    sim.publish(&fresh);
    let waiting = sim.publish(&held_key);
    sim.pump();
    assert_eq!(sim.received_by(b).len(), 1, "the fresh key arrives at once");
    assert!(sim.d.replay().contains(waiting), "the held key waits");
    let stats = sim.d.consumer_stats(b);
    assert!(stats.waiting_for.contains(&(hash(&sim, &held_key), a)));
    assert!(sim.d.consumer_stats(a).draining.draining_hashes_count > 0);
    assert!(
        sim.d
            .consumer_stats(a)
            .draining
            .draining_hashes
            .iter()
            .any(|s| s.blocked_attempts > 0)
    );
    sim.ack_all(a);
    sim.pump();
    assert!(sim.received_by(b).contains(&waiting));
    sim.drain_everything();
}

/// #15898 "sticky hash range generates backlog with messages not falling
/// within consumer hash range": entries nobody covers wait without stopping
/// the covered ones, however many there are.
#[test]
fn issue_15898_uncovered_sticky_ranges_do_not_block_covered_ones() {
    let mut sim = small_look_ahead(KeySharedMode::Sticky);
    let a = sim.join_with("a", vec![HashRange::new(0, 32767)]).unwrap();
    sim.flow(a, 1000);
    let uncovered = key_where(&sim, 0, |h| h > 32767);
    let covered = key_where(&sim, 0, |h| h <= 32767);
    for _ in 0..50 {
        sim.publish(&uncovered);
    }
    for _ in 0..5 {
        sim.publish(&covered);
    }
    sim.pump();
    assert_eq!(sim.received_by(a).len(), 5);
    let b = sim
        .join_with("b", vec![HashRange::new(32768, 65535)])
        .unwrap();
    sim.flow(b, 1000);
    sim.pump();
    assert_eq!(sim.received_by(b).len(), 50);
    sim.drain_everything();
}

/// #21199 / PIP-319 "a single failed message could lead to all the consumers
/// blockage": one entry never acked blocks only its own key.
#[test]
fn issue_21199_one_unacked_message_blocks_only_its_key() {
    let mut sim = auto_split();
    let a = sim.join("a");
    sim.flow(a, 1);
    let stuck = sim.publish("poison");
    sim.pump();
    assert_eq!(sim.received_by(a), &[stuck]);
    let b = sim.join("b");
    let c = sim.join("c");
    for x in [a, b, c] {
        sim.flow(x, 1000);
    }
    let poison_hash = hash(&sim, "poison");
    let later = sim.publish("poison");
    for i in 0..100 {
        sim.publish(&format!("key-{i}"));
    }
    sim.pump();
    let delivered = sim.deliveries.len();
    let owner = sim.d.select(poison_hash).unwrap();
    if owner != a {
        assert_eq!(delivered, 1 + 100, "everything but the poison key flows");
        assert!(sim.d.replay().contains(later));
    }
    // The holder crashes: its entry comes back first, then the rest, in order.
    sim.crash(a);
    sim.pump();
    let got = sim.received_by(sim.d.select(poison_hash).unwrap()).to_vec();
    let i = got.iter().position(|p| *p == stuck).unwrap();
    assert!(got[i..].contains(&later));
    sim.drain_everything();
}

/// #20179 "recentlyJoinedConsumers ... race between read position and
/// addConsumer": a consumer joins while a read is in flight.
#[test]
fn issue_20179_consumer_joining_during_a_read_keeps_order() {
    let mut sim = auto_split();
    let a = sim.join("a");
    sim.flow(a, 1000);
    for round in 0..20 {
        for i in 0..10 {
            sim.publish(&format!("key-{}", (i + round) % 12));
        }
        assert!(sim.start_read());
        let b = sim.join(&format!("b{round}"));
        sim.flow(b, 1000);
        sim.pump();
        if round % 3 == 0 {
            sim.ack_all(a);
        }
        sim.leave(b);
        sim.pump();
    }
    sim.drain_everything();
}

/// #23271 "recently joined consumer logic is unnecessary for STICKY": a STICKY
/// joiner gets its keys at once, nothing drains.
#[test]
fn issue_23271_sticky_needs_no_draining() {
    let mut sim = Sim::new(KeySharedConfig::new(KeySharedMode::Sticky));
    let a = sim.join_with("a", vec![HashRange::new(0, 32767)]).unwrap();
    sim.flow(a, 100);
    let ka = key_where(&sim, 0, |h| h <= 32767);
    let kb = key_where(&sim, 0, |h| h > 32767);
    sim.publish(&ka);
    sim.publish(&kb);
    sim.pump();
    let b = sim
        .join_with("b", vec![HashRange::new(32768, 65535)])
        .unwrap();
    sim.flow(b, 100);
    sim.pump();
    assert!(!sim.d.draining_required());
    assert!(sim.d.draining().is_empty());
    assert_eq!(sim.received_by(b).len(), 1);
    sim.drain_everything();
}

/// #23999 "When all messages have only one key, the Key_Shared subscription may
/// get stuck": one key, a small look-ahead, consumers coming and going.
#[test]
fn issue_23999_single_key_never_sticks() {
    let mut sim = small_look_ahead(KeySharedMode::auto_split());
    let mut live = vec![sim.join("c0")];
    for round in 0..30 {
        for _ in 0..5 {
            sim.publish("the-only-key");
        }
        let c = live[round % live.len()];
        sim.flow(c, 3);
        sim.pump();
        match round % 4 {
            0 => live.push(sim.join(&format!("c{round}"))),
            1 if live.len() > 1 => {
                let gone = live.remove(0);
                sim.crash(gone);
            }
            _ => {
                for c in live.clone() {
                    if let Some(p) = sim.consumers[&c].unacked.keys().next().copied() {
                        sim.ack(c, p);
                    }
                }
            }
        }
        sim.pump();
    }
    sim.drain_everything();
}

/// #14014 "KeyShared stickyHashRange subscription: prevent stuck subscription in
/// case of consumer restart": the restarted consumer gets its unacked entries
/// back first, then the rest.
#[test]
fn issue_14014_sticky_consumer_restart() {
    let mut sim = Sim::new(KeySharedConfig::new(KeySharedMode::Sticky));
    let a = sim.join_with("a", vec![HashRange::FULL]).unwrap();
    sim.flow(a, 3);
    let ps: Vec<Position> = (0..6).map(|_| sim.publish("k")).collect();
    sim.pump();
    assert_eq!(sim.received_by(a), &ps[..3]);
    sim.crash(a);
    let a2 = sim.join_with("a", vec![HashRange::FULL]).unwrap();
    sim.flow(a2, 100);
    sim.pump();
    assert_eq!(sim.received_by(a2), &ps[..]);
    sim.drain_everything();
}

/// PIP-486 review: join → leave → rejoin cycles while the old owner holds
/// unacked entries must never leave a drain that cannot complete.
#[test]
fn pip486_join_leave_rejoin_cycles_never_wedge() {
    let (mut sim, b) = buckets(4);
    let a = sim.join_with("a", b.clone()).unwrap();
    // Two entries per bucket, then "a" runs out of permits: buckets that come
    // back to it are not re-dispatched, so nothing resets their draining state
    // by the back door between cycles.
    sim.flow(a, 8);
    let keys: Vec<String> = (0..4).map(|i| bucket_key(&sim, i)).collect();
    for _ in 0..2 {
        for k in &keys {
            sim.publish(k);
        }
    }
    sim.pump();
    assert_eq!(sim.consumers[&a].permits, 0);
    for cycle in 0..25 {
        let j = sim.join_with("b", b.clone()).unwrap();
        sim.flow(j, 1000);
        // Buckets 2 and 3 drain from a; entries of them wait.
        for k in &keys {
            sim.publish(k);
        }
        sim.pump();
        if cycle == 4 {
            // Once, "a" acks one entry of a moving bucket mid-cycle.
            if let Some(p) = sim.consumers[&a]
                .unacked
                .iter()
                .find(|(_, h)| **h >= 32768)
                .map(|(p, _)| *p)
            {
                sim.ack(a, p);
                sim.pump();
            }
        }
        if cycle % 2 == 0 {
            sim.crash(j);
        } else {
            sim.leave(j);
        }
        sim.pump();
    }
    let j = sim.join_with("b", b.clone()).unwrap();
    sim.flow(j, 1000);
    for k in &keys {
        sim.publish(k);
    }
    sim.pump();
    let bucket3 = hash(&sim, &keys[3]);
    assert!(
        !sim.received_by(j)
            .iter()
            .any(|p| sim.entry(*p).hash == bucket3),
        "a still holds entries of bucket 3"
    );
    // Once a acks, the moving buckets flow to the joiner: the drain completes.
    sim.ack_all(a);
    sim.pump();
    assert!(sim.d.draining().is_empty(), "{:?}", sim.d.draining());
    assert!(
        sim.received_by(j)
            .iter()
            .any(|p| sim.entry(*p).hash == bucket3)
    );
    sim.drain_everything();
}

/// PIP-486: an application that acks slowly delays only the buckets it is
/// giving up, each only until its own entries of that bucket are acked.
#[test]
fn pip486_slow_acker_delays_only_the_buckets_it_gives_up() {
    let (mut sim, b) = buckets(8);
    let slow = sim.join_with("a", b.clone()).unwrap();
    sim.flow(slow, 10_000);
    let keys: Vec<String> = (0..8).map(|i| bucket_key(&sim, i)).collect();
    for k in &keys {
        sim.publish(k);
    }
    sim.pump();
    let fast = sim.join_with("b", b.clone()).unwrap();
    sim.flow(fast, 10_000);
    // "a" keeps buckets 0..4; "b" takes 4..8, which "a" still holds entries of.
    assert_eq!(
        sim.d.consumer_stats(fast).assigned_buckets,
        vec![4, 5, 6, 7]
    );
    let before = sim.received_by(slow).len();
    for _ in 0..5 {
        for k in &keys {
            sim.publish(k);
        }
    }
    sim.pump();
    assert_eq!(
        sim.received_by(slow).len(),
        before + 20,
        "kept buckets keep flowing"
    );
    assert!(
        sim.received_by(fast).is_empty(),
        "moving buckets wait for the slow acker"
    );
    // Acking its bucket-5 entry releases bucket 5 alone.
    let bucket5 = hash(&sim, &keys[5]);
    let p = sim.consumers[&slow]
        .unacked
        .iter()
        .find(|(_, h)| **h == bucket5)
        .map(|(p, _)| *p)
        .unwrap();
    sim.ack(slow, p);
    sim.pump();
    assert_eq!(sim.received_by(fast).len(), 5);
    assert!(
        sim.received_by(fast)
            .iter()
            .all(|p| sim.entry(*p).hash == bucket5)
    );
    let stats = sim.d.consumer_stats(slow);
    assert_eq!(stats.draining.draining_hashes_count, 3);
    sim.drain_everything();
}

/// PIP-486: a second consumer joining mid-traffic keeps per-key order, with
/// nothing lost or duplicated.
#[test]
fn pip486_second_consumer_mid_traffic_no_loss_no_duplicates() {
    let (mut sim, b) = buckets(4);
    let a = sim.join_with("a", b.clone()).unwrap();
    sim.flow(a, 50);
    let mut second = None;
    for i in 0..400 {
        sim.publish_stamped(&format!("key-{}", i % 37), 1 + (i % 3) as u32, None);
        if i == 150 {
            let c = sim.join_with("b", b.clone()).unwrap();
            second = Some(c);
        }
        if i % 7 == 0 {
            let ids: Vec<ConsumerId> = sim.consumers.keys().copied().collect();
            for c in ids {
                sim.ack_all(c);
                sim.flow(c, 30);
            }
        }
        sim.pump();
    }
    sim.drain_everything();
    assert!(!sim.received_by(second.unwrap()).is_empty());
    let mut seen = std::collections::BTreeSet::new();
    for (_, p) in &sim.deliveries {
        assert!(seen.insert(*p), "{p} delivered twice");
    }
    assert_eq!(seen.len(), 400);
}

/// A replay read in flight while an earlier entry of its key comes back:
/// the later one waits (Pulsar drops the whole read instead).
#[test]
fn replay_read_in_flight_keeps_key_order() {
    let mut sim = auto_split();
    let a = sim.join("a");
    sim.flow(a, 100);
    let p0 = sim.publish("k");
    let p1 = sim.publish("k");
    sim.pump();
    sim.nack(a, p1);
    assert!(sim.start_read());
    assert_eq!(sim.in_flight.as_ref().unwrap().1, vec![p1]);
    sim.nack(a, p0);
    sim.pump();
    let got = sim.received_by(a);
    assert_eq!(&got[got.len() - 2..], &[p0, p1]);
    sim.drain_everything();
}

/// A negative ack during draining keeps a single holder: the new owner waits
/// until the old one has nothing of the key left.
#[test]
fn negative_ack_while_draining_keeps_one_holder() {
    let mut sim = auto_split();
    let a = sim.join("a");
    sim.flow(a, 100);
    let b_probe = sim.join("b");
    let k = key_of(&sim, 0, b_probe);
    sim.crash(b_probe);
    let p0 = sim.publish(&k);
    let p1 = sim.publish(&k);
    sim.pump();
    let b = sim.join("b");
    sim.flow(b, 100);
    assert_eq!(sim.d.select(hash(&sim, &k)), Some(b));
    sim.nack(a, p0);
    sim.pump();
    assert!(sim.received_by(b).is_empty(), "a still holds p1");
    let mut d2 = sim.d.clone();
    let mut pass = d2.begin_read(ReadType::Replay);
    assert_eq!(
        d2.on_entry(&mut pass, p0, hash(&sim, &k), 1, |_| 5),
        Decision::Hold(HoldReason::Draining { owner: a })
    );
    sim.ack(a, p1);
    sim.pump();
    assert_eq!(sim.received_by(b), &[p0]);
    sim.drain_everything();
}
