//! The JS↔Rust contract in one place: how the entry hands a request in
//! (its input format, [`SEPARATOR`] and [`HEADER_ABSENT`]), what `routeSync`
//! answers ([`NOT_ROUTED`], [`PLAN_TOO_LONG`]), and the plan for one
//! request: everything Rust decided, for the JS entry (`src/entry.js`) to
//! apply without deciding anything itself. A plan either forwards the
//! request (URL, headers to drop and to set, what to sign, what a signing or
//! upstream failure answers, how the cell's circuit hears of the outcome,
//! the 404 deadline, how to write the log line once the status is known) or
//! answers it from the router.
//!
//! The format: fields joined by [`FIELD`], lists and pairs inside a field
//! joined by [`ITEM`]. Every plan starts with [`head`]'s fields; a forward
//! plan's [`forward`] fields follow, then the headers to set, a field each
//! for a name and its value, from [`SET_FROM`] on; an answer plan's
//! [`answer`] field follows. Each list is declared once, by name and in
//! order ([`crate::fields::fields!`]): its positions, the names the entry
//! reads them by ([`layout`]) and its writer ([`Plan::encode`]) come from
//! it; [`Plan::decode`] reads a plan back by those names (round-trip
//! tested). Neither separator can come from a client value the plan
//! carries (forward's checks), so nothing needs escaping. The entry learns
//! every position, code and name it reads from [`layout`], once per
//! instance: entry.js holds none of its own.

use crate::json::{push_u64, PushAscii};
use std::borrow::Cow;

use crate::error::RouterError;
use crate::fields::fields;

pub use crate::fields::{FIELD, ITEM};

/// The entry's input: the URL, the method and the header values, joined
/// by this; an absent header is [`HEADER_ABSENT`]. Neither can occur in a
/// valid HTTP field value.
pub const SEPARATOR: char = '\u{0}';
pub const HEADER_ABSENT: &str = "\u{1}";

/// `routeSync`'s answers besides a plan's length: go to `routeAsync`, or
/// take the plan with `takePlan` (it did not fit the input buffer).
pub const NOT_ROUTED: i32 = -1;
pub const PLAN_TOO_LONG: i32 = -2;

/// A plan's first field: its kind.
pub const KIND_FORWARD: &str = "F";
pub const KIND_ANSWER: &str = "A";

/// What the entry reports (`cellOutcome`) instead of a status: the fetch
/// threw; response headers did not come within the plan's bound.
pub const FETCH_FAILED: u16 = 0;
pub const NO_HEADERS: u16 = 1;

/// The response header whose presence the entry reports with a status
/// (a 503 with it is a cell's maintenance mode).
pub const RETRY_AFTER_HEADER: &str = "retry-after";

/// How many header names the entry remembers `headerKind`'s answer for
/// before it starts over (names are few in practice; a client sending
/// endless new ones only makes it start over).
pub const HEADER_KINDS_REMEMBERED: u32 = 256;

/// The only status held to a plan's deadline (`GITLAB_NOT_FOUND_DELAY_MS`).
pub const HELD_STATUS: u16 = 404;

/// A report's flags ([`Report::flags`]): bits of the integer the plan
/// carries and the entry hands back with an outcome.
pub mod flag {
    /// A trial request: every status is reported.
    pub const TRIAL: u32 = 1;
    /// A WebSocket or long poll.
    pub const LONG_LIVED: u32 = 2;
    /// A failure counts against the cell.
    pub const COUNTS_FAILURES: u32 = 4;
    /// The statuses [`super::GATEWAY_STATUSES`] are reported.
    pub const GATEWAY_STATUSES: u32 = 8;
}

/// The statuses a rule that counts gateway statuses reports (inclusive).
pub const GATEWAY_STATUSES: (u16, u16) = (502, 504);

