//! Property tests: random sequences of appends, reads, acks, skips, seeks,
//! rollovers, trims, cursor flushes and crash-reopens give the same
//! observable state as a simple in-memory model, on every backend.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use common::{File, Memory};
use proptest::prelude::*;
use strobe_ledger::testing::Harness;
use strobe_ledger::{
    InitialPosition, LedgerConfig, ManagedCursor, ManagedLedger, MemoryBackend, Position, SyncMode,
};

#[derive(Debug, Clone)]
enum Op {
    Append(u8),
    Read(usize, usize),
    AckCumulative(usize),
    AckIndividual(usize),
    Skip(u8),
    Reset(usize),
    Rollover,
    Trim,
    FlushCursor,
    CrashReopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..6).prop_map(Op::Append),
        2 => (any::<usize>(), 1usize..8).prop_map(|(a, b)| Op::Read(a, b)),
        2 => any::<usize>().prop_map(Op::AckCumulative),
        3 => any::<usize>().prop_map(Op::AckIndividual),
        1 => (1u8..4).prop_map(Op::Skip),
        1 => any::<usize>().prop_map(Op::Reset),
        1 => Just(Op::Rollover),
        1 => Just(Op::Trim),
        1 => Just(Op::FlushCursor),
        1 => Just(Op::CrashReopen),
    ]
}

#[derive(Default)]
struct Model {
    entries: Vec<(Position, Bytes)>,
    acked: BTreeSet<Position>,
    persisted: BTreeSet<Position>,
    /// The next append must start a new ledger (rollover or reopen).
    rolled: bool,
    counter: u64,
}

impl Model {
    fn pick(&self, i: usize) -> Option<Position> {
        (!self.entries.is_empty()).then(|| self.entries[i % self.entries.len()].0)
    }
    fn unacked(&self) -> Vec<Position> {
        self.entries
            .iter()
            .map(|e| e.0)
            .filter(|p| !self.acked.contains(p))
            .collect()
    }
    fn ack_through(&mut self, p: Position) {
        for (q, _) in &self.entries {
            if *q <= p {
                self.acked.insert(*q);
            }
        }
    }
    fn current_ledger(&self) -> Option<u64> {
        if self.rolled {
            None
        } else {
            self.entries.last().map(|e| e.0.ledger_id)
        }
    }
}

fn cfg() -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: 5,
        trim_interval: None,
        cursor_flush_interval: Duration::from_secs(3600),
        ..LedgerConfig::default()
    }
}

const TOPIC: &str = "persistent://t/ns/model";

