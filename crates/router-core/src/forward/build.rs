//! The forward decision: a routed request (select's decision, resolve's
//! answer) becomes its plan ([`crate::wire::Plan`]): the cell's URL, the
//! headers to drop and set, what to sign, what each failure answers, how
//! the circuit hears of the outcome, the 404 deadline and the log line; or
//! the router's own answer (a refusal, an error, an open circuit). Pure:
//! time and randomness come from the [`Platform`], so it runs and is tested
//! natively like the rest of the core. The edge calls [`plan`] for every
//! request and hands the entry what it returns.

use std::borrow::Cow;
use std::cell::RefCell;

use crate::decision::Action;
use crate::error::RouterError;
use crate::log::CacheLevel;
use crate::log::{RequestLog, RequestLogging};
use crate::platform::Platform;
use crate::question::{ClassifyKind, ClassifyRequest, Target};
use crate::resolve::cells::{self, Admission, CellHealth, Change, OpenedBy, Outcome};
use crate::resolve::topology::Classification;
use crate::route::Routed;
use crate::wire::{Answer, Failure, Forward, LogPlan, Plan, Report, Signing};

use super::headers::{
    self, CF_CONNECTING_IP, RULE_ACTION_HEADER, RULE_TYPE_HEADER, SMOKE_TEST_HEADER,
    VERSION_OVERRIDES, X_FORWARDED_FOR, X_FORWARDED_HOST, X_FORWARDED_PROTO,
};
use super::incoming::Incoming;
use super::settings::{Settings, SigningPolicy};
use super::signing::{SignedRequest, SIGNATURE_HEADER};
use super::upstream::{upstream_url, AllowList};
use crate::trace::{uuid_v4, TRACESTATE_HEADER};

/// The router in one isolate, as the forward phase reads it: settings made
/// once, the cells' circuits, and what the control document says now.
pub struct Router<'i> {
    /// The ruleset's name for the log line (`none` without one).
    pub ruleset: &'i str,
    /// The Worker version answering (the version metadata binding's id).
    pub version: Option<&'i str>,
    /// The isolate's settings as this phase reads them.
    pub settings: Settings<'i>,
    /// The configured allow-list plus the legacy cell, the fixed addresses
    /// and the listed cells.
    pub allowed: &'i AllowList,
    /// Headers a client's `Connection` can never have removed: the ones
    /// the rules read.
    pub relied_on: &'i [String],
    pub health: &'i RefCell<CellHealth>,
    /// `GITLAB_REQUEST_LOG`, unless the control document overrides it.
    pub logging: RequestLogging,
    /// The control document says every request goes to the legacy cell.
    pub passthrough: bool,
    /// The data point's isolate items when the metrics dataset is bound
    /// (every plan then carries its data point, [`crate::metrics`]);
    /// `None`: no points.
    pub metrics: Option<&'i str>,
}

impl<'i> Router<'i> {
    /// The log line every plan starts from.
    fn request_log<'a>(&self, incoming: &'a Incoming) -> RequestLog<'a>
    where
        'i: 'a,
    {
        RequestLog {
            ruleset: self.ruleset,
            method: &incoming.parts.method,
            path: &incoming.parts.path,
            action: "proxy",
            request_id: &incoming.trace.request_id,
            traceparent: &incoming.trace.traceparent,
            version: self.version,
            ..Default::default()
        }
    }
}

