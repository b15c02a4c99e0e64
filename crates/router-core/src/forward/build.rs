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

use crate::error::RouterError;
use crate::log::{Mode, RequestAction, RequestLog, RequestLogging};
use crate::platform::Platform;
use crate::resolve::cells::CellHealth;
use crate::route::Routed;
use crate::wire::{Answer, Forward, LogPlan, Plan};

use super::headers::{self, SMOKE_TEST_HEADER};
use super::incoming::Incoming;
use super::settings::Settings;
use super::upstream::{upstream_url, AllowList};

mod admission;
mod outgoing;
mod refusal;
mod target;

pub use admission::report_outcome;

/// The isolate as the forward phase reads it: settings made once, the
/// cells' circuits, and what the control document says now.
pub struct IsolateView<'i> {
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

/// One request on its way through the forward phase (pingora's `CTX`):
/// the request as it came in, how it was routed, the log line being built
/// (its `upstream` is the address, once the target is known), and whether
/// it carries a body. Each step of [`plan`] reads and writes it.
pub(crate) struct RequestContext<'a, 'r> {
    pub(crate) incoming: &'a Incoming,
    /// `None` when no ruleset is loaded or the control document says
    /// passthrough.
    pub(crate) routed: Option<&'r Routed<'a>>,
    pub(crate) log: RequestLog<'a>,
    /// A GET or HEAD never carries a body, whatever its headers say.
    pub(crate) body: bool,
    /// A classify rule's type, as the cell reads it
    /// (`X-Gitlab-Http-Router-Rule-Type`).
    pub(crate) rule_type: Option<&'static str>,
}

impl<'a, 'r> RequestContext<'a, 'r> {
    fn new(view: &IsolateView<'a>, incoming: &'a Incoming, routed: Option<&'r Routed<'a>>) -> Self {
        RequestContext {
            log: RequestLog {
                ruleset: view.ruleset,
                method: &incoming.parts.method,
                path: &incoming.parts.path,
                request_id: &incoming.trace.request_id,
                traceparent: &incoming.trace.traceparent,
                version: view.version,
                shadow: routed.and_then(|r| r.shadow),
                ..Default::default()
            },
            body: !is_bodiless(&incoming.parts.method),
            incoming,
            routed,
            rule_type: None,
        }
    }

    /// The address the request goes to: set by [`plan`] once the target
    /// is known and allowed.
    fn address(&self) -> &str {
        self.log.upstream.as_deref().unwrap_or_default()
    }
}

/// How a request ends when it is not forwarded: the router's own answer,
/// logged always.
pub(crate) enum Ending {
    /// A refusal or a rule's rejection, answered as it is.
    Answer(Answer),
    /// An error: its answer, and the error in the log line.
    Error(RouterError),
}

impl From<RouterError> for Ending {
    fn from(error: RouterError) -> Self {
        Ending::Error(error)
    }
}

/// The plan for a request (`routed`: `None` when no ruleset is loaded or
/// the control document says passthrough): forward it to its cell, or the
/// router's own answer.
pub fn plan<'a, P: Platform>(
    view: &IsolateView<'a>,
    platform: &P,
    incoming: &'a Incoming,
    routed: Option<&Routed<'a>>,
) -> Plan<'a> {
    let mut ctx = RequestContext::new(view, incoming, routed);
    match forward(view, platform, &mut ctx) {
        Ok(forward) => Plan::Forward(Box::new(forward)),
        Err(Ending::Answer(refusal)) => answer(view, &ctx.log, refusal),
        Err(Ending::Error(error)) => failed(view, ctx.log, error),
    }
}

/// The steps of a forwarded request, in order; any may end it instead.
fn forward<'a, P: Platform>(
    view: &IsolateView<'a>,
    platform: &P,
    ctx: &mut RequestContext<'a, '_>,
) -> Result<Forward<'a>, Ending> {
    refusal::refuse_before_routing(&view.settings, &ctx.incoming.parts)?;
    let not_found_deadline_ms = refusal::not_found_deadline_of(view, platform, ctx);
    refusal::record_decision(ctx)?;
    if ctx.routed.is_none() && view.passthrough {
        ctx.log.mode = Some(Mode::Passthrough);
    }
    let address = target::address_of(view, platform, ctx)?;
    ctx.log.upstream = Some(address);
    if !view.allowed.allows(ctx.address()) {
        return Err(RouterError::UpstreamNotAllowed(ctx.address().to_string()).into());
    }
    let report = admission::admit(view, platform, ctx)?;
    let url = upstream_url(
        view.settings.upstream_scheme,
        ctx.address(),
        &ctx.incoming.parts.path,
        &ctx.incoming.parts.query,
    );
    let signing = outgoing::signing(view, platform, ctx)?;
    let drop = outgoing::dropped_headers(view, ctx);
    let set = outgoing::set_headers(ctx);
    let log = &ctx.log;
    Ok(Forward {
        url,
        drop,
        set,
        signing,
        upstream_failure_log: upstream_failure_log(log, ctx.body),
        log: LogPlan {
            point: point(view, log),
            ..log_plan(view.logging, log, || platform.random())
        },
        not_found_deadline_ms,
        report,
        body: ctx.body,
        response_set: headers::route_names(
            headers::is_smoke_test(
                ctx.incoming.parts.header(SMOKE_TEST_HEADER),
                view.settings.smoke_test_secret,
            ),
            log.rule,
            log.cell,
            ctx.address(),
        ),
    })
}

/// The plan for a request the edge could not route at all (an exception
/// in the entry, a wasm instance that panicked): an answer and an error
/// log line with `message`.
///
/// `metrics`: as [`IsolateView::metrics`] (the point names only the error's kind).
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
                    action: RequestAction::Internal,
                    error_kind: Some(error.kind()),
                    ..Default::default()
                };
                crate::metrics::point(isolate, &log)
            }),
        }),
    }
}

/// Methods whose requests never carry a body the router forwards.
fn is_bodiless(method: &str) -> bool {
    method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD")
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
fn point(view: &IsolateView, log: &RequestLog) -> String {
    view.metrics
        .map_or_else(String::new, |isolate| crate::metrics::point(isolate, log))
}

/// The router's own answer to a request, logged always.
fn answer(view: &IsolateView, log: &RequestLog, answer: Answer) -> Plan<'static> {
    let (head, tail) = log.to_json_around_status();
    Plan::Answer {
        answer,
        log: Some(LogPlan {
            head,
            tail,
            min_status: 0,
            point: point(view, log),
        }),
    }
}

/// A request that ends in `error`: its answer, the error in its log line.
fn failed(view: &IsolateView, mut log: RequestLog, error: RouterError) -> Plan<'static> {
    log.add_error_of_kind(error.kind(), &error);
    answer(view, &log, error.answer())
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
