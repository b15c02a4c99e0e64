//! What the entry's top level runs while the isolate starts.
//!
//! The isolate's state (settings, ruleset, cell list, circuits) is made
//! here rather than on the first request: on Cloudflare the top level runs
//! while the TLS handshake is under way (within the 1 s start-up limit),
//! not while a user's request waits. A fresh isolate's first request costs
//! 124.3 M instructions with the state made on it and 79.8 M without
//! (`node bench/first-request.mjs`, `session_token`;
//! docs/performance-ledger.md).
//!
//! Running the routing path here too, on made-up requests, does not pay:
//! the wasm code V8 compiles here is dropped whenever another isolate
//! starts in the same process, and so compiled again by the first request.
//! workerd's `Worker::Isolate` constructor signals moderate memory
//! pressure to each new isolate's heap, and on that signal V8 drops the
//! Liftoff code of every wasm module in the process (`--flush-liftoff-code`,
//! on by default). In the benchmark, Miniflare's own workers start after
//! the router; on Cloudflare, any Worker starting on the same machine does.
//! Warming the path took 0.5 M instructions off the first request for 14 M
//! more at start-up. What is made here (the state) stays made: only the
//! code that made it goes.

use wasm_bindgen::prelude::*;
use worker::Env;

use crate::held_lines;
use crate::isolate::Isolate;

/// Makes the isolate's state (what `routerSetup` would do on the first
/// request), holding the lines that writes for the first invocation
/// ([`held_lines`]).
#[wasm_bindgen(js_name = routerStart)]
pub fn router_start(env: Env) {
    held_lines::hold();
    let _ = Isolate::get_or_make(&env);
}

/// Writes the lines held since [`router_start`]: the entry calls it in
/// its first invocation, the first place a line reaches the logs.
#[wasm_bindgen(js_name = routerRelease)]
pub fn router_release() {
    held_lines::release();
}
