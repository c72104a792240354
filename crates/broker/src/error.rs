use strobe_wire::proto::ServerError;

/// What can go wrong while serving; each maps to one of Pulsar's `ServerError`
/// codes, here and nowhere else.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("{0}")]
    NotAllowed(String),
    #[error("{0}")]
    InvalidTopicName(String),
    #[error("{0}")]
    ServiceNotReady(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl BrokerError {
    pub fn server_error(&self) -> ServerError {
        match self {
            BrokerError::NotAllowed(_) => ServerError::NotAllowedError,
            BrokerError::InvalidTopicName(_) => ServerError::InvalidTopicName,
            BrokerError::ServiceNotReady(_) => ServerError::ServiceNotReady,
            BrokerError::Io(_) => ServerError::UnknownError,
        }
    }
}

impl From<strobe_model::TopicNameError> for BrokerError {
    fn from(e: strobe_model::TopicNameError) -> Self {
        BrokerError::InvalidTopicName(e.to_string())
    }
}
