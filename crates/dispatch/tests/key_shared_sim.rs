//! A model subscription that drives `KeySharedDispatcher` the way a broker's
//! subscription actor would, and checks the Key_Shared contract on every
//! delivery. Shared by the property and regression tests through `#[path]`.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use strobe_dispatch::key_shared::{
    ConsumerAssignError, ConsumerId, ConsumerSpec, Decision, HashRange, KeySharedConfig,
    KeySharedDispatcher, NextRead, ReadType,
};
use strobe_model::Position;

#[derive(Debug, Clone)]
pub struct Entry {
    pub pos: Position,
    pub key: String,
    pub hash: u32,
    pub batch: u32,
}

#[derive(Debug, Clone, Default)]
pub struct SimConsumer {
    pub name: String,
    pub ranges: Vec<HashRange>,
    pub permits: u32,
    /// Delivered, not acked: position → hash.
    pub unacked: BTreeMap<Position, u32>,
    pub received: Vec<Position>,
}

#[derive(Debug)]
pub struct Sim {
    pub d: KeySharedDispatcher,
    pub log: Vec<Entry>,
    pub index: BTreeMap<Position, usize>,
    pub read_pos: usize,
    pub consumers: BTreeMap<ConsumerId, SimConsumer>,
    pub acked: BTreeSet<Position>,
    pub next_id: u64,
    /// Check (a) per-hash order and (b) one holder per hash on each delivery.
    pub check_order: bool,
    pub check_single_owner: bool,
    /// Every delivery, in order.
    pub deliveries: Vec<(ConsumerId, Position)>,
    /// A read started and not yet completed: events may happen meanwhile, as
    /// with the broker's asynchronous reads.
    pub in_flight: Option<(ReadType, Vec<Position>)>,
}

fn permits_of(consumers: &BTreeMap<ConsumerId, SimConsumer>, c: ConsumerId) -> u32 {
    consumers.get(&c).map_or(0, |s| s.permits)
}

impl Sim {
    pub fn new(config: KeySharedConfig) -> Sim {
        let ordered = !config.allow_out_of_order_delivery;
        Sim {
            d: KeySharedDispatcher::new(config).expect("valid config"),
            log: Vec::new(),
            index: BTreeMap::new(),
            read_pos: 0,
            consumers: BTreeMap::new(),
            acked: BTreeSet::new(),
            next_id: 1,
            check_order: ordered,
            check_single_owner: ordered,
            deliveries: Vec::new(),
            in_flight: None,
        }
    }

    /// Appends an entry keyed by `key` (a batch of `batch` messages of it), with
    /// an optional PIP-486 stamp. Returns its position.
    pub fn publish_stamped(&mut self, key: &str, batch: u32, stamp: Option<u32>) -> Position {
        let pos = Position::new(1, self.log.len() as u64);
        let hash = self.d.entry_hash(key.as_bytes(), stamp);
        self.index.insert(pos, self.log.len());
        self.log.push(Entry {
            pos,
            key: key.to_owned(),
            hash,
            batch: batch.max(1),
        });
        pos
    }

    pub fn publish(&mut self, key: &str) -> Position {
        self.publish_stamped(key, 1, None)
    }

    pub fn entry(&self, pos: Position) -> &Entry {
        &self.log[self.index[&pos]]
    }

    pub fn join_with(
        &mut self,
        name: &str,
        ranges: Vec<HashRange>,
    ) -> Result<ConsumerId, ConsumerAssignError> {
        let id = ConsumerId(self.next_id);
        let spec = ConsumerSpec {
            id,
            name: name.to_owned(),
            hash_ranges: ranges.clone(),
        };
        self.d.add_consumer(&spec)?;
        self.next_id += 1;
        self.consumers.insert(
            id,
            SimConsumer {
                name: name.to_owned(),
                ranges,
                ..SimConsumer::default()
            },
        );
        Ok(id)
    }

    pub fn join(&mut self, name: &str) -> ConsumerId {
        self.join_with(name, Vec::new()).expect("join")
    }

