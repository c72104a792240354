//! Append batches: the appends issued inside `append_batch` wake the group
//! commit once, after the last is queued, so one group commit (one
//! fdatasync) makes them all durable; their positions and contents are as
//! without a batch; nested batches join the outermost; a batch that panics
//! still wakes the group commit.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::File;
use strobe_ledger::{LedgerConfig, ManagedLedger, Position, SyncMode, append_batch};

async fn open(h: &File, name: &str) -> ManagedLedger {
    ManagedLedger::open(&*h.backend.clone().unwrap(), name, LedgerConfig::default())
        .await
        .unwrap()
}

/// Waits until the flusher threads sleep (nothing queued, last round done).
async fn settle(ml: &ManagedLedger) {
    ml.append(Bytes::from_static(b"settle")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// Rounds of each test. An idle flusher thread also wakes on its own (every
/// 200 ms), so a single round can neither show a missing wake-up for sure
/// (the appends then complete at that timeout, which may come early) nor
/// rule out that such a timeout split a batch (about one round in a
/// hundred). Judged on most rounds, both are told apart: with the wake-up at
/// the batch's end removed, both tests fail with a median of 177-180 ms.
const ROUNDS: usize = 7;

/// The median of `d`.
fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_one_group_commit() {
    let h = File::new(SyncMode::Always, 64 << 20, false);
    let backend = h.backend.clone().unwrap();
    let a = open(&h, "batch-a").await;
    let b = open(&h, "batch-b").await;
    let (mut whole, mut took) = (0, Vec::new());
    for round in 0..ROUNDS {
        settle(&a).await;
        let (syncs0, batches0) = (backend.stats().syncs, backend.stats().batches);
        // 41 appends over two topics, with a nested batch inside.
        let (fa, fb) = append_batch(|| {
            let (mut fa, mut fb) = (Vec::new(), Vec::new());
            for i in 0..20 {
                fa.push(a.append(Bytes::from(format!("a{round}-{i}"))));
                // Busy for a moment between appends, as a reader decoding
                // frames is: without the batch the first append's wake-up
                // would have the flusher syncing it alone by now.
                std::thread::sleep(Duration::from_micros(50));
                if i == 10 {
                    append_batch(|| fb.push(b.append(Bytes::from(format!("b{round}")))));
                }
                fb.push(b.append(Bytes::from(format!("b{round}-{i}"))));
            }
            (fa, fb)
        });
        let t0 = std::time::Instant::now();
        let (mut pa, mut pb) = (Vec::new(), Vec::new());
        for f in fa {
            pa.push(f.await.unwrap());
        }
        for f in fb {
            pb.push(f.await.unwrap());
        }
        took.push(t0.elapsed());
        let s = backend.stats();
        let commits = (s.syncs - syncs0, s.batches - batches0);
        // Without the batch the first append is synced alone: never (1, 1).
        if commits == (1, 1) {
            whole += 1;
        } else {
            eprintln!("round {round}: {commits:?} (fdatasyncs, group commits)");
        }
        // Each topic's positions in the order its appends were issued.
        assert!(pa.windows(2).all(|w| w[0] < w[1]), "{pa:?}");
        assert!(pb.windows(2).all(|w| w[0] < w[1]), "{pb:?}");
    }
    assert!(
        whole > ROUNDS / 2,
        "41 appends in one batch: one group commit and one fdatasync in most rounds, {whole} of {ROUNDS}"
    );
    // Woken when the batch ends, not at an idle timeout.
    let took = median(took);
    assert!(took < Duration::from_millis(20), "median {took:?}");
    // Read back: every entry is there, in issue order.
    let got = a.read(Position::EARLIEST, 1000).await.unwrap();
    let want: Vec<String> = (0..ROUNDS)
        .flat_map(|r| {
            std::iter::once("settle".to_string()).chain((0..20).map(move |i| format!("a{r}-{i}")))
        })
        .collect();
    let got: Vec<String> = got
        .iter()
        .map(|e| String::from_utf8(e.data.to_vec()).unwrap())
        .collect();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_panics_still_wakes_the_group_commit() {
    let h = File::new(SyncMode::Always, 64 << 20, false);
    let ml = open(&h, "batch-panic").await;
    // Without the wake-up at the batch's end, the appends wait for a flusher
    // thread's idle timeout (see `ROUNDS`); with it, one fdatasync.
    let mut took = Vec::new();
    for _ in 0..ROUNDS {
        settle(&ml).await;
        let mut futs = Vec::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            append_batch(|| {
                futs.push(ml.append(Bytes::from_static(b"before the panic")));
                panic!("the batch's caller fails");
            })
        }));
        assert!(r.is_err());
        let t0 = std::time::Instant::now();
        for f in futs {
            f.await.unwrap();
        }
        took.push(t0.elapsed());
        // Outside a batch, appends wake the group commit at once again.
        ml.append(Bytes::from_static(b"after")).await.unwrap();
    }
    let took = median(took);
    assert!(took < Duration::from_millis(20), "median {took:?}");
}
