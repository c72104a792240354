//! A transaction's header (`/txn/id/<most>_<least>`) and the pure rules that change it.
//!
//! The header is the linearization point (PIP-473's `TxnHeader`): a transaction's outcome is
//! decided by the one compare-and-set that moves it from OPEN to COMMITTED or ABORTED. Every other
//! writer (a retried END_TXN, a timeout sweep, a second broker that believes it leads the
//! partition) either finds the same decision (and answers with it) or finds the other one (and is
//! refused with `InvalidTxnStatus`).

use serde::{Deserialize, Serialize};

/// Pulsar's `TxnStatus`, reduced to the states a header can be in: there is no COMMITTING or
/// ABORTING, because the decision and its record are one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TxnState {
    Open,
    Committed,
    Aborted,
}

impl TxnState {
    /// True once the outcome is decided.
    pub fn is_final(self) -> bool {
        self != TxnState::Open
    }

    /// Pulsar's name of the state (admin API).
    pub fn pulsar_name(self) -> &'static str {
        match self {
            TxnState::Open => "OPEN",
            TxnState::Committed => "COMMITTED",
            TxnState::Aborted => "ABORTED",
        }
    }
}

/// `END_TXN`'s `TxnAction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndAction {
    Commit,
    Abort,
}

impl EndAction {
    /// The state this action leads to.
    pub fn target(self) -> TxnState {
        match self {
            EndAction::Commit => TxnState::Committed,
            EndAction::Abort => TxnState::Aborted,
        }
    }
}

/// A subscription that acked in a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SubRef {
    pub topic: String,
    pub subscription: String,
}

/// What the metadata store holds for one transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TxnHeader {
    pub state: TxnState,
    /// Epoch milliseconds.
    pub created_at: u64,
    /// Epoch milliseconds after which the coordinator aborts an OPEN transaction.
    pub timeout_at: u64,
    /// When the outcome was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalized_at: Option<u64>,
    /// True when the timeout sweep, not a client, aborted it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// The broker whose coordinator created it.
    pub owner: String,
    /// Topics (partitions) written in the transaction (ADD_PARTITION_TO_TXN).
    #[serde(default)]
    pub partitions: Vec<String>,
    /// Subscriptions acked in the transaction (ADD_SUBSCRIPTION_TO_TXN).
    #[serde(default)]
    pub subscriptions: Vec<SubRef>,
}

/// What an END_TXN (or the timeout sweep) does to a header in `current` state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndDecision {
    /// CAS the header to this state: this call decides.
    Write(TxnState),
    /// The same outcome is already decided: answer success (a retry is idempotent).
    AlreadyDecided,
    /// The other outcome is decided: `InvalidTxnStatus`, naming it.
    Conflict(TxnState),
}

/// The one rule for ending a transaction.
pub fn decide_end(current: TxnState, action: EndAction) -> EndDecision {
    match current {
        TxnState::Open => EndDecision::Write(action.target()),
        s if s == action.target() => EndDecision::AlreadyDecided,
        s => EndDecision::Conflict(s),
    }
}

/// Whether participants may still be added (only while OPEN).
pub fn may_add(current: TxnState) -> bool {
    current == TxnState::Open
}

impl TxnHeader {
    /// A new OPEN header.
    pub fn open(owner: &str, now_ms: u64, ttl_ms: u64) -> TxnHeader {
        TxnHeader {
            state: TxnState::Open,
            created_at: now_ms,
            timeout_at: now_ms.saturating_add(ttl_ms),
            finalized_at: None,
            timed_out: false,
            owner: owner.to_owned(),
            partitions: Vec::new(),
            subscriptions: Vec::new(),
        }
    }

    /// Adds participants not yet listed; true if anything changed.
    pub fn add(&mut self, partitions: &[String], subscriptions: &[SubRef]) -> bool {
        let before = (self.partitions.len(), self.subscriptions.len());
        for p in partitions {
            if !self.partitions.contains(p) {
                self.partitions.push(p.clone());
            }
        }
        for s in subscriptions {
            if !self.subscriptions.contains(s) {
                self.subscriptions.push(s.clone());
            }
        }
        before != (self.partitions.len(), self.subscriptions.len())
    }

