//! The embedded backend: the standalone broker's metadata, in process, durable under a directory.
//!
//! Durability: every committed transaction is one line of the write-ahead log (`wal`), written
//! and fsynced *before* it is applied to memory, so nothing a caller or a watcher has seen can be
//! lost on `kill -9`. Each line is `<crc32 hex> <json>\n`; a torn last line (crash mid-append) is
//! cut off at recovery, a bad line followed by a record that belongs after it is reported as
//! corruption. The log is written into space allocated and zero-filled ahead of it (an
//! overwrite's fdatasync is cheaper). Every [`EmbeddedOptions::snapshot_every`] records, and at
//! least as many as there are keys, the state is written to `snapshot` (temp file, fsync,
//! rename, fsync the directory) and the log starts again at its beginning, over its old records
//! (recovery skips what the snapshot holds).
//!
//! Ephemeral keys are bound to this process: leases live in memory only, and recovery drops every
//! key that was bound to a lease (and writes a fresh snapshot, so the drop is itself durable).
//! A `LOCK` file held with an OS lock keeps a second process out of the directory.
//!
//! The log, the snapshot and recovery are in `disk`; the state they hold, in `state`.

mod disk;
mod state;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::{MetadataError, Result};
use crate::store::{
    EventKind, KeyValue, LeaseGrant, LeaseId, MetadataStore, Op, OpResult, Revision, Scan, Stat,
    TxnResponse, Versioned, WATCH_CHANNEL, WatchBatch, WatchEvent, WatchStream, validate_ops,
    validate_prefix,
};

use disk::{Mutation, Record, encode_line, hex, recover, write_snapshot};
use state::{Entry, HistItem, LeaseState, State};

/// Tuning of the embedded store.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// How many committed transactions are kept in memory so that a watch can resume from an
    /// older revision. A watcher further behind gets [`MetadataError::Compacted`].
    pub history: usize,
    /// Write a snapshot and truncate the log after this many log records.
    pub snapshot_every: usize,
    /// fsync every commit (the default). Off only for throwaway stores (tests, benchmarks).
    pub sync: bool,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            history: 10_000,
            snapshot_every: 10_000,
            sync: true,
        }
    }
}

/// The embedded [`MetadataStore`]. See the module docs for the on-disk format.
#[derive(Debug)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
    _reaper: DropGuard,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    /// The newest committed revision; watch feeders wait on it.
    head: watch::Sender<Revision>,
    /// Wakes the lease reaper when a lease with an earlier deadline appears.
    reaper_wake: Arc<Notify>,
    opts: EmbeddedOptions,
    /// Commits waiting for the next group (see [`Inner::commit`]).
    waiting: Mutex<Vec<Waiting>>,
    /// Held by the thread writing a group.
    writer: Mutex<()>,
    /// Log writes made (one fsync each): a group of commits is one.
    writes: std::sync::atomic::AtomicU64,
}

/// A commit waiting for its group's fsync, and where its answer goes.
#[derive(Debug)]
struct Waiting {
    ops: Vec<Op>,
    answer: Arc<Mutex<Option<Result<TxnResponse>>>>,
}

impl EmbeddedStore {
    /// A store that lives in memory only (tests, throwaway brokers). Must be called inside a tokio
    /// runtime (it spawns the lease reaper).
    pub fn in_memory() -> EmbeddedStore {
        Self::start(
            State::empty(None),
            EmbeddedOptions {
                sync: false,
                ..Default::default()
            },
        )
    }

    /// Opens (creating if needed) the durable store under `dir` and recovers it. Must be called
    /// inside a tokio runtime. Fails with [`MetadataError::DirectoryLocked`] if another process
    /// (or another open store of this process) uses the directory.
    pub fn open(dir: impl AsRef<Path>, opts: EmbeddedOptions) -> Result<EmbeddedStore> {
        let state = recover(dir.as_ref())?;
        Ok(Self::start(state, opts))
    }

    fn start(state: State, opts: EmbeddedOptions) -> EmbeddedStore {
        let (head, _) = watch::channel(state.rev);
        let inner = Arc::new(Inner {
            state: Mutex::new(state),
            head,
            reaper_wake: Arc::new(Notify::new()),
            opts,
            waiting: Mutex::new(Vec::new()),
            writer: Mutex::new(()),
            writes: Default::default(),
        });
        let cancel = CancellationToken::new();
        tokio::spawn(reaper(
            Arc::downgrade(&inner),
            inner.reaper_wake.clone(),
            cancel.clone(),
        ));
        EmbeddedStore {
            inner,
            _reaper: cancel.drop_guard(),
        }
    }

