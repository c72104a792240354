//! Compatibility strategies (`SchemaCompatibilityStrategy`) and how a topic
//! arrives at one (topic policy, namespace policy, broker configuration).

use std::fmt;
use std::str::FromStr;

use crate::SchemaError;

/// Pulsar's `SchemaCompatibilityStrategy`.
///
/// "Backward": the new schema can read data written with the old one (a new
/// consumer reads old messages). "Forward": data written with the new schema
/// can be read with the old one (old consumers read new messages). "Full": both.
/// Plain strategies compare with the latest schema only, `*_TRANSITIVE` with
/// every schema since the latest deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaCompatibilityStrategy {
    /// Not set at this level: fall through to the next one.
    Undefined,
    AlwaysIncompatible,
    AlwaysCompatible,
    Backward,
    Forward,
    Full,
    BackwardTransitive,
    ForwardTransitive,
    FullTransitive,
}

const STRATEGIES: [SchemaCompatibilityStrategy; 9] = [
    SchemaCompatibilityStrategy::Undefined,
    SchemaCompatibilityStrategy::AlwaysIncompatible,
    SchemaCompatibilityStrategy::AlwaysCompatible,
    SchemaCompatibilityStrategy::Backward,
    SchemaCompatibilityStrategy::Forward,
    SchemaCompatibilityStrategy::Full,
    SchemaCompatibilityStrategy::BackwardTransitive,
    SchemaCompatibilityStrategy::ForwardTransitive,
    SchemaCompatibilityStrategy::FullTransitive,
];

impl SchemaCompatibilityStrategy {
    /// The broker's default (`schemaCompatibilityStrategy=FULL` in broker.conf).
    pub const BROKER_DEFAULT: SchemaCompatibilityStrategy = SchemaCompatibilityStrategy::Full;

    pub fn all() -> &'static [SchemaCompatibilityStrategy] {
        &STRATEGIES
    }

    /// The name of the REST API and of namespace policies
    /// (`PUT /admin/v2/namespaces/{t}/{ns}/schemaCompatibilityStrategy` takes it
    /// as a JSON string).
    pub const fn name(self) -> &'static str {
        match self {
            SchemaCompatibilityStrategy::Undefined => "UNDEFINED",
            SchemaCompatibilityStrategy::AlwaysIncompatible => "ALWAYS_INCOMPATIBLE",
            SchemaCompatibilityStrategy::AlwaysCompatible => "ALWAYS_COMPATIBLE",
            SchemaCompatibilityStrategy::Backward => "BACKWARD",
            SchemaCompatibilityStrategy::Forward => "FORWARD",
            SchemaCompatibilityStrategy::Full => "FULL",
            SchemaCompatibilityStrategy::BackwardTransitive => "BACKWARD_TRANSITIVE",
            SchemaCompatibilityStrategy::ForwardTransitive => "FORWARD_TRANSITIVE",
            SchemaCompatibilityStrategy::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    /// Parses a strategy name; case does not matter, and a JSON string
    /// (`"FORWARD"`, quotes included, as the REST body carries it) is accepted.
    pub fn from_name(name: &str) -> Result<SchemaCompatibilityStrategy, SchemaError> {
        let trimmed = name.trim();
        let bare = trimmed
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .unwrap_or(trimmed);
        STRATEGIES
            .iter()
            .copied()
            .find(|s| s.name().eq_ignore_ascii_case(bare))
            .ok_or_else(|| SchemaError::UnknownStrategy(name.to_string()))
    }

    /// Whether the check covers every schema since the latest deletion.
    pub const fn is_transitive(self) -> bool {
        matches!(
            self,
            SchemaCompatibilityStrategy::BackwardTransitive
                | SchemaCompatibilityStrategy::ForwardTransitive
                | SchemaCompatibilityStrategy::FullTransitive
        )
    }

    /// `None` for `Undefined`, the strategy otherwise (Pulsar's
    /// `formatSchemaCompatibilityStrategy`).
    pub const fn defined(self) -> Option<SchemaCompatibilityStrategy> {
        match self {
            SchemaCompatibilityStrategy::Undefined => None,
            other => Some(other),
        }
    }

    /// What the registry does when handed `Undefined`: the broker default. (A
    /// topic never reaches the registry with `Undefined`; [`resolve_strategy`]
    /// always ends at the broker level.)
    pub(crate) const fn effective(self) -> SchemaCompatibilityStrategy {
        match self {
            SchemaCompatibilityStrategy::Undefined => Self::BROKER_DEFAULT,
            other => other,
        }
    }
}

