//! A full disk: how the storage reports running out of space, how full the
//! data directory's file system is, and the decision to stop taking writes
//! (Pulsar's bookies go read-only at `diskUsageThreshold` and become
//! writable again under `diskUsageLwmThreshold`).
//!
//! The storage keeps what it could not write in memory and tries again (a
//! segment's write-behind, a journal write), so a full disk costs no topic
//! its service; the broker uses [`DiskGuard`] to refuse new writes before
//! that memory grows, and to take them again once space is free.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Writes the storage found refused for want of space since the process started.
static STORAGE_FULL: AtomicU64 = AtomicU64::new(0);

/// Whether an error's text carries the OS's "no space left" (ENOSPC) or "disk quota
/// exceeded" (EDQUOT), as `io::Error` words it.
pub fn names_storage_full(text: &str) -> bool {
    text.contains("(os error 28)") || text.contains("(os error 122)")
}

/// Counts a write refused for want of space (see [`storage_full_errors`]).
pub fn note_storage_full() {
    STORAGE_FULL.fetch_add(1, Ordering::Relaxed);
}

/// Writes refused for want of space so far (ENOSPC, EDQUOT), in this process: the disk
/// guard turns the broker read-only on a new one even below its watermark (another
/// process filled the disk, or a quota).
pub fn storage_full_errors() -> u64 {
    STORAGE_FULL.load(Ordering::Relaxed)
}

/// How full a file system is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiskUsage {
    /// The larger of the blocks and the inodes used, as a fraction of what an
    /// unprivileged writer may use (0..=1).
    pub ratio: f64,
    pub total_bytes: u64,
    /// Bytes an unprivileged writer may still use.
    pub free_bytes: u64,
}

/// The usage of the file system holding `path` (`statvfs`).
pub fn disk_usage(path: &Path) -> std::io::Result<DiskUsage> {
    let s = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
    Ok(usage_of(
        s.blocks() as u64,
        s.blocks_free() as u64,
        s.blocks_available() as u64,
        s.fragment_size() as u64,
        s.files() as u64,
        s.files_free() as u64,
    ))
}

/// [`DiskUsage`] from `statvfs`'s counts. Blocks reserved for root (`bfree - bavail`)
/// count as used, as `df` shows them; a file system without inode counts (0 files)
/// is judged by its blocks alone.
fn usage_of(
    blocks: u64,
    bfree: u64,
    bavail: u64,
    frsize: u64,
    files: u64,
    ffree: u64,
) -> DiskUsage {
    let usable = blocks.saturating_sub(bfree) + bavail;
    let block_ratio = if usable == 0 {
        0.0
    } else {
        1.0 - bavail as f64 / usable as f64
    };
    let inode_ratio = if files == 0 {
        0.0
    } else {
        1.0 - ffree as f64 / files as f64
    };
    DiskUsage {
        ratio: block_ratio.max(inode_ratio).clamp(0.0, 1.0),
        total_bytes: usable.saturating_mul(frsize),
        free_bytes: bavail.saturating_mul(frsize),
    }
}

/// The thresholds: read-only at `high` or above, writable again under `low`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Watermarks {
    pub high: f64,
    pub low: f64,
}

impl Watermarks {
    /// Checked: `0 < low <= high <= 1`.
    pub fn new(high: f64, low: f64) -> Result<Watermarks, String> {
        if !(high > 0.0 && high <= 1.0) {
            return Err(format!(
                "disk_usage_threshold must be in (0, 1], got {high}"
            ));
        }
        if !(low > 0.0 && low <= high) {
            return Err(format!(
                "disk_usage_lwm_threshold must be in (0, disk_usage_threshold = {high}], got {low}"
            ));
        }
        Ok(Watermarks { high, low })
    }
}

/// Why writes are refused.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadOnly {
    /// The file system's usage reached the high watermark.
    Usage { ratio: f64, high: f64, low: f64 },
    /// A write was refused for want of space below the watermark.
    WriteRefused { ratio: f64, low: f64 },
}

impl std::fmt::Display for ReadOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadOnly::Usage { ratio, high, low } => write!(
                f,
                "the broker's disk is {:.1}% full (at or above disk_usage_threshold {:.1}%): writes are refused until it is under {:.1}%",
                ratio * 100.0,
                high * 100.0,
                low * 100.0
            ),
            ReadOnly::WriteRefused { ratio, low } => write!(
                f,
                "the broker's storage ran out of space (disk {:.1}% full): writes are refused until a write succeeds again and the disk is under {:.1}%",
                ratio * 100.0,
                low * 100.0
            ),
        }
    }
}

/// After a write refused for want of space, writes stay refused at least this long, so a
/// disk that a quota or another writer fills below the watermark is not tried again at
/// every check.
pub const REFUSED_QUIET: Duration = Duration::from_secs(5);

/// The read-only decision, fed one observation at a time (pure: the caller reads the
/// usage and the error count).
#[derive(Debug)]
pub struct DiskGuard {
    marks: Watermarks,
    state: Option<ReadOnly>,
    seen_errors: u64,
    last_error: Option<Instant>,
}

impl DiskGuard {
    /// `errors` is [`storage_full_errors`] now: earlier ones do not count.
    pub fn new(marks: Watermarks, errors: u64) -> DiskGuard {
        DiskGuard {
            marks,
            state: None,
            seen_errors: errors,
            last_error: None,
        }
    }