async fn open(h: &dyn Harness) -> (ManagedLedger, ManagedCursor) {
    let ml = ManagedLedger::open(&*h.backend(), TOPIC, cfg())
        .await
        .unwrap();
    let c = ml
        .open_cursor("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    (ml, c)
}

async fn check(m: &Model, ml: &ManagedLedger, c: &ManagedCursor) {
    let all = ml.read(Position::EARLIEST, 10_000).await.unwrap();
    assert_eq!(all.len(), m.entries.len());
    for (e, (p, d)) in all.iter().zip(&m.entries) {
        assert_eq!(e.position, *p);
        assert_eq!(&e.data, d);
    }
    for (p, _) in &m.entries {
        assert_eq!(c.is_acked(*p), m.acked.contains(p), "acked state of {p}");
    }
    assert_eq!(c.backlog(), m.unacked().len() as u64, "backlog");
    let s = ml.stats();
    assert_eq!(s.entries, m.entries.len() as u64);
    assert_eq!(
        s.bytes,
        m.entries.iter().map(|e| e.1.len() as u64).sum::<u64>()
    );
}

async fn run(h: &mut dyn Harness, ops: Vec<Op>) {
    let mut m = Model::default();
    let (mut ml, mut c) = open(h).await;
    for op in ops {
        match op {
            Op::Append(k) => {
                let futs: Vec<_> = (0..k)
                    .map(|_| {
                        m.counter += 1;
                        let d = Bytes::from(format!("e{}", m.counter));
                        (ml.append(d.clone()), d)
                    })
                    .collect();
                for (f, d) in futs {
                    let p = f.await.unwrap();
                    if let Some((last, _)) = m.entries.last() {
                        assert!(p > *last);
                        let same = p.ledger_id == last.ledger_id && p.entry_id == last.entry_id + 1;
                        let next = p.ledger_id > last.ledger_id && p.entry_id == 0;
                        assert!(same || next, "{last} -> {p}");
                        assert!(
                            !(m.rolled && same),
                            "rollover/reopen must start a new ledger"
                        );
                    }
                    m.rolled = false;
                    m.entries.push((p, d));
                }
            }
            Op::Read(i, max) => {
                if let Some(p) = m.pick(i) {
                    let got = ml.read(p, max).await.unwrap();
                    let at = m.entries.iter().position(|e| e.0 == p).unwrap();
                    let want: Vec<Position> =
                        m.entries[at..].iter().take(max).map(|e| e.0).collect();
                    assert_eq!(got.iter().map(|e| e.position).collect::<Vec<_>>(), want);
                }
            }
            Op::AckCumulative(i) => {
                if let Some(p) = m.pick(i) {
                    c.mark_delete(p);
                    m.ack_through(p);
                }
            }
            Op::AckIndividual(i) => {
                if let Some(p) = m.pick(i) {
                    c.delete(&[p]);
                    m.acked.insert(p);
                }
            }
            Op::Skip(n) => {
                c.skip(n as u64);
                let un = m.unacked();
                if !un.is_empty() {
                    let last = un[(n as usize).min(un.len()) - 1];
                    m.ack_through(last);
                }
            }
            Op::Reset(i) => {
                if let Some(p) = m.pick(i) {
                    c.reset(p).await.unwrap();
                    m.acked = m.entries.iter().map(|e| e.0).filter(|q| *q < p).collect();
                    m.persisted = m.acked.clone();
                }
            }
            Op::Rollover => {
                ml.rollover();
                if !m.entries.is_empty() {
                    m.rolled = true;
                }
            }
            Op::Trim => {
                let deleted = ml.trim().await.unwrap();
                let floor = m.unacked().first().copied();
                let cur = m.current_ledger();
                let mut want: Vec<u64> = m
                    .entries
                    .iter()
                    .map(|e| e.0.ledger_id)
                    .filter(|&l| Some(l) != cur && floor.is_none_or(|f| l < f.ledger_id))
                    .collect();
                want.dedup();
                assert_eq!(deleted, want, "trimmed ledgers");
                m.entries.retain(|e| !want.contains(&e.0.ledger_id));
                m.acked.retain(|p| !want.contains(&p.ledger_id));
                m.persisted.retain(|p| !want.contains(&p.ledger_id));
            }
            Op::FlushCursor => {
                c.flush().await.unwrap();
                m.persisted = m.acked.clone();
            }
            Op::CrashReopen => {
                drop((ml, c));
                h.crash_restart();
                (ml, c) = open(h).await;
                // The cursor comes back exactly as last persisted: acks since
                // then are forgotten (redelivered), no unacked entry is lost.
                m.acked = m.persisted.clone();
                if !m.entries.is_empty() {
                    m.rolled = true;
                }
            }
        }
        check(&m, &ml, &c).await;
    }
    ml.close().await.unwrap();
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn memory_backend_matches_model(ops in proptest::collection::vec(op(), 1..40)) {
        rt().block_on(run(&mut Memory(MemoryBackend::new()), ops));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn file_backend_matches_model(ops in proptest::collection::vec(op(), 1..40)) {
        let mut h = File::new(SyncMode::Always, 64 << 10, false);
        rt().block_on(run(&mut h, ops));
    }

    #[test]
    fn file_backend_write_once_matches_model(ops in proptest::collection::vec(op(), 1..40)) {
        let mut h = File::with(SyncMode::Always, 64 << 10, false, |c| c.direct_write_bytes = 1);
        rt().block_on(run(&mut h, ops));
    }

    #[test]
    fn file_backend_never_mode_matches_model(ops in proptest::collection::vec(op(), 1..30)) {
        let mut h = File::new(SyncMode::Never, 64 << 10, false);
        rt().block_on(run(&mut h, ops));
    }
}
