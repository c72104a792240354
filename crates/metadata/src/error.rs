//! The crate's one error type.

/// Result alias for this crate.
pub type Result<T, E = MetadataError> = std::result::Result<T, E>;

/// Everything that can go wrong in the metadata store and the coordination on top of it.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// A compare-and-set found another version than the expected one.
    #[error("bad version for {key}: expected {expected}, found {found}")]
    BadVersion {
        /// The key whose check failed.
        key: String,
        /// The version the caller expected.
        expected: u64,
        /// The version the store holds.
        found: u64,
    },
    /// The key does not exist (a get-for-update, a delete, or a put expecting a version).
    #[error("key not found: {0}")]
    NotFound(String),
    /// A put that expected the key to be absent found it.
    #[error("key already exists: {0}")]
    AlreadyExists(String),
    /// A key or prefix that the store refuses (see [`crate::validate_key`]).
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The offending path.
        path: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A transaction that cannot be executed as written (e.g. two writes to one key).
    #[error("invalid transaction: {0}")]
    InvalidTxn(String),
    /// The session (lease) the operation is bound to is gone, or was never granted.
    #[error("session expired")]
    SessionExpired,
    /// A watch asked for history the store no longer keeps; re-read and watch again.
    #[error("watch history compacted: revision {requested} is older than {compacted}")]
    Compacted {
        /// The first revision the watcher asked for.
        requested: u64,
        /// The newest revision that is no longer available.
        compacted: u64,
    },
    /// A stored value could not be decoded as the type the caller expects.
    #[error("cannot decode the value at {key}: {reason}")]
    Codec {
        /// The key whose value is malformed.
        key: String,
        /// The decoder's message.
        reason: String,
    },
    /// PIP-473: a broker is configured with another coordinator parallelism than the cluster's.
    #[error(
        "transaction coordinator parallelism mismatch: this broker is configured with {configured}, \
         but the cluster has {stored} fixed at {path}; refusing to start"
    )]
    ParallelismMismatch {
        /// This broker's configured value.
        configured: u32,
        /// The value fixed in the store.
        stored: u32,
        /// Where it is fixed.
        path: String,
    },
    /// The lock or election key is held by someone else.
    #[error("lock {0} is held by another owner")]
    LockBusy(String),
    /// The embedded store's data directory is in use by another process.
    #[error("data directory {0} is locked by another process")]
    DirectoryLocked(String),
    /// A durable file failed its checksum or could not be parsed (not a torn tail).
    #[error("corrupt metadata file {path}: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An I/O error of the embedded store. After one, the store refuses further writes.
    #[error("metadata storage I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The backend failed (connection, timeout, server error).
    #[error("metadata backend error: {0}")]
    Backend(String),
    /// The store, session or election has been closed.
    #[error("closed")]
    Closed,
}

impl MetadataError {
    /// True for errors a caller may retry as they are (connection trouble), false for answers.
    pub fn is_retriable(&self) -> bool {
        matches!(self, MetadataError::Backend(_))
    }
}
