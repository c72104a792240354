//! [`ManagedLedger`]: the backend-independent logic of a topic's log
//! (positions, rollover, retention, opening [`ManagedCursor`]s), written once
//! over [`TopicStorage`](crate::TopicStorage). What it shares with its
//! cursors is in `ledger_state`.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use strobe_model::Position;
use tokio::sync::{Notify, oneshot, watch};

use crate::backend::{LedgerBackend, LedgerMeta};
use crate::config::LedgerConfig;
use crate::cursor::ManagedCursor;
use crate::cursor_state::{CursorSnapshot, CursorState, LedgerView};
use crate::ledger_state::{CursorShared, Entry, Inner, LedgerInfo, State, encode_snapshot};
use crate::{LedgerError, Result};

/// Where a new durable cursor starts (Pulsar's `InitialPosition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialPosition {
    /// The oldest entry still stored.
    Earliest,
    /// The entry after the last confirmed one.
    Latest,
}

/// Per-topic figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerStats {
    /// Confirmed entries stored (all ledgers).
    pub entries: u64,
    /// Sum of their data lengths.
    pub bytes: u64,
    /// Ledgers, including the current one.
    pub ledgers: usize,
    /// Append time (ms since the epoch) of the oldest stored entry.
    pub oldest_entry_time_ms: Option<u64>,
    pub last_confirmed: Option<Position>,
    pub current_ledger_id: u64,
    pub durable_cursors: usize,
}

/// A topic's log: Pulsar's `ManagedLedger`. Entries are opaque bytes at
/// positions `(ledger_id, entry_id)`; the log is a sequence of ledgers, and
/// every open starts a new one. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ManagedLedger {
    inner: Arc<Inner>,
}

/// Resolves to the entry's position once it is durable (see [`crate::SyncMode`]).
#[derive(Debug)]
pub struct AppendFuture {
    rx: Option<oneshot::Receiver<Result<Position>>>,
    early: Option<LedgerError>,
    name: String,
}

impl Future for AppendFuture {
    type Output = Result<Position>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(e) = self.early.take() {
            return Poll::Ready(Err(e));
        }
        let this = &mut *self;
        match this.rx.as_mut() {
            Some(rx) => match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(r)) => Poll::Ready(r),
                Poll::Ready(Err(_)) => Poll::Ready(Err(LedgerError::Closed(this.name.clone()))),
                Poll::Pending => Poll::Pending,
            },
            None => Poll::Ready(Err(LedgerError::Closed(this.name.clone()))),
        }
    }
}