    /// The newest committed revision.
    pub fn revision(&self) -> Revision {
        self.inner.state.lock().rev
    }

    /// Log writes made so far, one fsync each (a group of concurrent commits is one).
    pub fn log_writes(&self) -> u64 {
        self.inner.writes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs `f` on the store, on a blocking thread when it may fsync.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let durable = self.inner.opts.sync && self.inner.state.lock().disk.is_some();
        if durable {
            let inner = self.inner.clone();
            tokio::task::spawn_blocking(move || f(&inner))
                .await
                .map_err(|e| MetadataError::Backend(format!("commit task failed: {e}")))?
        } else {
            f(&self.inner)
        }
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        let mut st = self.inner.state.lock();
        st.closed = true;
        // Close the files and release the directory lock now, so the directory can be reopened.
        st.disk = None;
        drop(st);
        self.inner.head.send_modify(|_| {});
    }
}

impl Inner {
    /// Commits `ops`, in a group with the commits waiting beside it: the thread that takes the
    /// writer's lock checks every waiting commit in turn (each against the state the ones before
    /// it leave), writes all their log records and fsyncs once, then applies them to memory and
    /// answers each. One fsync per commit capped the store at the disk's sync rate (about 4k/s
    /// idle, 450/s beside a busy journal), and with it everything built on the store.
    fn commit(&self, ops: Vec<Op>) -> Result<TxnResponse> {
        let answer = Arc::new(Mutex::new(None));
        self.waiting.lock().push(Waiting {
            ops,
            answer: answer.clone(),
        });
        let _writer = self.writer.lock();
        // A group written while this thread waited for the lock may have held this commit.
        if let Some(r) = answer.lock().take() {
            return r;
        }
        let group = std::mem::take(&mut *self.waiting.lock());
        self.commit_group(group);
        answer
            .lock()
            .take()
            .unwrap_or_else(|| Err(MetadataError::Backend("a commit left its group".into())))
    }

