//! Regressions for inputs found by fuzzing (`crates/router-core/fuzz`) and by the hostile-input
//! end-to-end suite (`tests/e2e/hostile.test.mjs`), inputs written inline.
//!
//! The first tests below pin down edge cases the decoder and matcher targets kept reaching
//! (they found no crash) so that they stay boring; then the three problems the hostile suite
//! found through workerd; last, the crashes the whole-request target found (docs/fuzzing.md).

use router_core::forward::drops_header;
use router_core::select::transform::jwt_claims::{header_alg, unverified_claims};
use router_core::select::transform::routable_token::decode_routable_token;
use router_core::{Action, ClassifyKind, RequestParts, Ruleset};

const HEX32: &str = "0123456789abcdef0123456789abcdef";

fn session_token() -> Ruleset {
    Ruleset::from_json(
        "session_token",
        include_str!("../../../rules/session_token.json"),
    )
    .expect("rules/session_token.json compiles")
}

fn container_registry() -> Ruleset {
    Ruleset::from_json(
        "container_registry",
        include_str!("../../../rules/container_registry.json"),
    )
    .expect("rules/container_registry.json compiles")
}

fn request(url: &str, headers: &[(&str, &str)]) -> RequestParts {
    let mut r = RequestParts::from_url("GET", url).expect("test URL");
    for (name, value) in headers {
        r.add_header(name, value);
    }
    r
}

// ---------------------------------------------------------------------------
// Fuzzing: edge cases the targets kept reaching (none crashed).

#[test]
fn routable_token_edge_inputs_are_refused_without_panicking() {
    let inputs: &[&[u8]] = &[
        b"",
        b".01.",
        b".01.00",
        b".01.000000000",
        b".01.zz0000000",
        b"\xff.01.000000000",
        b"a.01.01\xc3\xa90000000",
        "é.01.0000000000".as_bytes(),
        b"glpat-.01.000000000",
    ];
    for input in inputs {
        // Invalid UTF-8 reaches the router as replacement characters.
        let text = String::from_utf8_lossy(input);
        assert_eq!(decode_routable_token(&text), None, "{text:?}");
    }
    // Longer than MAX_TOKEN_LEN: refused before any work is done.
    assert_eq!(decode_routable_token(&"a".repeat(1 << 20)), None);
}

#[test]
fn jwt_edge_inputs_are_refused_without_panicking() {
    for token in [
        "",
        "..",
        "e30..",
        "e30.e30",
        "e30.e30.e30.e30",
        // {"alg":"none"} . [[[[...]]]] nested beyond serde_json's recursion limit
        &format!("eyJhbGciOiJub25lIn0.{}.", "W1tb".repeat(2000)),
        &"a".repeat(64 * 1024),
    ] {
        assert_eq!(unverified_claims(token), None, "{token:.40}");
        let _ = header_alg(token);
    }
}

#[test]
fn decide_survives_hostile_request_parts() {
    let rulesets = [session_token(), container_registry()];
    let long = "a".repeat(200_000);
    let cookies = (0..10_000)
        .map(|i| format!("c{i}={i}"))
        .collect::<Vec<_>>()
        .join("; ");
    let requests = [
        request("https://h/", &[("cookie", &cookies)]),
        request(
            "https://h/",
            &[("cookie", ";;;;=;=;==;\u{0};\u{ffff}=\u{10ffff}")],
        ),
        request(
            "https://h/",
            &[("private-token", &long), ("authorization", &long)],
        ),
        request(&format!("https://h/v2/{long}/manifests/x"), &[]),
        request(
            "https://h/jwt/auth?scope=%ZZ&scope=%C3%28&scope=repository:",
            &[],
        ),
        request("https://h/", &[("authorization", "Basic ====")]),
        request("https://h/", &[("authorization", "Basic A")]),
    ];
    for rules in &rulesets {
        for r in &requests {
            let d = rules.decide(r);
            assert!(d.rule_id.is_some());
        }
    }
}

// ---------------------------------------------------------------------------
// Hostile suite finding 1: the path the rules see must be the path fetch sends.
//
// workerd's `request.url` resolves literal `.` and `..` segments, but keeps `\` and the
// percent-encoded dot segments (`%2e`, `.%2E`, `%2E.`, `%2e%2e`). The edge forwards with
// `fetch`, whose WHATWG URL parser then turns `\` into `/` and resolves those segments. So
// `GET /v2/acme/img\..\..\cell3-group/x/manifests/y` was classified as a path no rule matches
// (legacy registry) and arrived at the legacy registry as `/v2/cell3-group/x/manifests/y`; and
// `GET /jwt/%2e/auth?scope=repository:acme/img:pull` was classified as "not /jwt/auth" and
// arrived at the legacy cell as `/jwt/auth`. The URL split must normalise the path as WHATWG
// does for http(s) URLs.

