//! The object-store backend: topics on storage every broker of a cluster
//! reaches (S3 or a compatible server, or a shared directory), through the
//! `object_store` crate.
//!
//! **Layout.** Under the backend's prefix, topic `t` (escaped to one segment,
//! see [`format::escape`]) has
//! - `topics/<t>/log/<seq>`: the log, immutable objects at consecutive
//!   sequence numbers (20 digits, so names sort as numbers), each written with
//!   a create-only put. A *data* object is one group-commit flush of the topic
//!   (everything its producers appended meanwhile, one ledger); a *seal* is a
//!   new writer's claim on the log. An append is acknowledged only after the
//!   put holding it returned.
//! - `topics/<t>/checkpoint/<seq>`: the log's state up to `seq` (ledgers,
//!   which object holds which entries, the first kept ledger), written every
//!   `checkpoint_every` flushes, after a trim, and at a close that leaves more
//!   than a few objects past the newest, so an open reads the newest
//!   checkpoint and the objects after it, not the whole history.
//! - `topics/<t>/cursors/<name>`: each durable cursor's last snapshot
//!   (overwritten; the managed ledger bounds how often).
//!
//! **Fencing** (SlateDB's model; see `docs/cluster.md`). An open carries the
//! opener's fencing token, its *epoch* (a cluster broker's bundle lock
//! version: a later owner always has a higher one). The open reads the log,
//! refuses if any object carries a higher epoch, then puts a seal at the next
//! free slot. If that slot is taken, the object there is read back: a data
//! object or seal of an epoch not above ours belongs to the log (an older
//! writer won that slot), so it is included and the next slot is tried; a
//! higher epoch means a newer writer exists and the open fails `Fenced`. An
//! older writer still running then puts its next flush at the slot our seal
//! took, gets `AlreadyExists`, reads the object back, finds a put id not its
//! own, and fails that flush and everything after it without acknowledging
//! any of it. A put retried after an error may come back `AlreadyExists` when
//! the first attempt landed: the put id in the object tells.
//!
//! **Reads.** Entries just written stay in a bounded cache of decoded
//! objects; older ones are fetched from the store into the same cache.
//!
//! **Limits of this version.** A fenced writer can still overwrite a cursor
//! object until it notices (its stale cursor only makes the next owner
//! redeliver, never skip); seals and objects of deleted ledgers that a crash
//! left between checkpoint and delete stay behind as garbage.

mod config;
mod format;
mod shared;
mod topic;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use parking_lot::Mutex;

use crate::backend::{EngineMetric, LedgerBackend, RecoveredTopic, TopicStorage};
use crate::{LedgerError, Result};
use format::{Body, ObjMeta};
use shared::{Counters, Shared, corrupt, put_id};

pub use config::ObjectBackendConfig;

/// [`LedgerBackend`] over an object store.
#[derive(Debug, Clone)]
pub struct ObjectBackend {
    shared: Arc<Shared>,
}

impl ObjectBackend {
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: Path,
        cfg: ObjectBackendConfig,
    ) -> ObjectBackend {
        ObjectBackend {
            shared: Arc::new(Shared {
                store,
                prefix,
                cfg,
                counters: Counters::default(),
                open: Mutex::new(HashSet::new()),
            }),
        }
    }
}

/// Checks that `store` honours create-only puts: two of one fresh key must
/// give exactly one success. Some S3-compatible servers ignore
/// `If-None-Match` and overwrite; fencing would then be impossible.
pub async fn probe_create_only(store: &Arc<dyn ObjectStore>, prefix: &Path) -> Result<()> {
    let key = prefix
        .clone()
        .join("probe")
        .join(format!("{:032x}", put_id()).as_str());
    let put = |b: &'static [u8]| {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        store.put_opts(&key, PutPayload::from_static(b), opts)
    };
    let first = put(b"1").await;
    let second = put(b"2").await;
    let _ = store.delete(&key).await;
    match (first, second) {
        (Ok(_), Err(object_store::Error::AlreadyExists { .. })) => Ok(()),
        (Err(e), _) => Err(LedgerError::Config(format!(
            "storage {store}: a create-only put of {key} failed: {e}"
        ))),
        (Ok(_), Ok(_)) => Err(LedgerError::Config(format!(
            "storage {store} ignores create-only puts (If-None-Match): a second put of {key} \
             overwrote the first; fencing is impossible on it, refusing to start"
        ))),
        (Ok(_), Err(e)) => Err(LedgerError::Config(format!(
            "storage {store}: a second create-only put of {key} failed with {e}, not AlreadyExists"
        ))),
    }
}

