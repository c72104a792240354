//! One open topic on the object store: its flusher (one create-only put per
//! group commit), reads through a bounded cache, trims and cursors.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::format::{self, Body, Checkpoint, ObjEntry, ObjMeta};
use super::shared::{Shared, corrupt, put_id};
use crate::backend::{AppendCallback, TopicStorage};
use crate::{LedgerError, Result};

/// The log as this writer knows it.
#[derive(Debug, Default)]
pub(crate) struct LogState {
    /// Data objects by sequence number.
    objects: BTreeMap<u64, ObjMeta>,
    /// The same objects by (ledger, first entry), to find an entry's object.
    by_position: BTreeMap<(u64, u64), u64>,
    /// The next slot to put at.
    pub next_seq: u64,
    pub next_ledger_id: u64,
    pub first_kept: u64,
    pub max_epoch: u64,
    /// The slot of the newest checkpoint written or read.
    pub checkpointed: Option<u64>,
}

impl LogState {
    pub fn new(objects: BTreeMap<u64, ObjMeta>) -> LogState {
        let mut st = LogState::default();
        for (seq, m) in objects {
            st.insert(seq, m);
        }
        st
    }

    pub fn insert(&mut self, seq: u64, m: ObjMeta) {
        self.objects.insert(seq, m);
        self.by_position.insert((m.ledger_id, m.first_entry), seq);
    }

    fn remove(&mut self, seq: u64) {
        if let Some(m) = self.objects.remove(&seq) {
            self.by_position.remove(&(m.ledger_id, m.first_entry));
        }
    }

    /// The object holding `entry` of `ledger`.
    fn find(&self, ledger: u64, entry: u64) -> Option<(u64, ObjMeta)> {
        let (_, seq) = self.by_position.range(..=(ledger, entry)).next_back()?;
        let m = self.objects.get(seq)?;
        (m.ledger_id == ledger && entry < m.first_entry + m.count).then_some((*seq, *m))
    }

    /// The objects an open would read past the newest checkpoint (all of them without one).
    fn past_checkpoint(&self) -> u64 {
        self.next_seq
            .saturating_sub(self.checkpointed.map_or(0, |c| c + 1))
    }

    fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            seq: self.next_seq.saturating_sub(1),
            max_epoch: self.max_epoch,
            next_ledger_id: self.next_ledger_id,
            first_kept: self.first_kept,
            objects: self.objects.iter().map(|(s, m)| (*s, *m)).collect(),
        }
    }
}

struct Pending {
    ledger_id: u64,
    entry_id: u64,
    entry: ObjEntry,
    done: AppendCallback,
}

/// Decoded objects by sequence number, bounded in bytes (oldest out first).
#[derive(Default)]
struct Cache {
    objects: BTreeMap<u64, Arc<Vec<ObjEntry>>>,
    order: VecDeque<u64>,
    bytes: usize,
}

impl Cache {
    fn insert(&mut self, seq: u64, entries: Arc<Vec<ObjEntry>>, budget: usize) {
        let size: usize = entries.iter().map(|e| e.data.len() + 32).sum();
        if self.objects.insert(seq, entries).is_none() {
            self.order.push_back(seq);
            self.bytes += size;
        }
        while self.bytes > budget {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(e) = self.objects.remove(&old) {
                self.bytes -= e.iter().map(|e| e.data.len() + 32).sum::<usize>();
            }
        }
    }

    fn remove(&mut self, seq: u64) {
        if let Some(e) = self.objects.remove(&seq) {
            self.bytes -= e.iter().map(|e| e.data.len() + 32).sum::<usize>();
            self.order.retain(|s| *s != seq);
        }
    }
}

struct Inner {
    shared: Arc<Shared>,
    name: String,
    epoch: u64,
    state: Mutex<LogState>,
    queue: Mutex<VecDeque<Pending>>,
    /// Set once the topic failed (fenced, or the store kept failing): every
    /// later append fails with it.
    failed: Mutex<Option<LedgerError>>,
    cache: Mutex<Cache>,
    wake: Notify,
    closing: std::sync::atomic::AtomicBool,
    released: std::sync::atomic::AtomicBool,
    flusher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Serialises checkpoints, trims and the flusher's checkpoints.
    checkpointing: tokio::sync::Mutex<()>,
    /// Per cursor: the generation of the newest snapshot asked for and of the
    /// newest written. Generations are taken when `persist_cursor` is called,
    /// so a snapshot that reaches the store after a newer one is dropped, not
    /// written over it.
    cursor_gens: Mutex<std::collections::HashMap<String, (u64, u64)>>,
    cursor_writes: tokio::sync::Mutex<()>,
}

