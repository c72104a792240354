//! When the once-a-second walks over every loaded topic may be skipped.
//!
//! A cluster broker checks each second that it still serves every loaded topic's bundle
//! under the token the topic was loaded with, and reports its bundles' message rates. Both
//! walked every loaded topic, a large share of a broker's CPU while it reloaded a lost
//! broker's topics (docs/performance.md, "Fewer walks, reads grouped"). What they find can
//! only change when what they depend on does: the walk's result for a topic changes when
//! its bundle's token does (a loss, a move, a split, the session), when its ledger fails,
//! or when its namespace's bundles change; a load inserts a topic only after checking its
//! token is the held one, so a topic loaded since the last walk passes it unless one of
//! those moved. The rates change only when the stats tick updates them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A full ownership walk at least this often, whatever moved.
const OWNERSHIP_WALK_AT_LEAST_EVERY: Duration = Duration::from_secs(10);

/// What the last ownership walk and rate report saw.
#[derive(Default)]
pub(crate) struct Walks {
    ownership: Mutex<Option<(OwnershipSeen, Instant)>>,
    rates: Mutex<Option<RatesSeen>>,
    /// Moved each time the stats tick updates the topics' rates.
    rates_generation: AtomicU64,
}

/// The state an ownership walk's result depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnershipSeen {
    /// Each served bundle and its token (`Cluster::held_fences`).
    pub held: Vec<(String, u64)>,
    /// Ledgers failed so far (`LedgerConfig::failures`).
    pub ledger_failures: u64,
    /// The policy caches' generation (namespaces' bundles).
    pub policies: u64,
}

struct RatesSeen {
    owned: Vec<String>,
    generation: u64,
    rates: BTreeMap<String, u64>,
}

impl Walks {
    /// Whether the ownership walk must run now, given the state it would read (taken before
    /// the walk, so that a change during it shows at the next tick). Remembers `now` as
    /// walked when it says yes.
    pub fn ownership_due(&self, now: OwnershipSeen) -> bool {
        let mut last = self.ownership.lock();
        if let Some((seen, at)) = last.as_ref()
            && *seen == now
            && at.elapsed() < OWNERSHIP_WALK_AT_LEAST_EVERY
        {
            return false;
        }
        *last = Some((now, Instant::now()));
        true
    }

    /// The stats tick updated every topic's rates.
    pub fn rates_updated(&self) {
        self.rates_generation.fetch_add(1, Ordering::Relaxed);
    }

    /// The rates last summed for `owned` if no stats tick ran since; otherwise `sum`'s,
    /// remembered.
    pub fn bundle_rates(
        &self,
        owned: Vec<String>,
        sum: impl FnOnce() -> BTreeMap<String, u64>,
    ) -> BTreeMap<String, u64> {
        let generation = self.rates_generation.load(Ordering::Relaxed);
        if let Some(seen) = self.rates.lock().as_ref()
            && seen.owned == owned
            && seen.generation == generation
        {
            return seen.rates.clone();
        }
        let rates = sum();
        *self.rates.lock() = Some(RatesSeen {
            owned,
            generation,
            rates: rates.clone(),
        });
        rates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(fence: u64, failures: u64) -> OwnershipSeen {
        OwnershipSeen {
            held: vec![("/bundle/a".into(), fence)],
            ledger_failures: failures,
            policies: 1,
        }
    }

    #[test]
    fn the_ownership_walk_runs_when_what_it_reads_moved() {
        let w = Walks::default();
        assert!(w.ownership_due(seen(5, 0)), "the first tick walks");
        assert!(!w.ownership_due(seen(5, 0)), "nothing moved");
        assert!(w.ownership_due(seen(6, 0)), "a token moved");
        assert!(!w.ownership_due(seen(6, 0)));
        assert!(w.ownership_due(seen(6, 1)), "a ledger failed");
        let mut policies = seen(6, 1);
        policies.policies = 2;
        assert!(w.ownership_due(policies), "bundles may have changed");
        let mut lost = seen(6, 1);
        lost.held.clear();
        lost.policies = 2;
        assert!(w.ownership_due(lost), "a bundle lost");
    }

    #[test]
    fn the_ownership_walk_runs_at_least_every_ten_seconds() {
        let w = Walks::default();
        assert!(w.ownership_due(seen(5, 0)));
        w.ownership.lock().as_mut().unwrap().1 -= OWNERSHIP_WALK_AT_LEAST_EVERY;
        assert!(w.ownership_due(seen(5, 0)));
        assert!(!w.ownership_due(seen(5, 0)));
    }

    #[test]
    fn rates_are_summed_again_after_a_stats_tick_or_an_ownership_change() {
        let w = Walks::default();
        let sums = std::cell::Cell::new(0);
        let sum = |r: u64| {
            sums.set(sums.get() + 1);
            BTreeMap::from([("/bundle/a".to_string(), r)])
        };
        let owned = || vec!["/bundle/a".to_string()];
        assert_eq!(w.bundle_rates(owned(), || sum(1))["/bundle/a"], 1);
        assert_eq!(w.bundle_rates(owned(), || sum(2))["/bundle/a"], 1, "kept");
        assert_eq!(sums.get(), 1);
        w.rates_updated();
        assert_eq!(w.bundle_rates(owned(), || sum(3))["/bundle/a"], 3);
        let more = vec!["/bundle/a".to_string(), "/bundle/b".to_string()];
        assert_eq!(w.bundle_rates(more, || sum(4))["/bundle/a"], 4);
        assert_eq!(sums.get(), 3);
    }
}