/// The log as an open finds it.
#[derive(Debug, Default)]
struct Scan {
    objects: BTreeMap<u64, ObjMeta>,
    max_epoch: u64,
    next_ledger_id: u64,
    first_kept: u64,
    /// The slot after the last object (0 for an empty log).
    next_seq: u64,
    /// The slot of the checkpoint read.
    checkpointed: Option<u64>,
}

impl Scan {
    /// Adds the object at `seq`; `Err` with its epoch if it is newer than `epoch`.
    fn include(&mut self, seq: u64, o: &format::LogObject) {
        self.max_epoch = self.max_epoch.max(o.epoch);
        self.next_seq = self.next_seq.max(seq + 1);
        if let Body::Data {
            ledger_id,
            first_entry,
            entries,
        } = &o.body
            && !entries.is_empty()
            && *ledger_id >= self.first_kept
        {
            self.next_ledger_id = self.next_ledger_id.max(ledger_id + 1);
            self.objects.insert(
                seq,
                ObjMeta {
                    ledger_id: *ledger_id,
                    first_entry: *first_entry,
                    count: entries.len() as u64,
                    bytes: entries.iter().map(|e| e.data.len() as u64).sum(),
                    first_ts: entries[0].ts_ms,
                    last_ts: entries[entries.len() - 1].ts_ms,
                },
            );
        }
    }
}

async fn open_topic(
    shared: Arc<Shared>,
    topic: String,
    fence: u64,
) -> Result<(Arc<dyn TopicStorage>, RecoveredTopic)> {
    // One handle per topic in this process; an open that fails or is
    // abandoned half-way gives the topic back.
    if !shared.open.lock().insert(topic.clone()) {
        return Err(LedgerError::AlreadyOpen(topic));
    }
    let mut guard = OpenGuard {
        shared: &shared,
        topic: &topic,
        armed: true,
    };
    let dir = shared.topic_dir(&topic);
    // The newest readable checkpoint, then the log after it.
    let mut scan = Scan::default();
    let checkpoints = shared.list(&dir.clone().join("checkpoint"), None).await?;
    let mut after: Option<Path> = None;
    for key in checkpoints.iter().rev() {
        let Some(raw) = shared.get(key).await? else {
            continue;
        };
        match format::decode_checkpoint(&raw) {
            Ok(c) => {
                scan.objects = c.objects.into_iter().collect();
                scan.max_epoch = c.max_epoch;
                scan.next_ledger_id = c.next_ledger_id;
                scan.first_kept = c.first_kept;
                scan.next_seq = c.seq + 1;
                scan.checkpointed = Some(c.seq);
                after = Some(shared.log_key(&topic, c.seq));
                break;
            }
            Err(e) => tracing::warn!(%topic, %key, error = %e, "skipping an unreadable checkpoint"),
        }
    }
    for key in shared
        .list(&dir.clone().join("log"), after.as_ref())
        .await?
    {
        let seq = key
            .filename()
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or_else(|| corrupt(&topic, &key, "a log object name is not a number".into()))?;
        let raw = shared
            .get(&key)
            .await?
            .ok_or_else(|| corrupt(&topic, &key, "listed but gone".into()))?;
        let o = format::decode_log(&raw).map_err(|e| corrupt(&topic, &key, e))?;
        scan.include(seq, &o);
    }
    let refuse = |current: u64| LedgerError::Fenced {
        topic: topic.clone(),
        token: fence,
        current,
    };
    if scan.max_epoch > fence {
        return Err(refuse(scan.max_epoch));
    }
    // Seal: claim the next free slot, taking in what older writers put there first.
    let mine = put_id();
    let mut slot = scan.next_seq;
    loop {
        let key = shared.log_key(&topic, slot);
        if shared
            .create_retrying(&key, format::encode_seal(fence, mine))
            .await?
        {
            break;
        }
        let raw = shared
            .get(&key)
            .await?
            .ok_or_else(|| corrupt(&topic, &key, "exists but cannot be read".into()))?;
        let o = format::decode_log(&raw).map_err(|e| corrupt(&topic, &key, e))?;
        if o.put_id == mine {
            break;
        }
        if o.epoch > fence {
            shared.counters.fenced.fetch_add(1, Ordering::Relaxed);
            return Err(refuse(o.epoch));
        }
        scan.include(slot, &o);
        slot += 1;
    }
    let mut cursors = Vec::new();
    for key in shared.list(&dir.clone().join("cursors"), None).await? {
        let Some(name) = key.filename().and_then(format::unescape) else {
            continue;
        };
        if let Some(raw) = shared.get(&key).await? {
            let (_, snap) = format::decode_cursor(&raw).map_err(|e| corrupt(&topic, &key, e))?;
            cursors.push((name, snap));
        }
    }
    let mut ledgers: BTreeMap<u64, crate::LedgerMeta> = BTreeMap::new();
    for m in scan.objects.values() {
        let l = ledgers
            .entry(m.ledger_id)
            .or_insert_with(|| crate::LedgerMeta {
                ledger_id: m.ledger_id,
                entries: 0,
                bytes: 0,
                first_ts_ms: m.first_ts,
                last_ts_ms: m.last_ts,
            });
        l.entries = l.entries.max(m.first_entry + m.count);
        l.bytes += m.bytes;
        l.first_ts_ms = l.first_ts_ms.min(m.first_ts);
        l.last_ts_ms = l.last_ts_ms.max(m.last_ts);
    }
    let recovered = RecoveredTopic {
        ledgers: ledgers.into_values().collect(),
        next_ledger_id: scan.next_ledger_id.max(scan.first_kept),
        cursors,
    };
    let mut state = topic::LogState::new(scan.objects);
    state.next_seq = slot + 1;
    state.next_ledger_id = recovered.next_ledger_id;
    state.first_kept = scan.first_kept;
    state.max_epoch = fence;
    state.checkpointed = scan.checkpointed;
    guard.armed = false;
    drop(guard);
    let handle = topic::ObjectTopic::start(shared, topic, fence, state);
    Ok((handle, recovered))
}