/// A close writes no checkpoint while an open would read at most this many objects past the
/// newest one.
pub(crate) const CLOSE_LEAVES_OBJECTS: u64 = 4;

/// The [`TopicStorage`] of the object backend.
pub(crate) struct ObjectTopic {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ObjectTopic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectTopic")
            .field("name", &self.inner.name)
            .field("epoch", &self.inner.epoch)
            .finish_non_exhaustive()
    }
}

impl ObjectTopic {
    pub(crate) fn start(
        shared: Arc<Shared>,
        name: String,
        epoch: u64,
        state: LogState,
    ) -> Arc<dyn TopicStorage> {
        let inner = Arc::new(Inner {
            shared,
            name,
            epoch,
            state: Mutex::new(state),
            queue: Mutex::new(VecDeque::new()),
            failed: Mutex::new(None),
            cache: Mutex::new(Cache::default()),
            wake: Notify::new(),
            closing: Default::default(),
            released: Default::default(),
            flusher: Mutex::new(None),
            checkpointing: tokio::sync::Mutex::new(()),
            cursor_gens: Mutex::new(std::collections::HashMap::new()),
            cursor_writes: tokio::sync::Mutex::new(()),
        });
        let task = tokio::spawn(flusher(inner.clone()));
        *inner.flusher.lock() = Some(task);
        Arc::new(ObjectTopic { inner })
    }
}

impl Inner {
    fn release(&self) {
        if !self.released.swap(true, Ordering::SeqCst) {
            self.shared.open.lock().remove(&self.name);
        }
    }

    /// Fails the topic: `e` for the batch in hand and every queued append.
    fn fail(&self, e: LedgerError, batch: Vec<AppendCallback>) {
        self.failed.lock().get_or_insert(e.clone());
        let queued: Vec<Pending> = self.queue.lock().drain(..).collect();
        for done in batch.into_iter().chain(queued.into_iter().map(|p| p.done)) {
            done(Err(e.clone()));
        }
    }

    async fn write_checkpoint(&self) -> Result<()> {
        let _one = self.checkpointing.lock().await;
        let c = self.state.lock().checkpoint();
        let dir = self.shared.topic_dir(&self.name).join("checkpoint");
        let key = dir.clone().join(format!("{:020}", c.seq).as_str());
        self.shared
            .overwrite(&key, format::encode_checkpoint(&c))
            .await?;
        {
            let mut st = self.state.lock();
            st.checkpointed = st.checkpointed.max(Some(c.seq));
        }
        // Older checkpoints are superseded.
        for old in self.shared.list(&dir, None).await? {
            if old != key && old.filename().and_then(|f| f.parse::<u64>().ok()) < Some(c.seq) {
                self.shared.delete(&old).await?;
            }
        }
        Ok(())
    }

    /// Puts one batch at the next slot. `Err` fails the topic.
    async fn put_batch(
        &self,
        ledger_id: u64,
        first_entry: u64,
        entries: Vec<ObjEntry>,
    ) -> Result<(u64, ObjMeta, Arc<Vec<ObjEntry>>)> {
        let mine = put_id();
        let raw = format::encode_data(self.epoch, mine, ledger_id, first_entry, &entries);
        let seq = self.state.lock().next_seq;
        let key = self.shared.log_key(&self.name, seq);
        if !self.shared.create_retrying(&key, raw).await? {
            // Someone holds the slot: our own earlier attempt, or a newer writer's seal.
            let back = self.shared.get(&key).await?;
            let o = back
                .as_ref()
                .map(format::decode_log)
                .transpose()
                .map_err(|e| corrupt(&self.name, &key, e))?;
            match o {
                Some(o) if o.put_id == mine => {}
                Some(o) => {
                    self.shared.counters.fenced.fetch_add(1, Ordering::Relaxed);
                    return Err(LedgerError::Fenced {
                        topic: self.name.clone(),
                        token: self.epoch,
                        current: o.epoch,
                    });
                }
                None => {
                    return Err(corrupt(
                        &self.name,
                        &key,
                        "the slot is taken but holds nothing".into(),
                    ));
                }
            }
        }
        let meta = ObjMeta {
            ledger_id,
            first_entry,
            count: entries.len() as u64,
            bytes: entries.iter().map(|e| e.data.len() as u64).sum(),
            first_ts: entries[0].ts_ms,
            last_ts: entries[entries.len() - 1].ts_ms,
        };
        Ok((seq, meta, Arc::new(entries)))
    }

