//! Writes whose effect is the same however often they land: a record
//! created once by whichever broker comes first, a record deleted for good.
//! Sent again when the store fails under them (an etcd member dying with
//! the request in flight), where other writes cannot be.

use std::time::Duration;

use crate::{Expect, MetadataError, MetadataStore, Result};

/// How long a start-up write keeps trying through a store that is failing
/// over (an etcd member dying under the request).
const ONCE_FOR: Duration = Duration::from_secs(60);

/// Creates `path` with `value` unless it exists; true when this call made
/// it. A write whose outcome is unknown (the store failed under it) is sent
/// again: for a record any broker may create with the same meaning, finding
/// it already there is as good as having written it. Not for claims (a
/// record that names its writer), where a resent write that finds its own
/// earlier copy would take it for someone else's.
pub async fn create_once(store: &dyn MetadataStore, path: &str, value: &[u8]) -> Result<bool> {
    resend(path, "creating", ONCE_FOR, || async {
        match store.put(path, value, Expect::Absent).await {
            Ok(_) => Ok(true),
            Err(MetadataError::AlreadyExists(_)) => Ok(false),
            Err(e) => Err(e),
        }
    })
    .await
}

/// Deletes `path` if it exists (a record whose work is done). A delete
/// whose outcome is unknown is sent again: finding the record gone is as
/// good as having deleted it. Retried for up to `within`, then the error
/// (a caller that holds others up while it waits keeps that short).
pub async fn delete_once(store: &dyn MetadataStore, path: &str, within: Duration) -> Result<()> {
    resend(path, "deleting", within, || async {
        match store.delete(path, None).await {
            Ok(()) | Err(MetadataError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    })
    .await
}

/// [`delete_once`] as one transaction with `checks` (a fence): a failed
/// check is the caller's error; the key already gone is done.
pub async fn delete_once_checked(
    store: &dyn MetadataStore,
    path: &str,
    checks: &[crate::Op],
    within: Duration,
) -> Result<()> {
    if checks.is_empty() {
        return delete_once(store, path, within).await;
    }
    resend(path, "deleting", within, || async {
        let mut ops = checks.to_vec();
        ops.push(crate::Op::delete(path, None));
        match store.txn(ops).await {
            Ok(_) => Ok(()),
            Err(MetadataError::NotFound(k)) if k == path => Ok(()),
            Err(e) => Err(e),
        }
    })
    .await
}

/// `op` again, with a growing pause, while it fails for a transport reason
/// and `within` has not passed.
async fn resend<T, F, Fut>(path: &str, doing: &str, within: Duration, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    let mut backoff = Duration::from_millis(100);
    loop {
        match op().await {
            Err(e) if e.is_retriable() && tokio::time::Instant::now() + backoff < deadline => {
                tracing::warn!(path, error = %e, "{doing} a record failed; trying again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{create_once, delete_once};
    use crate::testing::LostAnswers;
    use crate::{EmbeddedStore, MetadataError, MetadataStore};

    #[tokio::test]
    async fn a_create_whose_answer_was_lost_is_sent_again_and_found_done() {
        let s = LostAnswers::new(EmbeddedStore::in_memory());
        s.fail_next(2);
        // The first write lands, its answer is lost; the second finds it.
        assert!(!create_once(&s, "/admin/x", b"1").await.unwrap());
        assert_eq!(s.get("/admin/x").await.unwrap().unwrap().value, b"1");
        assert_eq!(s.failing(), 0);
        // Nothing to create: false, without an error.
        assert!(!create_once(&s, "/admin/x", b"2").await.unwrap());
        assert!(create_once(&s, "/admin/y", b"3").await.unwrap());
    }

    #[tokio::test]
    async fn a_delete_whose_answer_was_lost_is_sent_again_and_found_done() {
        let s = LostAnswers::new(EmbeddedStore::in_memory());
        assert!(create_once(&s, "/admin/x", b"1").await.unwrap());
        s.fail_next(2);
        delete_once(&s, "/admin/x", Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(s.failing(), 0);
        assert!(s.get("/admin/x").await.unwrap().is_none());
        // Nothing to delete: done.
        delete_once(&s, "/admin/x", Duration::from_secs(5))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_refusal_that_is_not_a_transport_failure_is_returned() {
        let s = EmbeddedStore::in_memory();
        let e = create_once(&s, "no-slash", b"1").await.unwrap_err();
        assert!(matches!(e, MetadataError::InvalidPath { .. }), "{e:?}");
    }
}
