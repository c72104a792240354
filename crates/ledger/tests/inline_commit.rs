//! With `sync = never`, an append that finds the flusher idle runs the group
//! commit on its own thread. Many threads appending to the same topics at
//! once must still leave every topic's entries in position order in the
//! journal and the segments: what each append was told is what is read back,
//! before and after a crash, across journal rotations.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::File;
use strobe_ledger::testing::Harness;
use strobe_ledger::{LedgerConfig, ManagedLedger, Position, SyncMode};

const TOPICS: usize = 6;
const TASKS_PER_TOPIC: usize = 4;
const PER_TASK: usize = 400;

fn payload(topic: usize, task: usize, i: usize) -> Bytes {
    let mut v = format!("t{topic}/k{task}/{i}:").into_bytes();
    v.extend((0..(i * 37) % 900).map(|k| (k + task) as u8));
    Bytes::from(v)
}

async fn check(ml: &ManagedLedger, written: &[(Position, Bytes)]) {
    let mut sorted = written.to_vec();
    sorted.sort_by_key(|(p, _)| *p);
    let mut from = Position::EARLIEST;
    let mut got = Vec::new();
    while got.len() < sorted.len() {
        let batch = ml.read(from, 97).await.expect("read");
        assert!(
            !batch.is_empty(),
            "{}: stopped after {} entries",
            ml.name(),
            got.len()
        );
        from = Position::new(
            batch.last().unwrap().position.ledger_id,
            batch.last().unwrap().position.entry_id + 1,
        );
        got.extend(batch);
    }
    assert_eq!(got.len(), sorted.len(), "{}", ml.name());
    for (e, (p, data)) in got.iter().zip(&sorted) {
        assert_eq!(e.position, *p, "{}", ml.name());
        assert_eq!(&e.data, data, "{} at {p:?}", ml.name());
    }
}

#[test]
fn concurrent_appends_keep_position_order() {
    // A small journal file, so rotations (left to the flusher thread) happen
    // between inline group commits.
    let mut h = File::new(SyncMode::Never, 256 << 10, false);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let cfg = LedgerConfig {
        max_entries_per_ledger: 700,
        trim_interval: None,
        ..LedgerConfig::default()
    };
    let written = rt.block_on(async {
        let mut ledgers = Vec::new();
        for t in 0..TOPICS {
            let ml = ManagedLedger::open(&*h.backend(), &format!("inline-{t}"), cfg.clone())
                .await
                .unwrap();
            ledgers.push(Arc::new(ml));
        }
        let mut tasks = Vec::new();
        for (t, ml) in ledgers.iter().enumerate() {
            for k in 0..TASKS_PER_TOPIC {
                let ml = ml.clone();
                tasks.push(tokio::spawn(async move {
                    let mut out = Vec::new();
                    for i in 0..PER_TASK {
                        let data = payload(t, k, i);
                        let pos = ml.append(data.clone()).await.expect("append");
                        out.push((t, pos, data));
                        if i % 50 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                    out
                }));
            }
        }
        let mut written: Vec<Vec<(Position, Bytes)>> = vec![Vec::new(); TOPICS];
        for task in tasks {
            for (t, p, d) in task.await.unwrap() {
                written[t].push((p, d));
            }
        }
        for (ml, w) in ledgers.iter().zip(&written) {
            assert_eq!(w.len(), TASKS_PER_TOPIC * PER_TASK);
            check(ml, w).await;
        }
        drop(ledgers);
        written
    });
    assert!(
        h.backend.as_ref().unwrap().stats().entries >= (TOPICS * TASKS_PER_TOPIC * PER_TASK) as u64
    );
    h.crash_restart();
    rt.block_on(async {
        for (t, w) in written.iter().enumerate() {
            let ml = ManagedLedger::open(&*h.backend(), &format!("inline-{t}"), cfg.clone())
                .await
                .unwrap();
            check(&ml, w).await;
        }
    });
}