    /// Why writes are refused now, if they are.
    pub fn read_only(&self) -> Option<&ReadOnly> {
        self.state.as_ref()
    }

    /// Takes one observation: the usage (`None` if it could not be read: the state is
    /// kept) and the count of writes refused for want of space so far. Returns whether
    /// the state changed (read-only or writable).
    pub fn observe(&mut self, usage: Option<f64>, errors: u64, now: Instant) -> bool {
        let new_error = errors > self.seen_errors;
        self.seen_errors = errors;
        if new_error {
            self.last_error = Some(now);
        }
        let Some(ratio) = usage else {
            return false;
        };
        let was = self.state.is_some();
        let recent_error = self
            .last_error
            .is_some_and(|t| now.saturating_duration_since(t) < REFUSED_QUIET);
        self.state = if ratio >= self.marks.high {
            Some(ReadOnly::Usage {
                ratio,
                high: self.marks.high,
                low: self.marks.low,
            })
        } else if recent_error {
            Some(ReadOnly::WriteRefused {
                ratio,
                low: self.marks.low,
            })
        } else if was && ratio >= self.marks.low {
            // Between the watermarks: as it was, with the new reading.
            Some(match &self.state {
                Some(ReadOnly::WriteRefused { .. }) => ReadOnly::WriteRefused {
                    ratio,
                    low: self.marks.low,
                },
                _ => ReadOnly::Usage {
                    ratio,
                    high: self.marks.high,
                    low: self.marks.low,
                },
            })
        } else {
            None
        };
        was != self.state.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> DiskGuard {
        DiskGuard::new(Watermarks::new(0.95, 0.90).unwrap(), 0)
    }

    #[test]
    fn read_only_at_the_high_mark_and_writable_under_the_low_one() {
        let mut g = guard();
        let t = Instant::now();
        assert!(!g.observe(Some(0.94), 0, t));
        assert!(g.read_only().is_none());
        assert!(g.observe(Some(0.95), 0, t));
        assert!(matches!(g.read_only(), Some(ReadOnly::Usage { .. })));
        // Between the marks: still read-only.
        assert!(!g.observe(Some(0.92), 0, t));
        assert!(g.read_only().is_some());
        assert!(g.observe(Some(0.899), 0, t));
        assert!(g.read_only().is_none());
        // Between the marks from below: writable.
        assert!(!g.observe(Some(0.93), 0, t));
        assert!(g.read_only().is_none());
    }

    #[test]
    fn a_refused_write_below_the_mark_makes_it_read_only_for_a_while() {
        let mut g = guard();
        let t = Instant::now();
        assert!(g.observe(Some(0.50), 1, t));
        let msg = g.read_only().unwrap().to_string();
        assert!(msg.contains("ran out of space"), "{msg}");
        // No new error, but not long enough.
        assert!(!g.observe(Some(0.50), 1, t + Duration::from_secs(4)));
        // Another error restarts the wait.
        assert!(!g.observe(Some(0.50), 2, t + Duration::from_secs(4)));
        assert!(!g.observe(Some(0.50), 2, t + Duration::from_secs(8)));
        assert!(g.observe(Some(0.50), 2, t + Duration::from_secs(9)));
        assert!(g.read_only().is_none());
    }

    #[test]
    fn errors_from_before_the_guard_do_not_count_and_an_unread_usage_keeps_the_state() {
        let mut g = DiskGuard::new(Watermarks::new(0.95, 0.90).unwrap(), 7);
        let t = Instant::now();
        assert!(!g.observe(Some(0.5), 7, t));
        assert!(g.observe(Some(0.97), 7, t));
        assert!(!g.observe(None, 7, t));
        assert!(g.read_only().is_some());
        // Space freed, but a write was refused a moment ago: read-only for that reason.
        assert!(!g.observe(Some(0.5), 8, t));
        assert!(matches!(g.read_only(), Some(ReadOnly::WriteRefused { .. })));
        assert!(g.observe(Some(0.5), 8, t + REFUSED_QUIET));
    }

    #[test]
    fn usage_counts_reserved_blocks_and_inodes() {
        // 1000 blocks, 100 free of which 50 reserved for root: 950 usable, 50 available.
        let u = usage_of(1000, 100, 50, 4096, 0, 0);
        assert!((u.ratio - (1.0 - 50.0 / 950.0)).abs() < 1e-9);
        assert_eq!(u.free_bytes, 50 * 4096);
        // Inodes nearly gone on an empty disk.
        let u = usage_of(1000, 1000, 1000, 4096, 100, 1);
        assert!((u.ratio - 0.99).abs() < 1e-9);
        assert!(Watermarks::new(0.9, 0.95).is_err());
        assert!(Watermarks::new(1.5, 0.9).is_err());
        assert!(names_storage_full(
            "write x: No space left on device (os error 28)"
        ));
    }

    #[test]
    fn the_data_directory_has_a_usage() {
        let d = tempfile::tempdir().unwrap();
        let u = disk_usage(d.path()).unwrap();
        assert!((0.0..=1.0).contains(&u.ratio));
        assert!(u.total_bytes > 0);
    }
}
