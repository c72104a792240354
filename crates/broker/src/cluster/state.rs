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
//!
//! Splitting and Deleted (bundle split while owned) are not used yet.

use serde::{Deserialize, Serialize};

/// A bundle's state while it has a record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerState {
    #[default]
    Owned,
    Releasing,
    Assigning,
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

    #[test]
    fn illegal_changes_are_refused() {
        use OwnerState::*;
        assert!(!legal(None, Some(Releasing)));
        assert!(!legal(None, Some(Assigning)));
        assert!(!legal(Some(Owned), Some(Assigning)));
        assert!(!legal(Some(Releasing), Some(Owned)));
        assert!(!legal(Some(Assigning), Some(Releasing)));
        assert!(!legal(None, None));
    }
}
