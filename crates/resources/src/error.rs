use strobe_metadata::MetadataError;

/// What reading or writing a metadata document can fail with. The broker
/// maps each to its own error (and so to Pulsar's `ServerError` code and an
/// HTTP status) in one place, `strobe_broker`'s `error` module.
#[derive(Debug, thiserror::Error)]
pub enum ResourcesError {
    /// The store's own error, kept typed (`BadVersion`, `AlreadyExists`,
    /// `SessionExpired` must stay apart for their callers).
    #[error("metadata: {0}")]
    Metadata(#[from] MetadataError),
    /// A value that does not decode as what its path holds.
    #[error("metadata: {path} holds an invalid value: {reason}")]
    Corrupt { path: String, reason: String },
    /// A document created twice (a tenant, a namespace, a partitioned topic).
    #[error("{0}")]
    AlreadyExists(String),
    /// A document that must exist does not (a namespace, a bundle).
    #[error("{0}")]
    NotFound(String),
    /// A concurrent change won a compare-and-set (HTTP 409).
    #[error("{0}")]
    Conflict(String),
    /// A request the documents' rules refuse (a malformed bundle, an unknown action).
    #[error("{0}")]
    Invalid(String),
    /// A failed precondition (HTTP 412), e.g. splitting a bundle too small to split.
    #[error("{0}")]
    Precondition(String),
}
