//! Group commit for any backend: concurrent callers' transactions sent as one ([`Batcher`], a
//! [`MetadataStore`] over another whose writes it groups; reads, watches and leases go straight
//! through).
//!
//! One transaction is in flight at a time; what callers ask meanwhile waits and goes next, as
//! one transaction of all their operations (up to [`Batcher::new`]'s op limit; etcd refuses more
//! than 128 by default). A busy writer (the transaction coordinator, its participants) then makes
//! one write where it made dozens, and an idle one waits for nobody.
//!
//! Every caller gets the answer its own transaction would have had alone:
//! - a transaction that touches a key an earlier one of the group writes waits for the next
//!   group (etcd evaluates every compare before any write, so it would see the key as it was);
//! - identical checks (the same fence in every write of a coordinator) are sent once;
//! - when the group fails a check, the members whose operations that check is (the error names
//!   the key, and the version expected) get the error, and the others go again as a group; when
//!   no member can be named, each is sent again on its own;
//! - when the store fails under the group (it may have landed, as a lone write may), every
//!   caller gets that error, as it would have alone.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::{MetadataError, Result};
use crate::store::{
    LeaseGrant, LeaseId, MetadataStore, Op, Revision, Scan, TxnResponse, Versioned, WatchStream,
    validate_ops,
};

/// Transactions waiting for the writer; beyond this, callers wait to queue.
const QUEUE: usize = 4096;

struct Request {
    ops: Vec<Op>,
    answer: oneshot::Sender<Result<TxnResponse>>,
}

/// Sends concurrent transactions to a store as one (see the module docs).
#[derive(Debug)]
pub struct Batcher {
    store: Arc<dyn MetadataStore>,
    queue: mpsc::Sender<Request>,
    _writer: DropGuard,
}

impl Batcher {
    /// A batcher writing to `store`, at most `max_ops` operations per transaction sent.
    pub fn new(store: Arc<dyn MetadataStore>, max_ops: usize) -> Batcher {
        let (queue, rx) = mpsc::channel(QUEUE);
        let cancel = CancellationToken::new();
        tokio::spawn(write(store.clone(), rx, max_ops.max(1), cancel.clone()));
        Batcher {
            store,
            queue,
            _writer: cancel.drop_guard(),
        }
    }
}

