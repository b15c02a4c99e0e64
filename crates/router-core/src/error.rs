//! The core's error types. What a client sees for each is decided in one
//! place, [`crate::forward::answer`].

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
    #[error("route learning: learn endpoint unreachable: {0}")]
    LearnUnreachable(String),
    #[error("route learning: learn endpoint timed out after {0} ms")]
    LearnTimeout(u32),
    #[error("route learning: learn endpoint answered status {0}")]
    LearnStatus(u16),
    #[error("route learning: learn answer not understood: {0}")]
    LearnBadAnswer(String),
    #[error("route learning: learn endpoint not asked: {0} (it has been failing)")]
    LearnGuarded(&'static str),
    #[error("cell has no registry address for a registry request")]
    NoRegistryAddress,
    #[error("upstream host not allowed: {0}")]
    UpstreamNotAllowed(String),
    #[error("no legacy cell configured (GITLAB_PROXY_HOST)")]
    NoLegacyCell,
    #[error("request signing is required but no valid signing key is configured")]
    SigningUnavailable,
    #[error("request signing failed: {0}")]
    SigningFailed(String),
    #[error("upstream fetch failed: {0}")]
    UpstreamUnreachable(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// The cell's circuit is open (its requests failed, or the scheduled
    /// probe found it down): answered at once instead of waiting on it.
    #[error("cell {cell} ({address}) unavailable: circuit open ({why}); retry after {retry_after_secs} s")]
    CellUnavailable {
        cell: u64,
        address: String,
        why: &'static str,
        retry_after_secs: u32,
    },
    /// The service could not answer, nothing was cached, and the rule says
    /// `onOutage: unavailable`: a wrong cell would be worse than a retry.
    /// `retry_after_secs`: when the router asks the service again (its
    /// breaker's open time); `registry`: a container registry client, who
    /// gets the distribution spec's JSON error.
    #[error(
        "topology service unavailable and the rule does not fall back (onOutage: unavailable)"
    )]
    OutageUnavailable {
        retry_after_secs: u32,
        registry: bool,
    },
}

impl RouterError {
    /// The error's name in a metrics data point (docs/metrics.md, blob10):
    /// one word per variant, nothing of its message.
    pub fn kind(&self) -> &'static str {
        match self {
            RouterError::TopologyUnreachable(_) => "topology_unreachable",
            RouterError::TopologyTimeout(_) => "topology_timeout",
            RouterError::TopologyStatus(_) => "topology_status",
            RouterError::TopologyGuarded(_) => "topology_guarded",
            RouterError::TopologyBadAnswer(_) => "topology_bad_answer",
            RouterError::LearnUnreachable(_) => "learn_unreachable",
            RouterError::LearnTimeout(_) => "learn_timeout",
            RouterError::LearnStatus(_) => "learn_status",
            RouterError::LearnBadAnswer(_) => "learn_bad_answer",
            RouterError::LearnGuarded(_) => "learn_guarded",
            RouterError::NoRegistryAddress => "no_registry_address",
            RouterError::UpstreamNotAllowed(_) => "upstream_not_allowed",
            RouterError::NoLegacyCell => "no_legacy_cell",
            RouterError::SigningUnavailable => "signing_unavailable",
            RouterError::SigningFailed(_) => "signing_failed",
            RouterError::UpstreamUnreachable(_) => "upstream_unreachable",
            RouterError::Internal(_) => "internal",
            RouterError::CellUnavailable { .. } => "cell_unavailable",
            RouterError::OutageUnavailable { .. } => "outage_unavailable",
        }
    }
}

// What a client sees for each error (its status, public message and
// answer) is forward::answer's: the one place errors map to statuses.
