//! The shared test suite that every backend passes.
//!
//! A backend's tests implement [`Harness`] and call [`run_all`] (see
//! `tests/suite.rs`). Each case opens topics with fresh names, so cases may
//! share one backend.

mod impaired;

pub use impaired::Impaired;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::{
    Clock, InitialPosition, LedgerBackend, LedgerConfig, LedgerError, ManagedLedger, Position,
    Retention,
};

/// How the suite reaches a backend.
pub trait Harness: Send + Sync {
    /// The backend as it is now.
    fn backend(&self) -> Arc<dyn LedgerBackend>;
    /// Simulates a crash and restart of the process. Every ledger and cursor
    /// of the backend has been dropped (without `close`) before this is called.
    fn crash_restart(&mut self);
}

type Case = for<'a> fn(&'a mut dyn Harness) -> BoxFuture<'a, ()>;

/// Every case, by name.
pub fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("append_and_read", |h| Box::pin(append_and_read(h))),
        ("hold_withholds_entries_from_readers", |h| {
            Box::pin(hold_withholds(h))
        }),
        ("rollover_by_entries_size_and_age", |h| {
            Box::pin(rollover(h))
        }),
        ("open_starts_a_new_ledger", |h| {
            Box::pin(open_starts_new_ledger(h))
        }),
        ("one_open_handle_per_topic", |h| Box::pin(one_handle(h))),
        ("an_older_fencing_token_is_refused", |h| {
            Box::pin(fencing(h))
        }),
        ("cursor_acks_and_backlog", |h| Box::pin(cursor_acks(h))),
        ("cursor_survives_crash", |h| Box::pin(cursor_crash(h))),
        ("batch_index_acks", |h| Box::pin(batch_acks(h))),
        ("reset_and_skip", |h| Box::pin(reset_and_skip(h))),
        ("non_durable_cursor", |h| Box::pin(non_durable(h))),
        ("trim_by_retention", |h| Box::pin(trim(h))),
        ("stats", |h| Box::pin(stats(h))),
        ("delete_cursor", |h| Box::pin(delete_cursor(h))),
        ("entries_survive_crash", |h| Box::pin(entries_crash(h))),
        ("last_confirmed_watch", |h| Box::pin(lac_watch(h))),
        ("mark_delete_before", |h| Box::pin(mark_delete_before(h))),
    ]
}

/// Runs every case.
pub async fn run_all(h: &mut dyn Harness) {
    for (name, case) in cases() {
        tracing::info!(case = name, "suite case");
        case(h).await;
    }
}

fn cfg() -> LedgerConfig {
    LedgerConfig {
        trim_interval: None,
        cursor_flush_interval: Duration::from_secs(3600),
        ..LedgerConfig::default()
    }
}

fn manual_clock(start: u64) -> (Clock, Arc<AtomicU64>) {
    let t = Arc::new(AtomicU64::new(start));
    (Clock::manual(t.clone()), t)
}

fn data(i: u64) -> Bytes {
    Bytes::from(format!("entry-{i}-{}", "x".repeat((i % 7) as usize)))
}

async fn open(h: &dyn Harness, name: &str, c: LedgerConfig) -> ManagedLedger {
    ManagedLedger::open(&*h.backend(), name, c)
        .await
        .unwrap_or_else(|e| panic!("open {name}: {e}"))
}

async fn append_n(ml: &ManagedLedger, from: u64, n: u64) -> Vec<Position> {
    let futs: Vec<_> = (from..from + n).map(|i| ml.append(data(i))).collect();
    let mut out = Vec::new();
    for f in futs {
        out.push(f.await.expect("append"));
    }
    out
}

