//! `cargo fuzz run ruleset_parser`: `Ruleset::from_json` on arbitrary UTF-8.
//!
//! Rulesets are operator input validated at build time, but the parser must still never panic,
//! hang or blow up on garbage: `rulesctl validate` and `build.rs` run it on whatever a merge
//! request contains. A ruleset that compiles is then asked to decide a few fixed requests, so the
//! fuzzer also reaches evaluation of the rules it invented (templates, transforms, rollouts).
//!
//! Seed it with `rules/*.json` (see docs/fuzzing.md): random text rarely gets past the JSON
//! shape checks on its own.
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core::select::HeaderInterest;
use router_core::{Action, RequestParts, Ruleset};

fn probes() -> Vec<RequestParts> {
    let mut out = Vec::new();
    for (method, url) in [
        ("GET", "https://gitlab.example.com/"),
        ("GET", "https://gitlab.example.com/v2/"),
        ("GET", "https://gitlab.example.com/v2/group/project/manifests/latest"),
        ("POST", "https://gitlab.example.com/jwt/auth?service=container_registry&scope=repository:group/project:pull,push"),
        ("PUT", "https://registry.example.com/api/v4/projects/1?x=1&y=%20"),
    ] {
        let mut r = RequestParts::from_url(method, url).expect("static URL");
        r.add_header("Cookie", "_gitlab_session=cell-2-0123456789abcdef0123456789abcdef; a=b");
        r.add_header("Authorization", "Bearer glpat-W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ.01.181uebm4k");
        r.add_header("Private-Token", "glrtr-W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ.01.181uebm4k");
        r.add_header("X-Other", "value");
        out.push(r);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(json) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(ruleset) = Ruleset::from_json("fuzz", json) else {
        return;
    };
    assert!(!ruleset.rules().is_empty());
    if let HeaderInterest::Names(names) = ruleset.header_interest() {
        assert!(
            names.iter().all(|n| *n == n.to_ascii_lowercase()),
            "{names:?}"
        );
    }
    let _ = ruleset.fixed_addresses().count();
    for request in probes() {
        let decision = ruleset.decide(&request);
        if let Action::Classify(c) = &decision.action {
            // The body is what the Topology Service receives: always valid JSON, with the
            // rendered value kept a string, whatever the ruleset's templates produced.
            let body: serde_json::Value =
                serde_json::from_str(&c.body()).expect("classify body is JSON");
            assert!(body.is_object());
            let _ = c.cache_key();
        }
        let _ = decision.explain();
    }
});
