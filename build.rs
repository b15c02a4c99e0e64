//! Compiles every ruleset in `rules/` into the worker: each is parsed and
//! its regexes compiled here, so an invalid ruleset fails the build with a
//! message naming the file, the rule and the problem. Beside each ruleset's
//! JSON go its regexes' programs, capture names and required prefixes, so
//! the worker runs them without parsing or compiling a regex
//! (`router_core::select::RegexTable`).
//!
//! The rulesets wrangler.toml's environments name (`GITLAB_RULES_CONFIG`,
//! `GITLAB_SHADOW_RULES_CONFIG`) must be among them: a name with no
//! ruleset fails the build too. `GITLAB_ROUTER_RULES_DIR` and
//! `GITLAB_ROUTER_WRANGLER_CONFIG` build from another directory of
//! rulesets and check another configuration.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let rules_dir = from_env(RULES_DIR_VAR, "rules");
    println!("cargo:rerun-if-changed={}", rules_dir.display());
    let mut dirs = vec![rules_dir];
    // Test builds (feature `test-rulesets`) also carry the rulesets the
    // end-to-end tests need and no deployment ships (tests/e2e/rules/).
    if std::env::var_os("CARGO_FEATURE_TEST_RULESETS").is_some() {
        let test_rules = manifest_dir().join("tests/e2e/rules");
        println!("cargo:rerun-if-changed={}", test_rules.display());
        dirs.push(test_rules);
    }
    let mut entries: Vec<_> = dirs
        .iter()
        .flat_map(|dir| {
            std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        })
        .map(|e| e.expect("readable rules entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    if std::env::var_os("CARGO_FEATURE_TEST_RULESETS").is_some() {
        entries.extend(scale_rulesets());
        entries.push(shadow_candidate());
    }
    entries.sort();

    let mut failures = Vec::new();
    let mut compiled = Vec::new();
    let mut table = String::from(
        "/// Rulesets compiled into the worker: (name, JSON, its regexes).\n\
         pub static RULESETS: &[(&str, &str, router_core::select::RegexTable<'static>)] = &[\n",
    );
    for path in &entries {
        println!("cargo:rerun-if-changed={}", path.display());
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("UTF-8 file name");
        let json = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        compiled.push(name.to_string());
        let full = match router_core::Ruleset::from_json(name, &json) {
            Ok(ruleset) => ruleset,
            Err(e) => {
                failures.push(format!("rules/{name}.json: {e}"));
                continue;
            }
        };
        // The worker embeds the ruleset without what it never reads
        // (`$schema`, the ruleset's and the rules' descriptions) and
        // without whitespace: a smaller wasm and less to parse when an
        // isolate starts. It is checked here as the worker loads it.
        let compact = compact(&json);
        let facts = full.regex_facts();
        let regexes: Vec<_> = facts.iter().map(|f| f.facts()).collect();
        match router_core::Ruleset::from_prechecked_json(name, &compact, &regexes) {
            Ok(small) if rule_ids(&small) == rule_ids(&full) => {}
            Ok(_) => failures.push(format!("rules/{name}.json: compacting changed its rules")),
            Err(e) => failures.push(format!("rules/{name}.json: compacted: {e}")),
        }
        let out = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR"))
            .join(format!("rules-{name}.json"));
        std::fs::write(&out, compact).expect("write compacted ruleset");
        write!(
            table,
            "    ({name:?}, include_str!({:?}), &[",
            out.display().to_string()
        )
        .unwrap();
        for facts in &facts {
            let prefixes = match &facts.prefixes {
                None => "None".to_string(),
                Some(ps) => {
                    let ps: Vec<String> = ps.iter().map(|p| byte_string(p)).collect();
                    format!("Some(&[{}])", ps.join(", "))
                }
            };
            write!(
                table,
                "router_core::select::RegexFacts {{ source: {:?}, names: &{:?}, prefixes: {prefixes}, program: &{:?} }}, ",
                facts.source, facts.names, facts.program
            )
            .unwrap();
        }
        table.push_str("]),\n");
    }
    table.push_str("];\n");
    failures.extend(unknown_names(&compiled));
    if !failures.is_empty() {
        for f in &failures {
            println!("cargo:warning={f}");
        }
        panic!("invalid rulesets:\n{}", failures.join("\n"));
    }
    let out = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("rulesets.rs");
    std::fs::write(out, table).expect("write rulesets.rs");
}

/// The crate's directory, read when the script runs (not baked in when it
/// was compiled: cargo may reuse this script's binary for a copy of the
/// crate elsewhere, a test that copies the project and shares the target
/// directory).
fn manifest_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    )
}

/// Where the rulesets are read from instead of `rules/`.
const RULES_DIR_VAR: &str = "GITLAB_ROUTER_RULES_DIR";
/// The wrangler.toml checked instead of the repository's.
const WRANGLER_CONFIG_VAR: &str = "GITLAB_ROUTER_WRANGLER_CONFIG";
/// The settings that name a ruleset.
const RULESET_SETTINGS: &[&str] = &["GITLAB_RULES_CONFIG", "GITLAB_SHADOW_RULES_CONFIG"];

/// The path `var` names, or `default` in the crate's directory.
fn from_env(var: &str, default: &str) -> std::path::PathBuf {
    println!("cargo:rerun-if-env-changed={var}");
    std::env::var_os(var)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join(default))
}

