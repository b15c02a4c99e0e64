use super::*;
use crate::select::transform::routable_token::encode_routable_token;

fn compile(json: &str) -> Ruleset {
    Ruleset::from_json("test", json).unwrap_or_else(|e| panic!("{e}"))
}

fn compile_err(json: &str) -> String {
    Ruleset::from_json("test", json).unwrap_err().to_string()
}

fn get(url: &str, headers: &[(&str, &str)]) -> RequestParts {
    let mut r = RequestParts::from_url("GET", url).unwrap();
    for (n, v) in headers {
        r.add_header(n, v);
    }
    r
}

fn classify_value(d: &Decision) -> Option<String> {
    match &d.action {
        Action::Classify(c) => c.value.clone(),
        _ => None,
    }
}

const SEED_SESSION: &str = r#"{"rules": [
  {"cookies": {"_gitlab_session": {"match_regex": "^(?<cell_name>cell-\\d+)-[0-9a-f]{32}$"}},
   "action": "classify", "classify": {"type": "SESSION_PREFIX", "value": "${cell_name}"}},
  {"action": "proxy"}
]}"#;

const ARRAY_SESSION: &str = r#"[
  {"id": "session", "match": {"type": "cookie", "regexName": "^_gitlab_session(_[0-9a-f]+)?$", "regexValue": "^(?<cell_name>cell-\\d+)-[0-9a-f]{32}$"},
   "action": "classify", "classify": {"type": "SESSION_PREFIX", "value": "${cell_name}"}},
  {"id": "default", "action": "proxy"}
]"#;

const HEX32: &str = "0123456789abcdef0123456789abcdef";

#[test]
fn seed_and_array_forms_decide_alike() {
    let prechecked = |json: &str| Ruleset::from_prechecked_json("test", json, &[]).unwrap();
    let with_schema = format!(
        r#"{{"$schema": "../schema/ruleset.schema.json", "description": "d", {}"#,
        &SEED_SESSION[1..]
    );
    for rules in [
        compile(SEED_SESSION),
        compile(ARRAY_SESSION),
        prechecked(SEED_SESSION),
        prechecked(ARRAY_SESSION),
        prechecked(&with_schema),
        prechecked(&format!("  \n{ARRAY_SESSION}")),
    ] {
        let d = rules.decide(&get(
            "https://gitlab.com/",
            &[("Cookie", &format!("_gitlab_session=cell-2-{HEX32}"))],
        ));
        assert_eq!(classify_value(&d).as_deref(), Some("cell-2"));
        assert_eq!(d.action.name(), "classify");
        let d = rules.decide(&get("https://gitlab.com/", &[]));
        assert_eq!(d.action, Action::Proxy { address: None });
    }
}

#[test]
fn session_cookie_with_hex_suffix_matches_by_name_regex() {
    let rules = compile(ARRAY_SESSION);
    let d = rules.decide(&get(
        "https://gitlab.com/",
        &[(
            "cookie",
            &format!("other=1; _gitlab_session_abc123=cell-3-{HEX32}"),
        )],
    ));
    assert_eq!(classify_value(&d).as_deref(), Some("cell-3"));
    // The legacy cell's session has no prefix: the catch-all takes it.
    let d = rules.decide(&get(
        "https://gitlab.com/",
        &[("cookie", &format!("_gitlab_session={HEX32}"))],
    ));
    assert_eq!(d.rule_id, Some("default"));
}

#[test]
fn first_identical_wins() {
    let rules = compile(
        r#"[
      {"id": "a", "match": {"type": "path", "regexValue": "^/api/"}, "action": "proxy", "proxy": {"address": "a.example.com"}},
      {"id": "b", "match": {"type": "path", "regexValue": "^/api/"}, "action": "proxy", "proxy": {"address": "b.example.com"}}
    ]"#,
    );
    let d = rules.decide(&get("https://gitlab.com/api/v4/user", &[]));
    assert_eq!(d.rule_id, Some("a"));
    assert_eq!(
        d.action,
        Action::Proxy {
            address: Some("a.example.com")
        }
    );
}

