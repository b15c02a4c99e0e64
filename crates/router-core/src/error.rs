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
    /// A call to the Topology Service or a cell's learn endpoint failed.
    #[error("{0}")]
    Service(ServiceError),
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
            RouterError::Service(e) => e.kind(),
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

/// The service a classify question is asked of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// The Topology Service.
    Topology,
    /// The learn endpoint of a cell (route learning).
    Learn,
}

impl Service {
    /// The error for a call to this service that ended in `failure`.
    pub fn failed(self, failure: ServiceFailure) -> RouterError {
        RouterError::Service(ServiceError {
            service: self,
            failure,
        })
    }
}

/// How a call to a [`Service`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceFailure {
    Unreachable(String),
    /// After this many ms.
    Timeout(u32),
    Status(u16),
    /// Not asked: its breaker is open, or its retry budget spent.
    Guarded(&'static str),
    BadAnswer(String),
}

/// A failed call to a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceError {
    pub service: Service,
    pub failure: ServiceFailure,
}

impl ServiceError {
    /// The error's name in a metrics data point: the service's, then the
    /// failure's.
    pub fn kind(&self) -> &'static str {
        use ServiceFailure::*;
        match (self.service, &self.failure) {
            (Service::Topology, Unreachable(_)) => "topology_unreachable",
            (Service::Topology, Timeout(_)) => "topology_timeout",
            (Service::Topology, Status(_)) => "topology_status",
            (Service::Topology, Guarded(_)) => "topology_guarded",
            (Service::Topology, BadAnswer(_)) => "topology_bad_answer",
            (Service::Learn, Unreachable(_)) => "learn_unreachable",
            (Service::Learn, Timeout(_)) => "learn_timeout",
            (Service::Learn, Status(_)) => "learn_status",
            (Service::Learn, Guarded(_)) => "learn_guarded",
            (Service::Learn, BadAnswer(_)) => "learn_bad_answer",
        }
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // What the log line calls the service, and its answer.
        let (called, answer) = match self.service {
            Service::Topology => ("topology service", "topology service answer"),
            Service::Learn => (
                "route learning: learn endpoint",
                "route learning: learn answer",
            ),
        };
        match &self.failure {
            ServiceFailure::Unreachable(why) => write!(f, "{called} unreachable: {why}"),
            ServiceFailure::Timeout(ms) => write!(f, "{called} timed out after {ms} ms"),
            ServiceFailure::Status(status) => write!(f, "{called} answered status {status}"),
            ServiceFailure::Guarded(why) => {
                write!(f, "{called} not asked: {why} (it has been failing)")
            }
            ServiceFailure::BadAnswer(why) => write!(f, "{answer} not understood: {why}"),
        }
    }
}

// What a client sees for each error (its status, public message and
// answer) is forward::answer's: the one place errors map to statuses.

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_failure_reads_as_its_service_and_failure_say() {
        use ServiceFailure::*;
        let cases = [
            (Service::Topology, Unreachable("refused".into()), "topology_unreachable", "topology service unreachable: refused"),
            (Service::Topology, Timeout(300), "topology_timeout", "topology service timed out after 300 ms"),
            (Service::Topology, Status(503), "topology_status", "topology service answered status 503"),
            (Service::Topology, Guarded("circuit open"), "topology_guarded", "topology service not asked: circuit open (it has been failing)"),
            (Service::Topology, BadAnswer("body: x".into()), "topology_bad_answer", "topology service answer not understood: body: x"),
            (Service::Learn, Unreachable("refused".into()), "learn_unreachable", "route learning: learn endpoint unreachable: refused"),
            (Service::Learn, Timeout(300), "learn_timeout", "route learning: learn endpoint timed out after 300 ms"),
            (Service::Learn, Status(503), "learn_status", "route learning: learn endpoint answered status 503"),
            (Service::Learn, Guarded("retry budget spent"), "learn_guarded", "route learning: learn endpoint not asked: retry budget spent (it has been failing)"),
            (Service::Learn, BadAnswer("no cell".into()), "learn_bad_answer", "route learning: learn answer not understood: no cell"),
        ];
        for (service, failure, kind, message) in cases {
            let error = service.failed(failure);
            assert_eq!((error.kind(), error.to_string().as_str()), (kind, message));
        }
    }
}