#[test]
fn url_paths_are_normalised_like_fetch_normalises_them() {
    for (url, path) in [
        ("https://h/jwt/%2e/auth", "/jwt/auth"),
        ("https://h/jwt/%2E/auth", "/jwt/auth"),
        ("https://h/jwt/x/%2e%2e/auth", "/jwt/auth"),
        ("https://h/jwt/x/.%2E/auth", "/jwt/auth"),
        ("https://h/jwt/x/%2E./auth", "/jwt/auth"),
        ("https://h/jwt\\auth", "/jwt/auth"),
        ("https://h/jwt\\x\\..\\auth", "/jwt/auth"),
        ("https://h/a/%2e%2E", "/"),
        ("https://h/a/b/%2e%2e", "/a/"),
        ("https://h/a/b/%2e", "/a/b/"),
        (
            "https://h/v2\\acme\\img\\manifests\\x",
            "/v2/acme/img/manifests/x",
        ),
        (
            "https://h/v2/acme/img\\..\\..\\cell3-group/x/manifests/y",
            "/v2/cell3-group/x/manifests/y",
        ),
        // Not dot segments: left alone, as WHATWG leaves them.
        ("https://h/a/.../b", "/a/.../b"),
        ("https://h/a/..%00/b", "/a/..%00/b"),
        ("https://h/a/b%2F..%2Fc", "/a/b%2F..%2Fc"),
        ("https://h/a//b", "/a//b"),
    ] {
        let got = RequestParts::from_url("GET", url).unwrap();
        assert_eq!(got.path, path, "{url}");
    }
}