fields! {
    /// Every plan's first fields.
    pub mod head from 0;
    fn write(out, plan: &Plan<'_>);
    /// [`KIND_FORWARD`] or [`KIND_ANSWER`].
    KIND => out.push_str(match plan {
        Plan::Forward(_) => KIND_FORWARD,
        Plan::Answer { .. } => KIND_ANSWER,
    });
    /// The log line is `LOG_HEAD "status":S,"duration_ms":D LOG_TAIL`
    /// (an empty head: no line), written when the status is at least
    /// `LOG_MIN_STATUS` (0: always).
    LOG_HEAD, LOG_TAIL, LOG_MIN_STATUS => push_log(out, plan.log());
    /// The data point's [`crate::metrics::item`]s (all empty: no point).
    POINT[crate::metrics::item::END] => push_point(out, plan.log().map_or("", |l| &l.point));
}

fields! {
    /// A forward plan's fields, after [`head`]'s.
    pub mod forward from head::END;
    fn write(out, f: &Forward<'_>);
    URL => out.push_str(&f.url);
    /// Client headers to drop besides the usual ones, by [`ITEM`] (empty:
    /// the usual).
    DROP => push_list(out, &f.drop);
    /// What to sign (empty: unsigned), the header the signature goes in,
    /// and what a signing failure answers (a failure, `log error opening
    /// ITEM answer`; empty: forward unsigned).
    SIGN_INPUT, SIGN_HEADER, SIGN_FAILURE => push_signing(out, f.signing.as_ref());
    /// How a failed upstream fetch's log line opens its `error` (its
    /// answer is [`encoded_upstream_failure_answer`]).
    UPSTREAM_FAILURE_LOG => out.push_str(&f.upstream_failure_log);
    /// The deadline in ms before which a [`HELD_STATUS`] is not returned
    /// (0: none).
    DEADLINE => push_u64(out, u64::from(f.not_found_deadline_ms));
    /// The report's [`flag`]s (empty: nothing reported), its circuit and
    /// its headers timeout in ms (0: none).
    REPORT, CIRCUIT, HEADERS_TIMEOUT => push_report(out, f.report.as_ref());
    /// `1`: the request's body is forwarded.
    BODY => out.push_ascii(if f.body { '1' } else { '0' });
    /// Headers set on the upstream's response, `name ITEM value …` (empty:
    /// the response as it came).
    RESPONSE_SET => push_pairs(out, &f.response_set);
}

/// A forward plan's headers to set follow its fixed fields: name, value,
/// name, value, …
pub const SET_FROM: usize = forward::END;

fields! {
    /// An answer plan's field, after [`head`]'s.
    pub mod answer from head::END;
    fn write(out, answer: &Answer);
    /// `status ITEM name ITEM value … ITEM body`.
    ANSWER => push_answer(out, answer);
}

/// A constant of [`layout`].
enum Value {
    Char(char),
    Text(&'static str),
    Number(i64),
}

/// Every position, code and name the entry reads plans and writes its
/// input with, by the name entry.js uses for it, as one JSON object the
/// entry parses once per instance: the constants above, each list's
/// field positions by their names, and the data point's items as
/// `POINT_<name>`, relative to [`head::POINT`].
pub fn layout() -> String {
    use crate::metrics::{self, item};
    let constants = [
        ("FIELD", Value::Char(FIELD)),
        ("ITEM", Value::Char(ITEM)),
        ("SEPARATOR", Value::Char(SEPARATOR)),
        ("HEADER_ABSENT", Value::Text(HEADER_ABSENT)),
        ("PLAN_TOO_LONG", Value::Number(PLAN_TOO_LONG.into())),
        ("KIND_ANSWER", Value::Text(KIND_ANSWER)),
        ("FETCH_FAILED", Value::Number(FETCH_FAILED.into())),
        ("NO_HEADERS", Value::Number(NO_HEADERS.into())),
        ("RETRY_AFTER", Value::Text(RETRY_AFTER_HEADER)),
        ("KINDS_MAX", Value::Number(HEADER_KINDS_REMEMBERED.into())),
        ("HELD_STATUS", Value::Number(HELD_STATUS.into())),
        ("REPORT_TRIAL", Value::Number(flag::TRIAL.into())),
        (
            "REPORT_GATEWAY",
            Value::Number(flag::GATEWAY_STATUSES.into()),
        ),
        ("GATEWAY_FROM", Value::Number(GATEWAY_STATUSES.0.into())),
        ("GATEWAY_TO", Value::Number(GATEWAY_STATUSES.1.into())),
        ("SET_FROM", Value::Number(SET_FROM as i64)),
        ("POINT_BINDING", Value::Text(metrics::BINDING)),
        ("POINT_FIELDS", Value::Number(item::END as i64)),
        (
            "POINT_DOUBLES_FROM",
            Value::Number(metrics::DOUBLES_FROM as i64),
        ),
        (
            "SIGNING_FAILED_KIND",
            Value::Text(RouterError::SigningFailed(String::new()).kind()),
        ),
        (
            "UPSTREAM_FAILED_KIND",
            Value::Text(RouterError::UpstreamUnreachable(String::new()).kind()),
        ),
    ];
    let mut out = String::with_capacity(1024);
    let mut entry = |prefix: &str, name: &str, value: &Value| {
        out.push_ascii(if out.is_empty() { '{' } else { ',' });
        out.push_ascii('"');
        out.push_str(prefix);
        out.push_str(name);
        out.push_str("\":");
        match value {
            Value::Char(c) => crate::json::push_quoted(&mut out, c.encode_utf8(&mut [0; 4])),
            Value::Text(text) => crate::json::push_quoted(&mut out, text),
            Value::Number(n) => {
                if *n < 0 {
                    out.push_ascii('-');
                }
                push_u64(&mut out, n.unsigned_abs());
            }
        }
    };
    for (name, value) in &constants {
        entry("", name, value);
    }
    for names in [head::NAMES, forward::NAMES, answer::NAMES] {
        for (name, at) in names {
            entry("", name, &Value::Number(*at as i64));
        }
    }
    for (name, at) in item::NAMES {
        entry("POINT_", name, &Value::Number(*at as i64));
    }
    out.push_ascii('}');
    out
}
/// A response the router gives itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// A plain-text answer.
    pub fn text(status: u16, body: impl Into<String>) -> Answer {
        Answer {
            status,
            headers: vec![(
                "content-type".to_string(),
                "text/plain; charset=utf-8".to_string(),
            )],
            body: body.into(),
        }
    }
}

/// How the log line is written once the status is known:
/// `head + "status":S,"duration_ms":D + tail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPlan {
    pub head: String,
    pub tail: String,
    /// The line is written when the status is at least this (0: always).
    pub min_status: u16,
    /// The metrics data point's items ([`crate::metrics::point`], joined
    /// by [`FIELD`]: they are the plan's fields), written whatever the
    /// status; empty: no point (no dataset bound).
    pub point: String,
}

/// What a step that fails in the entry (signing, the upstream fetch)
/// answers, and how its log line ends: the log head, the status and
/// duration, then `log_error_open`, the failure's message JSON-escaped, and
/// `"}`. `log_error_open` opens the `error` string with the step's name and
/// any error recorded earlier already in it. Always logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub answer: Answer,
    pub log_error_open: String,
}