async fn append_and_read(h: &mut dyn Harness) {
    let ml = open(h, "suite/append", cfg()).await;
    let ps = append_n(&ml, 0, 50).await;
    for w in ps.windows(2) {
        assert!(w[0] < w[1]);
    }
    assert_eq!(ps[0].entry_id, 0);
    assert_eq!(ml.last_confirmed(), Some(ps[49]));
    let all = ml.read(Position::EARLIEST, 1000).await.unwrap();
    assert_eq!(all.len(), 50);
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.position, ps[i]);
        assert_eq!(e.data, data(i as u64));
    }
    let some = ml.read(ps[10], 5).await.unwrap();
    assert_eq!(
        some.iter().map(|e| e.position).collect::<Vec<_>>(),
        ps[10..15]
    );
    assert!(
        ml.read(Position::new(ps[49].ledger_id, 50), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let too_big = ml
        .append(Bytes::from(vec![0u8; ml.config().max_entry_bytes + 1]))
        .await;
    assert!(matches!(too_big, Err(LedgerError::EntryTooLarge { .. })));
    ml.close().await.unwrap();
    assert!(matches!(
        ml.append(data(0)).await,
        Err(LedgerError::Closed(_))
    ));
}

async fn rollover(h: &mut dyn Harness) {
    let (clock, t) = manual_clock(1_000_000);
    let c = LedgerConfig {
        max_entries_per_ledger: 10,
        max_ledger_bytes: 1 << 30,
        max_ledger_age: Duration::from_secs(60),
        clock,
        ..cfg()
    };
    let ml = open(h, "suite/rollover", c).await;
    let ps = append_n(&ml, 0, 25).await;
    let ledgers: std::collections::BTreeSet<u64> = ps.iter().map(|p| p.ledger_id).collect();
    assert_eq!(ledgers.len(), 3, "{ps:?}");
    assert_eq!(ps[10].entry_id, 0);
    assert_eq!(ps[10].ledger_id, ps[9].ledger_id + 1);
    let all = ml.read(Position::EARLIEST, 100).await.unwrap();
    assert_eq!(all.iter().map(|e| e.position).collect::<Vec<_>>(), ps);
    // Age: the current ledger rolls once its first entry is older than the limit.
    t.fetch_add(61_000, Ordering::SeqCst);
    let p = ml.append(data(25)).await.unwrap();
    assert_eq!(p, Position::new(ps[24].ledger_id + 1, 0));
    // Size.
    ml.close().await.unwrap();
    let c = LedgerConfig {
        max_ledger_bytes: 100,
        ..cfg()
    };
    let ml = open(h, "suite/rollover-size", c).await;
    let ps = append_n(&ml, 0, 30).await;
    assert!(
        ps.iter()
            .map(|p| p.ledger_id)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 2
    );
    // Explicit rollover.
    ml.rollover();
    let p = ml.append(data(1)).await.unwrap();
    assert_eq!(p, Position::new(ps[29].ledger_id + 1, 0));
    ml.close().await.unwrap();
}

async fn open_starts_new_ledger(h: &mut dyn Harness) {
    let ml = open(h, "suite/reopen", cfg()).await;
    let a = append_n(&ml, 0, 5).await;
    ml.close().await.unwrap();
    let ml = open(h, "suite/reopen", cfg()).await;
    let b = append_n(&ml, 5, 5).await;
    assert!(b[0].ledger_id > a[4].ledger_id);
    assert_eq!(b[0].entry_id, 0);
    let all = ml.read(Position::EARLIEST, 100).await.unwrap();
    assert_eq!(all.len(), 10);
    assert_eq!(all[4].position, a[4]);
    assert_eq!(all[5].position, b[0]);
    ml.close().await.unwrap();
    // Opening without appending still moves on to a new ledger next time.
    let ml = open(h, "suite/reopen", cfg()).await;
    let cur = ml.stats().current_ledger_id;
    assert!(cur > b[0].ledger_id);
    ml.close().await.unwrap();
}

async fn one_handle(h: &mut dyn Harness) {
    let ml = open(h, "suite/one", cfg()).await;
    let second = ManagedLedger::open(&*h.backend(), "suite/one", cfg()).await;
    assert!(matches!(second, Err(LedgerError::AlreadyOpen(_))));
    ml.close().await.unwrap();
    drop(ml);
    let ml = open(h, "suite/one", cfg()).await;
    ml.close().await.unwrap();
}

async fn fencing(h: &mut dyn Harness) {
    let with = |fence| LedgerConfig { fence, ..cfg() };
    let ml = open(h, "suite/fenced", with(5)).await;
    append_n(&ml, 0, 3).await;
    ml.close().await.unwrap();
    drop(ml);
    // An older owner's open is refused, and writes nothing.
    match ManagedLedger::open(&*h.backend(), "suite/fenced", with(4)).await {
        Err(LedgerError::Fenced { token, current, .. }) => assert_eq!((token, current), (4, 5)),
        other => panic!("expected Fenced, got {other:?}"),
    }
    // The same token reopens (a restart of the owner), and a newer one takes over.
    let ml = open(h, "suite/fenced", with(5)).await;
    assert_eq!(ml.stats().entries, 3);
    ml.close().await.unwrap();
    drop(ml);
    let ml = open(h, "suite/fenced", with(9)).await;
    ml.close().await.unwrap();
    drop(ml);
    assert!(matches!(
        ManagedLedger::open(&*h.backend(), "suite/fenced", with(5)).await,
        Err(LedgerError::Fenced { .. })
    ));
}

async fn cursor_acks(h: &mut dyn Harness) {
    let c = LedgerConfig {
        max_entries_per_ledger: 4,
        ..cfg()
    };
    let ml = open(h, "suite/acks", c).await;
    let ps = append_n(&ml, 0, 10).await;
    let cur = ml
        .open_cursor("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    assert_eq!(cur.backlog(), 10);
    assert_eq!(cur.mark_delete_position(), None);
    let got = cur.read(3).await.unwrap();
    assert_eq!(got.iter().map(|e| e.position).collect::<Vec<_>>(), ps[..3]);
    cur.delete(&[ps[1], ps[2], ps[5]]);
    assert_eq!(cur.backlog(), 7);
    assert!(cur.is_acked(ps[5]) && !cur.is_acked(ps[0]));
    cur.delete(&[ps[0]]);
    // 0,1,2 contiguous now: mark-delete moves.
    assert_eq!(cur.mark_delete_position(), Some(ps[2]));
    assert_eq!(cur.first_unacked_floor(), ps[3]);
    assert_eq!(cur.individually_deleted(), vec![(ps[5], ps[5])]);
    // Reading skips the individually deleted entry 5.
    let got = cur.read(100).await.unwrap();
    assert_eq!(
        got.iter().map(|e| e.position).collect::<Vec<_>>(),
        [ps[3], ps[4], ps[6], ps[7], ps[8], ps[9]]
    );
    assert!(!cur.has_more());
    cur.mark_delete(ps[6]);
    assert_eq!(cur.backlog(), 3);
    assert!(cur.individually_deleted().is_empty());
    // Rewind redelivers only what is unacked.
    cur.rewind();
    let got = cur.read(100).await.unwrap();
    assert_eq!(got.iter().map(|e| e.position).collect::<Vec<_>>(), ps[7..]);
    // Acks of positions that do not exist are ignored.
    cur.delete(&[Position::new(ps[9].ledger_id, 999)]);
    assert_eq!(cur.backlog(), 3);
    cur.mark_delete(ps[9]);
    assert_eq!(cur.backlog(), 0);
    // Latest starts after the last confirmed entry.
    let late = ml
        .open_cursor("late", InitialPosition::Latest)
        .await
        .unwrap();
    assert_eq!(late.backlog(), 0);
    let p = ml.append(data(10)).await.unwrap();
    assert_eq!(late.backlog(), 1);
    assert_eq!(late.read(10).await.unwrap()[0].position, p);
    ml.close().await.unwrap();
}

async fn cursor_crash(h: &mut dyn Harness) {
    let ml = open(h, "suite/cursor-crash", cfg()).await;
    let ps = append_n(&ml, 0, 20).await;
    let cur = ml
        .open_cursor("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    cur.mark_delete(ps[4]);
    cur.delete(&[ps[7], ps[9]]);
    cur.flush().await.unwrap();
    // Acks after the flush fall in the window a crash may forget.
    cur.mark_delete(ps[11]);
    cur.delete(&[ps[15]]);
    drop(cur);
    drop(ml);
    h.crash_restart();
    let ml = open(h, "suite/cursor-crash", cfg()).await;
    let cur = ml
        .open_cursor("sub", InitialPosition::Latest)
        .await
        .unwrap();
    // Everything flushed is still acknowledged ...
    for p in &ps[..5] {
        assert!(cur.is_acked(*p), "{p}");
    }
    assert!(cur.is_acked(ps[7]) && cur.is_acked(ps[9]));
    // ... and nothing unacknowledged was lost.
    for i in [5, 6, 8, 10, 12, 13, 14, 16, 17, 18, 19] {
        assert!(!cur.is_acked(ps[i]), "entry {i} must still be unacked");
    }
    let backlog = cur.backlog();
    assert!(
        (12..=20 - 5 - 2).contains(&backlog) || backlog == 13,
        "backlog {backlog}"
    );
    // Delivery restarts at the first unacked entry.
    let got = cur.read(3).await.unwrap();
    assert_eq!(got[0].position, ps[5]);
    assert!(cur.properties().is_empty());
    let props: std::collections::BTreeMap<String, i64> =
        [("p-1".to_string(), 19), ("p-2".to_string(), -1)].into();
    cur.mark_delete_with(ps[19], props.clone());
    ml.close().await.unwrap();
    let ml = open(h, "suite/cursor-crash", cfg()).await;
    let cur = ml
        .open_cursor("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    assert_eq!(cur.backlog(), 0, "close persists cursors");
    assert_eq!(cur.properties(), props, "with their properties");
    ml.close().await.unwrap();
}

async fn batch_acks(h: &mut dyn Harness) {
    let ml = open(h, "suite/batch", cfg()).await;
    let ps = append_n(&ml, 0, 3).await;
    let cur = ml
        .open_cursor("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    cur.ack_batch_indexes(ps[0], 70, &[0, 1, 69]);
    assert!(!cur.is_acked(ps[0]));
    let acked = cur.batch_acked_indexes(ps[0]).unwrap();
    assert_eq!(acked, vec![0b11, 1 << 5]);
    let unacked = cur.batch_unacked_set(ps[0]).unwrap();
    assert_eq!(unacked[0] as u64, !0b11u64);
    assert_eq!(unacked[1] as u64, (1u64 << 5) - 1);
    cur.flush().await.unwrap();
    drop(cur);
    drop(ml);
    h.crash_restart();
    let ml = open(h, "suite/batch", cfg()).await;
    let cur = ml
        .open_cursor("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    assert_eq!(cur.batch_acked_indexes(ps[0]), Some(vec![0b11, 1 << 5]));
    let rest: Vec<u32> = (2..69).collect();
    cur.ack_batch_indexes(ps[0], 70, &rest);
    assert!(cur.is_acked(ps[0]));
    assert_eq!(cur.mark_delete_position(), Some(ps[0]));
    assert_eq!(cur.batch_acked_indexes(ps[0]), None);
    // Pulsar's ack-set form: set bits are unacked.
    cur.ack_batch_set(ps[1], 3, &[0b110]);
    assert_eq!(cur.batch_acked_indexes(ps[1]), Some(vec![0b001]));
    cur.ack_batch_set(ps[1], 3, &[0]);
    assert!(cur.is_acked(ps[1]));
    assert_eq!(cur.backlog(), 1);
    ml.close().await.unwrap();
}

/// Acking what comes before an entry: within its ledger, and at a ledger's
/// first entry, the earlier ledger's (a cumulative ack ending inside a batch
/// there acked nothing before it, once).
async fn mark_delete_before(h: &mut dyn Harness) {
    let c = LedgerConfig {
        max_entries_per_ledger: 3,
        ..cfg()
    };
    let ml = open(h, "suite/before", c).await;
    let ps = append_n(&ml, 0, 7).await;
    assert_eq!((ps[3].entry_id, ps[6].entry_id), (0, 0), "{ps:?}");
    let cur = ml
        .open_cursor("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    assert_eq!(cur.position_before(ps[0]), None);
    assert_eq!(cur.position_before(ps[3]), Some(ps[2]));
    assert_eq!(cur.position_before(ps[5]), Some(ps[4]));
    cur.mark_delete_before(ps[1]);
    assert_eq!(cur.mark_delete_position(), Some(ps[0]));
    cur.mark_delete_before(ps[3]);
    assert_eq!(cur.mark_delete_position(), Some(ps[2]));
    assert!(!cur.is_acked(ps[3]));
    cur.ack_batch_set(ps[6], 4, &[0b1100]);
    cur.mark_delete_before(ps[6]);
    assert_eq!(cur.mark_delete_position(), Some(ps[5]));
    // Before the first entry: nothing; backwards: no change.
    cur.mark_delete_before(ps[0]);
    cur.mark_delete_before(ps[4]);
    assert_eq!(cur.mark_delete_position(), Some(ps[5]));
    cur.flush().await.unwrap();
    drop(cur);
    drop(ml);
    h.crash_restart();
    let ml = open(h, "suite/before", cfg()).await;
    let cur = ml
        .open_cursor("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    assert_eq!(cur.mark_delete_position(), Some(ps[5]));
    assert_eq!(cur.batch_acked_indexes(ps[6]), Some(vec![0b0011]));
    ml.close().await.unwrap();
}

async fn reset_and_skip(h: &mut dyn Harness) {
    let c = LedgerConfig {
        max_entries_per_ledger: 5,
        ..cfg()
    };
    let ml = open(h, "suite/reset", c.clone()).await;
    let ps = append_n(&ml, 0, 12).await;
    let cur = ml
        .open_cursor("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    cur.delete(&[ps[1], ps[3]]);
    cur.skip(3); // 0, 2, 4 (1 and 3 already acked)
    assert_eq!(cur.mark_delete_position(), Some(ps[4]));
    assert_eq!(cur.backlog(), 7);
    cur.skip(2);
    assert_eq!(cur.mark_delete_position(), Some(ps[6]));
    cur.skip(100);
    assert_eq!(cur.backlog(), 0);
    // Seek back: everything from ps[3] is unacked again, durably.
    cur.reset(ps[3]).await.unwrap();
    assert_eq!(cur.backlog(), 9);
    assert_eq!(cur.read_position(), ps[3]);
    drop(cur);
    drop(ml);
    h.crash_restart();
    let ml = open(h, "suite/reset", c).await;
    let cur = ml
        .open_cursor("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    assert_eq!(cur.backlog(), 9);
    assert_eq!(cur.read(1).await.unwrap()[0].position, ps[3]);
    // Seek to the start.
    cur.reset(Position::EARLIEST).await.unwrap();
    assert_eq!(cur.backlog(), 12);
    ml.close().await.unwrap();
}

async fn non_durable(h: &mut dyn Harness) {
    let c = LedgerConfig {
        max_entries_per_ledger: 3,
        retention: Retention::default(),
        ..cfg()
    };
    let ml = open(h, "suite/reader", c).await;
    let ps = append_n(&ml, 0, 9).await;
    let reader = ml.new_non_durable_cursor(ps[4]);
    assert!(!reader.is_durable());
    assert_eq!(reader.read(2).await.unwrap()[0].position, ps[4]);
    // Without durable cursors everything sealed is consumed; the reader does
    // not hold data back. Ledgers: [0..3) [3..6) sealed, [6..9) current.
    let deleted = ml.trim().await.unwrap();
    assert_eq!(deleted, vec![ps[0].ledger_id, ps[3].ledger_id]);
    assert_eq!(ml.first_position(), ps[6]);
    let reader2 = ml.new_non_durable_cursor(Position::EARLIEST);
    assert_eq!(reader2.read(1).await.unwrap()[0].position, ps[6]);
    let got = reader.read(10).await.unwrap();
    assert_eq!(got.iter().map(|e| e.position).collect::<Vec<_>>(), ps[6..]);
    let p = ml.append(data(9)).await.unwrap();
    assert_eq!(reader.read(10).await.unwrap()[0].position, p);
    assert_eq!(reader.backlog(), 10 - 6);
    ml.close().await.unwrap();
    let ml = open(h, "suite/reader", cfg()).await;
    assert!(ml.cursor_names().is_empty());
    ml.close().await.unwrap();
}

async fn trim(h: &mut dyn Harness) {
    let (clock, t) = manual_clock(10_000_000);
    let base = LedgerConfig {
        max_entries_per_ledger: 2,
        clock,
        ..cfg()
    };
    // Infinite retention keeps consumed ledgers.
    let ml = open(
        h,
        "suite/trim-inf",
        LedgerConfig {
            retention: Retention::INFINITE,
            ..base.clone()
        },
    )
    .await;
    append_n(&ml, 0, 6).await;
    assert!(ml.trim().await.unwrap().is_empty());
    ml.close().await.unwrap();

    // Time retention: consumed ledgers go once older than the limit.
    let ml = open(
        h,
        "suite/trim-time",
        LedgerConfig {
            retention: Retention {
                time: Some(Duration::from_secs(10)),
                size_bytes: None,
            },
            ..base.clone()
        },
    )
    .await;
    let cur = ml
        .open_cursor("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 6).await; // ledgers of 2: A A B B C C (C current? no: rolls at the 7th)
    assert!(ml.trim().await.unwrap().is_empty(), "nothing consumed yet");
    cur.mark_delete(ps[3]); // consumed A and B
    assert!(
        ml.trim().await.unwrap().is_empty(),
        "retention time not reached"
    );
    t.fetch_add(11_000, Ordering::SeqCst);
    let deleted = ml.trim().await.unwrap();
    assert_eq!(deleted, vec![ps[0].ledger_id, ps[2].ledger_id]);
    assert_eq!(ml.first_position(), ps[4]);
    assert!(ml.read(ps[0], 10).await.unwrap()[0].position == ps[4]);
    assert_eq!(cur.backlog(), 2);
    ml.close().await.unwrap();
    drop((ml, cur));
    // Trimmed ledgers stay gone after a restart.
    h.crash_restart();
    let ml = open(h, "suite/trim-time", base.clone()).await;
    assert_eq!(
        ml.read(Position::EARLIEST, 10).await.unwrap()[0].position,
        ps[4]
    );
    assert!(ml.stats().current_ledger_id > ps[5].ledger_id);
    ml.close().await.unwrap();

    // Size retention: keep at most ~one ledger's worth of consumed bytes.
    let ml = open(
        h,
        "suite/trim-size",
        LedgerConfig {
            retention: Retention {
                time: None,
                size_bytes: Some(2 * data(0).len() as u64),
            },
            ..base.clone()
        },
    )
    .await;
    let ps: Vec<Position> = {
        let mut v = Vec::new();
        for i in 0..8 {
            v.push(ml.append(data(0)).await.unwrap());
            let _ = i;
        }
        v
    };
    ml.rollover();
    let deleted = ml.trim().await.unwrap();
    // 4 sealed ledgers of 2 entries, all consumed (no cursors): keep the newest one.
    assert_eq!(deleted.len(), 3, "{deleted:?}");
    assert_eq!(ml.first_position(), ps[6]);
    ml.close().await.unwrap();
}

async fn stats(h: &mut dyn Harness) {
    let (clock, t) = manual_clock(5_000);
    let c = LedgerConfig {
        max_entries_per_ledger: 3,
        retention: Retention::INFINITE,
        clock,
        ..cfg()
    };
    let ml = open(h, "suite/stats", c.clone()).await;
    let s = ml.stats();
    assert_eq!(
        (s.entries, s.bytes, s.ledgers, s.oldest_entry_time_ms),
        (0, 0, 1, None)
    );
    ml.append(Bytes::from_static(b"abc")).await.unwrap();
    t.store(6_000, Ordering::SeqCst);
    for _ in 0..4 {
        ml.append(Bytes::from_static(b"defg")).await.unwrap();
    }
    let s = ml.stats();
    assert_eq!(s.entries, 5);
    assert_eq!(s.bytes, 19);
    assert_eq!(s.ledgers, 2);
    assert_eq!(s.oldest_entry_time_ms, Some(5_000));
    ml.close().await.unwrap();
    let ml = open(h, "suite/stats", c).await;
    let s2 = ml.stats();
    assert_eq!(
        (s2.entries, s2.bytes, s2.oldest_entry_time_ms),
        (5, 19, Some(5_000))
    );
    assert_eq!(s2.ledgers, 3);
    ml.close().await.unwrap();
}

async fn delete_cursor(h: &mut dyn Harness) {
    let ml = open(h, "suite/delcursor", cfg()).await;
    ml.open_cursor("a", InitialPosition::Earliest)
        .await
        .unwrap();
    ml.open_cursor("b", InitialPosition::Earliest)
        .await
        .unwrap();
    ml.delete_cursor("a").await.unwrap();
    assert!(matches!(
        ml.delete_cursor("a").await,
        Err(LedgerError::CursorNotFound { .. })
    ));
    drop(ml);
    h.crash_restart();
    let ml = open(h, "suite/delcursor", cfg()).await;
    assert_eq!(ml.cursor_names(), vec!["b".to_string()]);
    assert_eq!(ml.stats().durable_cursors, 1);
    ml.close().await.unwrap();
}

async fn entries_crash(h: &mut dyn Harness) {
    let c = LedgerConfig {
        max_entries_per_ledger: 7,
        ..cfg()
    };
    let ml = open(h, "suite/entries-crash", c.clone()).await;
    let ps = append_n(&ml, 0, 30).await;
    drop(ml);
    h.crash_restart();
    let ml = open(h, "suite/entries-crash", c).await;
    let all = ml.read(Position::EARLIEST, 100).await.unwrap();
    assert_eq!(all.iter().map(|e| e.position).collect::<Vec<_>>(), ps);
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.data, data(i as u64));
    }
    ml.close().await.unwrap();
}

/// The last-confirmed watch wakes its watchers on every confirmation, and a
/// watcher that arrives after appends nobody watched starts from the true
/// last confirmed position (the channel is not sent to while unwatched).
async fn lac_watch(h: &mut dyn Harness) {
    let ml = open(h, "suite/lac-watch", cfg()).await;
    let mut w = ml.watch_last_confirmed();
    assert_eq!(*w.borrow_and_update(), None);
    let ps = append_n(&ml, 0, 3).await;
    woken(&mut w, "a watcher is woken by appends").await;
    assert_eq!(*w.borrow_and_update(), Some(ps[2]));
    drop(w);
    let ps = append_n(&ml, 3, 4).await;
    assert_eq!(ml.last_confirmed(), Some(ps[3]));
    let mut w = ml.watch_last_confirmed();
    assert_eq!(
        *w.borrow_and_update(),
        Some(ps[3]),
        "a late watcher starts from the last confirmed"
    );
    let ps = append_n(&ml, 7, 1).await;
    woken(&mut w, "a late watcher is woken by the next append").await;
    assert_eq!(*w.borrow_and_update(), Some(ps[0]));
    let w2 = ml.watch_last_confirmed();
    assert_eq!(*w2.borrow(), Some(ps[0]));
    ml.close().await.unwrap();
}

/// A hold (an open transaction's first entry) hides it and everything after it from every
/// reader, confirmed or not, until it is released; releasing wakes the watchers.
async fn hold_withholds(h: &mut dyn Harness) {
    let ml = open(h, "suite/hold", cfg()).await;
    let before = append_n(&ml, 0, 3).await;
    let (held, f) = ml.append_holding(data(3), crc32c::crc32c(&data(3)));
    let held = held.expect("a position");
    assert_eq!(f.await.unwrap(), held);
    let after = append_n(&ml, 4, 2).await;
    assert_eq!(ml.last_confirmed(), Some(before[2]));
    assert_eq!(ml.last_stored(), Some(after[1]));
    assert_eq!(ml.read(Position::EARLIEST, 100).await.unwrap().len(), 3);
    let c = ml
        .open_cursor("held", InitialPosition::Earliest)
        .await
        .unwrap();
    assert_eq!(c.read(100).await.unwrap().len(), 3);
    assert!(!{
        c.seek_read(held);
        c.has_more()
    });
    let late = ml
        .open_cursor("late", InitialPosition::Latest)
        .await
        .unwrap();
    assert_eq!(
        late.read_position(),
        held,
        "Latest starts at the first held entry"
    );
    // A second transaction starting later does not move the hold back.
    let (_, f) = ml.append_holding(data(6), crc32c::crc32c(&data(6)));
    f.await.unwrap();
    assert_eq!(ml.hold(), Some(held));
    let mut w = ml.watch_last_confirmed();
    assert_eq!(*w.borrow_and_update(), Some(before[2]));
    ml.set_hold(Some(after[0]));
    woken(&mut w, "moving the hold wakes the watchers").await;
    assert_eq!(*w.borrow_and_update(), Some(held));
    ml.set_hold(None);
    woken(&mut w, "releasing the hold wakes the watchers").await;
    assert_eq!(ml.last_confirmed(), ml.last_stored());
    assert_eq!(c.read(100).await.unwrap().len(), 4);
    ml.close().await.unwrap();
}

async fn woken(w: &mut tokio::sync::watch::Receiver<Option<Position>>, what: &str) {
    tokio::time::timeout(Duration::from_secs(10), w.changed())
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .expect("the ledger is open");
}