impl ManagedLedger {
    /// Opens `name` on `backend`, recovers its ledgers and durable cursors, and
    /// starts a new ledger. Must run inside a tokio runtime (a background task
    /// persists cursors every `cursor_flush_interval`).
    pub async fn open(
        backend: &dyn LedgerBackend,
        name: &str,
        config: LedgerConfig,
    ) -> Result<ManagedLedger> {
        let (storage, rec) = backend.open_topic(name, config.fence).await?;
        let mut ledgers: Vec<LedgerInfo> = rec
            .ledgers
            .iter()
            .filter(|m| m.entries > 0)
            .map(|m: &LedgerMeta| LedgerInfo {
                id: m.ledger_id,
                entries: m.entries,
                bytes: m.bytes,
                confirmed: m.entries,
                confirmed_bytes: m.bytes,
                first_ts: m.first_ts_ms,
                last_ts: m.last_ts_ms,
            })
            .collect();
        let lac = ledgers.last().map(|l| Position::new(l.id, l.entries - 1));
        let next = rec
            .next_ledger_id
            .max(ledgers.last().map_or(0, |l| l.id + 1));
        ledgers.push(LedgerInfo {
            id: next,
            entries: 0,
            bytes: 0,
            confirmed: 0,
            confirmed_bytes: 0,
            first_ts: 0,
            last_ts: 0,
        });
        let mut cursors = BTreeMap::new();
        for (cname, bytes) in &rec.cursors {
            let snap: CursorSnapshot =
                serde_json::from_slice(bytes).map_err(|e| LedgerError::Corrupt {
                    topic: name.to_string(),
                    path: format!("cursor {cname}").into(),
                    offset: 0,
                    reason: e.to_string(),
                })?;
            cursors.insert(
                cname.clone(),
                Arc::new(CursorShared {
                    name: cname.clone(),
                    durable: true,
                    state: Mutex::new(CursorState::from_snapshot(&snap)),
                }),
            );
        }
        let (lac_tx, _) = watch::channel(lac);
        let inner = Arc::new(Inner {
            name: name.to_string(),
            retention: Mutex::new(config.retention),
            config,
            storage,
            append_lock: Mutex::new(()),
            state: Mutex::new(State {
                ledgers,
                lac,
                hold: None,
                closed: false,
                failed: None,
            }),
            cursors: Mutex::new(cursors),
            lac_tx,
            shutdown: Arc::new(Notify::new()),
            cursors_dirty: Arc::new(Notify::new()),
            background: Mutex::new(None),
        });
        let handle = tokio::spawn(background(
            Arc::downgrade(&inner),
            inner.shutdown.clone(),
            inner.cursors_dirty.clone(),
            inner.config.cursor_flush_interval,
            inner.config.trim_interval,
        ));
        *inner.background.lock() = Some(handle);
        tracing::debug!(topic = name, ledger = next, "managed ledger opened");
        Ok(ManagedLedger { inner })
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn config(&self) -> &LedgerConfig {
        &self.inner.config
    }

    /// The retention in force (see [`ManagedLedger::set_retention`]).
    pub fn retention(&self) -> crate::Retention {
        *self.inner.retention.lock()
    }

    /// Changes the retention from the next trim on (a namespace's or a
    /// topic's retention policy changed): consumed ledgers it no longer
    /// keeps go at the next trim, and a longer one keeps what is still here.
    pub fn set_retention(&self, r: crate::Retention) {
        *self.inner.retention.lock() = r;
    }

    /// Why the ledger refuses appends, if an append failed (for example it
    /// was fenced: another writer sealed the topic's log). A failed ledger
    /// stays failed; its topic must be reopened.
    pub fn failure(&self) -> Option<LedgerError> {
        self.inner.state.lock().failed.clone()
    }

    /// Appends one entry. The position is assigned now (concurrent appends are
    /// ordered by call), and the returned future resolves once the entry is
    /// durable. The future need not be polled for the append to happen.
    pub fn append(&self, data: Bytes) -> AppendFuture {
        let crc = crc32c::crc32c(&data);
        self.append_with_crc(data, crc)
    }

    /// [`ManagedLedger::append`] of data whose CRC-32C the caller has
    /// already computed (a broker that verified the producer's checksum
    /// derives it with [`crate::crc::combine`]), so the storage need not
    /// read the bytes once more. (A wrong `crc` would make the file backend's
    /// records fail their checks: the topic would refuse service as corrupt.)
    pub fn append_with_crc(&self, data: Bytes, crc: u32) -> AppendFuture {
        self.append_inner(data, crc, false).1
    }

    /// [`ManagedLedger::append_with_crc`] of the first entry of a transaction: readers see
    /// nothing from this entry on (the hold moves here unless it is already earlier) until the
    /// transaction buffer releases it. Set atomically with the position, so no reader can see the
    /// entry in between. Returns the entry's position (`None` if the append failed at once).
    pub fn append_holding(&self, data: Bytes, crc: u32) -> (Option<Position>, AppendFuture) {
        self.append_inner(data, crc, true)
    }

    fn append_inner(&self, data: Bytes, crc: u32, hold: bool) -> (Option<Position>, AppendFuture) {
        debug_assert_eq!(crc, crc32c::crc32c(&data), "the caller's CRC is the data's");
        let inner = &self.inner;
        let fail = |e| AppendFuture {
            rx: None,
            early: Some(e),
            name: inner.name.clone(),
        };
        if data.len() > inner.config.max_entry_bytes {
            return (
                None,
                fail(LedgerError::EntryTooLarge {
                    size: data.len(),
                    max: inner.config.max_entry_bytes,
                }),
            );
        }
        let _order = inner.append_lock.lock();
        let now = inner.config.clock.now_ms();
        let len = data.len() as u64;
        let pos = {
            let mut st = inner.state.lock();
            if st.closed {
                return (None, fail(LedgerError::Closed(inner.name.clone())));
            }
            if let Some(e) = &st.failed {
                return (None, fail(e.clone()));
            }
            if Self::should_roll(&inner.config, st.current(), now) {
                Self::roll(&mut st);
            }
            let cur = st.ledgers.last_mut().expect("current ledger");
            let pos = Position::new(cur.id, cur.entries);
            if cur.entries == 0 {
                cur.first_ts = now;
            }
            cur.entries += 1;
            cur.bytes += len;
            cur.last_ts = now;
            if hold && st.hold.is_none_or(|h| pos < h) {
                st.hold = Some(pos);
            }
            pos
        };
        let (tx, rx) = oneshot::channel();
        let weak = Arc::downgrade(inner);
        inner.storage.append(
            pos.ledger_id,
            pos.entry_id,
            now,
            data,
            crc,
            Box::new(move |res| {
                if let Some(inner) = weak.upgrade() {
                    inner.confirm(pos, len, res.clone());
                }
                let _ = tx.send(res.map(|()| pos));
            }),
        );
        (
            Some(pos),
            AppendFuture {
                rx: Some(rx),
                early: None,
                name: inner.name.clone(),
            },
        )
    }

    pub(crate) fn should_roll(cfg: &LedgerConfig, cur: &LedgerInfo, now: u64) -> bool {
        cur.entries > 0
            && (cur.entries >= cfg.max_entries_per_ledger
                || cur.bytes >= cfg.max_ledger_bytes
                || now.saturating_sub(cur.first_ts) >= cfg.max_ledger_age.as_millis() as u64)
    }

    pub(crate) fn roll(st: &mut State) {
        let id = st.current().id + 1;
        st.ledgers.push(LedgerInfo {
            id,
            entries: 0,
            bytes: 0,
            confirmed: 0,
            confirmed_bytes: 0,
            first_ts: 0,
            last_ts: 0,
        });
    }

    /// Closes the current ledger and starts a new one (if the current one has entries).
    pub fn rollover(&self) {
        let _order = self.inner.append_lock.lock();
        let mut st = self.inner.state.lock();
        if st.current().entries > 0 {
            Self::roll(&mut st);
        }
    }

    /// The last entry confirmed durable.
    pub fn last_confirmed(&self) -> Option<Position> {
        self.inner.state.lock().visible()
    }

    /// The last durable entry, held or not (terminate and stats want the log's real end).
    pub fn last_stored(&self) -> Option<Position> {
        self.inner.state.lock().lac
    }

    /// Withholds every entry from `hold` on from readers (`None`: nothing is withheld). The
    /// transaction buffer moves it as transactions start and end; readers waiting for entries
    /// wake when it releases some.
    pub fn set_hold(&self, hold: Option<Position>) {
        let mut st = self.inner.state.lock();
        if st.hold == hold {
            return;
        }
        let before = st.visible();
        st.hold = hold;
        let after = st.visible();
        if before != after && self.inner.lac_tx.receiver_count() > 0 {
            self.inner.lac_tx.send_replace(after);
        }
    }

    /// The current hold.
    pub fn hold(&self) -> Option<Position> {
        self.inner.state.lock().hold
    }

    /// The oldest stored position (or the next to be written if none).
    pub fn first_position(&self) -> Position {
        self.inner.state.lock().normalize(Position::EARLIEST)
    }

    /// Watches the last confirmed position (dispatchers wait on it for new entries).
    pub fn watch_last_confirmed(&self) -> watch::Receiver<Option<Position>> {
        // Under the state lock: while nobody watches, `Inner::confirm` leaves
        // the channel behind, so a new watcher brings it up to date (and,
        // the lock held, no confirmation falls between the two).
        let st = self.inner.state.lock();
        let rx = self.inner.lac_tx.subscribe();
        self.inner.lac_tx.send_if_modified(|v| {
            let stale = *v != st.visible();
            *v = st.visible();
            stale
        });
        rx
    }

    /// Up to `max` confirmed entries at or after `from` (positions in trimmed
    /// ledgers move to the oldest stored entry).
    pub async fn read(&self, from: Position, max: usize) -> Result<Vec<Entry>> {
        let runs = {
            let st = self.inner.state.lock();
            if let Some(e) = &st.failed {
                return Err(e.clone());
            }
            let Some(lac) = st.visible() else {
                return Ok(Vec::new());
            };
            let mut runs = Vec::new();
            let mut p = st.normalize(from);
            let mut left = max as u64;
            while left > 0 && p <= lac {
                let l = st.find(p.ledger_id).expect("normalized position");
                let mut last = (l.confirmed - 1).min(p.entry_id + left - 1);
                if p.ledger_id == lac.ledger_id {
                    last = last.min(lac.entry_id); // a hold may end the visible part early
                }
                if last < p.entry_id {
                    break;
                }
                runs.push((p.ledger_id, p.entry_id, last));
                left -= last - p.entry_id + 1;
                p = st.normalize(Position::new(p.ledger_id, last + 1));
            }
            runs
        };
        self.inner.read_runs(runs).await
    }

    /// Stats for this topic.
    pub fn stats(&self) -> LedgerStats {
        let durable_cursors = self.inner.cursors.lock().len();
        let st = self.inner.state.lock();
        LedgerStats {
            entries: st.ledgers.iter().map(|l| l.confirmed).sum(),
            bytes: st.ledgers.iter().map(|l| l.confirmed_bytes).sum(),
            ledgers: st.ledgers.len(),
            oldest_entry_time_ms: st
                .ledgers
                .iter()
                .find(|l| l.confirmed > 0)
                .map(|l| l.first_ts),
            last_confirmed: st.lac,
            current_ledger_id: st.current().id,
            durable_cursors,
        }
    }

    /// Ids of the stored ledgers, oldest first (the last is the current one).
    pub fn ledger_ids(&self) -> Vec<u64> {
        self.inner
            .state
            .lock()
            .ledgers
            .iter()
            .map(|l| l.id)
            .collect()
    }

    /// Opens (or creates, starting at `initial`) the durable cursor `name`.
    /// A new cursor is persisted before this returns.
    pub async fn open_cursor(&self, name: &str, initial: InitialPosition) -> Result<ManagedCursor> {
        self.open_cursor_as(name, initial, false).await
    }

    /// As [`Self::open_cursor`], for a cursor of the broker's own
    /// (deduplication's): it holds entries as any durable cursor does, but
    /// does not make the topic one with subscriptions, whose consumed
    /// ledgers are trimmed as soon as it opens.
    pub async fn open_internal_cursor(
        &self,
        name: &str,
        initial: InitialPosition,
    ) -> Result<ManagedCursor> {
        self.open_cursor_as(name, initial, true).await
    }

    async fn open_cursor_as(
        &self,
        name: &str,
        initial: InitialPosition,
        internal: bool,
    ) -> Result<ManagedCursor> {
        let persist = {
            let mut cursors = self.inner.cursors.lock();
            if let Some(c) = cursors.get(name) {
                if internal {
                    let mut cs = c.state.lock();
                    cs.dirty |= !cs.internal;
                    cs.internal = true;
                }
                return Ok(ManagedCursor {
                    ledger: self.inner.clone(),
                    shared: c.clone(),
                });
            }
            let floor = {
                let st = self.inner.state.lock();
                match initial {
                    InitialPosition::Earliest => st.normalize(Position::EARLIEST),
                    InitialPosition::Latest => st.end(),
                }
            };
            let mut cs = CursorState::new(floor);
            cs.dirty = false;
            cs.internal = internal;
            let snap = encode_snapshot(&cs.snapshot(self.inner.config.max_persisted_ranges));
            let shared = Arc::new(CursorShared {
                name: name.to_string(),
                durable: true,
                state: Mutex::new(cs),
            });
            cursors.insert(name.to_string(), shared.clone());
            (shared, self.inner.storage.persist_cursor(name, Some(snap)))
        };
        persist.1.await?;
        Ok(ManagedCursor {
            ledger: self.inner.clone(),
            shared: persist.0,
        })
    }

    /// A cursor that is never persisted and does not hold back trimming
    /// (for readers). It starts reading at `start`.
    pub fn new_non_durable_cursor(&self, start: Position) -> ManagedCursor {
        let floor = self.inner.state.lock().normalize(start);
        self.non_durable_at(floor)
    }

    /// A non-durable cursor that keeps `start` as given, even in ledgers
    /// already trimmed: a reader of a compacted topic reads the compacted
    /// view from there (Pulsar's `NonDurableCursorImpl` with `isReadCompacted`
    /// does not move the start onto a stored entry either). Reads of the
    /// topic itself still begin at the first stored entry from `start` on.
    pub fn new_non_durable_cursor_unmoved(&self, start: Position) -> ManagedCursor {
        self.non_durable_at(start)
    }

    fn non_durable_at(&self, floor: Position) -> ManagedCursor {
        let mut cs = CursorState::new(floor);
        cs.dirty = false;
        ManagedCursor {
            ledger: self.inner.clone(),
            shared: Arc::new(CursorShared {
                name: String::new(),
                durable: false,
                state: Mutex::new(cs),
            }),
        }
    }

    /// Names of the durable cursors.
    pub fn cursor_names(&self) -> Vec<String> {
        self.inner.cursors.lock().keys().cloned().collect()
    }

    /// Deletes the durable cursor `name` (durably).
    pub async fn delete_cursor(&self, name: &str) -> Result<()> {
        let fut = {
            let mut cursors = self.inner.cursors.lock();
            if cursors.remove(name).is_none() {
                return Err(LedgerError::CursorNotFound {
                    topic: self.inner.name.clone(),
                    cursor: name.to_string(),
                });
            }
            self.inner.storage.persist_cursor(name, None)
        };
        fut.await
    }

    /// Persists every dirty durable cursor now.
    pub async fn flush_cursors(&self) -> Result<()> {
        self.inner.flush_cursors().await
    }

    /// Applies retention: rolls over a current ledger older than
    /// `max_ledger_age`, then deletes the oldest sealed ledgers that every
    /// durable cursor has passed and that retention no longer keeps.
    /// Returns the deleted ledger ids.
    pub async fn trim(&self) -> Result<Vec<u64>> {
        self.inner.trim(false).await
    }

    /// Pulsar's truncate, the storage half: starts a new ledger and deletes
    /// every sealed one that all durable cursors have passed, whatever the
    /// retention (the caller moves the cursors to the end first).
    pub async fn truncate(&self) -> Result<Vec<u64>> {
        self.rollover();
        self.inner.trim(true).await
    }

    /// Persists cursors, waits for pending appends and releases the topic.
    pub async fn close(&self) -> Result<()> {
        {
            let mut st = self.inner.state.lock();
            if st.closed {
                return Ok(());
            }
            st.closed = true;
        }
        self.inner.shutdown.notify_one();
        let bg = self.inner.background.lock().take();
        if let Some(h) = bg {
            let _ = h.await;
        }
        let r = self.inner.flush_cursors().await;
        self.inner.storage.close().await?;
        r
    }
}

/// Persists the ledger's changed cursors; false once the ledger is gone.
async fn persist_cursors(weak: &Weak<Inner>) -> bool {
    let Some(inner) = weak.upgrade() else {
        return false;
    };
    if let Err(e) = inner.flush_cursors().await {
        tracing::warn!(topic = %inner.name, error = %e, "persisting cursors failed");
    }
    true
}

async fn background(
    weak: Weak<Inner>,
    shutdown: Arc<Notify>,
    dirty: Arc<Notify>,
    flush_every: Duration,
    trim_every: Option<Duration>,
) {
    // Cursors are persisted when told they changed, at most once per
    // `flush_every`, not on a timer of their own: with 100,000 topics a
    // tick per topic per second was 100,000 wake-ups a second for nothing
    // (issue 47). A slow tick persists whatever changed without a word.
    let mut safety_tick = tokio::time::interval(flush_every * 30);
    safety_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_flush = tokio::time::Instant::now();
    let mut trim_tick = tokio::time::interval(trim_every.unwrap_or(Duration::from_secs(3600)));
    trim_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    safety_tick.tick().await;
    trim_tick.tick().await;
    // What the recovered cursors have consumed is trimmed at once, as Pulsar
    // trims when a ledger is closed and a new one opened: a topic that changes
    // owners more often than the trim interval would otherwise keep every
    // consumed ledger, and each open and close would read and write an ever
    // longer list of them. A topic without subscriptions keeps its ledgers
    // until the first periodic trim, so a subscription made right after the
    // open still finds them (the broker's own cursors do not count).
    if trim_every.is_some()
        && let Some(inner) = weak.upgrade()
        && inner
            .cursors
            .lock()
            .values()
            .any(|c| !c.state.lock().internal)
        && let Err(e) = inner.trim(false).await
    {
        tracing::warn!(topic = %inner.name, error = %e, "trimming failed");
    }
    // Holds the ledger only while working, so dropping every handle ends it.
    loop {
        tokio::select! {
            _ = shutdown.notified() => return,
            _ = dirty.notified() => {
                // Changes arriving together are persisted together.
                tokio::select! {
                    _ = shutdown.notified() => return,
                    _ = tokio::time::sleep_until(last_flush + flush_every) => {}
                }
                last_flush = tokio::time::Instant::now();
                if !persist_cursors(&weak).await {
                    return;
                }
            }
            _ = safety_tick.tick() => {
                if !persist_cursors(&weak).await {
                    return;
                }
            }
            _ = trim_tick.tick(), if trim_every.is_some() => {
                let Some(inner) = weak.upgrade() else { return };
                if let Err(e) = inner.trim(false).await {
                    tracing::warn!(topic = %inner.name, error = %e, "trimming failed");
                }
            }
        }
    }
}

impl Inner {
    pub(crate) fn confirm(&self, pos: Position, len: u64, res: Result<()>) {
        let mut st = self.state.lock();
        match res {
            Ok(()) => {
                if let Ok(i) = st.ledgers.binary_search_by_key(&pos.ledger_id, |l| l.id) {
                    let l = &mut st.ledgers[i];
                    if pos.entry_id + 1 > l.confirmed {
                        l.confirmed = pos.entry_id + 1;
                        l.confirmed_bytes += len;
                    }
                }
                if st.lac < Some(pos) {
                    st.lac = Some(pos);
                    // A send wakes the channel's notifier shards (eight
                    // mutexes) for every entry: ~11% of the flusher's CPU
                    // with 1,000 topics and nobody reading. Unwatched, the
                    // value catches up in `watch_last_confirmed` instead.
                    if self.lac_tx.receiver_count() > 0 {
                        self.lac_tx.send_replace(st.visible());
                    }
                }
            }
            Err(e) => {
                tracing::error!(topic = %self.name, error = %e, "append failed; ledger fenced");
                if st.failed.is_none() {
                    st.failed = Some(e);
                    self.config.failures.bump();
                }
            }
        }
    }