/// What the entry signs: the JWT's header and claims, signed with the
/// isolate's key, set as `header`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signing {
    pub input: String,
    pub header: String,
    /// What a signing failure answers; `None`: forward unsigned (the
    /// `optional` signing policy).
    pub on_failure: Option<Failure>,
}

/// What the entry reports back (`cellOutcome`) after forwarding to a
/// listed cell's address ([`crate::resolve::cells::circuit`]): a fetch that threw,
/// response headers that did not come within `headers_timeout_ms`, and
/// every status of a trial, [`GATEWAY_STATUSES`] for a rule that counts
/// them. For any other response it only writes the time into the
/// circuit's answered slot (no call into wasm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// The circuit ([`crate::resolve::cells::circuit_index`]).
    pub circuit: usize,
    /// A trial request: every outcome is reported.
    pub trial: bool,
    /// A WebSocket or long poll ([`crate::resolve::cells::circuit::is_long_lived`]).
    pub long_lived: bool,
    /// The request has no body: its failure is the cell's (a failed upload
    /// may be the client's).
    pub counts_failures: bool,
    /// Its rule counts 502, 503 and 504 (`circuit.countGatewayStatuses`).
    pub gateway_statuses: bool,
    /// After this long without response headers the entry reports
    /// [`crate::resolve::cells::circuit::NO_HEADERS`]; 0: never.
    pub headers_timeout_ms: u32,
}