/// Releases a topic's open slot unless the open completed.
struct OpenGuard<'a> {
    shared: &'a Shared,
    topic: &'a str,
    armed: bool,
}

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.open.lock().remove(self.topic);
        }
    }
}

impl LedgerBackend for ObjectBackend {
    fn open_topic(
        &self,
        topic: &str,
        fence: u64,
    ) -> BoxFuture<'static, Result<(Arc<dyn TopicStorage>, RecoveredTopic)>> {
        open_topic(self.shared.clone(), topic.to_string(), fence).boxed()
    }

    fn kind(&self) -> &'static str {
        "object"
    }

    fn engine_stats(&self) -> Vec<EngineMetric> {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            EngineMetric::counter(
                "strobe_storage_object_puts_total",
                "Objects written to the store (log flushes, seals, checkpoints, cursors)",
                get(&c.puts),
            ),
            EngineMetric::counter(
                "strobe_storage_object_put_bytes_total",
                "Bytes written to the store",
                get(&c.put_bytes),
            ),
            EngineMetric {
                name: "strobe_storage_object_create_put_seconds_total".into(),
                help: "Time spent in create-only puts (divide by puts for the mean)",
                kind: crate::MetricKind::Counter,
                value: crate::MetricValue::Float(get(&c.put_micros) as f64 / 1e6),
            },
            EngineMetric::counter(
                "strobe_storage_object_put_retries_total",
                "Puts retried after an error",
                get(&c.put_retries),
            ),
            EngineMetric::counter(
                "strobe_storage_object_gets_total",
                "Objects read from the store",
                get(&c.gets),
            ),
            EngineMetric::counter(
                "strobe_storage_object_fenced_total",
                "Writes refused because a newer writer sealed the log",
                get(&c.fenced),
            ),
        ]
    }
}
