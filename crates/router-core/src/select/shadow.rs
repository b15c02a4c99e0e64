//! Shadow evaluation (SPEC §15): a candidate ruleset's select phase run on
//! a request the active ruleset routes, and where the two decide
//! differently. Pure: the shadow never asks the Topology Service, never
//! changes where the request goes, and compares what each ruleset's first
//! decision says (a classify rule's `notFound: next-rule` fall-through
//! needs the service's answer, which only the active ruleset gets).

use crate::decision::{Action, Decision};
pub use crate::disagreement::{Difference, Verdict};
use crate::json::{push_quoted, PushAscii};
use crate::select::Ruleset;
use crate::RequestParts;

/// Where `shadow` decides differently from `active`; `None` when the two
/// would route the request alike (the flags that only matter after the
/// Topology Service answers, such as `onOutage`, are not compared).
pub fn difference(active: &Decision, shadow: &Decision) -> Option<Difference> {
    if active.rule_id != shadow.rule_id {
        return Some(Difference::Rule);
    }
    match (&active.action, &shadow.action) {
        (Action::Classify(a), Action::Classify(s)) => {
            if a.kind != s.kind || a.target != s.target {
                Some(Difference::ClaimType)
            } else if a.value != s.value || a.method != s.method {
                Some(Difference::ClaimValue)
            } else {
                None
            }
        }
        (Action::Proxy { address: a }, Action::Proxy { address: s }) => {
            (a != s).then_some(Difference::Proxy)
        }
        (
            Action::Reject {
                status: a,
                message: am,
            },
            Action::Reject {
                status: s,
                message: sm,
            },
        ) => (a != s || am != sm).then_some(Difference::Reject),
        (Action::Spread, Action::Spread) => None,
        _ => Some(Difference::Action),
    }
}

/// Whether a request is evaluated in the shadow, for a share in
/// millionths: 0 (the default) asks nothing of `random` (uniform in
/// [0, 1)), 1 000 000 evaluates every request.
pub fn sampled(per_million: u32, random: impl FnOnce() -> f64) -> bool {
    per_million > 0 && (per_million >= 1_000_000 || random() * 1_000_000.0 < f64::from(per_million))
}

/// The active and the shadow ruleset's first decisions on one request,
/// and where they differ.
pub struct Evaluation<'r> {
    pub active: Decision<'r>,
    pub shadow: Decision<'r>,
    pub difference: Option<Difference>,
}

impl<'r> Evaluation<'r> {
    /// The shadow ruleset's select phase on `request` (pure: no service
    /// call) against `active`, the active ruleset's first decision on it:
    /// a `notFound: next-rule` fall-through depends on the service's
    /// answer, which the shadow never asks.
    pub fn of(active: Decision<'r>, shadow: &'r Ruleset, request: &RequestParts) -> Self {
        let shadow = shadow.decide(request);
        let difference = difference(&active, &shadow);
        Evaluation {
            active,
            shadow,
            difference,
        }
    }

    pub fn verdict(&self) -> Verdict<'r> {
        Verdict {
            rule: self.shadow.rule_id,
            difference: self.difference,
        }
    }
}