    fn commit_group(&self, group: Vec<Waiting>) {
        let mut st = self.state.lock();
        if let Err(e) = st.usable() {
            let why = e.to_string();
            for w in group {
                *w.answer.lock() = Some(Err(MetadataError::Backend(why.clone())));
            }
            return;
        }
        // What the commits staged so far leave each key they touch: the later ones are checked
        // against it, as if the earlier ones were applied.
        let mut staged: HashMap<String, Option<Stat>> = HashMap::new();
        let mut next = st.rev;
        let mut accepted: Vec<(Waiting, Option<Revision>)> = Vec::with_capacity(group.len());
        let mut lines = Vec::new();
        for w in group {
            let checked = w.ops.iter().try_for_each(|op| {
                op.check_against(now(&staged, &st, op.key()).as_ref())?;
                match op {
                    Op::Put {
                        lease: Some(lease), ..
                    } if !st.leases.contains_key(lease) => Err(MetadataError::SessionExpired),
                    _ => Ok(()),
                }
            });
            if let Err(e) = checked {
                *w.answer.lock() = Some(Err(e));
                continue;
            }
            let muts = mutations(&w.ops);
            if muts.is_empty() {
                accepted.push((w, None));
                continue;
            }
            let line = match encode_line(&Record {
                rev: next + 1,
                muts,
            }) {
                Ok(l) => l,
                Err(e) => {
                    *w.answer.lock() = Some(Err(e));
                    continue;
                }
            };
            next += 1;
            for op in &w.ops {
                match op {
                    Op::Put { key, lease, .. } => {
                        let created = now(&staged, &st, key).map_or(next, |s| s.created);
                        staged.insert(
                            key.clone(),
                            Some(Stat {
                                version: next,
                                created,
                                lease: *lease,
                            }),
                        );
                    }
                    Op::Delete { key, .. } => {
                        staged.insert(key.clone(), None);
                    }
                    Op::Check { .. } => {}
                }
            }
            lines.extend_from_slice(&line);
            accepted.push((w, Some(next)));
        }
        if !lines.is_empty()
            && let Some(disk) = st.disk.as_mut()
        {
            if let Err(e) = disk::reserve(disk, lines.len()) {
                // Nothing written: these writes are refused, the store goes on.
                tracing::warn!(error = %e, "the metadata log cannot grow; writes are refused until it can");
                for (w, _) in accepted {
                    let copy = std::io::Error::new(e.kind(), e.to_string());
                    *w.answer.lock() = Some(Err(copy.into()));
                }
                return;
            }
            let res = disk::append(disk, &lines);
            if let Err(e) = res {
                st.failed = Some(e.to_string());
                for (w, _) in accepted {
                    let copy = std::io::Error::new(e.kind(), e.to_string());
                    *w.answer.lock() = Some(Err(copy.into()));
                }
                return;
            }
            disk.wal_records += accepted.iter().filter(|(_, r)| r.is_some()).count();
            self.writes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        for (w, rev) in accepted {
            let resp = match rev {
                Some(rev) => apply(&mut st, &w.ops, rev),
                None => TxnResponse {
                    revision: st.rev,
                    results: vec![OpResult::Check; w.ops.len()],
                },
            };
            *w.answer.lock() = Some(Ok(resp));
        }
        maybe_snapshot(&mut st, self.opts.snapshot_every);
        trim_history(&mut st, self.opts.history);
        let rev = st.rev;
        drop(st);
        self.head.send_replace(rev);
    }

    /// Ends a lease and deletes its keys in one transaction.
    fn end_lease(&self, lease: LeaseId) -> Result<()> {
        let mut st = self.state.lock();
        if st.closed {
            return Ok(());
        }
        let Some(state) = st.leases.remove(&lease) else {
            return Ok(());
        };
        if state.keys.is_empty() {
            return Ok(());
        }
        let ops: Vec<Op> = state
            .keys
            .into_iter()
            .map(|k| Op::delete(k, None))
            .collect();
        st.usable()?;
        commit_locked(&mut st, &ops, self.opts.snapshot_every)?;
        let rev = st.rev;
        trim_history(&mut st, self.opts.history);
        drop(st);
        self.head.send_replace(rev);
        Ok(())
    }
}

/// Key `key` as the commits staged in a group leave it, else as stored.
fn now(staged: &HashMap<String, Option<Stat>>, st: &State, key: &str) -> Option<Stat> {
    match staged.get(key) {
        Some(s) => *s,
        None => st.data.get(key).map(Entry::stat),
    }
}

/// Applies already-checked `ops` at the next revision: log first (fsynced), then memory.
fn commit_locked(st: &mut State, ops: &[Op], snapshot_every: usize) -> Result<TxnResponse> {
    let muts = mutations(ops);
    if muts.is_empty() {
        return Ok(TxnResponse {
            revision: st.rev,
            results: vec![OpResult::Check; ops.len()],
        });
    }
    let rev = st.rev + 1;
    if let Some(disk) = st.disk.as_mut() {
        let line = encode_line(&Record { rev, muts })?;
        if let Err(e) = disk::reserve(disk, line.len()) {
            tracing::warn!(error = %e, "the metadata log cannot grow; writes are refused until it can");
            return Err(e.into());
        }
        let res = disk::append(disk, &line);
        if let Err(e) = res {
            st.failed = Some(e.to_string());
            return Err(e.into());
        }
        disk.wal_records += 1;
    }
    let resp = apply(st, ops, rev);
    maybe_snapshot(st, snapshot_every);
    Ok(resp)
}

/// The log record's mutations of `ops` (none: checks only).
fn mutations(ops: &[Op]) -> Vec<Mutation> {
    let mut muts = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            Op::Put {
                key, value, lease, ..
            } => muts.push(Mutation::Put {
                k: key.clone(),
                v: hex(value),
                l: *lease,
            }),
            Op::Delete { key, .. } => muts.push(Mutation::Delete { k: key.clone() }),
            Op::Check { .. } => {}
        }
    }
    muts
}

