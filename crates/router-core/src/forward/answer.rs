//! The one place a [`RouterError`] becomes what the client gets: its
//! status, its public message, its answer (with `Retry-After` when the
//! client should come back later). Hosts, keys and other details stay in
//! the log line.

use crate::error::{RouterError, Service};
use crate::wire::Answer;

impl RouterError {
    /// The status a client gets when this error ends its request: the one
    /// place errors map to statuses. Topology Service errors never end a
    /// request by themselves (the legacy cell serves it), but map too.
    pub fn status(&self) -> u16 {
        match self {
            RouterError::SigningUnavailable
            | RouterError::SigningFailed(_)
            | RouterError::CellUnavailable { .. }
            | RouterError::OutageUnavailable { .. } => 503,
            RouterError::Service(_)
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
            RouterError::CellUnavailable { .. } => "cell temporarily unavailable",
            RouterError::OutageUnavailable { .. } => "temporarily unavailable, retry later",
            RouterError::Service(e) => match e.service {
                Service::Topology => "topology service unavailable",
                Service::Learn => "route learning unavailable",
            },
        }
    }

    /// The answer for this error: plain text (a registry client's outage
    /// in the distribution spec's JSON form), with `Retry-After` when the
    /// client should come back later.
    pub fn answer(&self) -> Answer {
        let mut answer = Answer::text(
            self.status(),
            format!("gitlab-http-router: {}\n", self.public_message()),
        );
        let retry_after = match self {
            RouterError::CellUnavailable {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            RouterError::OutageUnavailable {
                retry_after_secs,
                registry,
            } => {
                if *registry {
                    answer.headers = vec![("content-type".into(), "application/json".into())];
                    answer.body = format!(
                        r#"{{"errors":[{{"code":"UNAVAILABLE","message":"{}","detail":null}}]}}"#,
                        self.public_message()
                    );
                }
                Some(*retry_after_secs)
            }
            _ => None,
        };
        if let Some(secs) = retry_after {
            answer
                .headers
                .push(("retry-after".to_string(), secs.to_string()));
        }
        answer
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
        let open = RouterError::CellUnavailable {
            cell: 2,
            address: "cell2.internal".into(),
            why: "requests failed",
            retry_after_secs: 7,
        };
        let answer = open.answer();
        assert_eq!(answer.status, 503);
        assert!(answer
            .headers
            .contains(&("retry-after".to_string(), "7".to_string())));
        assert!(!answer.body.contains("cell2.internal"));
        assert!(open.to_string().contains("cell 2 (cell2.internal)"));
        let outage = |registry| RouterError::OutageUnavailable {
            retry_after_secs: 5,
            registry,
        };
        let web = outage(false).answer();
        assert_eq!(web.status, 503);
        assert!(web.headers.contains(&("retry-after".into(), "5".into())));
        let registry = outage(true).answer();
        assert!(
            registry.body.contains(r#""code":"UNAVAILABLE""#),
            "{}",
            registry.body
        );
        assert!(registry
            .headers
            .contains(&("content-type".into(), "application/json".into())));
        assert!(registry
            .headers
            .contains(&("retry-after".into(), "5".into())));
    }
}