#[test]
fn all_matchers_of_a_rule_must_hold() {
    let rules = compile(
        r#"[
      {"id": "post-api", "match": [{"type": "path", "regexValue": "^/api/"}, {"type": "method", "regexValue": "^POST$"}],
       "action": "proxy", "proxy": {"address": "a.example.com"}}
    ]"#,
    );
    assert_eq!(
        rules.decide(&get("https://gitlab.com/api/x", &[])).rule_id,
        None
    );
    let post = RequestParts::from_url("POST", "https://gitlab.com/api/x").unwrap();
    assert_eq!(rules.decide(&post).rule_id, Some("post-api"));
}

#[test]
fn regexes_search_unless_anchored() {
    let rules = compile(
        r#"[{"id": "r", "match": {"type": "path", "regexValue": "jobs/request"}, "action": "proxy"}]"#,
    );
    assert_eq!(
        rules
            .decide(&get("https://gitlab.com/api/v4/jobs/request", &[]))
            .rule_id,
        Some("r")
    );
}

#[test]
fn header_names_are_case_insensitive() {
    let rules = compile(
        r#"[{"id": "h", "match": {"type": "header", "name": "PRIVATE-Token", "regexValue": "^(?<t>.+)$"},
        "action": "classify", "classify": {"type": "ROUTE", "value": "${t}"}}]"#,
    );
    assert_eq!(
        rules.header_interest(),
        &HeaderInterest::Names(vec!["private-token".into()])
    );
    let d = rules.decide(&get("https://gitlab.com/", &[("private-token", "abc")]));
    assert_eq!(classify_value(&d).as_deref(), Some("abc"));
}

#[test]
fn header_name_regex_needs_every_header() {
    let rules = compile(
        r#"[{"id": "h", "match": {"type": "header", "regexName": "^x-runner-"}, "action": "proxy"}]"#,
    );
    assert_eq!(rules.header_interest(), &HeaderInterest::All);
    assert_eq!(
        rules
            .decide(&get("https://gitlab.com/", &[("X-Runner-Token", "x")]))
            .rule_id,
        Some("h")
    );
}

#[test]
fn query_matchers_see_decoded_values_and_capture_them() {
    let rules = compile(
        r#"[{"id": "jwt", "match": [{"type": "path", "regexValue": "^/jwt/auth$"},
        {"type": "query", "name": "scope", "regexValue": "^repository:(?<repo>[^:]+):"}],
        "action": "classify", "classify": {"type": "ROUTE", "value": "${repo}"}}]"#,
    );
    let d = rules.decide(&get("https://gitlab.com/jwt/auth?service=container_registry&scope=repository%3Agitlab-org%2Fgitlab%3Apull", &[]));
    assert_eq!(classify_value(&d).as_deref(), Some("gitlab-org/gitlab"));
}

#[test]
fn host_and_method_list_matchers() {
    let rules = compile(
        r#"{"rules": [{"method": ["get", "HEAD"], "action": "proxy", "proxy": {"address": "ro.example.com"}},
        {"id": "h", "match": {"type": "host", "regexValue": "^registry\\."}, "action": "proxy"}]}"#,
    );
    assert_eq!(
        rules.decide(&get("https://gitlab.com/", &[])).rule_id,
        Some("rule-1")
    );
    let put = RequestParts::from_url("PUT", "https://registry.gitlab.com/").unwrap();
    assert_eq!(rules.decide(&put).rule_id, Some("h"));
}