/// Applies `ops`, logged at `rev`, to memory.
fn apply(st: &mut State, ops: &[Op], rev: Revision) -> TxnResponse {
    let mut results = Vec::with_capacity(ops.len());
    let mut events = Vec::new();
    for op in ops {
        match op {
            Op::Put {
                key, value, lease, ..
            } => {
                let old = st.data.get(key).cloned();
                if let Some(old_lease) = old.as_ref().and_then(|o| o.lease)
                    && Some(old_lease) != *lease
                    && let Some(l) = st.leases.get_mut(&old_lease)
                {
                    l.keys.remove(key);
                }
                if let Some(l) = lease.and_then(|l| st.leases.get_mut(&l)) {
                    l.keys.insert(key.clone());
                }
                let entry = Entry {
                    value: value.clone(),
                    created: old.as_ref().map_or(rev, |o| o.created),
                    modified: rev,
                    lease: *lease,
                };
                let stat = entry.stat();
                st.data.insert(key.clone(), entry);
                results.push(OpResult::Put(stat));
                events.push(WatchEvent {
                    kind: if old.is_some() {
                        EventKind::Modified
                    } else {
                        EventKind::Created
                    },
                    key: key.clone(),
                    value: Some(value.clone()),
                    stat: Some(stat),
                });
            }
            Op::Delete { key, .. } => {
                if let Some(old) = st.data.remove(key)
                    && let Some(l) = old.lease.and_then(|l| st.leases.get_mut(&l))
                {
                    l.keys.remove(key);
                }
                results.push(OpResult::Delete);
                events.push(WatchEvent {
                    kind: EventKind::Deleted,
                    key: key.clone(),
                    value: None,
                    stat: None,
                });
            }
            Op::Check { .. } => results.push(OpResult::Check),
        }
    }
    st.rev = rev;
    st.history.push_back(Arc::new(HistItem {
        revision: rev,
        events,
    }));
    TxnResponse {
        revision: rev,
        results,
    }
}

/// Writes a snapshot (and truncates the log) once the log holds `every` records and at least
/// as many as the store has keys: a snapshot writes every key, and taken every `every` records
/// of a store with hundreds of thousands of keys (the transaction headers of a busy
/// coordinator) it stalled every commit behind it for a fifth of a second. So the log costs at
/// most twice the state's writing, and a recovery replays at most as many records as keys.
fn maybe_snapshot(st: &mut State, every: usize) {
    let keys = st.data.len();
    let due = st
        .disk
        .as_ref()
        .is_some_and(|d| d.wal_records >= every.max(keys));
    if due && let Err(e) = write_snapshot(st) {
        // The log still holds everything; a failed snapshot only leaves it longer.
        tracing::warn!(error = %e, "metadata snapshot failed; keeping the write-ahead log");
    }
}

fn trim_history(st: &mut State, keep: usize) {
    while st.history.len() > keep.max(1) {
        if let Some(item) = st.history.pop_front() {
            st.compacted = item.revision;
        }
    }
}