#[test]
fn an_encoded_dot_segment_does_not_hide_the_registry_token_endpoint() {
    let rules = session_token();
    let r = request(
        "https://gitlab.example.com/jwt/x/%2e%2e/auth?service=container_registry&scope=repository:acme/img:pull",
        &[],
    );
    match rules.decide(&r).action {
        Action::Classify(c) => {
            assert_eq!(c.kind, ClassifyKind::parse("ROUTE").unwrap());
            assert_eq!(c.value.as_deref(), Some("acme/img"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_backslash_path_is_classified_as_the_registry_will_see_it() {
    let rules = container_registry();
    let r = request(
        "https://registry.example.com/v2/acme/img\\..\\..\\cell3-group/x/manifests/y",
        &[],
    );
    match rules.decide(&r).action {
        Action::Classify(c) => assert_eq!(c.value.as_deref(), Some("cell3-group/x")),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Hostile suite finding 2: cookie pieces are trimmed of HTTP whitespace (SP, HTAB) only.
//
// `RequestParts::cookies` used `str::trim`, which also strips Unicode white space (U+00A0,
// U+2003, U+3000, ...). `Cookie: _gitlab_session=cell-3-<hex>\u{a0}` (raw bytes C2 A0, which
// workerd decodes as UTF-8) therefore matched `^(cell-[0-9]+)-[0-9a-f]{32}$` and was routed to
// cell 3, although the cell receives, and Rails reads, a value ending in U+00A0.

#[test]
fn unicode_white_space_is_part_of_a_cookie() {
    for ws in ['\u{a0}', '\u{2003}', '\u{3000}', '\u{85}', '\u{feff}'] {
        let value = format!("cell-3-{HEX32}{ws}");
        let mut r = RequestParts::default();
        r.add_header("cookie", &format!("_gitlab_session={value}"));
        assert_eq!(
            r.cookies().collect::<Vec<_>>(),
            vec![("_gitlab_session", value.as_str())],
            "U+{:04X}",
            ws as u32
        );
        let mut r = RequestParts::default();
        r.add_header("cookie", &format!("a=1;{ws}_gitlab_session=cell-3-{HEX32}"));
        let names: Vec<_> = r.cookies().map(|(n, _)| n.to_string()).collect();
        assert_eq!(names, vec!["a".to_string(), format!("{ws}_gitlab_session")]);
    }
    // HTTP's own optional white space still goes.
    let mut r = RequestParts::default();
    r.add_header("cookie", " a = 1 ;\tb=2\t;  c=\"3\"  ");
    assert_eq!(
        r.cookies().collect::<Vec<_>>(),
        vec![("a", "1"), ("b", "2"), ("c", "3")]
    );
}

#[test]
fn a_session_cookie_padded_with_unicode_white_space_goes_to_the_legacy_cell() {
    let rules = session_token();
    for cookie in [
        format!("_gitlab_session=cell-3-{HEX32}\u{a0}"),
        format!("a=1;\u{3000}_gitlab_session=cell-3-{HEX32}"),
    ] {
        let d = rules.decide(&request(
            "https://gitlab.example.com/",
            &[("cookie", &cookie)],
        ));
        assert_eq!(d.rule_id, Some("legacy"), "{cookie:?}");
    }
}

// ---------------------------------------------------------------------------
// Hostile suite finding 3: a client's `Forwarded` header is dropped like its X-Forwarded-Host.
//
// The router drops the client's X-Forwarded-Host and sets its own, but a client's RFC 7239
// `Forwarded: host=evil.example;proto=https` went through. The container registry
// (distribution) prefers `Forwarded` over X-Forwarded-*: through the router, a blob upload
// answered `Location: https://evil.example/v2/<repo>/blobs/uploads/<uuid>` (checked against
// Debian's docker-registry 2.8). Rack 3 can read `Forwarded` too.

#[test]
fn a_clients_forwarded_header_is_not_forwarded() {
    let none: Vec<String> = Vec::new();
    assert!(drops_header("forwarded", &none, false));
    assert!(drops_header("forwarded", &none, true));
    // The client's X-Forwarded-For goes too: the router sets
    // it from CF-Connecting-IP. Still forwarded: what clients may send.
    assert!(drops_header("x-forwarded-for", &none, false));
    assert!(!drops_header("x-request-id", &none, false));
}

// ---------------------------------------------------------------------------
// Fuzzing the whole request (`request` target): crashes found (docs/fuzzing.md).

/// The plan an isolate with a legacy cell and no ruleset makes for `url`, encoded; `None`
/// when the URL is refused.
fn legacy_plan(url: &str, headers: &[(&str, &str)]) -> Option<String> {
    use router_core::config::Config;
    use router_core::forward::{self, Incoming};
    use router_core::isolate::IsolateState;
    let (config, _) = Config::from_lookup(|name| {
        (name == "GITLAB_PROXY_HOST").then(|| "legacy.example:8080".to_string())
    });
    let state = IsolateState::new(config, None);
    let platform = router_core::testutil::FakePlatform::at(1_700_000_000_000);
    let mut incoming = Incoming::parse(url, "GET".to_string())?;
    for (name, value) in headers {
        incoming.parts.add_header(name, value);
    }
    incoming.trace_from_headers(&platform);
    let view = state.forward_view(state.config.request_logging, false);
    let plan = forward::plan(&view, &platform, &incoming, None);
    let encoded = plan.encode();
    assert_eq!(
        router_core::wire::Plan::decode(&encoded).as_ref(),
        Some(&plan),
        "the plan does not decode to itself"
    );
    Some(encoded)
}

/// Found by `request`: `traceparent: 0` then `é` (C3 A9, as UTF-8, or as the
/// Latin-1 characters `Ã©`) then 60 × `a` panicked in `canonical_traceparent` (trace.rs),
/// which slices the first 55 bytes at fixed offsets inside the multi-byte character.
#[test]
fn a_traceparent_with_a_multi_byte_character_is_replaced_not_sliced() {
    let tail = "a".repeat(60);
    for traceparent in [format!("0\u{e9}{tail}"), format!("0\u{c3}\u{a9}{tail}")] {
        assert!(!router_core::trace::is_traceparent(&traceparent));
        let plan = legacy_plan(
            "https://gitlab.example.com/explore",
            &[("traceparent", &traceparent)],
        )
        .expect("a plain URL");
        assert!(!plan.contains(&tail), "the client's traceparent was kept");
    }
}

/// Found by `request`: a NUL, CR or other control character in the URL's authority
/// (`https://gitlab.example.com;<NUL>`, `https://gitlab.example.com0<CR>`) reached the plan's
/// `X-Forwarded-Host` as it was: a NUL splits the plan's fields (the plan no longer decodes),
/// a CR is a header value `fetch` refuses. workerd's WHATWG URL holds neither, but the core
/// took them: such a URL is refused at ingest (`UrlParts::parse`: a 400).
#[test]
fn a_control_character_in_the_url_is_refused_at_ingest() {
    for url in [
        "https://gitlab.example.com;\u{0}",
        "https://gitlab.example.com0\r",
        "https://gitlab.example.com\r)",
        "https://gitlab.example.com\n/explore",
        "https://gitlab.example.com/a\u{0}b",
        "https://gitlab.example.com/a?c=\u{7f}",
    ] {
        assert_eq!(legacy_plan(url, &[]), None, "{url:?}");
    }
}
