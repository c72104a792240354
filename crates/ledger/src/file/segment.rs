//! Segment files (`L<ledger id>.seg`, one per ledger) and their index files
//! (`L<ledger id>.idx`, written once a sealed segment is synced).

use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::format::{self, HEADER, SEG_FIXED};
use crate::{LedgerError, Result};

/// How much of a segment is handed to the disk at a time (see
/// [`Segment::take_writeback`]). A group commit's fdatasync that meets a
/// write-out waits for it; the disk time they take is the same whatever the
/// step, so a smaller step delays more fsyncs by less each (at 400 MB/s,
/// 256 KiB is about 0.6 ms).
pub const WRITEBACK_STEP: u64 = 256 << 10;

/// A topic's journal-path records gather in its segment's write-behind
/// buffer and go to the file once this many bytes are there.
const WRITE_BEHIND: usize = 64 << 10;

/// A number that differs between segments (FNV-1a of the path), from which
/// each segment takes its own first write-behind and write-out thresholds.
/// Topics created together and written at the same rate would otherwise
/// reach them in the same group commits: 100 topics at 200 KiB/s each
/// handed the disk 25 MB at once every ~1.3 s, and the group commits'
/// fdatasyncs queued behind it (per-second publish p99 7-10 ms, p99.9 up to
/// 18 ms, against 3-5 ms staggered).
fn phase_of(path: &Path) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Segment bytes leave the page cache at least this many at a time (see
/// [`Segment::take_cache_drop`]).
const CACHE_DROP_STEP: u64 = 4 << 20;
/// How far before its range a cache drop reaches again (see [`Writeback::start`]).
const REDROP: u64 = 1 << 20;
pub const PAGE: u64 = 4096;

/// A segment range handed to the checkpoint thread: its write-out to the
/// disk should start, or (written out already) its pages should leave the
/// page cache.
#[derive(Debug)]
pub struct Writeback {
    file: Arc<File>,
    from: u64,
    len: u64,
    drop_cache: bool,
}

impl Writeback {
    /// Write-out: `sync_file_range(SYNC_FILE_RANGE_WRITE)`, which queues
    /// the range's dirty pages for write-out and returns; durability still
    /// comes from fdatasync. Without a wait it consumes no write-out error
    /// (the fdatasync reports those), and a failure to queue only means the
    /// kernel writes them later, so it is ignored.
    ///
    /// Cache drop: `posix_fadvise(POSIX_FADV_DONTNEED)`, which frees the
    /// range's clean pages (pages still dirty or under write-out stay). It
    /// changes nothing on disk and loses no write-out error (those are kept
    /// per file, for its fdatasync), so its failure is ignored too. It also
    /// covers the [`REDROP`] bytes before the range again: with a small
    /// window (many topics under the page-cache budget) some of a drop's
    /// pages are still being written out, and stayed (seen: 10-20% of them).
    pub fn start(&self) {
        if self.drop_cache {
            let back = self.from.min(REDROP);
            let _ = fadvise_dontneed(&self.file, self.from - back, self.len + back);
        } else {
            let _ = sync_file_range(&self.file, self.from, self.len, libc::SYNC_FILE_RANGE_WRITE);
        }
    }

    /// Where the range starts.
    pub fn from(&self) -> u64 {
        self.from
    }

    /// The bytes a cache drop covers (0 for a write-out).
    pub fn dropped_bytes(&self) -> u64 {
        if self.drop_cache { self.len } else { 0 }
    }
}

#[allow(unsafe_code)]
fn fadvise_dontneed(file: &File, from: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on a descriptor `file` keeps open; no memory
    // is passed.
    let r = unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            from as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    Ok(())
}

/// Writes a file range's dirty pages out and waits for them (not a
/// durability point: no device cache flush, no metadata). Background writers
/// use it to hand the disk a bounded amount at a time, so a group commit's
/// fdatasync never queues behind a burst of tens of MiB. Its error must not
/// be dropped: the wait reports a failed write-out once per open file (and
/// the kernel marks those pages clean), so a later fdatasync of the same
/// file would succeed for bytes that never reached the disk.
pub fn write_out_and_wait(file: &File, from: u64, len: u64) -> std::io::Result<()> {
    sync_file_range(
        file,
        from,
        len,
        libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER,
    )
}

#[allow(unsafe_code)]
fn sync_file_range(file: &File, from: u64, len: u64, flags: libc::c_uint) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on a descriptor `file` keeps open; no memory
    // is passed.
    let r = unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            from as libc::off64_t,
            len as libc::off64_t,
            flags,
        )
    };
    if r == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The byte offset of each entry's record in its segment: four bytes an
