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
//! `router_core::config::settings()` order instead of its name, and `NAME` alone removes it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core_fuzz::{assert_routes_plain_request, settings, World};
use std::sync::OnceLock;

/// The names of the settings the router reads, in its table's order.
fn names() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| {
        router_core::config::settings()
            .iter()
            .map(|s| s.name)
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let names = names();
    let text = String::from_utf8_lossy(data);
    let mut vars = settings("session_token");
    for line in text.split('\n') {
        let (name, value) = match line.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (line, None),
        };
        let name = match name.parse::<usize>() {
            Ok(i) => names.get(i % names.len()).map_or(name, |n| n).to_string(),
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
