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
//! [`Plan::encode`] is the only writer of the boundary format and
//! [`Plan::decode`] reads it back (round-trip tested): fields joined by NUL,
//! lists and pairs inside a field joined by `\x01`, each field at its
//! position in [`field`]. Neither byte can come from a client value the plan
//! carries (forward's checks), so nothing needs escaping. The entry learns
//! every position, code and name it reads from [`LAYOUT`], once per
//! instance: entry.js holds none of its own.

use crate::json::PushAscii;
use std::borrow::Cow;

use crate::error::RouterError;

/// Separates a plan's fields.
pub const FIELD: char = '\u{0}';
/// Separates the items of a list or pair inside a field.
pub const ITEM: char = '\u{1}';

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

/// Where each field of a plan sits.
pub mod field {
    /// Every plan: its kind.
    pub const KIND: usize = 0;

    // A forward plan (`F`).
    pub const URL: usize = 1;
    /// Client headers to drop besides the usual ones (empty: the usual).
    pub const DROP: usize = 2;
    pub const SIGN_INPUT: usize = 3;
    pub const SIGN_HEADER: usize = 4;
    pub const SIGN_FAILURE: usize = 5;
    pub const UPSTREAM_FAILURE_LOG: usize = 6;
    pub const LOG_HEAD: usize = 7;
    pub const LOG_TAIL: usize = 8;
    pub const LOG_MIN_STATUS: usize = 9;
    /// The first of the metrics data point's [`POINT_FIELDS`] items
    /// (`crate::metrics::item`; all empty: no point).
    pub const POINT: usize = 10;
    /// `crate::metrics::item::COUNT` (held to it by a test: the format
    /// names no phase's module).
    pub const POINT_FIELDS: usize = 13;
    /// The status held to the deadline (0: none held).
    pub const HELD_STATUS: usize = POINT + POINT_FIELDS;
    pub const DEADLINE: usize = HELD_STATUS + 1;
    /// The report's flags (empty: nothing reported).
    pub const REPORT: usize = DEADLINE + 1;
    pub const CIRCUIT: usize = REPORT + 1;
    pub const REPORT_FROM: usize = CIRCUIT + 1;
    pub const REPORT_TO: usize = REPORT_FROM + 1;
    pub const HEADERS_TIMEOUT: usize = REPORT_TO + 1;
    pub const BODY: usize = HEADERS_TIMEOUT + 1;
    /// The headers to set follow, a field each for a name and its value.
    pub const SET_FROM: usize = BODY + 1;

    // An answer plan (`A`).
    pub const ANSWER: usize = 1;
    pub const ANSWER_LOG_HEAD: usize = 2;
    pub const ANSWER_LOG_TAIL: usize = 3;
    pub const ANSWER_LOG_MIN_STATUS: usize = 4;
    /// The first of the answer's data point items, the plan's last fields.
    pub const ANSWER_POINT: usize = 5;
}

/// A forward plan's fields before the headers it sets.
pub const FORWARD_FIXED_FIELDS: usize = field::SET_FROM;

