//! What the crate's tests share: brokers joined to one in-memory store.

use std::sync::Arc;
use std::time::Duration;

use strobe_metadata::{MetadataStore, SessionOptions};

use crate::Cluster;
use crate::registry::broker;

/// Brokers "a" and "b" joined to one in-memory store.
pub(crate) async fn pair() -> (Arc<Cluster>, Arc<Cluster>) {
    pair_on(Arc::new(strobe_metadata::EmbeddedStore::in_memory())).await
}

/// Brokers "a" and "b" joined to `store`.
pub(crate) async fn pair_on(store: Arc<dyn MetadataStore>) -> (Arc<Cluster>, Arc<Cluster>) {
    // Taking a bundle checks the namespace's boundaries in the store.
    for ns in ["public/default", "t/n"] {
        store
            .put(
                &strobe_resources::paths::namespace(ns),
                b"{}",
                strobe_metadata::Expect::Absent,
            )
            .await
            .unwrap();
    }
    let opts = SessionOptions::with_ttl(Duration::from_secs(5));
    let a = Cluster::join(store.clone(), opts.clone(), broker("a"))
        .await
        .unwrap();
    let b = Cluster::join(store, opts, broker("b")).await.unwrap();
    (a, b)
}
