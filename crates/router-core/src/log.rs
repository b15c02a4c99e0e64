//! The log phase: one structured JSON line per request.

use crate::json::PushAscii;
use serde::Serialize;

use crate::json::{push_escaped, push_quoted, push_u64};

mod vocabulary;
pub use vocabulary::{ChosenBy, Mode, RequestAction};

/// Everything worth knowing about how one request was routed.
#[derive(Debug, Default, Serialize)]
pub struct RequestLog<'a> {
    pub ruleset: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub rule: Option<&'a str>,
    pub action: RequestAction,
    /// `passthrough` while the control document says so (every request to
    /// the legacy cell, no rules).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classify_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheLevel>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub coalesced: bool,
    /// Rules whose key the Topology Service did not know and that handed
    /// the request on (`notFound: next-rule`), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fell_through: Vec<&'a str>,
    /// A rule passed over because its classify value was longer than
    /// [`crate::question::MAX_CLASSIFY_VALUE_BYTES`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_too_long: Option<&'a str>,
    pub upstream: Option<String>,
    /// The `GITLAB_CELLS` id of the upstream, when it is a listed cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cell: Option<u64>,
    /// Why the upstream was chosen (or refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chosen_by: Option<ChosenBy>,
    /// The request id (`X-Request-Id`) and `traceparent` the request was
    /// forwarded and its service calls made with ([`crate::trace`]).
    #[serde(skip_serializing_if = "str::is_empty")]
    pub request_id: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub traceparent: &'a str,
    /// The Worker version that answered (version metadata binding).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<&'a str>,
    pub status: Option<u16>,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last error's kind ([`crate::RouterError::kind`] or a name of
    /// its own), for the metrics data point only ([`crate::metrics`]).
    #[serde(skip)]
    pub error_kind: Option<&'static str>,
    /// What the shadow ruleset decided, when the request was evaluated in
    /// the shadow: for the data point only (a disagreement has a line of
    /// its own, [`crate::select::shadow::DisagreementLine`]).
    #[serde(skip)]
    pub shadow: Option<crate::disagreement::Verdict<'a>>,
}

