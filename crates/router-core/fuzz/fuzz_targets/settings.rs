//! `cargo fuzz run settings`: arbitrary values for the router's settings through
//! `Config::from_lookup` into an isolate (as `src/isolate.rs` makes it), which must then still
//! forward a plain request to its legacy cell: a bad value is a reported problem and a
//! fallback, never a panic and never a refusal of traffic. Two settings may legitimately stop
//! traffic, and are checked to do it cleanly: `GITLAB_PROXY_HOST` missing or malformed (there
//! is no legacy cell: every request gets a 502 naming it) and a required signature without a
//! usable `GITLAB_ROUTER_SIGNING_KEY` (a 503: the cells refuse unsigned requests).
//!
//! Input (UTF-8, invalid sequences replaced): lines `NAME=value` over a complete set of
//! settings (`router_core_fuzz::settings`); `NAME` may be the number of a variable in
//! `router_core::config::vars` order instead of its name, and `NAME` alone removes it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core_fuzz::{assert_routes_plain_request, settings, World};

const NAMES: &[&str] = &[
    "GITLAB_RULES_CONFIG",
    "GITLAB_TOPOLOGY_SERVICE_URL",
    "GITLAB_PROXY_HOST",
    "GITLAB_UPSTREAM_SCHEME",
    "GITLAB_ALLOWED_UPSTREAMS",
    "GITLAB_TOPOLOGY_SERVICE_CLIENT_ID",
    "GITLAB_TOPOLOGY_SERVICE_CLIENT_SECRET",
    "GITLAB_TOPOLOGY_TIMEOUT_MS",
    "GITLAB_TOPOLOGY_RETRIES",
    "GITLAB_TOPOLOGY_BACKOFF_BASE_MS",
    "GITLAB_TOPOLOGY_BACKOFF_MAX_MS",
    "GITLAB_CACHE_MAX_TTL_SECONDS",
    "GITLAB_CACHE_DEFAULT_TTL_SECONDS",
    "GITLAB_CACHE_NEGATIVE_TTL_SECONDS",
    "GITLAB_CACHE_STALE_IF_ERROR_SECONDS",
    "GITLAB_MEMORY_CACHE_ENTRIES",
    "GITLAB_TOPOLOGY_RETRY_BUDGET_PERCENT",
    "GITLAB_TOPOLOGY_RETRY_BUDGET_MIN",
    "GITLAB_TOPOLOGY_BREAKER_FAILURES",
    "GITLAB_TOPOLOGY_BREAKER_OPEN_MS",
    "GITLAB_ROUTER_SIGNING_KEY",
    "GITLAB_ROUTER_SIGNING_POLICY",
    "GITLAB_ROUTER_SIGNATURE_TTL_SECONDS",
    "GITLAB_ROUTER_SIGNING_ISSUER",
    "GITLAB_REQUEST_LOG",
    "GITLAB_CELLS",
    "GITLAB_CELL_FAILURES",
    "GITLAB_CELL_FAILURE_WINDOW_MS",
    "GITLAB_CELL_OPEN_MS",
    "GITLAB_CELL_HEALTH_REFRESH_MS",
    "GITLAB_CELL_HEALTH_MAX_AGE_SECONDS",
    "GITLAB_CELL_PROBE_TIMEOUT_MS",
    "GITLAB_CELL_HEADERS_TIMEOUT_MS",
    "GITLAB_CELL_TRIAL_SPACING_MS",
    "GITLAB_SMOKE_TEST_SECRET",
    "GITLAB_CONTROL_REFRESH_SECONDS",
    "GITLAB_NOT_FOUND_DELAY_MS",
    "GITLAB_ENVIRONMENT",
];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut vars = settings("session_token");
    for line in text.split('\n') {
        let (name, value) = match line.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (line, None),
        };
        let name = match name.parse::<usize>() {
            Ok(i) => NAMES[i % NAMES.len()].to_string(),
            Err(_) => name.to_string(),
        };
        vars.retain(|(n, _)| *n != name);
        if let Some(value) = value {
            vars.push((name, value.to_string()));
        }
    }
    let world = World::new(&vars);
    assert_routes_plain_request(&world);
});
