//! The plan for one request: everything Rust decided, for the JS entry
//! (`src/entry.js`) to apply without deciding anything itself. A plan
//! either forwards the request (URL, headers to drop and to set, what to
//! sign, what a signing or upstream failure answers, how to write the log
//! line once the status is known) or answers it from the router.
//!
//! [`Plan::encode`] is the only writer of the boundary format and
//! [`Plan::decode`] reads it back (round-trip tested): fields joined by NUL,
//! lists and pairs inside a field joined by `\x01`. Neither byte can occur
//! in a URL, an HTTP field value or a JSON text, so nothing needs escaping.

use std::borrow::Cow;

use crate::error::RouterError;

/// Separates a plan's fields.
pub const FIELD: char = '\u{0}';
/// Separates the items of a list or pair inside a field.
pub const ITEM: char = '\u{1}';
/// A forward plan's fields before the headers it sets (`F` to the report):
/// the entry's `SET_FROM`.
pub const FORWARD_FIXED_FIELDS: usize = 12;

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
/// listed cell: a failed fetch or a 502, 503 or 504 always, any outcome
/// when `always` (the circuit's trial request). Nothing is reported for a
/// success otherwise, so the usual path makes no extra call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// The cell's position in `GITLAB_CELLS`.
    pub cell: usize,
    pub always: bool,
    /// A WebSocket or long poll ([`crate::cells::is_long_lived`]).
    pub long_lived: bool,
}

impl Report {
    /// `a|f ITEM cell ITEM 1|0`: the entry reads only the first letter.
    pub fn encode(&self) -> String {
        format!(
            "{}{ITEM}{}{ITEM}{}",
            if self.always { 'a' } else { 'f' },
            self.cell,
            u8::from(self.long_lived)
        )
    }

    pub fn decode(text: &str) -> Option<Report> {
        let mut items = text.split(ITEM);
        let always = match items.next()? {
            "a" => true,
            "f" => false,
            _ => return None,
        };
        let cell = items.next()?.parse().ok()?;
        let long_lived = match items.next()? {
            "1" => true,
            "0" => false,
            _ => return None,
        };
        items.next().is_none().then_some(Report {
            cell,
            always,
            long_lived,
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
    /// Milliseconds the entry waits before returning a 404 from the
    /// upstream (`GITLAB_NOT_FOUND_DELAY_MS`, drawn by Rust); 0: none. The
    /// entry waits on a timer and returns the upstream response as it is:
    /// no body is read or buffered.
    pub not_found_delay_ms: u32,
    /// `None`: the upstream is no listed cell, nothing is reported.
    pub report: Option<Report>,
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
    crate::log::push_u64(out, u64::from(status));
}

fn push_answer(out: &mut String, a: &Answer) {
    push_status(out, a.status);
    out.push(ITEM);
    push_pairs(out, &a.headers);
    out.push(ITEM);
    out.push_str(&a.body);
}

fn push_failure(out: &mut String, f: &Failure) {
    out.push_str(&f.log_error_open);
    out.push(ITEM);
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
        out.push(FIELD);
        out.push_str(&log.tail);
        out.push(FIELD);
        push_status(out, log.min_status);
    } else {
        out.push(FIELD);
        out.push(FIELD);
    }
}

fn parse_log(head: &str, tail: &str, min_status: &str) -> Option<Option<LogPlan>> {
    if head.is_empty() {
        return Some(None);
    }
    Some(Some(LogPlan {
        head: head.to_string(),
        tail: tail.to_string(),
        min_status: min_status.parse().ok()?,
    }))
}

fn push_pairs<N: AsRef<str>>(out: &mut String, pairs: &[(N, String)]) {
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(ITEM);
        }
        out.push_str(name.as_ref());
        out.push(ITEM);
        out.push_str(value);
    }
}

/// An answer as `status ITEM headers... ITEM body`: the headers are the
/// items between the first and the last.
fn parse_answer(field: &str) -> Option<Answer> {
    let items: Vec<&str> = field.split(ITEM).collect();
    if items.len() < 3 {
        return None;
    }
    let status = items[0].parse().ok()?;
    let body = items[items.len() - 1].to_string();
    let headers = parse_pairs(&items[1..items.len() - 1])?;
    Some(Answer {
        status,
        headers,
        body,
    })
}