    /// The consumer closes or its connection drops: unacked entries go back.
    pub fn crash(&mut self, c: ConsumerId) {
        let out = self.d.remove_consumer(c);
        let gone = self.consumers.remove(&c).expect("known consumer");
        let held: BTreeSet<Position> = gone.unacked.keys().copied().collect();
        let replayed: BTreeSet<Position> = out.replay.iter().copied().collect();
        assert_eq!(held, replayed, "a leaver's unacked entries are replayed");
    }

    /// The application acks what it has, then closes.
    pub fn leave(&mut self, c: ConsumerId) {
        self.ack_all(c);
        self.crash(c);
    }

    pub fn flow(&mut self, c: ConsumerId, n: u32) {
        if let Some(s) = self.consumers.get_mut(&c) {
            s.permits = s.permits.saturating_add(n);
        }
    }

    pub fn ack(&mut self, c: ConsumerId, pos: Position) {
        let s = self.consumers.get_mut(&c).expect("known consumer");
        assert!(s.unacked.remove(&pos).is_some(), "{pos} not unacked at {c}");
        let out = self.d.on_ack(pos);
        assert_eq!(out.holder, Some(c), "the dispatcher agrees who held {pos}");
        assert!(self.acked.insert(pos), "{pos} acked twice");
    }

    pub fn ack_all(&mut self, c: ConsumerId) {
        let ps: Vec<Position> = self.consumers[&c].unacked.keys().copied().collect();
        for p in ps {
            self.ack(c, p);
        }
    }

    /// Negative ack of one unacked entry.
    pub fn nack(&mut self, c: ConsumerId, pos: Position) {
        let s = self.consumers.get_mut(&c).expect("known consumer");
        assert!(s.unacked.remove(&pos).is_some());
        self.d.redeliver(c, Some(&[pos]));
        assert!(self.d.replay().contains(pos));
    }

    pub fn redeliver_all(&mut self, c: ConsumerId) {
        let s = self.consumers.get_mut(&c).expect("known consumer");
        s.unacked.clear();
        self.d.redeliver(c, None);
        assert_eq!(self.d.pending().count(c), 0);
    }

    fn deliver(&mut self, c: ConsumerId, pos: Position) {
        let e = self.entry(pos).clone();
        if self.check_single_owner {
            for (other, s) in &self.consumers {
                if *other != c {
                    assert!(
                        !s.unacked.values().any(|h| *h == e.hash),
                        "(b) hash {} delivered to {c} while unacked at {other}",
                        e.hash
                    );
                }
            }
        }
        if self.check_order {
            for earlier in &self.log[..self.index[&pos]] {
                if earlier.hash == e.hash && !self.acked.contains(&earlier.pos) {
                    assert!(
                        self.consumers
                            .values()
                            .any(|s| s.unacked.contains_key(&earlier.pos)),
                        "(a) {pos} (hash {}) delivered before earlier {}",
                        e.hash,
                        earlier.pos
                    );
                }
            }
        }
        let s = self
            .consumers
            .get_mut(&c)
            .expect("dispatch to a known consumer");
        assert!(s.permits > 0, "dispatch to {c} without permits");
        s.permits = s.permits.saturating_sub(e.batch);
        s.unacked.insert(pos, e.hash);
        s.received.push(pos);
        self.deliveries.push((c, pos));
    }

    fn handle(&mut self, pos: Position, d: Decision) {
        if let Decision::Dispatch(c) = d {
            self.deliver(c, pos);
        }
    }