#[test]
fn routable_token_transform_yields_the_cell_id() {
    let rules = compile(
        r#"[{"id": "pat", "match": {"type": "header", "name": "private-token", "regexValue": "^(?<token>glpat-.+)$"},
        "transform": {"type": "routable-token-payload", "input": "${token}", "output": "decoded"},
        "validate": {"exist": ["${decoded.c}"]},
        "action": "classify", "classify": {"type": "CELL_ID", "value": "${decoded.c}"}},
        {"id": "default", "action": "proxy"}]"#,
    );
    let token = encode_routable_token("glpat-", [7; 16], &[('c', 11), ('o', 1), ('u', 42)]);
    let d = rules.decide(&get(
        "https://gitlab.com/api/v4/user",
        &[("PRIVATE-TOKEN", &token)],
    ));
    assert_eq!(d.rule_id, Some("pat"));
    assert_eq!(classify_value(&d).as_deref(), Some("11"));

    let mut corrupted = token.clone();
    corrupted.replace_range(8..9, if &token[8..9] == "A" { "B" } else { "A" });
    let d = rules.decide(&get(
        "https://gitlab.com/api/v4/user",
        &[("PRIVATE-TOKEN", &corrupted)],
    ));
    assert_eq!(
        d.rule_id,
        Some("default"),
        "a token that fails its CRC classifies nothing"
    );
}

#[test]
fn base64_transform_reads_basic_auth_passwords() {
    let rules = compile(
        r#"[{"id": "basic", "match": {"type": "header", "name": "authorization", "regexValue": "^Basic (?<b64>[A-Za-z0-9+/=]+)$"},
        "transform": [{"type": "base64", "input": "${b64}", "output": "creds"}],
        "action": "classify", "classify": {"type": "USERNAME", "value": "${creds}"}}]"#,
    );
    let d = rules.decide(&get(
        "https://gitlab.com/",
        &[("authorization", "Basic dXNlcjpwYXNz")],
    ));
    assert_eq!(classify_value(&d).as_deref(), Some("user:pass"));
    let d = rules.decide(&get(
        "https://gitlab.com/",
        &[("authorization", "Basic ////")],
    ));
    assert_eq!(
        d.rule_id, None,
        "undecodable input makes the template fail, so the rule does not match"
    );
}

#[test]
fn templates_mix_literals_and_captures() {
    let rules = compile(
        r#"[{"id": "c", "match": {"type": "path", "regexValue": "^/c/(?<n>\\d+)"},
        "action": "classify", "classify": {"type": "SESSION_PREFIX", "value": "cell-${n}"}}]"#,
    );
    assert_eq!(
        classify_value(&rules.decide(&get("https://gitlab.com/c/7/x", &[]))).as_deref(),
        Some("cell-7")
    );
}

#[test]
fn first_cell_needs_no_value_and_targets_registry() {
    let rules = compile(
        r#"[{"id": "v2", "match": {"type": "path", "regexValue": "^/v2/$"},
        "action": "classify", "classify": {"type": "FIRST_CELL", "target": "registry"}}]"#,
    );
    let d = rules.decide(&get("https://registry.gitlab.com/v2/", &[]));
    match d.action {
        Action::Classify(c) => {
            assert_eq!(c.body(), r#"{"type":"FIRST_CELL","target":"registry"}"#);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn rollout_includes_excludes_and_buckets() {
    let json = |pct: f64| {
        format!(
            r#"[{{"id": "new", "match": {{"type": "path", "regexValue": "^/v2/(?<repo>.+)/(manifests|blobs)/"}},
        "rollout": {{"value": "${{repo}}", "include": ["^gitlab-org/"], "exclude": ["^gitlab-org/secret/"], "percentage": {pct}, "seed": "s1"}},
        "action": "proxy", "proxy": {{"address": "new-registry.example.com"}}}},
        {{"id": "old", "action": "proxy"}}]"#
        )
    };
    let all = compile(&json(100.0));
    let url = |repo: &str| format!("https://registry.gitlab.com/v2/{repo}/manifests/latest");
    assert_eq!(
        all.decide(&get(&url("gitlab-org/a"), &[])).rule_id,
        Some("new")
    );
    assert_eq!(all.decide(&get(&url("other/a"), &[])).rule_id, Some("old"));
    assert_eq!(
        all.decide(&get(&url("gitlab-org/secret/a"), &[])).rule_id,
        Some("old")
    );
    let none = compile(&json(0.0));
    assert_eq!(
        none.decide(&get(&url("gitlab-org/a"), &[])).rule_id,
        Some("old")
    );

    // Raising the percentage only ever adds repositories.
    let five = compile(&json(5.0));
    let twenty_five = compile(&json(25.0));
    let (mut at5, mut at25) = (0, 0);
    for i in 0..10_000 {
        let r = get(
            &url(&format!("gitlab-org/group-{}/project-{i}", i % 97)),
            &[],
        );
        let a = five.decide(&r).rule_id == Some("new");
        let b = twenty_five.decide(&r).rule_id == Some("new");
        assert!(!a || b, "repository {i} moved back");
        at5 += a as u32;
        at25 += b as u32;
    }
    assert!((400..=600).contains(&at5), "5% gave {at5} of 10000");
    assert!((2400..=2600).contains(&at25), "25% gave {at25} of 10000");
}

