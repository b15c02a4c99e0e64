//! Select and resolve together. A classify rule with `notFound: next-rule`
//! hands a request whose key the Topology Service does not know on to the
//! rules after it (SPEC §9): an anonymous path claim on no cell goes on to
//! the session and token rules, then the legacy cell. The not-found answer
//! is cached like any 404, so a key costs at most one extra service call
//! per negative TTL.

use crate::decision::{Action, Decision};
use crate::resolve::topology::Classification;
use crate::resolve::{Platform, Resolution, Resolver, SharedCache, TopologyTransport};
use crate::select::Ruleset;
use crate::trace::Trace;
use crate::RequestParts;

/// How a request was routed.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed<'r> {
    /// The decision that routes the request.
    pub decision: Decision<'r>,
    /// Its resolution, for a classify decision (`None`: no Topology Service
    /// is configured).
    pub resolution: Option<Resolution>,
    /// The `notFound: next-rule` rules that handed the request on, in
    /// order, with the not-found resolution each got.
    pub fell_through: Vec<(&'r str, Resolution)>,
    /// What the shadow ruleset decides, when the request was evaluated in
    /// the shadow ([`crate::select::shadow`]).
    pub shadow: Option<crate::disagreement::Verdict<'r>>,
}

impl Routed<'_> {
    /// Whether the request must get a 503 rather than go to the legacy
    /// cell: its rule says `onOutage: unavailable` and the service could
    /// not answer with nothing cached (not even stale).
    pub fn unavailable(&self) -> bool {
        self.decision.unavailable_on_outage
            && self.resolution.as_ref().is_some_and(|r| {
                r.classification.is_none() && r.level == crate::log::CacheLevel::Fallback
            })
    }

    /// Service attempts made for this request, by every rule.
    pub fn attempts(&self) -> u32 {
        self.all_resolutions().map(|r| r.attempts).sum()
    }

    /// Time spent on the service for this request, when it was called.
    pub fn service_ms(&self) -> Option<u64> {
        self.all_resolutions()
            .filter_map(|r| r.service_ms)
            .reduce(|a, b| a + b)
    }

    /// Whether any step waited on another request's service call.
    pub fn coalesced(&self) -> bool {
        self.all_resolutions().any(|r| r.coalesced)
    }

    fn all_resolutions(&self) -> impl Iterator<Item = &Resolution> {
        self.fell_through
            .iter()
            .map(|(_, r)| r)
            .chain(&self.resolution)
    }
}

/// Where evaluation resumes when `decision` got `res`: after the rule, if
/// it hands not-found keys on and the key was not found.
fn resumes_at(next_on_not_found: Option<usize>, res: &Resolution) -> Option<usize> {
    let next = next_on_not_found?;
    (res.classification == Some(Classification::NotFound)).then_some(next)
}

/// A request whose routing stopped at a classify step the memory cache
/// could not answer: what was decided so far, owned, so the asynchronous
/// half ([`route_pending`]) goes on from there instead of running the rules
/// again.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    rule: Box<str>,
    question: crate::ClassifyRequest,
    next_on_not_found: Option<usize>,
    unavailable_on_outage: bool,
    counts_gateway_statuses: bool,
    value_too_long: Option<Box<str>>,
    fell_through: Box<[(Box<str>, Resolution)]>,
}

/// A classify decision with its question taken out, so that what needs
/// resolving is a classify step by its type (no "not a classify decision"
/// case to rule out at run time).
struct ClassifyStep<'r> {
    question: crate::ClassifyRequest,
    rule_id: Option<&'r str>,
    next_on_not_found: Option<usize>,
    unavailable_on_outage: bool,
    counts_gateway_statuses: bool,
    value_too_long: Option<&'r str>,
}

impl<'r> ClassifyStep<'r> {
    /// The step of a classify decision; any other decision back as it is.
    fn of(decision: Decision<'r>) -> Result<ClassifyStep<'r>, Decision<'r>> {
        match decision.action {
            Action::Classify(question) => Ok(ClassifyStep {
                question,
                rule_id: decision.rule_id,
                next_on_not_found: decision.next_on_not_found,
                unavailable_on_outage: decision.unavailable_on_outage,
                counts_gateway_statuses: decision.counts_gateway_statuses,
                value_too_long: decision.value_too_long,
            }),
            action => Err(Decision { action, ..decision }),
        }
    }

    fn into_decision(self) -> Decision<'r> {
        Decision {
            rule_id: self.rule_id,
            action: Action::Classify(self.question),
            next_on_not_found: self.next_on_not_found,
            unavailable_on_outage: self.unavailable_on_outage,
            counts_gateway_statuses: self.counts_gateway_statuses,
            value_too_long: self.value_too_long,
        }
    }
}