/// Every ruleset name wrangler.toml's `[vars]` and `[env.NAME.vars]` give
/// a ruleset setting that is not among `compiled` (a placeholder,
/// `REPLACE_ME`, is left to the deploy's checks).
fn unknown_names(compiled: &[String]) -> Vec<String> {
    let path = from_env(WRANGLER_CONFIG_VAR, "wrangler.toml");
    println!("cargo:rerun-if-changed={}", path.display());
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Vec::new();
    };
    let doc: toml::Table = match text.parse() {
        Ok(doc) => doc,
        Err(e) => return vec![format!("{}: not TOML: {e}", path.display())],
    };
    let mut scopes = vec![("[vars]".to_string(), doc.get("vars"))];
    if let Some(envs) = doc.get("env").and_then(toml::Value::as_table) {
        for (env, table) in envs {
            scopes.push((format!("[env.{env}.vars]"), table.get("vars")));
        }
    }
    let mut problems = Vec::new();
    for (scope, vars) in scopes {
        let Some(vars) = vars.and_then(toml::Value::as_table) else {
            continue;
        };
        for setting in RULESET_SETTINGS {
            let Some(name) = vars.get(*setting).and_then(toml::Value::as_str) else {
                continue;
            };
            if !name.contains("REPLACE_ME") && !compiled.iter().any(|c| c == name) {
                problems.push(format!(
                    "{}: {setting} = {name:?} in {scope} names no ruleset (rulesets: {})",
                    path.display(),
                    compiled.join(", ")
                ));
            }
        }
    }
    problems
}

/// Rule counts of the scale rulesets (`cells_<count>`) a test build adds.
const SCALE_RULE_COUNTS: &[usize] = &[50, 200];

/// The benchmark's scale rulesets (docs/benchmark.md, "Scale"), written
/// into OUT_DIR: `cells_<count>` is rules/cells.json with path rules put in
/// front of its own until it has `count` rules. Each generated rule claims
/// a path no request of the mix takes (`/api/v4/bench-family-<n>/<id>` or
/// `/-/bench-<n>/<id>`), so the routing stays `cells`' and every request
/// passes over all of them first.
fn scale_rulesets() -> Vec<std::path::PathBuf> {
    use serde_json::{json, Value};
    let cells = manifest_dir().join("rules/cells.json");
    let text = std::fs::read_to_string(&cells).expect("rules/cells.json");
    let doc: Value = serde_json::from_str(&text).expect("rules/cells.json is JSON");
    let own = doc["rules"]
        .as_array()
        .expect("rules/cells.json has rules")
        .clone();
    let dir = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("scale-rulesets");
    std::fs::create_dir_all(&dir).expect("create scale-rulesets");
    SCALE_RULE_COUNTS
        .iter()
        .map(|&count| {
            let mut rules: Vec<Value> = (0..count.saturating_sub(own.len()))
                .map(|n| {
                    let prefix = if n % 2 == 0 { format!("/api/v4/bench-family-{n}") } else { format!("/-/bench-{n}") };
                    json!({
                        "id": format!("generated_path_{n}"),
                        "match": { "type": "path", "regexValue": format!("^{prefix}/(?<project_id>[0-9]{{1,19}})(?:/|$)") },
                        "action": "classify",
                        "classify": { "type": "PROJECT_ID", "value": "${project_id}", "notFound": "next-rule" }
                    })
                })
                .collect();
            rules.extend(own.iter().cloned());
            let path = dir.join(format!("cells_{count}.json"));
            std::fs::write(&path, json!({ "rules": rules }).to_string()).expect("write a scale ruleset");
            path
        })
        .collect()
}

/// The shadow tests' candidate (tests/e2e/shadow.test.mjs), written into
/// OUT_DIR: `cells_candidate` is rules/cells.json with one rule changed,
/// `path_snippet` no longer taking the old spelling `/snippets/<id>`.
fn shadow_candidate() -> std::path::PathBuf {
    let cells = manifest_dir().join("rules/cells.json");
    let text = std::fs::read_to_string(&cells).expect("rules/cells.json");
    let old = r#""^(?:/-|/api/v4)?/snippets/"#;
    assert!(
        text.contains(old),
        "rules/cells.json's path_snippet changed: update build.rs"
    );
    let path = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("cells_candidate.json");
    std::fs::write(&path, text.replace(old, r#""^(?:/-|/api/v4)/snippets/"#))
        .expect("write the shadow candidate");
    path
}

/// `bytes` as a Rust byte string literal.
fn byte_string(bytes: &[u8]) -> String {
    let mut out = String::from("b\"");
    for b in bytes {
        write!(out, "\\x{b:02x}").unwrap();
    }
    out.push('"');
    out
}

fn rule_ids(ruleset: &router_core::Ruleset) -> Vec<&str> {
    ruleset.rules().iter().map(|r| r.id.as_str()).collect()
}

/// The ruleset's JSON without `$schema` and descriptions, compact.
fn compact(json: &str) -> String {
    use serde_json::Value;
    let mut doc: Value = serde_json::from_str(json).expect("checked by Ruleset::from_json");
    let strip_rules = |rules: &mut Value| {
        if let Value::Array(rules) = rules {
            for rule in rules {
                if let Value::Object(rule) = rule {
                    rule.remove("description");
                }
            }
        }
    };
    match &mut doc {
        Value::Object(top) => {
            top.remove("$schema");
            top.remove("description");
            if let Some(rules) = top.get_mut("rules") {
                strip_rules(rules);
            }
        }
        rules @ Value::Array(_) => strip_rules(rules),
        _ => {}
    }
    doc.to_string()
}
