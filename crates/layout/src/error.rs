/// Why a layout cannot take a transition, or a stored layout is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("segment {0} is not in the layout")]
    NotFound(u64),
    #[error("segment {0} is sealed; only an active segment can be split or merged")]
    NotActive(u64),
    #[error("segment {0} is active; only a sealed segment can be pruned")]
    NotSealed(u64),
    #[error("segments {0} and {1} are not adjacent on the hash ring")]
    NotAdjacent(u64, u64),
    #[error("segment {0} covers one hash and cannot be split")]
    TooNarrow(u64),
    #[error("a segment cannot be merged with itself ({0})")]
    SameSegment(u64),
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A layout (read from the store, or made by a bug) that breaks an
    /// invariant; it names the first one broken.
    #[error("invalid layout: {0}")]
    Corrupt(String),
}
