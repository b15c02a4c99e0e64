//! The routing path run once while the isolate starts (the entry's top
//! level), on made-up requests, with no I/O and nothing kept.
//!
//! V8 compiles a wasm function (Liftoff) the first time it is called, and
//! a fresh isolate's first request used to pay for compiling everything it
//! called: about 1.2 MiB of machine code, ~125 M instructions, most of that
//! request's CPU (`node bench/first-request.mjs`). Called from the top
//! level, that compiling happens when the isolate starts, which Cloudflare
//! does during the TLS handshake (and within the 1 s start-up limit), not
//! while a user's request waits. What still compiles on a first request is
//! what only I/O reaches: the Topology Service call and the Cache API.
//!
//! Remove when V8 can be told to compile a module's functions eagerly
//! from the script (it cannot: `--no-wasm-lazy-compilation` is a flag no
//! Worker can set), or when a first request no longer costs more than a
//! warm one (`bench/first-request.mjs`, first against second).

use router_core::forward::{self, Incoming};
use router_core::route;
use router_core::wire::{HEADER_ABSENT, SEPARATOR};
use wasm_bindgen::prelude::*;

use crate::ingest::fill_headers;
use crate::{io, made_isolate};

/// A session cookie of the shape the rulesets read, naming no cell: the
/// memory cache misses and nothing is asked.
const WARM_UP_COOKIE: &str = "_gitlab_session=cell-0-0123456789abcdef0123456789abcdef";

/// The made-up requests: every kind of rule the rulesets have is reached by
/// one of them (a path, a session cookie, nothing at all).
const WARM_UP_REQUESTS: [(&str, &str, bool); 3] = [
    ("https://warm-up.invalid/", "GET", false),
    (
        "https://warm-up.invalid/warm-up-group/warm-up-project/-/tree/main",
        "GET",
        true,
    ),
    (
        "https://warm-up.invalid/api/v4/projects/1/repository/files?ref=main",
        "POST",
        false,
    ),
];

/// Routes [`WARM_UP_REQUESTS`] as `routeSync` would, and throws the plans
/// away: the rules, the memory cache (a miss), the plan and its encoding,
/// the log line's template. No request is sent, nothing is cached, logged
/// or counted, and no circuit hears of it. Does nothing before
/// `routerSetup` has made the isolate's state.
#[wasm_bindgen(js_name = warmUp)]
pub fn warm_up() -> u32 {
    let Some(iso) = made_isolate() else {
        return 0;
    };
    let state = &iso.state;
    let Some(names) = state.header_names.as_ref() else {
        return 0;
    };
    let router = iso.router();
    let mut planned = 0;
    for (url, method, cookie) in WARM_UP_REQUESTS {
        let Some(mut incoming) = Incoming::parse(url, method.to_string()) else {
            continue;
        };
        let values: Vec<&str> = names
            .iter()
            .map(|n| {
                if cookie && n == "cookie" {
                    WARM_UP_COOKIE
                } else {
                    HEADER_ABSENT
                }
            })
            .collect();
        if !fill_headers(
            &mut incoming.parts,
            names,
            &values.join(&SEPARATOR.to_string()),
        ) {
            continue;
        }
        incoming.trace_from_headers(&io::JsPlatform);
        let plan = match state.ruleset.as_ref() {
            None => Some(forward::plan(&router, &io::JsPlatform, &incoming, None).encode()),
            Some(rules) => {
                match route::route_from_memory(rules, iso.resolver.as_ref(), &incoming.parts) {
                    Ok(routed) => Some(
                        forward::plan(&router, &io::JsPlatform, &incoming, Some(&routed)).encode(),
                    ),
                    Err(_) => None,
                }
            }
        };
        planned += u32::from(plan.is_some_and(|p| !p.is_empty()));
    }
    planned
}