/// The plan for a request (`routed`: `None` when no ruleset is loaded or
/// the control document says passthrough): forward it to its cell, or the
/// router's own answer.
pub fn plan<'a, P: Platform>(
    router: &Router<'a>,
    platform: &P,
    incoming: &'a Incoming,
    routed: Option<&Routed<'a>>,
) -> Plan<'a> {
    let mut log = router.request_log(incoming);
    if let Some(refusal) = refused_before_routing(&router.settings, &incoming.parts) {
        return answer(router, &log, refusal);
    }
    let mut rule_type = None;
    // A classified request (or one a classify rule handed on): a 404 from
    // its cell is held to a deadline, so timing does not tell which cell
    // knew the path. The router's own answers never are.
    let classified = routed.is_some_and(|r| {
        matches!(r.decision.action, Action::Classify(_)) || !r.fell_through.is_empty()
    });
    let not_found_deadline_ms =
        not_found_deadline(&router.settings, classified, || platform.random());
    if let Some(d) = routed.map(|r| &r.decision) {
        log.rule = d.rule_id;
        log.action = d.action.name();
        match &d.action {
            Action::Classify(request) => {
                log.classify_type = Some(request.kind.name());
                rule_type = Some(request.kind.rule_type_header());
            }
            Action::Reject { status, message } => {
                return answer(router, &log, Answer::text(*status, format!("{message}\n")));
            }
            Action::Proxy { .. } | Action::Spread => {}
        }
    }
    let parts = &incoming.parts;
    if routed.is_none() && router.passthrough {
        log.mode = Some("passthrough");
    }
    let address = match target_of(router, platform, routed, &mut log) {
        Err(e) => return failed(router, log, e),
        Ok(address) => address.or_else(|| router.settings.proxy_host.map(str::to_owned)),
    };
    let Some(address) = address else {
        return failed(router, log, RouterError::NoLegacyCell);
    };
    if !router.allowed.allows(&address) {
        log.upstream = Some(address.clone());
        return failed(router, log, RouterError::UpstreamNotAllowed(address));
    }
    // A GET or HEAD never carries a body, whatever its headers say.
    let body = !is_bodiless(&parts.method);
    // A listed cell: its address's circuit decides between forwarding and a
    // fast 503.
    let mut report = None;
    if let Some(circuit) = router.settings.cells.circuit_of_address(&address) {
        // A listed address's circuit is always one of the list's cells.
        let cell_id = router
            .settings
            .cells
            .cells()
            .get(cells::health::cell_of_circuit(circuit))
            .map_or(0, |cell| cell.id);
        log.cell = Some(cell_id);
        let long_lived = cells::circuit::is_long_lived(&parts.path, parts.header("upgrade"));
        let trial_eligible = !body && !long_lived;
        let admission =
            router
                .health
                .borrow_mut()
                .admit(circuit, || platform.now_ms(), trial_eligible);
        match admission {
            Admission::Refused { retry_after_secs } => {
                let opened_by = router
                    .health
                    .borrow()
                    .circuit(circuit)
                    .and_then(|c| c.opened_by());
                let why = match opened_by {
                    Some(OpenedBy::Probe) => "the health probe found it down",
                    _ => "its requests failed",
                };
                log.upstream = Some(address.clone());
                log.chosen_by = Some("circuit_open");
                return failed(
                    router,
                    log,
                    RouterError::CellUnavailable {
                        cell: cell_id,
                        address,
                        why,
                        retry_after_secs,
                    },
                );
            }
            Admission::Forward | Admission::Trial => {
                let counts_failures = !body;
                report = Some(Report {
                    circuit,
                    trial: admission == Admission::Trial,
                    long_lived,
                    counts_failures,
                    gateway_statuses: routed.is_some_and(|r| r.decision.counts_gateway_statuses),
                    headers_timeout_ms: if counts_failures && !long_lived {
                        router.settings.headers_timeout_ms
                    } else {
                        0
                    },
                });
            }
        }
    }
    let url = upstream_url(
        router.settings.upstream_scheme,
        &address,
        &parts.path,
        &parts.query,
    );
    // The JWT's header and claims; the entry has the platform sign them.
    let signing_input = match (router.settings.signer, router.settings.signing_policy) {
        (Ok(Some(signer)), _) => {
            let mut jti = [0u8; 16];
            platform.random_bytes(&mut jti);
            Some(signer.signing_input(&SignedRequest {
                audience: &address,
                method: &parts.method,
                path: &parts.path,
                query: &parts.query,
                rule: log.rule,
                classify_type: rule_type,
                content_length: parts.header("content-length"),
                content_type: parts.header("content-type"),
                jti: &uuid_v4(jti),
                now_ms: platform.now_ms(),
            }))
        }
        (_, SigningPolicy::Optional) => None,
        (_, SigningPolicy::Required) => {
            log.upstream = Some(address);
            return failed(router, log, RouterError::SigningUnavailable);
        }
    };
    log.upstream = Some(address);
    let (connection, upgrade) = (parts.header("connection"), parts.header("upgrade"));
    let drop = if headers::needs_own_drops(connection, upgrade, router.relied_on) {
        headers::dropped_names(connection, upgrade, router.relied_on)
    } else {
        Vec::new()
    };
    let mut set: Vec<(Cow<'static, str>, Cow<'a, str>)> = Vec::with_capacity(8);
    set.extend([
        (
            X_FORWARDED_HOST.into(),
            incoming.public_host.as_str().into(),
        ),
        (X_FORWARDED_PROTO.into(), incoming.public_proto.into()),
        // A spread rule proxies without classifying: cells know the
        // header's values `classify` and `proxy` only.
        (
            RULE_ACTION_HEADER.into(),
            if log.action == "spread" {
                "proxy"
            } else {
                log.action
            }
            .into(),
        ),
    ]);
    if let Some(rule_type) = rule_type {
        set.push((RULE_TYPE_HEADER.into(), rule_type.into()));
    }
    if let Some(client) = headers::forwarded_for(parts.header(CF_CONNECTING_IP)) {
        set.push((X_FORWARDED_FOR.into(), client.into()));
    }
    // Replaces a client's own X-Request-Id.
    for (name, value) in incoming.trace.headers() {
        if !value.is_empty() {
            set.push((name.into(), value.into()));
        }
    }
    if !incoming.trace.tracestate.is_empty() {
        set.push((
            TRACESTATE_HEADER.into(),
            incoming.trace.tracestate.as_str().into(),
        ));
    }
    let signing = signing_input.map(|input| Signing {
        input,
        header: SIGNATURE_HEADER.to_string(),
        on_failure: (router.settings.signing_policy == SigningPolicy::Required).then(|| Failure {
            answer: RouterError::SigningFailed(String::new()).answer(),
            log_error_open: log.error_open("request signing failed: "),
        }),
    });
    Plan::Forward(Box::new(Forward {
        url,
        drop,
        set,
        signing,
        upstream_failure_log: upstream_failure_log(&log, body),
        log: LogPlan {
            point: point(router, &log),
            ..log_plan(router.logging, &log, || platform.random())
        },
        not_found_deadline_ms,
        report,
        body,
        response_set: headers::route_names(
            headers::is_smoke_test(
                parts.header(SMOKE_TEST_HEADER),
                router.settings.smoke_test_secret,
            ),
            log.rule,
            log.cell,
            log.upstream.as_deref().unwrap_or_default(),
        ),
    }))
}