/// entry while the segment is under 4 GiB (every segment, with the default
/// 256 MiB ledgers), eight after. Every stored entry of every topic has one
/// in memory, so this is most of what a topic's stored backlog costs in RSS
/// (the soak in tests/soak/ saw it as the largest live growth).
#[derive(Debug, Default)]
pub struct Offsets {
    small: Vec<u32>,
    /// Used instead of `small` once an offset does not fit in 32 bits.
    large: Vec<u64>,
}

impl Offsets {
    pub fn len(&self) -> usize {
        self.small.len() + self.large.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> Option<u64> {
        if self.large.is_empty() {
            self.small.get(i).map(|&o| u64::from(o))
        } else {
            self.large.get(i).copied()
        }
    }

    /// Entry `i`'s offset; `i` must be stored.
    pub fn at(&self, i: usize) -> u64 {
        self.get(i).expect("an entry of this segment")
    }

    pub fn push(&mut self, offset: u64) {
        if self.large.is_empty() {
            if let Ok(o) = u32::try_from(offset) {
                self.small.push(o);
                return;
            }
            let small = std::mem::take(&mut self.small);
            self.large = small.into_iter().map(u64::from).collect();
        }
        self.large.push(offset);
    }

    /// Gives back the growth slack once the segment is sealed.
    pub fn shrink_to_fit(&mut self) {
        self.small.shrink_to_fit();
        self.large.shrink_to_fit();
    }

    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        let small = self.small.iter().map(|&o| u64::from(o));
        small.chain(self.large.iter().copied())
    }
}

/// Segment files open in this process. Descriptors are the process's to
/// share (sockets, journal files, segments), so the count is too: with a
/// file open for every segment of every topic, a broker ran out of them
/// near 19,000 topics (issue 47).
static OPEN_FILES: AtomicUsize = AtomicUsize::new(0);

/// How many segment files are open in this process now.
pub fn open_files() -> usize {
    OPEN_FILES.load(Ordering::Relaxed)
}

/// One ledger's segment file and its in-memory index.
///
/// The file is opened on demand and may be closed again while every byte
/// written to it is synced ([`Segment::close_file`]): an idle topic holds no
/// descriptor. A file with bytes written but not yet synced stays open until
/// a sync covers them: a write-out error is reported to the descriptors open
/// when it happens, and one opened later might never hear of it.
#[derive(Debug)]
pub struct Segment {
    pub path: PathBuf,
    file: Option<Arc<File>>,
    pub offsets: Offsets,
    /// Bytes of valid records (the logical end, including `pending`).
    pub len: u64,
    /// Bytes already handed to the OS; `pending` holds `written..len`.
    pub written: u64,
    /// Write-behind buffer: records not yet written to the file. Small
    /// topics thereby cost one `pwrite` per 64 KiB rather than one per group
    /// commit; the journal covers them until a checkpoint writes and syncs them.
    pub pending: Vec<u8>,
    /// Bytes known to be on disk (fdatasync'd).
    pub synced_len: u64,
    /// Write-out of `..writeback_from` has been asked for (see
    /// [`Segment::take_writeback`]).
    pub writeback_from: u64,
    /// The next write-out is due once `written` reaches this.
    pub writeback_due: u64,
    /// Pages of `..cache_dropped` have been dropped from the page cache
    /// (see [`Segment::take_cache_drop`]).
    pub cache_dropped: u64,
    /// The write-behind buffer goes to the file at this many bytes
    /// ([`WRITE_BEHIND`], the first time staggered below it).
    flush_at: usize,
    /// This segment's offset for its staggered thresholds ([`phase_of`],
    /// set by [`Segment::staggered`]).
    phase: u64,
    /// Sum of entry data lengths.
    pub bytes: u64,
    pub first_ts: u64,
    pub last_ts: u64,
    /// An index file matching `len` exists.
    pub indexed: bool,
    /// Created since the directory was last fsync'd.
    pub new_file: bool,
    /// The file could not be created yet (no space or descriptor): the first write
    /// creates it ([`Segment::file`]); the records wait in the write-behind buffer.
    pub needs_create: bool,
}