/// Every position, code and name the entry reads plans and writes its
/// input with, by the name entry.js uses for it, as one JSON object the
/// entry parses once (a literal: one string in the wasm instead of code
/// that builds an object; held to the constants above by a test).
pub const LAYOUT: &str = r#"{"FIELD":"\u0000","ITEM":"\u0001","SEPARATOR":"\u0000","HEADER_ABSENT":"\u0001","PLAN_TOO_LONG":-2,"KIND_ANSWER":"A","FETCH_FAILED":0,"NO_HEADERS":1,"RETRY_AFTER":"retry-after","KINDS_MAX":256,"URL":1,"DROP":2,"SIGN_INPUT":3,"SIGN_HEADER":4,"SIGN_FAILURE":5,"UPSTREAM_FAILURE_LOG":6,"LOG_HEAD":7,"LOG_TAIL":8,"LOG_MIN_STATUS":9,"POINT":10,"HELD_STATUS":23,"DEADLINE":24,"REPORT":25,"CIRCUIT":26,"REPORT_FROM":27,"REPORT_TO":28,"HEADERS_TIMEOUT":29,"BODY":30,"SET_FROM":31,"ANSWER":1,"ANSWER_LOG_HEAD":2,"ANSWER_LOG_TAIL":3,"ANSWER_LOG_MIN_STATUS":4,"ANSWER_POINT":5,"POINT_BINDING":"ROUTER_METRICS","POINT_FIELDS":13,"POINT_ACTION":3,"POINT_CELL":7,"POINT_STATUS_CLASS":8,"POINT_ERROR_KIND":9,"POINT_BLOBS":10,"POINT_DOUBLES_FROM":10,"SIGNING_FAILED_KIND":"signing_failed","UPSTREAM_FAILED_KIND":"upstream_unreachable"}"#;

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
/// response headers that did not come within `headers_timeout_ms`, and a
/// status in `report_statuses`. For any other response it only writes the
/// time into the circuit's answered slot (no call into wasm).
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
    /// The statuses the entry reports (inclusive; `(0, 0)`: none): every
    /// one for a trial, 502 to 504 for a rule that counts them.
    pub fn report_statuses(&self) -> (u16, u16) {
        if self.trial {
            (100, 599)
        } else if self.gateway_statuses {
            (502, 504)
        } else {
            (0, 0)
        }
    }

    /// The flags the entry hands back with an outcome: `t|f` (trial),
    /// `l|s` (long-lived or short), `c|n` (failures count or not), `g|-`
    /// (gateway statuses).
    pub fn encode_flags(&self) -> String {
        [
            if self.trial { 't' } else { 'f' },
            if self.long_lived { 'l' } else { 's' },
            if self.counts_failures { 'c' } else { 'n' },
            if self.gateway_statuses { 'g' } else { '-' },
        ]
        .iter()
        .collect()
    }

    /// The report the entry hands back: the circuit and
    /// [`Report::encode_flags`]' text (the timeout is not needed again).
    pub fn decode(circuit: usize, flags: &str) -> Option<Report> {
        let flag = |i: usize, yes: u8, no: u8| match flags.as_bytes().get(i) {
            Some(&b) if b == yes => Some(true),
            Some(&b) if b == no => Some(false),
            _ => None,
        };
        (flags.len() == 4).then_some(())?;
        Some(Report {
            circuit,
            trial: flag(0, b't', b'f')?,
            long_lived: flag(1, b'l', b's')?,
            counts_failures: flag(2, b'c', b'n')?,
            gateway_statuses: flag(3, b'g', b'-')?,
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
    crate::json::push_u64(out, u64::from(status));
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

fn push_log(out: &mut String, log: Option<&LogPlan>) {
    if let Some(log) = log {
        out.push_str(&log.head);
        out.push_ascii(FIELD);
        out.push_str(&log.tail);
        out.push_ascii(FIELD);
        push_status(out, log.min_status);
        out.push_ascii(FIELD);
        push_point(out, &log.point);
    } else {
        out.push_ascii(FIELD);
        out.push_ascii(FIELD);
        out.push_ascii(FIELD);
        push_point(out, "");
    }
}

/// A data point's fields: its items, or as many empty fields.
fn push_point(out: &mut String, point: &str) {
    if point.is_empty() {
        for _ in 1..field::POINT_FIELDS {
            out.push_ascii(FIELD);
        }
    } else {
        out.push_str(point);
    }
}

/// The log plan from its fields (`point`: the data point's).
fn parse_log(head: &str, tail: &str, min_status: &str, point: &[&str]) -> Option<Option<LogPlan>> {
    if point.len() != field::POINT_FIELDS {
        return None;
    }
    let point = if point.iter().all(|item| item.is_empty()) {
        String::new()
    } else {
        point.join(&FIELD.to_string())
    };
    if head.is_empty() {
        return point.is_empty().then_some(None);
    }
    Some(Some(LogPlan {
        head: head.to_string(),
        tail: tail.to_string(),
        point,
        min_status: min_status.parse().ok()?,
    }))
}

fn push_pairs<N: AsRef<str>>(out: &mut String, pairs: &[(N, String)]) {
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push_ascii(ITEM);
        }
        out.push_str(name.as_ref());
        out.push_ascii(ITEM);
        out.push_str(value);
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
    /// The plan as the entry reads it, fields joined by [`FIELD`]:
    ///
    /// * forward: `F, url, drop (names by ITEM; empty: the usual set), sign
    ///   input (empty: unsigned), sign header, sign failure (a failure;
    ///   empty: forward unsigned), upstream failure's log error opening (its
    ///   answer is [`encoded_upstream_failure_answer`]), log head, log tail,
    ///   log min status, the data point's [`field::POINT_FIELDS`] items (all
    ///   empty: none), held status, 404 deadline in ms (0: none), report
    ///   (empty: none; [`Report::encode`]), body`, then the headers to set, a field each for a
    ///   name and its value (`name, value, name, value, …`): the entry
    ///   splits the plan once and reads them from the first field after
    ///   `body` ([`FORWARD_FIXED_FIELDS`]).
    /// * answer: `A, answer, log head (empty: no line), log tail, log min
    ///   status, the data point's items`
    ///
    /// An answer is `status ITEM name ITEM value … ITEM body`; a failure is
    /// `log error opening ITEM answer`.
    pub fn encode(&self) -> String {
        // A forward plan with its log line is 600–900 bytes: one allocation.
        let mut out = String::with_capacity(1024);
        match self {
            Plan::Answer { answer, log } => {
                out.push_str(KIND_ANSWER);
                out.push_ascii(FIELD);
                push_answer(&mut out, answer);
                out.push_ascii(FIELD);
                push_log(&mut out, log.as_ref());
            }
            Plan::Forward(f) => {
                out.push_str(KIND_FORWARD);
                out.push_ascii(FIELD);
                out.push_str(&f.url);
                out.push_ascii(FIELD);
                for (i, name) in f.drop.iter().enumerate() {
                    if i > 0 {
                        out.push_ascii(ITEM);
                    }
                    out.push_str(name);
                }
                out.push_ascii(FIELD);
                if let Some(s) = &f.signing {
                    out.push_str(&s.input);
                    out.push_ascii(FIELD);
                    out.push_str(&s.header);
                    out.push_ascii(FIELD);
                    if let Some(f) = &s.on_failure {
                        push_failure(&mut out, f);
                    }
                } else {
                    out.push_ascii(FIELD);
                    out.push_ascii(FIELD);
                }
                out.push_ascii(FIELD);
                out.push_str(&f.upstream_failure_log);
                out.push_ascii(FIELD);
                push_log(&mut out, Some(&f.log));
                out.push_ascii(FIELD);
                let held = if f.not_found_deadline_ms > 0 {
                    HELD_STATUS
                } else {
                    0
                };
                push_status(&mut out, held);
                out.push_ascii(FIELD);
                crate::json::push_u64(&mut out, u64::from(f.not_found_deadline_ms));
                out.push_ascii(FIELD);
                match &f.report {
                    Some(report) => {
                        let (from, to) = report.report_statuses();
                        out.push_str(&report.encode_flags());
                        out.push_ascii(FIELD);
                        crate::json::push_u64(&mut out, report.circuit as u64);
                        out.push_ascii(FIELD);
                        push_status(&mut out, from);
                        out.push_ascii(FIELD);
                        push_status(&mut out, to);
                        out.push_ascii(FIELD);
                        crate::json::push_u64(&mut out, u64::from(report.headers_timeout_ms));
                    }
                    None => out.push_str("\u{0}\u{0}0\u{0}0\u{0}0"),
                }
                out.push_ascii(FIELD);
                out.push(if f.body { '1' } else { '0' });
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
        let mut f: Vec<&str> = text.split(FIELD).collect();
        // The data point's fields, taken out: the rest reads by position.
        let at = match f.first() {
            Some(&KIND_ANSWER) => field::ANSWER_POINT,
            _ => field::POINT,
        };
        if f.len() < at + field::POINT_FIELDS {
            return None;
        }
        let point: Vec<&str> = f.drain(at..at + field::POINT_FIELDS).collect();
        let point = point.as_slice();
        match f.as_slice() {
            ["A", answer, head, tail, min_status] => Some(Plan::Answer {
                answer: parse_answer(answer)?,
                log: parse_log(head, tail, min_status, point)?,
            }),
            ["F", url, drop, sign_input, sign_header, sign_failure, upstream_failure, head, tail, min_status, held, deadline, flags, circuit, from, to, timeout, body, set @ ..]
                if set.len().is_multiple_of(2)
                    && *held == if *deadline == "0" { "0" } else { "404" } =>
            {
                Some(Plan::Forward(Box::new(Forward {
                    url: url.to_string(),
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
                            header: sign_header.to_string(),
                            on_failure: if sign_failure.is_empty() {
                                None
                            } else {
                                Some(parse_failure(sign_failure)?)
                            },
                        })
                    },
                    upstream_failure_log: Cow::Owned(upstream_failure.to_string()),
                    log: parse_log(head, tail, min_status, point)??,
                    not_found_deadline_ms: deadline.parse().ok()?,
                    report: if flags.is_empty() {
                        None
                    } else {
                        let report = Report {
                            headers_timeout_ms: timeout.parse().ok()?,
                            ..Report::decode(circuit.parse().ok()?, flags)?
                        };
                        let statuses = (from.parse().ok()?, to.parse().ok()?);
                        if report.report_statuses() != statuses {
                            return None;
                        }
                        Some(report)
                    },
                    body: match *body {
                        "1" => true,
                        "0" => false,
                        _ => return None,
                    },
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
        for plan in plans.into_iter().chain([nothing_set]) {
            let encoded = plan.encode();
            assert_eq!(Plan::decode(&encoded).as_ref(), Some(&plan), "{encoded:?}");
        }
    }

    /// The entry reads every field at its `field` position, the headers to
    /// set from `SET_FROM` on, in pairs.
    #[test]
    fn headers_to_set_follow_the_fixed_fields() {
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
        assert_eq!(fields[field::KIND], KIND_FORWARD);
        assert_eq!(fields[field::URL], "http://127.0.0.1:9102/a?b=c");
        assert_eq!(fields[field::LOG_MIN_STATUS], "500");
        assert_eq!(
            fields[field::POINT..field::POINT + field::POINT_FIELDS],
            ["staging", "v", "", "proxy", "", "legacy", "", "", "", "", "0", "0", "0"]
        );
        assert_eq!(
            [fields[field::HELD_STATUS], fields[field::DEADLINE]],
            ["404", "250"]
        );
        assert_eq!(
            [
                fields[field::REPORT],
                fields[field::CIRCUIT],
                fields[field::REPORT_FROM],
                fields[field::REPORT_TO],
                fields[field::HEADERS_TIMEOUT],
                fields[field::BODY]
            ],
            ["fscg", "2", "502", "504", "60000", "1"]
        );
        let none = forward_reporting(None, vec![], None).encode();
        let fields: Vec<&str> = none.split(FIELD).collect();
        assert_eq!(
            &fields[field::HELD_STATUS..FORWARD_FIXED_FIELDS],
            ["0", "0", "", "", "0", "0", "0", "1"]
        );
        assert_eq!(
            &fields[FORWARD_FIXED_FIELDS..],
            [
                "x-forwarded-host",
                "gitlab.com",
                "x-gitlab-http-router-rule-type",
                "SESSION_PREFIX"
            ]
        );
        let odd = format!("{encoded}{FIELD}x-lone-name");
        assert_eq!(Plan::decode(&odd), None);
        let answer = Plan::Answer {
            answer: Answer::text(503, "x"),
            log: None,
        }
        .encode();
        let fields: Vec<&str> = answer.split(FIELD).collect();
        assert_eq!(fields[field::KIND], KIND_ANSWER);
        assert!(fields[field::ANSWER].starts_with("503"));
        assert_eq!(fields.len(), field::ANSWER_POINT + field::POINT_FIELDS);
        assert!(fields[field::ANSWER_POINT..].iter().all(|f| f.is_empty()));
    }

    /// What the entry is told is what the plan is written with.
    #[test]
    fn the_layout_is_the_constants() {
        let layout: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(LAYOUT).expect("the layout is a JSON object");
        let want: &[(&str, serde_json::Value)] = &[
            ("FIELD", FIELD.to_string().into()),
            ("ITEM", ITEM.to_string().into()),
            ("SEPARATOR", SEPARATOR.to_string().into()),
            ("HEADER_ABSENT", HEADER_ABSENT.into()),
            ("PLAN_TOO_LONG", PLAN_TOO_LONG.into()),
            ("KIND_ANSWER", KIND_ANSWER.into()),
            ("FETCH_FAILED", FETCH_FAILED.into()),
            ("NO_HEADERS", NO_HEADERS.into()),
            ("RETRY_AFTER", RETRY_AFTER_HEADER.into()),
            ("KINDS_MAX", HEADER_KINDS_REMEMBERED.into()),
            ("URL", field::URL.into()),
            ("DROP", field::DROP.into()),
            ("SIGN_INPUT", field::SIGN_INPUT.into()),
            ("SIGN_HEADER", field::SIGN_HEADER.into()),
            ("SIGN_FAILURE", field::SIGN_FAILURE.into()),
            ("UPSTREAM_FAILURE_LOG", field::UPSTREAM_FAILURE_LOG.into()),
            ("LOG_HEAD", field::LOG_HEAD.into()),
            ("LOG_TAIL", field::LOG_TAIL.into()),
            ("LOG_MIN_STATUS", field::LOG_MIN_STATUS.into()),
            ("HELD_STATUS", field::HELD_STATUS.into()),
            ("DEADLINE", field::DEADLINE.into()),
            ("REPORT", field::REPORT.into()),
            ("CIRCUIT", field::CIRCUIT.into()),
            ("REPORT_FROM", field::REPORT_FROM.into()),
            ("REPORT_TO", field::REPORT_TO.into()),
            ("HEADERS_TIMEOUT", field::HEADERS_TIMEOUT.into()),
            ("BODY", field::BODY.into()),
            ("SET_FROM", field::SET_FROM.into()),
            ("ANSWER", field::ANSWER.into()),
            ("ANSWER_LOG_HEAD", field::ANSWER_LOG_HEAD.into()),
            ("ANSWER_LOG_TAIL", field::ANSWER_LOG_TAIL.into()),
            ("ANSWER_LOG_MIN_STATUS", field::ANSWER_LOG_MIN_STATUS.into()),
            ("POINT", field::POINT.into()),
            ("ANSWER_POINT", field::ANSWER_POINT.into()),
            ("POINT_BINDING", crate::metrics::BINDING.into()),
            ("POINT_FIELDS", crate::metrics::item::COUNT.into()),
            ("POINT_ACTION", crate::metrics::item::ACTION.into()),
            ("POINT_CELL", crate::metrics::item::CELL.into()),
            (
                "POINT_STATUS_CLASS",
                crate::metrics::item::STATUS_CLASS.into(),
            ),
            ("POINT_ERROR_KIND", crate::metrics::item::ERROR_KIND.into()),
            ("POINT_BLOBS", crate::metrics::item::BLOBS.into()),
            (
                "POINT_DOUBLES_FROM",
                crate::metrics::item::DOUBLES_FROM.into(),
            ),
            (
                "SIGNING_FAILED_KIND",
                RouterError::SigningFailed(String::new()).kind().into(),
            ),
            (
                "UPSTREAM_FAILED_KIND",
                RouterError::UpstreamUnreachable(String::new())
                    .kind()
                    .into(),
            ),
        ];
        for (name, value) in want {
            assert_eq!(layout.get(*name), Some(value), "{name}");
        }
        assert_eq!(
            layout.len(),
            want.len(),
            "a layout entry without its constant"
        );
        assert_eq!(FORWARD_FIXED_FIELDS, field::SET_FROM);
        assert_eq!(field::POINT_FIELDS, crate::metrics::item::COUNT);
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
        for text in ["", "fsc", "fsc-x", "xsc-", "f\u{1}c-", "FSC-"] {
            assert_eq!(Report::decode(1, text), None, "{text:?}");
        }
    }
}