fn parse_pairs(items: &[&str]) -> Option<Vec<(String, String)>> {
    if items.len() == 1 && items[0].is_empty() {
        return Some(Vec::new());
    }
    if !items.len().is_multiple_of(2) {
        return None;
    }
    Some(
        items
            .chunks(2)
            .map(|p| (p[0].to_string(), p[1].to_string()))
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
    ///   log min status, 404 delay in ms (0: none), report (empty: none;
    ///   [`Report::encode`])`, then the headers to set, a field each for a
    ///   name and its value (`name, value, name, value, …`): the entry
    ///   splits the plan once and reads them from the first field after the
    ///   report ([`FORWARD_FIXED_FIELDS`]).
    /// * answer: `A, answer, log head (empty: no line), log tail, log min
    ///   status`
    ///
    /// An answer is `status ITEM name ITEM value … ITEM body`; a failure is
    /// `log error opening ITEM answer`.
    pub fn encode(&self) -> String {
        // A forward plan with its log line is 600–900 bytes: one allocation.
        let mut out = String::with_capacity(1024);
        match self {
            Plan::Answer { answer, log } => {
                out.push('A');
                out.push(FIELD);
                push_answer(&mut out, answer);
                out.push(FIELD);
                push_log(&mut out, log.as_ref());
            }
            Plan::Forward(f) => {
                out.push('F');
                out.push(FIELD);
                out.push_str(&f.url);
                out.push(FIELD);
                for (i, name) in f.drop.iter().enumerate() {
                    if i > 0 {
                        out.push(ITEM);
                    }
                    out.push_str(name);
                }
                out.push(FIELD);
                if let Some(s) = &f.signing {
                    out.push_str(&s.input);
                    out.push(FIELD);
                    out.push_str(&s.header);
                    out.push(FIELD);
                    if let Some(f) = &s.on_failure {
                        push_failure(&mut out, f);
                    }
                } else {
                    out.push(FIELD);
                    out.push(FIELD);
                }
                out.push(FIELD);
                out.push_str(&f.upstream_failure_log);
                out.push(FIELD);
                push_log(&mut out, Some(&f.log));
                out.push(FIELD);
                crate::log::push_u64(&mut out, u64::from(f.not_found_delay_ms));
                out.push(FIELD);
                if let Some(report) = &f.report {
                    out.push_str(&report.encode());
                }
                for (name, value) in &f.set {
                    out.push(FIELD);
                    out.push_str(name);
                    out.push(FIELD);
                    out.push_str(value);
                }
            }
        }
        out
    }

    /// Reads [`Plan::encode`]'s format back (tests and tools).
    pub fn decode(text: &str) -> Option<Plan<'static>> {
        let f: Vec<&str> = text.split(FIELD).collect();
        match f.as_slice() {
            ["A", answer, head, tail, min_status] => Some(Plan::Answer {
                answer: parse_answer(answer)?,
                log: parse_log(head, tail, min_status)?,
            }),
            ["F", url, drop, sign_input, sign_header, sign_failure, upstream_failure, head, tail, min_status, delay, report, set @ ..]
                if set.len().is_multiple_of(2) =>
            {
                Some(Plan::Forward(Box::new(Forward {
                    url: url.to_string(),
                    drop: if drop.is_empty() {
                        Vec::new()
                    } else {
                        drop.split(ITEM).map(str::to_string).collect()
                    },
                    set: set
                        .chunks(2)
                        .map(|p| (Cow::Owned(p[0].to_string()), Cow::Owned(p[1].to_string())))
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
                    log: parse_log(head, tail, min_status)??,
                    not_found_delay_ms: delay.parse().ok()?,
                    report: if report.is_empty() {
                        None
                    } else {
                        Some(Report::decode(report)?)
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
            },
            not_found_delay_ms: 0,
            report,
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
            f.not_found_delay_ms = 173;
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
                    cell: 3,
                    always: false,
                    long_lived: true,
                }),
            ),
            forward_reporting(
                None,
                vec![],
                Some(Report {
                    cell: 0,
                    always: true,
                    long_lived: false,
                }),
            ),
            Plan::Answer {
                answer: Answer::text(400, "NAME_INVALID\n"),
                log: Some(LogPlan {
                    head: r#"{"rule":"r","#.into(),
                    tail: r#","error":"x"}"#.into(),
                    min_status: 0,
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

    /// The entry reads the headers to set from field `SET_FROM` on, in
    /// pairs, and the report just before them.
    #[test]
    fn headers_to_set_follow_the_fixed_fields() {
        let report = Report {
            cell: 2,
            always: false,
            long_lived: false,
        };
        let encoded = forward_reporting(None, vec![], Some(report)).encode();
        let fields: Vec<&str> = encoded.split(FIELD).collect();
        assert_eq!(fields[FORWARD_FIXED_FIELDS - 1], report.encode());
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
        for text in [
            "x\u{1}1\u{1}0",
            "a\u{1}\u{1}0",
            "a\u{1}1\u{1}2",
            "a\u{1}1\u{1}0\u{1}",
        ] {
            assert_eq!(Report::decode(text), None, "{text:?}");
        }
    }
}
