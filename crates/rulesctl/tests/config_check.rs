//! `rulesctl config check` as the deploy runs it: the built binary over the
//! shipped wrangler.toml and over configurations written into a temporary
//! directory.

mod common;

use std::path::PathBuf;

use common::{repo, rulesctl, Run};
use serde_json::Value;

/// `rulesctl config check ARGS` in the repository.
fn check(args: &[&str]) -> Run {
    rulesctl(&[&["config", "check"], args].concat())
}

/// A wrangler.toml in a fresh temporary directory.
fn config(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rulesctl-config-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("wrangler.toml");
    std::fs::write(&file, text).expect("write");
    file
}

const GOOD: &str = r#"
name = "w"
[env.staging]
name = "w-staging"
[env.staging.vars]
GITLAB_RULES_CONFIG = "session_token"
GITLAB_PROXY_HOST = "legacy.example"
GITLAB_TOPOLOGY_SERVICE_URL = "https://ts.example"
GITLAB_ALLOWED_UPSTREAMS = "*.cells.example,legacy.example"
GITLAB_ROUTER_SIGNING_POLICY = "optional"
[env.production]
name = "w-production"
"#;

#[test]
fn every_shipped_environment_passes_with_its_placeholders_as_notes() {
    for env in [
        "dev",
        "staging",
        "production",
        "registry-staging",
        "registry-production",
    ] {
        let run = check(&["--env", env, "--allow-placeholders"]);
        assert_eq!(run.code, 0, "{env}:\n{}{}", run.stdout, run.stderr);
        assert!(run.stdout.contains("0 problems"), "{}", run.stdout);
    }
    // dev is complete; the deployed environments wait for an operator's values.
    assert_eq!(check(&["--env", "dev"]).code, 0);
    let run = check(&["--env", "production"]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("error GITLAB_PROXY_HOST=\"REPLACE_ME\": still a placeholder"),
        "{}",
        run.stdout
    );
}

