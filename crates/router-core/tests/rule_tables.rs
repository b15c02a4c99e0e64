//! Route tables as data: every case in tests/rules/<ruleset>.cases.json is
//! sent through the shipped rules/<ruleset>.json and must decide exactly
//! what the case expects (see tests/rules/README.md).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use router_core::select::transform::routable_token::encode_routable_token;
use router_core::select::{OwnedRegexFacts, RegexFacts};
use router_core::{RequestParts, Ruleset};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Expands `{{token:PREFIX:k=v,...}}` and `{{basic:USER:VALUE}}`,
/// innermost first.
fn expand(value: &str) -> String {
    let mut s = value.to_string();
    while let Some(start) = s.rfind("{{") {
        let end = start + s[start..].find("}}").expect("closed placeholder");
        let inner = &s[start + 2..end];
        let replacement = if let Some(rest) = inner.strip_prefix("token:") {
            let (prefix, fields) = rest.rsplit_once(':').expect("token:PREFIX:fields");
            let fields: Vec<(char, u64)> = fields
                .split(',')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("k=v");
                    (k.chars().next().unwrap(), v.parse().unwrap())
                })
                .collect();
            encode_routable_token(prefix, *b"gitlab-cells-rtr", &fields)
        } else if let Some(rest) = inner.strip_prefix("basic:") {
            base64::engine::general_purpose::STANDARD.encode(rest)
        } else {
            panic!("unknown placeholder {inner}")
        };
        s.replace_range(start..end + 2, &replacement);
    }
    s
}

fn request(case: &Value) -> RequestParts {
    let r = &case["request"];
    let mut parts =
        RequestParts::from_url(r["method"].as_str().unwrap(), r["url"].as_str().unwrap())
            .expect("valid URL");
    for (name, value) in r["headers"].as_object().into_iter().flatten() {
        parts.add_header(name, &expand(value.as_str().unwrap()));
    }
    for (name, value) in r["cookies"].as_object().into_iter().flatten() {
        parts.add_header(
            "cookie",
            &format!("{name}={}", expand(value.as_str().unwrap())),
        );
    }
    parts
}

#[test]
fn every_ruleset_decides_as_its_table_says() {
    let dir = repo().join("tests/rules");
    let mut tables = 0;
    let mut cases = 0;
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .strip_suffix(".cases.json")
        else {
            continue;
        };
        let json = std::fs::read_to_string(repo().join(format!("rules/{name}.json"))).unwrap();
        // Compiled from the JSON (rulesctl, tests), as the worker loads its
        // build-checked rulesets (programs, capture names and prefixes
        // from build.rs's table) and from the JSON without a table (each
        // regex compiled as it is met): all three decide every case the
        // same.
        let eager = Ruleset::from_json(name, &json).unwrap_or_else(|e| panic!("{e}"));
        let facts = eager.regex_facts();
        let regexes: Vec<RegexFacts> = facts.iter().map(OwnedRegexFacts::facts).collect();
        let listed =
            Ruleset::from_prechecked_json(name, &json, &regexes).unwrap_or_else(|e| panic!("{e}"));
        let unlisted =
            Ruleset::from_prechecked_json(name, &json, &[]).unwrap_or_else(|e| panic!("{e}"));
        let table: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        tables += 1;
        for (ruleset, case) in [&eager, &listed, &unlisted]
            .into_iter()
            .flat_map(|r| table.iter().map(move |case| (r, case)))
        {
            cases += 1;
            let request = request(case);
            let decision = ruleset.decide(&request);
            let expected = &case["expect"];
            let mut compare = |what: &str, got: &Value, expected: &Value| {
                for key in ["rule", "action", "classify", "proxy", "reject", "on_outage"] {
                    if got[key] != expected[key] {
                        failures.push(format!(
                            "{name}: {}: {what}{key}: expected {} got {}",
                            case["name"], expected[key], got[key]
                        ));
                    }
                }
            };
            compare("", &decision.explain(), expected);
            // What the rules after a notFound: next-rule rule decide when
            // the Topology Service does not know its key.
            match (decision.next_on_not_found, expected.get("on_not_found")) {
                (Some(next), Some(then)) => compare(
                    "on_not_found.",
                    &ruleset.decide_from(&request, next).explain(),
                    then,
                ),
                (None, Some(_)) => failures.push(format!(
                    "{name}: {}: expected a rule that hands not-found keys on",
                    case["name"]
                )),
                _ => {}
            }
        }
    }
    assert!(
        tables >= 7 && cases >= 300,
        "{tables} tables, {cases} cases"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_expander_makes_tokens_that_decode() {
    let token = expand("{{token:glpat-:c=11,o=1}}");
    let fields =
        router_core::select::transform::routable_token::decode_routable_token(&token).unwrap();
    assert!(fields.contains(&("c".to_string(), "11".to_string())));
}
