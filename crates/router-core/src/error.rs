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
    /// The service could not answer, nothing was cached, and the rule says
    /// `onOutage: unavailable`: a wrong cell would be worse than a retry.
    #[error(
        "topology service unavailable and the rule does not fall back (onOutage: unavailable)"
    )]
    OutageUnavailable,
}

impl RouterError {
    /// The status a client gets when this error ends its request: the one
    /// place errors map to statuses. Topology Service errors never end a
    /// request by themselves (the legacy cell serves it), but map too.
    pub fn status(&self) -> u16 {
        match self {
            RouterError::SigningUnavailable
            | RouterError::SigningFailed(_)
            | RouterError::OutageUnavailable => 503,
            RouterError::TopologyUnreachable(_)
            | RouterError::TopologyTimeout(_)
            | RouterError::TopologyStatus(_)
            | RouterError::TopologyBadAnswer(_)
            | RouterError::TopologyGuarded(_)
            | RouterError::NoRegistryAddress
            | RouterError::UpstreamNotAllowed(_)
            | RouterError::NoLegacyCell
            | RouterError::UpstreamUnreachable(_)
            | RouterError::Internal(_) => 502,
        }
    }

    /// What the client reads: short, and nothing an operator keeps to
    /// themselves (hosts, keys); the log line has the whole error.
    pub fn public_message(&self) -> &'static str {
        match self {
            RouterError::SigningUnavailable | RouterError::SigningFailed(_) => {
                "request signing unavailable"
            }
            RouterError::UpstreamNotAllowed(_) => "upstream not allowed",
            RouterError::NoLegacyCell => "no upstream configured",
            RouterError::UpstreamUnreachable(_) => "upstream unreachable",
            RouterError::NoRegistryAddress => "cell has no registry address for a registry request",
            RouterError::Internal(_) => "internal error",
            RouterError::OutageUnavailable => "temporarily unavailable, retry later",
            RouterError::TopologyUnreachable(_)
            | RouterError::TopologyTimeout(_)
            | RouterError::TopologyStatus(_)
            | RouterError::TopologyBadAnswer(_)
            | RouterError::TopologyGuarded(_) => "topology service unavailable",
        }
    }

    /// The plain-text answer for this error.
    pub fn answer(&self) -> crate::plan::Answer {
        crate::plan::Answer::text(
            self.status(),
            format!("gitlab-http-router: {}\n", self.public_message()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_come_from_one_place() {
        assert_eq!(RouterError::SigningUnavailable.status(), 503);
        assert_eq!(RouterError::SigningFailed("x".into()).status(), 503);
        assert_eq!(RouterError::UpstreamUnreachable("x".into()).status(), 502);
        assert_eq!(
            RouterError::UpstreamNotAllowed("evil.example".into()).status(),
            502
        );
        let answer = RouterError::UpstreamNotAllowed("evil.example".into()).answer();
        assert_eq!(answer.body, "gitlab-http-router: upstream not allowed\n");
        assert!(!answer.body.contains("evil"), "hosts stay in the log");
    }
}
