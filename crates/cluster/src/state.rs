//! The states of a bundle's ownership record and which changes are legal
//! (Pulsar's `ServiceUnitState`, as far as Strobe uses it). Pure: the store
//! side lives in `ownership.rs`, which makes every change by compare-and-set
//! on the record's version, so only a transition from the state it read can
//! land.
//!
//! No record is *Free*. A record lives under its writer's session lease, so
//! when the broker driving a state dies the record vanishes and the bundle is
//! Free again: every in-flight state resolves without anyone cleaning up.
//!
//! | from | to | by |
//! |---|---|---|
//! | Free | Owned | any broker (create-if-absent) |
//! | Owned | Releasing{dst} | the owner: a transfer starts; lookups answer `dst` |
//! | Owned | Free | the owner (unload), or its lease expiring |
//! | Releasing | Assigning{dst} | the source, once its topics are closed and their logs sealed |
//! | Releasing | Free | the source giving up, or its lease expiring |
//! | Assigning | Owned | the destination, moving the record onto its own lease |
//! | Assigning | Free | the source giving up (no destination came), or its lease expiring |
//! | Owned | Splitting | the owner: a split starts; it keeps serving the bundle's topics |
//! | Splitting | Deleted | the owner, in one transaction that also creates the two halves' records (Owned by it, with its fencing token) and writes the namespace's new boundaries |
//! | Splitting | Free | the owner giving up a split that could not finish, or its lease expiring |
//! | Deleted | Free | the owner, once every broker has seen the new boundaries (a tombstone delay), or its lease expiring |
//!
//! A Deleted record stops a broker whose view of the boundaries is stale from
//! taking the old bundle again: it answers "being unloaded" and the client
//! looks up again. A broker takes a free bundle only in a transaction that
//! also checks the version of the namespace's boundaries it found the bundle
//! in, so even when the Deleted record is gone (its holder died) no bundle
//! that was split away is ever taken again.

use serde::{Deserialize, Serialize};

/// A bundle's state while it has a record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerState {
    #[default]
    Owned,
    Releasing,
    Assigning,
    Splitting,
    Deleted,
}

