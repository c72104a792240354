//! What a connection keeps of its clients besides their producers: who
//! authenticated, and each consumer's subscription handle.

use std::sync::Arc;

use crate::subscription::SubscriptionHandle;
use crate::topic::Topic;

/// The authenticated identity of a connection.
#[derive(Debug, Clone)]
pub(super) struct Authenticated {
    pub(super) role: Option<String>,
    pub(super) method: String,
    pub(super) expires_at: Option<std::time::SystemTime>,
}

/// A consumer on the connection: its topic and subscription.
pub(super) struct ConsumerRef {
    pub(super) topic: Arc<Topic>,
    pub(super) sub: SubscriptionHandle,
    pub(super) closed_by_broker: Arc<std::sync::atomic::AtomicBool>,
}