/// How far one pass of the rules got.
enum Walk<'r> {
    Routed(Routed<'r>),
    /// A classify step whose resolution needs I/O (the memory cache
    /// could not answer it, or the caller resolves everything by I/O).
    Needs {
        step: ClassifyStep<'r>,
        fell_through: Vec<(&'r str, Resolution)>,
    },
}

/// The rules from position `first` on, each classify step answered by
/// `known` when it can (`None`: the step needs I/O and the walk stops
/// there); a `notFound: next-rule` rule whose key is not found hands the
/// request on to the rules after it. The one loop every way of routing
/// goes through. `resolving`: a resolver exists (without one, a classify
/// decision has no resolution at all).
fn walk<'r>(
    ruleset: &'r Ruleset,
    request: &RequestParts,
    mut first: usize,
    mut fell_through: Vec<(&'r str, Resolution)>,
    resolving: bool,
    mut known: impl FnMut(&crate::ClassifyRequest) -> Option<Resolution>,
) -> Walk<'r> {
    loop {
        let (decision, res) = match ClassifyStep::of(ruleset.decide_from(request, first)) {
            Ok(step) if resolving => match known(&step.question) {
                Some(res) => (step.into_decision(), Some(res)),
                None => return Walk::Needs { step, fell_through },
            },
            Ok(step) => (step.into_decision(), None),
            Err(decision) => (decision, None),
        };
        match (res, decision.rule_id) {
            (Some(res), Some(rule)) if resumes_at(decision.next_on_not_found, &res).is_some() => {
                first = resumes_at(decision.next_on_not_found, &res).unwrap_or(usize::MAX);
                fell_through.push((rule, res));
            }
            (resolution, _) => {
                return Walk::Routed(Routed {
                    decision,
                    resolution,
                    fell_through,
                    shadow: None,
                })
            }
        }
    }
}

/// Routes `request` from the memory cache alone, without awaiting. A
/// classify step the memory cache cannot answer stops it with a
/// [`Pending`] for [`route_pending`].
// The `Ok` variant, `Routed`, is larger than `Pending`: boxing it would
// save nothing.
#[allow(clippy::result_large_err)]
pub fn route_from_memory<'r, T, C, P>(
    ruleset: &'r Ruleset,
    resolver: Option<&Resolver<T, C, P>>,
    request: &RequestParts,
) -> Result<Routed<'r>, Pending>
where
    T: TopologyTransport,
    C: SharedCache,
    P: Platform,
{
    let memory = |question: &crate::ClassifyRequest| {
        resolver.and_then(|resolver| resolver.resolve_from_memory(question))
    };
    match walk(ruleset, request, 0, Vec::new(), resolver.is_some(), memory) {
        Walk::Routed(routed) => Ok(routed),
        Walk::Needs { step, fell_through } => Err(Pending::of(step, fell_through)),
    }
}

impl Pending {
    fn of(step: ClassifyStep, fell_through: Vec<(&str, Resolution)>) -> Pending {
        Pending {
            rule: step.rule_id.unwrap_or_default().into(),
            question: step.question,
            next_on_not_found: step.next_on_not_found,
            unavailable_on_outage: step.unavailable_on_outage,
            counts_gateway_statuses: step.counts_gateway_statuses,
            value_too_long: step.value_too_long.map(Box::from),
            fell_through: fell_through
                .into_iter()
                .map(|(rule, res)| (Box::from(rule), res))
                .collect(),
        }
    }
}

/// Routes `request`: every classify step through the memory cache, the
/// Cache API and the service ([`Resolver::resolve`]).
pub async fn route<'r, T, C, P>(
    ruleset: &'r Ruleset,
    resolver: Option<&Resolver<T, C, P>>,
    request: &RequestParts,
    trace: &Trace,
) -> Routed<'r>
where
    T: TopologyTransport,
    C: SharedCache,
    P: Platform,
{
    let resolving = resolver.is_some();
    match walk(ruleset, request, 0, Vec::new(), resolving, |_| None) {
        Walk::Routed(routed) => routed,
        Walk::Needs { step, fell_through } => match resolver {
            Some(resolver) => {
                resolve_on(ruleset, resolver, request, trace, step, fell_through).await
            }
            // Without a resolver the walk stops at no step; were it to,
            // the decision goes unresolved, as every classify one does.
            None => Routed {
                decision: step.into_decision(),
                resolution: None,
                fell_through,
                shadow: None,
            },
        },
    }
}

