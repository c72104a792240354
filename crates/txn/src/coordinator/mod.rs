//! The transaction coordinator (Pulsar's `TransactionMetadataStoreService` and PIP-473's
//! `TransactionCoordinatorV5`): one [`TransactionCoordinator`] per broker serves the partitions
//! this broker leads right now.
//!
//! Nothing but the sequence reservation is remembered between requests: every header lives in
//! the metadata store and every write is fenced by the partition's leader key, so a broker that
//! lost its leadership (session gone, SIGSTOP, cut off) cannot write, and the new leader continues
//! where the old one stopped. TxnIds come from blocks reserved by CAS on `/txn/tc-seq/<N>`, so an
//! id is never given twice, even across leaders.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use strobe_metadata::tc::TcMember;
use strobe_metadata::{Batcher, EventKind, Expect, LeaderState, MetadataError, MetadataStore, Op};
use strobe_model::TxnId;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, info, warn};

pub use crate::decided::LocalParticipants;
use crate::decided::{Decided, Ended};
use crate::header::{EndAction, EndDecision, SubRef, TxnHeader, TxnState, decide_end, may_add};
use crate::paths::{self, Participant};
use crate::{Result, TxnError};

/// How long a request waits for an election in progress to settle here.
const ELECTION_SETTLE: Duration = Duration::from_secs(2);

mod retention;

/// The coordinator's settings.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// This broker's id (recorded as a header's owner).
    pub broker_id: String,
    /// TTL of a NEW_TXN that asks for none (Pulsar's client default is 60 s).
    pub default_ttl_ms: u64,
    /// Longest TTL granted (Pulsar: `transactionCoordinatorMaxTimeout`... larger asks are cut).
    pub max_ttl_ms: u64,
    /// TxnIds reserved per metadata write.
    pub seq_block: u64,
    /// How long END_TXN waits for the participants to apply the outcome before it answers.
    pub end_wait: Duration,
    /// How often the timeout sweep runs.
    pub sweep_interval: Duration,
    /// How long a decided header stays (for retried END_TXNs and the admin API) once every
    /// participant applied it, when the coordinator could not tell (see `collect`).
    pub retention: Duration,
    /// How long a decided header stays in the store once every participant said it applied it
    /// (see `forget_header`).
    pub forget_after: Duration,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            broker_id: String::new(),
            default_ttl_ms: 60_000,
            max_ttl_ms: 3_600_000,
            seq_block: 1000,
            end_wait: Duration::from_secs(5),
            sweep_interval: Duration::from_secs(1),
            retention: Duration::from_secs(300),
            forget_after: Duration::from_secs(25),
        }
    }
}

/// Counters of one coordinator partition (while led here).
#[derive(Debug, Default)]
pub struct TcCounters {
    pub created: AtomicU64,
    pub committed: AtomicU64,
    pub aborted: AtomicU64,
    pub timed_out: AtomicU64,
}

/// One partition's stats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStats {
    pub tc_id: u32,
    pub leader: bool,
    pub open: u64,
    pub created: u64,
    pub committed: u64,
    pub aborted: u64,
    pub timed_out: u64,
}

/// Headers waiting to be forgotten, at most (beyond, the periodic collection deletes them).
const FORGET_QUEUE: usize = 1 << 20;

/// Transactions refused their commit (see `refuse_commit`), at most.
const REFUSED_MAX: usize = 65_536;

/// The operations a metadata transaction may hold here (etcd's default `--max-txn-ops`).
const MAX_TXN_OPS: usize = 128;

#[derive(Debug, Default)]
struct Part {
    /// The leader-key version this state was recovered under.
    led: Option<u64>,
    seq_next: u64,
    seq_end: u64,
}