#[test]
fn each_problem_is_named_and_fails_the_check() {
    let file = config(
        "bad",
        &GOOD
            .replace(r#"= "optional""#, r#"= "requird""#)
            .replace(
                "legacy.example\"\nGITLAB_ROUTER",
                "legacy.example,bad/host\"\nGITLAB_ROUTER",
            )
            .replace(
                "[env.production]",
                "GITLAB_TOPOLOGY_TIMEOUT_MS = \"90000\"\nGITLAB_CELL_FAILURE = \"3\"\n\
                 GITLAB_SMOKE_TEST_SECRET = \"hunter2\"\n[env.production]",
            ),
    );
    let file = file.to_str().expect("utf-8 path");
    let run = check(&["--env", "staging", "--config", file]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    for line in [
        "warn GITLAB_ROUTER_SIGNING_POLICY=\"requird\": neither required nor optional; using optional",
        "warn GITLAB_ALLOWED_UPSTREAMS=\"bad/host\": not an allow-list entry",
        "warn GITLAB_TOPOLOGY_TIMEOUT_MS=\"90000\": above the maximum, 30000; using 30000",
        "warn GITLAB_CELL_FAILURE: not a setting the router reads; it has no effect (did you mean GITLAB_CELL_FAILURES?)",
        "error GITLAB_SMOKE_TEST_SECRET: a secret in [vars]",
        "note GITLAB_ROUTER_SIGNING_KEY: not set;",
        "5 problems, 1 note",
    ] {
        assert!(run.stdout.contains(line), "no {line:?} in\n{}", run.stdout);
    }
    assert!(
        !run.stdout.contains("hunter2"),
        "a secret's value was shown"
    );

    let run = check(&["--env", "staging", "--config", file, "--json"]);
    assert_eq!(run.code, 1);
    let doc: Value = serde_json::from_str(&run.stdout).expect("one JSON document");
    assert_eq!(doc["ok"], false);
    let policy = doc["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .find(|p| p["setting"] == "GITLAB_ROUTER_SIGNING_POLICY")
        .expect("the policy's problem");
    assert_eq!(policy["level"], "warn");
    assert_eq!(policy["value"], "requird");
    assert_eq!(policy["wrong"], "neither required nor optional");
    assert!(policy["instead"]
        .as_str()
        .is_some_and(|s| s.starts_with("using optional")));
    assert!(!run.stdout.contains("hunter2"));
}

#[test]
fn required_signing_needs_the_key_among_the_secrets() {
    let text = GOOD.replace(r#"= "optional""#, r#"= "required""#);
    let file = config("required", &text);
    let file = file.to_str().expect("utf-8 path");
    let run = check(&["--env", "staging", "--config", file]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stdout.contains(
        "error GITLAB_ROUTER_SIGNING_KEY: not set, but GITLAB_ROUTER_SIGNING_POLICY is required"
    ));
    let run = check(&[
        "--env",
        "staging",
        "--config",
        file,
        "--secret",
        "GITLAB_ROUTER_SIGNING_KEY",
    ]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    // wrangler's own list of the environment's secrets counts too.
    let declared = config(
        "declared",
        &text.replace(
            "[env.production]",
            "[env.staging.secrets]\nrequired = [\"GITLAB_ROUTER_SIGNING_KEY\"]\n[env.production]",
        ),
    );
    let run = check(&[
        "--env",
        "staging",
        "--config",
        declared.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

#[test]
fn an_unknown_environment_or_secret_is_a_usage_error() {
    let file = config("usage", GOOD);
    let file = file.to_str().expect("utf-8 path");
    let run = check(&["--env", "prod", "--config", file]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("has no [env.prod]; its environments: "),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("production") && run.stderr.contains("staging"));
    assert!(run.stdout.is_empty());
    let run = check(&[
        "--env",
        "staging",
        "--config",
        file,
        "--secret",
        "SENTRY_DSN",
    ]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("not a secret the router reads"));
    let run = check(&["--config", file]);
    assert_eq!(run.code, 2, "--env is required");
}

/// `rulesctl config table` prints README.md's settings table, the one
/// between its markers.
#[test]
fn config_table_prints_the_readme_table() {
    let run = rulesctl(&["config", "table"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let table = run.stdout;
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let between = readme
        .split_once("<!-- settings: begin -->\n")
        .and_then(|(_, rest)| rest.split_once("<!-- settings: end -->"))
        .map(|(table, _)| table)
        .expect("README.md's settings markers");
    assert_eq!(table, between);
    assert!(table.contains("| `GITLAB_PROXY_HOST` |"), "{table}");
}

#[test]
fn a_shadow_ruleset_must_be_one_of_rules() {
    let with_shadow = |name: &str, shadow: &str| {
        let file = config(
            name,
            &GOOD.replace(
                "[env.production]",
                &format!(
                    "GITLAB_SHADOW_RULES_CONFIG = \"{shadow}\"\nGITLAB_SHADOW_SAMPLE = \"0.5\"\n[env.production]"
                ),
            ),
        );
        check(&[
            "--env",
            "staging",
            "--config",
            file.to_str().expect("utf-8 path"),
        ])
    };
    let run = with_shadow("shadow-good", "cells");
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let run = with_shadow("shadow-missing", "cels");
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("error GITLAB_SHADOW_RULES_CONFIG=\"cels\":")
            && run.stdout.contains("no shadow evaluation"),
        "{}",
        run.stdout
    );
    let run = with_shadow("shadow-itself", "session_token");
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(
            "note GITLAB_SHADOW_RULES_CONFIG=\"session_token\": the active ruleset itself"
        ),
        "{}",
        run.stdout
    );
    let file = config(
        "shadow-share",
        &GOOD.replace(
            "[env.production]",
            "GITLAB_SHADOW_SAMPLE = \"2\"\n[env.production]",
        ),
    );
    let run = check(&[
        "--env",
        "staging",
        "--config",
        file.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("warn GITLAB_SHADOW_SAMPLE=\"2\": not a share from 0 to 1"),
        "{}",
        run.stdout
    );
}
