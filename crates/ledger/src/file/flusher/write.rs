//! One group commit's writing, by whoever holds the flusher: the journal
//! records of every topic's entries in one write, the segments' write-behind
//! buffers, the write-once path for large groups (entries written straight
//! to their segment and referenced from the journal), and journal rotation.

use std::fs::File;
use std::io::IoSlice;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::commit::{SLOW_IO, book_direct, commit_written, stop_accepting, sync_direct};
use super::plan::{Chunk, Plan, chunk_entries};
use crate::file::checkpoint::{delete_later, hand_to_checkpoint, sync_and_close_later};
use crate::file::format::{
    self, K_CURSOR, K_CURSOR_DELETE, K_DECLARE, K_ENTRY, K_SEGREF, K_TRIM, SEGREF_LEN,
};
use crate::file::journal::open_journal;
use crate::file::segment::{self, Segment};
use crate::file::shared::{
    BackendShared, DirectSync, Flusher, FramedRecord, SyncClose, Written, ensure_dir,
};
use crate::file::topic::{Req, TopicFiles, TopicShared};
use crate::{LedgerError, Result, SyncMode};

/// How long a journal that could not roll for want of descriptors or space waits before it
/// tries again.
const ROLL_RETRY: Duration = Duration::from_secs(1);

thread_local! {
    /// Set on the flusher threads: they may wait on the disk, an appending thread that
    /// runs a group commit itself (`sync = never`) may not.
    static FLUSHER_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Called by each flusher thread as it starts.
pub(super) fn mark_flusher_thread() {
    FLUSHER_THREAD.with(|f| f.set(true));
}

fn in_flusher_thread() -> bool {
    FLUSHER_THREAD.with(|f| f.get())
}

/// How often a journal write refused for want of space is tried again.
const JOURNAL_FULL_RETRY: Duration = Duration::from_millis(250);

impl Flusher {
    pub(super) fn sync(&mut self) -> Result<()> {
        let t0 = Instant::now();
        self.jf
            .file
            .sync_data()
            .map_err(|e| LedgerError::io("fdatasync", &self.jf.path, e))?;
        self.sh.counters.syncs.record(t0.elapsed());
        self.last_sync = Instant::now();
        self.unsynced = false;
        self.refs_unsynced = None;
        Ok(())
    }

    /// Starts the next journal file and, once enough journal has built up
    /// (or `checkpoint`), hands the previous files to the checkpointer.
    ///
    /// A checkpoint costs one fdatasync per segment written since the previous
    /// one, so it waits until the journal behind it amounts to
    /// `checkpoint_bytes_per_topic` per such topic (at least one journal file,
    /// at most `checkpoint_interval`): 1,000 busy topics then cost 1,000
    /// fsyncs per 256 MB of journal, not per 64 MiB file.
    pub(super) fn rotate(&mut self, checkpoint: bool) -> Result<()> {
        if self.unsynced && self.sh.cfg.sync != SyncMode::Never {
            self.sync()?;
        }
        if self.roll_retry_at.is_some_and(|t| Instant::now() < t) {
            return Ok(());
        }
        let t0 = Instant::now();
        let next = match open_journal(&self.sh, self.jf.seq + 1) {
            Ok(next) => next,
            // Out of descriptors: the current file grows past its size until one is free
            // (recovery reads a journal file of any length). Failing here stopped every write
            // of the backend for good, for a condition that passes.
            // Out of space, likewise: the current file may have room left, and if not its
            // writes wait for space (`write_journal`).
            Err(e) if e.is_out_of_descriptors() || e.is_storage_full() => {
                if self.roll_retry_at.is_none() {
                    tracing::error!(
                        seq = self.jf.seq + 1,
                        error = %e,
                        "cannot open the next journal file; the current one grows until it can"
                    );
                }
                self.roll_retry_at = Some(Instant::now() + ROLL_RETRY);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if self.roll_retry_at.take().is_some() {
            tracing::info!(seq = next.seq, "the journal rolls again");
        }
        let took = t0.elapsed();
        if took >= SLOW_IO {
            // Appends wait behind it: the rename and the directory fsync can
            // queue behind the file system's journal commit.
            tracing::warn!(
                seq = next.seq,
                ms = took.as_millis() as u64,
                "opening the next journal file was slow"
            );
        }
        tracing::debug!(
            seq = next.seq,
            ms = took.as_millis() as u64,
            "journal file started"
        );
        self.ckpt_bytes += self.jf.offset;
        self.jf = next;
        self.declared.clear();
        self.last_rotate = Instant::now();
        let cfg = &self.sh.cfg;
        let enough = (self.dirty.len() as u64)
            .saturating_mul(cfg.checkpoint_bytes_per_topic)
            .max(cfg.journal_file_bytes);
        if !(checkpoint
            || self.ckpt_bytes >= enough
            || self.last_ckpt.elapsed() >= cfg.checkpoint_interval)
        {
            return Ok(());
        }
        self.ckpt_bytes = 0;
        self.last_ckpt = Instant::now();
        let topics: Vec<_> = self.dirty.drain().map(|(_, t)| t).collect();
        let mut p = self.sh.ckpt.lock();
        p.upto = self.jf.seq;
        p.topics.extend(topics);
        p.requested = true;
        self.sh.ckpt_cv.notify_all();
        Ok(())
    }

    /// Writes the encoded group at the journal's end. Out of space (a journal file that
    /// could not be preallocated, or grew because none could be opened), a flusher thread
    /// writes the same bytes at the same offset again until they fit, so a torn attempt
    /// leaves nothing behind that a later group would not overwrite, and no append
    /// fails: appends, cursor updates and trims wait in the queue meanwhile (the broker
    /// refuses new writes while its disk is full, see [`crate::disk`]). Before, the
    /// first failed write stopped the backend's writes for good.
    ///
    /// Returns whether it waited for space.
    fn write_journal(&mut self) -> Result<bool> {
        let mut waiting: Option<Instant> = None;
        loop {
            let e = match self.jf.file.write_all_at(&self.buf, self.jf.offset) {
                Ok(()) => {
                    if let Some(t0) = waiting {
                        tracing::warn!(
                            seq = self.jf.seq,
                            waited_ms = t0.elapsed().as_millis() as u64,
                            "the journal is written again"
                        );
                    }
                    return Ok(waiting.is_some());
                }
                Err(e) => LedgerError::io("write", &self.jf.path, e),
            };
            if !e.is_storage_full() || !in_flusher_thread() || self.sh.queue.lock().shutdown {
                return Err(e);
            }
            crate::disk::note_storage_full();
            if waiting.is_none() {
                tracing::error!(seq = self.jf.seq, error = %e,
                    "the journal cannot be written for want of space; appends wait until space is free");
                waiting = Some(Instant::now());
            }
            std::thread::sleep(JOURNAL_FULL_RETRY);
        }
    }

    /// Hands a batch back to the queue's front for a flusher thread (the appending thread
    /// that ran it found the journal out of space, and must not wait on the disk). Its
    /// topics' declarations were not written: they are made again.
    fn requeue(&mut self, reqs: Vec<Req>) {
        crate::disk::note_storage_full();
        self.declared.clear();
        let mut q = self.sh.queue.lock();
        for r in reqs.into_iter().rev() {
            q.bytes += r.size();
            q.reqs.push_front(r);
        }
        self.sh.queue_cv.notify_one();
    }

    pub(super) fn fail_all(&mut self, reqs: Vec<Req>, e: LedgerError) {
        // Nothing more is synced once the journal failed.
        self.refs_unsynced = None;
        for r in reqs {
            r.fail(e.clone());
        }
        stop_accepting(&self.sh, e);
    }

    /// Groups the batch's entries by (topic, ledger) and picks the chunks
    /// that are written once, straight to their segment: `sync = always`, at
    /// least `direct_write_bytes` of data, and the topic's only chunk in this
    /// batch (so a torn write can only cut the topic's last ledger). Across
    /// a rollover a power loss can still keep a newer ledger's entries while
    /// an earlier ledger's unacknowledged tail is cut (its bytes had not
    /// reached the disk): nothing acknowledged is lost.
    pub(super) fn plan(&mut self, reqs: &[Req]) -> Plan {
        let mut chunks: Vec<Chunk> = Vec::new();
        // Reused across group commits (a thousand topics would otherwise
        // regrow them every time).
        let index = &mut self.chunk_index;
        let per_topic = &mut self.chunks_per_topic;
        index.clear();
        per_topic.clear();
        let mut slot = Vec::with_capacity(reqs.len());
        let mut next = vec![usize::MAX; reqs.len()];
        for (i, r) in reqs.iter().enumerate() {
            let Req::Entry {
                topic,
                ledger,
                data,
                ..
            } = r
            else {
                slot.push(None);
                continue;
            };
            let c = *index.entry((topic.id, *ledger)).or_insert_with(|| {
                *per_topic.entry(topic.id).or_default() += 1;
                chunks.push(Chunk {
                    topic: topic.clone(),
                    ledger: *ledger,
                    first: i,
                    last: i,
                    count: 0,
                    bytes: 0,
                    direct: false,
                    placed: None,
                    result: Ok(()),
                });
                chunks.len() - 1
            });
            let ch = &mut chunks[c];
            if ch.count > 0 {
                next[ch.last] = i;
            }
            ch.last = i;
            ch.count += 1;
            ch.bytes += data.len();
            slot.push(Some(c));
        }
        let min = self.sh.cfg.direct_write_bytes;
        if self.sh.cfg.sync == SyncMode::Always && min > 0 {
            for c in &mut chunks {
                c.direct = c.bytes >= min && per_topic[&c.topic.id] == 1;
            }
        }
        Plan { chunks, slot, next }
    }

    /// The write-once path: writes each direct chunk to its segment. A
    /// journal reference never reaches the disk before the bytes it points
    /// at, so the segments are synced first, and the references written
    /// after:
    ///
    /// * pipelined (`defer`, a non-zero reference sync window): the syncs run
    ///   in [`commit_round`](super::commit::commit_round), after this group's
    ///   other work, so one thread's segment sync overlaps the other's next
    ///   group commit; the chunks are returned, and their references go into
    ///   a later group's journal records ([`Flusher::take_synced_refs`]);
    /// * serial (a zero window: every reference synced before the appends
    ///   resolve): synced here, and referenced by this group's records.
    pub(super) fn write_direct(
        &mut self,
        reqs: &[Req],
        plan: &mut Plan,
        defer: bool,
    ) -> Vec<DirectSync> {
        let mut direct: Vec<(usize, DirectSync)> = Vec::new();
        for (ci, c) in plan.chunks.iter_mut().enumerate() {
            if !c.direct {
                continue;
            }
            self.hdrs.clear();
            self.recs.clear();
            let mut len = 0u64;
            for (entry, ts, data, crc) in chunk_entries(reqs, &plan.next, c.first) {
                self.hdrs
                    .push(format::segment_header(entry, ts, data.len(), crc));
                let n = (format::HEADER + format::SEG_FIXED + data.len()) as u64;
                self.recs.push(FramedRecord {
                    offset: len,
                    len: n,
                    ts,
                    data_len: data.len() as u64,
                });
                len += n;
            }
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(2 * c.count);
            for ((_, _, data, _), h) in chunk_entries(reqs, &plan.next, c.first).zip(&self.hdrs) {
                slices.push(IoSlice::new(h));
                slices.push(IoSlice::new(data));
            }
            let (offset, end, file, path, new_file) =
                match place_direct(&self.sh, c, &mut slices, &self.recs) {
                    Ok(placed) => placed,
                    Err(e) => {
                        // Through the journal instead, as a small chunk goes: its
                        // segment takes the records into its write-behind buffer.
                        write_failed(&c.topic, &e);
                        c.direct = false;
                        continue;
                    }
                };
            self.dirty.insert(c.topic.id, c.topic.clone());
            let Req::Entry { entry, .. } = &reqs[c.first] else {
                unreachable!("chunks hold entries")
            };
            let mut idx = Vec::with_capacity(c.count);
            let mut i = c.first;
            while i != usize::MAX {
                idx.push(i);
                i = plan.next[i];
            }
            let d = DirectSync {
                topic: c.topic.clone(),
                ledger: c.ledger,
                file,
                path,
                end,
                new_file,
                entries: c.count as u64,
                bytes: len,
                segref: segref_body(c.topic.id, c.ledger, *entry, c.count as u64, offset, len),
                reqs: idx,
            };
            direct.push((ci, d));
        }
        if defer {
            // Referenced by a later group commit, once `commit_round` synced
            // them (`placed` stays unset: this group's records skip them).
            for (_, d) in &direct {
                *self.inflight.entry(d.topic.id).or_default() += 1;
            }
            return direct.into_iter().map(|(_, d)| d).collect();
        }
        let mut segs = Vec::new();
        for (ci, d) in direct {
            let c = &mut plan.chunks[ci];
            match book_direct(&self.sh, &d, sync_direct(&self.sh, &d, &mut segs)) {
                // Referenced by this group's records.
                Ok(()) => c.placed = Some(d.segref),
                Err(e) => c.result = Err(e),
            }
        }
        Vec::new()
    }

    /// Takes the references of write-once chunks synced since the last
    /// call (see [`commit_round`](super::commit::commit_round)), for the next
    /// journal records.
    pub(super) fn take_synced_refs(&mut self) {
        let got = std::mem::take(&mut *self.sh.synced_refs.lock());
        for r in got {
            if let Some(n) = self.inflight.get_mut(&r.topic.id) {
                *n -= 1;
                if *n == 0 {
                    self.inflight.remove(&r.topic.id);
                }
            }
            if let Some(body) = r.segref {
                self.refs_out.push((r.topic, body));
            }
        }
    }

    /// A topic's records go into the journal after the references of its
    /// earlier write-once chunks, or the declaration of a topic not yet
    /// declared in this journal file.
    pub(super) fn declare(&mut self, seed: u32, t: &TopicShared) {
        if self.declared.insert(t.id) {
            let mut h = vec![K_DECLARE];
            h.extend_from_slice(&t.id.to_le_bytes());
            format::put_record(&mut self.buf, seed, &[&h, t.name.as_bytes()]);
        }
    }

    pub(super) fn encode(&mut self, reqs: &[Req], plan: &Plan) {
        let seed = format::journal_seed(self.jf.seq);
        self.buf.clear();
        self.buf_needs_sync = false;
        let refs = std::mem::take(&mut self.refs_out);
        for (t, body) in &refs {
            self.declare(seed, t);
            format::put_record(&mut self.buf, seed, &[body]);
        }
        self.refs_out = refs;
        for (i, r) in reqs.iter().enumerate() {
            // An entry of a direct chunk: the chunk's first entry stands for
            // all of them with one reference; a failed chunk leaves nothing.
            let mut segref = None;
            if let Some(ci) = plan.slot[i] {
                let c = &plan.chunks[ci];
                if c.direct {
                    match &c.placed {
                        Some(h) if c.first == i => segref = Some(h),
                        _ => continue,
                    }
                }
            }
            if let Some(t) = r.topic() {
                self.declare(seed, t);
            }
            if let Some(h) = segref {
                format::put_record(&mut self.buf, seed, &[h]);
                continue;
            }
            match r {
                Req::Entry {
                    topic,
                    ledger,
                    entry,
                    ts,
                    data,
                    crc,
                    ..
                } => {
                    self.buf_needs_sync = true;
                    let mut h = [0u8; 29];
                    h[0] = K_ENTRY;
                    h[1..5].copy_from_slice(&topic.id.to_le_bytes());
                    h[5..13].copy_from_slice(&ledger.to_le_bytes());
                    h[13..21].copy_from_slice(&entry.to_le_bytes());
                    h[21..29].copy_from_slice(&ts.to_le_bytes());
                    format::put_record_crc(&mut self.buf, seed, &h, data, *crc);
                }
                Req::Cursor {
                    topic,
                    name,
                    snapshot,
                    ..
                } => {
                    self.buf_needs_sync = true;
                    let mut h = Vec::with_capacity(7 + name.len());
                    h.push(if snapshot.is_some() {
                        K_CURSOR
                    } else {
                        K_CURSOR_DELETE
                    });
                    h.extend_from_slice(&topic.id.to_le_bytes());
                    h.extend_from_slice(&(name.len() as u16).to_le_bytes());
                    h.extend_from_slice(name.as_bytes());
                    let snap: &[u8] = snapshot.as_deref().unwrap_or(&[]);
                    format::put_record(&mut self.buf, seed, &[&h, snap]);
                }
                Req::Trim {
                    topic, first_kept, ..
                } => {
                    self.buf_needs_sync = true;
                    let mut h = [0u8; 13];
                    h[0] = K_TRIM;
                    h[1..5].copy_from_slice(&topic.id.to_le_bytes());
                    h[5..13].copy_from_slice(&first_kept.to_le_bytes());
                    format::put_record(&mut self.buf, seed, &[&h]);
                }
                Req::Barrier { .. } => {}
            }
        }
    }

    /// Runs one group commit. The caller holds the flusher's lock and took
    /// `reqs` from the queue under it, so batches run in queue order.
    pub fn process(&mut self, reqs: Vec<Req>) {
        if let Some(e) = self.sh.queue.lock().failed.clone() {
            // Nothing more is written or synced (and an idle thread waits).
            self.sh.synced_refs.lock().clear();
            self.refs_out.clear();
            self.inflight.clear();
            self.refs_unsynced = None;
            for r in reqs {
                r.fail(e.clone());
            }
            return;
        }
        let cfg = self.sh.cfg.clone();
        if let SyncMode::Interval(ms) = cfg.sync
            && self.unsynced
            && self.last_sync.elapsed() >= Duration::from_millis(ms)
            && let Err(e) = self.sync()
        {
            return self.fail_all(reqs, e);
        }
        self.take_synced_refs();
        let rotate_due =
            self.jf.offset > 0 && self.last_rotate.elapsed() >= cfg.checkpoint_interval;
        if reqs.is_empty() && self.refs_out.is_empty() {
            let r = if rotate_due {
                self.rotate(false)
            } else if self.refs_unsynced.is_some() {
                self.sync()
            } else {
                Ok(())
            };
            if let Err(e) = r {
                self.fail_all(reqs, e);
            }
            return;
        }
        let mut plan = self.plan(&reqs);
        let defer = !cfg.reference_sync_window.is_zero();
        let mut direct = Vec::new();
        if plan.chunks.iter().any(|c| c.direct) {
            direct = self.write_direct(&reqs, &mut plan, defer);
        }
        if plan
            .chunks
            .iter()
            .any(|c| !c.direct && self.inflight.contains_key(&c.topic.id))
        {
            // (After the write-once chunks: one that could not be written goes
            // through the journal too.) A topic's journal-path entries must not become durable before
            // its earlier write-once entries are synced in their segment
            // (after a power loss recovery would find the journal resuming
            // past entries the segment lacks): the groups written so far are
            // made durable first (a failed segment sync has marked its topic
            // refusing service by then, see `commit_round`).
            commit_written(&self.sh);
            self.take_synced_refs();
        }
        self.encode(&reqs, &plan);
        if self.jf.offset > 0
            && (rotate_due || self.jf.offset + self.buf.len() as u64 > cfg.journal_file_bytes)
        {
            if let Err(e) = self.rotate(false) {
                return self.fail_all(reqs, e);
            }
            self.encode(&reqs, &plan);
        }
        if !self.buf.is_empty() {
            let t0 = Instant::now();
            let waited = match self.write_journal() {
                Ok(waited) => waited,
                Err(e) if e.is_storage_full() && !in_flusher_thread() => {
                    return self.requeue(reqs);
                }
                Err(e) => return self.fail_all(reqs, e),
            };
            let took = t0.elapsed();
            if took >= SLOW_IO && !waited {
                // A write into the page cache that blocks (dirty-page
                // throttling, the file system's journal) delays every append.
                tracing::warn!(
                    bytes = self.buf.len(),
                    ms = took.as_millis() as u64,
                    "a journal write was slow"
                );
            }
            self.jf.offset += self.buf.len() as u64;
            self.unsynced = true;
            self.refs_out.clear();
            let c = &self.sh.counters;
            c.batches.fetch_add(1, Ordering::Relaxed);
            c.journal_bytes
                .fetch_add(self.buf.len() as u64, Ordering::Relaxed);
        }
        let mut journal = None;
        if cfg.sync == SyncMode::Always && !self.buf.is_empty() {
            // Write-once references alone may wait (their entries are
            // synced in the segment already), up to the window.
            let window = cfg.reference_sync_window;
            // With nothing queued (only references to write), now.
            let due = self.buf_needs_sync
                || reqs.is_empty()
                || window.is_zero()
                || self.refs_unsynced.is_some_and(|t| t.elapsed() >= window);
            if due {
                // `commit_round` syncs everything written so far.
                self.refs_unsynced = None;
                journal = Some((self.jf.seq, self.jf.file.clone(), self.jf.path.clone()));
            } else {
                self.refs_unsynced.get_or_insert_with(Instant::now);
            }
        }
        let mut trash = Vec::new();
        let results = self.apply(&reqs, &mut plan, &mut trash);
        if cfg.sync == SyncMode::Always {
            // Completed by `commit_round` after the sync, in this order
            // (every group goes there, so none overtakes an earlier one).
            self.sh.written.lock().push_back(Written {
                reqs,
                results,
                journal,
                trash,
                direct,
            });
            return;
        }
        delete_later(&self.sh, trash);
        for (r, res) in reqs.into_iter().zip(results) {
            r.complete(res);
        }
    }

    /// Writes the journal-path entries to their segments and applies
    /// metadata; the result per request.
    /// Files of trimmed ledgers go to `trash`, to be deleted once the trim is durable.
    pub(super) fn apply(
        &mut self,
        reqs: &[Req],
        plan: &mut Plan,
        trash: &mut Vec<PathBuf>,
    ) -> Vec<Result<()>> {
        let mut entries = 0u64;
        for r in reqs {
            match r {
                Req::Entry { .. } => entries += 1,
                Req::Cursor {
                    topic,
                    name,
                    snapshot,
                    ..
                } => {
                    self.sh.topic_meta_entry(&topic.name, |m| match snapshot {
                        Some(s) => {
                            m.cursors.insert(name.clone(), s.clone());
                        }
                        None => {
                            m.cursors.remove(name);
                        }
                    });
                }
                Req::Trim {
                    topic,
                    first_kept,
                    ids,
                    ..
                } => {
                    self.sh.topic_meta_entry(&topic.name, |m| {
                        m.first_kept = m.first_kept.max(*first_kept);
                        m.ledgers.retain(|&l, _| l >= *first_kept);
                    });
                    let mut f = topic.files.lock();
                    for id in ids {
                        if let Some(seg) = f.ledgers.remove(id) {
                            trash.push(seg.path.with_extension("idx"));
                            trash.push(seg.path.clone());
                        }
                    }
                }
                Req::Barrier { .. } => {}
            }
        }
        self.sh
            .counters
            .entries
            .fetch_add(entries, Ordering::Relaxed);
        let defer = self.sh.cfg.sync == SyncMode::Always;
        for c in plan.chunks.iter_mut().filter(|c| !c.direct) {
            c.result = write_chunk(&self.sh, c, chunk_entries(reqs, &plan.next, c.first), defer)
                .map(|due| {
                    if due {
                        self.deferred.push((c.topic.clone(), c.ledger));
                    }
                });
            self.dirty
                .entry(c.topic.id)
                .or_insert_with(|| c.topic.clone());
        }
        plan.slot
            .iter()
            .map(|s| match s {
                Some(ci) => plan.chunks[*ci].result.clone(),
                None => Ok(()),
            })
            .collect()
    }
}

/// A [`K_SEGREF`] record's body.
pub(super) fn segref_body(
    topic: u32,
    ledger: u64,
    first: u64,
    count: u64,
    offset: u64,
    len: u64,
) -> [u8; SEGREF_LEN] {
    let mut h = [0u8; SEGREF_LEN];
    h[0] = K_SEGREF;
    h[1..5].copy_from_slice(&topic.to_le_bytes());
    h[5..13].copy_from_slice(&ledger.to_le_bytes());
    h[13..21].copy_from_slice(&first.to_le_bytes());
    h[21..29].copy_from_slice(&count.to_le_bytes());
    h[29..37].copy_from_slice(&offset.to_le_bytes());
    h[37..45].copy_from_slice(&len.to_le_bytes());
    h
}

/// The segment of `ledger`, created on first use. Entering a new ledger
/// (rollover) hands the older segments' write-behind to the OS first, so a
/// topic's files are written in position order.
pub(super) fn segment_for<'a>(
    sh: &BackendShared,
    t: &TopicShared,
    f: &'a mut TopicFiles,
    ledger: u64,
) -> Result<&'a mut Segment> {
    if let Some(e) = &f.corrupt {
        return Err(e.clone());
    }
    if let std::collections::btree_map::Entry::Vacant(v) = f.ledgers.entry(ledger) {
        ensure_dir(sh, &t.dir)?;
        v.insert(Box::new(Segment::create(&t.dir, ledger)?));
        f.next_ledger_hint = f.next_ledger_hint.max(ledger + 1);
        let older: Vec<u64> = f
            .ledgers
            .range(..ledger)
            .filter(|(_, s)| !s.pending.is_empty())
            .map(|(&id, _)| id)
            .collect();
        for id in older {
            let seg = f.ledgers.get_mut(&id).expect("listed");
            if let Err(e) = seg.flush_pending() {
                write_failed(t, &e);
            }
        }
    }
    Ok(f.ledgers.get_mut(&ledger).expect("just inserted"))
}

/// Journal path: frames a chunk's records straight into its segment's
/// write-behind buffer (the journal already holds them). A full buffer is
/// written at once, or with `defer` left to the caller: returns whether it
/// is due.
pub(super) fn write_chunk<'a>(
    sh: &BackendShared,
    c: &Chunk,
    entries: impl Iterator<Item = (u64, u64, &'a Bytes, u32)>,
    defer: bool,
) -> Result<bool> {
    let mut f = match c.topic.files.try_lock() {
        Some(f) => f,
        None => {
            // Held by a reader or the checkpoint thread; every append of
            // this group commit waits with us.
            let t0 = Instant::now();
            let f = c.topic.files.lock();
            let took = t0.elapsed();
            if took >= SLOW_IO {
                tracing::debug!(
                    topic = %c.topic.name,
                    ms = took.as_millis() as u64,
                    "waited for a topic's files"
                );
            }
            f
        }
    };
    let seg = segment_for(sh, &c.topic, &mut f, c.ledger)?;
    for (entry, ts, data, crc) in entries {
        let at = seg.len;
        let before = seg.pending.len();
        format::put_segment_record(&mut seg.pending, entry, ts, data, crc);
        let n = (seg.pending.len() - before) as u64;
        seg.push(at, ts, data.len() as u64, n);
    }
    if defer {
        return Ok(seg.flush_due());
    }
    if let Err(e) = flush_if_full(sh, &c.topic, c.ledger, seg) {
        write_failed(&c.topic, &e);
    }
    Ok(false)
}

/// A segment's write-behind buffer could not be written (no space, no descriptor): its
/// bytes stay in the buffer, where reads find them and the next flush or checkpoint tries
/// again, and the journal keeps them until a checkpoint has synced them. A failed
/// `pwrite` leaves nothing the page cache might lose later (unlike a failed sync, after
/// which the topic refuses service), so the topic goes on serving.
pub(super) fn write_failed(t: &TopicShared, e: &LedgerError) {
    if e.is_storage_full() {
        crate::disk::note_storage_full();
    }
    static LAST: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if last.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
        *last = Some(Instant::now());
        tracing::error!(topic = %t.name, error = %e,
            "a segment write failed; its bytes stay buffered (and in the journal) and are written again later");
    }
}