/// The plan for a request the edge could not route at all (an exception
/// in the entry, a wasm instance that panicked): an answer and an error
/// log line with `message`.
///
/// `metrics`: as [`Router::metrics`] (the point names only the error's kind).
pub fn internal_error(message: &str, metrics: Option<&str>) -> Plan<'static> {
    let error = RouterError::Internal(message.to_string());
    let mut head = String::from(r#"{"level":"error","message":"#);
    crate::json::push_quoted(&mut head, &error.to_string());
    head.push_str(r#","scope":"router","#);
    Plan::Answer {
        answer: error.answer(),
        log: Some(LogPlan {
            head,
            tail: "}".to_string(),
            min_status: 0,
            point: metrics.map_or_else(String::new, |isolate| {
                let log = RequestLog {
                    action: "internal",
                    error_kind: Some(error.kind()),
                    ..Default::default()
                };
                crate::metrics::point(isolate, &log)
            }),
        }),
    }
}

/// What an outcome the entry reported (the plan's report fields: circuit
/// and flags; `status` as [`cells::Outcome::of`] reads it) did to its
/// circuit, as a log line's message (`None`: nothing worth a line).
pub fn report_outcome(
    router: &Router,
    circuit: usize,
    flags: u32,
    status: u16,
    sent_ms: u64,
    retry_after: bool,
    now_ms: u64,
) -> Option<String> {
    let report = Report::decode(circuit, flags)?;
    let outcome = Outcome::of(status, retry_after, report.gateway_statuses);
    let cell = router
        .settings
        .cells
        .cells()
        .get(cells::health::cell_of_circuit(circuit))?;
    let change = router.health.borrow_mut().record(
        circuit,
        outcome,
        sent_ms,
        now_ms,
        report.long_lived,
        report.counts_failures,
    );
    let policy = *router.health.borrow().policy();
    let address = if circuit % 2 == 1 {
        cell.registry_address.as_deref().unwrap_or(&cell.address)
    } else {
        &cell.address
    };
    let message = match change {
        Change::Opened => format!(
            "circuit opened in this isolate after {} failures in a row with no answer in between (last: {}); 503 for {} ms, then trial requests",
            policy.failures,
            outcome.describe(),
            policy.open_ms
        ),
        Change::Closed => format!("circuit closed in this isolate ({})", outcome.describe()),
        Change::TrialFailed => format!(
            "trial request failed ({}); circuit open again",
            outcome.describe()
        ),
        Change::None => return None,
    };
    Some(format!("cell {} ({address}): {message}", cell.id))
}

/// The address a routed request goes to (`None`: the legacy cell), with
/// how it was resolved written into `log`.
fn target_of<'r, P: Platform>(
    router: &Router,
    platform: &P,
    routed: Option<&Routed<'r>>,
    log: &mut RequestLog<'r>,
) -> Result<Option<String>, RouterError> {
    let Some(routed) = routed else {
        log.chosen_by = Some("legacy");
        return Ok(None);
    };
    log.fell_through = routed.fell_through.iter().map(|(rule, _)| *rule).collect();
    log.value_too_long = routed.decision.value_too_long;
    // A rule that handed the request on may have done so on a stale
    // not-found while the service failed: its error and level belong in
    // the line (found by the soak test).
    for (rule, res) in &routed.fell_through {
        if let Some(e) = &res.error {
            log.add_error_of_kind(e.kind(), format_args!("{rule}: {e}"));
        }
        if res.level == CacheLevel::Stale {
            log.cache = Some(CacheLevel::Stale);
        }
    }
    let attempts = routed.attempts();
    log.attempts = (attempts > 0).then_some(attempts);
    log.service_ms = routed.service_ms();
    log.coalesced = routed.coalesced();
    let question = match &routed.decision.action {
        Action::Proxy { address } => {
            log.chosen_by = Some(if address.is_some() { "fixed" } else { "legacy" });
            return Ok(address.map(str::to_string));
        }
        Action::Reject { .. } => return Ok(None),
        Action::Spread => return Ok(spread(router, platform, log)),
        Action::Classify(question) => question,
    };
    let Some(res) = &routed.resolution else {
        if let Some(address) = static_target(&router.settings, question, log) {
            return address.map(Some);
        }
        log.cache = Some(CacheLevel::Fallback);
        log.chosen_by = Some("legacy");
        log.add_error_of_kind(
            "no_topology_service",
            "GITLAB_TOPOLOGY_SERVICE_URL is not set",
        );
        return Ok(None);
    };
    if log.cache != Some(CacheLevel::Stale) || res.level == CacheLevel::Fallback {
        log.cache = Some(res.level);
    }
    if let Some(e) = &res.error {
        log.add_error_of_kind(e.kind(), e);
    }
    match &res.classification {
        // The service could not answer and nothing was cached: a listed
        // cell the key names, else the rule's outage policy.
        None => match static_target(&router.settings, question, log) {
            Some(address) => address.map(Some),
            None if routed.unavailable() => {
                let error = RouterError::OutageUnavailable {
                    retry_after_secs: router.settings.outage_retry_after_secs,
                    registry: question.target == Target::Registry,
                };
                Err(error)
            }
            None => {
                log.chosen_by = Some("legacy");
                Ok(None)
            }
        },
        // A 404 for a `CELL_ID` / `SESSION_PREFIX` key that names a listed
        // cell contradicts the list: the list's answer (the resolver keeps
        // such a 404 for a second only, and says so in a warn line).
        Some(Classification::NotFound) => match static_target(&router.settings, question, log) {
            Some(address) => {
                log.add_error_of_kind("topology_contradicts_cells", "the Topology Service answered 404 for a cell GITLAB_CELLS lists; routed by the list");
                address.map(Some)
            }
            None => {
                log.chosen_by = Some("legacy");
                Ok(None)
            }
        },
        Some(c) => {
            log.chosen_by = Some(match res.level {
                CacheLevel::Memory | CacheLevel::CacheApi => "cache",
                CacheLevel::Service => "service",
                CacheLevel::Stale => "stale",
                CacheLevel::Fallback | CacheLevel::Static => "legacy",
            });
            c.address_for(question.target)
                .map(|a| a.map(str::to_string))
        }
    }
}