/// Goes on with a request [`route_from_memory`] stopped: resolves the
/// pending question, then, if its key was not found and the rule hands
/// such keys on, the rules after it.
pub async fn route_pending<'r, T, C, P>(
    ruleset: &'r Ruleset,
    resolver: &Resolver<T, C, P>,
    request: &RequestParts,
    trace: &Trace,
    pending: Pending,
) -> Routed<'r>
where
    T: TopologyTransport,
    C: SharedCache,
    P: Platform,
{
    let id = |name: &str| -> &'r str {
        ruleset
            .rules()
            .iter()
            .find(|r| r.id == name)
            .map_or("", |r| r.id.as_str())
    };
    let fell_through: Vec<(&'r str, Resolution)> = pending
        .fell_through
        .into_vec()
        .into_iter()
        .map(|(rule, res)| (id(&rule), res))
        .collect();
    let step = ClassifyStep {
        rule_id: Some(id(&pending.rule)),
        question: pending.question,
        next_on_not_found: pending.next_on_not_found,
        unavailable_on_outage: pending.unavailable_on_outage,
        counts_gateway_statuses: pending.counts_gateway_statuses,
        value_too_long: pending.value_too_long.as_deref().map(id),
    };
    resolve_on(ruleset, resolver, request, trace, step, fell_through).await
}