impl Report {
    /// The report's [`flag`]s, which the entry hands back with an outcome.
    pub fn flags(&self) -> u32 {
        [
            (self.trial, flag::TRIAL),
            (self.long_lived, flag::LONG_LIVED),
            (self.counts_failures, flag::COUNTS_FAILURES),
            (self.gateway_statuses, flag::GATEWAY_STATUSES),
        ]
        .iter()
        .filter(|(set, _)| *set)
        .fold(0, |flags, (_, bit)| flags | bit)
    }

    /// The report the entry hands back: the circuit and
    /// [`Report::flags`] (the timeout is not needed again); `None` for a
    /// bit no flag has.
    pub fn decode(circuit: usize, flags: u32) -> Option<Report> {
        let all = flag::TRIAL | flag::LONG_LIVED | flag::COUNTS_FAILURES | flag::GATEWAY_STATUSES;
        (flags & !all == 0).then_some(())?;
        Some(Report {
            circuit,
            trial: flags & flag::TRIAL != 0,
            long_lived: flags & flag::LONG_LIVED != 0,
            counts_failures: flags & flag::COUNTS_FAILURES != 0,
            gateway_statuses: flags & flag::GATEWAY_STATUSES != 0,
            headers_timeout_ms: 0,
        })
    }
}

/// Forward the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward<'a> {
    pub url: String,
    /// Client headers to delete; empty: the isolate's usual set
    /// (`routerSetup`).
    pub drop: Vec<String>,
    /// Headers to set, in order: names are constants, values mostly
    /// borrowed from the request's state (no copy; the plan is encoded
    /// while that state is still there).
    pub set: Vec<(Cow<'static, str>, Cow<'a, str>)>,
    pub signing: Option<Signing>,
    /// How a failed upstream fetch's log line opens its `error` (as
    /// [`Failure::log_error_open`]); the answer is the same for every
    /// request, [`encoded_upstream_failure_answer`], which the entry gets
    /// once.
    pub upstream_failure_log: Cow<'a, str>,
    pub log: LogPlan,
    /// The deadline, in ms after the request reached the entry, before
    /// which a 404 from the upstream is not returned
    /// (`GITLAB_NOT_FOUND_DELAY_MS`, drawn once per request by Rust); 0:
    /// none. The entry waits on a timer for what is left of it and returns
    /// the upstream response as it is: no body is read or buffered.
    pub not_found_deadline_ms: u32,
    /// `None`: the upstream is no listed cell, nothing is reported.
    pub report: Option<Report>,
    /// Whether the request's body is forwarded: never for a GET or HEAD,
    /// whatever its `Content-Length` or `Transfer-Encoding` say (workerd
    /// gives them a zero-length body, and `fetch` refuses one).
    pub body: bool,
    /// Headers the entry sets on the upstream's response, replacing the
    /// cell's (the smoke test's route, [`crate::forward::headers::route_names`]).
    pub response_set: Vec<(Cow<'static, str>, Cow<'a, str>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan<'a> {
    Forward(Box<Forward<'a>>),
    /// Answer from the router, with its log line.
    Answer {
        answer: Answer,
        log: Option<LogPlan>,
    },
}

/// What the router answers when the upstream fetch of a forwarded request
/// fails, in the plan's answer form (`status ITEM name ITEM value … ITEM
/// body`): it is the same for every request, so the entry gets it once at
/// set-up instead of in each plan.
pub fn encoded_upstream_failure_answer() -> String {
    let mut out = String::new();
    push_answer(
        &mut out,
        &RouterError::UpstreamUnreachable(String::new()).answer(),
    );
    out
}

/// A status as its decimal digits, without a temporary string.
fn push_status(out: &mut String, status: u16) {
    push_u64(out, u64::from(status));
}

fn push_answer(out: &mut String, a: &Answer) {
    push_status(out, a.status);
    out.push_ascii(ITEM);
    push_pairs(out, &a.headers);
    out.push_ascii(ITEM);
    out.push_str(&a.body);
}

fn push_failure(out: &mut String, f: &Failure) {
    out.push_str(&f.log_error_open);
    out.push_ascii(ITEM);
    push_answer(out, &f.answer);
}

fn parse_failure(field: &str) -> Option<Failure> {
    let (open, answer) = field.split_once(ITEM)?;
    Some(Failure {
        answer: parse_answer(answer)?,
        log_error_open: open.to_string(),
    })
}

/// The log line's fields (none: an empty head, no line).
fn push_log(out: &mut String, log: Option<&LogPlan>) {
    if let Some(log) = log {
        out.push_str(&log.head);
        out.push_ascii(FIELD);
        out.push_str(&log.tail);
        out.push_ascii(FIELD);
        push_status(out, log.min_status);
    } else {
        out.push_ascii(FIELD);
        out.push_ascii(FIELD);
        out.push_ascii('0');
    }
}

/// A data point's fields: its items, or as many empty fields.
fn push_point(out: &mut String, point: &str) {
    if point.is_empty() {
        for _ in 1..crate::metrics::item::END {
            out.push_ascii(FIELD);
        }
    } else {
        out.push_str(point);
    }
}

/// The items of a list field.
fn push_list(out: &mut String, items: &[String]) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_ascii(ITEM);
        }
        out.push_str(item);
    }
}

