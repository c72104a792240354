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
    /// A storage failure the broker detected itself (e.g. a health-check
    /// entry that did not read back); the ledger's own errors are [`Self::Ledger`].
    #[error("storage: {0}")]
    Persistence(String),
    /// The ledger's error, kept typed so callers can tell a fenced or
    /// still-open topic from a failed write.
    #[error("{}", ledger_message(.0))]
    Ledger(#[from] strobe_ledger::LedgerError),
    /// The metadata store's error, kept typed: ownership and election code
    /// must tell `BadVersion`, `AlreadyExists` and `SessionExpired` apart.
    #[error("metadata: {0}")]
    Metadata(#[from] strobe_metadata::MetadataError),
    /// A value in the metadata store that does not decode as what its path holds.
    #[error("metadata: {path} holds an invalid value: {reason}")]
    CorruptMetadata { path: String, reason: String },
    /// The broker's configuration (or a file it names) cannot be used.
    #[error("configuration: {0}")]
    Config(String),
    /// A listener could not bind its address.
    #[error("binding {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
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
    /// The broker's disk is too full to take writes (see `service::disk`).
    #[error("{0}")]
    DiskFull(String),
    #[error("{0}")]
    IncompatibleSchema(String),
    #[error("{0}")]
    Authentication(String),
    #[error("{0}")]
    Authorization(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A transaction refused or failed (its own `ServerError` code).
    #[error("{0}")]
    Txn(#[from] strobe_txn::TxnError),
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
            BrokerError::Ledger(e) => match ledger_class(e) {
                LedgerClass::Retry => ServerError::ServiceNotReady,
                LedgerClass::Refused => ServerError::NotAllowedError,
                LedgerClass::Failed => ServerError::PersistenceError,
            },
            BrokerError::Metadata(_) | BrokerError::CorruptMetadata { .. } => {
                ServerError::MetadataError
            }
            BrokerError::Config(_) | BrokerError::Bind { .. } => ServerError::UnknownError,
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
            // The code the official clients fail pending sends with, then reconnect
            // with their backoff (as for a backlog quota with producer_exception).
            BrokerError::DiskFull(_) => ServerError::ProducerBlockedQuotaExceededException,
            BrokerError::IncompatibleSchema(_) => ServerError::IncompatibleSchema,
            BrokerError::Authentication(_) => ServerError::AuthenticationError,
            BrokerError::Authorization(_) => ServerError::AuthorizationError,
            BrokerError::Io(_) => ServerError::UnknownError,
            BrokerError::Txn(e) => {
                use strobe_txn::TxnError as T;
                match e {
                    T::CoordinatorNotFound(_) => ServerError::TransactionCoordinatorNotFound,
                    T::NotFound(_) => ServerError::TransactionNotFound,
                    T::InvalidStatus(_) => ServerError::InvalidTxnStatus,
                    T::Conflict(_) => ServerError::TransactionConflict,
                    T::NotAllowed(_) => ServerError::NotAllowedError,
                    T::Metadata(_) => ServerError::MetadataError,
                }
            }
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
            BrokerError::Ledger(e) => match ledger_class(e) {
                LedgerClass::Retry => 503,
                LedgerClass::Refused => 400,
                LedgerClass::Failed => 500,
            },
            BrokerError::IncompatibleSchema(_) => 409,
            BrokerError::DiskFull(_) => 507,
            BrokerError::Authentication(_) => 401,
            BrokerError::Authorization(_) => 403,
            BrokerError::Txn(strobe_txn::TxnError::NotFound(_)) => 404,
            BrokerError::Txn(strobe_txn::TxnError::CoordinatorNotFound(_)) => 503,
            BrokerError::Txn(
                strobe_txn::TxnError::InvalidStatus(_) | strobe_txn::TxnError::Conflict(_),
            ) => 409,
            _ => 500,
        }
    }
}

/// A metadata document's error keeps its code and message: the variants
/// mirror this enum's, so clients see what they saw before the documents had
/// a crate of their own.
impl From<strobe_resources::ResourcesError> for BrokerError {
    fn from(e: strobe_resources::ResourcesError) -> Self {
        use strobe_resources::ResourcesError as R;
        match e {
            R::Metadata(e) => BrokerError::Metadata(e),
            R::Corrupt { path, reason } => BrokerError::CorruptMetadata { path, reason },
            R::AlreadyExists(m) => BrokerError::AlreadyExists(m),
            R::NotFound(m) => BrokerError::TopicNotFound(m),
            R::Conflict(m) => BrokerError::Conflict(m),
            R::Invalid(m) => BrokerError::NotAllowed(m),
            R::Precondition(m) => BrokerError::Precondition(m),
        }
    }
}

/// Membership and ownership errors keep their codes as well.
impl From<strobe_cluster::ClusterError> for BrokerError {
    fn from(e: strobe_cluster::ClusterError) -> Self {
        use strobe_cluster::ClusterError as C;
        match e {
            C::Metadata(e) => BrokerError::Metadata(e),
            C::Corrupt { path, reason } => BrokerError::CorruptMetadata { path, reason },
            C::NotReady(m) => BrokerError::ServiceNotReady(m),
            C::NotFound(m) => BrokerError::TopicNotFound(m),
            C::Invalid(m) => BrokerError::NotAllowed(m),
            C::Config(m) => BrokerError::Config(m),
        }
    }
}

/// A controller's error: a layout that cannot take the resize is a bad
/// request (Pulsar answers 400/409), a lost leadership is not ready.
impl From<strobe_scalable::ScalableError> for BrokerError {
    fn from(e: strobe_scalable::ScalableError) -> Self {
        use strobe_layout::LayoutError as L;
        use strobe_scalable::ScalableError as S;
        match e {
            S::Layout(L::NotFound(id)) => {
                BrokerError::TopicNotFound(format!("segment {id} is not in the layout"))
            }
            S::Layout(L::Corrupt(m)) => BrokerError::CorruptMetadata {
                path: "scalable topic layout".into(),
                reason: m,
            },
            S::Layout(e) => BrokerError::Precondition(e.to_string()),
            S::Resources(e) => e.into(),
            S::NotLeader(m) => BrokerError::ServiceNotReady(format!(
                "this broker no longer leads the controller of {m}"
            )),
            S::NotFound(m) => BrokerError::TopicNotFound(m),
            S::Busy(m) => BrokerError::Precondition(m),
            e @ (S::Failpoint(_) | S::Segment { .. }) => {
                BrokerError::ServiceNotReady(e.to_string())
            }
        }
    }
}

impl From<strobe_model::TopicNameError> for BrokerError {
    fn from(e: strobe_model::TopicNameError) -> Self {
        BrokerError::InvalidTopicName(e.to_string())
    }
}

/// How a ledger error reaches the client.
enum LedgerClass {
    /// Another open of the same topic is still closing: retry with a fresh lookup.
    Retry,
    /// The request itself is refused (an entry over the size limit).
    Refused,
    /// Storage failed.
    Failed,
}

fn ledger_class(e: &strobe_ledger::LedgerError) -> LedgerClass {
    use strobe_ledger::LedgerError as L;
    match e {
        // Fenced: a newer owner holds the topic; the client looks it up again.
        L::AlreadyOpen(_) | L::Closed(_) | L::Fenced { .. } => LedgerClass::Retry,
        L::EntryTooLarge { .. } => LedgerClass::Refused,
        _ => LedgerClass::Failed,
    }
}

/// The client sees a storage failure as `storage: ...`, a retry or refusal as
/// the ledger words it.
fn ledger_message(e: &strobe_ledger::LedgerError) -> String {
    match ledger_class(e) {
        LedgerClass::Failed => format!("storage: {e}"),
        LedgerClass::Retry | LedgerClass::Refused => e.to_string(),
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