/// Writes a segment's write-behind buffer to its file if it is full, and
/// hands the write-out that became due to the checkpoint thread (the
/// syscall can wait on the device queue, and the flusher's time is every
/// producer's latency).
pub(super) fn flush_if_full(
    sh: &BackendShared,
    topic: &Arc<TopicShared>,
    ledger: u64,
    seg: &mut Segment,
) -> Result<()> {
    if !seg.flush_when_full()? {
        return Ok(());
    }
    if let Some(wb) = seg.take_writeback() {
        // Everything below this write-out's start was handed to the disk a
        // step ago: what lies a window behind it may leave the page cache.
        let uncache = seg.take_cache_drop(wb.from(), sh.page_cache_keep(topic.id));
        hand_to_checkpoint(sh, std::iter::once(wb).chain(uncache));
    }
    let budget = sh.cfg.max_open_segment_files;
    if budget > 0
        && segment::open_files() > budget
        && let Some(file) = seg.open_handle()
    {
        sync_and_close_later(
            sh,
            SyncClose {
                topic: topic.clone(),
                ledger,
                file,
                path: seg.path.clone(),
                written: seg.written,
            },
        );
    }
    Ok(())
}

/// Write-once path: writes a chunk's records to its segment file (after
/// the segment's write-behind). Returns (offset, segment end, file, path,
/// whether the file is new) for the sync that follows.
pub(super) fn place_direct(
    sh: &BackendShared,
    c: &Chunk,
    slices: &mut [IoSlice<'_>],
    recs: &[FramedRecord],
) -> Result<(u64, u64, Arc<File>, PathBuf, bool)> {
    let mut f = c.topic.files.lock();
    let seg = segment_for(sh, &c.topic, &mut f, c.ledger)?;
    // A failed write left nothing the segment counts (its end is where it was, and
    // the next write goes there): the caller sends the chunk through the journal.
    let base = seg.write_direct(slices)?;
    debug_assert_eq!(base, seg.len, "write-behind flushed before the chunk");
    for &FramedRecord {
        offset: at,
        len: n,
        ts,
        data_len: len,
    } in recs
    {
        seg.push(base + at, ts, len, n);
    }
    Ok((base, seg.len, seg.file()?, seg.path.clone(), seg.new_file))
}
