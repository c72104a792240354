//! Append batches: the appends issued together (one socket read's SENDs,
//! one tick of a fixed-rate load) wake the group commit once, after the
//! last of them is queued.
//!
//! Without a batch, the first append of a burst wakes a sleeping flusher
//! thread, which takes that one entry and syncs it alone while the rest of
//! the burst queues behind the sync and pays a second one (docs/storage.md,
//! "Append batches"). A flusher that waited for
//! the burst itself (a yield, then a spin) fixed the bench but delayed every
//! lone append in the broker, so the hold is on the appending side, where it
//! is known that more appends follow.

use std::cell::RefCell;
use std::sync::Arc;

use super::Shared;

thread_local! {
    /// The backends whose flusher wake-up the current batch holds back;
    /// `None` outside a batch.
    static HELD: RefCell<Option<Vec<Arc<Shared>>>> = const { RefCell::new(None) };
}

/// Runs `f`, holding back the flusher wake-ups of the appends it issues on
/// this thread until it returns: the group commit then finds them all
/// queued and makes them durable with one sync. Appends are queued (and
/// ordered) as without a batch; only the wake-up moves. `f` cannot await, so
/// a batch lasts as long as the synchronous work of issuing its appends: keep
/// it short (a bounded number of appends, no blocking calls). Nested batches
/// join the outermost. Backends without a flusher (memory) are unaffected.
pub fn append_batch<R>(f: impl FnOnce() -> R) -> R {
    let outermost = HELD.with(|h| {
        let mut h = h.borrow_mut();
        if h.is_some() {
            return false;
        }
        *h = Some(Vec::new());
        true
    });
    if !outermost {
        return f();
    }
    /// Wakes what the batch held back, also when `f` panics.
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            let held = HELD.with(|h| h.borrow_mut().take()).unwrap_or_default();
            for sh in held {
                sh.wake_held();
            }
        }
    }
    let _release = Release;
    f()
}

/// Inside a batch: records that `sh`'s flusher is to be woken at the batch's
/// end and returns true. Outside one: false (wake it now).
pub(super) fn hold_wake(sh: &Arc<Shared>) -> bool {
    HELD.with(|h| match h.borrow_mut().as_mut() {
        Some(held) => {
            if !held.iter().any(|x| Arc::ptr_eq(x, sh)) {
                held.push(sh.clone());
            }
            true
        }
        None => false,
    })
}
