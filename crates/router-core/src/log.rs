//! The log phase: one structured JSON line per request.

use serde::Serialize;

use crate::resolve::CacheLevel;

/// Everything worth knowing about how one request was routed.
#[derive(Debug, Default, Serialize)]
pub struct RequestLog<'a> {
    pub ruleset: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub rule: Option<&'a str>,
    pub action: &'a str,
    /// `passthrough` while the control document says so (every request to
    /// the legacy cell, no rules).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
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
    pub upstream: Option<String>,
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
            || matches!(self.cache, Some(CacheLevel::Stale | CacheLevel::Fallback))
            || self.action == "reject"
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

    /// The opening of the `error` field for a failure the entry meets
    /// later (`plan::Failure::log_error_open`): `,"error":"` with the errors
    /// recorded so far and `step` in it, the string left open for the
    /// failure's own message. `error` is the line's last field, so the entry
    /// closes it with `"}`.
    pub fn error_open(&self, step: &str) -> String {
        let mut text = String::new();
        if let Some(errors) = &self.error {
            text.push_str(errors);
            text.push_str("; ");
        }
        text.push_str(step);
        let quoted = serde_json::Value::String(text).to_string();
        format!(r#","error":{}"#, &quoted[..quoted.len() - 1])
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!(r#"{{"log_error":"{e}"}}"#))
    }

    /// The line cut where `"status":…,"duration_ms":…` go, for whoever
    /// learns them later (the JS entry, once the upstream answered):
    /// `head + "\"status\":200,\"duration_ms\":3" + tail` is the line
    /// [`RequestLog::to_json`] would write with those values.
    pub fn to_json_around_status(&self) -> (String, String) {
        const MARK: &str = r#""status":null,"duration_ms":0"#;
        let line = RequestLog {
            status: None,
            duration_ms: 0,
            upstream: self.upstream.clone(),
            error: self.error.clone(),
            fell_through: self.fell_through.clone(),
            ..*self
        }
        .to_json();
        // Inside a JSON string every quote is escaped, so the mark can only
        // be the fields themselves.
        match line.rfind(MARK) {
            Some(at) => (line[..at].to_string(), line[at + MARK.len()..].to_string()),
            None => (format!("{{\"log\":{line},"), "}".to_string()),
        }
    }
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
            action: "classify",
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
            action: "classify",
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
                action: "classify",
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
    fn notable_outcomes() {
        let ok = RequestLog {
            action: "proxy",
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
            action: "reject",
            ..Default::default()
        }
        .is_notable());
    }
}