    /// Asks what to read and fetches it, without handing the entries to the
    /// dispatcher yet. Returns false when there is nothing to read.
    pub fn start_read(&mut self) -> bool {
        if self.in_flight.is_some() {
            return true;
        }
        match self.d.next_read(|c| permits_of(&self.consumers, c)) {
            NextRead::Idle => false,
            NextRead::Replay(ps) => {
                assert!(!ps.is_empty());
                self.in_flight = Some((ReadType::Replay, ps));
                true
            }
            NextRead::Normal { max_entries } => {
                assert!(max_entries > 0);
                if self.read_pos >= self.log.len() {
                    return false;
                }
                let end = (self.read_pos + max_entries).min(self.log.len());
                let ps = self.log[self.read_pos..end].iter().map(|e| e.pos).collect();
                self.read_pos = end;
                self.in_flight = Some((ReadType::Normal, ps));
                true
            }
        }
    }

    /// Hands a fetched read to the dispatcher; returns the entries dispatched.
    pub fn finish_read(&mut self) -> usize {
        let Some((read_type, ps)) = self.in_flight.take() else {
            return 0;
        };
        let mut pass = self.d.begin_read(read_type);
        for p in ps {
            let e = self.entry(p).clone();
            let dec = self.d.on_entry(&mut pass, p, e.hash, e.batch, |c| {
                permits_of(&self.consumers, c)
            });
            self.handle(p, dec);
        }
        pass.dispatched
    }

    /// Runs reads until the dispatcher is idle, as the broker's actor does after
    /// every event. Returns the number of deliveries.
    pub fn pump(&mut self) -> usize {
        let before = self.deliveries.len();
        // A read that was in flight while something happened completes first.
        self.finish_read();
        for _ in 0..100_000 {
            if !self.start_read() {
                break;
            }
            let replay = matches!(self.in_flight, Some((ReadType::Replay, _)));
            let dispatched = self.finish_read();
            assert!(
                !replay || dispatched > 0,
                "a proposed replay read dispatched nothing"
            );
        }
        self.check_liveness();
        self.deliveries.len() - before
    }

    /// (d): once idle, no consumer with permits has a deliverable entry: for
    /// every hash, its first undelivered entry is held for a reason (no
    /// consumer, no permits, draining) or lies past a read the look-ahead
    /// limit stopped.
    pub fn check_liveness(&self) {
        let mut first: BTreeMap<u32, &Entry> = BTreeMap::new();
        for e in &self.log {
            let out = self.acked.contains(&e.pos)
                || self
                    .consumers
                    .values()
                    .any(|s| s.unacked.contains_key(&e.pos));
            if !out {
                first.entry(e.hash).or_insert(e);
            }
        }
        let normal_allowed = self
            .d
            .is_normal_read_allowed(|c| permits_of(&self.consumers, c));
        for (h, e) in first {
            let Some(c) = self.d.select(h) else { continue };
            if permits_of(&self.consumers, c) == 0 {
                continue;
            }
            if self.d.draining_required() && self.d.draining().is_blocked(c, h) {
                continue;
            }
            let unread = self.index[&e.pos] >= self.read_pos;
            assert!(
                unread && !normal_allowed,
                "(d) stuck: {} (hash {h}) deliverable to {c} with {} permits, unread={unread}",
                e.pos,
                permits_of(&self.consumers, c)
            );
        }
    }

    /// (c): with every consumer acking and enough permits, everything published
    /// is acked exactly once. Callers make sure every hash has a consumer.
    pub fn drain_everything(&mut self) {
        for _round in 0..1_000 {
            let ids: Vec<ConsumerId> = self.consumers.keys().copied().collect();
            for c in &ids {
                self.flow(*c, 1_000);
            }
            self.pump();
            for c in &ids {
                self.ack_all(*c);
            }
            self.pump();
            if self.acked.len() == self.log.len() {
                break;
            }
        }
        let missing: Vec<Position> = self
            .log
            .iter()
            .map(|e| e.pos)
            .filter(|p| !self.acked.contains(p))
            .collect();
        assert!(missing.is_empty(), "(c) never acked: {missing:?}");
        assert!(self.d.replay().is_empty());
        assert!(self.d.pending().is_empty());
        assert!(self.d.draining().is_empty());
    }

    pub fn received_by(&self, c: ConsumerId) -> &[Position] {
        self.consumers.get(&c).map_or(&[], |s| &s.received)
    }
}
