//! The page-cache window (`FileBackendConfig::page_cache_window`): segment
//! bytes more than the window behind what is on the disk leave the page
//! cache, on the journal path and on the write-once path, and a sealed
//! segment's all go at the checkpoint that indexes it; with the window off
//! they stay. Every entry still reads back the same (from the disk).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{File, read_all};
use strobe_ledger::testing::Harness;
use strobe_ledger::{FileBackendConfig, LedgerConfig, ManagedLedger, SyncMode};

const ENTRY: usize = 60_000;
const WINDOW: u64 = 16 << 20;

fn payload(i: usize) -> Bytes {
    let mut v = format!("e{i}:").into_bytes();
    v.resize(ENTRY, (i % 251) as u8);
    Bytes::from(v)
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for t in std::fs::read_dir(dir.join("topics")).unwrap() {
        for f in std::fs::read_dir(t.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "seg") {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

/// The fraction of the pages of `path`'s bytes `from..to` that are in the
/// page cache (`mincore` of a shared read-only mapping).
#[allow(unsafe_code)]
fn resident(path: &Path, from: u64, to: u64) -> f64 {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len();
    let to = to.min(len);
    let page = 4096u64;
    let from = from / page * page;
    assert!(to > from, "{}: empty range {from}..{to}", path.display());
    let n = (to - from) as usize;
    let pages = n.div_ceil(page as usize);
    let mut vec = vec![0u8; pages];
    // SAFETY: the mapping is read-only, never dereferenced, and unmapped
    // below; `vec` has one byte per page of it, as mincore requires.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            n,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            from as libc::off_t,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap {}", path.display());
        let r = libc::mincore(p, n, vec.as_mut_ptr());
        libc::munmap(p, n);
        assert_eq!(r, 0, "mincore");
    }
    vec.iter().filter(|b| *b & 1 == 1).count() as f64 / pages as f64
}

/// Polls `f` for up to 5 s (the checkpoint thread drops pages in the
/// background).
async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

/// Writes 1,000 entries of 60 KB (60 MB) one at a time into one ledger;
/// returns the harness, the ledger and what was written.
async fn write(
    tweak: impl FnOnce(&mut FileBackendConfig),
    lc: LedgerConfig,
) -> (File, ManagedLedger, Vec<Bytes>) {
    let h = File::with(SyncMode::Always, 64 << 20, false, |c| {
        c.checkpoint_interval = Duration::from_secs(3600);
        c.checkpoint_bytes_per_topic = 1 << 40;
        tweak(c);
    });
    let ml = ManagedLedger::open(&*h.backend(), "pc", lc).await.unwrap();
    let want: Vec<Bytes> = (0..1000).map(payload).collect();
    for p in &want {
        ml.append(p.clone()).await.unwrap();
    }
    (h, ml, want)
}

/// One ledger written on the journal path (`direct`: false) or the
/// write-once path; checks what is left in the page cache.
async fn window_case(direct: bool, window: u64) {
    let (h, ml, want) = write(
        |c| {
            c.page_cache_window = window;
            // Each 60 KB append is a group commit of its own: below the
            // threshold it takes the journal path, above it the write-once path.
            c.direct_write_bytes = if direct { 32 << 10 } else { 1 << 30 };
        },
        LedgerConfig::default(),
    )
    .await;
    let st = h.backend.as_ref().unwrap().stats();
    if direct {
        assert_eq!(st.direct_entries, 1000, "{st:?}");
    } else {
        assert_eq!(st.direct_entries, 0, "{st:?}");
    }
    let seg = segments(h.dir.path());
    assert_eq!(seg.len(), 1, "{seg:?}");
    let dropped = || h.backend.as_ref().unwrap().stats().page_cache_dropped_bytes;
    let seg = &seg[0];
    let len = std::fs::metadata(seg).unwrap().len();
    assert!(len > 3 * WINDOW, "segment holds {len} bytes");
    if window == 0 {
        // Left to the kernel, on a machine with memory to spare: it stays.
        let r = resident(seg, 0, WINDOW);
        assert!(
            r > 0.9,
            "window off: only {r:.2} of the oldest 16 MiB cached"
        );
        assert_eq!(dropped(), 0);
    } else {
        let old = eventually(|| resident(seg, 0, len - 2 * WINDOW) < 0.05).await;
        assert!(
            old,
            "{:.2} of the bytes more than two windows behind the end still cached",
            resident(seg, 0, len - 2 * WINDOW)
        );
        // The newest bytes (the window, less the stretch that may still be
        // in the write-behind buffer) are still in the page cache.
        let r = resident(seg, len - WINDOW + (1 << 20), len - (1 << 20));
        assert!(r > 0.9, "only {r:.2} of the window cached");
        // The counter (strobe_storage_page_cache_dropped_bytes_total) says
        // as much: at least what lies two windows behind, at most all but one.
        let d = dropped();
        assert!(
            d >= len - 2 * WINDOW && d <= len - WINDOW,
            "{d} bytes counted as dropped of {len}"
        );
    }
    assert_eq!(read_all(&ml).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_path_keeps_only_the_window_cached() {
    window_case(false, WINDOW).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_once_path_keeps_only_the_window_cached() {
    window_case(true, WINDOW).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_window_the_kernel_keeps_everything() {
    window_case(false, 0).await;
    window_case(true, 0).await;
}

/// Ledgers of 8 MB (smaller than the window) roll over; the checkpoint
/// that indexes a sealed one drops all of its pages; the newest stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_segments_leave_the_page_cache_at_their_checkpoint() {
    let lc = LedgerConfig {
        max_ledger_bytes: 8 << 20,
        ..LedgerConfig::default()
    };
    let (h, ml, want) = write(
        |c| {
            c.page_cache_window = WINDOW;
            c.checkpoint_interval = Duration::from_millis(100);
        },
        lc,
    )
    .await;
    let segs = segments(h.dir.path());
    assert!(segs.len() >= 5, "{segs:?}");
    let (newest, sealed) = segs.split_last().unwrap();
    let gone = eventually(|| sealed.iter().all(|s| resident(s, 0, u64::MAX) < 0.05)).await;
    let left: Vec<f64> = sealed.iter().map(|s| resident(s, 0, u64::MAX)).collect();
    assert!(gone, "sealed segments still cached: {left:?}");
    let len = std::fs::metadata(newest).unwrap().len();
    if len > 2 << 20 {
        let r = resident(newest, 0, len - (1 << 20));
        assert!(r > 0.9, "only {r:.2} of the newest segment cached");
    }
    assert_eq!(read_all(&ml).await, want);
}

/// Under `page_cache_budget` each topic writing keeps its share of the budget
/// (here the least share, 1 MiB) rather than the whole window: with a
/// 16 MiB window two 8 MB segments would stay cached, under a 2 MiB budget
/// all but their newest stretch leaves the page cache. Every entry still
/// reads back, the dropped ones from the disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_topics_share_the_page_cache_budget() {
    let share = strobe_ledger::file::MIN_PAGE_CACHE_SHARE;
    let h = File::with(SyncMode::Always, 64 << 20, false, |c| {
        c.checkpoint_interval = Duration::from_secs(3600);
        c.checkpoint_bytes_per_topic = 1 << 40;
        c.page_cache_window = WINDOW;
        c.page_cache_budget = 2 * share;
        // Every append on the journal path (through the write-behind buffer).
        c.direct_write_bytes = 1 << 30;
    });
    let mut topics = Vec::new();
    for name in ["budget-a", "budget-b"] {
        let ml = ManagedLedger::open(&*h.backend(), name, LedgerConfig::default())
            .await
            .unwrap();
        topics.push(ml);
    }
    let want: Vec<Bytes> = (0..140).map(payload).collect(); // 8.4 MB per topic
    for p in &want {
        for ml in &topics {
            ml.append(p.clone()).await.unwrap();
        }
    }
    let segs = segments(h.dir.path());
    assert_eq!(segs.len(), 2, "{segs:?}");
    for seg in &segs {
        let len = std::fs::metadata(seg).unwrap().len();
        assert!(len > 4 * share && len < WINDOW, "segment holds {len} bytes");
        let behind = len - 3 * share;
        let gone = eventually(|| resident(seg, 0, behind) < 0.05).await;
        let map: Vec<String> = (0..behind / (256 << 10))
            .map(|i| {
                format!(
                    "{:.1}",
                    resident(seg, i * (256 << 10), (i + 1) * (256 << 10))
                )
            })
            .collect();
        assert!(
            gone,
            "{}: {:.2} of the bytes more than 3 shares behind the end still cached (by 256 KiB: {map:?})",
            seg.display(),
            resident(seg, 0, behind)
        );
        // The newest bytes (less what may still be in the write-behind
        // buffer) stay.
        let r = resident(seg, len - share / 2 - (128 << 10), len - (128 << 10));
        assert!(
            r > 0.9,
            "{}: only {r:.2} of the newest half share cached",
            seg.display()
        );
    }
    for ml in &topics {
        assert_eq!(read_all(ml).await, want);
    }
}