pub fn seg_path(dir: &Path, ledger: u64) -> PathBuf {
    dir.join(format!("L{ledger:016}.seg"))
}

pub fn idx_path(dir: &Path, ledger: u64) -> PathBuf {
    dir.join(format!("L{ledger:016}.idx"))
}

/// Parses `L<id>.seg` names.
pub fn parse_seg_name(name: &str) -> Option<u64> {
    name.strip_prefix('L')?.strip_suffix(".seg")?.parse().ok()
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.file.is_some() {
            OPEN_FILES.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Where scanning stopped short of the file's end.
#[derive(Debug, Clone)]
pub struct ScanStop {
    pub offset: u64,
    pub reason: &'static str,
}

impl Segment {
    pub fn create(dir: &Path, ledger: u64) -> Result<Segment> {
        let path = seg_path(dir, ledger);
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| LedgerError::io("create", &path, e))
        {
            Ok(f) => {
                OPEN_FILES.fetch_add(1, Ordering::Relaxed);
                Some(Arc::new(f))
            }
            // The ledger's records are in the journal and go into the write-behind
            // buffer: the file is made at the first flush that can (a ledger that
            // failed here used to fail its appends).
            Err(e) if e.is_storage_full() || e.is_out_of_descriptors() => None,
            Err(e) => return Err(e),
        };
        let needs_create = file.is_none();
        Ok(Segment {
            path,
            file,
            needs_create,
            offsets: Offsets::default(),
            len: 0,
            written: 0,
            pending: Vec::new(),
            synced_len: 0,
            writeback_from: 0,
            writeback_due: 0,
            cache_dropped: 0,
            flush_at: WRITE_BEHIND,
            phase: 0,
            bytes: 0,
            first_ts: 0,
            last_ts: 0,
            indexed: false,
            new_file: true,
        }
        .staggered())
    }

    /// Opens an existing segment: from its index file if that is valid,
    /// otherwise by scanning every record. Returns where a scan stopped on
    /// something other than the clean end of the file.
    pub fn open(dir: &Path, ledger: u64) -> Result<(Segment, Option<ScanStop>)> {
        let path = seg_path(dir, ledger);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| LedgerError::io("open", &path, e))?;
        let file_len = file
            .metadata()
            .map_err(|e| LedgerError::io("stat", &path, e))?
            .len();
        OPEN_FILES.fetch_add(1, Ordering::Relaxed);
        let mut seg = Segment {
            path,
            file: Some(Arc::new(file)),
            offsets: Offsets::default(),
            len: 0,
            written: 0,
            pending: Vec::new(),
            synced_len: 0,
            writeback_from: 0,
            writeback_due: 0,
            cache_dropped: 0,
            flush_at: WRITE_BEHIND,
            phase: 0,
            bytes: 0,
            first_ts: 0,
            last_ts: 0,
            indexed: false,
            new_file: false,
            needs_create: false,
        };
        let stop = if seg.load_index(&idx_path(dir, ledger), file_len) {
            None
        } else {
            seg.scan(file_len)?
        };
        seg.synced_len = seg.len;
        seg.written = seg.len;
        seg.writeback_from = seg.len;
        Ok((seg.staggered(), stop))
    }

    /// First thresholds out of phase with other segments' (see [`phase_of`]):
    /// the first write-behind flush at 1/4 to 1 of [`WRITE_BEHIND`], the
    /// first write-out after 1/4 to 1 of [`WRITEBACK_STEP`].
    fn staggered(mut self) -> Segment {
        self.phase = phase_of(&self.path);
        self.restagger_flush();
        let step = WRITEBACK_STEP;
        self.writeback_due = self.written + step / 4 + (self.phase >> 32) % (step * 3 / 4 + 1);
        self
    }

    /// The next write-behind flush at this segment's own point (1/4 to 1 of
    /// [`WRITE_BEHIND`]): after a checkpoint emptied every segment's buffer
    /// at once, equal rates would otherwise bring their flushes, and the
    /// write-outs checked at them, back into step.
    pub fn restagger_flush(&mut self) {
        let wb = WRITE_BEHIND as u64;
        self.flush_at = (wb / 4 + self.phase % (wb * 3 / 4 + 1)) as usize;
    }

    /// The write-behind buffer holds `flush_at` bytes: time to write it.
    pub fn flush_due(&self) -> bool {
        self.pending.len() >= self.flush_at
    }

    /// Writes the write-behind buffer to the file once it holds
    /// `flush_at` bytes; whether it did.
    pub fn flush_when_full(&mut self) -> Result<bool> {
        if !self.flush_due() {
            return Ok(false);
        }
        self.flush_pending()?;
        self.flush_at = WRITE_BEHIND;
        Ok(true)
    }

    fn scan(&mut self, file_len: u64) -> Result<Option<ScanStop>> {
        let file = self.file()?;
        let mut f = std::io::BufReader::with_capacity(1 << 20, &*file);
        let mut pos = 0u64;
        let mut header = [0u8; HEADER];
        let mut body = Vec::new();
        loop {
            if pos == file_len {
                return Ok(None);
            }
            if file_len - pos < HEADER as u64 {
                return Ok(Some(ScanStop {
                    offset: pos,
                    reason: "incomplete record header",
                }));
            }
            f.read_exact(&mut header)
                .map_err(|e| LedgerError::io("read", &self.path, e))?;
            let len = format::u32_at(&header, 0) as usize;
            if !(SEG_FIXED..=format::MAX_BODY).contains(&len) {
                let reason = if len == 0 {
                    "zero length"
                } else {
                    "length out of bounds"
                };
                return Ok(Some(ScanStop {
                    offset: pos,
                    reason,
                }));
            }
            if file_len - pos - (HEADER as u64) < len as u64 {
                return Ok(Some(ScanStop {
                    offset: pos,
                    reason: "incomplete record",
                }));
            }
            body.resize(len, 0);
            f.read_exact(&mut body)
                .map_err(|e| LedgerError::io("read", &self.path, e))?;
            if crc32c::crc32c(&body) != format::u32_at(&header, 4) {
                return Ok(Some(ScanStop {
                    offset: pos,
                    reason: "CRC-32C mismatch",
                }));
            }
            let entry = format::u64_at(&body, 0);
            if entry != self.offsets.len() as u64 {
                return Ok(Some(ScanStop {
                    offset: pos,
                    reason: "entry id out of sequence",
                }));
            }
            let n = (HEADER + len) as u64;
            self.push(pos, format::u64_at(&body, 8), (len - SEG_FIXED) as u64, n);
            pos += n;
        }
    }

    /// Records an entry written at `offset` with `rec_len` bytes.
    pub fn push(&mut self, offset: u64, ts: u64, data_len: u64, rec_len: u64) {
        if self.offsets.is_empty() {
            self.first_ts = ts;
        }
        self.last_ts = ts;
        self.offsets.push(offset);
        self.bytes += data_len;
        self.len = offset + rec_len;
        self.indexed = false;
    }

    /// Cuts the file back to `len` bytes (a torn tail).
    pub fn truncate(&mut self, len: u64) -> Result<()> {
        self.file()?
            .set_len(len)
            .map_err(|e| LedgerError::io("truncate", &self.path, e))?;
        self.len = len;
        self.written = len;
        self.pending.clear();
        self.writeback_from = self.writeback_from.min(len);
        self.writeback_due = self.writeback_due.min(len + WRITEBACK_STEP);
        self.cache_dropped = self.cache_dropped.min(len);
        Ok(())
    }

    /// Queues records (already framed) behind the segment's end; written
    /// out once `write_behind` bytes gather.
    pub fn append(&mut self, recs: &[u8], write_behind: usize) -> Result<()> {
        self.pending.extend_from_slice(recs);
        if self.pending.len() >= write_behind {
            self.flush_pending()?;
        }
        Ok(())
    }

    /// Write-once path: hands the write-behind buffer and then `recs`
    /// (already framed) to the file, so the file holds every record in
    /// order; returns the offset of `recs`. Not synced, and the records
    /// are not indexed yet ([`Segment::push`] them).
    ///
    /// `recs` are the records in pieces (each header, then its entry's
    /// bytes as the producer sent them), written with `writev`: no copy
    /// into a buffer of our own. Only this path moves the file's cursor
    /// (reads and the write-behind use positioned I/O).
    pub fn write_direct(&mut self, mut recs: &mut [IoSlice<'_>]) -> Result<u64> {
        self.flush_pending()?;
        let at = self.written;
        let file = self.file()?;
        let err = |e| LedgerError::io("write", &self.path, e);
        let mut f: &File = &file;
        f.seek(SeekFrom::Start(at)).map_err(err)?;
        let mut total = 0u64;
        while !recs.is_empty() {
            match f.write_vectored(recs) {
                Ok(0) => return Err(err(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    total += n as u64;
                    IoSlice::advance_slices(&mut recs, n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(err(e)),
            }
        }
        self.written += total;
        Ok(at)
    }

    /// The end of entry `i`'s record.
    pub fn record_end(&self, i: usize) -> u64 {
        self.offsets.get(i + 1).unwrap_or(self.len)
    }

    /// Writes the write-behind buffer to the file (not synced).
    pub fn flush_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.file()?
            .write_all_at(&self.pending, self.written)
            .map_err(|e| LedgerError::io("write", &self.path, e))?;
        self.written += self.pending.len() as u64;
        // The allocation goes too: kept, every topic that ever wrote 64 KiB would
        // hold that much for good (64 MB for 1,000 idle topics, as the soak in
        // tests/soak/ showed). A busy topic grows it again in a few doublings.
        self.pending = Vec::new();
        Ok(())
    }

    /// The segment's file, opened again if it was closed.
    pub fn file(&mut self) -> Result<Arc<File>> {
        if let Some(f) = &self.file {
            return Ok(f.clone());
        }
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(self.needs_create)
            .truncate(self.needs_create)
            .open(&self.path)
            .map_err(|e| LedgerError::io("open", &self.path, e))?;
        self.needs_create = false;
        OPEN_FILES.fetch_add(1, Ordering::Relaxed);
        let f = Arc::new(f);
        self.file = Some(f.clone());
        Ok(f)
    }

    /// Closes the file if every byte written to it is synced (see
    /// [`Segment`]); whether it is closed now. Callers that hold a clone of
    /// it (a read, a sync under way) keep the descriptor until they finish.
    pub fn close_file(&mut self) -> bool {
        if self.file.is_none() {
            return true;
        }
        if self.synced_len < self.written {
            return false;
        }
        self.file = None;
        OPEN_FILES.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// The file if it is open now (without opening it).
    pub fn open_handle(&self) -> Option<Arc<File>> {
        self.file.clone()
    }

    /// Closes the file (if it may: see [`Segment::close_file`]) when more
    /// than `budget` segment files are open in the process (0: no budget).
    pub fn close_if_over(&mut self, budget: usize) {
        if budget > 0 && open_files() > budget {
            self.close_file();
        }
    }

    /// Byte offsets `[start, end)` of entries `first..=last` (both stored).
    pub fn byte_range(&self, first: u64, last: u64) -> (u64, u64) {
        let start = self.offsets.at(first as usize);
        let end = self.offsets.get(last as usize + 1).unwrap_or(self.len);
        (start, end)
    }

    /// The range whose disk write should start now, once a
    /// [`WRITEBACK_STEP`] has been handed to the OS since the last one. Left
    /// to the kernel, tens of MiB of a busy topic stay dirty until the
    /// checkpoint's fdatasync writes them in one burst, and every group
    /// commit's fdatasync queued behind that burst stalls (seen: 50-60 ms at
    /// 10 MB/s). The checkpoint thread starts it (see [`Writeback`]).
    pub fn take_writeback(&mut self) -> Option<Writeback> {
        if self.written < self.writeback_due {
            return None;
        }
        // Closed, the file is synced to `written`: nothing to write out.
        let file = self.file.clone()?;
        let from = self.writeback_from;
        self.writeback_from = self.written;
        self.writeback_due = self.written + WRITEBACK_STEP;
        Some(Writeback {
            file,
            from,
            len: self.written - from,
            drop_cache: false,
        })
    }

    /// The range whose pages should leave the page cache now: what lies more
    /// than `window` bytes behind `clean_to` (a point below which every byte
    /// has been written to the disk), once [`CACHE_DROP_STEP`] (or a quarter
    /// of a smaller window) has gathered.
    /// `window` 0 keeps everything (the kernel decides).
    ///
    /// Why: a broker writing faster than anything reads it back would
    /// otherwise fill all free memory with page cache, and on a VM whose
    /// balloon reports free pages to the host every new page-cache page
    /// costs a host page fault (measured: half of the broker's CPU in a
    /// produce phase). Pages freed here are reused by the next writes before
    /// they are reported. Consumers within the window (at the tail) still
    /// read from the page cache; one further behind reads from the disk.
    pub fn take_cache_drop(&mut self, clean_to: u64, window: u64) -> Option<Writeback> {
        // A closed file's pages are clean; they are dropped once it is
        // open again (cache_dropped stays where it was).
        if window == 0 || self.file.is_none() {
            return None;
        }
        let to = clean_to.min(self.len).saturating_sub(window) & !(PAGE - 1);
        if to < self.cache_dropped + CACHE_DROP_STEP.min(window / 4).max(PAGE) {
            return None;
        }
        Some(self.drop_cache_to(to))
    }

    /// A sealed segment, synced in full: all of its pages may go (with
    /// `window` 0 none do).
    pub fn take_cache_drop_sealed(&mut self, window: u64) -> Option<Writeback> {
        if window == 0
            || self.file.is_none()
            || self.synced_len < self.len
            || self.cache_dropped >= self.len
        {
            return None;
        }
        Some(self.drop_cache_to(self.len))
    }

    /// The cache drop of `cache_dropped..to`, which then counts as dropped.
    fn drop_cache_to(&mut self, to: u64) -> Writeback {
        let from = std::mem::replace(&mut self.cache_dropped, to);
        Writeback {
            file: self.file.clone().expect("checked open by the callers"),
            from,
            len: to - from,
            drop_cache: true,
        }
    }

    /// Index file: magic, count, segment length, bytes, first/last ts, offsets, CRC.
    pub fn write_index(&self, path: &Path) -> Result<()> {
        let mut b = Vec::with_capacity(48 + 8 * self.offsets.len() + 4);
        b.extend_from_slice(b"STRBIDX1");
        for v in [
            self.offsets.len() as u64,
            self.len,
            self.bytes,
            self.first_ts,
            self.last_ts,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for o in self.offsets.iter() {
            b.extend_from_slice(&o.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        // Not synced on its own: a torn index fails its CRC and the segment is scanned.
        std::fs::write(path, &b).map_err(|e| LedgerError::io("write", path, e))
    }

    fn load_index(&mut self, path: &Path, file_len: u64) -> bool {
        let Ok(b) = std::fs::read(path) else {
            return false;
        };
        if b.len() < 52 || &b[..8] != b"STRBIDX1" {
            return false;
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(body) != format::u32_at(crc, 0) {
            return false;
        }
        let count = format::u64_at(body, 8) as usize;
        let len = format::u64_at(body, 16);
        if len != file_len || body.len() != 48 + 8 * count {
            return false;
        }
        let mut offsets = Offsets::default();
        for i in 0..count {
            offsets.push(format::u64_at(body, 48 + 8 * i));
        }
        offsets.shrink_to_fit();
        self.offsets = offsets;
        self.len = len;
        self.bytes = format::u64_at(body, 24);
        self.first_ts = format::u64_at(body, 32);
        self.last_ts = format::u64_at(body, 40);
        self.indexed = true;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::Offsets;

    #[test]
    fn offsets_keep_their_values_across_the_4_gib_switch() {
        let mut o = Offsets::default();
        let want: Vec<u64> = vec![0, 100, u64::from(u32::MAX), 1 << 32, (1 << 33) + 7];
        for (i, &v) in want.iter().enumerate() {
            o.push(v);
            assert_eq!(o.len(), i + 1);
            // Everything pushed so far reads back, before and after the switch.
            for (j, &w) in want[..=i].iter().enumerate() {
                assert_eq!(o.get(j), Some(w));
            }
        }
        assert_eq!(o.get(want.len()), None);
        assert_eq!(o.iter().collect::<Vec<_>>(), want);
        o.shrink_to_fit();
        assert_eq!(o.at(3), 1 << 32);
    }

    #[test]
    fn offsets_under_4_gib_take_four_bytes_each() {
        let mut o = Offsets::default();
        for i in 0..1000u64 {
            o.push(i * 1000);
        }
        o.shrink_to_fit();
        assert!(o.large.is_empty());
        assert_eq!(o.small.capacity(), 1000);
        assert_eq!(o.at(999), 999_000);
    }
}
