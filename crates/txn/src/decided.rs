//! What a coordinator knows of transactions it decided: the outcome and participants of a
//! decision ([`Decided`]), the newest decided headers kept in memory ([`Ended`]), and the
//! participants of its own broker, told outcomes directly, and of others, told by push
//! ([`LocalParticipants`]).

use std::collections::HashMap;

use strobe_model::TxnId;

use crate::header::{TxnHeader, TxnState};
use crate::paths::Participant;

/// The participants (topics, subscriptions) a broker serves, as its coordinator tells them an
/// outcome: directly, in the same process, instead of through the decision watch.
#[async_trait::async_trait]
pub trait LocalParticipants: Send + Sync + 'static {
    /// Applies `t`'s outcome (`state`) to those of `who` served here; returns the ones that
    /// applied it durably.
    async fn apply(&self, t: TxnId, state: TxnState, who: Vec<Participant>) -> Vec<Participant>;

    /// `t` is being decided here (`true`), or its decision failed (`false`): the outcome will
    /// come through [`Self::apply`], not (also) through the decision watch.
    fn deciding(&self, _t: TxnId, _here: bool) {}

    /// Tells `t`'s outcome to the brokers serving those of `who` that are elsewhere (Pulsar's
    /// `END_TXN_ON_PARTITION` / `END_TXN_ON_SUBSCRIPTION`); returns the ones that answered
    /// they applied it durably. The rest are waited for through their records.
    async fn push(&self, _t: TxnId, _state: TxnState, _who: Vec<Participant>) -> Vec<Participant> {
        Vec::new()
    }
}

/// What deciding a transaction found: its outcome, its participants, and the version of its
/// decided header (0: not in the store).
#[derive(Debug)]
pub(crate) struct Decided {
    pub(crate) state: TxnState,
    pub(crate) who: Vec<Participant>,
    pub(crate) version: u64,
}

/// Decided transactions remembered per partition (see [`Ended`]).
const ENDED_KEPT: usize = 20_000;

/// Decided transactions' headers, newest [`ENDED_KEPT`], oldest first out: a retried END_TXN
/// and the admin API find them here once the header is gone from the store.
#[derive(Debug, Default)]
pub(crate) struct Ended {
    pub(crate) header: HashMap<u64, TxnHeader>,
    order: std::collections::VecDeque<u64>,
}

impl Ended {
    pub(crate) fn insert(&mut self, least: u64, h: TxnHeader) {
        if self.header.insert(least, h).is_none() {
            self.order.push_back(least);
        }
        while self.order.len() > ENDED_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.header.remove(&old);
            }
        }
    }

    pub(crate) fn state(&self, least: u64) -> Option<TxnState> {
        self.header.get(&least).map(|h| h.state)
    }
}
