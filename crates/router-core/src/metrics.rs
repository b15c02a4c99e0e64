//! The request's data point in Workers Analytics Engine (docs/metrics.md):
//! one per request, its fields decided here from the request's log record
//! ([`RequestLog`]) when the plan is made. The plan carries them as one
//! field, items joined by [`crate::wire::ITEM`] in the order of [`item`];
//! the entry (`src/entry.js`) adds only what it learns after the fetch (the
//! status class and the duration) and calls `writeDataPoint` on the
//! [`BINDING`] dataset, when the environment has one.
//!
//! Nothing a client sends is in a point but the rule it matched and how it
//! was routed: no path, no header value, no token.

use crate::json::push_u64;
use crate::log::RequestLog;
use crate::wire::{FIELD, ITEM};

/// The Analytics Engine dataset binding (`analytics_engine_datasets` in
/// wrangler.toml). Without it no point is planned or written.
pub const BINDING: &str = "ROUTER_METRICS";

/// Where each item of the plan's point field sits. Items before
/// [`item::ERROR_KIND`] are blob1 onwards in order; the entry puts the
/// status class after them (blob9) and the error kind last (blob10). From
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
    pub const ERROR_KIND: usize = 8;
    pub const DOUBLES_FROM: usize = 9;
    pub const SERVICE_MS: usize = 9;
    pub const ATTEMPTS: usize = 10;
    pub const FELL_THROUGH: usize = 11;
}

/// The point's items for `log` (`environment`: `GITLAB_ENVIRONMENT`): see
/// [`item`]. An absent value is an empty blob or a 0 double.
pub fn point(environment: &str, log: &RequestLog) -> String {
    let mut out = String::with_capacity(96);
    let blob = |out: &mut String, value: &str| {
        push_clean(out, value);
        out.push(ITEM);
    };
    blob(&mut out, environment);
    blob(&mut out, log.version.unwrap_or_default());
    blob(&mut out, log.rule.unwrap_or_default());
    blob(&mut out, log.mode.unwrap_or(log.action));
    blob(&mut out, log.classify_type.unwrap_or_default());
    blob(&mut out, log.chosen_by.unwrap_or_default());
    blob(&mut out, log.cache.map_or("", |c| c.log_name()));
    if let Some(cell) = log.cell {
        push_u64(&mut out, cell);
    }
    out.push(ITEM);
    blob(&mut out, log.error_kind.unwrap_or_default());
    push_u64(&mut out, log.service_ms.unwrap_or(0));
    out.push(ITEM);
    push_u64(&mut out, u64::from(log.attempts.unwrap_or(0)));
    out.push(ITEM);
    push_u64(&mut out, log.fell_through.len() as u64);
    out
}

/// `value` without the plan's separators (a ruleset's rule id could hold
/// one; nothing else here can).
fn push_clean(out: &mut String, value: &str) {
    if value.contains([FIELD, ITEM]) {
        out.extend(value.chars().filter(|c| *c != FIELD && *c != ITEM));
    } else {
        out.push_str(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::CacheLevel;

    #[test]
    fn a_point_holds_what_the_log_record_says_in_item_order() {
        let log = RequestLog {
            ruleset: "cells",
            method: "GET",
            path: "/secret-path?private_token=x",
            rule: Some("session"),
            action: "classify",
            classify_type: Some("SESSION_PREFIX"),
            cache: Some(CacheLevel::Service),
            service_ms: Some(12),
            attempts: Some(2),
            fell_through: vec!["a", "b"],
            cell: Some(3),
            chosen_by: Some("service"),
            version: Some("v-1"),
            error_kind: Some("topology_timeout"),
            ..Default::default()
        };
        let p = point("staging", &log);
        let items: Vec<&str> = p.split(ITEM).collect();
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
                "topology_timeout",
                "12",
                "2",
                "2"
            ]
        );
        assert_eq!(items[item::CELL], "3");
        assert_eq!(items[item::ERROR_KIND], "topology_timeout");
        assert_eq!(
            [
                items[item::SERVICE_MS],
                items[item::ATTEMPTS],
                items[item::FELL_THROUGH]
            ],
            ["12", "2", "2"]
        );
        assert_eq!(items.len(), item::FELL_THROUGH + 1);
        assert!(!p.contains("secret") && !p.contains("token"), "{p}");
    }

    #[test]
    fn absent_values_are_empty_blobs_and_zero_doubles_and_passthrough_is_the_action() {
        let log = RequestLog {
            action: "proxy",
            mode: Some("passthrough"),
            rule: Some("odd\u{0}id\u{1}"),
            ..Default::default()
        };
        let p = point("", &log);
        assert_eq!(
            p.split(ITEM).collect::<Vec<_>>(),
            [
                "",
                "",
                "oddid",
                "passthrough",
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
        assert!(!p.contains(FIELD));
    }
}