    async fn load(&self, seq: u64) -> Result<Arc<Vec<ObjEntry>>> {
        if let Some(e) = self.cache.lock().objects.get(&seq) {
            return Ok(e.clone());
        }
        let key = self.shared.log_key(&self.name, seq);
        let raw = self
            .shared
            .get(&key)
            .await?
            .ok_or_else(|| corrupt(&self.name, &key, "an indexed object is missing".into()))?;
        let o = format::decode_log(&raw).map_err(|e| corrupt(&self.name, &key, e))?;
        let Body::Data { entries, .. } = o.body else {
            return Err(corrupt(&self.name, &key, "expected a data object".into()));
        };
        let entries = Arc::new(entries);
        self.cache
            .lock()
            .insert(seq, entries.clone(), self.shared.cfg.cache_bytes);
        Ok(entries)
    }
}

/// The topic's group commit: everything queued while the previous put was in
/// flight (one ledger, up to `max_batch_bytes`) goes into the next put.
async fn flusher(inner: Arc<Inner>) {
    loop {
        let empty = inner.queue.lock().is_empty();
        if empty {
            if inner.closing.load(Ordering::SeqCst) {
                return;
            }
            inner.wake.notified().await;
            continue;
        }
        if !inner.shared.cfg.flush_delay.is_zero() {
            tokio::time::sleep(inner.shared.cfg.flush_delay).await;
        }
        let batch: Vec<Pending> = {
            let mut q = inner.queue.lock();
            let mut bytes = 0;
            let mut out = Vec::new();
            while let Some(p) = q.front() {
                let fits = out.is_empty()
                    || (p.ledger_id == out.first().map_or(0, |f: &Pending| f.ledger_id)
                        && bytes + p.entry.data.len() <= inner.shared.cfg.max_batch_bytes);
                if !fits {
                    break;
                }
                bytes += p.entry.data.len();
                out.push(q.pop_front().expect("front exists"));
            }
            out
        };
        let (ledger_id, first_entry) = (batch[0].ledger_id, batch[0].entry_id);
        let mut entries = Vec::with_capacity(batch.len());
        let mut dones = Vec::with_capacity(batch.len());
        for p in batch {
            entries.push(p.entry);
            dones.push(p.done);
        }
        let failed = inner.failed.lock().clone();
        if let Some(e) = failed {
            inner.fail(e, dones);
            continue;
        }
        match inner.put_batch(ledger_id, first_entry, entries).await {
            Ok((seq, meta, entries)) => {
                {
                    let mut st = inner.state.lock();
                    st.insert(seq, meta);
                    st.next_seq = seq + 1;
                    st.next_ledger_id = st.next_ledger_id.max(meta.ledger_id + 1);
                }
                inner
                    .cache
                    .lock()
                    .insert(seq, entries, inner.shared.cfg.cache_bytes);
                for done in dones {
                    done(Ok(()));
                }
                // Counted from the newest checkpoint, whoever wrote it (a trim's too).
                let due = inner.state.lock().past_checkpoint() >= inner.shared.cfg.checkpoint_every;
                if due && let Err(e) = inner.write_checkpoint().await {
                    tracing::warn!(topic = %inner.name, error = %e, "writing a checkpoint failed");
                }
            }
            Err(e) => {
                tracing::error!(topic = %inner.name, error = %e, "a flush failed; the topic takes no more appends");
                inner.fail(e, dones);
            }
        }
    }
}

impl Drop for ObjectTopic {
    fn drop(&mut self) {
        self.inner.closing.store(true, Ordering::SeqCst);
        self.inner.wake.notify_one();
        self.inner.release();
    }
}

impl TopicStorage for ObjectTopic {
    fn append(
        &self,
        ledger_id: u64,
        entry_id: u64,
        ts_ms: u64,
        data: Bytes,
        crc: u32,
        done: AppendCallback,
    ) {
        if let Some(e) = self.inner.failed.lock().clone() {
            done(Err(e));
            return;
        }
        self.inner.queue.lock().push_back(Pending {
            ledger_id,
            entry_id,
            entry: ObjEntry { ts_ms, crc, data },
            done,
        });
        self.inner.wake.notify_one();
    }

