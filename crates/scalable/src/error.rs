use strobe_layout::LayoutError;
use strobe_metadata::MetadataError;
use strobe_resources::ResourcesError;

/// Why a controller's operation did not happen (or did not finish).
#[derive(Debug, thiserror::Error)]
pub enum ScalableError {
    /// The layout cannot take the resize (a sealed segment, not adjacent…).
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error(transparent)]
    Resources(#[from] ResourcesError),
    /// This broker's leadership is gone (or its session): another leads.
    #[error("this broker no longer leads the controller of {0}")]
    NotLeader(String),
    #[error("{0}")]
    NotFound(String),
    /// Clients are connected where a request without `force` wants none.
    #[error("{0}")]
    Busy(String),
    /// A test's failpoint stopped the controller there.
    #[error("stopped at failpoint {0:?}")]
    Failpoint(crate::failpoint::Failpoint),
    /// A step on a segment topic failed (its owner's answer).
    #[error("segment {segment}: {reason}")]
    Segment { segment: String, reason: String },
}

impl From<MetadataError> for ScalableError {
    fn from(e: MetadataError) -> Self {
        ScalableError::Resources(e.into())
    }
}
