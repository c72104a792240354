use std::path::PathBuf;

use strobe_model::Position;

/// Everything that can go wrong in this crate. The broker maps these to
/// Pulsar's `ServerError` codes in one place.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LedgerError {
    /// An I/O error, with what we were doing and where.
    #[error("{op} {path}: {message}")]
    Io {
        op: &'static str,
        path: PathBuf,
        message: String,
    },
    /// Stored data failed its CRC-32C or framing check somewhere other than a
    /// torn tail. The topic refuses service rather than serve wrong data.
    #[error("corrupt segment {path} at byte {offset}: {reason}; topic {topic} refuses service")]
    Corrupt {
        topic: String,
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// The topic is already open through this backend (one writer per topic).
    #[error("topic {0} is already open")]
    AlreadyOpen(String),

    /// An open with a fencing token older than one the topic was opened with.
    #[error("topic {topic} is fenced: opened with token {token}, but token {current} owns it")]
    Fenced {
        topic: String,
        token: u64,
        current: u64,
    },
    /// The ledger or its backend was closed.
    #[error("managed ledger {0} is closed")]
    Closed(String),
    /// A cursor with this name does not exist.
    #[error("cursor {cursor} not found on {topic}")]
    CursorNotFound { topic: String, cursor: String },
    /// A read asked for a position that was trimmed or never written.
    #[error("position {position} is not readable on {topic}: {reason}")]
    InvalidPosition {
        topic: String,
        position: Position,
        reason: &'static str,
    },
    /// An entry larger than the configured maximum.
    #[error("entry of {size} bytes exceeds the maximum of {max}")]
    EntryTooLarge { size: usize, max: usize },
    /// A bad configuration value.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// This crate's result type.
pub type Result<T, E = LedgerError> = std::result::Result<T, E>;

impl LedgerError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, err: std::io::Error) -> Self {
        LedgerError::Io {
            op,
            path: path.into(),
            message: err.to_string(),
        }
    }

    /// Whether this is the process or the system out of file descriptors (EMFILE, ENFILE):
    /// a condition that passes when descriptors are closed, not a device that failed.
    /// (`io::Error` names an OS error "... (os error N)" in its message, the only trace of
    /// it an `Io` keeps.)
    pub fn is_out_of_descriptors(&self) -> bool {
        matches!(self, LedgerError::Io { message, .. } if names_out_of_descriptors(message))
    }

    /// Whether this is a write refused for want of space (ENOSPC, EDQUOT): a condition
    /// that passes when space is freed (see [`crate::disk`]).
    pub fn is_storage_full(&self) -> bool {
        matches!(self, LedgerError::Io { message, .. } if crate::disk::names_storage_full(message))
    }
}

/// Whether an error's text carries the OS's "out of file descriptors" (EMFILE, ENFILE), as
/// `io::Error` words it: for errors that kept only their text on the way up.
pub fn names_out_of_descriptors(text: &str) -> bool {
    text.contains("(os error 24)") || text.contains("(os error 23)")
}