    fn read(
        &self,
        ledger_id: u64,
        first: u64,
        last: u64,
    ) -> BoxFuture<'static, Result<Vec<Bytes>>> {
        let inner = self.inner.clone();
        async move {
            let invalid = |reason| LedgerError::InvalidPosition {
                topic: inner.name.clone(),
                position: strobe_model::Position::new(ledger_id, first),
                reason,
            };
            if first > last {
                return Err(invalid("empty range"));
            }
            let mut out = Vec::with_capacity((last - first + 1) as usize);
            let mut next = first;
            while next <= last {
                let found = inner.state.lock().find(ledger_id, next);
                let Some((seq, meta)) = found else {
                    return Err(invalid("no such entry"));
                };
                let entries = inner.load(seq).await?;
                let from = (next - meta.first_entry) as usize;
                let to = ((last - meta.first_entry) as usize).min(entries.len() - 1);
                out.extend(entries[from..=to].iter().map(|e| e.data.clone()));
                next = meta.first_entry + to as u64 + 1;
            }
            Ok(out)
        }
        .boxed()
    }

    fn delete_ledgers(&self, first_kept: u64, ids: Vec<u64>) -> BoxFuture<'static, Result<()>> {
        let inner = self.inner.clone();
        async move {
            let gone: Vec<u64> = {
                let mut st = inner.state.lock();
                st.first_kept = st.first_kept.max(first_kept);
                st.next_ledger_id = st.next_ledger_id.max(first_kept);
                let gone: Vec<u64> = st
                    .objects
                    .iter()
                    .filter(|(_, m)| ids.contains(&m.ledger_id))
                    .map(|(s, _)| *s)
                    .collect();
                for s in &gone {
                    st.remove(*s);
                }
                gone
            };
            // The checkpoint first: recovery must never look for what is deleted next.
            inner.write_checkpoint().await?;
            for seq in gone {
                inner.cache.lock().remove(seq);
                inner
                    .shared
                    .delete(&inner.shared.log_key(&inner.name, seq))
                    .await?;
            }
            Ok(())
        }
        .boxed()
    }

    fn persist_cursor(
        &self,
        name: &str,
        snapshot: Option<Bytes>,
    ) -> BoxFuture<'static, Result<()>> {
        let inner = self.inner.clone();
        let key = inner
            .shared
            .topic_dir(&inner.name)
            .join("cursors")
            .join(format::escape(name).as_str());
        let name = name.to_string();
        let generation = {
            let mut gens = inner.cursor_gens.lock();
            let g = gens.entry(name.clone()).or_default();
            g.0 += 1;
            g.0
        };
        async move {
            let _one = inner.cursor_writes.lock().await;
            let written = inner.cursor_gens.lock().get(&name).map_or(0, |g| g.1);
            if written > generation {
                return Ok(());
            }
            match snapshot {
                Some(s) => {
                    inner
                        .shared
                        .overwrite(&key, format::encode_cursor(inner.epoch, &s))
                        .await?
                }
                None => inner.shared.delete(&key).await?,
            }
            if let Some(g) = inner.cursor_gens.lock().get_mut(&name) {
                g.1 = g.1.max(generation);
            }
            Ok(())
        }
        .boxed()
    }

    fn close(&self) -> BoxFuture<'static, Result<()>> {
        let inner = self.inner.clone();
        async move {
            inner.closing.store(true, Ordering::SeqCst);
            inner.wake.notify_one();
            let task = inner.flusher.lock().take();
            if let Some(t) = task {
                let _ = t.await;
            }
            let failed = inner.failed.lock().is_some();
            // A fenced writer leaves the log to the new one. A log with few objects past its
            // checkpoint keeps it: the next open reads those few, as after a crash, which costs
            // less than the checkpoint's put, listing and deletion here; a topic moving at a
            // broker's shutdown waits for its close (docs/performance.md, "SIGTERM at scale").
            let due = inner.state.lock().past_checkpoint() > CLOSE_LEAVES_OBJECTS;
            let r = if failed || !due {
                Ok(())
            } else {
                inner.write_checkpoint().await
            };
            inner.release();
            r
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(ledger_id: u64, first_entry: u64, count: u64) -> ObjMeta {
        ObjMeta {
            ledger_id,
            first_entry,
            count,
            bytes: 0,
            first_ts: 0,
            last_ts: 0,
        }
    }

    #[test]
    fn entries_are_found_in_their_object() {
        let mut st = LogState::default();
        st.insert(1, meta(1, 0, 3));
        st.insert(2, meta(1, 3, 2));
        st.insert(4, meta(2, 0, 1));
        assert_eq!(st.find(1, 0).map(|f| f.0), Some(1));
        assert_eq!(st.find(1, 2).map(|f| f.0), Some(1));
        assert_eq!(st.find(1, 3).map(|f| f.0), Some(2));
        assert_eq!(st.find(1, 4).map(|f| f.0), Some(2));
        assert_eq!(st.find(1, 5), None);
        assert_eq!(st.find(2, 0).map(|f| f.0), Some(4));
        assert_eq!(st.find(3, 0), None);
    }
}
