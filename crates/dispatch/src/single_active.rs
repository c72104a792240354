//! The active consumer of an Exclusive or Failover subscription.

/// What the selection looks at: Pulsar sorts Failover consumers by priority
/// level (lower first), then by consumer name; the first is active on a
/// non-partitioned topic. On partition `p` of a partitioned topic the active
/// one is `sorted[p % n]`, which spreads partitions over the consumers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerKey<'a> {
    pub priority_level: i32,
    pub name: &'a str,
    /// Tie-break for equal names: the order consumers subscribed in.
    pub seq: u64,
}

/// The index (into `consumers`) of the active consumer, or `None` when empty.
pub fn failover_active(consumers: &[ConsumerKey<'_>], partition: Option<u32>) -> Option<usize> {
    if consumers.is_empty() {
        return None;
    }
    let mut order: Vec<usize> = (0..consumers.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&consumers[a], &consumers[b]);
        (x.priority_level, x.name, x.seq).cmp(&(y.priority_level, y.name, y.seq))
    });
    let pick = match partition {
        // Only consumers of the highest priority share partitions.
        Some(p) => {
            let top = consumers[order[0]].priority_level;
            let eligible = order
                .iter()
                .take_while(|&&i| consumers[i].priority_level == top)
                .count();
            order[p as usize % eligible]
        }
        None => order[0],
    };
    Some(pick)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(priority_level: i32, name: &str, seq: u64) -> ConsumerKey<'_> {
        ConsumerKey {
            priority_level,
            name,
            seq,
        }
    }

    #[test]
    fn priority_then_name() {
        let cs = [k(1, "a", 0), k(0, "z", 1), k(0, "m", 2)];
        assert_eq!(failover_active(&cs, None), Some(2));
        assert_eq!(failover_active(&[], None), None);
    }

    #[test]
    fn partitions_spread_over_top_priority() {
        let cs = [k(0, "b", 0), k(0, "a", 1), k(5, "0", 2)];
        assert_eq!(failover_active(&cs, Some(0)), Some(1));
        assert_eq!(failover_active(&cs, Some(1)), Some(0));
        assert_eq!(failover_active(&cs, Some(2)), Some(1));
    }

    #[test]
    fn same_name_falls_back_to_subscription_order() {
        let cs = [k(0, "x", 7), k(0, "x", 3)];
        assert_eq!(failover_active(&cs, None), Some(1));
    }
}
