//! The edge's pure parts, natively: settings to the isolate's state, and
//! a request's parts read back from the entry's input.

use router_core::RequestParts;

use crate::isolate::Isolate;
use router_core::input::{fill_headers, split_input};

fn isolate_with(vars: &[(&str, &str)]) -> (Isolate, Vec<String>) {
    let errors = std::cell::RefCell::new(Vec::new());
    let iso = Isolate::from_lookup(
        |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        },
        |level, scope, message| {
            errors
                .borrow_mut()
                .push(format!("{level} {scope}: {message}"))
        },
        None,
    );
    (iso, errors.into_inner())
}

const LEGACY: &[(&str, &str)] = &[
    ("GITLAB_RULES_CONFIG", "cells"),
    ("GITLAB_PROXY_HOST", "legacy.example:8080"),
    ("GITLAB_UPSTREAM_SCHEME", "http"),
];

#[test]
fn the_compiled_ruleset_named_is_loaded_and_a_wrong_name_is_reported() {
    let (iso, errors) = isolate_with(LEGACY);
    assert_eq!(iso.state.ruleset.as_ref().map(|r| r.name()), Some("cells"));
    assert!(
        errors.iter().all(|e| !e.contains("GITLAB_RULES_CONFIG")),
        "{errors:?}"
    );
    let (none, errors) = isolate_with(&[
        ("GITLAB_RULES_CONFIG", "nope"),
        ("GITLAB_PROXY_HOST", "l.example"),
    ]);
    assert!(none.state.ruleset.is_none());
    assert!(
        errors
            .iter()
            .any(|e| e.contains("names no compiled ruleset (known: ")),
        "{errors:?}"
    );
}

#[test]
fn settings_problems_are_logged_once_each_at_their_level() {
    let (iso, lines) = isolate_with(&[
        ("GITLAB_RULES_CONFIG", "cells"),
        ("GITLAB_PROXY_HOST", "legacy.example"),
        ("GITLAB_ROUTER_SIGNING_POLICY", "requird"),
    ]);
    assert_eq!(
        iso.config().signing_policy,
        router_core::forward::SigningPolicy::Optional
    );
    let policy: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("GITLAB_ROUTER_SIGNING_POLICY=\"requird\""))
        .collect();
    assert_eq!(policy.len(), 1, "{lines:?}");
    assert!(
        policy[0].starts_with("warn config: GITLAB_ROUTER_SIGNING_POLICY=\"requird\": "),
        "{policy:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("info config: GITLAB_ROUTER_SIGNING_KEY: not set")),
        "{lines:?}"
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
