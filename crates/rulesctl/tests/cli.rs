//! Runs the built `rulesctl` binary against the shipped rules/ and against
//! rulesets written into a temporary directory.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{repo, rulesctl, rulesctl_in, Run, Temp};
use serde_json::{json, Value};

const SESSION: &str = "0123456789abcdef0123456789abcdef";

fn session_ruleset() -> Value {
    json!([
        {
            "id": "session_cookie",
            "match": {
                "type": "cookie",
                "regexName": "^_gitlab_session(_[0-9a-f]+)?$",
                "regexValue": "^(?<cell_name>cell-[0-9]+)-[0-9a-f]{32}$"
            },
            "action": "classify",
            "classify": {"type": "SESSION_PREFIX", "value": "${cell_name}"}
        },
        {
            "id": "registry",
            "match": {"type": "path", "regexValue": "^/v2/(?<repo>.+?)/(manifests|blobs|tags|referrers)/"},
            "action": "classify",
            "classify": {"type": "ROUTE", "value": "${repo}", "target": "registry"}
        },
        {
            "id": "token",
            "match": {"type": "header", "name": "PRIVATE-TOKEN", "regexValue": "^(?<token>.+)$"},
            "transform": {"type": "routable-token-payload", "input": "${token}", "output": "decoded"},
            "validate": {"exist": ["${decoded.c}"]},
            "action": "classify",
            "classify": {"type": "CELL_ID", "value": "${decoded.c}"}
        },
        {
            "id": "admin",
            "match": [{"type": "path", "regexValue": "^/admin"}, {"type": "method", "regexValue": "^(GET|HEAD)$"}],
            "action": "proxy",
            "proxy": {"address": "cell-1.example.com"}
        }
    ])
}

// ---------------------------------------------------------------------------
// help