/// The coordinator partitions this broker leads.
pub struct TransactionCoordinator {
    store: Arc<dyn MetadataStore>,
    /// Header writes of concurrent transactions, sent as one metadata transaction.
    writes: Arc<Batcher>,
    /// END_TXN's waits for participants elsewhere.
    waits: crate::waits::PartWaits,
    /// Decided headers to delete, and when (see [`Self::forget_header`]).
    forget: parking_lot::Mutex<std::collections::VecDeque<(std::time::Instant, TxnId, u64)>>,
    member: TcMember,
    cfg: CoordinatorConfig,
    parts: Vec<tokio::sync::Mutex<Part>>,
    /// Open transactions per partition: least bits → header as last written here and its
    /// version (a CAS on it skips the read; a stale one fails its CAS and is read again).
    /// Version 0: not written yet. A transaction is written when it gets its first
    /// participant: one without any has nothing to tell anyone, and its NEW_TXN costs no write.
    open: Vec<parking_lot::Mutex<HashMap<u64, (TxnHeader, u64)>>>,
    /// Decided transactions, written or not (the newest 20,000 per partition).
    ended: Vec<parking_lot::Mutex<Ended>>,
    /// The participants this broker serves, told of outcomes directly.
    local: parking_lot::RwLock<Option<Arc<dyn LocalParticipants>>>,
    counters: Vec<TcCounters>,
    /// Topics known to have a buffer record (so the topic replays its log for transactions).
    buffers_known: parking_lot::Mutex<HashSet<String>>,
    /// Open transactions that lost a participant's registration after it was answered (see
    /// [`Self::refuse_commit`]): they can only be aborted.
    refused: parking_lot::Mutex<HashSet<TxnId>>,
    _tasks: parking_lot::Mutex<Option<DropGuard>>,
}

impl std::fmt::Debug for TransactionCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionCoordinator")
            .field("member", &self.member)
            .finish_non_exhaustive()
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn decode(key: &str, bytes: &[u8]) -> Result<TxnHeader> {
    serde_json::from_slice(bytes).map_err(|e| {
        TxnError::Metadata(MetadataError::Codec {
            key: key.to_owned(),
            reason: e.to_string(),
        })
    })
}

fn encode(h: &TxnHeader) -> Vec<u8> {
    serde_json::to_vec(h).expect("a header serializes")
}

