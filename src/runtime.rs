//! The async runtime the broker and `strobe perf` each run on.

use anyhow::Context;

/// A multi-threaded runtime of `worker_threads` threads (0: one per core)
/// named `name`, for the broker and for `strobe perf`.
pub(crate) fn runtime(
    worker_threads: usize,
    name: &str,
) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if worker_threads > 0 {
        builder.worker_threads(worker_threads);
    }
    builder
        .enable_all()
        .thread_name(name)
        .build()
        .context("starting the async runtime")
}