#[test]
fn rollout_bucket_is_stable_and_seeded() {
    // Buckets decide which repositories migrate: they must not change
    // between releases.
    assert_eq!(rollout_bucket("s", "a/b"), 7977);
    let moved = (0..1000)
        .filter(|i| {
            rollout_bucket("s1", &format!("r{i}")) != rollout_bucket("s2", &format!("r{i}"))
        })
        .count();
    assert!(moved > 900);
}

#[test]
fn rejects_what_cannot_work_with_clear_messages() {
    let cases = [
        ("{", "not valid JSON"),
        ("{}", "expected"),
        ("[]", "has no rules"),
        ("42", "expected"),
        (
            r#"[{"id": "x", "action": "proxy", "bogus": 1}]"#,
            "rule \"x\": unknown field `bogus`",
        ),
        (
            r#"[{"id": "x", "match": {"type": "path", "regexValue": "("}, "action": "proxy"}]"#,
            "rule \"x\": match[0].regexValue: invalid regex",
        ),
        (
            r#"[{"id": "x", "match": {"type": "path", "regexValue": "^/(?<a>x)"}, "action": "classify", "classify": {"type": "ROUTE", "value": "${b}"}}]"#,
            "rule \"x\": classify.value: ${b} names no capture group",
        ),
        (
            r#"[{"id": "all", "action": "proxy"}, {"id": "late", "action": "proxy"}]"#,
            "rule \"late\": unreachable: rule \"all\"",
        ),
        (
            r#"[{"id": "x", "action": "classify", "classify": {"type": "SESION_PREFIX", "value": "a"}}]"#,
            "unknown type \"SESION_PREFIX\"",
        ),
        (
            r#"[{"id": "x", "action": "classify"}]"#,
            "no classify block",
        ),
        (
            r#"[{"id": "x", "action": "classify", "classify": {"type": "ROUTE"}}]"#,
            "ROUTE needs a value",
        ),
        (
            r#"[{"id": "x", "action": "teleport"}]"#,
            "not classify, proxy, spread or reject",
        ),
        (
            r#"[{"id": "x", "action": "reject", "reject": {"status": 500}}]"#,
            "not a client error",
        ),
        (r#"[{"id": "x", "action": "reject"}]"#, "no reject block"),
        (
            r#"[{"id": "x", "action": "proxy", "reject": {"status": 400}}]"#,
            "the action is not reject",
        ),
        (
            r#"[{"id": "x", "action": "proxy", "proxy": {"address": "http://evil/"}}]"#,
            "proxy.address",
        ),
        (
            r#"[{"id": "x", "match": {"type": "header", "regexValue": "a"}, "action": "proxy"}]"#,
            "needs name or regexName",
        ),
        (
            r#"[{"id": "x", "match": {"type": "path", "name": "a", "regexValue": "a"}, "action": "proxy"}]"#,
            "takes no name",
        ),
        (
            r#"[{"id": "x", "match": {"type": "body"}, "action": "proxy"}]"#,
            "unknown matcher \"body\"",
        ),
        (
            r#"[{"id": "x", "match": {"type": "header", "name": "t", "regexValue": "(?<t>.+)"}, "transform": {"type": "routable-token-payload", "input": "${t}", "output": "d"}, "action": "classify", "classify": {"type": "CELL_ID", "value": "${d.z}"}}]"#,
            "no field \"z\"",
        ),
        (
            r#"[{"id": "x", "transform": {"type": "rot13", "input": "a", "output": "d"}, "action": "proxy"}]"#,
            "unknown transform",
        ),
        (
            r#"[{"id": "x", "action": "proxy"}, {"id": "x", "match": {"type": "path", "regexValue": "a"}, "action": "proxy"}]"#,
            "unreachable",
        ),
        (
            r#"[{"id": "x", "match": {"type": "path", "regexValue": "a"}, "action": "proxy"}, {"id": "x", "action": "proxy"}]"#,
            "duplicate rule id",
        ),
        (
            r#"[{"id": "x", "rollout": {"value": "a", "percentage": 101}, "action": "proxy"}]"#,
            "not within 0..=100",
        ),
        (
            r#"[{"id": "m", "match": {"type": "path", "regexValue": "a"}, "action": "proxy"},
                {"id": "c", "match": {"type": "path", "regexValue": "b"}, "action": "proxy"},
                {"id": "x", "match": {"type": "path", "regexValue": "c"}, "action": "proxy"},
                {"id": "a", "match": {"type": "path", "regexValue": "d"}, "action": "proxy"},
                {"id": "c", "action": "proxy"}]"#,
            "duplicate rule id \"c\"",
        ),
    ];
    for (json, expected) in cases {
        let err = compile_err(json);
        assert!(
            err.contains(expected),
            "for {json}\n  got: {err}\n  expected to contain: {expected}"
        );
        assert!(err.starts_with("test"), "errors name the ruleset: {err}");
    }
}