/// The signing's three fields (all empty: unsigned).
fn push_signing(out: &mut String, signing: Option<&Signing>) {
    if let Some(s) = signing {
        out.push_str(&s.input);
        out.push_ascii(FIELD);
        out.push_str(&s.header);
        out.push_ascii(FIELD);
        if let Some(f) = &s.on_failure {
            push_failure(out, f);
        }
    } else {
        out.push_ascii(FIELD);
        out.push_ascii(FIELD);
    }
}

/// The report's three fields (no flags: nothing reported).
fn push_report(out: &mut String, report: Option<&Report>) {
    if let Some(r) = report {
        push_u64(out, u64::from(r.flags()));
        out.push_ascii(FIELD);
        push_u64(out, r.circuit as u64);
        out.push_ascii(FIELD);
        push_u64(out, u64::from(r.headers_timeout_ms));
    } else {
        out.push_ascii(FIELD);
        out.push_ascii('0');
        out.push_ascii(FIELD);
        out.push_ascii('0');
    }
}

/// The log plan from a plan's [`head`] fields.
fn parse_log(f: &[&str]) -> Option<Option<LogPlan>> {
    let point = f.get(head::POINT..head::POINT + crate::metrics::item::END)?;
    let point = if point.iter().all(|item| item.is_empty()) {
        String::new()
    } else {
        point.join(&FIELD.to_string())
    };
    let log_head = *f.get(head::LOG_HEAD)?;
    if log_head.is_empty() {
        return point.is_empty().then_some(None);
    }
    Some(Some(LogPlan {
        head: log_head.to_string(),
        tail: f.get(head::LOG_TAIL)?.to_string(),
        point,
        min_status: f.get(head::LOG_MIN_STATUS)?.parse().ok()?,
    }))
}

fn push_pairs<N: AsRef<str>, V: AsRef<str>>(out: &mut String, pairs: &[(N, V)]) {
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push_ascii(ITEM);
        }
        out.push_str(name.as_ref());
        out.push_ascii(ITEM);
        out.push_str(value.as_ref());
    }
}

/// An answer as `status ITEM headers... ITEM body`: the headers are the
/// items between the first and the last.
fn parse_answer(field: &str) -> Option<Answer> {
    let items: Vec<&str> = field.split(ITEM).collect();
    let (status, rest) = items.split_first()?;
    let (body, headers) = rest.split_last()?;
    if headers.is_empty() {
        return None;
    }
    let status = status.parse().ok()?;
    let body = body.to_string();
    let headers = parse_pairs(headers)?;
    Some(Answer {
        status,
        headers,
        body,
    })
}

fn parse_pairs(items: &[&str]) -> Option<Vec<(String, String)>> {
    if items == [""] {
        return Some(Vec::new());
    }
    if !items.len().is_multiple_of(2) {
        return None;
    }
    Some(
        items
            .chunks_exact(2)
            .filter_map(|p| match p {
                [name, value] => Some((name.to_string(), value.to_string())),
                _ => None,
            })
            .collect(),
    )
}

