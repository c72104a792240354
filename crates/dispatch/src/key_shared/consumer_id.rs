//! Consumer identity: how every Key_Shared structure names a consumer.

use std::fmt;

/// An opaque consumer identity chosen by the broker (for example a key into its
/// consumer table). Ties between equal names are broken by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConsumerId(pub u64);

impl fmt::Display for ConsumerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