/// Resolution without the service: a `CELL_ID` or `SESSION_PREFIX` key
/// naming a cell of `GITLAB_CELLS` goes to that cell (`None`: the key
/// names no listed cell).
fn static_target(
    settings: &Settings,
    question: &ClassifyRequest,
    log: &mut RequestLog,
) -> Option<Result<String, RouterError>> {
    if !matches!(
        question.kind,
        ClassifyKind::CellId | ClassifyKind::SessionPrefix
    ) {
        return None;
    }
    let cell = settings
        .cells
        .named_by(question.kind, question.value.as_deref()?)?;
    log.cache = Some(CacheLevel::Static);
    log.chosen_by = Some("static");
    Some(match question.target {
        Target::Web => Ok(cell.address.clone()),
        Target::Registry => cell
            .registry_address
            .clone()
            .ok_or(RouterError::NoRegistryAddress),
    })
}

/// A cell for a spread rule (its address), or `None`: the legacy cell.
fn spread<P: Platform>(router: &Router, platform: &P, log: &mut RequestLog) -> Option<String> {
    let chosen = router
        .health
        .borrow()
        .choose(platform.random(), platform.now_ms());
    match chosen.and_then(|i| router.settings.cells.cells().get(i)) {
        Some(cell) => {
            log.chosen_by = Some("spread");
            Some(cell.address.clone())
        }
        None => {
            log.chosen_by = Some("legacy");
            if !router.settings.cells.is_empty() {
                log.add_error_of_kind(
                    "no_healthy_cell",
                    "spread: no healthy cell in GITLAB_CELLS; the legacy cell serves it",
                );
            }
            None
        }
    }
}

