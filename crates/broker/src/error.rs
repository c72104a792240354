use strobe_wire::proto::ServerError;

/// What can go wrong while serving a request. Each maps to one of Pulsar's
/// `ServerError` codes in [`BrokerError::server_error`], here and nowhere else,
/// and its message is what the client sees.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("{0}")]
    NotAllowed(String),
    #[error("{0}")]
    InvalidTopicName(String),
    #[error("{0}")]
    TopicNotFound(String),
    #[error("{0}")]
    SubscriptionNotFound(String),
    #[error("{0}")]
    ConsumerNotFound(String),
    #[error("{0}")]
    ConsumerBusy(String),
    #[error("{0}")]
    ProducerBusy(String),
    #[error("{0}")]
    ProducerFenced(String),
    #[error("{0}")]
    ConsumerAssignError(String),
    #[error("{0}")]
    TopicTerminated(String),
    #[error("{0}")]
    ServiceNotReady(String),
    #[error("{0}")]
    Checksum(String),
    #[error("storage: {0}")]
    Persistence(String),
    #[error("metadata: {0}")]
    Metadata(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    Conflict(String),
    /// A failed precondition (HTTP 412), e.g. deleting a topic that still has clients.
    #[error("{0}")]
    Precondition(String),
    /// The topic's backlog quota is exceeded; `exception` says whether the
    /// policy is producer_exception (else producer_request_hold).
    #[error("{message}")]
    BacklogQuotaExceeded { message: String, exception: bool },
    #[error("{0}")]
    IncompatibleSchema(String),
    #[error("{0}")]
    Authentication(String),
    #[error("{0}")]
    Authorization(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl BrokerError {
    pub fn server_error(&self) -> ServerError {
        match self {
            BrokerError::NotAllowed(_) => ServerError::NotAllowedError,
            BrokerError::InvalidTopicName(_) => ServerError::InvalidTopicName,
            BrokerError::TopicNotFound(_) => ServerError::TopicNotFound,
            BrokerError::SubscriptionNotFound(_) => ServerError::SubscriptionNotFound,
            BrokerError::ConsumerNotFound(_) => ServerError::ConsumerNotFound,
            BrokerError::ConsumerBusy(_) => ServerError::ConsumerBusy,
            BrokerError::ProducerBusy(_) => ServerError::ProducerBusy,
            BrokerError::ProducerFenced(_) => ServerError::ProducerFenced,
            BrokerError::ConsumerAssignError(_) => ServerError::ConsumerAssignError,
            BrokerError::TopicTerminated(_) => ServerError::TopicTerminatedError,
            BrokerError::ServiceNotReady(_) => ServerError::ServiceNotReady,
            BrokerError::Checksum(_) => ServerError::ChecksumError,
            BrokerError::Persistence(_) => ServerError::PersistenceError,
            BrokerError::Metadata(_) => ServerError::MetadataError,
            BrokerError::AlreadyExists(_) | BrokerError::Conflict(_) => {
                ServerError::NotAllowedError
            }
            BrokerError::Precondition(_) => ServerError::NotAllowedError,
            BrokerError::BacklogQuotaExceeded {
                exception: true, ..
            } => ServerError::ProducerBlockedQuotaExceededException,
            BrokerError::BacklogQuotaExceeded { .. } => {
                ServerError::ProducerBlockedQuotaExceededError
            }
            BrokerError::IncompatibleSchema(_) => ServerError::IncompatibleSchema,
            BrokerError::Authentication(_) => ServerError::AuthenticationError,
            BrokerError::Authorization(_) => ServerError::AuthorizationError,
            BrokerError::Io(_) => ServerError::UnknownError,
        }
    }
}

impl BrokerError {
    /// The HTTP status Pulsar's admin API answers with for this error.
    pub fn http_status(&self) -> u16 {
        match self {
            BrokerError::TopicNotFound(_)
            | BrokerError::SubscriptionNotFound(_)
            | BrokerError::ConsumerNotFound(_) => 404,
            BrokerError::AlreadyExists(_) | BrokerError::Conflict(_) => 409,
            BrokerError::NotAllowed(_) | BrokerError::InvalidTopicName(_) => 400,
            BrokerError::ConsumerBusy(_)
            | BrokerError::ProducerBusy(_)
            | BrokerError::Precondition(_) => 412,
            BrokerError::TopicTerminated(_) => 405,
            BrokerError::ServiceNotReady(_) => 503,
            BrokerError::IncompatibleSchema(_) => 409,
            BrokerError::Authentication(_) => 401,
            BrokerError::Authorization(_) => 403,
            _ => 500,
        }
    }
}

impl From<strobe_model::TopicNameError> for BrokerError {
    fn from(e: strobe_model::TopicNameError) -> Self {
        BrokerError::InvalidTopicName(e.to_string())
    }
}

impl From<strobe_ledger::LedgerError> for BrokerError {
    fn from(e: strobe_ledger::LedgerError) -> Self {
        use strobe_ledger::LedgerError as L;
        match e {
            // Another open of the same topic is still closing: retry with a fresh lookup.
            L::AlreadyOpen(_) | L::Closed(_) => BrokerError::ServiceNotReady(e.to_string()),
            L::EntryTooLarge { .. } => BrokerError::NotAllowed(e.to_string()),
            other => BrokerError::Persistence(other.to_string()),
        }
    }
}

impl From<strobe_wire::WireError> for BrokerError {
    fn from(e: strobe_wire::WireError) -> Self {
        match e {
            strobe_wire::WireError::ChecksumMismatch { .. } => BrokerError::Checksum(e.to_string()),
            other => BrokerError::NotAllowed(other.to_string()),
        }
    }
}
