//! The state a [`ManagedLedger`](crate::ManagedLedger) shares with its
//! [`ManagedCursor`](crate::ManagedCursor)s: the ledgers and what of them is
//! confirmed, each cursor's acknowledgements, the storage, and the reads and
//! cursor persistence both use. Apart from `ledger` because cursors use it
//! and the ledger creates cursors.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use strobe_model::Position;
use tokio::sync::{Notify, watch};

use crate::backend::TopicStorage;
use crate::config::LedgerConfig;
use crate::cursor_state::{CursorSnapshot, CursorState, LedgerView};
use crate::{LedgerError, Result};

/// One stored entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub position: Position,
    pub data: Bytes,
}

#[derive(Debug, Clone)]
pub(crate) struct LedgerInfo {
    pub(crate) id: u64,
    /// Entries handed to the backend.
    pub(crate) entries: u64,
    pub(crate) bytes: u64,
    /// Entries confirmed durable (a prefix of `entries`).
    pub(crate) confirmed: u64,
    pub(crate) confirmed_bytes: u64,
    pub(crate) first_ts: u64,
    pub(crate) last_ts: u64,
}

#[derive(Debug)]
pub(crate) struct State {
    /// Oldest first; the last one is the current (open) ledger.
    pub(crate) ledgers: Vec<LedgerInfo>,
    pub(crate) lac: Option<Position>,
    /// Readers see nothing at or after this position (the oldest open transaction's first
    /// entry: Pulsar's `maxReadPosition`), even once it is confirmed.
    pub(crate) hold: Option<Position>,
    pub(crate) closed: bool,
    pub(crate) failed: Option<LedgerError>,
}

impl State {
    pub(crate) fn current(&self) -> &LedgerInfo {
        self.ledgers.last().expect("a ledger is always open")
    }
    pub(crate) fn find(&self, id: u64) -> Option<&LedgerInfo> {
        self.ledgers
            .binary_search_by_key(&id, |l| l.id)
            .ok()
            .map(|i| &self.ledgers[i])
    }
    /// The last entry readers may see: the last confirmed one, or the last one before the hold.
    pub(crate) fn visible(&self) -> Option<Position> {
        match (self.lac, self.hold) {
            (Some(l), Some(h)) if h <= l => {
                if h.entry_id > 0 {
                    return Some(Position::new(h.ledger_id, h.entry_id - 1));
                }
                self.ledgers
                    .iter()
                    .rev()
                    .find(|x| x.id < h.ledger_id && x.confirmed > 0)
                    .map(|x| Position::new(x.id, x.confirmed - 1))
            }
            (l, _) => l,
        }
    }

    /// The position after the last entry readers may see.
    pub(crate) fn end(&self) -> Position {
        match self.visible() {
            Some(l) => self.normalize(Position::new(l.ledger_id, l.entry_id + 1)),
            None => self.normalize(Position::EARLIEST),
        }
    }
}

impl LedgerView for State {
    fn normalize(&self, p: Position) -> Position {
        let cur = self.current().id;
        let i = self.ledgers.partition_point(|l| l.id < p.ledger_id);
        for l in &self.ledgers[i..] {
            let start = if l.id == p.ledger_id { p.entry_id } else { 0 };
            if start < l.entries {
                return Position::new(l.id, start);
            }
            if l.id == cur {
                return Position::new(l.id, l.entries);
            }
        }
        let c = self.current();
        Position::new(c.id, c.entries)
    }
    fn lac(&self) -> Option<Position> {
        self.visible()
    }
    fn exists(&self, p: Position) -> bool {
        self.find(p.ledger_id)
            .is_some_and(|l| p.entry_id < l.confirmed)
    }
    fn count_from(&self, from: Position) -> u64 {
        let i = self.ledgers.partition_point(|l| l.id < from.ledger_id);
        self.ledgers[i..]
            .iter()
            .map(|l| {
                if l.id == from.ledger_id {
                    l.confirmed.saturating_sub(from.entry_id)
                } else {
                    l.confirmed
                }
            })
            .sum()
    }
    fn confirmed_in(&self, id: u64) -> u64 {
        self.find(id).map_or(0, |l| l.confirmed)
    }
    fn before(&self, p: Position) -> Option<Position> {
        if let Some(l) = self.find(p.ledger_id)
            && p.entry_id > 0
            && l.confirmed > 0
        {
            return Some(Position::new(l.id, (p.entry_id - 1).min(l.confirmed - 1)));
        }
        self.ledgers
            .iter()
            .rev()
            .find(|x| x.id < p.ledger_id && x.confirmed > 0)
            .map(|x| Position::new(x.id, x.confirmed - 1))
    }
}

#[derive(Debug)]
pub(crate) struct CursorShared {
    pub(crate) name: String,
    pub(crate) durable: bool,
    pub(crate) state: Mutex<CursorState>,
}

pub(crate) struct Inner {
    pub(crate) name: String,
    pub(crate) config: LedgerConfig,
    /// The retention in force: `config.retention` at open, then whatever
    /// the topic's policies change it to ([`crate::ManagedLedger::set_retention`]).
    pub(crate) retention: Mutex<crate::Retention>,
    pub(crate) storage: Arc<dyn TopicStorage>,
    /// Held while an entry id is assigned and queued, so queue order is id order.
    pub(crate) append_lock: Mutex<()>,
    pub(crate) state: Mutex<State>,
    pub(crate) cursors: Mutex<BTreeMap<String, Arc<CursorShared>>>,
    pub(crate) lac_tx: watch::Sender<Option<Position>>,
    pub(crate) shutdown: Arc<Notify>,
    /// Told when a cursor has changes to persist (see `ledger::background`).
    pub(crate) cursors_dirty: Arc<Notify>,
    pub(crate) background: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedLedger")
            .field("name", &self.name)
            .field("storage", &self.storage)
            .finish_non_exhaustive()
    }
}

pub(crate) fn encode_snapshot(s: &CursorSnapshot) -> Bytes {
    Bytes::from(serde_json::to_vec(s).expect("snapshot serializes"))
}

impl Inner {
    pub(crate) async fn read_runs(&self, runs: Vec<(u64, u64, u64)>) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        for (l, first, last) in runs {
            let data = self.storage.read(l, first, last).await?;
            out.extend(data.into_iter().enumerate().map(|(i, d)| Entry {
                position: Position::new(l, first + i as u64),
                data: d,
            }));
        }
        Ok(out)
    }

    pub(crate) fn persist_if_dirty(
        &self,
        c: &CursorShared,
    ) -> Option<futures::future::BoxFuture<'static, Result<()>>> {
        if !c.durable {
            return None;
        }
        let mut cs = c.state.lock();
        if !cs.dirty {
            return None;
        }
        cs.dirty = false;
        let snap = encode_snapshot(&cs.snapshot(self.config.max_persisted_ranges));
        // Queued under the cursor's lock, so snapshots reach storage in order.
        Some(self.storage.persist_cursor(&c.name, Some(snap)))
    }
}
