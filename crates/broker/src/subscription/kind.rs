//! The dispatcher of each subscription kind behind one interface: the state
//! each kind keeps. Where the kinds behave differently (who takes the next
//! entry, what happens to a leaving consumer's messages, how a redelivery is
//! queued) is in `turns`; the rest of the subscription asks [`Kind`] and
//! never matches on the subscription type itself.

use std::collections::BTreeSet;

use strobe_dispatch::SharedSelector;
use strobe_dispatch::key_shared::KeySharedDispatcher;
use strobe_ledger::Position;
use strobe_model::SubType;

use super::api::KeySharedSpec;

/// A subscription's dispatcher.
pub(super) enum Kind {
    /// No consumer: the next one decides the kind.
    Idle,
    /// Exclusive and Failover (Pulsar's `PersistentDispatcherSingleActiveConsumer`):
    /// one active consumer gets everything, in order.
    SingleActive {
        sub_type: SubType,
        /// Index of the active consumer.
        active: Option<usize>,
        /// Entries to deliver again before reading on.
        replay: BTreeSet<Position>,
    },
    /// Shared (`PersistentDispatcherMultipleConsumers`): round robin by permits.
    Shared {
        selector: SharedSelector,
        /// Entries to deliver again before reading on (redelivered, or left by a consumer).
        replay: BTreeSet<Position>,
    },
    /// Key_Shared (`PersistentStickyKeyDispatcherMultipleConsumers`): the
    /// dispatcher of `strobe-dispatch` (selector, draining hashes, pending
    /// acks, its own replay queue), and the first consumer's KeySharedMeta,
    /// which later ones must match.
    KeyShared {
        ks: Box<KeySharedDispatcher>,
        meta: KeySharedSpec,
    },
}

impl Kind {
    pub(super) fn sub_type(&self) -> Option<SubType> {
        match self {
            Kind::Idle => None,
            Kind::SingleActive { sub_type, .. } => Some(*sub_type),
            Kind::Shared { .. } => Some(SubType::Shared),
            Kind::KeyShared { .. } => Some(SubType::KeyShared),
        }
    }

    /// A fresh dispatcher of a single-active or shared kind (Key_Shared is
    /// made from its first consumer's meta, see `add_key_shared`).
    pub(super) fn new(sub_type: SubType) -> Kind {
        match sub_type {
            SubType::Shared => Kind::Shared {
                selector: SharedSelector::default(),
                replay: BTreeSet::new(),
            },
            _ => Kind::SingleActive {
                sub_type,
                active: None,
                replay: BTreeSet::new(),
            },
        }
    }

    /// The replay queue of the kinds that keep one here (Key_Shared keeps its own).
    pub(super) fn replay_mut(&mut self) -> Option<&mut BTreeSet<Position>> {
        match self {
            Kind::SingleActive { replay, .. } | Kind::Shared { replay, .. } => Some(replay),
            Kind::Idle | Kind::KeyShared { .. } => None,
        }
    }

    pub(super) fn replay(&self) -> Option<&BTreeSet<Position>> {
        match self {
            Kind::SingleActive { replay, .. } | Kind::Shared { replay, .. } => Some(replay),
            Kind::Idle | Kind::KeyShared { .. } => None,
        }
    }

    pub(super) fn key_shared(&self) -> Option<&KeySharedDispatcher> {
        match self {
            Kind::KeyShared { ks, .. } => Some(ks),
            _ => None,
        }
    }

    pub(super) fn key_shared_mut(&mut self) -> Option<&mut KeySharedDispatcher> {
        match self {
            Kind::KeyShared { ks, .. } => Some(ks),
            _ => None,
        }
    }

    /// Nothing waits to be delivered again.
    pub(super) fn replay_is_empty(&self) -> bool {
        match self {
            Kind::KeyShared { ks, .. } => ks.replay().is_empty(),
            other => other.replay().is_none_or(BTreeSet::is_empty),
        }
    }

    /// Whether cumulative acknowledgements are allowed (not on the shared kinds).
    pub(super) fn allows_cumulative_ack(&self) -> bool {
        !matches!(self, Kind::Shared { .. } | Kind::KeyShared { .. })
    }

    /// Whether entries may be held for their delivery time (Shared and Key_Shared).
    pub(super) fn delays(&self) -> bool {
        matches!(self, Kind::Shared { .. } | Kind::KeyShared { .. })
    }
}