#[test]
fn prechecked_json_that_does_not_load_is_an_error() {
    for json in [
        "",
        "[]",
        "{}",
        "[{\"action\": 1}]",
        "{\"rules\": [], \"x\": 1}",
        "nope",
    ] {
        assert!(
            Ruleset::from_prechecked_json("test", json, &[]).is_err(),
            "{json}"
        );
    }
}

#[test]
fn snake_case_field_names_load() {
    let rules = compile(
        r#"[{"id": "s", "match": {"type": "cookie", "regex_name": "^_gitlab_session", "regex_value": "^(?<p>cell-\\d+)-"},
        "action": "classify", "classify": {"type": "SESSION_PREFIX", "value": "${p}"}}]"#,
    );
    assert_eq!(rules.rules().len(), 1);
}

/// The rulesets the worker can be built with (`rules/*.json`, and
/// `tests/e2e/rules/*.json` for the test build), each compiled, with its
/// name.
pub(super) fn shipped_rulesets() -> Vec<(String, Ruleset)> {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut out = Vec::new();
    for dir in ["rules", "tests/e2e/rules"] {
        for entry in std::fs::read_dir(repo.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                let name = path.file_stem().unwrap().to_str().unwrap().to_string();
                let json = std::fs::read_to_string(&path).unwrap();
                let rules = Ruleset::from_json(&name, &json).unwrap_or_else(|e| panic!("{e}"));
                out.push((name, rules));
            }
        }
    }
    out
}