/// Methods whose requests never carry a body the router forwards.
fn is_bodiless(method: &str) -> bool {
    method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD")
}

/// The router's own answer to a request it must not route at all: `TRACE`
/// and `CONNECT` (405), and a request naming a Worker version
/// (`Cloudflare-Workers-Version-Overrides`) without the deploy's smoke-test
/// secret (403: only the smoke test may reach a version at 0 %).
fn refused_before_routing(
    settings: &Settings,
    parts: &crate::request::RequestParts,
) -> Option<Answer> {
    if parts.method.eq_ignore_ascii_case("TRACE") || parts.method.eq_ignore_ascii_case("CONNECT") {
        let mut answer = Answer::text(
            405,
            format!(
                "gitlab-http-router: method {} is not allowed\n",
                parts.method
            ),
        );
        answer.headers.push((
            "allow".into(),
            "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS".into(),
        ));
        return Some(answer);
    }
    parts.header(VERSION_OVERRIDES)?;
    let allowed =
        headers::is_smoke_test(parts.header(SMOKE_TEST_HEADER), settings.smoke_test_secret);
    (!allowed).then(|| {
        Answer::text(
            403,
            "gitlab-http-router: version overrides are for the deploy's smoke test\n",
        )
    })
}

/// How the log line of a request is written, as `GITLAB_REQUEST_LOG`
/// asks: every line, only notable ones (and any 5xx), or those plus a
/// random share of the rest (`random` is asked only then).
/// (The data point is the caller's to add.)
fn log_plan(logging: RequestLogging, log: &RequestLog, random: impl FnOnce() -> f64) -> LogPlan {
    let (head, tail) = log.to_json_around_status();
    let always = logging.always(log.is_notable_whatever_the_status(), random);
    LogPlan {
        head,
        tail,
        min_status: if always { 0 } else { 500 },
        point: String::new(),
    }
}

