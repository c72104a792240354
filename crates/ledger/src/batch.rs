//! Append batches, for every backend with a group commit: the appends issued together (one socket read's SENDs,
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

/// A backend with a group commit that a batch can hold back.
pub(crate) trait HeldWake: Send + Sync + 'static {
    /// Wakes what the batch held back (the group commit, if it sleeps and
    /// something is queued).
    fn wake_held(&self);
}

thread_local! {
    /// The backends whose group-commit wake-up the current batch holds back;
    /// `None` outside a batch.
    static HELD: RefCell<Option<Vec<Arc<dyn HeldWake>>>> = const { RefCell::new(None) };
}

/// Runs `f`, holding back the flusher wake-ups of the appends it issues on
/// this thread until it returns: the group commit then finds them all
/// queued and makes them durable with one sync. Appends are queued (and
/// ordered) as without a batch; only the wake-up moves. `f` cannot await, so
/// a batch lasts as long as the synchronous work of issuing its appends: keep
/// it short (a bounded number of appends, no blocking calls). Nested batches
/// join the outermost. Backends without a group commit (memory) are unaffected.
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

/// Inside a batch: records that `w` is to be woken at the batch's end and
/// returns true. Outside one: false (wake it now).
pub(crate) fn hold_wake<W: HeldWake>(w: &Arc<W>) -> bool {
    HELD.with(|h| match h.borrow_mut().as_mut() {
        Some(held) => {
            let me = Arc::as_ptr(w) as *const ();
            if !held.iter().any(|x| Arc::as_ptr(x) as *const () == me) {
                held.push(w.clone());
            }
            true
        }
        None => false,
    })
}