/// Resolves `step`'s question (through every level), then, while the
/// key is not found and the rule hands such keys on, walks on and resolves
/// the next rule that needs it.
async fn resolve_on<'r, T, C, P>(
    ruleset: &'r Ruleset,
    resolver: &Resolver<T, C, P>,
    request: &RequestParts,
    trace: &Trace,
    mut step: ClassifyStep<'r>,
    mut fell_through: Vec<(&'r str, Resolution)>,
) -> Routed<'r>
where
    T: TopologyTransport,
    C: SharedCache,
    P: Platform,
{
    loop {
        let res = resolver.resolve_traced(&step.question, trace).await;
        let (Some(next), Some(rule)) = (resumes_at(step.next_on_not_found, &res), step.rule_id)
        else {
            return Routed {
                decision: step.into_decision(),
                resolution: Some(res),
                fell_through,
                shadow: None,
            };
        };
        fell_through.push((rule, res));
        match walk(ruleset, request, next, fell_through, true, |_| None) {
            Walk::Routed(routed) => return routed,
            Walk::Needs {
                step: s,
                fell_through: f,
            } => {
                step = s;
                fell_through = f;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::CacheLevel;
    use crate::resolve::topology::CachePolicy;
    use crate::resolve::ClientPolicy;
    use crate::testutil::{FakePlatform, KnownAnswers, NoSharedCache};

    const RULES: &str = r#"[
      {"id": "path", "match": {"type": "path", "regexValue": "^/(?<top>[a-z0-9-]+)(?:/|$)"},
       "action": "classify", "classify": {"type": "ROUTE", "value": "${top}", "notFound": "next-rule"}},
      {"id": "session", "match": {"type": "cookie", "name": "s", "regexValue": "^(?<p>cell-[0-9]+)$"},
       "action": "classify", "classify": {"type": "SESSION_PREFIX", "value": "${p}"}},
      {"id": "legacy", "action": "proxy"}
    ]"#;

    fn request(path: &str, session: Option<&str>) -> RequestParts {
        let mut parts =
            RequestParts::from_url("GET", &format!("https://gitlab.com{path}")).unwrap();
        if let Some(s) = session {
            parts.add_header("cookie", &format!("s={s}"));
        }
        parts
    }

    fn resolver<'a>(
        service: &'a KnownAnswers,
        clock: &'a FakePlatform,
    ) -> Resolver<&'a KnownAnswers, NoSharedCache, &'a FakePlatform> {
        Resolver::new(
            service,
            NoSharedCache,
            clock,
            CachePolicy::default(),
            ClientPolicy::default(),
        )
    }

    fn address(routed: &Routed) -> Option<String> {
        match &routed.resolution.as_ref()?.classification {
            Some(Classification::Cell(cell)) => Some(cell.address.clone()),
            _ => None,
        }
    }

    #[test]
    fn an_unknown_path_claim_hands_on_once_per_negative_ttl() {
        let rules = Ruleset::from_json("t", RULES).unwrap();
        let mut service = KnownAnswers::default();
        service.known.insert(
            r#"{"claims":[{"route":"cell2-group"}]}"#.into(),
            "c2".into(),
        );
        service.known.insert(
            r#"{"type":"SESSION_PREFIX","value":"cell-3"}"#.into(),
            "c3".into(),
        );
        let clock = FakePlatform::at(1_000);
        let resolver = resolver(&service, &clock);
        let run = |path, session| {
            futures_executor::block_on(route(
                &rules,
                Some(&resolver),
                &request(path, session),
                &Trace::default(),
            ))
        };

        let known = run("/cell2-group/app", Some("cell-3"));
        assert_eq!(known.decision.rule_id, Some("path"));
        assert_eq!(address(&known).as_deref(), Some("c2"));
        assert!(known.fell_through.is_empty());
        assert_eq!(service.calls.get(), 1);

        let unknown = run("/nobody/app", Some("cell-3"));
        assert_eq!(unknown.decision.rule_id, Some("session"));
        assert_eq!(address(&unknown).as_deref(), Some("c3"));
        assert_eq!(
            unknown
                .fell_through
                .iter()
                .map(|(r, _)| *r)
                .collect::<Vec<_>>(),
            ["path"]
        );
        assert_eq!(unknown.attempts(), 2);
        assert_eq!(service.calls.get(), 3);

        // Both answers are cached now: the memory path routes alike, with
        // no call.
        let again = route_from_memory(
            &rules,
            Some(&resolver),
            &request("/nobody/app", Some("cell-3")),
        )
        .expect("all from memory");
        assert_eq!(again.decision.rule_id, Some("session"));
        assert_eq!(again.fell_through[0].1.level, CacheLevel::Memory);
        assert_eq!(address(&again).as_deref(), Some("c3"));
        assert_eq!(again.attempts(), 0);
        assert_eq!(service.calls.get(), 3);

        // Without a session: the legacy cell, after one (cached) not-found.
        let anonymous = run("/nobody/app", None);
        assert_eq!(anonymous.decision.rule_id, Some("legacy"));
        assert_eq!(anonymous.resolution, None);
        assert_eq!(anonymous.fell_through.len(), 1);
        assert_eq!(service.calls.get(), 3);

        // The negative entry expires (devstack-like max-age=10): one more
        // call, not one per request.
        clock.advance(11_000);
        run("/nobody/app", None);
        run("/nobody/app", None);
        assert_eq!(service.calls.get(), 4);
    }

    #[test]
    fn a_memory_miss_resumes_where_the_synchronous_pass_stopped() {
        let rules = Ruleset::from_json("t", RULES).unwrap();
        let mut service = KnownAnswers::default();
        service.known.insert(
            r#"{"type":"SESSION_PREFIX","value":"cell-3"}"#.into(),
            "c3".into(),
        );
        let clock = FakePlatform::at(0);
        let resolver = resolver(&service, &clock);
        let req = request("/nobody/app", Some("cell-3"));
        let pending = route_from_memory(&rules, Some(&resolver), &req).unwrap_err();
        assert_eq!(rules.evaluations(), 1);
        let routed = futures_executor::block_on(route_pending(
            &rules,
            &resolver,
            &req,
            &Trace::default(),
            pending,
        ));
        // The path rule is not evaluated again: one more pass, for the rules
        // after it.
        assert_eq!(rules.evaluations(), 2);
        assert_eq!(routed.decision.rule_id, Some("session"));
        assert_eq!(routed.fell_through.len(), 1);
        assert_eq!(routed.fell_through[0].0, "path");
        assert_eq!(address(&routed).as_deref(), Some("c3"));
        assert_eq!(service.calls.get(), 2);

        // Now both answers are in memory: the synchronous pass routes alone.
        let again = route_from_memory(&rules, Some(&resolver), &req).unwrap();
        assert_eq!(again.decision.rule_id, Some("session"));
        assert_eq!(rules.evaluations(), 4);
    }

    #[test]
    fn a_rule_without_next_rule_keeps_not_found_at_the_legacy_cell() {
        let rules =
            Ruleset::from_json("t", &RULES.replace(r#", "notFound": "next-rule""#, "")).unwrap();
        let service = KnownAnswers::default();
        let clock = FakePlatform::at(0);
        let resolver = resolver(&service, &clock);
        let routed = futures_executor::block_on(route(
            &rules,
            Some(&resolver),
            &request("/nobody", Some("cell-3")),
            &Trace::default(),
        ));
        assert_eq!(routed.decision.rule_id, Some("path"));
        assert_eq!(
            routed.resolution.unwrap().classification,
            Some(Classification::NotFound)
        );
        assert_eq!(service.calls.get(), 1);
    }

    #[test]
    fn a_not_found_policy_is_checked_when_compiled() {
        let err = Ruleset::from_json("t", &RULES.replace("next-rule", "next")).unwrap_err();
        assert!(err.to_string().contains("classify.notFound"), "{err}");
    }
}
