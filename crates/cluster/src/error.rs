use strobe_metadata::MetadataError;

/// What membership and ownership can fail with. The broker maps each to its
/// own error (Pulsar's `ServerError` code, an HTTP status) in one place.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The store's own error, kept typed: ownership must tell `BadVersion`,
    /// `AlreadyExists`, `LockBusy` and `SessionExpired` apart.
    #[error("metadata: {0}")]
    Metadata(#[from] MetadataError),
    /// A record that does not decode as what its path holds.
    #[error("metadata: {path} holds an invalid value: {reason}")]
    Corrupt { path: String, reason: String },
    /// Not served here now (owned elsewhere, moving, split, no session):
    /// the client looks the topic up again (`ServiceNotReady`).
    #[error("{0}")]
    NotReady(String),
    /// What the request names does not exist (a namespace, a bundle).
    #[error("{0}")]
    NotFound(String),
    /// A request ownership refuses (a transfer to itself, to no live broker).
    #[error("{0}")]
    Invalid(String),
    /// This broker cannot take part as configured (its id is a live broker's).
    #[error("configuration: {0}")]
    Config(String),
}

pub(crate) fn not_served(path: &str, owner: &str) -> ClusterError {
    ClusterError::NotReady(format!(
        "Namespace bundle {path} is owned by {owner}, not served by this broker"
    ))
}

/// A bundle that was split: the client looks the topic up again and finds
/// its half. (The C++ client keeps its connection on a lookup error that says
/// "is being unloaded".)
pub(crate) fn split_away(path: &str) -> ClusterError {
    ClusterError::NotReady(format!(
        "Namespace bundle {path} is being unloaded: it was split; look the topic up again"
    ))
}
