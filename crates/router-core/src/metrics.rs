//! The request's data point in Workers Analytics Engine (docs/metrics.md):
//! one per request, its fields decided here from the request's log record
//! ([`RequestLog`]) when the plan is made. The plan carries them as
//! [`item::COUNT`] fields of its own (items joined by
//! [`crate::wire::FIELD`], in the order of [`item`]): the blobs in column
//! order, then the doubles, so the entry's one split of the plan reads
//! them. The entry (`src/entry.js`) fills in what it learns after the
//! fetch (the status class, in the slot left empty for it, and the
//! duration) and calls `writeDataPoint` on the [`BINDING`] dataset, when
//! the environment has one.
//!
//! Nothing a client sends is in a point but the rule it matched and how it
//! was routed: no path, no header value, no token.

use crate::json::push_u64;
use crate::json::PushAscii;
use crate::log::RequestLog;
use crate::wire::{FIELD, ITEM};

/// What joins a point's items: they are plan fields.
const SEPARATOR: char = FIELD;

/// The Analytics Engine dataset binding (`analytics_engine_datasets` in
/// wrangler.toml). Without it no point is planned or written.
pub const BINDING: &str = "ROUTER_METRICS";

/// Where each item of the plan's point field sits. Items before
/// [`item::BLOBS`] are blob1 onwards, in column order; from
/// [`item::DOUBLES_FROM`] on they are double2 onwards (double1 is the
/// duration, the entry's).
pub mod item {
    pub const ENVIRONMENT: usize = 0;
    pub const VERSION: usize = 1;
    pub const RULE: usize = 2;
    pub const ACTION: usize = 3;
    pub const CLAIM_TYPE: usize = 4;
    pub const CHOSEN_BY: usize = 5;
    pub const CACHE: usize = 6;
    /// Also the point's index: sampling keeps each cell's share.
    pub const CELL: usize = 7;
    /// Left empty: the entry writes the status class the client got.
    pub const STATUS_CLASS: usize = 8;
    /// The entry replaces it when a step of its own failed.
    pub const ERROR_KIND: usize = 9;
    /// How many blobs: the items before this are the point's blobs.
    pub const BLOBS: usize = ERROR_KIND + 1;
    pub const DOUBLES_FROM: usize = BLOBS;
    pub const SERVICE_MS: usize = DOUBLES_FROM;
    pub const ATTEMPTS: usize = SERVICE_MS + 1;
    pub const FELL_THROUGH: usize = ATTEMPTS + 1;
    /// Items in a point.
    pub const COUNT: usize = FELL_THROUGH + 1;
}

/// The point's first two items (environment and version, `GITLAB_ENVIRONMENT`
/// and the isolate's Worker version), the same for every request of an
/// isolate: made once ([`crate::forward::IsolateView::metrics`]) and copied
/// into each point.
pub fn isolate_items(environment: &str, version: Option<&str>) -> String {
    let mut out = String::with_capacity(environment.len() + 40);
    push_clean(&mut out, environment);
    out.push_ascii(SEPARATOR);
    push_clean(&mut out, version.unwrap_or_default());
    out.push_ascii(SEPARATOR);
    out
}

/// The point's items for `log`, after `isolate` ([`isolate_items`]): see
/// [`item`]. An absent value is an empty blob or a 0 double.
pub fn point(isolate: &str, log: &RequestLog) -> String {
    let mut out = String::with_capacity(isolate.len() + 64);
    out.push_str(isolate);
    for value in [
        log.rule.unwrap_or_default(),
        log.mode.map_or(log.action.name(), |mode| mode.name()),
        log.classify_type.unwrap_or_default(),
        log.chosen_by.map_or("", |c| c.name()),
        log.cache.map_or("", |c| c.log_name()),
    ] {
        push_clean(&mut out, value);
        out.push_ascii(SEPARATOR);
    }
    if let Some(cell) = log.cell {
        push_u64(&mut out, cell);
    }
    out.push_ascii(SEPARATOR);
    // The status class's slot.
    out.push_ascii(SEPARATOR);
    out.push_str(log.error_kind.unwrap_or_default());
    out.push_ascii(SEPARATOR);
    push_u64(&mut out, log.service_ms.unwrap_or(0));
    out.push_ascii(SEPARATOR);
    push_u64(&mut out, u64::from(log.attempts.unwrap_or(0)));
    out.push_ascii(SEPARATOR);
    push_u64(&mut out, log.fell_through.len() as u64);
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
            ..Default::default()
        };
        let p = point(&isolate_items("staging", Some("v-1")), &log);
        let items: Vec<&str> = p.split(SEPARATOR).collect();
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
                "12",
                "2",
                "2"
            ]
        );
        assert_eq!(items[item::ENVIRONMENT], "staging");
        assert_eq!(items[item::VERSION], "v-1");
        assert_eq!(items[item::RULE], "session");
        assert_eq!(items[item::ACTION], "classify");
        assert_eq!(items[item::CLAIM_TYPE], "SESSION_PREFIX");
        assert_eq!(items[item::CHOSEN_BY], "service");
        assert_eq!(items[item::CACHE], "service");
        assert_eq!(items[item::CELL], "3");
        assert_eq!(items[item::STATUS_CLASS], "", "the entry's to fill");
        assert_eq!(items[item::ERROR_KIND], "topology_timeout");
        assert_eq!(item::BLOBS, item::ERROR_KIND + 1);
        assert_eq!(item::DOUBLES_FROM, item::BLOBS);
        assert_eq!(
            [
                items[item::SERVICE_MS],
                items[item::ATTEMPTS],
                items[item::FELL_THROUGH]
            ],
            ["12", "2", "2"]
        );
        assert_eq!(items.len(), item::COUNT);
        assert_eq!(item::COUNT, item::FELL_THROUGH + 1);
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
            p.split(SEPARATOR).collect::<Vec<_>>(),
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
                "0",
                "0",
                "0"
            ]
        );
        assert_eq!(p.split(SEPARATOR).count(), item::COUNT);
    }

    #[test]
    fn the_isolate_items_lose_the_separators_too() {
        let items = isolate_items("prod\u{1}uction", Some("v\u{0}-1"));
        assert_eq!(items, "production\u{0}v-1\u{0}");
    }
}