impl TransactionCoordinator {
    /// Serves the partitions `member` wins; runs the timeout sweep and the collection of old
    /// headers until dropped.
    pub fn start(
        store: Arc<dyn MetadataStore>,
        member: TcMember,
        cfg: CoordinatorConfig,
    ) -> Arc<TransactionCoordinator> {
        let n = member.view().current().parallelism as usize;
        let tc = Arc::new(TransactionCoordinator {
            writes: Arc::new(Batcher::new(store.clone(), MAX_TXN_OPS)),
            waits: crate::waits::PartWaits::start(store.clone()),
            forget: Default::default(),
            store,
            member,
            cfg,
            parts: (0..n).map(|_| Default::default()).collect(),
            open: (0..n).map(|_| Default::default()).collect(),
            ended: (0..n).map(|_| Default::default()).collect(),
            local: parking_lot::RwLock::new(None),
            counters: (0..n).map(|_| TcCounters::default()).collect(),
            buffers_known: Default::default(),
            refused: Default::default(),
            _tasks: parking_lot::Mutex::new(None),
        });
        let cancel = CancellationToken::new();
        let weak = Arc::downgrade(&tc);
        let stop = cancel.clone();
        let every = tc.cfg.sweep_interval;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            let mut rounds = 0u64;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let Some(tc) = weak.upgrade() else { return };
                tc.sweep_timeouts().await;
                tc.forget_due().await;
                rounds += 1;
                if rounds.is_multiple_of(60) {
                    tc.collect().await;
                }
            }
        });
        *tc._tasks.lock() = Some(cancel.drop_guard());
        tc
    }

    /// The number of coordinator partitions.
    pub fn parallelism(&self) -> u32 {
        self.parts.len() as u32
    }

    /// The elections behind it.
    pub fn member(&self) -> &TcMember {
        &self.member
    }

    pub fn config(&self) -> &CoordinatorConfig {
        &self.cfg
    }

    /// True if this broker leads partition `n` now.
    pub fn leads(&self, n: u64) -> bool {
        n < self.parts.len() as u64 && self.member.is_leader(n as u32)
    }

    fn not_leader(&self, n: u64) -> TxnError {
        if n >= self.parts.len() as u64 {
            return TxnError::CoordinatorNotFound(format!(
                "transaction coordinator {n} does not exist: the cluster has {} partitions",
                self.parts.len()
            ));
        }
        TxnError::CoordinatorNotFound(format!(
            "transaction coordinator {n} is not served by this broker"
        ))
    }

    /// Checks that this broker leads `n` and that its state is recovered for this leadership;
    /// returns the fence to put into every write.
    async fn leadership(&self, n: u64) -> Result<Op> {
        if n >= self.parts.len() as u64 {
            return Err(self.not_leader(n));
        }
        let Some(election) = self.member.election(n as u32) else {
            return Err(self.not_leader(n));
        };
        // Between leaders, this broker may have won an election whose
        // record other brokers' watches (and so the clients following
        // WatchTcAssignments) saw before its own answer came back: wait for
        // the election to settle rather than turn the client away.
        let state = match election.state() {
            LeaderState::NoLeader => election
                .wait_for(ELECTION_SETTLE, |s| !matches!(s, LeaderState::NoLeader))
                .await
                .unwrap_or(LeaderState::NoLeader),
            s => s,
        };
        let LeaderState::Leading { version, .. } = state else {
            return Err(self.not_leader(n));
        };
        let fence = election.fence().map_err(|_| self.not_leader(n))?;
        let mut part = self.parts[n as usize].lock().await;
        if part.led != Some(version) {
            self.recover(n).await?;
            *part = Part {
                led: Some(version),
                seq_next: 0,
                seq_end: 0,
            };
            info!(tc_id = n, "transaction coordinator partition recovered");
        }
        Ok(fence)
    }

    /// Reloads partition `n`'s open transactions (a new leadership).
    async fn recover(&self, n: u64) -> Result<()> {
        let scan = self.store.scan_prefix(&paths::header_prefix_of(n)).await?;
        let mut open = HashMap::new();
        for kv in scan.entries {
            let Some(t) = paths::txn_of_header(&kv.key) else {
                continue;
            };
            match decode(&kv.key, &kv.value) {
                Ok(h) if h.state == TxnState::Open => {
                    open.insert(t.least_sig_bits, (h, kv.stat.version));
                }
                Ok(_) => {}
                Err(e) => warn!(key = %kv.key, error = %e, "undecodable transaction header"),
            }
        }
        *self.open[n as usize].lock() = open;
        Ok(())
    }

    /// TC_CLIENT_CONNECT: succeeds when this broker leads `n`.
    pub async fn connect(&self, n: u64) -> Result<()> {
        self.leadership(n).await.map(|_| ())
    }

    /// The next sequence of partition `n`, reserving a block when the last one is used up.
    async fn next_seq(&self, n: u64, fence: &Op) -> Result<u64> {
        let mut part = self.parts[n as usize].lock().await;
        if part.seq_next >= part.seq_end {
            let path = paths::seq_path(n);
            let (start, expect) = match self.store.get(&path).await? {
                None => (0, Expect::Absent),
                Some(v) => {
                    let s = std::str::from_utf8(&v.value)
                        .ok()
                        .and_then(|s| s.trim().parse::<u64>().ok())
                        .ok_or_else(|| {
                            TxnError::Metadata(MetadataError::Codec {
                                key: path.clone(),
                                reason: "not a number".into(),
                            })
                        })?;
                    (s, Expect::Version(v.stat.version))
                }
            };
            let end = start + self.cfg.seq_block.max(1);
            self.store
                .txn(vec![
                    fence.clone(),
                    Op::put_if(path, end.to_string().into_bytes(), expect),
                ])
                .await
                .map_err(|e| self.fenced(n, e))?;
            part.seq_next = start;
            part.seq_end = end;
        }
        let s = part.seq_next;
        part.seq_next += 1;
        Ok(s)
    }

    /// A write refused by the fence means leadership moved: the client must find the new leader.
    fn fenced(&self, n: u64, e: MetadataError) -> TxnError {
        match e {
            MetadataError::BadVersion { ref key, .. } | MetadataError::NotFound(ref key)
                if key.starts_with(strobe_metadata::tc::LEADER_PREFIX) =>
            {
                self.not_leader(n)
            }
            e => TxnError::Metadata(e),
        }
    }

    /// NEW_TXN on partition `n` with the client's TTL (0: the default).
    pub async fn new_txn(&self, n: u64, ttl_ms: u64) -> Result<TxnId> {
        let fence = self.leadership(n).await?;
        let ttl = match ttl_ms {
            0 => self.cfg.default_ttl_ms,
            t => t.min(self.cfg.max_ttl_ms),
        };
        let least = self.next_seq(n, &fence).await?;
        let t = TxnId {
            most_sig_bits: n,
            least_sig_bits: least,
        };
        drop(fence);
        // Written with its first participant (version 0: not yet). A new leader does not know
        // a transaction that had none: its END_TXN is answered `TransactionNotFound`, and it
        // had nothing to commit.
        let h = TxnHeader::open(&self.cfg.broker_id, now_ms(), ttl);
        self.open[n as usize].lock().insert(least, (h, 0));
        self.counters[n as usize]
            .created
            .fetch_add(1, Ordering::Relaxed);
        debug!(txn_id = %t, ttl, "transaction opened");
        Ok(t)
    }

    /// Whether this broker leads `t`'s partition and holds `t` open (not decided).
    pub fn knows_open(&self, t: TxnId) -> bool {
        self.leads(t.most_sig_bits)
            && self
                .open
                .get(t.most_sig_bits as usize)
                .is_some_and(|o| o.lock().contains_key(&t.least_sig_bits))
    }

    /// Whether `topic` is known to have its buffer record (see `ensure_buffer_record`).
    pub fn buffer_recorded(&self, topic: &str) -> bool {
        self.buffers_known.lock().contains(topic)
    }

    /// A participant of `t` was answered before its registration was written, and the write
    /// failed: the participant's sends were refused, so `t` must not commit without it. Its
    /// END_TXN(COMMIT) is refused from now on (the client aborts, or the timeout does).
    pub fn refuse_commit(&self, t: TxnId) {
        let mut r = self.refused.lock();
        if r.len() >= REFUSED_MAX {
            // Bounded: these are rare (a failing store), and the oldest have timed out.
            r.clear();
        }
        r.insert(t);
    }

    /// The header of an open `t` as last written here, and its version.
    fn cached(&self, t: TxnId) -> Option<(TxnHeader, u64)> {
        self.open
            .get(t.most_sig_bits as usize)?
            .lock()
            .get(&t.least_sig_bits)
            .cloned()
    }

    /// Keeps the header just written (the put after the fence, second in `resp`).
    fn remember(&self, t: TxnId, h: TxnHeader, resp: &strobe_metadata::TxnResponse) {
        if let Some(strobe_metadata::OpResult::Put(stat)) = resp.results.get(1)
            && let Some(open) = self.open.get(t.most_sig_bits as usize)
        {
            open.lock().insert(t.least_sig_bits, (h, stat.version));
        }
    }

    /// The header of `t` and its version (0: one decided and no longer in the store).
    async fn read(&self, t: TxnId) -> Result<(TxnHeader, u64)> {
        let path = paths::header_path(t);
        match self.store.get(&path).await? {
            Some(v) => Ok((decode(&path, &v.value)?, v.stat.version)),
            None => self
                .ended
                .get(t.most_sig_bits as usize)
                .and_then(|e| e.lock().header.get(&t.least_sig_bits).cloned())
                .map(|h| (h, 0))
                .ok_or_else(|| TxnError::NotFound(format!("transaction {t} not found"))),
        }
    }

    /// ADD_PARTITION_TO_TXN / ADD_SUBSCRIPTION_TO_TXN.
    pub async fn add_participants(
        &self,
        t: TxnId,
        partitions: &[String],
        subscriptions: &[SubRef],
    ) -> Result<()> {
        let n = t.most_sig_bits;
        let fence = self.leadership(n).await?;
        let mut cached = self.cached(t);
        if cached.is_none() {
            // Unknown or ended here: refused before anything is written for it (and what was
            // read serves the first attempt below).
            let (h, version) = self.read(t).await?;
            if !may_add(h.state) {
                return Err(TxnError::InvalidStatus(format!(
                    "transaction {t} is {}; nothing can be added to it",
                    h.state.pulsar_name()
                )));
            }
            cached = Some((h, version));
        }
        for topic in partitions {
            self.ensure_buffer_record(topic).await?;
        }
        loop {
            let (mut h, version) = match cached.take() {
                Some(c) => c,
                None => self.read(t).await?,
            };
            if !may_add(h.state) {
                return Err(TxnError::InvalidStatus(format!(
                    "transaction {t} is {}; nothing can be added to it",
                    h.state.pulsar_name()
                )));
            }
            if !h.add(partitions, subscriptions) {
                return Ok(());
            }
            let expect = match version {
                0 => Expect::Absent,
                v => Expect::Version(v),
            };
            let mut ops = vec![
                fence.clone(),
                Op::put_if(paths::header_path(t), encode(&h), expect),
            ];
            let parts = partitions
                .iter()
                .map(|p| Participant::Partition(p.clone()))
                .chain(subscriptions.iter().map(|s| Participant::Subscription {
                    topic: s.topic.clone(),
                    subscription: s.subscription.clone(),
                }));
            for p in parts {
                ops.push(Op::put(paths::part_path(t, &p), Vec::new()));
            }
            match self.writes.txn(ops).await {
                Ok(resp) => {
                    self.remember(t, h, &resp);
                    // An END_TXN that came meanwhile found it unwritten and ended it in memory:
                    // the written header must say so too, or the timeout would undo what the
                    // client was told.
                    let ended = self.ended[n as usize].lock().state(t.least_sig_bits);
                    if let Some(state) = ended {
                        let action = match state {
                            TxnState::Committed => EndAction::Commit,
                            _ => EndAction::Abort,
                        };
                        self.end(t, action, false).await?;
                        return Err(TxnError::InvalidStatus(format!(
                            "transaction {t} is already {}; nothing can be added to it",
                            state.pulsar_name()
                        )));
                    }
                    return Ok(());
                }
                Err(
                    MetadataError::BadVersion { ref key, .. }
                    | MetadataError::AlreadyExists(ref key),
                ) if key.starts_with("/txn/id/") => {
                    continue;
                }
                Err(e) => return Err(self.fenced(n, e)),
            }
        }
    }

    /// A topic written in a transaction keeps a buffer record, so that whoever loads it later
    /// replays its log for transactions (topics never written in one skip that replay).
    async fn ensure_buffer_record(&self, topic: &str) -> Result<()> {
        if self.buffers_known.lock().contains(topic) {
            return Ok(());
        }
        let empty = crate::buffer::TxnBuffer::default().snapshot(None);
        let bytes = serde_json::to_vec(&empty).expect("a snapshot serializes");
        match self
            .store
            .put(&paths::buffer_path(topic), &bytes, Expect::Absent)
            .await
        {
            Ok(_) | Err(MetadataError::AlreadyExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let mut known = self.buffers_known.lock();
        if known.len() >= 100_000 {
            known.clear();
        }
        known.insert(topic.to_owned());
        Ok(())
    }

    /// END_TXN: decides (or finds decided) the outcome, then waits, at most `end_wait`, for the
    /// participants to apply it, so that what a commit made visible is visible when it returns.
    /// The ones this broker serves are told directly ([`LocalParticipants`]) and answer once
    /// applied; the others' brokers are told by push and answer the same way; for any that
    /// did not answer so, it waits until their records of the transaction are gone.
    pub async fn end_txn(&self, t: TxnId, action: EndAction) -> Result<()> {
        if matches!(action, EndAction::Commit) && self.refused.lock().contains(&t) {
            return Err(TxnError::InvalidStatus(format!(
                "transaction {t} lost a participant's registration (the metadata store failed \
                 under it); it can only be aborted"
            )));
        }
        let Decided {
            state,
            who,
            version,
        } = self.end(t, action, false).await?;
        if who.is_empty() {
            return Ok(());
        }
        let local = self.local.read().clone();
        let left: Vec<Participant> = match local {
            Some(local) => {
                let done = local.apply(t, state, who.clone()).await;
                let left: Vec<Participant> =
                    who.into_iter().filter(|p| !done.contains(p)).collect();
                let pushed = match left.is_empty() {
                    true => Vec::new(),
                    false => local.push(t, state, left.clone()).await,
                };
                left.into_iter().filter(|p| !pushed.contains(p)).collect()
            }
            None => who,
        };
        let all_applied =
            left.is_empty() || self.wait_participants(t, &left, self.cfg.end_wait).await;
        if all_applied && version > 0 {
            self.forget_header(t, version);
        }
        Ok(())
    }

    /// Tells outcomes directly to the participants this broker serves (see [`Self::end_txn`]).
    pub fn set_local(&self, local: Arc<dyn LocalParticipants>) {
        *self.local.write() = Some(local);
    }

    /// Decides `t` (or finds it decided).
    async fn end(&self, t: TxnId, action: EndAction, timed_out: bool) -> Result<Decided> {
        let n = t.most_sig_bits;
        let fence = self.leadership(n).await?;
        let mut cached = self.cached(t);
        let mut lost_answers = 0;
        loop {
            let (h, version) = match cached.take() {
                Some(c) => c,
                None => self.read(t).await?,
            };
            match decide_end(h.state, action) {
                EndDecision::AlreadyDecided => {
                    self.open[n as usize].lock().remove(&t.least_sig_bits);
                    return Ok(Decided {
                        state: h.state,
                        who: crate::participant::participants(&h),
                        version,
                    });
                }
                EndDecision::Conflict(s) => {
                    return Err(TxnError::InvalidStatus(format!(
                        "transaction {t} is already {}; it cannot be {}",
                        s.pulsar_name(),
                        match action {
                            EndAction::Commit => "committed",
                            EndAction::Abort => "aborted",
                        }
                    )));
                }
                EndDecision::Write(state) if version == 0 => {
                    // Never written: no participant to tell, nothing to record.
                    self.open[n as usize].lock().remove(&t.least_sig_bits);
                    self.refused.lock().remove(&t);
                    let next = h.decided(state, now_ms(), timed_out);
                    self.ended[n as usize].lock().insert(t.least_sig_bits, next);
                    self.count_decision(n, state, timed_out);
                    return Ok(Decided {
                        state,
                        who: Vec::new(),
                        version: 0,
                    });
                }
                EndDecision::Write(state) => {
                    let local = self.local.read().clone();
                    if let Some(l) = &local {
                        l.deciding(t, true);
                    }
                    let next = h.decided(state, now_ms(), timed_out);
                    let ops = vec![
                        fence.clone(),
                        Op::put_if(
                            paths::header_path(t),
                            encode(&next),
                            Expect::Version(version),
                        ),
                    ];
                    match self.writes.txn(ops).await {
                        Ok(resp) => {
                            self.open[n as usize].lock().remove(&t.least_sig_bits);
                            self.refused.lock().remove(&t);
                            self.count_decision(n, state, timed_out);
                            debug!(txn_id = %t, state = state.pulsar_name(), "transaction decided");
                            let version = match resp.results.get(1) {
                                Some(strobe_metadata::OpResult::Put(stat)) => stat.version,
                                _ => 0,
                            };
                            let who = crate::participant::participants(&next);
                            self.ended[n as usize].lock().insert(t.least_sig_bits, next);
                            return Ok(Decided {
                                state,
                                who,
                                version,
                            });
                        }
                        Err(MetadataError::BadVersion { ref key, .. })
                            if key.starts_with("/txn/id/") =>
                        {
                            continue;
                        }
                        // The store failed under the write (an etcd member
                        // died with it in flight): it may have landed. Read
                        // the header again; a decision that landed is then
                        // found decided, and answered as made (before, the
                        // client was told the commit failed, and its abort
                        // was refused as a conflict with its own commit).
                        Err(e) if e.is_retriable() && lost_answers < 3 => {
                            lost_answers += 1;
                            warn!(txn_id = %t, error = %e, "deciding a transaction failed; reading it again");
                            tokio::time::sleep(Duration::from_millis(100 * lost_answers)).await;
                            continue;
                        }
                        Err(e) => {
                            if let Some(l) = &local {
                                l.deciding(t, false);
                            }
                            return Err(self.fenced(n, e));
                        }
                    }
                }
            }
        }
    }

    fn count_decision(&self, n: u64, state: TxnState, timed_out: bool) {
        let c = &self.counters[n as usize];
        match (state, timed_out) {
            (TxnState::Committed, _) => &c.committed,
            (_, true) => &c.timed_out,
            _ => &c.aborted,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// Waits until none of `who` is left to apply `t`'s outcome (its record is gone), at most
    /// `limit`.
    pub async fn wait_participants(&self, t: TxnId, who: &[Participant], limit: Duration) -> bool {
        let prefix = paths::part_prefix(t);
        let ours: HashSet<String> = who.iter().map(|p| paths::part_path(t, p)).collect();
        if let Some(done) = self.waits.wait(&prefix, ours.clone(), limit).await {
            if !done {
                warn!(txn_id = %t, "participants did not apply the outcome in time; answering anyway");
            }
            return done;
        }
        let wait = async {
            let scan = self.store.scan_prefix(&prefix).await?;
            let mut left: HashSet<String> = scan
                .entries
                .into_iter()
                .map(|kv| kv.key)
                .filter(|k| ours.contains(k))
                .collect();
            if left.is_empty() {
                return Ok::<bool, TxnError>(true);
            }
            let mut watch = self.store.watch(&prefix, scan.revision + 1).await?;
            while let Some(batch) = watch.next().await {
                for ev in batch?.events {
                    if !ours.contains(&ev.key) {
                        continue;
                    }
                    match ev.kind {
                        EventKind::Deleted => left.remove(&ev.key),
                        _ => left.insert(ev.key),
                    };
                }
                if left.is_empty() {
                    return Ok(true);
                }
            }
            Ok(false)
        };
        match tokio::time::timeout(limit, wait).await {
            Ok(Ok(done)) => done,
            Ok(Err(e)) => {
                warn!(txn_id = %t, error = %e, "waiting for the participants failed");
                false
            }
            Err(_) => {
                warn!(txn_id = %t, "participants did not apply the outcome in time; answering anyway");
                false
            }
        }
    }

    /// The header of `t`, if any (admin).
    pub async fn header(&self, t: TxnId) -> Result<Option<TxnHeader>> {
        match self.read(t).await {
            Ok((h, _)) => Ok(Some(h)),
            Err(TxnError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Aborts the open transactions past their timeout on the partitions led here.
    async fn sweep_timeouts(&self) {
        let now = now_ms();
        for n in 0..self.parts.len() as u64 {
            if !self.leads(n) {
                continue;
            }
            if let Err(e) = self.leadership(n).await {
                debug!(tc_id = n, error = %e, "not sweeping");
                continue;
            }
            let expired: Vec<u64> = self.open[n as usize]
                .lock()
                .iter()
                .filter(|(_, (h, _))| h.timeout_at <= now)
                .map(|(l, _)| *l)
                .collect();
            for least in expired {
                let t = TxnId {
                    most_sig_bits: n,
                    least_sig_bits: least,
                };
                match self.end(t, EndAction::Abort, true).await {
                    Ok(Decided { state, who, .. }) => {
                        info!(txn_id = %t, "transaction timed out and was aborted");
                        let local = self.local.read().clone();
                        if let Some(local) = local.filter(|_| !who.is_empty()) {
                            tokio::spawn(async move {
                                let done = local.apply(t, state, who.clone()).await;
                                let left: Vec<Participant> =
                                    who.into_iter().filter(|p| !done.contains(p)).collect();
                                if !left.is_empty() {
                                    local.push(t, state, left).await;
                                }
                            });
                        }
                    }
                    Err(TxnError::InvalidStatus(_)) | Err(TxnError::NotFound(_)) => {
                        self.open[n as usize].lock().remove(&least);
                    }
                    Err(e) => warn!(txn_id = %t, error = %e, "timeout abort failed"),
                }
            }
        }
    }

    /// Per-partition stats (admin `coordinatorStats`, metrics).
    pub fn stats(&self) -> Vec<PartitionStats> {
        (0..self.parts.len())
            .map(|n| {
                let c = &self.counters[n];
                let leader = self.member.is_leader(n as u32);
                PartitionStats {
                    tc_id: n as u32,
                    leader,
                    open: if leader {
                        self.open[n].lock().len() as u64
                    } else {
                        0
                    },
                    created: c.created.load(Ordering::Relaxed),
                    committed: c.committed.load(Ordering::Relaxed),
                    aborted: c.aborted.load(Ordering::Relaxed),
                    timed_out: c.timed_out.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// Resigns every partition (shutdown).
    pub async fn shutdown(&self) {
        self._tasks.lock().take();
        if let Err(e) = self.member.resign_all().await {
            warn!(error = %e, "resigning the coordinator partitions failed");
        }
    }
}