impl Plan<'_> {
    /// The plan's log line and data point, if it has them.
    fn log(&self) -> Option<&LogPlan> {
        match self {
            Plan::Forward(f) => Some(&f.log),
            Plan::Answer { log, .. } => log.as_ref(),
        }
    }

    /// The plan as the entry reads it (the module's format): [`head`]'s
    /// fields, then [`forward`]'s and the headers to set, or
    /// [`answer`]'s.
    pub fn encode(&self) -> String {
        // A forward plan with its log line is 600–900 bytes: one allocation.
        let mut out = String::with_capacity(1024);
        head::write(&mut out, self);
        out.push_ascii(FIELD);
        match self {
            Plan::Answer { answer: a, .. } => answer::write(&mut out, a),
            Plan::Forward(f) => {
                forward::write(&mut out, f);
                for (name, value) in &f.set {
                    out.push_ascii(FIELD);
                    out.push_str(name);
                    out.push_ascii(FIELD);
                    out.push_str(value);
                }
            }
        }
        out
    }

    /// Reads [`Plan::encode`]'s format back (tests and tools).
    pub fn decode(text: &str) -> Option<Plan<'static>> {
        let f: Vec<&str> = text.split(FIELD).collect();
        let at = |i: usize| f.get(i).copied();
        let log = parse_log(&f)?;
        match at(head::KIND)? {
            KIND_ANSWER if f.len() == answer::END => Some(Plan::Answer {
                answer: parse_answer(at(answer::ANSWER)?)?,
                log,
            }),
            KIND_FORWARD => {
                let set = f.get(SET_FROM..)?;
                if !set.len().is_multiple_of(2) {
                    return None;
                }
                let drop = at(forward::DROP)?;
                let sign_input = at(forward::SIGN_INPUT)?;
                let sign_failure = at(forward::SIGN_FAILURE)?;
                let report = at(forward::REPORT)?;
                Some(Plan::Forward(Box::new(Forward {
                    url: at(forward::URL)?.to_string(),
                    drop: if drop.is_empty() {
                        Vec::new()
                    } else {
                        drop.split(ITEM).map(str::to_string).collect()
                    },
                    set: set
                        .chunks_exact(2)
                        .filter_map(|p| match p {
                            [name, value] => {
                                Some((Cow::Owned(name.to_string()), Cow::Owned(value.to_string())))
                            }
                            _ => None,
                        })
                        .collect(),
                    signing: if sign_input.is_empty() {
                        None
                    } else {
                        Some(Signing {
                            input: sign_input.to_string(),
                            header: at(forward::SIGN_HEADER)?.to_string(),
                            on_failure: if sign_failure.is_empty() {
                                None
                            } else {
                                Some(parse_failure(sign_failure)?)
                            },
                        })
                    },
                    upstream_failure_log: Cow::Owned(
                        at(forward::UPSTREAM_FAILURE_LOG)?.to_string(),
                    ),
                    log: log?,
                    not_found_deadline_ms: at(forward::DEADLINE)?.parse().ok()?,
                    report: if report.is_empty() {
                        None
                    } else {
                        Some(Report {
                            headers_timeout_ms: at(forward::HEADERS_TIMEOUT)?.parse().ok()?,
                            ..Report::decode(
                                at(forward::CIRCUIT)?.parse().ok()?,
                                report.parse().ok()?,
                            )?
                        })
                    },
                    body: match at(forward::BODY)? {
                        "1" => true,
                        "0" => false,
                        _ => return None,
                    },
                    response_set: parse_pairs(
                        &at(forward::RESPONSE_SET)?.split(ITEM).collect::<Vec<_>>(),
                    )?
                    .into_iter()
                    .map(|(name, value)| (Cow::Owned(name), Cow::Owned(value)))
                    .collect(),
                })))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forward(signing: Option<Signing>, drop: Vec<String>) -> Plan<'static> {
        forward_reporting(signing, drop, None)
    }

    fn forward_reporting(
        signing: Option<Signing>,
        drop: Vec<String>,
        report: Option<Report>,
    ) -> Plan<'static> {
        Plan::Forward(Box::new(Forward {
            url: "http://127.0.0.1:9102/a?b=c".into(),
            drop,
            set: vec![
                ("x-forwarded-host".into(), "gitlab.com".into()),
                (
                    "x-gitlab-http-router-rule-type".into(),
                    "SESSION_PREFIX".into(),
                ),
            ],
            signing,
            upstream_failure_log: r#","error":"upstream fetch failed: "#.into(),
            log: LogPlan {
                head: r#"{"ruleset":"cells","#.into(),
                tail: "}".into(),
                min_status: 500,
                point: crate::metrics::point(
                    &crate::metrics::isolate_items("staging", Some("v")),
                    &crate::log::RequestLog {
                        action: crate::log::RequestAction::Proxy,
                        chosen_by: Some(crate::log::ChosenBy::Legacy),
                        ..Default::default()
                    },
                ),
            },
            not_found_deadline_ms: 0,
            report,
            body: true,
            response_set: Vec::new(),
        }))
    }

    #[test]
    fn every_plan_survives_the_boundary() {
        let signing = |on_failure| Signing {
            input: "eyJhbGciOiJFZERTQSJ9.eyJhdWQiOiJ4In0".into(),
            header: "x-gitlab-http-router-signature".into(),
            on_failure,
        };
        let refused = Failure {
            answer: Answer::text(503, "gitlab-http-router: request signing unavailable\n"),
            log_error_open: r#","error":"stale; request signing failed: "#.into(),
        };
        let mut delayed = forward(None, vec![]);
        if let Plan::Forward(f) = &mut delayed {
            f.not_found_deadline_ms = 173;
            f.body = false;
        }
        let plans = [
            delayed,
            forward(None, vec![]),
            forward(None, vec!["connection".into(), "x-secret".into()]),
            forward(Some(signing(None)), vec![]),
            forward(Some(signing(Some(refused))), vec!["upgrade".into()]),
            forward_reporting(
                None,
                vec![],
                Some(Report {
                    circuit: 3,
                    trial: false,
                    long_lived: true,
                    counts_failures: true,
                    gateway_statuses: false,
                    headers_timeout_ms: 0,
                }),
            ),
            forward_reporting(
                None,
                vec![],
                Some(Report {
                    circuit: 0,
                    trial: true,
                    long_lived: false,
                    counts_failures: false,
                    gateway_statuses: true,
                    headers_timeout_ms: 60_000,
                }),
            ),
            forward_reporting(
                None,
                vec![],
                Some(Report {
                    circuit: 7,
                    trial: false,
                    long_lived: false,
                    counts_failures: true,
                    gateway_statuses: true,
                    headers_timeout_ms: 1,
                }),
            ),
            Plan::Answer {
                answer: Answer::text(400, "NAME_INVALID\n"),
                log: Some(LogPlan {
                    head: r#"{"rule":"r","#.into(),
                    tail: r#","error":"x"}"#.into(),
                    min_status: 0,
                    point: String::new(),
                }),
            },
            Plan::Answer {
                answer: Answer {
                    status: 503,
                    headers: vec![],
                    body: String::new(),
                },
                log: None,
            },
        ];
        let mut nothing_set = forward(None, vec![]);
        if let Plan::Forward(f) = &mut nothing_set {
            f.set.clear();
        }
        let mut route_named = forward(None, vec![]);
        if let Plan::Forward(f) = &mut route_named {
            f.response_set = vec![
                ("x-gitlab-http-router-route-rule".into(), "session".into()),
                ("x-gitlab-http-router-route-cell".into(), "".into()),
            ];
        }
        for plan in plans.into_iter().chain([nothing_set, route_named]) {
            let encoded = plan.encode();
            assert_eq!(Plan::decode(&encoded).as_ref(), Some(&plan), "{encoded:?}");
        }
    }

    /// The entry reads a plan by the layout's positions: what they find
    /// in an encoded plan is what the plan holds.
    #[test]
    fn the_layouts_positions_read_the_plan() {
        let layout: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&layout()).expect("the layout is a JSON object");
        let at = |name: &str| {
            layout
                .get(name)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or_else(|| panic!("{name} is no position")) as usize
        };
        let report = Report {
            circuit: 2,
            trial: false,
            long_lived: false,
            counts_failures: true,
            gateway_statuses: true,
            headers_timeout_ms: 60_000,
        };
        let mut reporting = forward_reporting(None, vec![], Some(report));
        if let Plan::Forward(f) = &mut reporting {
            f.not_found_deadline_ms = 250;
        }
        let encoded = reporting.encode();
        let fields: Vec<&str> = encoded.split(FIELD).collect();
        let point = at("POINT");
        let read = |names: &[&str]| names.iter().map(|n| fields[at(n)]).collect::<Vec<_>>();
        assert_eq!(
            read(&[
                "KIND",
                "URL",
                "LOG_MIN_STATUS",
                "DEADLINE",
                "CIRCUIT",
                "HEADERS_TIMEOUT",
                "BODY"
            ]),
            [
                "F",
                "http://127.0.0.1:9102/a?b=c",
                "500",
                "250",
                "2",
                "60000",
                "1"
            ]
        );
        assert_eq!(
            fields[at("REPORT")].parse::<u64>().ok(),
            Some(at("REPORT_GATEWAY") as u64 | u64::from(flag::COUNTS_FAILURES))
        );
        assert_eq!(
            [
                fields[point + at("POINT_ACTION")],
                fields[point + at("POINT_CHOSEN_BY")],
                fields[point + at("POINT_FELL_THROUGH")]
            ],
            ["proxy", "legacy", "0"]
        );
        assert_eq!(
            fields[point + at("POINT_DOUBLES_FROM")..point + at("POINT_FIELDS")],
            ["0", "0", "0"]
        );
        assert_eq!(
            fields[at("SET_FROM")..],
            [
                "x-forwarded-host",
                "gitlab.com",
                "x-gitlab-http-router-rule-type",
                "SESSION_PREFIX"
            ]
        );
        let answer = Plan::Answer {
            answer: Answer::text(503, "x"),
            log: None,
        }
        .encode();
        let fields: Vec<&str> = answer.split(FIELD).collect();
        assert_eq!(fields[at("KIND")], layout["KIND_ANSWER"]);
        assert!(fields[at("ANSWER")].starts_with("503"));
        assert_eq!(fields[at("LOG_HEAD")], "");
    }

    /// Every name entry.js reads from the layout is in it.
    #[test]
    fn the_entrys_names_are_in_the_layout() {
        let layout: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&layout()).expect("the layout is a JSON object");
        let entry =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../src/entry.js"))
                .expect("src/entry.js");
        let mut read: Vec<&str> = Vec::new();
        for (at, _) in entry.match_indices("W.") {
            let name = &entry[at + 2..];
            let end = name
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(name.len());
            read.push(&name[..end]);
        }
        for destructured in entry.split("const {").skip(1) {
            let Some((names, rest)) = destructured.split_once('}') else {
                continue;
            };
            if !rest.trim_start().starts_with("= W;") {
                continue;
            }
            for name in names.split(',') {
                // `URL: TARGET_URL` reads URL.
                read.push(name.split(':').next().unwrap_or_default().trim());
            }
        }
        assert!(read.len() > 20, "found {read:?}");
        let missing: Vec<&&str> = read.iter().filter(|n| !layout.contains_key(**n)).collect();
        assert!(
            missing.is_empty(),
            "entry.js reads {missing:?}, which the layout lacks"
        );
    }

    #[test]
    fn the_upstream_failure_answer_is_the_routers_502() {
        let answer = parse_answer(&encoded_upstream_failure_answer()).unwrap();
        assert_eq!(answer.status, 502);
        assert_eq!(answer.body, "gitlab-http-router: upstream unreachable\n");
    }

    #[test]
    fn garbage_is_no_plan() {
        for text in ["", "F", "X\0a", "A\0nope\0\0\0", "F\0a\0b"] {
            assert_eq!(Plan::decode(text), None, "{text:?}");
        }
        for flags in [16, 17, u32::MAX] {
            assert_eq!(Report::decode(1, flags), None, "{flags}");
        }
        let odd = format!("{}{FIELD}x-lone-name", forward(None, vec![]).encode());
        assert_eq!(Plan::decode(&odd), None);
    }
}
