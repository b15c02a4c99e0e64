//! The edge's pure parts, natively: settings to isolate state, header
//! filling, and the plan for decided requests (no signing key, so nothing
//! here touches a JS object).

use super::*;

fn isolate_with(vars: &[(&str, &str)]) -> (Isolate, Vec<String>) {
    let errors = RefCell::new(Vec::new());
    let mut iso = Isolate::from_lookup(
        |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        },
        |scope, message| errors.borrow_mut().push(format!("{scope}: {message}")),
        None,
    );
    iso.now = || 1_000_000.0;
    iso.random = || 0.5;
    (iso, errors.into_inner())
}

fn incoming(iso: &Isolate, url: &str, headers: &[(&str, &str)]) -> Incoming {
    let mut incoming = Incoming::parse(url, "GET".to_string()).expect("URL");
    let names = iso.header_names.as_ref().expect("named headers");
    let joined: Vec<&str> = names
        .iter()
        .map(|n| {
            headers
                .iter()
                .find(|(h, _)| h == n)
                .map_or(HEADER_ABSENT, |(_, v)| *v)
        })
        .collect();
    assert!(fill_headers(
        &mut incoming.parts,
        names,
        &joined.join(SEPARATOR.encode_utf8(&mut [0; 4]))
    ));
    incoming.trace = Trace::from_headers(
        incoming.parts.header(CF_RAY_HEADER),
        incoming.parts.header(TRACEPARENT_HEADER),
        |out| out.fill(0xab),
    );
    incoming
}

/// The ruleset's decision for `req`, as routed without a service.
fn decided<'a>(iso: &'a Isolate, req: &Incoming) -> Routed<'a> {
    Routed {
        decision: iso.ruleset.as_ref().expect("a ruleset").decide(&req.parts),
        resolution: None,
        fell_through: Vec::new(),
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
        upstream_failure_log(&log),
        log.error_open(UPSTREAM_FAILURE_STEP)
    );
    assert!(matches!(upstream_failure_log(&log), Cow::Borrowed(_)));
    log.add_error("the topology service timed out");
    let opening = upstream_failure_log(&log);
    assert_eq!(opening, log.error_open(UPSTREAM_FAILURE_STEP));
    assert!(
        opening.contains("timed out; upstream fetch failed: "),
        "{opening}"
    );
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
    let mut log = req.log(&iso);
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
    use router_core::resolve::Resolution;
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
        error: Some(RouterError::TopologyUnreachable("refused".into())),
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
            classification: Some(router_core::topology::Classification::NotFound),
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
    use router_core::resolve::Resolution;
    use router_core::topology::Classification;
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
                error: Some(RouterError::TopologyStatus(503)),
            },
        )],
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
    use router_core::resolve::Resolution;
    Routed {
        decision: iso.ruleset.as_ref().unwrap().decide(&req.parts),
        resolution: Some(Resolution {
            classification: None,
            level: CacheLevel::Fallback,
            attempts: 3,
            service_ms: Some(900),
            coalesced: false,
            error: Some(RouterError::TopologyTimeout(300)),
        }),
        fell_through: Vec::new(),
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
    assert_eq!(f.report.map(|r| r.cell), Some(1));

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

/// What `cellOutcome` does, without the thread-local isolate.
fn cell_outcome_for(iso: &Isolate, cell: usize, status: u16) {
    let failed = cells::is_failure(status, 1, false);
    iso.health.borrow_mut().record(cell, failed, iso.now_ms());
}

#[test]
fn sign_in_is_spread_over_the_cells_whose_circuit_is_closed() {
    let (mut iso, _) = isolate_with(CELLS);
    let req = incoming(&iso, "https://gitlab.com/users/sign_in", &[]);
    let mut seen = Vec::new();
    for random in [|| 0.1, || 0.5, || 0.9] {
        iso.random = random;
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
    assert_eq!(not_found_delay(&iso.config, true, || 0.0), 50);
    assert_eq!(not_found_delay(&iso.config, true, || 0.999), 250);
    assert_eq!(
        not_found_delay(&iso.config, false, || panic!("not drawn")),
        0
    );
    let (off, _) = isolate_with(LEGACY);
    assert_eq!(
        not_found_delay(&off.config, true, || panic!("not drawn")),
        0
    );
    // A fixed route's plan carries none.
    let req = incoming(&off, "https://gitlab.com/users/sign_in", &[]);
    let routed = decided(&off, &req);
    assert_eq!(
        forward_of(plan(&off, &req, Some(&routed))).not_found_delay_ms,
        0
    );
}

#[test]
fn a_learning_ruleset_gets_a_resolver_without_a_topology_service() {
    let (iso, errors) = isolate_with(&[
        ("GITLAB_RULES_CONFIG", "route_learning"),
        ("GITLAB_PROXY_HOST", "legacy.example"),
    ]);
    assert!(iso.resolver.is_some(), "{errors:?}");
    let (plain, _) = isolate_with(LEGACY);
    assert!(plain.resolver.is_none());
}

#[test]
fn header_values_that_hold_the_separator_are_asked_again() {
    let mut parts = RequestParts::default();
    let names = vec!["a".to_string(), "b".to_string()];
    assert!(!fill_headers(&mut parts, &names, "x\u{0}y\u{0}z"));
    assert!(parts.headers.is_empty(), "nothing kept from a mismatch");
    assert!(!fill_headers(&mut parts, &names, "x"), "too few values");
    assert!(parts.headers.is_empty());
    let mut parts = RequestParts::default();
    assert!(fill_headers(&mut parts, &names, "x\u{0}\u{1}"));
    assert_eq!(parts.headers, [("a".to_string(), "x".to_string())]);
    // Empty values and the last one present; one name alone.
    let mut parts = RequestParts::default();
    assert!(fill_headers(&mut parts, &names, "\u{0}é z"));
    assert_eq!(
        parts.headers,
        [
            ("a".to_string(), String::new()),
            ("b".to_string(), "é z".to_string())
        ]
    );
    let one = vec!["a".to_string()];
    assert!(fill_headers(&mut parts, &one, "\u{1}"));
    assert!(
        !fill_headers(&mut parts, &one, "\u{1}\u{0}"),
        "a separator in the last"
    );
    assert!(!fill_headers(&mut parts, &[], ""), "no names");
    assert_eq!(parts.headers.len(), 2, "nothing added by the mismatches");
}

#[test]
fn route_sync_input_splits_into_url_method_and_header_values() {
    assert_eq!(
        split_input("https://gitlab.com/a?b\u{0}GET\u{0}x\u{0}\u{1}".as_bytes()),
        Some(("https://gitlab.com/a?b", "GET", "x\u{0}\u{1}"))
    );
    assert_eq!(
        split_input("https://gitlab.com/\u{0}POST\u{0}".as_bytes()),
        Some(("https://gitlab.com/", "POST", "")),
        "no header wanted: an empty list"
    );
    assert_eq!(
        split_input(b"https://gitlab.com/\0GET"),
        None,
        "no header part"
    );
    assert_eq!(
        split_input(b"https://gitlab.com/\xff\0GET\0"),
        None,
        "not UTF-8"
    );
    // UTF-8 as TextEncoder writes it: a header value with a non-ASCII character.
    assert_eq!(
        split_input("https://gitlab.com/\u{0}GET\u{0}é".as_bytes()),
        Some(("https://gitlab.com/", "GET", "é"))
    );
}
