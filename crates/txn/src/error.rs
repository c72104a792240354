/// Everything that can go wrong with a transaction, each mapping to one Pulsar `ServerError`.
#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    /// This broker does not lead the transaction's coordinator partition
    /// (`TransactionCoordinatorNotFound`).
    #[error("{0}")]
    CoordinatorNotFound(String),
    /// No such transaction (`TransactionNotFound`).
    #[error("{0}")]
    NotFound(String),
    /// The transaction is not in a state that allows the operation (`InvalidTxnStatus`).
    #[error("{0}")]
    InvalidStatus(String),
    /// Another transaction holds what this one wants (`TransactionConflict`).
    #[error("{0}")]
    Conflict(String),
    /// A request the coordinator refuses outright (`NotAllowedError`).
    #[error("{0}")]
    NotAllowed(String),
    /// The metadata store failed (`MetadataError`).
    #[error("metadata store: {0}")]
    Metadata(#[from] strobe_metadata::MetadataError),
}

/// Result alias for this crate.
pub type Result<T, E = TxnError> = std::result::Result<T, E>;