/// Every regex of [`shipped_rulesets`], once each, as the rules compile it
/// (after the JavaScript-class rewrite).
pub(super) fn shipped_regexes() -> Vec<String> {
    let mut out: Vec<String> = shipped_rulesets()
        .iter()
        .flat_map(|(_, rules)| {
            rules
                .regex_facts()
                .into_iter()
                .map(|facts| facts.source.to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[test]
fn shipped_rulesets_compile() {
    let seen = shipped_rulesets().len();
    assert!(seen >= 2, "rules/ has {seen} rulesets");
}

#[test]
fn regex_facts_list_every_regex_once_with_its_compiled_names() {
    let rules = compile(
        r#"[{"id": "a", "match": [{"type": "cookie", "regexName": "^_s$", "regexValue": "^(?<p>x)(y)$"},
                                 {"type": "path", "regexValue": "^/(?<top>[a-z]+)"}],
             "transform": {"type": "base64", "input": "${p}", "output": "b", "extract": "(?<user>[^:]*):"},
             "rollout": {"value": "${top}", "include": ["^a"], "exclude": ["^/(?<top>[a-z]+)"], "percentage": 50, "seed": "s"},
             "action": "classify", "classify": {"type": "ROUTE", "value": "${top}"}},
            {"id": "z", "action": "proxy"}]"#,
    );
    let table = rules.regex_facts();
    let sources: Vec<&str> = table.iter().map(|f| f.source).collect();
    assert_eq!(
        sources,
        [
            "(?<user>[^:]*):",
            "^(?<p>x)(y)$",
            "^/(?<top>[a-z]+)",
            "^_s$",
            "^a"
        ]
    );
    for facts in &table {
        let compiled = regex::Regex::new(facts.source).unwrap();
        assert_eq!(
            facts.names,
            compiled.capture_names().collect::<Vec<_>>(),
            "{}",
            facts.source
        );
    }
    let prefixes: Vec<Option<Vec<&[u8]>>> = table.iter().map(|f| f.prefixes.clone()).collect();
    assert_eq!(
        prefixes,
        [
            None,
            Some(vec![&b"xy"[..]]),
            Some(vec![&b"/"[..]]),
            Some(vec![&b"_s"[..]]),
            Some(vec![&b"a"[..]])
        ]
    );
}

proptest::proptest! {
    #[test]
    fn parser_never_panics(json in ".{0,400}") {
        let _ = Ruleset::from_json("fuzz", &json);
    }

    #[test]
    fn matching_never_panics(path in "/[ -~]{0,80}", cookie in "[ -~]{0,200}", token in "[ -~]{0,120}") {
        let rules = compile(ARRAY_SESSION);
        let mut r = get("https://gitlab.com/", &[("cookie", &cookie), ("private-token", &token)]);
        r.path = path;
        let _ = rules.decide(&r);
    }
}

#[test]
fn basic_auth_password_is_extracted_then_decoded_as_a_token() {
    let rules = compile(
        r#"[{"id": "basic", "match": {"type": "header", "name": "authorization", "regexValue": "^Basic (?<b64>[A-Za-z0-9+/=]+)$"},
        "transform": [{"type": "base64", "input": "${b64}", "output": "basic", "extract": "^[^:]*:(?<password>.+)$"},
                      {"type": "routable-token-payload", "input": "${basic.password}", "output": "decoded"}],
        "action": "classify", "classify": {"type": "CELL_ID", "value": "${decoded.c}"}}]"#,
    );
    let token = encode_routable_token("glpat-", [3; 16], &[('c', 2), ('o', 1)]);
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    let d = rules.decide(&get(
        "https://gitlab.com/group/project.git/info/refs",
        &[(
            "authorization",
            &format!("Basic {}", b64(&format!("oauth2:{token}"))),
        )],
    ));
    assert_eq!(classify_value(&d).as_deref(), Some("2"));
    let d = rules.decide(&get(
        "https://gitlab.com/",
        &[("authorization", &format!("Basic {}", b64("no-colon")))],
    ));
    assert_eq!(d.rule_id, None);
    assert!(compile_err(
        r#"[{"id": "x", "match": {"type": "header", "name": "a", "regexValue": "(?<v>.+)"},
        "transform": {"type": "base64", "input": "${v}", "output": "o", "extract": "^(?<p>.*)$"},
        "action": "classify", "classify": {"type": "ROUTE", "value": "${o.q}"}}]"#
    )
    .contains("capture group of the extract regex"));
}

