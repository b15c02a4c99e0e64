//! The core's error types. The edge alone decides what a client sees.

use thiserror::Error;

/// A ruleset that cannot be used. Every variant names the ruleset, and where
/// it can the rule (by id, or by position when the rule has none) and field,
/// so a build or `rulesctl validate` failure points straight at the problem.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RulesetError {
    #[error("{ruleset}: not valid JSON: {message}")]
    Json { ruleset: String, message: String },
    #[error("{ruleset}: {message}")]
    Shape { ruleset: String, message: String },
    #[error("{ruleset}: rule {rule}: {message}")]
    Rule {
        ruleset: String,
        rule: String,
        message: String,
    },
}

/// Why a request could not be routed to the cell its rule asked for. Every
/// one of these ends at the legacy cell or a clear error response, never a
/// crash; the edge maps them to a status in exactly one place.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RouterError {
    #[error("topology service unreachable: {0}")]
    TopologyUnreachable(String),
    #[error("topology service timed out after {0} ms")]
    TopologyTimeout(u32),
    #[error("topology service answered status {0}")]
    TopologyStatus(u16),
    #[error("topology service not asked: {0} (it has been failing)")]
    TopologyGuarded(&'static str),
    #[error("topology service answer not understood: {0}")]
    TopologyBadAnswer(String),
    #[error("cell has no registry address for a registry request")]
    NoRegistryAddress,
    #[error("upstream host not allowed: {0}")]
    UpstreamNotAllowed(String),
}