#[async_trait]
impl MetadataStore for EmbeddedStore {
    fn backend_name(&self) -> &'static str {
        "embedded"
    }

    fn writes_made(&self) -> u64 {
        self.log_writes()
    }

    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        crate::store::validate_key(key)?;
        let st = self.inner.state.lock();
        if st.closed {
            return Err(MetadataError::Closed);
        }
        Ok(st.data.get(key).map(|e| Versioned {
            value: e.value.clone(),
            stat: e.stat(),
        }))
    }

    async fn scan_prefix(&self, prefix: &str) -> Result<Scan> {
        validate_prefix(prefix)?;
        let st = self.inner.state.lock();
        if st.closed {
            return Err(MetadataError::Closed);
        }
        let entries = st
            .data
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, e)| KeyValue {
                key: k.clone(),
                value: e.value.clone(),
                stat: e.stat(),
            })
            .collect();
        Ok(Scan {
            revision: st.rev,
            entries,
        })
    }

    async fn txn(&self, ops: Vec<Op>) -> Result<TxnResponse> {
        validate_ops(&ops)?;
        self.run(move |inner| inner.commit(ops)).await
    }

    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream> {
        validate_prefix(prefix)?;
        let start = {
            let st = self.inner.state.lock();
            if st.closed {
                return Err(MetadataError::Closed);
            }
            let from = if from_revision == 0 {
                st.rev + 1
            } else {
                from_revision
            };
            if from <= st.compacted {
                return Err(MetadataError::Compacted {
                    requested: from,
                    compacted: st.compacted,
                });
            }
            from
        };
        let (tx, rx) = mpsc::channel(WATCH_CHANNEL);
        let cancel = CancellationToken::new();
        let head = self.inner.head.subscribe();
        tokio::spawn(feed_watch(
            Arc::downgrade(&self.inner),
            head,
            prefix.to_string(),
            start,
            tx,
            cancel.clone(),
        ));
        Ok(WatchStream::new(rx, Some(cancel.drop_guard())))
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseGrant> {
        if ttl.is_zero() {
            return Err(MetadataError::Backend("lease TTL must be positive".into()));
        }
        let mut st = self.inner.state.lock();
        st.usable()?;
        let id = st.next_lease;
        st.next_lease += 1;
        st.leases.insert(
            id,
            LeaseState {
                ttl,
                deadline: Instant::now() + ttl,
                keys: BTreeSet::new(),
            },
        );
        drop(st);
        self.inner.reaper_wake.notify_one();
        Ok(LeaseGrant { id, ttl })
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Option<Duration>> {
        let mut st = self.inner.state.lock();
        if st.closed {
            return Err(MetadataError::Closed);
        }
        let now = Instant::now();
        Ok(st
            .leases
            .get_mut(&lease)
            .filter(|l| l.deadline > now)
            .map(|l| {
                l.deadline = now + l.ttl;
                l.ttl
            }))
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        self.run(move |inner| inner.end_lease(lease)).await
    }
}

/// Feeds one watcher from the in-memory history, waking on every new revision.
async fn feed_watch(
    inner: Weak<Inner>,
    mut head: watch::Receiver<Revision>,
    prefix: String,
    mut next: Revision,
    tx: mpsc::Sender<Result<WatchBatch>>,
    cancel: CancellationToken,
) {
    loop {
        // Mark the current head as seen *before* reading the state, so a commit that lands
        // after the read wakes us below.
        head.borrow_and_update();
        let batches = {
            let Some(inner) = inner.upgrade() else { return };
            let st = inner.state.lock();
            if st.closed {
                return;
            }
            if next <= st.compacted {
                let err = MetadataError::Compacted {
                    requested: next,
                    compacted: st.compacted,
                };
                drop(st);
                let _ = tx.try_send(Err(err));
                return;
            }
            let from = st.history.partition_point(|h| h.revision < next);
            let batches: Vec<WatchBatch> = st
                .history
                .range(from..)
                .filter_map(|h| {
                    let events: Vec<WatchEvent> = h
                        .events
                        .iter()
                        .filter(|e| e.key.starts_with(&prefix))
                        .cloned()
                        .collect();
                    (!events.is_empty()).then_some(WatchBatch {
                        revision: h.revision,
                        events,
                    })
                })
                .collect();
            next = next.max(st.rev + 1);
            batches
        };
        for batch in batches {
            tokio::select! {
                _ = cancel.cancelled() => return,
                sent = tx.send(Ok(batch)) => if sent.is_err() { return },
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = head.changed() => if changed.is_err() { return },
        }
    }
}

/// Expires leases whose deadline passed, deleting their keys.
async fn reaper(inner: Weak<Inner>, wake: Arc<Notify>, cancel: CancellationToken) {
    loop {
        let next_deadline = {
            let Some(inner) = inner.upgrade() else { return };
            let now = Instant::now();
            let expired: Vec<LeaseId> = {
                let st = inner.state.lock();
                if st.closed {
                    return;
                }
                st.leases
                    .iter()
                    .filter(|(_, l)| l.deadline <= now)
                    .map(|(id, _)| *id)
                    .collect()
            };
            for lease in expired {
                tracing::debug!(lease, "embedded metadata lease expired");
                let inner2 = inner.clone();
                let res = if inner.opts.sync {
                    tokio::task::spawn_blocking(move || inner2.end_lease(lease))
                        .await
                        .unwrap_or_else(|e| Err(MetadataError::Backend(e.to_string())))
                } else {
                    inner2.end_lease(lease)
                };
                if let Err(e) = res {
                    tracing::warn!(lease, error = %e, "could not expire a lease");
                }
            }
            let st = inner.state.lock();
            st.leases.values().map(|l| l.deadline).min()
        };
        let until = next_deadline
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(1))
            .min(Instant::now() + Duration::from_secs(1));
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep_until(until) => {}
            _ = wake.notified() => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Files

#[cfg(test)]
mod tests {
    use super::disk::{crc32, decode_line, unhex};
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn hex_round_trips() {
        let data: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&data)).unwrap(), data);
        assert!(unhex("abc").is_none());
        assert!(unhex("zz").is_none());
    }

    #[test]
    fn line_checksum_detects_damage() {
        let line = encode_line(&Record {
            rev: 3,
            muts: vec![],
        })
        .unwrap();
        let body = &line[..line.len() - 1];
        assert!(decode_line::<Record>(body).is_ok());
        let mut bad = body.to_vec();
        let n = bad.len();
        bad[n - 2] ^= 1;
        assert!(decode_line::<Record>(&bad).is_err());
    }
}