#[test]
fn reject_answers_a_client_error() {
    let rules = compile(
        r#"[{"id": "encoded", "match": {"type": "path", "regexValue": "^/v2/.*%2[Ff]"},
        "action": "reject", "reject": {"status": 400, "message": "repository names are not percent-encoded"}},
        {"id": "legacy", "action": "proxy"}]"#,
    );
    let d = rules.decide(&get(
        "https://registry.gitlab.com/v2/a%2Fb/manifests/x",
        &[],
    ));
    assert_eq!(
        d.action,
        Action::Reject {
            status: 400,
            message: "repository names are not percent-encoded"
        }
    );
    assert_eq!(d.explain()["reject"]["status"], 400);
    assert_eq!(
        rules
            .decide(&get("https://registry.gitlab.com/v2/a/b/manifests/x", &[]))
            .rule_id,
        Some("legacy")
    );
}

#[test]
fn disabled_rules_are_evaluated_as_if_absent() {
    let rules = compile(
        r#"[
  {"id": "a", "match": {"type": "path", "regexValue": "^/a"}, "action": "proxy", "proxy": {"address": "a.example"}},
  {"id": "b", "match": {"type": "path", "regexValue": "^/"}, "action": "proxy", "proxy": {"address": "b.example"}},
  {"id": "c", "action": "proxy", "proxy": {"address": "c.example"}}
]"#,
    );
    let at = |path: &str| rules.decide(&get(&format!("https://x{path}"), &[])).rule_id;
    assert_eq!(at("/a"), Some("a"));
    assert_eq!(
        rules.set_disabled(&["a".into(), "nope".into()]),
        vec!["nope"]
    );
    assert_eq!(at("/a"), Some("b"));
    rules.set_disabled(&["a".into(), "b".into(), "c".into()]);
    assert_eq!(at("/a"), None, "every rule off: the legacy cell");
    rules.set_disabled(&[]);
    assert_eq!(at("/a"), Some("a"));
}

#[test]
fn on_outage_is_legacy_cell_or_unavailable() {
    let rules = compile(
        r#"[{"id": "w", "method": ["POST"], "action": "classify",
  "classify": {"type": "FIRST_CELL", "onOutage": "unavailable"}},
 {"id": "r", "action": "classify", "classify": {"type": "FIRST_CELL", "onOutage": "legacy-cell"}}]"#,
    );
    let mut post = get("https://x/", &[]);
    post.method = "POST".into();
    let d = rules.decide(&post);
    assert!(d.unavailable_on_outage);
    assert_eq!(d.explain()["on_outage"], "unavailable");
    let d = rules.decide(&get("https://x/", &[]));
    assert!(!d.unavailable_on_outage);
    assert!(d.explain().get("on_outage").is_none());
    let err = compile_err(
        r#"[{"action": "classify", "classify": {"type": "FIRST_CELL", "onOutage": "retry"}}]"#,
    );
    assert!(err.contains("classify.onOutage"), "{err}");
}