    pub(crate) async fn flush_cursors(&self) -> Result<()> {
        let cursors: Vec<Arc<CursorShared>> = self.cursors.lock().values().cloned().collect();
        let mut pending = Vec::new();
        for c in cursors {
            if let Some(f) = self.persist_if_dirty(&c) {
                pending.push(f);
            }
        }
        for f in pending {
            f.await?;
        }
        Ok(())
    }

    /// See [`ManagedLedger::trim`]; `all_consumed`: every consumed sealed
    /// ledger goes, retention or not ([`ManagedLedger::truncate`]).
    pub(crate) async fn trim(&self, all_consumed: bool) -> Result<Vec<u64>> {
        let floors: Vec<Position> = self
            .cursors
            .lock()
            .values()
            .map(|c| c.state.lock().floor)
            .collect();
        let (first_kept, ids) = {
            let _order = self.append_lock.lock();
            let mut st = self.state.lock();
            if st.closed {
                return Ok(Vec::new());
            }
            let now = self.config.clock.now_ms();
            let cur = st.current();
            // Age-based rollover of an idle ledger, so it can be trimmed later.
            if cur.entries > 0
                && cur.confirmed == cur.entries
                && now.saturating_sub(cur.first_ts) >= self.config.max_ledger_age.as_millis() as u64
            {
                ManagedLedger::roll(&mut st);
            }
            let slowest = floors
                .iter()
                .map(|f| st.normalize(*f))
                .min()
                .unwrap_or_else(|| st.end());
            let cur_id = st.current().id;
            let consumed: Vec<&LedgerInfo> = st
                .ledgers
                .iter()
                .filter(|l| l.id < slowest.ledger_id && l.id != cur_id)
                .collect();
            let ret = if all_consumed {
                crate::Retention::default()
            } else {
                *self.retention.lock()
            };
            let mut consumed_bytes: u64 = consumed.iter().map(|l| l.confirmed_bytes).sum();
            let mut ids = Vec::new();
            for l in consumed {
                let expired = ret
                    .time
                    .is_some_and(|t| now.saturating_sub(l.last_ts) >= t.as_millis() as u64);
                let over = ret.size_bytes.is_some_and(|s| consumed_bytes > s);
                if !(expired || over) {
                    break;
                }
                consumed_bytes -= l.confirmed_bytes;
                ids.push(l.id);
            }
            if ids.is_empty() {
                return Ok(ids);
            }
            st.ledgers.drain(..ids.len());
            (st.ledgers[0].id, ids)
        };
        tracing::debug!(topic = %self.name, ?ids, "trimming ledgers");
        self.storage.delete_ledgers(first_kept, ids.clone()).await?;
        Ok(ids)
    }
}
