//! schema/ruleset.schema.json: every shipped ruleset validates against it,
//! its enums follow the core, and it agrees with the core's loader on the
//! shapes a schema can judge.

mod common;

use common::repo;
use jsonschema::Validator;
use router_core::Ruleset;
use serde_json::{json, Value};

fn schema() -> Value {
    let text =
        std::fs::read_to_string(repo().join("schema/ruleset.schema.json")).expect("read schema");
    serde_json::from_str(&text).expect("schema is JSON")
}

fn validator() -> Validator {
    jsonschema::draft202012::new(&schema()).expect("schema compiles")
}

fn errors(validator: &Validator, doc: &Value) -> Vec<String> {
    validator
        .iter_errors(doc)
        .map(|e| format!("at {}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn every_shipped_ruleset_validates_against_the_schema() {
    let validator = validator();
    let mut checked = 0;
    for entry in std::fs::read_dir(repo().join("rules")).expect("rules/") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let errors = errors(&validator, &doc);
        assert!(
            errors.is_empty(),
            "{} does not match the schema:\n{}",
            path.display(),
            errors.join("\n")
        );
        checked += 1;
    }
    assert!(
        checked >= 2,
        "expected the shipped rulesets, found {checked}"
    );
}

fn enum_at<'a>(schema: &'a Value, pointer: &str) -> Vec<&'a str> {
    schema
        .pointer(pointer)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no enum at {pointer}"))
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

#[test]
fn schema_enums_follow_the_core() {
    let schema = schema();
    let mut types = vec!["FIRST_CELL", "SESSION_PREFIX", "CELL_ID"];
    types.extend(
        router_core::question::CLAIM_TYPES
            .iter()
            .map(|(upper, _)| *upper),
    );
    assert_eq!(
        enum_at(&schema, "/$defs/classify/properties/type/enum"),
        types
    );
    for kind in enum_at(&schema, "/$defs/transform/properties/type/enum") {
        assert!(
            router_core::select::transform::TransformKind::parse(kind).is_some(),
            "{kind}"
        );
    }
    for target in enum_at(&schema, "/$defs/classify/properties/target/enum") {
        assert!(router_core::Target::parse(target).is_some(), "{target}");
    }
}