/// The request's metrics data point, when the dataset is bound.
fn point(router: &Router, log: &RequestLog) -> String {
    router
        .metrics
        .map_or_else(String::new, |isolate| crate::metrics::point(isolate, log))
}

/// The deadline (ms after the request reached the entry) before which a
/// 404 from the upstream is not returned: drawn once per request from
/// `GITLAB_NOT_FOUND_DELAY_MS` for a classified request (`random` is asked
/// only then), else none. A deadline, not a delay added to the cell's
/// time: the answer's timing then does not depend on which cell answered,
/// or how fast, as long as it answered before the deadline.
pub(crate) fn not_found_deadline(
    settings: &Settings,
    classified: bool,
    random: impl FnOnce() -> f64,
) -> u32 {
    match settings.not_found_delay {
        Some(range) if classified => range.pick(random()),
        _ => 0,
    }
}

/// The router's own answer to a request, logged always.
fn answer(router: &Router, log: &RequestLog, answer: Answer) -> Plan<'static> {
    let (head, tail) = log.to_json_around_status();
    Plan::Answer {
        answer,
        log: Some(LogPlan {
            head,
            tail,
            min_status: 0,
            point: point(router, log),
        }),
    }
}

/// A request that ends in `error`: its answer, the error in its log line.
fn failed(router: &Router, mut log: RequestLog, error: RouterError) -> Plan<'static> {
    log.add_error_of_kind(error.kind(), &error);
    answer(router, &log, error.answer())
}

/// How the log line of a failed upstream fetch opens its `error`; without
/// an earlier error (nearly always) the same for every request. A request
/// with a body says the failure may be the client's: workerd reports an
/// aborted upload as it reports a dead cell ("Network connection lost."),
/// so the line says so in words and in the field `"error_level":"warn"`
/// (the tail worker sends no such line to Sentry; body-less requests and
/// the probe still see a dead cell).
pub(crate) fn upstream_failure_log(log: &RequestLog, body: bool) -> Cow<'static, str> {
    match (log.error.is_none(), body) {
        (true, false) => Cow::Borrowed(UPSTREAM_FAILURE_OPEN),
        (true, true) => Cow::Borrowed(UPSTREAM_FAILURE_WITH_BODY_OPEN),
        (false, false) => Cow::Owned(log.error_open(UPSTREAM_FAILURE_STEP)),
        (false, true) => {
            let open = log.error_open(UPSTREAM_FAILURE_WITH_BODY_STEP);
            Cow::Owned(format!("{MAYBE_THE_CLIENTS}{open}"))
        }
    }
}

pub(crate) const UPSTREAM_FAILURE_STEP: &str = "upstream fetch failed: ";
pub(crate) const UPSTREAM_FAILURE_WITH_BODY_STEP: &str =
    "upstream fetch failed (the client's upload or the cell; not counted against the cell): ";
/// [`upstream_failure_log`] when nothing failed before the fetch:
/// `error_open(UPSTREAM_FAILURE_STEP)` of a line without errors (tested).
const UPSTREAM_FAILURE_OPEN: &str = r#","error":"upstream fetch failed: "#;
/// The field before `error` in the line of a failure that may be the
/// client's (docs/operations.md, "Fields to query").
pub(crate) const MAYBE_THE_CLIENTS: &str = r#","error_level":"warn""#;
/// The same for a request with a body:
/// `MAYBE_THE_CLIENTS + error_open(UPSTREAM_FAILURE_WITH_BODY_STEP)` (tested).
const UPSTREAM_FAILURE_WITH_BODY_OPEN: &str = r#","error_level":"warn","error":"upstream fetch failed (the client's upload or the cell; not counted against the cell): "#;

#[cfg(test)]
mod tests;
