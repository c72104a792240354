//! When an inactive topic goes (Pulsar's `PersistentTopic.checkGC`): a
//! topic is active while anything uses it in the sense of its policy's
//! mode; once it has been inactive for the policy's duration, and its
//! retention does not keep it, it is deleted.

use std::time::{Duration, Instant};

use crate::policy::{InactiveTopicDeleteMode, InactiveTopicPolicies};

/// What a topic has now, as the check sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub producers: usize,
    pub consumers: usize,
    /// Durable subscriptions.
    pub subscriptions: usize,
    /// Some subscription has messages it has not acknowledged.
    pub backlog: bool,
}

/// Whether the topic is in use under `mode`.
pub fn is_active(mode: InactiveTopicDeleteMode, u: &Usage) -> bool {
    let held = match mode {
        InactiveTopicDeleteMode::DeleteWhenNoSubscriptions => u.subscriptions > 0,
        InactiveTopicDeleteMode::DeleteWhenSubscriptionsCaughtUp => u.backlog,
    };
    held || u.producers > 0 || u.consumers > 0
}

/// The check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// In use: its inactivity starts again from now.
    Active,
    /// Not in use, not for long enough (or the policy keeps it).
    Wait,
    /// Delete it (and, in the caught-up mode, its subscriptions).
    Delete,
}

/// One check: `inactive_since` is when the topic was last seen active (or
/// loaded); `retention` is its retention time (None: kept for ever, as a
/// negative retention time is in Pulsar).
pub fn check(
    policy: &InactiveTopicPolicies,
    usage: &Usage,
    inactive_since: Instant,
    retention: Option<Duration>,
    now: Instant,
) -> Verdict {
    if is_active(policy.inactive_topic_delete_mode, usage) {
        return Verdict::Active;
    }
    if !policy.delete_while_inactive {
        return Verdict::Wait;
    }
    let idle = now.saturating_duration_since(inactive_since);
    let max = Duration::from_secs(policy.max_inactive_duration_seconds.max(0) as u64);
    if idle < max {
        return Verdict::Wait;
    }
    match retention {
        None => Verdict::Wait,
        Some(r) if idle < r => Verdict::Wait,
        Some(_) => Verdict::Delete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(mode: InactiveTopicDeleteMode) -> InactiveTopicPolicies {
        InactiveTopicPolicies {
            inactive_topic_delete_mode: mode,
            max_inactive_duration_seconds: 60,
            delete_while_inactive: true,
        }
    }

    #[test]
    fn a_topic_with_a_subscription_stays_in_the_no_subscriptions_mode() {
        let t0 = Instant::now();
        let late = t0 + Duration::from_secs(3600);
        let p = policy(InactiveTopicDeleteMode::DeleteWhenNoSubscriptions);
        let subscribed = Usage {
            subscriptions: 1,
            ..Default::default()
        };
        assert_eq!(
            check(&p, &subscribed, t0, Some(Duration::ZERO), late),
            Verdict::Active
        );
        let bare = Usage::default();
        assert_eq!(
            check(
                &p,
                &bare,
                t0,
                Some(Duration::ZERO),
                t0 + Duration::from_secs(59)
            ),
            Verdict::Wait
        );
        assert_eq!(
            check(
                &p,
                &bare,
                t0,
                Some(Duration::ZERO),
                t0 + Duration::from_secs(60)
            ),
            Verdict::Delete
        );
        let producing = Usage {
            producers: 1,
            ..Default::default()
        };
        assert_eq!(
            check(&p, &producing, t0, Some(Duration::ZERO), late),
            Verdict::Active
        );
    }

    #[test]
    fn the_caught_up_mode_keeps_a_backlog_and_connected_consumers() {
        let t0 = Instant::now();
        let late = t0 + Duration::from_secs(3600);
        let p = policy(InactiveTopicDeleteMode::DeleteWhenSubscriptionsCaughtUp);
        let backlog = Usage {
            subscriptions: 2,
            backlog: true,
            ..Default::default()
        };
        assert_eq!(
            check(&p, &backlog, t0, Some(Duration::ZERO), late),
            Verdict::Active
        );
        let caught_up = Usage {
            subscriptions: 2,
            ..Default::default()
        };
        assert_eq!(
            check(&p, &caught_up, t0, Some(Duration::ZERO), late),
            Verdict::Delete
        );
        let reading = Usage {
            subscriptions: 2,
            consumers: 1,
            ..Default::default()
        };
        assert_eq!(
            check(&p, &reading, t0, Some(Duration::ZERO), late),
            Verdict::Active
        );
    }

    #[test]
    fn retention_and_a_disabled_policy_keep_the_topic() {
        let t0 = Instant::now();
        let late = t0 + Duration::from_secs(3600);
        let mut p = policy(InactiveTopicDeleteMode::DeleteWhenNoSubscriptions);
        let bare = Usage::default();
        assert_eq!(check(&p, &bare, t0, None, late), Verdict::Wait);
        assert_eq!(
            check(&p, &bare, t0, Some(Duration::from_secs(7200)), late),
            Verdict::Wait
        );
        assert_eq!(
            check(&p, &bare, t0, Some(Duration::from_secs(1800)), late),
            Verdict::Delete
        );
        p.delete_while_inactive = false;
        assert_eq!(
            check(&p, &bare, t0, Some(Duration::ZERO), late),
            Verdict::Wait
        );
    }
}