/// Documents the schema and the core must both accept, or both reject.
#[test]
fn schema_agrees_with_the_core() {
    let validator = validator();
    let proxy = json!({"action": "proxy"});
    let accept = [
        json!([proxy]),
        json!({"rules": [proxy]}),
        json!({"$schema": "../schema/ruleset.schema.json", "rules": [proxy]}),
        json!([{"id": "a", "match": {"type": "cookie", "regexName": "^_gitlab_session", "regexValue": "^(?<c>cell-[0-9]+)-"},
                "action": "classify", "classify": {"type": "SESSION_PREFIX", "value": "${c}"}}, proxy]),
        json!([{"match": [{"type": "header", "name": "PRIVATE-TOKEN", "regex_value": "^(?<t>.+)$"},
                          {"type": "method", "regex_value": "^GET$"}],
                "transform": [{"type": "routable-token-payload", "input": "${t}", "output": "d"}],
                "validate": {"exist": ["${d.c}"]},
                "action": "CLASSIFY", "classify": {"type": "CELL_ID", "value": "${d.c}", "target": "registry"}}]),
        json!([{"match": {"type": "query", "regex_name": "^scope$", "regexValue": "^repository:(?<r>[^:]+):"},
                "rollout": {"value": "${r}", "include": ["^gitlab-org/"], "exclude": ["secret"], "percentage": 12.5, "seed": "s"},
                "action": "classify", "classify": {"type": "ROUTE", "value": "${r}"}}]),
        json!({"rules": [{"cookies": {"_gitlab_session": {"match_regex": "^(?<p>cell-[0-9]+)-"}},
                          "headers": {"X-Cell": {"matchRegex": "."}}, "method": ["GET", "post"],
                          "action": "classify", "classify": {"type": "SESSION_PREFIX", "value": "${p}"}},
                         {"method": "GET", "action": "proxy", "proxy": {"address": "cell-1.example.com:8443"}},
                         {"action": "classify", "classify": {"type": "FIRST_CELL"}}]}),
        json!([{"action": "proxy", "proxy": {}}]),
        json!([{"action": "proxy", "proxy": {"address": null}}]),
        json!([{"match": {"type": "header", "name": "authorization", "regexValue": "^Basic (?<c>.+)$"},
                "transform": [{"type": "base64", "input": "${c}", "output": "basic", "extract": "^[^:]*:(?<password>.+)$"},
                              {"type": "routable-token-payload", "input": "${basic.password}", "output": "d"}],
                "action": "classify", "classify": {"type": "CELL_ID", "value": "${d.c}"}}]),
        json!([{"action": "classify", "classify": {"source": "learn", "notFound": "next-rule"}}, proxy]),
        json!([{"action": "classify", "classify": {"source": "topology", "type": "FIRST_CELL"}}]),
    ];
    let reject = [
        json!([]),
        json!({"rules": []}),
        json!("rules"),
        json!({"rules": [proxy], "extra": 1}),
        json!([{"action": "teleport"}]),
        json!([{"action": "proxy", "colour": "red"}]),
        json!([{"action": "classify"}]),
        json!([{"action": "classify", "classify": {"type": "ROUTE"}}]),
        json!([{"action": "classify", "classify": {"type": "NOT_A_CLAIM", "value": "x"}}]),
        json!([{"action": "classify", "classify": {"type": "FIRST_CELL", "target": "api"}}]),
        json!([{"action": "proxy", "classify": {"type": "FIRST_CELL"}}]),
        json!([{"action": "classify", "classify": {"type": "FIRST_CELL"}, "proxy": {}}]),
        json!([{"action": "proxy", "proxy": {"address": "https://cell-1.example.com/"}}]),
        json!([{"match": {"type": "path"}, "action": "proxy"}]),
        json!([{"match": {"type": "path", "name": "x", "regexValue": "."}, "action": "proxy"}]),
        json!([{"match": {"type": "header", "regexValue": "."}, "action": "proxy"}]),
        json!([{"match": {"type": "header", "name": "a", "regexName": "b"}, "action": "proxy"}]),
        json!([{"match": {"type": "header", "regexName": "a", "regex_name": "b"}, "action": "proxy"}]),
        json!([{"match": {"type": "body", "regexValue": "."}, "action": "proxy"}]),
        json!([{"match": {"type": "path", "regexValue": ".", "extra": 1}, "action": "proxy"}]),
        json!([{"method": [], "action": "proxy"}]),
        json!([{"cookies": {"a": {}}, "action": "proxy"}]),
        json!([{"cookies": {"a": {"regex": "."}}, "action": "proxy"}]),
        json!([{"match": {"type": "path", "regexValue": "(?<t>.)"},
                "transform": {"type": "rot13", "input": "${t}", "output": "o"}, "action": "proxy"}]),
        json!([{"match": {"type": "path", "regexValue": "(?<t>.)"},
                "transform": {"type": "base64", "input": "${t}", "output": "not plain"}, "action": "proxy"}]),
        json!([{"match": {"type": "path", "regexValue": "(?<t>.)"},
                "transform": {"type": "jwt-claims", "input": "${t}", "output": "o", "extract": "(?<x>.)"}, "action": "proxy"}]),
        json!([{"validate": {"exists": []}, "action": "proxy"}]),
        json!([{"rollout": {"value": "x", "percentage": 150}, "action": "proxy"}]),
        json!([{"rollout": {"include": []}, "action": "proxy"}]),
        json!([{"action": "classify", "classify": {"source": "learn", "type": "ROUTE", "value": "x"}}]),
        json!([{"action": "classify", "classify": {"source": "learn", "value": "${x}"}}]),
        json!([{"action": "classify", "classify": {"source": "oracle"}}]),
        json!([{"action": "classify", "classify": {"source": "topology"}}]),
    ];
    for doc in &accept {
        let core = Ruleset::from_json("t", &doc.to_string());
        assert!(core.is_ok(), "core rejects {doc}: {:?}", core.err());
        let errors = errors(&validator, doc);
        assert!(
            errors.is_empty(),
            "schema rejects {doc}:\n{}",
            errors.join("\n")
        );
    }
    for doc in &reject {
        assert!(
            Ruleset::from_json("t", &doc.to_string()).is_err(),
            "core accepts {doc}"
        );
        assert!(!validator.is_valid(doc), "schema accepts {doc}");
    }
}