#[test]
fn max_length_bounds_a_value_in_characters() {
    let rules = compile(
        r#"[
  {"id": "snake", "match": {"type": "path", "regexValue": "^/s/(?<s>.*)"},
   "validate": {"max_length": {"${s}": 1}}, "action": "proxy"},
  {"id": "query", "match": {"type": "query", "name": "q", "regexValue": "^(?<q>.*)$"},
   "validate": {"maxLength": {"${q}": 5}}, "action": "proxy"},
  {"id": "top", "match": {"type": "path", "regexValue": "^/(?<top>[^/]+)"},
   "transform": {"type": "lowercase", "input": "${top}", "output": "route"},
   "validate": {"maxLength": {"${route}": 5, "x-${top}": 7}},
   "action": "classify", "classify": {"type": "ROUTE", "value": "${route}"}},
  {"id": "default", "action": "proxy"}
]"#,
    );
    let rule = |path: &str| {
        rules
            .decide(&get(&format!("https://gitlab.com{path}"), &[]))
            .rule_id
    };
    assert_eq!(rule("/ABCDE/x"), Some("top"));
    // Over either bound: the rule does not match, the next one decides.
    assert_eq!(rule("/abcdef"), Some("default"));
    assert_eq!(rule("/s/x"), Some("snake"));
    // An empty capture renders to nothing: like notReserved, no match.
    assert_eq!(rule("/s/"), Some("top"));
    assert_eq!(rule("/s/xy"), Some("top"));
    // Characters, not bytes: five two-byte letters are five.
    let e = "%C3%A9";
    assert_eq!(rule(&format!("/?q={}", e.repeat(5))), Some("query"));
    assert_eq!(rule(&format!("/?q={}", e.repeat(6))), Some("default"));
    // A bound makes a rule conditional: the rule after it is not
    // "unreachable" (compiling would fail).
    compile(
        r#"[{"id": "a", "validate": {"maxLength": {"x": 1}}, "action": "proxy"}, {"id": "b", "action": "proxy"}]"#,
    );
    for (json, expected) in [
        (
            r#"[{"id": "a", "validate": {"maxLength": {"${nope}": 1}}, "action": "proxy"}]"#,
            "validate.maxLength",
        ),
        (
            r#"[{"id": "a", "validate": {"maxLength": {"x": -1}}, "action": "proxy"}]"#,
            "integer `-1`, expected a validate.maxLength bound: a whole number",
        ),
        (
            r#"[{"id": "a", "validate": {"maxLength": {"x": 2.5}}, "action": "proxy"}]"#,
            "floating point `2.5`, expected a validate.maxLength bound: a whole number",
        ),
        (
            r#"[{"id": "a", "validate": {"maxLength": {"x": "255"}}, "action": "proxy"}]"#,
            "string \"255\", expected a validate.maxLength bound: a whole number",
        ),
    ] {
        let err = compile_err(json);
        assert!(err.contains(expected), "{json}: {err}");
    }
}

#[test]
fn a_classify_value_over_the_core_cap_is_not_classified() {
    use crate::question::MAX_CLASSIFY_VALUE_BYTES;
    // No validate.maxLength: the core-wide cap bounds the value anyway, as
    // a failed validate would (the rule does not apply, the next decides),
    // and the decision names the rule passed over.
    let rules = compile(
        r#"[
  {"id": "route", "match": {"type": "path", "regexValue": "^/r/(?<route>.+)$"},
   "action": "classify", "classify": {"type": "ROUTE", "value": "${route}"}},
  {"id": "learn", "match": {"type": "path", "regexValue": "^/l/"},
   "action": "classify", "classify": {"source": "learn"}},
  {"id": "default", "action": "proxy"}
]"#,
    );
    let decide = |path: &str| {
        let d = rules.decide(&get(&format!("https://gitlab.com{path}"), &[]));
        (
            d.rule_id,
            d.value_too_long,
            classify_value(&d).map(|v| v.len()),
        )
    };
    let at_cap = "a".repeat(MAX_CLASSIFY_VALUE_BYTES);
    assert_eq!(
        decide(&format!("/r/{at_cap}")),
        (Some("route"), None, Some(MAX_CLASSIFY_VALUE_BYTES))
    );
    assert_eq!(
        decide(&format!("/r/{at_cap}b")),
        (Some("default"), Some("route"), None)
    );
    // A learn question's value is the path.
    let path = format!("/l/{}", "a".repeat(MAX_CLASSIFY_VALUE_BYTES - 3));
    assert_eq!(decide(&path).0, Some("learn"));
    assert_eq!(
        decide(&format!("{path}a")),
        (Some("default"), Some("learn"), None)
    );
}