#[async_trait]
impl MetadataStore for Batcher {
    fn backend_name(&self) -> &'static str {
        self.store.backend_name()
    }

    fn writes_made(&self) -> u64 {
        self.store.writes_made()
    }
    fn write_time(&self) -> std::time::Duration {
        self.store.write_time()
    }

    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        self.store.get(key).await
    }

    async fn scan_prefix(&self, prefix: &str) -> Result<Scan> {
        self.store.scan_prefix(prefix).await
    }

    /// Commits `ops` with the transactions waiting beside it: the answer `ops` alone would
    /// have had.
    async fn txn(&self, ops: Vec<Op>) -> Result<TxnResponse> {
        validate_ops(&ops)?;
        let (answer, rx) = oneshot::channel();
        self.queue
            .send(Request { ops, answer })
            .await
            .map_err(|_| MetadataError::Closed)?;
        rx.await.map_err(|_| MetadataError::Closed)?
    }

    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream> {
        self.store.watch(prefix, from_revision).await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseGrant> {
        self.store.grant_lease(ttl).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Option<Duration>> {
        self.store.keep_alive(lease).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        self.store.revoke_lease(lease).await
    }
}

/// The writer: one transaction in flight, the next made of everything waiting.
async fn write(
    store: Arc<dyn MetadataStore>,
    mut rx: mpsc::Receiver<Request>,
    max_ops: usize,
    cancel: CancellationToken,
) {
    let mut held: Option<Request> = None;
    loop {
        let first = match held.take() {
            Some(r) => r,
            None => tokio::select! {
                _ = cancel.cancelled() => return,
                r = rx.recv() => match r {
                    Some(r) => r,
                    None => return,
                },
            },
        };
        let mut group = Group::default();
        group.add(first);
        while group.ops.len() < max_ops {
            let Ok(next) = rx.try_recv() else { break };
            if group.takes(&next, max_ops) {
                group.add(next);
            } else {
                held = Some(next);
                break;
            }
        }
        group.send(&*store).await;
    }
}

/// Transactions sent together, and where each one's operations went.
#[derive(Default)]
struct Group {
    ops: Vec<Op>,
    members: Vec<Request>,
    written: HashSet<String>,
}

impl Group {
    /// Whether `r` can join: no key it touches is written by a member, and the group stays
    /// within `max_ops`.
    fn takes(&self, r: &Request, max_ops: usize) -> bool {
        self.ops.len() + r.ops.len() <= max_ops
            && r.ops.iter().all(|op| !self.written.contains(op.key()))
    }

    fn add(&mut self, r: Request) {
        self.place(&r.ops);
        self.members.push(r);
    }

    /// Adds `ops` (an identical check is sent once): their indexes.
    fn place(&mut self, ops: &[Op]) -> Vec<usize> {
        let mut at = Vec::with_capacity(ops.len());
        for op in ops {
            let same_check = matches!(op, Op::Check { .. })
                .then(|| self.ops.iter().position(|o| o == op))
                .flatten();
            match same_check {
                Some(i) => at.push(i),
                None => {
                    if !matches!(op, Op::Check { .. }) {
                        self.written.insert(op.key().to_owned());
                    }
                    at.push(self.ops.len());
                    self.ops.push(op.clone());
                }
            }
        }
        at
    }

    async fn send(self, store: &dyn MetadataStore) {
        let mut members = self.members;
        loop {
            if members.len() == 1 {
                let r = members.pop().expect("one member");
                let _ = r.answer.send(store.txn(r.ops).await);
                return;
            }
            let (ops, at) = combine(&members);
            match store.txn(ops).await {
                Ok(resp) => {
                    for (r, at) in members.into_iter().zip(at) {
                        let results = at.iter().map(|&i| resp.results[i]).collect();
                        let _ = r.answer.send(Ok(TxnResponse {
                            revision: resp.revision,
                            results,
                        }));
                    }
                    return;
                }
                Err(e) if answered_alone(&e) => {
                    let (failing, rest): (Vec<Request>, Vec<Request>) = members
                        .into_iter()
                        .partition(|r| r.ops.iter().any(|op| fails(op, &e)));
                    if failing.is_empty() {
                        // The error names nothing a member did as written: each alone.
                        for r in rest {
                            let _ = r.answer.send(store.txn(r.ops).await);
                        }
                        return;
                    }
                    for r in failing {
                        let _ = r.answer.send(Err(copy_check(&e)));
                    }
                    if rest.is_empty() {
                        return;
                    }
                    members = rest;
                }
                Err(e) => {
                    for r in members {
                        let _ = r.answer.send(Err(copy(&e)));
                    }
                    return;
                }
            }
        }
    }
}

/// The operations of `members` as one transaction, and each member's indexes in it.
fn combine(members: &[Request]) -> (Vec<Op>, Vec<Vec<usize>>) {
    let mut g = Group::default();
    let mut at = Vec::with_capacity(members.len());
    for r in members {
        at.push(g.place(&r.ops));
    }
    (g.ops, at)
}

/// Whether `op`, run alone, fails with `e` (a check failure naming `op`'s key).
fn fails(op: &Op, e: &MetadataError) -> bool {
    use crate::store::Expect;
    let expect = match op {
        Op::Put { expect, .. } | Op::Check { expect, .. } => Some(*expect),
        Op::Delete { version, .. } => Some(version.map_or(Expect::Any, Expect::Version)),
    };
    match (e, expect) {
        (MetadataError::BadVersion { key, expected, .. }, Some(Expect::Version(v))) => {
            key == op.key() && *expected == v
        }
        (MetadataError::NotFound(key), Some(Expect::Version(_))) => key == op.key(),
        (MetadataError::NotFound(key), _) if matches!(op, Op::Delete { .. }) => key == op.key(),
        (MetadataError::AlreadyExists(key), Some(Expect::Absent)) => key == op.key(),
        _ => false,
    }
}

/// A check failure, for each member it names.
fn copy_check(e: &MetadataError) -> MetadataError {
    match e {
        MetadataError::BadVersion {
            key,
            expected,
            found,
        } => MetadataError::BadVersion {
            key: key.clone(),
            expected: *expected,
            found: *found,
        },
        MetadataError::NotFound(k) => MetadataError::NotFound(k.clone()),
        MetadataError::AlreadyExists(k) => MetadataError::AlreadyExists(k.clone()),
        other => copy(other),
    }
}

/// Errors that belong to one member's operations (a check that failed): each member is sent
/// again alone to find whose.
fn answered_alone(e: &MetadataError) -> bool {
    matches!(
        e,
        MetadataError::BadVersion { .. }
            | MetadataError::NotFound(_)
            | MetadataError::AlreadyExists(_)
            | MetadataError::SessionExpired
            | MetadataError::InvalidTxn(_)
            | MetadataError::InvalidPath { .. }
    )
}

/// The same failure, for each caller of a group (retriable stays retriable).
fn copy(e: &MetadataError) -> MetadataError {
    match e {
        MetadataError::Backend(s) => MetadataError::Backend(s.clone()),
        MetadataError::Closed => MetadataError::Closed,
        MetadataError::Io(io) => MetadataError::Io(std::io::Error::new(io.kind(), io.to_string())),
        other => MetadataError::Backend(other.to_string()),
    }
}