impl RequestLog<'_> {
    /// Whether the outcome needs an operator's attention: an error, an
    /// answer from a stale entry or the fallback, a rejection, or a 5xx.
    pub fn is_notable(&self) -> bool {
        self.is_notable_whatever_the_status() || self.status.is_none_or(|s| s >= 500)
    }

    /// [`RequestLog::is_notable`] for any status below 500: decided before
    /// the upstream answers.
    pub fn is_notable_whatever_the_status(&self) -> bool {
        self.error.is_some()
            || matches!(
                self.cache,
                Some(CacheLevel::Stale | CacheLevel::Fallback | CacheLevel::Static)
            )
            || self.action == RequestAction::Reject
            || self.value_too_long.is_some()
    }

    /// Records an error; every error of a request stays in its line,
    /// joined by "; " in the order they happened.
    pub fn add_error(&mut self, error: impl std::fmt::Display) {
        match &mut self.error {
            Some(errors) => {
                errors.push_str("; ");
                errors.push_str(&error.to_string());
            }
            None => self.error = Some(error.to_string()),
        }
    }

    /// [`RequestLog::add_error`], its kind named in the data point.
    pub fn add_error_of_kind(&mut self, kind: &'static str, error: impl std::fmt::Display) {
        self.error_kind = Some(kind);
        self.add_error(error);
    }

    /// The opening of the `error` field for a failure the entry meets
    /// later (`plan::Failure::log_error_open`): `,"error":"` with the errors
    /// recorded so far and `step` in it, the string left open for the
    /// failure's own message. `error` is the line's last field, so the entry
    /// closes it with `"}`.
    pub fn error_open(&self, step: &str) -> String {
        let mut out = String::with_capacity(12 + step.len());
        out.push_str(r#","error":""#);
        if let Some(errors) = &self.error {
            push_escaped(&mut out, errors);
            out.push_str("; ");
        }
        push_escaped(&mut out, step);
        out
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!(r#"{{"log_error":"{e}"}}"#))
    }

    /// The line cut where `"status":…,"duration_ms":…` go, for whoever
    /// learns them later (the JS entry, once the upstream answered):
    /// `head + "\"status\":200,\"duration_ms\":3" + tail` is the line
    /// [`RequestLog::to_json`] would write with those values.
    ///
    /// Written field by field (the same fields, order, omissions and
    /// escaping as the `Serialize` derive, tested against it) straight into
    /// the two strings: this runs for every request, and going through
    /// serde_json meant a copy of the record, the whole line, a search for
    /// the cut and two more copies.
    pub fn to_json_around_status(&self) -> (String, String) {
        // A forwarded request's head is ~300 bytes besides its path.
        let mut head = String::with_capacity(384 + self.path.len());
        self.push_head(&mut head);
        let mut tail = String::new();
        self.push_tail(&mut tail);
        (head, tail)
    }

    /// `{` and every field before `status`, each followed by `,`.
    fn push_head(&self, out: &mut String) {
        // Every field named: a field added to the struct fails to compile
        // here until it is written (in the derive's order) below.
        let RequestLog {
            ruleset,
            method,
            path,
            rule,
            action,
            mode,
            classify_type,
            cache,
            service_ms,
            attempts,
            coalesced,
            fell_through,
            value_too_long,
            upstream,
            cell,
            chosen_by,
            request_id,
            traceparent,
            version,
            status: _,
            duration_ms: _,
            error: _,
            error_kind: _,
            shadow: _,
        } = self;
        // `key` is the field's `"name":` whole: one copy (a `memory.copy`,
        // which workerd runs as a call) instead of three pushes.
        let string = |out: &mut String, key: &str, value: &str| {
            out.push_str(key);
            push_quoted(out, value);
            out.push_ascii(',');
        };
        let number = |out: &mut String, key: &str, value: u64| {
            out.push_str(key);
            push_u64(out, value);
            out.push_ascii(',');
        };
        string(out, r#"{"ruleset":"#, ruleset);
        string(out, r#""method":"#, method);
        string(out, r#""path":"#, path);
        match rule {
            Some(rule) => string(out, r#""rule":"#, rule),
            None => out.push_str(r#""rule":null,"#),
        }
        string(out, r#""action":"#, action.name());
        if let Some(mode) = mode {
            string(out, r#""mode":"#, mode.name());
        }
        if let Some(kind) = classify_type {
            string(out, r#""classify_type":"#, kind);
        }
        if let Some(level) = cache {
            string(out, r#""cache":"#, level.log_name());
        }
        if let Some(ms) = service_ms {
            number(out, r#""service_ms":"#, *ms);
        }
        if let Some(n) = attempts {
            number(out, r#""attempts":"#, u64::from(*n));
        }
        if *coalesced {
            out.push_str(r#""coalesced":true,"#);
        }
        if !fell_through.is_empty() {
            out.push_str(r#""fell_through":["#);
            for (i, rule) in fell_through.iter().enumerate() {
                if i > 0 {
                    out.push_ascii(',');
                }
                push_quoted(out, rule);
            }
            out.push_str("],");
        }
        if let Some(rule) = value_too_long {
            string(out, r#""value_too_long":"#, rule);
        }
        match upstream {
            Some(upstream) => string(out, r#""upstream":"#, upstream),
            None => out.push_str(r#""upstream":null,"#),
        }
        if let Some(cell) = cell {
            number(out, r#""cell":"#, *cell);
        }
        if let Some(chosen_by) = chosen_by {
            string(out, r#""chosen_by":"#, chosen_by.name());
        }
        if !request_id.is_empty() {
            string(out, r#""request_id":"#, request_id);
        }
        if !traceparent.is_empty() {
            string(out, r#""traceparent":"#, traceparent);
        }
        if let Some(version) = version {
            string(out, r#""version":"#, version);
        }
    }

    /// Every field after `duration_ms`, and the closing `}`.
    fn push_tail(&self, out: &mut String) {
        if let Some(error) = &self.error {
            out.push_str(r#","error":"#);
            push_quoted(out, error);
        }
        out.push_ascii('}');
    }
}

/// Which level answered a classify question (the resolver's answer, as the
/// log line names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheLevel {
    Memory,
    CacheApi,
    Service,
    Stale,
    Fallback,
    /// The Topology Service could not answer and nothing was cached: the
    /// key named a cell of `GITLAB_CELLS` (decided by the edge).
    Static,
}

impl CacheLevel {
    /// The level's name in the log line (as its `Serialize` writes it).
    pub fn log_name(self) -> &'static str {
        match self {
            CacheLevel::Memory => "memory",
            CacheLevel::CacheApi => "cache-api",
            CacheLevel::Service => "service",
            CacheLevel::Stale => "stale",
            CacheLevel::Fallback => "fallback",
            CacheLevel::Static => "static",
        }
    }
}

/// Which requests get a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestLogging {
    /// Every request (the default).
    All,
    /// Only requests whose outcome needs attention: an error, a stale or
    /// fallback answer, a rejection, or an upstream 5xx. A `console.log`
    /// costs workerd ~35 µs of CPU, a third of the router's own cost.
    Errors,
    /// Every notable line (as [`RequestLogging::Errors`]) plus this share,
    /// in millionths, of the routine ones: `sample:0.01` is 10 000.
    Sample { per_million: u32 },
}

impl RequestLogging {
    /// Whether a line is written whatever its status: `notable` (decided
    /// before the upstream answers) or, when sampling, a draw; `random`
    /// (uniform in [0, 1)) is asked only when sampling needs it. A line not
    /// written whatever its status is still written for a 5xx.
    pub fn always(self, notable: bool, random: impl FnOnce() -> f64) -> bool {
        match self {
            RequestLogging::All => true,
            RequestLogging::Errors => notable,
            RequestLogging::Sample { per_million } => {
                notable || random() * 1_000_000.0 < f64::from(per_million)
            }
        }
    }

    /// How the setting reads in a log line (a share in millionths).
    pub fn name(self) -> String {
        match self {
            RequestLogging::All => "all".into(),
            RequestLogging::Errors => "errors".into(),
            RequestLogging::Sample { per_million } => format!("sample ({per_million} per million)"),
        }
    }

    pub(crate) fn parse(value: &str) -> Option<RequestLogging> {
        match value {
            "all" => Some(RequestLogging::All),
            "errors" => Some(RequestLogging::Errors),
            _ => Some(RequestLogging::Sample {
                per_million: per_million(value.strip_prefix("sample:")?.trim())?,
            }),
        }
    }
}

/// A share from 0 to 1 written as a decimal (`0.01`, `1`, `.5`) in
/// millionths, digits past the sixth dropped. Read by hand: float parsing
/// would add kilobytes to the wasm.
pub(crate) fn per_million(share: &str) -> Option<u32> {
    let (whole, fraction) = share.split_once('.').unwrap_or((share, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole: u32 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut millionths = 0;
    for i in 0..6 {
        let digit = fraction
            .as_bytes()
            .get(i)
            .map_or(0, |b| u32::from(b - b'0'));
        millionths = millionths * 10 + digit;
    }
    let total = whole.checked_mul(1_000_000)?.checked_add(millionths)?;
    (total <= 1_000_000).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_line_keeps_the_errors_recorded_before_it() {
        let mut log = RequestLog {
            ruleset: "cells",
            method: "GET",
            path: "/",
            action: RequestAction::Classify,
            cache: Some(CacheLevel::Stale),
            ..Default::default()
        };
        log.add_error("topology service timed out after 300 ms");
        log.add_error("second \"one\"");
        let (head, _) = log.to_json_around_status();
        // What the entry writes when the upstream fetch then fails.
        let line = format!(
            r#"{head}"status":502,"duration_ms":7{}{}"}}"#,
            log.error_open("upstream fetch failed: "),
            "connection refused"
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v["error"],
            "topology service timed out after 300 ms; second \"one\"; upstream fetch failed: connection refused"
        );
        assert_eq!(v["status"], 502);
        assert_eq!(v["cache"], "stale");
    }

    #[test]
    fn one_json_object_with_optional_fields_left_out() {
        let line = RequestLog {
            ruleset: "session_prefix",
            method: "GET",
            path: "/",
            rule: Some("session"),
            action: RequestAction::Classify,
            classify_type: Some("SESSION_PREFIX"),
            cache: Some(CacheLevel::CacheApi),
            upstream: Some("127.0.0.1:9102".into()),
            status: Some(200),
            ..Default::default()
        }
        .to_json();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["cache"], "cache-api");
        assert_eq!(v["rule"], "session");
        assert!(v.get("error").is_none());
        assert!(v.get("coalesced").is_none());
    }

    #[test]
    fn line_cut_around_status_joins_back_into_the_same_line() {
        for error in [
            None,
            Some("service down \"quoted\" \"status\":null,\"duration_ms\":0".to_string()),
        ] {
            let mut log = RequestLog {
                ruleset: "session_token",
                method: "GET",
                path: "/\"status\":null,\"duration_ms\":0",
                rule: Some("session"),
                action: RequestAction::Classify,
                cache: Some(CacheLevel::Memory),
                upstream: Some("127.0.0.1:9102".into()),
                error: error.clone(),
                ..Default::default()
            };
            let (head, tail) = log.to_json_around_status();
            log.status = Some(201);
            log.duration_ms = 7;
            assert_eq!(
                format!(r#"{head}"status":201,"duration_ms":7{tail}"#),
                log.to_json()
            );
        }
    }

    #[test]
    fn the_hand_written_line_is_the_serialized_one() {
        let odd = "a\"b\\c\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f}é😀/";
        let full = RequestLog {
            ruleset: "cells",
            method: "POST",
            path: odd,
            rule: Some("path_namespace"),
            action: RequestAction::Classify,
            mode: Some(Mode::Passthrough),
            classify_type: Some("ROUTE"),
            cache: Some(CacheLevel::CacheApi),
            service_ms: Some(12),
            attempts: Some(2),
            coalesced: true,
            fell_through: vec!["a", odd],
            value_too_long: Some(odd),
            upstream: Some(odd.to_string()),
            cell: Some(3),
            chosen_by: Some(ChosenBy::CircuitOpen),
            request_id: "0123",
            traceparent: "00-ab-cd-01",
            version: Some("v1"),
            status: None,
            duration_ms: 0,
            error: Some(odd.to_string()),
            error_kind: Some("topology_timeout"),
            shadow: Some(crate::disagreement::Verdict {
                rule: Some(odd),
                difference: Some(crate::disagreement::Difference::Rule),
            }),
        };
        let mut logs = vec![full, RequestLog::default()];
        for level in [
            CacheLevel::Memory,
            CacheLevel::Service,
            CacheLevel::Stale,
            CacheLevel::Fallback,
            CacheLevel::Static,
        ] {
            logs.push(RequestLog {
                cache: Some(level),
                ..Default::default()
            });
        }
        for mut log in logs {
            let (head, tail) = log.to_json_around_status();
            for (status, ms) in [(Some(200), 3), (Some(502), u64::MAX)] {
                log.status = status;
                log.duration_ms = ms;
                assert_eq!(
                    format!(
                        r#"{head}"status":{},"duration_ms":{ms}{tail}"#,
                        status.unwrap()
                    ),
                    log.to_json()
                );
            }
            let open = log.error_open(odd);
            let line = format!(r#"{head}"status":1,"duration_ms":2{open}x"}}"#);
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            let want = match &log.error {
                Some(e) => format!("{e}; {odd}x"),
                None => format!("{odd}x"),
            };
            assert_eq!(v["error"], want.as_str());
        }
    }

    #[test]
    fn notable_outcomes() {
        let ok = RequestLog {
            action: RequestAction::Proxy,
            status: Some(200),
            cache: Some(CacheLevel::Memory),
            ..Default::default()
        };
        assert!(!ok.is_notable());
        assert!(RequestLog {
            status: Some(502),
            ..Default::default()
        }
        .is_notable());
        assert!(RequestLog {
            status: Some(200),
            cache: Some(CacheLevel::Fallback),
            ..Default::default()
        }
        .is_notable());
        assert!(RequestLog {
            status: Some(200),
            error: Some("x".into()),
            ..Default::default()
        }
        .is_notable());
        assert!(RequestLog {
            status: Some(400),
            action: RequestAction::Reject,
            ..Default::default()
        }
        .is_notable());
    }
}