impl fmt::Display for SchemaCompatibilityStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SchemaCompatibilityStrategy {
    type Err = SchemaError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SchemaCompatibilityStrategy::from_name(s)
    }
}

/// The deprecated namespace policy `schema_auto_update_compatibility_strategy`
/// (`SchemaAutoUpdateCompatibilityStrategy`), still consulted when the
/// namespace's `schema_compatibility_strategy` is `UNDEFINED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AutoUpdateStrategy {
    AutoUpdateDisabled,
    Backward,
    Forward,
    Full,
    AlwaysCompatible,
    BackwardTransitive,
    ForwardTransitive,
    FullTransitive,
}

const AUTO_UPDATE: [AutoUpdateStrategy; 8] = [
    AutoUpdateStrategy::AutoUpdateDisabled,
    AutoUpdateStrategy::Backward,
    AutoUpdateStrategy::Forward,
    AutoUpdateStrategy::Full,
    AutoUpdateStrategy::AlwaysCompatible,
    AutoUpdateStrategy::BackwardTransitive,
    AutoUpdateStrategy::ForwardTransitive,
    AutoUpdateStrategy::FullTransitive,
];

impl AutoUpdateStrategy {
    pub const fn name(self) -> &'static str {
        match self {
            AutoUpdateStrategy::AutoUpdateDisabled => "AutoUpdateDisabled",
            AutoUpdateStrategy::Backward => "Backward",
            AutoUpdateStrategy::Forward => "Forward",
            AutoUpdateStrategy::Full => "Full",
            AutoUpdateStrategy::AlwaysCompatible => "AlwaysCompatible",
            AutoUpdateStrategy::BackwardTransitive => "BackwardTransitive",
            AutoUpdateStrategy::ForwardTransitive => "ForwardTransitive",
            AutoUpdateStrategy::FullTransitive => "FullTransitive",
        }
    }

    /// Parses the policy value (case-insensitive, JSON quotes accepted).
    pub fn from_name(name: &str) -> Result<AutoUpdateStrategy, SchemaError> {
        let trimmed = name.trim();
        let bare = trimmed
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .unwrap_or(trimmed);
        AUTO_UPDATE
            .iter()
            .copied()
            .find(|s| s.name().eq_ignore_ascii_case(bare))
            .ok_or_else(|| SchemaError::UnknownStrategy(name.to_string()))
    }

    /// `SchemaCompatibilityStrategy.fromAutoUpdatePolicy`: disabled auto update
    /// means every change is incompatible.
    pub const fn to_strategy(self) -> SchemaCompatibilityStrategy {
        match self {
            AutoUpdateStrategy::AutoUpdateDisabled => {
                SchemaCompatibilityStrategy::AlwaysIncompatible
            }
            AutoUpdateStrategy::Backward => SchemaCompatibilityStrategy::Backward,
            AutoUpdateStrategy::Forward => SchemaCompatibilityStrategy::Forward,
            AutoUpdateStrategy::Full => SchemaCompatibilityStrategy::Full,
            AutoUpdateStrategy::AlwaysCompatible => SchemaCompatibilityStrategy::AlwaysCompatible,
            AutoUpdateStrategy::BackwardTransitive => {
                SchemaCompatibilityStrategy::BackwardTransitive
            }
            AutoUpdateStrategy::ForwardTransitive => SchemaCompatibilityStrategy::ForwardTransitive,
            AutoUpdateStrategy::FullTransitive => SchemaCompatibilityStrategy::FullTransitive,
        }
    }
}

impl fmt::Display for AutoUpdateStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The strategy a topic uses (`AbstractTopic.getSchemaCompatibilityStrategy`
/// over its `HierarchyTopicPolicies`): the topic policy if defined, else the
/// namespace's `schema_compatibility_strategy` if defined, else the namespace's
/// deprecated `schema_auto_update_compatibility_strategy` if set, else the
/// broker's `schemaCompatibilityStrategy` (FULL unless configured; an
/// `UNDEFINED` broker value also means FULL).
pub fn resolve_strategy(
    topic: Option<SchemaCompatibilityStrategy>,
    namespace: Option<SchemaCompatibilityStrategy>,
    namespace_auto_update: Option<AutoUpdateStrategy>,
    broker: SchemaCompatibilityStrategy,
) -> SchemaCompatibilityStrategy {
    topic
        .and_then(SchemaCompatibilityStrategy::defined)
        .or_else(|| namespace.and_then(SchemaCompatibilityStrategy::defined))
        .or_else(|| namespace_auto_update.map(AutoUpdateStrategy::to_strategy))
        .unwrap_or(broker.effective())
}
