//! One question asked of its service, the Topology Service or a cell's
//! learn endpoint: the [`Service`] picks the breaker and retry budget, the
//! transport call and the parser; the retries are the same for both.

use std::cell::RefCell;

use crate::error::{RouterError, Service, ServiceFailure};
use crate::out_of_line::out_of_line;
use crate::question::ClassifyRequest;
use crate::trace::Trace;

use super::guard::ServiceGuard;
use super::learn::{self, Scope};
use super::topology::{self, Classification};
use super::{Platform, RawAnswer, Resolver, SharedCache, TopologyTransport, TransportError};

/// What the service answered, read.
pub(super) struct Answered {
    pub(super) classification: Classification,
    /// As it came (its caching headers decide how long it is kept).
    pub(super) raw: RawAnswer,
    /// What the answer covers: the question, or (route learning) a prefix
    /// of its path.
    pub(super) scope: Scope,
}

impl<T, C, P> Resolver<T, C, P>
where
    T: TopologyTransport,
    C: SharedCache,
    P: Platform,
{
    /// The breaker and retry budget of `service`: a failing learn endpoint
    /// must not stop Topology Service calls, nor the reverse.
    pub(super) fn guard_of(&self, service: Service) -> &RefCell<ServiceGuard> {
        match service {
            Service::Topology => &self.guard,
            Service::Learn => &self.learn_guard,
        }
    }

    /// Calls the service with retries on timeouts, connection errors, 5xx
    /// and 3xx (the transport never follows a redirect: a 3xx is a service
    /// error like a 5xx); never on 4xx or an answer it cannot read. Every
    /// attempt's outcome feeds the breaker, and a retry needs the breaker
    /// closed and room in the retry budget. Returns the attempts made.
    pub(super) async fn call_service(
        &self,
        service: Service,
        request: &ClassifyRequest,
        body: &str,
        trace: &Trace,
    ) -> (Result<Answered, RouterError>, u32) {
        let guard = self.guard_of(service);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let timeout_ms = self.client.timeout_ms;
            let failure = match self.ask(service, request, body, timeout_ms, trace).await {
                Ok(raw) => match read(service, request, &raw) {
                    Ok((classification, scope)) => {
                        guard.borrow_mut().record(true, self.platform.now_ms());
                        let answered = Answered {
                            classification,
                            raw,
                            scope,
                        };
                        return (Ok(answered), attempt);
                    }
                    Err(failure @ ServiceFailure::Status(status))
                        if status >= 500 || (300..400).contains(&status) =>
                    {
                        failure
                    }
                    Err(failure) => {
                        // The service answered (a 4xx, an odd body): it is up.
                        guard.borrow_mut().record(true, self.platform.now_ms());
                        return (Err(service.failed(failure)), attempt);
                    }
                },
                Err(TransportError::Timeout) => ServiceFailure::Timeout(timeout_ms),
                Err(TransportError::Connect(why)) => ServiceFailure::Unreachable(why),
            };
            let now = self.platform.now_ms();
            let retry = {
                let mut guard = guard.borrow_mut();
                guard.record(false, now);
                attempt <= self.client.retries && guard.allow_retry(now).is_ok()
            };
            if !retry {
                return (Err(service.failed(failure)), attempt);
            }
            let delay = self.client.backoff_ms(attempt, self.platform.random());
            out_of_line(self.platform.sleep(delay)).await;
        }
    }

    /// One attempt: the classify `body` posted to the Topology Service, or
    /// the learn endpoint of a cell ([`TopologyTransport::learn`]) asked
    /// for the question's method and path.
    async fn ask(
        &self,
        service: Service,
        request: &ClassifyRequest,
        body: &str,
        timeout_ms: u32,
        trace: &Trace,
    ) -> Result<RawAnswer, TransportError> {
        match service {
            Service::Topology => self.transport.classify(body, timeout_ms, trace).await,
            Service::Learn => {
                let (method, path) = request.learn_method_and_path().unwrap_or(("GET", ""));
                out_of_line(self.transport.learn(method, path, timeout_ms, trace)).await
            }
        }
    }
}

/// The service's answer read by its parser.
fn read(
    service: Service,
    request: &ClassifyRequest,
    raw: &RawAnswer,
) -> Result<(Classification, Scope), ServiceFailure> {
    match service {
        Service::Topology => {
            topology::parse_answer(raw.status, &raw.body).map(|c| (c, Scope::Exact))
        }
        Service::Learn => {
            let (_, path) = request.learn_method_and_path().unwrap_or(("GET", ""));
            learn::parse_answer(raw.status, &raw.body, path).map(|l| (l.classification, l.scope))
        }
    }
}
