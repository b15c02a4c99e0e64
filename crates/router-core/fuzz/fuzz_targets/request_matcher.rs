//! `cargo fuzz run request_matcher`: the shipped rulesets (`rules/session_token.json`,
//! `rules/container_registry.json`, compiled once) deciding arbitrary requests.
//!
//! Input: lines separated by `\n` (invalid UTF-8 is replaced, as the edge only ever sees
//! strings):
//!
//! ```text
//! method \n path \n query \n cookie \n authorization \n private-token \n job-token
//!        \n runner-token \n x-gitlab-runner-token \n name: value \n name: value ...
//! ```
//!
//! A missing line is an absent header. Random bytes almost never carry a correct routable-token
//! CRC, so two helpers let the fuzzer past that check: a header value ending in `!` gets the
//! correct base36 CRC of its last word appended (instead of the `!`), and an authorization
//! value `Basic~user:password` is sent as `Basic base64(user:password)` (after the same `!`
//! fix-up of the password).
//!
//! Besides "never panics", the decisions must keep the invariants the rules promise: a
//! `SESSION_PREFIX` value is `cell-<digits>`, a `CELL_ID` a decimal `u64`, a `ROUTE` a
//! repository path of the distribution grammar (no `..`, no quote, no `%`, no empty segment),
//! the classify body is JSON holding exactly that value, and `FIRST_CELL` only for `/v2/` and
//! `/v2/_catalog`.
#![no_main]

use std::sync::LazyLock;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use router_core::{Action, ClassifyKind, RequestParts, Ruleset};

static SESSION_TOKEN: LazyLock<Ruleset> = LazyLock::new(|| {
    Ruleset::from_json(
        "session_token",
        include_str!("../../../../rules/session_token.json"),
    )
    .expect("rules/session_token.json compiles")
});

static CONTAINER_REGISTRY: LazyLock<Ruleset> = LazyLock::new(|| {
    Ruleset::from_json(
        "container_registry",
        include_str!("../../../../rules/container_registry.json"),
    )
    .expect("rules/container_registry.json compiles")
});

const FIXED_HEADERS: [&str; 6] = [
    "cookie",
    "authorization",
    "private-token",
    "job-token",
    "runner-token",
    "x-gitlab-runner-token",
];

/// `...word!` -> `...word<crc(word)>`, the word being what follows the last space or colon.
fn fix_crc(value: &str) -> String {
    match value.strip_suffix('!') {
        None => value.to_string(),
        Some(head) => {
            let start = head.rfind([' ', ':']).map_or(0, |i| i + 1);
            format!(
                "{head}{}",
                router_core::select::transform::routable_token::crc_field(head[start..].as_bytes())
            )
        }
    }
}

fn header_value(name: &str, raw: &str) -> String {
    if name == "authorization" {
        if let Some(credentials) = raw.strip_prefix("Basic~") {
            return format!("Basic {}", STANDARD.encode(fix_crc(credentials).as_bytes()));
        }
    }
    fix_crc(raw)
}

fn request_from(data: &[u8]) -> RequestParts {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let mut req = RequestParts {
        method: lines.next().unwrap_or("GET").to_string(),
        host: "gitlab.example.com".to_string(),
        path: lines.next().unwrap_or("/").to_string(),
        query: lines.next().unwrap_or("").to_string(),
        headers: Vec::new(),
    };
    for name in FIXED_HEADERS {
        match lines.next() {
            Some(raw) if !raw.is_empty() => req.add_header(name, &header_value(name, raw)),
            Some(_) => {}
            None => return req,
        }
    }
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            let name = name.trim().to_ascii_lowercase();
            req.add_header(&name, &header_value(&name, value.trim_start()));
        }
    }
    req
}

fn is_repository_path(value: &str) -> bool {
    !value.is_empty()
        && value.split('/').all(|segment| {
            !segment.is_empty()
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
                && segment.as_bytes()[0].is_ascii_alphanumeric()
                && segment.as_bytes()[segment.len() - 1].is_ascii_alphanumeric()
        })
        && !value.contains("..")
}

fn check(ruleset: &Ruleset, req: &RequestParts) {
    let decision = ruleset.decide(req);
    // Both shipped rulesets end in a catch-all: some rule always decides.
    assert!(decision.rule_id.is_some(), "no rule matched {req:?}");
    let Action::Classify(c) = &decision.action else {
        return;
    };
    let body: serde_json::Value = serde_json::from_str(&c.body()).expect("classify body is JSON");
    let value = c.value.as_deref();
    match c.kind {
        ClassifyKind::FirstCell => {
            assert!(value.is_none());
            assert!(req.path == "/v2/" || req.path == "/v2/_catalog", "{req:?}");
        }
        ClassifyKind::SessionPrefix => {
            let v = value.expect("session prefix value");
            let digits = v.strip_prefix("cell-").expect("cell- prefix");
            assert!(
                !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
                "{v:?}"
            );
            assert_eq!(body["value"].as_str(), Some(v));
        }
        ClassifyKind::CellId => {
            let v = value.expect("cell id value");
            assert!(v.parse::<u64>().is_ok(), "{v:?}");
            assert_eq!(body["value"].as_str(), Some(v));
        }
        ClassifyKind::Claim(_) => {
            let v = value.expect("claim value");
            assert!(is_repository_path(v), "route {v:?} from {req:?}");
            assert_eq!(body["claims"][0]["route"].as_str(), Some(v));
            assert_eq!(body["claims"].as_array().map(Vec::len), Some(1));
        }
        ClassifyKind::Learn => {
            assert_eq!(body["learn"]["path_info"].as_str(), Some(req.path.as_str()));
        }
    }
    let _ = c.cache_key();
}

fuzz_target!(|data: &[u8]| {
    let req = request_from(data);
    check(&SESSION_TOKEN, &req);
    check(&CONTAINER_REGISTRY, &req);
});