/// Whether a record may go from `from` to `to` (`None`: Free).
pub fn legal(from: Option<OwnerState>, to: Option<OwnerState>) -> bool {
    use OwnerState::*;
    matches!(
        (from, to),
        (None, Some(Owned))
            | (Some(Owned), Some(Releasing))
            | (Some(Owned), None)
            | (Some(Releasing), Some(Assigning))
            | (Some(Releasing), None)
            | (Some(Assigning), Some(Owned))
            | (Some(Assigning), None)
            | (Some(Owned), Some(Splitting))
            | (Some(Splitting), Some(Deleted))
            | (Some(Splitting), None)
            | (Some(Deleted), None)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The record as a compare-and-set store holds it.
    #[derive(Debug, Clone, PartialEq)]
    struct Record {
        state: OwnerState,
        /// Whose lease the record lives under.
        holder: u8,
        dst: Option<u8>,
        version: u64,
    }

    #[derive(Debug, Clone)]
    enum Op {
        Acquire(u8),
        BeginTransfer(u8, u8),
        Assign(u8),
        Adopt(u8),
        Release(u8),
        Die(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        let b = 0u8..3;
        prop_oneof![
            b.clone().prop_map(Op::Acquire),
            (b.clone(), b.clone()).prop_map(|(a, d)| Op::BeginTransfer(a, d)),
            b.clone().prop_map(Op::Assign),
            b.clone().prop_map(Op::Adopt),
            b.clone().prop_map(Op::Release),
            b.prop_map(Op::Die),
        ]
    }

    /// Applies `op` the way ownership.rs does: each actor reads the record,
    /// decides from what it read, and writes by compare-and-set on the
    /// version read, with the transition checked by `legal`.
    fn apply(rec: &Option<Record>, op: &Op, next_version: u64) -> Option<Option<Record>> {
        let from = rec.as_ref().map(|r| r.state);
        let new = match (op, rec) {
            (Op::Acquire(b), None) => Some(Record {
                state: OwnerState::Owned,
                holder: *b,
                dst: None,
                version: next_version,
            }),
            (Op::BeginTransfer(b, d), Some(r))
                if r.holder == *b && r.state == OwnerState::Owned && b != d =>
            {
                Some(Record {
                    state: OwnerState::Releasing,
                    dst: Some(*d),
                    version: next_version,
                    ..r.clone()
                })
            }
            (Op::Assign(b), Some(r)) if r.holder == *b && r.state == OwnerState::Releasing => {
                Some(Record {
                    state: OwnerState::Assigning,
                    version: next_version,
                    ..r.clone()
                })
            }
            (Op::Adopt(d), Some(r)) if r.state == OwnerState::Assigning && r.dst == Some(*d) => {
                Some(Record {
                    state: OwnerState::Owned,
                    holder: *d,
                    dst: None,
                    version: next_version,
                })
            }
            (Op::Release(b), Some(r)) if r.holder == *b => None,
            (Op::Die(b), Some(r)) if r.holder == *b => None,
            _ => return None,
        };
        assert!(
            legal(from, new.as_ref().map(|r| r.state)),
            "{op:?}: {from:?} -> {new:?}"
        );
        Some(new)
    }

    proptest! {
        /// Whatever the interleaving: only legal transitions, at most one
        /// owner, each new owner's fencing token above every earlier one,
        /// and every state resolves once the brokers driving it are gone.
        #[test]
        fn ownership_stays_single_and_resolves(ops in proptest::collection::vec(op(), 1..60)) {
            let mut rec: Option<Record> = None;
            let mut version = 0u64;
            let mut last_owner_token = 0u64;
            for op in &ops {
                version += 1;
                if let Some(next) = apply(&rec, op, version) {
                    if let Some(r) = &next
                        && r.state == OwnerState::Owned
                        && rec.as_ref().is_none_or(|p| p.holder != r.holder || p.state != OwnerState::Owned)
                    {
                        prop_assert!(r.version > last_owner_token);
                        last_owner_token = r.version;
                    }
                    rec = next;
                }
                // One record, one holder: never two owners.
                let owners = rec.iter().filter(|r| r.state == OwnerState::Owned).count();
                prop_assert!(owners <= 1);
            }
            // The brokers die: whatever was in flight is Free.
            for b in 0..3 {
                if let Some(next) = apply(&rec, &Op::Die(b), version + 1) {
                    rec = next;
                }
            }
            prop_assert!(rec.is_none());
        }
    }

    /// A split: bundle P (keys 0 and 1) splits into C0 (key 0) and C1 (key
    /// 1). Brokers see the namespace's boundaries through views that may be
    /// stale; taking a free bundle checks the current boundaries in the same
    /// transaction (as `ownership.rs` does), and the split itself is one
    /// transaction from Splitting to Deleted.
    #[derive(Debug, Clone)]
    enum SplitOp {
        Refresh(u8),
        /// Broker b takes the bundle its view puts key k in.
        Acquire(u8, u8),
        BeginSplit(u8),
        FinishSplit(u8),
        /// The owner deletes the Deleted record (the tombstone delay passed;
        /// the model lets it happen at any time).
        Tombstone(u8),
        /// Broker b gives up record r (Owned, or a Splitting it abandons).
        Release(u8, u8),
        Die(u8),
    }

    fn split_op() -> impl Strategy<Value = SplitOp> {
        let b = 0u8..3;
        prop_oneof![
            b.clone().prop_map(SplitOp::Refresh),
            (b.clone(), 0u8..2).prop_map(|(b, k)| SplitOp::Acquire(b, k)),
            b.clone().prop_map(SplitOp::BeginSplit),
            b.clone().prop_map(SplitOp::FinishSplit),
            b.clone().prop_map(SplitOp::Tombstone),
            (b.clone(), 0u8..3).prop_map(|(b, r)| SplitOp::Release(b, r)),
            b.prop_map(SplitOp::Die),
        ]
    }

    #[derive(Debug, Clone, PartialEq)]
    struct Held {
        state: OwnerState,
        holder: u8,
        fence: u64,
    }

    /// Records 0 and 1 are the halves, 2 the parent.
    const PARENT: usize = 2;

    #[derive(Debug, Default)]
    struct World {
        recs: [Option<Held>; 3],
        split: bool,
        views: [bool; 3],
        version: u64,
    }

    impl World {
        fn set(&mut self, r: usize, to: Option<Held>) {
            let from = self.recs[r].as_ref().map(|h| h.state);
            assert!(
                legal(from, to.as_ref().map(|h| h.state)),
                "record {r}: {from:?} -> {to:?}"
            );
            self.recs[r] = to;
        }

        fn apply(&mut self, op: &SplitOp) {
            self.version += 1;
            let v = self.version;
            let held_by = |w: &World, r: usize, b: u8, st: OwnerState| {
                w.recs[r]
                    .as_ref()
                    .is_some_and(|h| h.holder == b && h.state == st)
            };
            match *op {
                SplitOp::Refresh(b) => self.views[b as usize] = self.split,
                SplitOp::Acquire(b, k) => {
                    let r = if self.views[b as usize] {
                        k as usize
                    } else {
                        PARENT
                    };
                    // The bundle must be one of the current boundaries' (checked
                    // in the transaction that writes the record) and free.
                    let exists = (r == PARENT) != self.split;
                    if exists && self.recs[r].is_none() {
                        self.set(
                            r,
                            Some(Held {
                                state: OwnerState::Owned,
                                holder: b,
                                fence: v,
                            }),
                        );
                    }
                }
                SplitOp::BeginSplit(b) => {
                    if held_by(self, PARENT, b, OwnerState::Owned) {
                        let fence = self.recs[PARENT].as_ref().unwrap().fence;
                        self.set(
                            PARENT,
                            Some(Held {
                                state: OwnerState::Splitting,
                                holder: b,
                                fence,
                            }),
                        );
                    }
                }
                SplitOp::FinishSplit(b) => {
                    if held_by(self, PARENT, b, OwnerState::Splitting)
                        && !self.split
                        && self.recs[0].is_none()
                        && self.recs[1].is_none()
                    {
                        let fence = self.recs[PARENT].as_ref().unwrap().fence;
                        self.set(
                            PARENT,
                            Some(Held {
                                state: OwnerState::Deleted,
                                holder: b,
                                fence,
                            }),
                        );
                        for r in 0..2 {
                            self.set(
                                r,
                                Some(Held {
                                    state: OwnerState::Owned,
                                    holder: b,
                                    fence,
                                }),
                            );
                        }
                        self.split = true;
                        self.views[b as usize] = true;
                    }
                }
                SplitOp::Tombstone(b) => {
                    if held_by(self, PARENT, b, OwnerState::Deleted) {
                        self.set(PARENT, None);
                    }
                }
                SplitOp::Release(b, r) => {
                    let r = r as usize;
                    if held_by(self, r, b, OwnerState::Owned)
                        || held_by(self, r, b, OwnerState::Splitting)
                    {
                        self.set(r, None);
                    }
                }
                SplitOp::Die(b) => {
                    for r in 0..3 {
                        if self.recs[r].as_ref().is_some_and(|h| h.holder == b) {
                            self.set(r, None);
                        }
                    }
                    // A broker that starts again reads the boundaries afresh.
                    self.views[b as usize] = self.split;
                }
            }
        }

        /// Who serves key k: a broker whose view puts k in a bundle it holds
        /// Owned (or Splitting: the owner serves on while it splits).
        fn servers(&self, k: usize) -> Vec<(u8, u64)> {
            (0..3u8)
                .filter_map(|b| {
                    let r = if self.views[b as usize] { k } else { PARENT };
                    self.recs[r]
                        .as_ref()
                        .filter(|h| {
                            h.holder == b
                                && matches!(h.state, OwnerState::Owned | OwnerState::Splitting)
                        })
                        .map(|h| (b, h.fence))
                })
                .collect()
        }
    }

    proptest! {
        /// Whatever the interleaving of splits, takes, releases, deaths and
        /// stale views: only legal transitions, at most one broker serves a
        /// key, a key's new server has a fencing token above its last one
        /// (the halves keep their parent's, as the same broker goes on
        /// writing the same logs), and everything resolves when the brokers die.
        #[test]
        fn a_split_never_gives_a_key_two_servers(ops in proptest::collection::vec(split_op(), 1..80)) {
            let mut w = World::default();
            let mut last: [Option<(u8, u64)>; 2] = [None, None];
            for op in &ops {
                w.apply(op);
                for (k, last) in last.iter_mut().enumerate() {
                    let s = w.servers(k);
                    prop_assert!(s.len() <= 1, "key {k} served by {s:?} after {op:?}: {w:?}");
                    if let Some(&now) = s.first() {
                        if let Some(prev) = *last && prev != now {
                            prop_assert!(now.1 > prev.1, "key {k}: {prev:?} -> {now:?}");
                        }
                        *last = Some(now);
                    }
                }
            }
            for b in 0..3 {
                w.apply(&SplitOp::Die(b));
            }
            prop_assert!(w.recs.iter().all(Option::is_none));
        }
    }

    #[test]
    fn illegal_changes_are_refused() {
        use OwnerState::*;
        assert!(!legal(None, Some(Releasing)));
        assert!(!legal(None, Some(Assigning)));
        assert!(!legal(Some(Owned), Some(Assigning)));
        assert!(!legal(Some(Releasing), Some(Owned)));
        assert!(!legal(Some(Assigning), Some(Releasing)));
        assert!(!legal(None, None));
        assert!(!legal(None, Some(Splitting)));
        assert!(!legal(None, Some(Deleted)));
        assert!(!legal(Some(Splitting), Some(Owned)));
        assert!(!legal(Some(Deleted), Some(Owned)));
        assert!(!legal(Some(Releasing), Some(Splitting)));
    }
}