/// One decision as the disagreement line states it: the rule, the action,
/// the claim's type and target (never its value: a key may come from a
/// token or a cookie), the proxy address.
fn push_decision(out: &mut String, decision: &Decision) {
    out.push_str(r#"{"rule":"#);
    match decision.rule_id {
        Some(rule) => push_quoted(out, rule),
        None => out.push_str("null"),
    }
    out.push_str(r#","action":"#);
    push_quoted(out, decision.action.name());
    match &decision.action {
        Action::Classify(c) => {
            out.push_str(r#","classify_type":"#);
            push_quoted(out, c.kind.name());
            out.push_str(r#","target":"#);
            push_quoted(out, c.target.name());
        }
        Action::Proxy { address } => {
            out.push_str(r#","proxy":"#);
            match address {
                Some(address) => push_quoted(out, address),
                None => out.push_str("null"),
            }
        }
        Action::Reject { status, .. } => {
            out.push_str(r#","status":"#);
            crate::json::push_u64(out, u64::from(*status));
        }
        Action::Spread => {}
    }
    out.push_ascii('}');
}

/// The log line of one disagreement: both decisions, what differs, the
/// request's method and path (as the request's own line has them), the
/// two rulesets' names and the request id that ties it to that line.
pub struct DisagreementLine<'a> {
    pub ruleset: &'a str,
    pub shadow_ruleset: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub request_id: &'a str,
    pub active: &'a Decision<'a>,
    pub shadow: &'a Decision<'a>,
    pub difference: Difference,
}

impl DisagreementLine<'_> {
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(384);
        out.push_str(r#"{"level":"info","scope":"shadow","message":"the shadow ruleset decides this request differently","difference":"#);
        push_quoted(&mut out, self.difference.name());
        out.push_str(r#","ruleset":"#);
        push_quoted(&mut out, self.ruleset);
        out.push_str(r#","shadow_ruleset":"#);
        push_quoted(&mut out, self.shadow_ruleset);
        out.push_str(r#","method":"#);
        push_quoted(&mut out, self.method);
        out.push_str(r#","path":"#);
        push_quoted(&mut out, self.path);
        if !self.request_id.is_empty() {
            out.push_str(r#","request_id":"#);
            push_quoted(&mut out, self.request_id);
        }
        out.push_str(r#","active":"#);
        push_decision(&mut out, self.active);
        out.push_str(r#","shadow":"#);
        push_decision(&mut out, self.shadow);
        out.push_ascii('}');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::question::{ClassifyKind, ClassifyRequest, Target};

    fn decision<'r>(rule: Option<&'r str>, action: Action<'r>) -> Decision<'r> {
        Decision {
            rule_id: rule,
            action,
            next_on_not_found: None,
            unavailable_on_outage: false,
            counts_gateway_statuses: false,
            value_too_long: None,
        }
    }

    fn classify(kind: ClassifyKind, value: &str) -> Action<'static> {
        Action::Classify(ClassifyRequest::new(
            kind,
            Some(value.to_string()),
            Target::Web,
        ))
    }

    #[test]
    fn the_first_difference_names_it() {
        let session = decision(
            Some("session"),
            classify(ClassifyKind::SessionPrefix, "cell-2"),
        );
        assert_eq!(difference(&session, &session.clone()), None);
        let other_rule = decision(
            Some("token"),
            classify(ClassifyKind::SessionPrefix, "cell-2"),
        );
        assert_eq!(difference(&session, &other_rule), Some(Difference::Rule));
        let none = decision(None, Action::Proxy { address: None });
        assert_eq!(difference(&session, &none), Some(Difference::Rule));
        let proxied = decision(Some("session"), Action::Proxy { address: None });
        assert_eq!(difference(&session, &proxied), Some(Difference::Action));
        let other_type = decision(Some("session"), classify(ClassifyKind::CellId, "cell-2"));
        assert_eq!(
            difference(&session, &other_type),
            Some(Difference::ClaimType)
        );
        let other_value = decision(
            Some("session"),
            classify(ClassifyKind::SessionPrefix, "cell-3"),
        );
        assert_eq!(
            difference(&session, &other_value),
            Some(Difference::ClaimValue)
        );
        let registry = decision(
            Some("session"),
            Action::Classify(ClassifyRequest::new(
                ClassifyKind::SessionPrefix,
                Some("cell-2".into()),
                Target::Registry,
            )),
        );
        assert_eq!(difference(&session, &registry), Some(Difference::ClaimType));
    }

    #[test]
    fn proxies_rejections_and_spreads() {
        let legacy = decision(Some("fixed"), Action::Proxy { address: None });
        let cell = decision(
            Some("fixed"),
            Action::Proxy {
                address: Some("cell-2.example:443"),
            },
        );
        assert_eq!(difference(&legacy, &cell), Some(Difference::Proxy));
        assert_eq!(difference(&cell, &cell.clone()), None);
        let reject = |status, message| decision(Some("deny"), Action::Reject { status, message });
        assert_eq!(difference(&reject(400, "a"), &reject(400, "a")), None);
        assert_eq!(
            difference(&reject(400, "a"), &reject(404, "a")),
            Some(Difference::Reject)
        );
        assert_eq!(
            difference(&reject(400, "a"), &reject(400, "b")),
            Some(Difference::Reject)
        );
        let spread = decision(Some("spread"), Action::Spread);
        assert_eq!(difference(&spread, &spread.clone()), None);
    }

    #[test]
    fn sampling_asks_for_a_number_only_between_0_and_1() {
        assert!(!sampled(0, || panic!("share 0 draws nothing")));
        assert!(sampled(1_000_000, || panic!("share 1 draws nothing")));
        assert!(sampled(250_000, || 0.2));
        assert!(!sampled(250_000, || 0.25));
        assert!(sampled(1, || 0.0));
    }

    #[test]
    fn the_line_states_both_decisions_without_a_claim_value() {
        let active = decision(
            Some("session"),
            classify(ClassifyKind::SessionPrefix, "cell-2"),
        );
        let shadow = decision(
            Some("legacy"),
            Action::Proxy {
                address: Some("legacy.example:443"),
            },
        );
        let line = DisagreementLine {
            ruleset: "session_token",
            shadow_ruleset: "cells",
            method: "GET",
            path: "/dashboard",
            request_id: "req-1",
            active: &active,
            shadow: &shadow,
            difference: difference(&active, &shadow).unwrap_or(Difference::Rule),
        }
        .to_json();
        let parsed: serde_json::Value = serde_json::from_str(&line).expect("the line is JSON");
        assert_eq!(parsed["difference"], "rule");
        assert_eq!(parsed["active"]["classify_type"], "SESSION_PREFIX");
        assert_eq!(parsed["shadow"]["proxy"], "legacy.example:443");
        assert_eq!(parsed["request_id"], "req-1");
        assert!(!line.contains("cell-2"), "no claim value: {line}");
    }
}
