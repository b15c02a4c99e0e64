//! What the entry's top level runs while the isolate starts.
//!
//! The isolate's state (settings, ruleset, cell list, circuits) is made
//! here rather than on the first request: on Cloudflare the top level runs
//! while the TLS handshake is under way (within the 1 s start-up limit),
//! not while a user's request waits. A fresh isolate's first request costs
//! 124.3 M instructions with the state made on it and 79.8 M without
//! (`node bench/first-request.mjs`, `session_token`; docs/benchmark.md,
//! the ledger).
//!
//! Running the routing path here too, on made-up requests, does not pay:
//! workerd drops the wasm code V8 compiled at the top level before the
//! first request (V8's Liftoff code flushing on a memory-pressure signal;
//! `--no-flush-liftoff-code` keeps it), so the first request compiles it
//! again. It took 0.5 M instructions off the first request for 14 M more
//! at start-up.

use wasm_bindgen::prelude::*;
use worker::Env;

use crate::{held_lines, isolate};

/// Makes the isolate's state (what `routerSetup` would do on the first
/// request), holding the lines that writes for the first invocation
/// ([`held_lines`]).
#[wasm_bindgen(js_name = routerStart)]
pub fn router_start(env: Env) {
    held_lines::hold();
    let _ = isolate(&env);
}
