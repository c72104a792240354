//! The client's one error type.

use strobe_wire::WireError;
use strobe_wire::proto::ServerError;

/// Why a client operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("i/o: {0}")]
    Io(String),
    #[error("protocol: {0}")]
    Wire(String),
    #[error("the broker answered {code:?}: {message}")]
    Server { code: ServerError, message: String },
    #[error("the connection to {0} is closed")]
    Disconnected(String),
    #[error("timed out: {0}")]
    Timeout(&'static str),
    #[error("the producer's queue of pending messages is full")]
    QueueFull,
    #[error("already closed")]
    Closed,
    #[error("lookup failed: {0}")]
    Lookup(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("unexpected reply: {0}")]
    Unexpected(String),
    #[error("cannot decompress: {0}")]
    Decompress(String),
    /// The message may or may not have been stored, and no check can tell.
    #[error("in doubt: {0}")]
    InDoubt(String),
}

impl Error {
    /// Whether retrying on a fresh connection may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Io(_) | Error::Disconnected(_) | Error::Timeout(_) => true,
            Error::Server { code, .. } => matches!(
                code,
                ServerError::ServiceNotReady
                    | ServerError::TooManyRequests
                    | ServerError::ProducerBusy
                    | ServerError::ConsumerBusy
                    | ServerError::MetadataError
                    | ServerError::PersistenceError
            ),
            _ => false,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}

impl From<WireError> for Error {
    fn from(e: WireError) -> Self {
        Error::Wire(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
