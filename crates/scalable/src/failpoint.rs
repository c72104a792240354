/// A step after which a test makes the controller stop as if its broker
/// died there (`ScalableError::Failpoint`; the broker aborts on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// The resize is recorded; nothing else happened.
    AfterRecord,
    /// The new segments' topics exist.
    AfterCreate,
    /// The old segments are terminated; the layout still lists them active.
    AfterTerminate,
    /// The layout is written (a prune's topics are not deleted yet).
    AfterCommit,
}

impl Failpoint {
    /// `after-record`, `after-create`, `after-terminate`, `after-commit`.
    pub fn parse(s: &str) -> Option<Failpoint> {
        Some(match s {
            "after-record" => Failpoint::AfterRecord,
            "after-create" => Failpoint::AfterCreate,
            "after-terminate" => Failpoint::AfterTerminate,
            "after-commit" => Failpoint::AfterCommit,
            _ => return None,
        })
    }
}
