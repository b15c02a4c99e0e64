//! The request's data point in Workers Analytics Engine (docs/metrics.md):
//! one per request, its fields decided here from the request's log record
//! ([`RequestLog`]) when the plan is made. The plan carries them as
//! fields of its own ([`crate::wire::head::POINT`] on), declared once in
//! [`item`]: the blobs in column order, then the doubles, so the entry's
//! one split of the plan reads them. The entry (`src/entry.js`) fills in
//! what it learns after the fetch (the status class, in the slot left
//! empty for it, and the duration) and calls `writeDataPoint` on the
//! [`BINDING`] dataset, when the environment has one.
//!
//! Nothing a client sends is in a point but the rule it matched and how it
//! was routed: no path, no header value, no token.

use crate::fields::{fields, FIELD, ITEM};
use crate::json::push_u64;
use crate::json::PushAscii;
use crate::log::RequestLog;

/// The Analytics Engine dataset binding (`analytics_engine_datasets` in
/// wrangler.toml). Without it no point is planned or written.
pub const BINDING: &str = "ROUTER_METRICS";

fields! {
    /// A point's items, in order: blob1 onwards up to
    /// [`DOUBLES_FROM`], then double2 onwards (double1 is the duration,
    /// the entry's). An absent value is an empty blob or a 0 double.
    pub mod item from 0;
    fn write(out, (isolate, log): (&str, &RequestLog<'_>));
    /// `GITLAB_ENVIRONMENT` and the isolate's Worker version, the same for
    /// every request of an isolate ([`isolate_items`]).
    ENVIRONMENT, VERSION => out.push_str(isolate);
    RULE => push_clean(out, log.rule.unwrap_or_default());
    ACTION => push_clean(out, log.mode.map_or(log.action.name(), |mode| mode.name()));
    CLAIM_TYPE => push_clean(out, log.classify_type.unwrap_or_default());
    CHOSEN_BY => push_clean(out, log.chosen_by.map_or("", |c| c.name()));
    CACHE => push_clean(out, log.cache.map_or("", |c| c.log_name()));
    /// Also the point's index: sampling keeps each cell's share.
    CELL => if let Some(cell) = log.cell {
        push_u64(out, cell);
    };
    /// Left empty: the entry writes the status class the client got.
    STATUS_CLASS => {};
    /// The entry replaces it when a step of its own failed.
    ERROR_KIND => out.push_str(log.error_kind.unwrap_or_default());
    /// The shadow ruleset's rule when the request was evaluated in the
    /// shadow (`(none)`: it matched none), else empty.
    SHADOW_RULE => if let Some(verdict) = &log.shadow {
        push_clean(out, verdict.rule.unwrap_or(SHADOW_NO_RULE));
    };
    /// What differs between the two decisions
    /// ([`crate::select::shadow::Difference::name`]); empty when they
    /// agree or the shadow did not run.
    SHADOW_DIFFERENCE => if let Some(difference) = log.shadow.and_then(|v| v.difference) {
        out.push_str(difference.name());
    };
    SERVICE_MS => push_u64(out, log.service_ms.unwrap_or(0));
    ATTEMPTS => push_u64(out, u64::from(log.attempts.unwrap_or(0)));
    FELL_THROUGH => push_u64(out, log.fell_through.len() as u64);
}

/// [`item::SHADOW_RULE`] when the shadow ruleset matched no rule.
pub const SHADOW_NO_RULE: &str = "(none)";

/// The first of a point's doubles: the items before it are its blobs.
pub const DOUBLES_FROM: usize = item::SERVICE_MS;

/// The point's first two items (environment and version, `GITLAB_ENVIRONMENT`
/// and the isolate's Worker version), the same for every request of an
/// isolate: made once ([`crate::forward::IsolateView::metrics`]) and copied
/// into each point.
pub fn isolate_items(environment: &str, version: Option<&str>) -> String {
    let mut out = String::with_capacity(environment.len() + 40);
    push_clean(&mut out, environment);
    out.push_ascii(FIELD);
    push_clean(&mut out, version.unwrap_or_default());
    out
}

/// The point's items for `log`, after `isolate` ([`isolate_items`]): see
/// [`item`].
pub fn point(isolate: &str, log: &RequestLog) -> String {
    let mut out = String::with_capacity(isolate.len() + 64);
    item::write(&mut out, (isolate, log));
    out
}

/// `value` without the plan's separators (a ruleset's rule id could hold
/// one; nothing else here can). One pass over the bytes: both separators
/// are ASCII control bytes, which UTF-8 never uses inside a character.
fn push_clean(out: &mut String, value: &str) {
    let separator = |b: &u8| *b == FIELD as u8 || *b == ITEM as u8;
    if value.as_bytes().iter().any(separator) {
        out.extend(value.chars().filter(|c| *c != FIELD && *c != ITEM));
    } else {
        out.push_str(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disagreement::{Difference, Verdict};
    use crate::log::{CacheLevel, ChosenBy, Mode, RequestAction};

    #[test]
    fn a_point_holds_what_the_log_record_says_in_column_order() {
        let log = RequestLog {
            ruleset: "cells",
            method: "GET",
            path: "/secret-path?private_token=x",
            rule: Some("session"),
            action: RequestAction::Classify,
            classify_type: Some("SESSION_PREFIX"),
            cache: Some(CacheLevel::Service),
            service_ms: Some(12),
            attempts: Some(2),
            fell_through: vec!["a", "b"],
            cell: Some(3),
            chosen_by: Some(ChosenBy::Service),
            version: Some("v-1"),
            error_kind: Some("topology_timeout"),
            shadow: Some(Verdict {
                rule: None,
                difference: Some(Difference::Rule),
            }),
            ..Default::default()
        };
        let p = point(&isolate_items("staging", Some("v-1")), &log);
        let items: Vec<&str> = p.split(FIELD).collect();
        assert_eq!(
            items,
            [
                "staging",
                "v-1",
                "session",
                "classify",
                "SESSION_PREFIX",
                "service",
                "service",
                "3",
                "",
                "topology_timeout",
                "(none)",
                "rule",
                "12",
                "2",
                "2"
            ]
        );
        assert!(!p.contains("secret") && !p.contains("token"), "{p}");
    }

    #[test]
    fn absent_values_are_empty_blobs_and_zero_doubles_and_passthrough_is_the_action() {
        let log = RequestLog {
            action: RequestAction::Proxy,
            mode: Some(Mode::Passthrough),
            rule: Some("odd\u{0}id\u{1}é"),
            ..Default::default()
        };
        let p = point(&isolate_items("", None), &log);
        assert!(!p.contains(ITEM));
        assert_eq!(
            p.split(FIELD).collect::<Vec<_>>(),
            [
                "",
                "",
                "oddidé",
                "passthrough",
                "",
                "",
                "",
                "",
                "",
                "",
                "",
                "",
                "0",
                "0",
                "0"
            ]
        );
    }

    #[test]
    fn an_evaluated_request_names_the_shadow_rule_and_an_agreement_no_difference() {
        let agreed = RequestLog {
            shadow: Some(Verdict {
                rule: Some("session\u{0}"),
                difference: None,
            }),
            ..Default::default()
        };
        let p = point(&isolate_items("", None), &agreed);
        let items: Vec<&str> = p.split(FIELD).collect();
        assert_eq!(items[item::SHADOW_RULE], "session");
        assert_eq!(items[item::SHADOW_DIFFERENCE], "");
    }

    #[test]
    fn the_isolate_items_lose_the_separators_too() {
        let items = isolate_items("prod\u{1}uction", Some("v\u{0}-1"));
        assert_eq!(items, "production\u{0}v-1");
    }
}