#[test]
fn help_and_no_arguments() {
    let run = rulesctl(&["--help"]);
    assert_eq!(run.code, 0);
    for command in [
        "validate",
        "explain",
        "diff",
        "routes-check",
        "token",
        "signature",
        "control",
    ] {
        run.stdout_has(&format!("\n  {command} "));
    }
    let run = rulesctl(&[]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("Usage: rulesctl <COMMAND>"));
    let run = rulesctl(&["diff", "--help"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("--requests <FILE>"));
    let run = rulesctl(&["control", "set", "-h"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("--dry-run"));
    let run = rulesctl(&["help", "token"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("--decode"));
}

// ---------------------------------------------------------------------------
// validate

#[test]
fn validate_shipped_rules() {
    let run = rulesctl(&["validate"]);
    assert_eq!(
        run.code, 0,
        "shipped rulesets must be valid:\n{}{}",
        run.stdout, run.stderr
    );
    let mut files: Vec<String> = std::fs::read_dir(repo().join("rules"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".json"))
        .collect();
    files.sort();
    for file in &files {
        let prefix = format!("ok rules/{file} (");
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with(&prefix) && l.ends_with(" rules)")),
            "no {prefix:?} line:\n{}",
            run.stdout
        );
    }
    let run = rulesctl(&["validate", "session_prefix"]);
    assert_eq!(run.code, 0);
    assert!(
        run.stdout.starts_with("ok rules/session_prefix.json ("),
        "{}",
        run.stdout
    );
}

#[test]
fn validate_reports_each_bad_file_with_its_rule() {
    let t = Temp::new();
    t.rule("good", &json!([{"id": "all", "action": "proxy"}]));
    t.rule(
        "bad_regex",
        &json!([{"id": "broken", "match": {"type": "path", "regexValue": "(^/x"}, "action": "proxy"}]),
    );
    t.rule(
        "bad_template",
        &json!([{"id": "tpl", "match": {"type": "path", "regexValue": "^/(?<a>x)"},
                 "action": "classify", "classify": {"type": "ROUTE", "value": "${b}"}}]),
    );
    t.write("rules/not_json.json", "{\"rules\": [");
    let run = t.run(&["validate"]);
    assert_eq!(run.code, 1);
    run.stdout_has("ok rules/good.json (1 rules)");
    run.stderr_has(
        "error rules/bad_regex.json: rule \"broken\": match[0].regexValue: invalid regex",
    );
    run.stderr_has("error rules/bad_template.json: rule \"tpl\": classify.value: ${b}");
    run.stderr_has("error rules/not_json.json: not valid JSON");
    run.stdout_has("4 rulesets: 1 valid, 3 invalid");

    // One bad file named explicitly, by name and by path.
    let run = t.run(&["validate", "bad_regex"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("rules/bad_regex.json"));
    let run = t.run(&["validate", "rules/good.json"]);
    assert_eq!(run.code, 0);
    assert_eq!(run.stdout, "ok rules/good.json (1 rules)\n");
    let run = t.run(&["validate", "missing.json"]);
    assert_eq!(run.code, 1);
    run.stderr_has("error missing.json: cannot read");
}

#[test]
fn validate_warns_about_a_missing_catch_all() {
    let t = Temp::new();
    t.rule("open_ended", &session_ruleset());
    let run = t.run(&["validate", "open_ended"]);
    assert_eq!(run.code, 0, "a warning is not an error");
    assert!(
        run.stdout
            .starts_with("ok rules/open_ended.json (4 rules)\n"),
        "{}",
        run.stdout
    );
    run.stdout_has(
        "warning rules/open_ended.json: does not end in a catch-all rule: the last rule, \"admin\"",
    );
    let run = t.run(&["validate", "--strict", "open_ended"]);
    assert_eq!(run.code, 1);

    // A catch-all classify (FIRST_CELL) ends a ruleset as well as a proxy.
    t.rule(
        "first_cell",
        &json!([{"action": "classify", "classify": {"type": "FIRST_CELL"}}]),
    );
    let run = t.run(&["validate", "--strict", "first_cell"]);
    assert_eq!(run.code, 0);
    assert!(!run.stdout.contains("warning"), "{}", run.stdout);
}

#[test]
fn validate_seed_form() {
    let t = Temp::new();
    t.rule(
        "seed",
        &json!({"rules": [
            {"cookies": {"_gitlab_session": {"match_regex": "^(?<p>cell-[0-9]+)-"}},
             "method": ["get", "POST"],
             "action": "classify", "classify": {"type": "SESSION_PREFIX", "value": "${p}"}},
            {"headers": {"X-Cell": {"matchRegex": "^(?<c>[0-9]+)$"}},
             "action": "classify", "classify": {"type": "CELL_ID", "value": "${c}"}},
            {"action": "proxy", "proxy": {"address": "legacy.example.com:8443"}}
        ]}),
    );
    let run = t.run(&["validate", "seed"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "ok rules/seed.json (3 rules)\n");
    let run = t.run(&[
        "explain",
        "--ruleset",
        "seed",
        "--method",
        "post",
        "--url",
        "https://gitlab.com/x",
        "--cookie",
        &format!("_gitlab_session=cell-7-{SESSION}"),
    ]);
    assert_eq!(
        run.json()["classify"],
        json!({"type": "SESSION_PREFIX", "value": "cell-7"})
    );
    let run = t.run(&[
        "explain",
        "--ruleset",
        "seed",
        "--url",
        "https://gitlab.com/x",
        "--header",
        "x-cell: 12",
    ]);
    assert_eq!(
        run.json()["classify"],
        json!({"type": "CELL_ID", "value": "12"})
    );
    let run = t.run(&[
        "explain",
        "--ruleset",
        "seed",
        "--method",
        "PUT",
        "--url",
        "https://gitlab.com/x",
        "--cookie",
        &format!("_gitlab_session=cell-7-{SESSION}"),
    ]);
    assert_eq!(run.stdout, "{\"rule\":\"rule-3\",\"action\":\"proxy\",\"classify\":null,\"proxy\":{\"address\":\"legacy.example.com:8443\"}}\n");
}

// ---------------------------------------------------------------------------
// explain

#[test]
fn explain_session_cookies_with_shipped_rules() {
    let cookie = format!("_gitlab_session=cell-2-{SESSION}");
    let run = rulesctl(&[
        "explain",
        "--ruleset",
        "session_prefix",
        "--method",
        "GET",
        "--url",
        "https://gitlab.com/dashboard",
        "--cookie",
        &cookie,
    ]);
    let v = run.json();
    assert_eq!(v["action"], "classify");
    assert_eq!(
        v["classify"],
        json!({"type": "SESSION_PREFIX", "value": "cell-2"})
    );
    assert_eq!(v["proxy"], Value::Null);
    assert!(v["rule"].is_string());

    // A legacy session (no prefix) falls through to the legacy cell.
    let legacy = format!("_gitlab_session={SESSION}");
    let run = rulesctl(&[
        "explain",
        "--ruleset",
        "rules/session_prefix.json",
        "--method",
        "GET",
        "--url",
        "https://gitlab.com/dashboard",
        "--cookie",
        &legacy,
    ]);
    let v = run.json();
    assert_eq!(v["action"], "proxy");
    assert_eq!(v["proxy"], json!({"address": null}));
    assert_eq!(v["classify"], Value::Null);
}

#[test]
fn explain_prints_the_exact_classify_body() {
    let t = Temp::new();
    t.rule("s", &session_ruleset());
    let explain = |extra: &[&str]| {
        let mut args = vec!["explain", "--ruleset", "s"];
        args.extend_from_slice(extra);
        t.run(&args)
    };

    let cookie = format!("_gitlab_session_1f=cell-2-{SESSION}");
    let run = explain(&[
        "--method",
        "GET",
        "--url",
        "https://gitlab.com/",
        "--cookie",
        "other=1",
        "--cookie",
        &cookie,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "{\"rule\":\"session_cookie\",\"action\":\"classify\",\"classify\":{\"type\":\"SESSION_PREFIX\",\"value\":\"cell-2\"},\"proxy\":null}\n"
    );

    let run = explain(&[
        "--url",
        "https://registry.gitlab.com/v2/gitlab-org/gitlab/manifests/latest",
    ]);
    assert_eq!(
        run.stdout,
        "{\"rule\":\"registry\",\"action\":\"classify\",\"classify\":{\"claims\":[{\"route\":\"gitlab-org/gitlab\"}],\"target\":\"registry\"},\"proxy\":null}\n"
    );

    let run = explain(&[
        "--method",
        "head",
        "--url",
        "https://gitlab.com/admin/users",
    ]);
    assert_eq!(
        run.stdout,
        "{\"rule\":\"admin\",\"action\":\"proxy\",\"classify\":null,\"proxy\":{\"address\":\"cell-1.example.com\"}}\n"
    );
}

#[test]
fn explain_without_a_matching_rule() {
    let t = Temp::new();
    t.rule("s", &session_ruleset());
    let run = t.run(&[
        "explain",
        "--ruleset",
        "s",
        "--method",
        "POST",
        "--url",
        "https://gitlab.com/admin/users",
    ]);
    assert_eq!(
        run.stdout,
        "{\"rule\":null,\"action\":\"proxy\",\"classify\":null,\"proxy\":{\"address\":null}}\n"
    );
    assert_eq!(
        run.json(),
        json!({"rule": null, "action": "proxy", "classify": null, "proxy": {"address": null}})
    );
}

// ---------------------------------------------------------------------------
// token

#[test]
fn token_generate_and_decode_round_trip() {
    let run = rulesctl(&[
        "token", "--cell", "11", "--field", "o=3", "--field", "u=123456",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let token = run.stdout.trim_end().to_string();
    assert!(
        token.starts_with("glpat-") && token.contains(".01."),
        "{token}"
    );
    let decoded = rulesctl(&["token", "--decode", &token]).json();
    assert_eq!(decoded, json!({"c": "11", "o": "3", "u": "123456"}));

    // Random by default, reproducible with a seed, any prefix.
    let again = rulesctl(&[
        "token", "--cell", "11", "--field", "o=3", "--field", "u=123456",
    ]);
    assert_ne!(again.stdout, run.stdout);
    let a = rulesctl(&["token", "--cell", "2", "--prefix", "glrt-", "--seed", "42"]);
    let b = rulesctl(&["token", "--cell", "2", "--prefix", "glrt-", "--seed", "42"]);
    assert_eq!(a.code, 0);
    assert_eq!(a.stdout, b.stdout);
    assert!(a.stdout.starts_with("glrt-"));
    assert_eq!(
        rulesctl(&["token", "--decode", a.stdout.trim()]).json(),
        json!({"c": "2"})
    );

    // A token with one character changed does not decode.
    let mut forged = token.clone().into_bytes();
    let i = "glpat-".len() + 3;
    forged[i] = if forged[i] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    rulesctl(&["token", "--decode", &forged]).assert_fails(1, "is not a routable token");
    rulesctl(&["token", "--decode", "glpat-abc"]).assert_fails(1, "is not a routable token");
}

#[test]
fn explain_a_request_carrying_a_generated_token() {
    let token = rulesctl(&["token", "--cell", "11", "--seed", "5"])
        .stdout
        .trim()
        .to_string();

    let t = Temp::new();
    t.rule("s", &session_ruleset());
    let run = t.run(&[
        "explain",
        "--ruleset",
        "s",
        "--url",
        "https://gitlab.com/api/v4/user",
        "--header",
        &format!("PRIVATE-TOKEN: {token}"),
    ]);
    assert_eq!(
        run.stdout,
        "{\"rule\":\"token\",\"action\":\"classify\",\"classify\":{\"type\":\"CELL_ID\",\"value\":\"11\"},\"proxy\":null}\n"
    );
    // A token that fails its CRC classifies nothing.
    let broken = format!("{}x", &token[..token.len() - 1]);
    let run = t.run(&[
        "explain",
        "--ruleset",
        "s",
        "--url",
        "https://gitlab.com/api/v4/user",
        "--header",
        &format!("private-token: {broken}"),
    ]);
    assert_eq!(run.json()["rule"], Value::Null);

    // The shipped session_token ruleset.
    let run = rulesctl(&[
        "explain",
        "--ruleset",
        "session_token",
        "--method",
        "GET",
        "--url",
        "https://gitlab.com/api/v4/user",
        "--header",
        &format!("PRIVATE-TOKEN: {token}"),
    ]);
    let v = run.json();
    assert_eq!(v["action"], "classify", "{v}");
    assert_eq!(v["classify"], json!({"type": "CELL_ID", "value": "11"}));
}

// ---------------------------------------------------------------------------
// diff

fn diff_fixture() -> (Temp, String) {
    let t = Temp::new();
    let mut old = session_ruleset();
    old.as_array_mut()
        .unwrap()
        .push(json!({"id": "legacy", "action": "proxy"}));
    t.rule("old", &old);
    // The new ruleset sends the registry to the first cell and unknown
    // traffic to the first cell instead of the legacy cell.
    let mut new = session_ruleset();
    let rules = new.as_array_mut().unwrap();
    rules[1] = json!({"id": "registry", "match": {"type": "path", "regexValue": "^/v2/"},
                       "action": "classify", "classify": {"type": "FIRST_CELL"}});
    rules.push(json!({"id": "first", "action": "classify", "classify": {"type": "FIRST_CELL"}}));
    t.rule("new", &new);
    let requests = format!(
        "# a comment\n\
         {{\"method\": \"GET\", \"url\": \"https://gitlab.com/\"}}\n\
         \n\
         {{\"url\": \"https://gitlab.com/x\", \"cookies\": {{\"_gitlab_session\": \"cell-3-{SESSION}\"}}}}\n\
         {{\"method\": \"GET\", \"url\": \"https://registry.gitlab.com/v2/a/b/blobs/sha256:1\"}}\n\
         {{\"method\": \"GET\", \"url\": \"https://gitlab.com/admin\"}}\n\
         {{\"method\": \"POST\", \"url\": \"https://gitlab.com/api/v4/projects\", \"headers\": {{\"Content-Type\": \"application/json\"}}}}\n"
    );
    let path = t.write("requests.jsonl", &requests);
    (t, path)
}

#[test]
fn diff_reports_changed_requests_and_counts() {
    let (t, _) = diff_fixture();
    let run = t.run(&["diff", "old", "new", "--requests", "requests.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "requests.jsonl:2: GET https://gitlab.com/: [legacy] proxy (legacy cell) -> [first] classify {\"type\":\"FIRST_CELL\"}"
    );
    assert_eq!(
        lines[1],
        "requests.jsonl:5: GET https://registry.gitlab.com/v2/a/b/blobs/sha256:1: \
         [registry] classify {\"claims\":[{\"route\":\"a/b\"}],\"target\":\"registry\"} -> [registry] classify {\"type\":\"FIRST_CELL\"}"
    );
    assert_eq!(
        lines[2],
        "requests.jsonl:7: POST https://gitlab.com/api/v4/projects: [legacy] proxy (legacy cell) -> [first] classify {\"type\":\"FIRST_CELL\"}"
    );
    assert_eq!(lines[3], "");
    assert_eq!(lines[4], "5 requests, 3 changed, 2 unchanged");
    assert_eq!(
        lines[5],
        "      2  [legacy] proxy (legacy cell) -> [first] classify FIRST_CELL"
    );
    assert_eq!(
        lines[6],
        "      1  [registry] classify ROUTE registry -> [registry] classify FIRST_CELL"
    );
    assert_eq!(lines.len(), 7, "{}", run.stdout);

    // The same ruleset twice: nothing changes.
    let run = t.run(&[
        "diff",
        "old",
        "rules/old.json",
        "--requests",
        "requests.jsonl",
    ]);
    assert_eq!(run.stdout, "5 requests, 0 changed, 5 unchanged\n");
}

#[test]
fn diff_json_report() {
    let (t, _) = diff_fixture();
    let run = t.run(&[
        "diff",
        "old",
        "new",
        "--requests",
        "requests.jsonl",
        "--json",
    ]);
    let v = run.json();
    assert_eq!(v["requests"], 5);
    assert_eq!(v["changed"], 3);
    assert_eq!(v["unchanged"], 2);
    assert_eq!(v["old"], "rules/old.json");
    assert_eq!(v["new"], "rules/new.json");
    assert_eq!(
        v["transitions"],
        json!([
            {"old": "[legacy] proxy (legacy cell)", "new": "[first] classify FIRST_CELL", "count": 2},
            {"old": "[registry] classify ROUTE registry", "new": "[registry] classify FIRST_CELL", "count": 1}
        ])
    );
    let changes = v["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 3);
    assert_eq!(changes[1]["line"], 5);
    assert_eq!(changes[1]["method"], "GET");
    assert_eq!(
        changes[1]["old"],
        json!({"rule": "registry", "action": "classify", "classify": {"claims": [{"route": "a/b"}], "target": "registry"}, "proxy": null})
    );
    assert_eq!(
        changes[0]["old"],
        json!({"rule": "legacy", "action": "proxy", "classify": null, "proxy": {"address": null}})
    );
}

#[test]
fn diff_shipped_rules_with_the_sample_requests() {
    let run = rulesctl(&[
        "diff",
        "passthrough",
        "session_prefix",
        "--requests",
        "tests/rulesctl/requests.jsonl",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout_has("8 requests, 2 changed, 6 unchanged");
    run.stdout_has(
        "tests/rulesctl/requests.jsonl:5: POST https://gitlab.com/gitlab-org/gitlab/-/issues: ",
    );
    run.stdout_has("classify {\"type\":\"SESSION_PREFIX\",\"value\":\"cell-11\"}");
}

// ---------------------------------------------------------------------------
// bad input: a clear message, the right exit code, never a panic

#[test]
fn usage_errors_exit_2() {
    for (args, needle) in [
        (&["frobnicate"][..], "unrecognized subcommand 'frobnicate'"),
        (&["validate", "--bogus"], "unexpected argument '--bogus'"),
        (
            &["explain", "--ruleset", "passthrough"],
            "not provided:\n  --url <URL>",
        ),
        (
            &["explain", "--url", "https://gitlab.com/"],
            "not provided:\n  --ruleset <NAME_OR_FILE>",
        ),
        (
            &["explain", "--ruleset", "passthrough", "--url"],
            "a value is required for '--url <URL>'",
        ),
        (
            &["explain", "--ruleset", "--url", "https://gitlab.com/"],
            "a value is required for '--ruleset <NAME_OR_FILE>'",
        ),
        (
            &[
                "explain",
                "--ruleset",
                "passthrough",
                "--url",
                "https://gitlab.com/",
                "--header",
                "NoColon",
            ],
            "expected 'Name: value'",
        ),
        (
            &[
                "explain",
                "--ruleset",
                "passthrough",
                "--url",
                "https://gitlab.com/",
                "--cookie",
                "novalue",
            ],
            "expected 'name=value'",
        ),
        (
            &[
                "explain",
                "--ruleset",
                "a",
                "--ruleset",
                "b",
                "--url",
                "https://gitlab.com/",
            ],
            "'--ruleset <NAME_OR_FILE>' cannot be used multiple times",
        ),
        (
            &[
                "explain",
                "--ruleset",
                "passthrough",
                "--url",
                "https://gitlab.com/",
                "extra",
            ],
            "unexpected argument 'extra'",
        ),
        (
            &["diff", "passthrough", "--requests", "x"],
            "not provided:\n  <NEW>",
        ),
        (
            &["diff", "passthrough", "session_prefix"],
            "not provided:\n  --requests <FILE>",
        ),
        (
            &["diff", "a", "b", "--requests", "x", "--json=yes"],
            "unexpected value 'yes' for '--json'",
        ),
        (&["token"], "token needs --cell ID"),
        (
            &["token", "--cell", "eleven"],
            "invalid value 'eleven' for '--cell <ID>'",
        ),
        (
            &["token", "--cell", "1", "--field", "x=1"],
            "key must be one of c g o p u t",
        ),
        (&["token", "--cell", "1", "--field", "c=2"], "c given twice"),
        (&["token", "--cell", "1", "--prefix", "gl.pat-"], "no dots"),
        (
            &["token", "--decode", "x", "--cell", "1"],
            "'--decode <TOKEN>' cannot be used with '--cell <ID>'",
        ),
        (&["signature"], "Usage: rulesctl signature <COMMAND>"),
        (&["signature", "public-key"], "--key-file <FILE>"),
        (
            &[
                "signature",
                "verify",
                "--public-key",
                "K",
                "--leeway",
                "soon",
            ],
            "invalid value 'soon' for '--leeway <SECONDS>'",
        ),
        (&["control", "show"], "control show: --env is required"),
        (&["control", "set", "--env", "dev"], "<CHANGE>..."),
        (
            &["control", "set", "--env", "dev", "mode"],
            "invalid value 'mode' for '<CHANGE>...': not a change",
        ),
        (&["control", "check"], "<FILE>"),
        // Checked before wrangler is asked anything.
        (
            &["control", "invalidate", "--env", "dev"],
            "name at least one --claim, --tag or --cell",
        ),
        (
            &[
                "control",
                "invalidate",
                "--env",
                "dev",
                "--claim",
                "colour=red",
            ],
            "\"colour\" is no claim key",
        ),
        (
            &["control", "invalidate", "--env", "dev", "--cell", "two"],
            "invalid value 'two' for '--cell <ID>'",
        ),
        (
            &["validate", "--strict=yes"],
            "unexpected value 'yes' for '--strict'",
        ),
        (
            &["validate", "--rules-dir"],
            "a value is required for '--rules-dir <DIR>'",
        ),
    ] {
        let run = rulesctl(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(needle),
            "{args:?}: stderr lacks {needle:?}:\n{}",
            run.stderr
        );
        assert!(run.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn bad_data_exits_1_with_a_clear_message() {
    let t = Temp::new();
    t.rule("s", &session_ruleset());
    let url = "https://gitlab.com/";
    t.run(&["explain", "--ruleset", "s", "--url", "gitlab.com/x"])
        .assert_fails(1, "invalid URL \"gitlab.com/x\"");
    t.run(&[
        "explain",
        "--ruleset",
        "s",
        "--url",
        "https://user@gitlab.com/",
    ])
    .assert_fails(1, "invalid URL");
    t.run(&[
        "explain",
        "--ruleset",
        "s",
        "--url",
        url,
        "--method",
        "GE T",
    ])
    .assert_fails(1, "invalid method");
    t.run(&["explain", "--ruleset", "nope", "--url", url])
        .assert_fails(
            1,
            "unknown ruleset \"nope\": rules/nope.json does not exist (known: s)",
        );
    t.run(&["explain", "--ruleset", "missing/file.json", "--url", url])
        .assert_fails(1, "missing/file.json: cannot read");
    t.write(
        "rules/broken.json",
        "[{\"id\": \"b\", \"action\": \"teleport\"}]",
    );
    t.run(&["explain", "--ruleset", "broken", "--url", url])
        .assert_fails(
            1,
            "rules/broken.json: rule \"b\": action: \"teleport\" is not classify, proxy, spread or reject",
        );

    // Requests files: every bad line is named by file:line.
    t.write(
        "bad.jsonl",
        "{\"url\": \"https://gitlab.com/\"}\n\
         {\"url\": \"https://gitlab.com/\"\n\
         # fine\n\
         {\"method\": \"GET\"}\n\
         {\"url\": \"ftp://gitlab.com/\"}\n\
         [1, 2]\n\
         {\"url\": \"https://gitlab.com/\", \"header\": {}}\n",
    );
    let run = t.run(&["diff", "s", "s", "--requests", "bad.jsonl"]);
    run.assert_fails(1, "bad.jsonl:2: not valid JSON");
    for needle in [
        "bad.jsonl:4: missing \"url\"",
        "bad.jsonl:5: invalid URL \"ftp://gitlab.com/\"",
        "bad.jsonl:6: expected a JSON object",
        "bad.jsonl:7: unknown key \"header\"",
        "bad.jsonl: 5 bad request line(s)",
    ] {
        assert!(
            run.stderr.contains(needle),
            "stderr lacks {needle:?}:\n{}",
            run.stderr
        );
    }
    assert!(!run.stderr.contains("bad.jsonl:1:"), "{}", run.stderr);
    assert!(!run.stderr.contains("bad.jsonl:3:"), "{}", run.stderr);
    t.run(&["diff", "s", "s", "--requests", "absent.jsonl"])
        .assert_fails(1, "absent.jsonl: cannot read");
    t.run(&["diff", "s", "nope", "--requests", "bad.jsonl"])
        .assert_fails(1, "unknown ruleset \"nope\"");
}

#[test]
fn rules_dir_option_and_environment() {
    let t = Temp::new();
    t.rule("only_here", &json!([{"id": "all", "action": "proxy"}]));
    let dir = t.0.join("rules").to_string_lossy().into_owned();
    // From the repository root, --rules-dir points elsewhere.
    let run = rulesctl(&["validate", "--rules-dir", &dir, "only_here"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("ok ") && run.stdout.contains("only_here.json (1 rules)"));
    let output = Command::new(env!("CARGO_BIN_EXE_rulesctl"))
        .args([
            "explain",
            "--ruleset",
            "only_here",
            "--url",
            "https://gitlab.com/",
        ])
        .current_dir(repo())
        .env("RULESCTL_RULES_DIR", &dir)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "{\"rule\":\"all\",\"action\":\"proxy\",\"classify\":null,\"proxy\":{\"address\":null}}\n"
    );
    // From a subdirectory, the nearest rules/ above is found.
    std::fs::create_dir_all(t.0.join("sub/deeper")).unwrap();
    let run = rulesctl_in(&t.0.join("sub/deeper"), &["validate"]);
    assert_eq!(run.stdout, "ok ../../rules/only_here.json (1 rules)\n");
    rulesctl(&["validate", "--rules-dir", "/nonexistent/rules"]).assert_fails(1, "does not exist");
}

// ---------------------------------------------------------------------------
// path routing: explain's not-found chain, routes-check

#[test]
fn explain_shows_what_follows_a_path_claim_not_found() {
    let cookie = format!("_gitlab_session=cell-3-{SESSION}");
    let run = rulesctl(&[
        "explain",
        "--ruleset",
        "cells",
        "--url",
        "https://gitlab.com/Cell2-Group/app/-/issues",
        "--cookie",
        &cookie,
    ]);
    let v = run.json();
    assert_eq!(v["rule"], "path_namespace");
    assert_eq!(v["classify"], json!({"claims": [{"route": "cell2-group"}]}));
    assert_eq!(v["not_found"], "next-rule");
    assert_eq!(v["on_not_found"]["rule"], "session_cookie");
    assert_eq!(
        v["on_not_found"]["classify"],
        json!({"type": "SESSION_PREFIX", "value": "cell-3"})
    );
    assert!(v["on_not_found"].get("on_not_found").is_none());

    let anonymous = rulesctl(&[
        "explain",
        "--ruleset",
        "cells",
        "--url",
        "https://gitlab.com/users/sign_in",
    ])
    .json();
    // Spread over GITLAB_CELLS; a reserved route, no claim.
    assert_eq!(anonymous["rule"], "sign_in_spread");
    assert_eq!(anonymous["action"], "spread");
    assert!(anonymous.get("on_not_found").is_none());
}

/// GitLab's route snapshot as shipped, its entries.
fn shipped_snapshot() -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join("tests/rules/gitlab_routes.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A snapshot file in `t` from `entries`, sorted by template as GitLab
/// writes it.
fn snapshot_file(t: &Temp, name: &str, mut entries: Vec<Value>) -> String {
    entries.sort_by(|a, b| a["template"].as_str().cmp(&b["template"].as_str()));
    t.write(name, &serde_json::to_string_pretty(&entries).unwrap())
}

#[test]
fn routes_check_replays_gitlabs_snapshot() {
    let run = rulesctl(&["routes-check", "tests/rules/gitlab_routes.json", "--quiet"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    for want in [
        "5066 routes (current format)",
        ", 0 unclassified",
        " as expected, 0 failed",
        "0 missing, 0 listed under [snapshot]",
    ] {
        assert!(run.stdout.contains(want), "{want}: {}", run.stdout);
    }
    assert!(
        !run.stdout.contains("note:"),
        "every entry covers a template: {}",
        run.stdout
    );
    // Every family the issue names is claimed, not only proxied.
    let run = rulesctl(&["routes-check", "tests/rules/gitlab_routes.json"]);
    for want in [
        r#"ok   /api/v4/feature_flags/unleash/1234/client/features -> [api_project_id_families] {"claims":[{"projectId":"1234"}]}"#,
        r#"ok   /api/v4/group/foo/-/packages/composer/packages -> [api_namespace_path] {"claims":[{"route":"foo"}]}"#,
        r#"ok   /api/v4/packages/terraform/modules/v1/foo/foo/foo/versions -> [api_owner_prefix] {"claims":[{"route":"foo"}]}"#,
        r#"ok   /-/jira/foo/bar/foo/commit/foo -> [path_owner_prefix] {"claims":[{"route":"foo"}]}"#,
        r#"ok   /v2/foo/bar/dependency_proxy/containers/foo/bar/manifests/foo/bar -> [path_dependency_proxy] {"claims":[{"route":"foo"}]}"#,
        "ok   /api/v4/namespaces/storage/limit_exclusions -> [legacy] proxy (legacy cell)",
        "ok   /o/new -> [legacy] proxy (legacy cell)",
    ] {
        assert!(run.stdout.contains(want), "{want}");
    }
}

#[test]
fn routes_check_fails_wrong_claims_and_reserved_words() {
    let t = Temp::new();
    let snapshot = snapshot_file(&t, "routes.json", shipped_snapshot());
    // A ruleset that claims every first segment as it is, reserved or not.
    t.rule(
        "greedy",
        &json!([
            {"id": "any", "match": {"type": "path", "regexValue": "^/(?<top>[^/]+)"},
             "action": "classify", "classify": {"type": "ROUTE", "value": "${top}"}},
            {"id": "legacy", "action": "proxy"}
        ]),
    );
    let claims = repo().join("rules/route_claims.txt").display().to_string();
    let run = t.run(&[
        "routes-check",
        &snapshot,
        "--ruleset",
        "greedy",
        "--claims",
        &claims,
        "--quiet",
    ]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    for want in [
        r#"FAIL /admin -> [any] {"claims":[{"route":"admin"}]}: route claim "admin" is a reserved word"#,
        r#"FAIL /Gitlab-Org/Sub-Group/foo/-/milestones/foo -> [any] {"claims":[{"route":"Gitlab-Org"}]}: claimed route "Gitlab-Org", expected route "gitlab-org" (template /*namespace_id/:project_id/-/milestones/:id, entry /*namespace_id/** route(namespace_id) at route_claims.txt:"#,
        r#"FAIL /api/v4/projects/1234 -> [any] {"claims":[{"route":"api"}]}: route claim "api" is a reserved word"#,
    ] {
        assert!(
            run.stdout.contains(want),
            "{want}: {}",
            &run.stdout[..run.stdout.len().min(3000)]
        );
    }
    assert!(!run.stdout.contains(", 0 failed"), "{}", run.stdout);
}

#[test]
fn routes_check_reports_an_unclassified_family_and_reserved_words_out_of_step() {
    let t = Temp::new();
    let mut entries = shipped_snapshot();
    // GitLab adds a family keyed by a project and a top-level route, and
    // drops /sitemap.
    entries.push(json!({"template": "/-/widgets/:project_id/board", "example": "/-/widgets/foo/board", "dottedExample": "/-/widgets/john.doe/board"}));
    entries.push(json!({"template": "/newtop/list", "example": "/newtop/list"}));
    entries.retain(|e| e["template"] != "/sitemap");
    let snapshot = snapshot_file(&t, "routes.json", entries);
    let run = rulesctl(&["routes-check", &snapshot, "--quiet"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    for want in [
        "UNCLASSIFIED /-/widgets/:project_id/board (parameter project_id names an owner; no entry of the table covers it)",
        ", 1 unclassified",
        r#"FAIL reserved words: "newtop" (template /newtop/list) is missing from [snapshot]"#,
        r#"FAIL reserved words: "sitemap" is listed under [snapshot] but no template of the snapshot has it"#,
        "1 missing, 1 listed under [snapshot] that it does not have",
    ] {
        assert!(run.stdout.contains(want), "{want}: {}", run.stdout);
    }
    // Not reserved, so the router claims it: a literal route, no claim.
    assert!(
        run.stdout.contains(r#"FAIL /newtop/list -> [path_namespace] {"claims":[{"route":"newtop"}]}: claimed route "newtop", expected no claim (template /newtop/list, no entry: no owner parameter)"#),
        "{}",
        run.stdout
    );
}

#[test]
fn routes_check_reads_the_older_format_and_refuses_anything_else() {
    let t = Temp::new();
    let older: Vec<Value> = shipped_snapshot()
        .into_iter()
        .map(|e| json!({"template": e["template"], "example": e["example"]}))
        .collect();
    let file = snapshot_file(&t, "older.json", older);
    let run = rulesctl(&["routes-check", &file, "--quiet"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("5066 routes (older format: template and example only)"),
        "{}",
        run.stdout
    );

    let few = snapshot_file(
        &t,
        "few.json",
        shipped_snapshot().into_iter().take(999).collect(),
    );
    let run = rulesctl(&["routes-check", &few]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("holds only 999 routes"),
        "{}",
        run.stderr
    );

    // The shape this tool used to read, which GitLab never wrote.
    let invented: Vec<Value> = (0..1000)
        .map(
            |i| json!({"verb": "GET", "path": format!("/r{i:04}"), "example": format!("/r{i:04}")}),
        )
        .collect();
    let file = t.write("invented.json", &Value::Array(invented).to_string());
    let run = rulesctl(&["routes-check", &file]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("entry 0: unknown key \"path\""),
        "{}",
        run.stderr
    );

    let mut entries = shipped_snapshot();
    entries[10]["example"] = json!("/somewhere/else");
    let file = snapshot_file(&t, "damaged.json", entries);
    let run = rulesctl(&["routes-check", &file]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("entry 10 (template \"/*namespace_id/:id/export\"): example \"/somewhere/else\" is not the template's"), "{}", run.stderr);
}

#[test]
fn control_check_refuses_unknown_fields_and_invalidations_dated_ahead() {
    let t = Temp::new();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let repo_rules = repo().join("rules");
    let rules = repo_rules.to_str().expect("utf-8 path");
    let check = |doc: &str| {
        let file = t.write("control.json", doc);
        t.run(&["control", "check", &file, "--rules-dir", rules])
    };
    check(r#"{"mdoe":"passthrough"}"#).assert_fails(1, "unknown field(s) mdoe");
    check(r#"{"invalidations":[{"at_ms":1,"cell":2,"why":"x"}]}"#)
        .assert_fails(1, "unknown field(s) invalidations[0].why");
    // at_ms in microseconds, and 10 minutes ahead.
    for at_ms in [now_ms * 1000, now_ms + 600_000] {
        check(&format!(
            r#"{{"invalidations":[{{"at_ms":{at_ms},"cell":2}}]}}"#
        ))
        .assert_fails(1, &format!("invalidation cell=2 has at_ms {at_ms}"));
    }
    let ok = check(&format!(
        r#"{{"invalidations":[{{"at_ms":{},"cell":2}}]}}"#,
        now_ms + 60_000
    ));
    assert_eq!(ok.code, 0, "a minute of skew: {}", ok.stderr);
}

/// The pinned wrangler (scripts/setup.sh installs it), run by `rulesctl
/// control` against a local KV store of its own.
struct LocalKv {
    dir: Temp,
    wrangler: PathBuf,
}

impl LocalKv {
    fn new() -> LocalKv {
        let wrangler = repo().join("node_modules/.bin/wrangler");
        assert!(
            wrangler.exists(),
            "{} is missing: run scripts/setup.sh",
            wrangler.display()
        );
        LocalKv {
            dir: Temp::new(),
            wrangler,
        }
    }

    fn kv_args(&self) -> Vec<String> {
        let config = repo().join("wrangler.toml");
        [
            "--env",
            "dev",
            "--local",
            "--persist-to",
            self.dir.0.to_str().expect("utf-8 path"),
            "--config",
            config.to_str().expect("utf-8 path"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn control(&self, args: &[&str]) -> Run {
        let mut all: Vec<String> = ["control"].iter().map(|s| s.to_string()).collect();
        all.extend(args.iter().map(|s| s.to_string()));
        all.extend(self.kv_args());
        all.extend(["--wrangler".into(), self.wrangler.display().to_string()]);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        rulesctl(&all)
    }

    /// Writes `text` as the stored document, past rulesctl.
    fn put_raw(&self, text: &str) {
        self.put_raw_key("control", text);
    }

    /// Writes `text` under `key` of the namespace, past rulesctl.
    fn put_raw_key(&self, key: &str, text: &str) {
        let status = Command::new(&self.wrangler)
            .args(["kv", "key", "put", key, text, "--binding", "ROUTER_CONTROL"])
            .args(self.kv_args())
            .env("WRANGLER_SEND_METRICS", "false")
            .current_dir(repo())
            .status()
            .expect("run wrangler");
        assert!(status.success());
    }

    /// What `show` prints (it exits 1 for an invalid document; for none,
    /// its message, on stderr).
    fn stored(&self) -> String {
        let run = self.control(&["show"]);
        if run.stdout.is_empty() {
            run.stderr
        } else {
            run.stdout
        }
    }

    /// `rulesctl health …` against the same store.
    fn health(&self, args: &[&str]) -> Run {
        let mut all: Vec<String> = ["health"].iter().map(|s| s.to_string()).collect();
        all.extend(args.iter().map(|s| s.to_string()));
        all.extend(self.kv_args());
        all.extend(["--wrangler".into(), self.wrangler.display().to_string()]);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        rulesctl(&all)
    }
}

#[test]
fn control_set_and_invalidate_write_over_no_document_only_from_a_stated_generation() {
    let kv = LocalKv::new();
    // No document: refused, nothing written.
    kv.control(&["set", "purge"])
        .assert_fails(1, "there is no stored document: refused");
    kv.control(&["invalidate", "--cell", "2"])
        .assert_fails(1, "--start-generation N");
    assert!(kv.stored().contains("no control document"));
    // An unreadable one: the same.
    kv.put_raw("[1]");
    kv.control(&["set", "mode=passthrough"])
        .assert_fails(1, "the stored document is not a JSON object: refused");
    let stored: Value = serde_json::from_str(&kv.stored()).expect("JSON");
    assert_eq!(stored, json!([1]), "nothing written");
    // Told where to start: written from there.
    let run = kv.control(&["set", "--start-generation", "7", "purge"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout_has("starting from an empty document with purge_generation 7");
    let stored: Value = serde_json::from_str(&kv.stored()).expect("JSON");
    assert_eq!(stored, json!({"purge_generation": 8}));
    // A readable document is changed in place; the flag is ignored.
    let run = kv.control(&["invalidate", "--cell", "2", "--start-generation", "0"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout_has("--start-generation ignored");
    let stored: Value = serde_json::from_str(&kv.stored()).expect("JSON");
    assert_eq!(stored["purge_generation"], 8);
    assert_eq!(stored["invalidations"][0]["cell"], 2);
    // An invalidation dated ahead (at_ms in microseconds) is refused by
    // put: nothing written.
    let at_ms = stored["invalidations"][0]["at_ms"].as_u64().expect("at_ms");
    let file = kv.dir.write(
        "ahead.json",
        &format!(
            r#"{{"purge_generation":8,"invalidations":[{{"at_ms":{},"cell":3}}]}}"#,
            at_ms * 1000
        ),
    );
    let run = kv.control(&["put", &file]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    run.stderr_has("ahead of this machine's clock");
    assert!(!kv.stored().contains(r#""cell": 3"#));
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// `rulesctl ARGS` in the repository with `input` on its stdin (a pipe:
/// no terminal).
fn rulesctl_stdin(args: &[&str], input: &str) -> Run {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_rulesctl"))
        .args(args)
        .current_dir(repo())
        .env_remove("RULESCTL_RULES_DIR")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run rulesctl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    Run::of(child.wait_with_output().expect("rulesctl ends"))
}

/// A wrangler that cannot be run: a command that gets past its checks to
/// wrangler says "cannot run".
const NO_WRANGLER: &str = "/nonexistent/wrangler";

#[test]
fn control_writes_to_a_remote_namespace_without_a_terminal_need_yes() {
    let config = repo().join("wrangler.toml");
    let config = config.to_str().expect("utf-8 path");
    for args in [
        vec!["control", "set", "--env", "production", "mode=passthrough"],
        vec!["control", "put", "--env", "production", "control.json"],
        vec!["control", "invalidate", "--env", "staging", "--cell", "2"],
    ] {
        let mut refused = args.clone();
        refused.extend(["--config", config, "--wrangler", NO_WRANGLER]);
        let run = rulesctl(&refused);
        run.assert_fails(2, "pass --yes to write without asking");
        assert!(
            !run.stderr.contains("cannot run"),
            "asked wrangler: {}",
            run.stderr
        );
        // --yes skips the question: on to reading the stored document.
        refused.push("--yes");
        rulesctl(&refused).assert_fails(1, "cannot run /nonexistent/wrangler");
    }
    // A local store (wrangler dev's) is written without asking.
    rulesctl(&[
        "control",
        "set",
        "--env",
        "dev",
        "--local",
        "mode=passthrough",
        "--config",
        config,
        "--wrangler",
        NO_WRANGLER,
    ])
    .assert_fails(1, "cannot run");
}

#[test]
fn control_env_must_be_an_environment_of_wrangler_toml() {
    let config = repo().join("wrangler.toml");
    let config = config.to_str().expect("utf-8 path");
    for args in [
        vec!["control", "show", "--env", "prod"],
        vec![
            "control",
            "set",
            "--env",
            "prod",
            "mode=passthrough",
            "--yes",
        ],
        vec![
            "control",
            "set",
            "--env",
            "prod",
            "purge",
            "--dry-run",
            "--document",
            "/dev/null",
        ],
        vec!["health", "show", "--env", "prod"],
    ] {
        let mut all = args.clone();
        all.extend(["--config", config, "--wrangler", NO_WRANGLER]);
        let run = rulesctl(&all);
        run.assert_fails(2, "--env prod is not an environment of");
        run.stderr_has(
            "(its environments: dev, staging, production, registry-staging, registry-production)",
        );
    }
    // Found as wrangler finds it (the nearest wrangler.toml), or named.
    let outside = Temp::new();
    outside
        .run(&[
            "control",
            "show",
            "--env",
            "production",
            "--wrangler",
            NO_WRANGLER,
        ])
        .assert_fails(2, "no wrangler.toml in the working directory or above it");
}

#[test]
fn control_dry_run_against_a_given_document_reads_no_kv() {
    let dir = Temp::new();
    let stored = dir.write(
        "stored.json",
        r#"{"mode":"normal","disabled_rules":["session_cookie"],"purge_generation":3}"#,
    );
    let run = rulesctl(&[
        "control",
        "set",
        "--env",
        "production",
        "mode=passthrough",
        "note=INC-7",
        "purge",
        "--dry-run",
        "--document",
        &stored,
        "--wrangler",
        NO_WRANGLER,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for line in [
        &format!("--- stored (--document {stored}): mode=normal disabled_rules=[session_cookie] purge_generation=3"),
        "+++ to write: mode=passthrough disabled_rules=[session_cookie] purge_generation=4",
        "\n  {\n    \"disabled_rules\": [\n      \"session_cookie\"\n    ],\n-   \"mode\": \"normal\",\n-   \"purge_generation\": 3\n+   \"mode\": \"passthrough\",\n+   \"note\": \"INC-7\",\n+   \"purge_generation\": 4\n  }\n",
        "dry run: would run /nonexistent/wrangler kv key put control ",
        "--env production --remote",
    ] {
        run.stdout_has(line);
    }
    // The stored document from stdin; put's own from a file.
    let new = dir.write("new.json", r#"{"mode":"normal","purge_generation":3}"#);
    let run = rulesctl_stdin(
        &[
            "control",
            "put",
            "--env",
            "production",
            &new,
            "--dry-run",
            "--document",
            "-",
            "--wrangler",
            NO_WRANGLER,
        ],
        r#"{"mode":"passthrough","purge_generation":3}"#,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout_has("-   \"mode\": \"passthrough\",\n+   \"mode\": \"normal\",");
    // The checks hold as against KV: a lower generation, nothing stored.
    let low = dir.write("low.json", r#"{"purge_generation":2}"#);
    rulesctl(&[
        "control",
        "put",
        "--env",
        "production",
        &low,
        "--dry-run",
        "--document",
        &stored,
        "--wrangler",
        NO_WRANGLER,
    ])
    .assert_fails(1, "lower than the stored document's 3");
    let empty = dir.write("empty.json", "");
    rulesctl(&[
        "control",
        "set",
        "--env",
        "production",
        "purge",
        "--dry-run",
        "--document",
        &empty,
        "--wrangler",
        NO_WRANGLER,
    ])
    .assert_fails(1, "there is no stored document: refused");
    // Without --dry-run, --document is a usage error.
    rulesctl(&[
        "control",
        "set",
        "--env",
        "production",
        "purge",
        "--document",
        &stored,
    ])
    .assert_fails(2, "--dry-run");
}

#[test]
fn control_show_reports_a_missing_document_as_degraded_and_reads_as_json() {
    let kv = LocalKv::new();
    let run = kv.control(&["show"]);
    run.assert_fails(1, "the router is DEGRADED");
    run.stderr_has("without the Cache API");
    run.stderr_has("--start-generation N reset");
    let run = kv.control(&["show", "--json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let shown: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(shown["status"], "missing");
    assert_eq!(shown["degraded"], true);
    assert_eq!(shown["document"], Value::Null);
    assert_eq!(shown["environment"], "dev");
    kv.put_raw(r#"{"mode":"passthrough","purge_generation":2}"#);
    let shown = kv.control(&["show", "--json"]).json();
    assert_eq!(shown["status"], "ok");
    assert_eq!(shown["degraded"], false);
    assert_eq!(
        shown["summary"],
        "mode=passthrough disabled_rules=[] purge_generation=2"
    );
    assert_eq!(
        shown["document"],
        json!({"mode": "passthrough", "purge_generation": 2})
    );
    kv.put_raw(r#"{"mode":"off"}"#);
    let run = kv.control(&["show", "--json"]);
    assert_eq!(run.code, 1);
    let shown: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(shown["status"], "invalid");
    assert!(shown["problem"]
        .as_str()
        .expect("problem")
        .contains("router ignores it"));
    // check reads as JSON too.
    let dir = Temp::new();
    let bad = dir.write("bad.json", r#"{"mdoe":"passthrough"}"#);
    let run = rulesctl(&["control", "check", &bad, "--json"]);
    assert_eq!(run.code, 1);
    let checked: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(checked["valid"], false);
    assert!(checked["problem"]
        .as_str()
        .expect("problem")
        .contains("mdoe"));
    let good = dir.write("good.json", r#"{"mode":"passthrough"}"#);
    assert_eq!(
        rulesctl(&["control", "check", &good, "--json"]).json()["valid"],
        true
    );
}

#[test]
fn control_refuses_to_write_over_a_document_changed_since_it_was_read() {
    let kv = LocalKv::new();
    kv.put_raw(r#"{"purge_generation":5}"#);
    // The pinned wrangler, and another operator who writes between
    // rulesctl's first read and its read before writing (the second get).
    let wrapper = kv.dir.write(
        "wrangler-with-another-writer",
        &format!(
            "#!/bin/sh\nif [ \"$3\" = get ] && [ \"$4\" = control ]; then\n  n=$(cat {dir}/gets 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {dir}/gets\n  if [ $n = 2 ]; then\n    shift 5\n    {real} kv key put control '{{\"note\":\"another writer\",\"purge_generation\":6}}' \"$@\" > /dev/null || exit 1\n    exec {real} kv key get control --text \"$@\"\n  fi\nfi\nexec {real} \"$@\"\n",
            dir = kv.dir.0.display(),
            real = kv.wrangler.display()
        ),
    );
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let run_with = |args: &[&str]| {
        let mut all: Vec<String> = ["control"].iter().map(|s| s.to_string()).collect();
        all.extend(args.iter().map(|s| s.to_string()));
        all.extend(kv.kv_args());
        all.extend(["--wrangler".into(), wrapper.clone()]);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        rulesctl(&all)
    };
    let run = run_with(&["set", "mode=passthrough"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    run.stderr_has(
        "the stored document changed since rulesctl read it (another writer): nothing written",
    );
    let stored: Value = serde_json::from_str(&kv.stored()).expect("JSON");
    assert_eq!(
        stored,
        json!({"note": "another writer", "purge_generation": 6}),
        "the other writer's stays"
    );
    // Again: it starts from the new document.
    let run = run_with(&["set", "mode=passthrough"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout_has("written (mode=passthrough");
    let stored: Value = serde_json::from_str(&kv.stored()).expect("JSON");
    assert_eq!(
        stored,
        json!({"mode": "passthrough", "note": "another writer", "purge_generation": 6})
    );
    // The same change again writes nothing.
    kv.control(&["set", "mode=passthrough"])
        .stdout_has("unchanged: the stored document already reads so; nothing written");
}

#[test]
fn health_show_reads_the_probe_record() {
    let kv = LocalKv::new();
    let run = kv.health(&["show"]);
    run.assert_fails(
        1,
        "no cell-health record in the local ROUTER_CONTROL namespace of --env dev",
    );
    assert!(kv
        .health(&["show", "--json"])
        .stdout
        .contains(r#""status":"missing""#));
    let now = now_ms();
    kv.put_raw_key(
        "cell-health",
        &format!("cell-health 2 {now}\n1 u 200 12 \n2 d 0 1000 connection refused\n3 m 404 9 \n"),
    );
    let run = kv.health(&["show"]);
    assert_eq!(run.code, 1, "a cell down: {}", run.stderr);
    run.stdout_has("cell 1    up            status 200      12 ms\n");
    run.stdout_has("cell 2    down          status 0      1000 ms  connection refused\n");
    run.stdout_has("cell 3    misconfigured status 404       9 ms\n");
    let run = kv.health(&["show", "--json"]);
    assert_eq!(run.code, 1);
    let shown: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(shown["status"], "down");
    assert_eq!(shown["checked_at_ms"], now);
    assert_eq!(
        shown["cells"][1],
        json!({"id": 2, "verdict": "down", "status": 0, "ms": 1000, "error": "connection refused"})
    );
    kv.put_raw_key(
        "cell-health",
        &format!("cell-health 2 {now}\n1 u 200 12 \n2 u 204 8 \n"),
    );
    assert_eq!(kv.health(&["show", "--json"]).json()["status"], "ok");
    let old = now - 600_000;
    kv.put_raw_key(
        "cell-health",
        &format!("cell-health 2 {old}\n1 u 200 12 \n"),
    );
    kv.health(&["show"]).stderr_has("past 180 s");
    let run = kv.health(&["show", "--json", "--max-age-secs", "900"]);
    assert_eq!(run.code, 0, "within the given max age: {}", run.stdout);
    kv.put_raw_key("cell-health", "cell-health 1 5\n");
    kv.health(&["show"])
        .assert_fails(1, "not one this version reads");
}

/// On a terminal (util-linux `script` gives rulesctl one) a remote write
/// shows old -> new and asks; only y or yes writes. The "remote"
/// namespace is the pinned wrangler's local store (a wrapper turns
/// --remote into --local): nothing leaves the machine.
#[test]
fn control_asks_on_a_terminal_before_a_remote_write() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: util-linux script is not installed");
        return;
    }
    let kv = LocalKv::new();
    kv.put_raw(r#"{"purge_generation":1}"#);
    let wrapper = kv.dir.write(
        "wrangler-remote-is-local",
        &format!(
            "#!/bin/sh\nfor a; do shift; if [ \"$a\" = --remote ]; then set -- \"$@\" --local --persist-to {dir}; else set -- \"$@\" \"$a\"; fi; done\nexec {real} \"$@\"\n",
            dir = kv.dir.0.display(),
            real = kv.wrangler.display()
        ),
    );
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let config = repo().join("wrangler.toml");
    let on_a_terminal = |answer: &str| {
        use std::io::Write;
        let command = format!(
            "{} control set --env dev mode=passthrough note=INC-9 --config {} --wrangler {}",
            env!("CARGO_BIN_EXE_rulesctl"),
            config.display(),
            wrapper
        );
        let mut child = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .current_dir(repo())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run script");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(answer.as_bytes()).expect("answer");
        let output = child.wait_with_output().expect("script ends");
        drop(stdin);
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    };
    let (code, out) = on_a_terminal("n\n");
    assert_eq!(code, Some(1), "{out}");
    for line in [
        "+   \"mode\": \"passthrough\",",
        "write this to the remote ROUTER_CONTROL namespace of --env dev? [y/N]",
        "not confirmed: nothing written",
    ] {
        assert!(out.contains(line), "lacks {line:?}:\n{out}");
    }
    let stored: Value = serde_json::from_str(&kv.stored()).expect("JSON");
    assert_eq!(stored, json!({"purge_generation": 1}), "nothing written");
    let (code, out) = on_a_terminal("yes\n");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("written (mode=passthrough"), "{out}");
    let stored: Value = serde_json::from_str(&kv.stored()).expect("JSON");
    assert_eq!(stored["mode"], "passthrough");
}
