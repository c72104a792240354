//! The etcd backend's request helpers, shared by the store (`etcd`) and its read groups
//! (`etcd_reads`): errors as [`MetadataError`]s, idempotent requests sent again through a
//! failing transport, etcd's versions as [`Stat`]s.

use std::time::Duration;

use crate::error::{MetadataError, Result};
use crate::store::Stat;

pub(crate) fn backend(e: etcd_client::Error) -> MetadataError {
    let text = e.to_string();
    if text.contains("lease not found") {
        MetadataError::SessionExpired
    } else {
        MetadataError::Backend(format!("etcd: {text}"))
    }
}

/// A request that failed on its way (the connection broke, the member is
/// unavailable), not one etcd answered with a refusal.
fn transport_failed(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => {
            // gRPC's UNAVAILABLE (14); UNKNOWN (2) and CANCELLED (1) as
            // tonic reports a connection that broke under the request.
            let code: i32 = s.code().into();
            code == 14
                || (code == 2 && s.message().contains("transport error"))
                || (code == 1 && s.message().contains("canceled"))
        }
        _ => false,
    }
}

/// An idempotent request (a read, a lease grant), sent again while the
/// transport fails, within `timeout`: with several endpoints, a request
/// caught on a member's dying connection (broken pipe, unavailable) goes to
/// another. A write is never resent here: whether it took effect is unknown,
/// and its caller decides.
pub(crate) async fn idempotent<T, F, Fut>(timeout: Duration, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut backoff = Duration::from_millis(50);
    loop {
        match tokio::time::timeout_at(deadline, op()).await {
            Err(_) => return Err(MetadataError::Backend("etcd request timed out".into())),
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e))
                if transport_failed(&e) && tokio::time::Instant::now() + backoff < deadline =>
            {
                tracing::debug!(error = %e, "etcd request failed in transport; sending it again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            Ok(Err(e)) => return Err(backend(e)),
        }
    }
}

pub(crate) fn stat_of(kv: &etcd_client::KeyValue) -> Stat {
    Stat {
        version: kv.mod_revision() as u64,
        created: kv.create_revision() as u64,
        lease: (kv.lease() != 0).then_some(kv.lease()),
    }
}
