//! The forward decision natively: settings and a shipped ruleset to an
//! isolate's state, requests to plans, with a platform whose clock and
//! random draws the tests set.

use std::borrow::Cow;

use super::*;
use crate::config::Config;
use crate::error::{Service, ServiceFailure};
use crate::isolate::IsolateState;
use crate::log::CacheLevel;
use crate::resolve::cells::{self, Outcome};
use crate::testutil::FakePlatform;
use crate::trace::{Trace, CF_RAY_HEADER, TRACEPARENT_HEADER, TRACESTATE_HEADER};
use crate::Ruleset;

/// An isolate's state as the edge makes it from its variables, with the
/// shipped ruleset they name (read from rules/).
struct Isolate {
    state: IsolateState,
    platform: FakePlatform,
}

impl std::ops::Deref for Isolate {
    type Target = IsolateState;
    fn deref(&self) -> &IsolateState {
        &self.state
    }
}

impl Isolate {
    fn view(&self) -> IsolateView<'_> {
        self.state
            .forward_view(self.state.config.request_logging, false)
    }
    fn now_ms(&self) -> u64 {
        self.platform.now.get()
    }
}

fn shipped_ruleset(name: &str) -> Option<Ruleset> {
    let path = format!("{}/../../rules/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let json = std::fs::read_to_string(path).ok()?;
    Some(Ruleset::from_json(name, &json).expect("a shipped ruleset"))
}

fn isolate_with(vars: &[(&str, &str)]) -> (Isolate, Vec<String>) {
    let (config, problems) = Config::from_lookup(|name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    });
    let ruleset = config.rules_config.as_deref().and_then(shipped_ruleset);
    let iso = Isolate {
        state: IsolateState::new(config, ruleset),
        platform: FakePlatform::at(1_000_000),
    };
    (iso, problems.iter().map(ToString::to_string).collect())
}

/// The request as the edge would make it: the URL parsed, these headers
/// (of those the isolate reads), the trace from them.
fn incoming(iso: &Isolate, url: &str, headers: &[(&str, &str)]) -> Incoming {
    let mut incoming = Incoming::parse(url, "GET".to_string()).expect("URL");
    let names = iso.header_names.as_ref().expect("named headers");
    for name in names {
        if let Some((_, v)) = headers.iter().find(|(h, _)| h == name) {
            incoming.parts.headers.push((name.clone(), v.to_string()));
        }
    }
    incoming.trace = Trace::from_headers(
        incoming.parts.header(CF_RAY_HEADER),
        incoming.parts.header(TRACEPARENT_HEADER),
        incoming.parts.header(TRACESTATE_HEADER),
        |out: &mut [u8]| out.fill(0xab),
    );
    incoming
}

/// The plan for a request in this isolate.
fn plan<'a>(iso: &'a Isolate, req: &'a Incoming, routed: Option<&Routed<'a>>) -> Plan<'a> {
    super::plan(&iso.view(), &iso.platform, req, routed)
}

/// The ruleset's decision for `req`, as routed without a service.
fn decided<'a>(iso: &'a Isolate, req: &Incoming) -> Routed<'a> {
    Routed {
        decision: iso.ruleset.as_ref().expect("a ruleset").decide(&req.parts),
        resolution: None,
        fell_through: Vec::new(),
        shadow: None,
    }
}

fn forward_of(plan: Plan) -> Forward {
    match plan {
        Plan::Forward(f) => *f,
        other => panic!("expected a forward plan, got {other:?}"),
    }
}

const LEGACY: &[(&str, &str)] = &[
    ("GITLAB_RULES_CONFIG", "cells"),
    ("GITLAB_PROXY_HOST", "legacy.example:8080"),
    ("GITLAB_UPSTREAM_SCHEME", "http"),
];