    /// The header after deciding `state` at `now_ms`.
    pub fn decided(&self, state: TxnState, now_ms: u64, timed_out: bool) -> TxnHeader {
        TxnHeader {
            state,
            finalized_at: Some(now_ms),
            timed_out,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn end_rules() {
        use EndAction::*;
        use TxnState::*;
        assert_eq!(decide_end(Open, Commit), EndDecision::Write(Committed));
        assert_eq!(decide_end(Open, Abort), EndDecision::Write(Aborted));
        assert_eq!(decide_end(Committed, Commit), EndDecision::AlreadyDecided);
        assert_eq!(decide_end(Aborted, Abort), EndDecision::AlreadyDecided);
        assert_eq!(
            decide_end(Committed, Abort),
            EndDecision::Conflict(Committed)
        );
        assert_eq!(decide_end(Aborted, Commit), EndDecision::Conflict(Aborted));
        assert!(may_add(Open) && !may_add(Committed) && !may_add(Aborted));
    }

    #[test]
    fn header_round_trips_and_reads_minimal_json() {
        let mut h = TxnHeader::open("b1", 1000, 500);
        h.add(&["persistent://a/b/c".into()], &[]);
        let json = serde_json::to_vec(&h).unwrap();
        assert_eq!(serde_json::from_slice::<TxnHeader>(&json).unwrap(), h);
        let minimal = br#"{"state":"ABORTED","createdAt":1,"timeoutAt":2,"owner":"x"}"#;
        let m: TxnHeader = serde_json::from_slice(minimal).unwrap();
        assert_eq!(m.state, TxnState::Aborted);
        assert!(m.partitions.is_empty());
    }

    /// A versioned cell with compare-and-set, as the metadata store offers.
    struct Cell {
        state: TxnState,
        version: u64,
    }

    /// A racing ender: its action, what it read (state, version), and its answer once done.
    type Actor = (EndAction, Option<(TxnState, u64)>, Option<bool>);

    proptest! {
        /// Any interleaving of racing enders (each reads, then CASes on what it read, retrying on
        /// a lost CAS) decides exactly once: every caller that got success asked for the decided
        /// outcome, and the outcome never changes afterwards.
        #[test]
        fn one_outcome_under_races(
            actions in proptest::collection::vec(any::<bool>(), 1..8),
            schedule in proptest::collection::vec(0usize..8, 1..64),
        ) {
            let mut cell = Cell { state: TxnState::Open, version: 1 };
            // Each actor: (action, what it read: None until it reads, Some(version)).
            let mut actors: Vec<Actor> = actions
                .iter()
                .map(|c| (if *c { EndAction::Commit } else { EndAction::Abort }, None, None))
                .collect();
            let mut decided: Option<TxnState> = None;
            let n = actors.len();
            for step in schedule.iter().chain((0..n * 4).collect::<Vec<_>>().iter()) {
                let a = &mut actors[step % n];
                if a.2.is_some() {
                    continue;
                }
                match a.1 {
                    None => a.1 = Some((cell.state, cell.version)),
                    Some((seen, ver)) => match decide_end(seen, a.0) {
                        EndDecision::Write(s) => {
                            if cell.version == ver {
                                cell.state = s;
                                cell.version += 1;
                                prop_assert!(decided.is_none(), "decided twice");
                                decided = Some(s);
                                a.2 = Some(true);
                            } else {
                                a.1 = None; // lost the CAS: read again
                            }
                        }
                        EndDecision::AlreadyDecided => a.2 = Some(true),
                        EndDecision::Conflict(_) => a.2 = Some(false),
                    },
                }
            }
            let outcome = decided.expect("someone decides");
            prop_assert_eq!(cell.state, outcome);
            for (action, _, ok) in &actors {
                if *ok == Some(true) {
                    prop_assert_eq!(action.target(), outcome);
                }
                if *ok == Some(false) {
                    prop_assert_ne!(action.target(), outcome);
                }
            }
        }
    }
}
