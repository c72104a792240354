//! The memory backend: everything in process memory, durable "instantly".
//! For tests and for brokers that need no persistence. Data outlives a
//! [`crate::ManagedLedger`] (reopen sees it) but not the backend.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::backend::{AppendCallback, LedgerBackend, LedgerMeta, RecoveredTopic, TopicStorage};
use crate::{LedgerError, Result};

#[derive(Debug, Default)]
struct MemTopic {
    ledgers: BTreeMap<u64, Vec<(u64, Bytes)>>,
    next_ledger_id: u64,
    cursors: BTreeMap<String, Bytes>,
    open: bool,
    /// The highest fencing token the topic was opened with.
    fence: u64,
}

/// In-memory [`LedgerBackend`].
#[derive(Debug, Default, Clone)]
pub struct MemoryBackend {
    topics: Arc<Mutex<HashMap<String, Arc<Mutex<MemTopic>>>>>,
}

impl MemoryBackend {
    pub fn new() -> MemoryBackend {
        MemoryBackend::default()
    }
}

impl LedgerBackend for MemoryBackend {
    fn open_topic(
        &self,
        topic: &str,
        fence: u64,
    ) -> BoxFuture<'static, Result<(Arc<dyn TopicStorage>, RecoveredTopic)>> {
        let t = self
            .topics
            .lock()
            .entry(topic.to_string())
            .or_default()
            .clone();
        let name = topic.to_string();
        async move {
            let rec = {
                let mut g = t.lock();
                if g.fence > fence {
                    return Err(LedgerError::Fenced {
                        topic: name,
                        token: fence,
                        current: g.fence,
                    });
                }
                if g.open {
                    return Err(LedgerError::AlreadyOpen(name));
                }
                g.fence = fence;
                g.open = true;
                RecoveredTopic {
                    ledgers: g
                        .ledgers
                        .iter()
                        .filter(|(_, e)| !e.is_empty())
                        .map(|(&id, e)| LedgerMeta {
                            ledger_id: id,
                            entries: e.len() as u64,
                            bytes: e.iter().map(|(_, d)| d.len() as u64).sum(),
                            first_ts_ms: e[0].0,
                            last_ts_ms: e[e.len() - 1].0,
                        })
                        .collect(),
                    next_ledger_id: g.next_ledger_id,
                    cursors: g
                        .cursors
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                }
            };
            let h: Arc<dyn TopicStorage> = Arc::new(MemTopicHandle {
                name,
                topic: t,
                released: Default::default(),
            });
            Ok((h, rec))
        }
        .boxed()
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

#[derive(Debug)]
struct MemTopicHandle {
    name: String,
    topic: Arc<Mutex<MemTopic>>,
    released: std::sync::atomic::AtomicBool,
}

impl MemTopicHandle {
    fn release(&self) {
        if !self
            .released
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            self.topic.lock().open = false;
        }
    }
}

impl Drop for MemTopicHandle {
    fn drop(&mut self) {
        self.release();
    }
}

impl TopicStorage for MemTopicHandle {
    fn append(
        &self,
        ledger_id: u64,
        entry_id: u64,
        ts_ms: u64,
        data: Bytes,
        crc: u32,
        done: AppendCallback,
    ) {
        debug_assert_eq!(crc, crc32c::crc32c(&data), "the caller's CRC is the data's");
        {
            let mut g = self.topic.lock();
            g.next_ledger_id = g.next_ledger_id.max(ledger_id + 1);
            let l = g.ledgers.entry(ledger_id).or_default();
            debug_assert_eq!(l.len() as u64, entry_id, "appends arrive in order");
            l.push((ts_ms, data));
        }
        done(Ok(()));
    }

    fn read(
        &self,
        ledger_id: u64,
        first: u64,
        last: u64,
    ) -> BoxFuture<'static, Result<Vec<Bytes>>> {
        let g = self.topic.lock();
        let r = match g.ledgers.get(&ledger_id) {
            Some(l) if (last as usize) < l.len() && first <= last => Ok(l
                [first as usize..=last as usize]
                .iter()
                .map(|(_, d)| d.clone())
                .collect()),
            _ => Err(LedgerError::InvalidPosition {
                topic: self.name.clone(),
                position: strobe_model::Position::new(ledger_id, first),
                reason: "no such entry",
            }),
        };
        futures::future::ready(r).boxed()
    }

    fn delete_ledgers(&self, first_kept: u64, ids: Vec<u64>) -> BoxFuture<'static, Result<()>> {
        let mut g = self.topic.lock();
        for id in ids {
            g.ledgers.remove(&id);
        }
        g.next_ledger_id = g.next_ledger_id.max(first_kept);
        futures::future::ready(Ok(())).boxed()
    }

    fn persist_cursor(
        &self,
        name: &str,
        snapshot: Option<Bytes>,
    ) -> BoxFuture<'static, Result<()>> {
        let mut g = self.topic.lock();
        match snapshot {
            Some(s) => g.cursors.insert(name.to_string(), s),
            None => g.cursors.remove(name),
        };
        futures::future::ready(Ok(())).boxed()
    }

    fn close(&self) -> BoxFuture<'static, Result<()>> {
        self.release();
        futures::future::ready(Ok(())).boxed()
    }
}