#[test]
fn a_fixed_route_is_planned_with_every_forwarding_header() {
    let (iso, errors) = isolate_with(LEGACY);
    assert!(
        errors.iter().all(|e| !e.contains("GITLAB_RULES_CONFIG")),
        "{errors:?}"
    );
    let req = incoming(
        &iso,
        "https://gitlab.com/help?x=1",
        &[
            ("cf-connecting-ip", "203.0.113.7"),
            ("connection", "close, x-secret"),
            ("cf-ray", "8f1c2a3b4c5d6e7f-AMS"),
            ("traceparent", TRACEPARENT),
            ("x-request-id", "client-chosen"),
        ],
    );
    let routed = decided(&iso, &req);
    let f = forward_of(plan(&iso, &req, Some(&routed)));
    assert_eq!(f.url, "http://legacy.example:8080/help?x=1");
    let set: Vec<(&str, &str)> = f
        .set
        .iter()
        .map(|(n, v)| (n.as_ref(), v.as_ref()))
        .collect();
    assert_eq!(
        set,
        [
            ("x-forwarded-host", "gitlab.com"),
            ("x-forwarded-proto", "https"),
            ("x-gitlab-http-router-rule-action", "proxy"),
            ("x-forwarded-for", "203.0.113.7"),
            ("x-request-id", "8f1c2a3b4c5d6e7f-AMS"),
            ("traceparent", TRACEPARENT),
        ]
    );
    assert!(
        f.log
            .head
            .contains(r#""request_id":"8f1c2a3b4c5d6e7f-AMS","traceparent":"00-4bf9"#),
        "{}",
        f.log.head
    );
    assert!(f.drop.contains(&"x-secret".to_string()), "{:?}", f.drop);
    assert!(f.signing.is_none());
    assert!(f.upstream_failure_log.contains("upstream fetch failed"));
    assert!(f.log.head.contains(r#""rule":"legacy""#), "{}", f.log.head);
    assert_eq!(f.log.min_status, 0, "GITLAB_REQUEST_LOG=all by default");
    // What the entry reads is what was planned.
    let planned = Plan::Forward(Box::new(f));
    assert_eq!(Plan::decode(&planned.encode()), Some(planned));
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The upstream failure's log opening is the constant only while the line
/// has no error, and then the same as `error_open` writes.
#[test]
fn the_upstream_failure_opening_is_error_open_s() {
    let mut log = RequestLog::default();
    assert_eq!(
        upstream_failure_log(&log, false),
        log.error_open(UPSTREAM_FAILURE_STEP)
    );
    assert_eq!(
        upstream_failure_log(&log, true),
        format!(
            "{MAYBE_THE_CLIENTS}{}",
            log.error_open(UPSTREAM_FAILURE_WITH_BODY_STEP)
        )
    );
    assert!(matches!(
        upstream_failure_log(&log, false),
        Cow::Borrowed(_)
    ));
    assert!(matches!(upstream_failure_log(&log, true), Cow::Borrowed(_)));
    log.add_error("the topology service timed out");
    let opening = upstream_failure_log(&log, false);
    assert_eq!(opening, log.error_open(UPSTREAM_FAILURE_STEP));
    assert!(
        opening.contains("timed out; upstream fetch failed: "),
        "{opening}"
    );
    let with_body = upstream_failure_log(&log, true);
    assert!(with_body.contains("not counted against the cell"));
    assert!(with_body.starts_with(MAYBE_THE_CLIENTS), "{with_body}");
}

#[test]
fn without_a_ray_or_a_valid_traceparent_both_are_generated() {
    let (iso, _) = isolate_with(LEGACY);
    let req = incoming(
        &iso,
        "https://gitlab.com/explore",
        &[("traceparent", "00-not-valid-01")],
    );
    assert_eq!(req.trace.request_id, "abababab-abab-4bab-abab-abababababab");
    assert_eq!(
        req.trace.traceparent,
        "00-abababababababababababababababab-abababababababab-01"
    );
}

#[test]
fn sampled_logging_writes_routine_lines_only_when_drawn() {
    let (iso, _) = isolate_with(&[
        ("GITLAB_RULES_CONFIG", "cells"),
        ("GITLAB_REQUEST_LOG", "sample:0.01"),
    ]);
    let req = incoming(&iso, "https://gitlab.com/explore", &[]);
    let view = iso.view();
    let mut log = RequestContext::new(&view, &req, None).log;
    assert_eq!(
        log_plan(iso.config.request_logging, &log, || 0.5).min_status,
        500
    );
    assert_eq!(
        log_plan(iso.config.request_logging, &log, || 0.001).min_status,
        0
    );
    log.add_error("service down");
    assert_eq!(
        log_plan(iso.config.request_logging, &log, || 0.5).min_status,
        0
    );
}

#[test]
fn failures_become_answers_with_their_status_and_log() {
    let (iso, _) = isolate_with(&[("GITLAB_RULES_CONFIG", "cells")]);
    let req = incoming(&iso, "https://gitlab.com/explore", &[]);
    let routed = decided(&iso, &req);
    match plan(&iso, &req, Some(&routed)) {
        Plan::Answer { answer, log } => {
            assert_eq!(answer.status, 502);
            assert_eq!(answer.body, "gitlab-http-router: no upstream configured\n");
            let log = log.expect("logged");
            assert_eq!(log.min_status, 0);
            assert!(
                log.tail.contains("no legacy cell configured"),
                "{}",
                log.tail
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_rejection_is_answered_by_the_router() {
    let (iso, _) = isolate_with(&[
        ("GITLAB_RULES_CONFIG", "container_registry"),
        ("GITLAB_PROXY_HOST", "registry.example"),
    ]);
    let req = incoming(
        &iso,
        "https://registry.gitlab.com/v2/a%2Fb/manifests/latest",
        &[],
    );
    let routed = decided(&iso, &req);
    match plan(&iso, &req, Some(&routed)) {
        Plan::Answer { answer, log } => {
            assert_eq!(answer.status, 400);
            assert!(log.unwrap().head.contains(r#""action":"reject""#));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_write_during_an_outage_is_refused_with_retry_after_and_a_read_falls_back() {
    use crate::resolve::Resolution;
    let (iso, _) = isolate_with(&[
        ("GITLAB_RULES_CONFIG", "container_registry"),
        ("GITLAB_PROXY_HOST", "registry.example"),
        ("GITLAB_TOPOLOGY_BREAKER_OPEN_MS", "2500"),
    ]);
    let outage = Resolution {
        classification: None,
        level: CacheLevel::Fallback,
        attempts: 1,
        service_ms: Some(3),
        coalesced: false,
        error: Some(Service::Topology.failed(ServiceFailure::Unreachable("refused".into()))),
    };
    let mut push = incoming(
        &iso,
        "https://registry.gitlab.com/v2/group/app/blobs/uploads/",
        &[],
    );
    push.parts.method = "POST".into();
    let routed = Routed {
        resolution: Some(outage.clone()),
        ..decided(&iso, &push)
    };
    assert_eq!(routed.decision.rule_id, Some("registry_repository_write"));
    match plan(&iso, &push, Some(&routed)) {
        Plan::Answer { answer, log } => {
            assert_eq!(answer.status, 503);
            assert!(answer
                .headers
                .contains(&("retry-after".to_string(), "3".to_string())));
            assert!(
                answer.body.contains(r#""code":"UNAVAILABLE""#),
                "{}",
                answer.body
            );
            let log = log.expect("logged");
            assert!(log.head.contains(r#""cache":"fallback""#), "{}", log.head);
            assert!(
                log.tail.contains("refused; topology service unavailable"),
                "{}",
                log.tail
            );
        }
        other => panic!("{other:?}"),
    }
    // The same with a stale entry, or a read: forwarded as before.
    let stale = Routed {
        resolution: Some(Resolution {
            level: CacheLevel::Stale,
            classification: Some(crate::resolve::topology::Classification::NotFound),
            ..outage.clone()
        }),
        ..decided(&iso, &push)
    };
    assert!(!stale.unavailable());
    let pull = incoming(
        &iso,
        "https://registry.gitlab.com/v2/group/app/manifests/latest",
        &[],
    );
    let routed = Routed {
        resolution: Some(outage),
        ..decided(&iso, &pull)
    };
    assert_eq!(
        forward_of(plan(&iso, &pull, Some(&routed))).url,
        "https://registry.example/v2/group/app/manifests/latest"
    );
}

#[test]
fn a_stale_not_found_that_handed_a_request_on_is_in_its_log_line() {
    use crate::resolve::topology::Classification;
    use crate::resolve::Resolution;
    let (iso, _) = isolate_with(LEGACY);
    let req = incoming(&iso, "https://gitlab.com/some-group/app", &[]);
    let rules = iso.ruleset.as_ref().unwrap();
    let path_rule = rules.decide(&req.parts);
    let next = path_rule.next_on_not_found.expect("a path rule");
    let routed = Routed {
        decision: rules.decide_from(&req.parts, next),
        resolution: None,
        fell_through: vec![(
            path_rule.rule_id.unwrap(),
            Resolution {
                classification: Some(Classification::NotFound),
                level: CacheLevel::Stale,
                attempts: 3,
                service_ms: Some(120),
                coalesced: false,
                error: Some(Service::Topology.failed(ServiceFailure::Status(503))),
            },
        )],
        shadow: None,
    };
    let f = forward_of(plan(&iso, &req, Some(&routed)));
    assert!(f.log.head.contains(r#""cache":"stale""#), "{}", f.log.head);
    assert!(
        f.log.head.contains(r#""fell_through":["path_namespace"]"#),
        "{}",
        f.log.head
    );
    assert!(
        f.log
            .tail
            .contains("path_namespace: topology service answered status 503"),
        "{}",
        f.log.tail
    );
    assert_eq!(f.log.min_status, 0, "notable: written whatever the status");
}

const CELLS: &[(&str, &str)] = &[
    ("GITLAB_RULES_CONFIG", "cells"),
    ("GITLAB_PROXY_HOST", "legacy.example:8080"),
    ("GITLAB_UPSTREAM_SCHEME", "http"),
    (
        "GITLAB_CELLS",
        r#"[{"id": 1, "address": "legacy.example:8080"},
            {"id": 2, "address": "cell2.example", "registry_address": "registry2.example"},
            {"id": 3, "address": "cell3.example"}]"#,
    ),
    ("GITLAB_CELL_FAILURES", "3"),
];

/// `req` routed by its rule with the Topology Service failing and
/// nothing cached.
fn service_down<'a>(iso: &'a Isolate, req: &Incoming) -> Routed<'a> {
    use crate::resolve::Resolution;
    Routed {
        decision: iso.ruleset.as_ref().unwrap().decide(&req.parts),
        resolution: Some(Resolution {
            classification: None,
            level: CacheLevel::Fallback,
            attempts: 3,
            service_ms: Some(900),
            coalesced: false,
            error: Some(Service::Topology.failed(ServiceFailure::Timeout(300))),
        }),
        fell_through: Vec::new(),
        shadow: None,
    }
}

#[test]
fn listed_cells_are_allowed_upstreams() {
    let (iso, errors) = isolate_with(CELLS);
    assert!(
        errors.iter().all(|e| !e.contains("GITLAB_CELLS")),
        "{errors:?}"
    );
    assert!(iso.allowed.allows("cell3.example"));
    assert!(iso.allowed.allows("registry2.example"));
    assert!(!iso.allowed.allows("cell4.example"));
}

#[test]
fn without_the_service_a_listed_session_prefix_reaches_its_cell() {
    let (iso, _) = isolate_with(CELLS);
    let cookie = format!("_gitlab_session=cell-2-{}", "0a".repeat(16));
    let req = incoming(&iso, "https://gitlab.com/dashboard", &[("cookie", &cookie)]);
    let f = forward_of(plan(&iso, &req, Some(&service_down(&iso, &req))));
    assert_eq!(f.url, "http://cell2.example/dashboard");
    assert!(f.log.head.contains(r#""cache":"static""#), "{}", f.log.head);
    assert!(
        f.log.head.contains(r#""cell":2,"chosen_by":"static""#),
        "{}",
        f.log.head
    );
    assert!(f.log.tail.contains("timed out"), "{}", f.log.tail);
    assert_eq!(
        f.report.map(|r| r.circuit),
        Some(cells::circuit_index(1, cells::Address::Web))
    );

    // A prefix no listed cell has: the legacy cell, as before.
    let cookie = format!("_gitlab_session=cell-9-{}", "0a".repeat(16));
    let req = incoming(&iso, "https://gitlab.com/dashboard", &[("cookie", &cookie)]);
    let f = forward_of(plan(&iso, &req, Some(&service_down(&iso, &req))));
    assert_eq!(f.url, "http://legacy.example:8080/dashboard");
    assert!(
        f.log.head.contains(r#""cache":"fallback""#),
        "{}",
        f.log.head
    );
    assert!(
        f.log.head.contains(r#""chosen_by":"legacy""#),
        "{}",
        f.log.head
    );
}

#[test]
fn an_open_circuit_answers_503_at_once_naming_the_cell() {
    let (iso, _) = isolate_with(CELLS);
    let cookie = format!("_gitlab_session=cell-3-{}", "0a".repeat(16));
    let req = incoming(&iso, "https://gitlab.com/dashboard", &[("cookie", &cookie)]);
    for _ in 0..3 {
        cell_outcome_for(&iso, 2, 0);
    }
    match plan(&iso, &req, Some(&service_down(&iso, &req))) {
        Plan::Answer { answer, log } => {
            assert_eq!(answer.status, 503);
            assert!(
                answer
                    .headers
                    .contains(&("retry-after".to_string(), "10".to_string())),
                "{answer:?}"
            );
            let log = log.unwrap();
            assert_eq!(log.min_status, 0);
            assert!(
                log.head.contains(r#""cell":3,"chosen_by":"circuit_open""#),
                "{}",
                log.head
            );
            assert!(
                log.tail.contains(
                    "cell 3 (cell3.example) unavailable: circuit open (its requests failed)"
                ),
                "{}",
                log.tail
            );
        }
        other => panic!("{other:?}"),
    }
    // Other cells are untouched.
    let cookie = format!("_gitlab_session=cell-2-{}", "0a".repeat(16));
    let req = incoming(&iso, "https://gitlab.com/dashboard", &[("cookie", &cookie)]);
    forward_of(plan(&iso, &req, Some(&service_down(&iso, &req))));
}

/// What `cellOutcome` does for a GET to `cell`'s web address sent a
/// second before, without the thread-local isolate (counting gateway
/// statuses, as a rule may).
fn cell_outcome_for(iso: &Isolate, cell: usize, status: u16) {
    let outcome = Outcome::of(status, false, true);
    let now = iso.now_ms();
    iso.health.borrow_mut().record(
        cells::circuit_index(cell, cells::Address::Web),
        outcome,
        now - 1_000,
        now,
        false,
        true,
    );
}

#[test]
fn sign_in_is_spread_over_the_cells_whose_circuit_is_closed() {
    let (iso, _) = isolate_with(CELLS);
    let req = incoming(&iso, "https://gitlab.com/users/sign_in", &[]);
    let mut seen = Vec::new();
    for random in [0.1, 0.5, 0.9] {
        iso.platform.random.set(random);
        let routed = decided(&iso, &req);
        let f = forward_of(plan(&iso, &req, Some(&routed)));
        assert!(
            f.log.head.contains(r#""chosen_by":"spread""#),
            "{}",
            f.log.head
        );
        seen.push(f.url);
    }
    assert_eq!(
        seen,
        [
            "http://legacy.example:8080/users/sign_in",
            "http://cell2.example/users/sign_in",
            "http://cell3.example/users/sign_in"
        ]
    );
    // Every cell failing: the legacy cell, with an error.
    for cell in 0..3 {
        for _ in 0..3 {
            cell_outcome_for(&iso, cell, 503);
        }
    }
    let routed = decided(&iso, &req);
    match plan(&iso, &req, Some(&routed)) {
        // The legacy cell is listed too: its circuit answers.
        Plan::Answer { answer, .. } => assert_eq!(answer.status, 503),
        other => panic!("{other:?}"),
    }
}

#[test]
fn only_classified_requests_get_a_not_found_delay() {
    let (iso, _) = isolate_with(&[
        ("GITLAB_RULES_CONFIG", "cells"),
        ("GITLAB_NOT_FOUND_DELAY_MS", "50-250"),
    ]);
    assert_eq!(
        refusal::not_found_deadline(&iso.config.forward_settings(), true, || 0.0),
        50
    );
    assert_eq!(
        refusal::not_found_deadline(&iso.config.forward_settings(), true, || 0.999),
        250
    );
    assert_eq!(
        refusal::not_found_deadline(&iso.config.forward_settings(), false, || panic!(
            "not drawn"
        )),
        0
    );
    let (off, _) = isolate_with(LEGACY);
    assert_eq!(
        refusal::not_found_deadline(&off.config.forward_settings(), true, || panic!("not drawn")),
        0
    );
    // A fixed route's plan carries none.
    let req = incoming(&off, "https://gitlab.com/users/sign_in", &[]);
    let routed = decided(&off, &req);
    assert_eq!(
        forward_of(plan(&off, &req, Some(&routed))).not_found_deadline_ms,
        0
    );
}

fn incoming_method(iso: &Isolate, method: &str, url: &str, headers: &[(&str, &str)]) -> Incoming {
    let mut req = incoming(iso, url, headers);
    req.parts.method = method.to_string();
    req
}

#[test]
fn trace_and_connect_are_answered_405_by_the_router() {
    let (iso, _) = isolate_with(LEGACY);
    for method in ["TRACE", "CONNECT", "trace"] {
        let req = incoming_method(&iso, method, "https://gitlab.com/help", &[]);
        match plan(&iso, &req, Some(&decided(&iso, &req))) {
            Plan::Answer { answer, .. } => {
                assert_eq!(answer.status, 405, "{method}");
                assert!(answer.headers.iter().any(|(n, _)| n == "allow"));
            }
            other => panic!("{method}: {other:?}"),
        }
    }
}

#[test]
fn a_get_or_head_never_forwards_a_body_other_methods_do() {
    let (iso, _) = isolate_with(LEGACY);
    for (method, body) in [
        ("GET", false),
        ("HEAD", false),
        ("POST", true),
        ("PUT", true),
        ("DELETE", true),
    ] {
        let req = incoming_method(
            &iso,
            method,
            "https://gitlab.com/help",
            &[("content-length", "0")],
        );
        let f = forward_of(plan(&iso, &req, Some(&decided(&iso, &req))));
        assert_eq!(f.body, body, "{method}");
    }
}

#[test]
fn a_version_override_needs_the_smoke_test_secret() {
    let override_header = (
        "cloudflare-workers-version-overrides",
        r#"gitlab-http-router="v2""#,
    );
    let (without, _) = isolate_with(LEGACY);
    let (with, _) = isolate_with(&[LEGACY, &[("GITLAB_SMOKE_TEST_SECRET", "s3cret")]].concat());
    let status = |iso: &Isolate, headers: &[(&str, &str)]| {
        let req = incoming(iso, "https://gitlab.com/users/sign_in", headers);
        match plan(iso, &req, Some(&decided(iso, &req))) {
            Plan::Answer { answer, .. } => answer.status,
            Plan::Forward(_) => 200,
        }
    };
    assert_eq!(status(&without, &[override_header]), 403);
    assert_eq!(
        status(
            &without,
            &[override_header, ("x-gitlab-http-router-smoke-test", "")]
        ),
        403
    );
    assert_eq!(status(&with, &[override_header]), 403);
    assert_eq!(
        status(
            &with,
            &[
                override_header,
                ("x-gitlab-http-router-smoke-test", "guess")
            ]
        ),
        403
    );
    assert_eq!(
        status(
            &with,
            &[
                override_header,
                ("x-gitlab-http-router-smoke-test", "s3cret")
            ]
        ),
        200
    );
    assert_eq!(status(&with, &[]), 200, "no override: routed as ever");
}

#[test]
fn a_smoke_test_is_told_its_route_and_no_other_request_is() {
    let (iso, _) = isolate_with(&[CELLS, &[("GITLAB_SMOKE_TEST_SECRET", "s3cret")]].concat());
    let route = |path: &str, headers: &[(&str, &str)]| {
        let req = incoming(&iso, &format!("https://gitlab.com{path}"), headers);
        let f = forward_of(plan(&iso, &req, Some(&service_down(&iso, &req))));
        f.response_set
            .iter()
            .map(|(n, v)| format!("{n}: {v}"))
            .collect::<Vec<_>>()
    };
    let cookie = format!("_gitlab_session=cell-2-{}", "0a".repeat(16));
    let smoke = ("x-gitlab-http-router-smoke-test", "s3cret");
    assert_eq!(
        route("/dashboard", &[("cookie", &cookie), smoke]),
        [
            "x-gitlab-http-router-route-rule: session_cookie",
            "x-gitlab-http-router-route-cell: 2",
            "x-gitlab-http-router-route-upstream: cell2.example"
        ]
    );
    assert_eq!(
        route("/explore", &[smoke]),
        [
            "x-gitlab-http-router-route-rule: legacy",
            "x-gitlab-http-router-route-cell: 1",
            "x-gitlab-http-router-route-upstream: legacy.example:8080"
        ]
    );
    for headers in [
        &[("cookie", cookie.as_str())][..],
        &[
            ("cookie", &cookie),
            ("x-gitlab-http-router-smoke-test", "guess"),
        ],
        &[("cookie", &cookie), ("x-gitlab-http-router-smoke-test", "")],
    ] {
        assert!(route("/dashboard", headers).is_empty(), "{headers:?}");
    }
    let (no_secret, _) = isolate_with(CELLS);
    let req = incoming(&no_secret, "https://gitlab.com/dashboard", &[smoke]);
    let f = forward_of(plan(&no_secret, &req, Some(&decided(&no_secret, &req))));
    assert!(f.response_set.is_empty(), "no secret configured");
}

#[test]
fn a_route_header_value_is_visible_ascii() {
    let names = headers::route_names(
        true,
        Some(" odd\u{0}rule\r\nid é "),
        Some(3),
        "cell3.example",
    );
    assert_eq!(names[0].1, "oddruleid");
    assert_eq!(names[1].1, "3");
    assert_eq!(names[2].1, "cell3.example");
}

#[test]
fn tracestate_is_set_only_with_the_clients_own_traceparent() {
    let (iso, _) = isolate_with(LEGACY);
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let set = |headers: &[(&str, &str)]| {
        let req = incoming(&iso, "https://gitlab.com/help", headers);
        let f = forward_of(plan(&iso, &req, Some(&decided(&iso, &req))));
        f.set
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    };
    let kept = set(&[("traceparent", parent), ("tracestate", "congo=t61rcWkgMzE")]);
    assert!(
        kept.contains(&("tracestate".into(), "congo=t61rcWkgMzE".into())),
        "{kept:?}"
    );
    assert!(kept.contains(&("traceparent".into(), parent.into())));
    let replaced = set(&[
        ("traceparent", "00-nope"),
        ("tracestate", "congo=t61rcWkgMzE"),
    ]);
    assert!(
        replaced.iter().all(|(n, _)| n != "tracestate"),
        "{replaced:?}"
    );
    let future = format!("cc{}-{}", &parent[2..], "\"x".repeat(1000));
    let downgraded = set(&[("traceparent", &future)]);
    assert!(
        downgraded.contains(&("traceparent".into(), parent.into())),
        "{downgraded:?}"
    );
}

#[test]
fn separator_bytes_in_client_values_never_change_the_plan() {
    let (iso, _) = isolate_with(CELLS);
    let cookie = format!("_gitlab_session=cell-2-{}", "0a".repeat(16));
    let hostile = [
        ("connection", "x-foo\u{1}cookie"),
        ("cookie", cookie.as_str()),
        ("tracestate", "a=1\u{1}b"),
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\u{1}x",
        ),
        ("cf-connecting-ip", "1.2.3.4\u{1}cookie"),
    ];
    let req = incoming(&iso, "https://gitlab.com/dashboard?q=%01", &hostile);
    let plan = plan(&iso, &req, Some(&service_down(&iso, &req)));
    let encoded = plan.encode();
    let decoded = Plan::decode(&encoded).expect("the plan reads back");
    assert_eq!(decoded, plan);
    let f = forward_of(plan);
    assert!(f.drop.is_empty(), "{:?}", f.drop);
    assert_eq!(f.url, "http://cell2.example/dashboard?q=%01");
    for (name, value) in &f.set {
        assert!(!value.contains(['\u{0}', '\u{1}']), "{name}: {value:?}");
        assert_ne!(name.as_ref(), "tracestate");
    }
}

/// `req` routed by its rule with the service's (or a cache's) 404.
fn not_found<'a>(iso: &'a Isolate, req: &Incoming, level: CacheLevel) -> Routed<'a> {
    use crate::resolve::Resolution;
    Routed {
        decision: iso.ruleset.as_ref().unwrap().decide(&req.parts),
        resolution: Some(Resolution {
            classification: Some(crate::resolve::topology::Classification::NotFound),
            level,
            attempts: u32::from(level == CacheLevel::Service),
            service_ms: None,
            coalesced: false,
            error: None,
        }),
        fell_through: Vec::new(),
        shadow: None,
    }
}

#[test]
fn a_404_for_a_listed_session_prefix_is_routed_by_the_list_and_a_path_claims_is_not() {
    let (iso, _) = isolate_with(CELLS);
    for level in [CacheLevel::Service, CacheLevel::Memory, CacheLevel::Stale] {
        let cookie = format!("_gitlab_session=cell-2-{}", "0a".repeat(16));
        let req = incoming(&iso, "https://gitlab.com/dashboard", &[("cookie", &cookie)]);
        let f = forward_of(plan(&iso, &req, Some(&not_found(&iso, &req, level))));
        assert_eq!(f.url, "http://cell2.example/dashboard", "{level:?}");
        assert!(
            f.log.head.contains(r#""chosen_by":"static""#),
            "{}",
            f.log.head
        );
        assert!(
            f.log
                .tail
                .contains("answered 404 for a cell GITLAB_CELLS lists"),
            "{}",
            f.log.tail
        );
    }
    // A prefix no listed cell has: the 404 stands (the legacy cell).
    let cookie = format!("_gitlab_session=cell-9-{}", "0a".repeat(16));
    let req = incoming(&iso, "https://gitlab.com/dashboard", &[("cookie", &cookie)]);
    let f = forward_of(plan(
        &iso,
        &req,
        Some(&not_found(&iso, &req, CacheLevel::Service)),
    ));
    assert_eq!(f.url, "http://legacy.example:8080/dashboard");
    // A path claim's 404: the legacy cell, as documented.
    let req = incoming(&iso, "https://gitlab.com/cell2-group/app", &[]);
    let f = forward_of(plan(
        &iso,
        &req,
        Some(&not_found(&iso, &req, CacheLevel::Service)),
    ));
    assert_eq!(f.url, "http://legacy.example:8080/cell2-group/app");
    assert!(
        f.log.head.contains(r#""chosen_by":"legacy""#),
        "{}",
        f.log.head
    );
}

/// The metrics data point rides in every plan once the dataset is bound,
/// sampled or not, and names the kind of the error that answered; without
/// the dataset no point is planned.
#[test]
fn every_plan_carries_its_data_point_when_the_dataset_is_bound() {
    let vars = &[
        ("GITLAB_RULES_CONFIG", "cells"),
        ("GITLAB_PROXY_HOST", "legacy.example:8080"),
        ("GITLAB_REQUEST_LOG", "errors"),
        ("GITLAB_ENVIRONMENT", "staging"),
    ];
    let (unbound, _) = isolate_with(vars);
    let req = incoming(&unbound, "https://gitlab.com/help", &[]);
    let routed = decided(&unbound, &req);
    let f = forward_of(plan(&unbound, &req, Some(&routed)));
    assert_eq!(f.log.point, "", "no dataset, no point");
    let (mut iso, _) = isolate_with(vars);
    iso.state.version = Some("v-7".into());
    iso.state.bind_metrics();
    let req = incoming(&iso, "https://gitlab.com/help", &[]);
    let routed = decided(&iso, &req);
    let f = forward_of(plan(&iso, &req, Some(&routed)));
    assert_eq!(f.log.min_status, 500, "a routine line is not logged");
    let items: Vec<&str> = f.log.point.split(crate::wire::FIELD).collect();
    assert_eq!(
        items,
        [
            "staging", "v-7", "legacy", "proxy", "", "legacy", "", "", "", "", "", "", "0", "0",
            "0"
        ],
        "written whatever the log line's sampling"
    );
    // The router's own answer: the error's kind.
    let refused = incoming(&iso, "https://gitlab.com/help", &[]);
    let mut routed = decided(&iso, &refused);
    routed.decision.action = crate::decision::Action::Proxy {
        address: Some("not-allowed.example"),
    };
    match plan(&iso, &refused, Some(&routed)) {
        Plan::Answer { log: Some(log), .. } => {
            let items: Vec<&str> = log.point.split(crate::wire::FIELD).collect();
            assert_eq!(
                items[crate::metrics::item::ERROR_KIND],
                "upstream_not_allowed"
            );
            assert_eq!(items[crate::metrics::item::CHOSEN_BY], "fixed");
        }
        other => panic!("expected the router's answer, got {other:?}"),
    }
    match internal_error("boom", iso.state.metrics.as_deref()) {
        Plan::Answer { log: Some(log), .. } => assert!(
            log.point
                .starts_with("staging\u{0}v-7\u{0}\u{0}internal\u{0}"),
            "{:?}",
            log.point
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_request_evaluated_in_the_shadow_names_the_shadow_rule_in_its_point() {
    let vars = &[
        ("GITLAB_RULES_CONFIG", "session_token"),
        ("GITLAB_PROXY_HOST", "legacy.example:8080"),
    ];
    let (mut iso, _) = isolate_with(vars);
    iso.state = iso.state.with_shadow(shipped_ruleset("firstcell"));
    iso.state.bind_metrics();
    let shadow = iso.shadow.as_ref().expect("the shadow ruleset");
    let req = incoming(&iso, "https://gitlab.com/api/v4/projects", &[]);
    let shadow_rule = shadow.decide(&req.parts).rule_id.map(str::to_string);
    let active_rule = iso
        .ruleset
        .as_ref()
        .expect("rules")
        .decide(&req.parts)
        .rule_id
        .map(str::to_string);
    let (shadow_rule, active_rule) = (shadow_rule.as_deref(), active_rule.as_deref());
    assert_ne!(active_rule, shadow_rule, "the two rulesets differ here");
    // Share 0: nothing drawn, nothing evaluated, nothing in the point.
    let mut routed = decided(&iso, &req);
    let draw = || panic!("share 0 draws nothing");
    assert_eq!(iso.evaluate_shadow(0, draw, &req, &mut routed), None);
    assert_eq!(routed.shadow, None);
    let f = forward_of(plan(&iso, &req, Some(&routed)));
    let items: Vec<&str> = f.log.point.split(crate::wire::FIELD).collect();
    assert_eq!(items[crate::metrics::item::SHADOW_RULE], "");
    // Every request: the line states both decisions, the point the pair.
    let line = iso
        .evaluate_shadow(1_000_000, || 0.5, &req, &mut routed)
        .expect("a disagreement's line");
    let parsed: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(parsed["scope"], "shadow");
    assert_eq!(parsed["difference"], "rule");
    assert_eq!(parsed["ruleset"], "session_token");
    assert_eq!(parsed["shadow_ruleset"], "firstcell");
    assert_eq!(parsed["path"], "/api/v4/projects");
    assert_eq!(parsed["active"]["rule"].as_str(), active_rule);
    assert_eq!(parsed["shadow"]["rule"].as_str(), shadow_rule);
    let f = forward_of(plan(&iso, &req, Some(&routed)));
    let items: Vec<&str> = f.log.point.split(crate::wire::FIELD).collect();
    assert_eq!(
        items[crate::metrics::item::SHADOW_RULE],
        shadow_rule.unwrap_or(crate::metrics::SHADOW_NO_RULE)
    );
    assert_eq!(items[crate::metrics::item::SHADOW_DIFFERENCE], "rule");
    assert_eq!(items[crate::metrics::item::RULE], active_rule.unwrap_or(""));
}

#[test]
fn the_same_ruleset_in_the_shadow_agrees_without_a_line() {
    let vars = &[
        ("GITLAB_RULES_CONFIG", "session_token"),
        ("GITLAB_PROXY_HOST", "legacy.example:8080"),
    ];
    let (mut iso, _) = isolate_with(vars);
    iso.state = iso.state.with_shadow(shipped_ruleset("session_token"));
    let req = incoming(&iso, "https://gitlab.com/api/v4/projects", &[]);
    let mut routed = decided(&iso, &req);
    assert_eq!(
        iso.evaluate_shadow(1_000_000, || 0.5, &req, &mut routed),
        None
    );
    assert_eq!(
        routed.shadow,
        Some(crate::disagreement::Verdict {
            rule: routed.decision.rule_id,
            difference: None
        })
    );
}

#[test]
fn the_edge_reads_the_headers_both_rulesets_read() {
    let vars = &[
        ("GITLAB_RULES_CONFIG", "passthrough"),
        ("GITLAB_PROXY_HOST", "legacy.example:8080"),
    ];
    let (iso, _) = isolate_with(vars);
    let alone = iso.header_names.clone().expect("named headers");
    let with = iso
        .state
        .with_shadow(shipped_ruleset("session_token"))
        .header_names
        .expect("named headers");
    let session = shipped_ruleset("session_token").expect("shipped");
    let crate::select::HeaderInterest::Names(shadow_reads) = session.header_interest() else {
        panic!("session_token reads named headers");
    };
    assert!(!shadow_reads.is_empty());
    for name in shadow_reads {
        assert!(with.contains(name), "{name} is read for the shadow");
    }
    assert!(alone.iter().all(|n| with.contains(n)));
}

#[test]
fn a_request_handed_on_is_compared_by_its_first_decision() {
    use crate::resolve::topology::Classification;
    use crate::resolve::Resolution;
    let (mut iso, _) = isolate_with(LEGACY);
    iso.state = iso.state.with_shadow(shipped_ruleset("cells"));
    let req = incoming(&iso, "https://gitlab.com/some-group/app", &[]);
    let rules = iso.ruleset.as_ref().expect("cells");
    let first = rules.decide(&req.parts);
    let next = first.next_on_not_found.expect("a path rule");
    let mut routed = Routed {
        decision: rules.decide_from(&req.parts, next),
        resolution: None,
        fell_through: vec![(
            first.rule_id.expect("a rule"),
            Resolution {
                classification: Some(Classification::NotFound),
                level: CacheLevel::Service,
                attempts: 1,
                service_ms: Some(3),
                coalesced: false,
                error: None,
            },
        )],
        shadow: None,
    };
    assert_ne!(routed.decision.rule_id, first.rule_id, "handed on");
    // The same ruleset in the shadow agrees: the first decision is compared.
    assert_eq!(
        iso.evaluate_shadow(1_000_000, || 0.5, &req, &mut routed),
        None
    );
    assert_eq!(routed.shadow.map(|v| v.rule), Some(first.rule_id));
}
