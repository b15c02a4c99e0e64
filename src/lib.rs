//! The worker edge of the GitLab Cells HTTP router: the `#[wasm_bindgen]`
//! exports the entry calls, and their wiring. Every decision is the core's
//! (`router_core`); this crate reads the environment once per isolate
//! (`isolate.rs`), carries a request's parts in (`ingest.rs`), does the I/O
//! the core asks for (`transport.rs`, `cache_api.rs`, `control.rs`,
//! `health_store.rs`, `probe.rs`, `kv.rs`, with time and randomness from
//! `clock.rs` and `random.rs` as the core's `platform.rs`), logs its own
//! lines (`log.rs`) and hands the entry the plan the core made.
//!
//! The Worker's fetch handler is `src/entry.js` (worker-build's
//! `CUSTOM_SHIM`): it reads the URL, the method and only the headers the
//! ruleset needs, and asks this module where the request goes:
//!
//! * [`route_sync`], a plain synchronous call, answers every request whose
//!   route is known without waiting: fixed cells, the legacy cell, and
//!   classifications in the isolate's memory cache. That is nearly all
//!   traffic, and it never enters Rust's async machinery.
//! * [`route_async`] answers the rest: Topology Service lookups (through the
//!   Cache API and the service), rejections and errors.
//!
//! Both answer with a plan (`router_core::wire::Plan`, encoded once for the
//! boundary), which the entry applies without deciding anything; the body
//! stream never crosses into wasm. A request `routeSync` cannot finish (a
//! memory-cache miss) is handed to `routeAsync` as it stands, so the rules
//! run once per request.

// As in router-core: no code outside the tests may panic on a value from
// outside (docs/decisions.md, "What can still panic").
#![cfg_attr(
    not(test),
    deny(
        clippy::string_slice,
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented,
        clippy::get_unwrap
    )
)]
#![deny(unsafe_code)]
// No function over 120 lines (the threshold is in clippy.toml).
#![deny(clippy::too_many_lines)]

mod cache_api;
mod clock;
mod control;
mod health_store;
mod held_lines;
mod ingest;
mod isolate;
mod kv;
mod log;
#[cfg(feature = "memory-probe")]
mod memory_probe;
mod platform;
mod probe;
mod random;
mod rulesets;
mod start;
mod transport;

use std::cell::RefCell;

use router_core::forward::{self, Incoming};
use router_core::route::{self, Pending};
use router_core::wire::{self, Plan, NOT_ROUTED, PLAN_TOO_LONG};
use wasm_bindgen::prelude::*;
use web_sys::Request;
use worker::{event, worker_sys, Env};

use crate::clock::HeldClock;
use crate::isolate::Isolate;
use crate::platform::JsPlatform;
use router_core::input::{fill_headers, split_input};

/// Talc instead of Rust's default dlmalloc: allocating (the plan, the log
/// line, the request's parts) was a quarter of a request's time in wasm,
/// and talc does it in fewer instructions and less code.
#[cfg(all(not(target_feature = "atomics"), target_family = "wasm"))]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

thread_local! {
    /// The request `routeSync` stopped at a memory-cache miss, for the
    /// `routeAsync` call the entry makes right after it (nothing runs in
    /// between: the entry calls one after the other without awaiting).
    static PENDING: RefCell<Option<(String, Incoming, Pending)>> = const { RefCell::new(None) };
    /// Where the entry writes each request's input for [`route_sync`]
    /// (`TextEncoder.encodeInto`, native code, instead of the glue's
    /// character-by-character copy of three strings into three fresh
    /// allocations). Sized by [`input_buffer`].
    static INPUT: RefCell<Box<[u8]>> = RefCell::new(Box::default());
    /// A plan [`route_sync`] found too long for the input buffer, until
    /// the entry takes it ([`take_plan`]).
    static LONG_PLAN: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Makes [`route_sync`]'s input buffer `capacity` bytes (its contents are
/// not kept) and returns its address in wasm memory, where the entry
/// writes. Called again only when a request needs more room.
#[wasm_bindgen(js_name = inputBuffer)]
pub fn input_buffer(capacity: usize) -> usize {
    INPUT.with(|input| {
        let mut input = input.borrow_mut();
        *input = vec![0; capacity].into_boxed_slice();
        input.as_mut_ptr() as usize
    })
}

#[event(start)]
fn start() {
    console_error_panic_hook::set_once();
}

fn js_array<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> js_sys::Array {
    items
        .into_iter()
        .map(|s| JsValue::from_str(s.as_ref()))
        .collect()
}

/// What the entry needs once per isolate: `[header names (null: all of
/// them), the Ed25519 seed requests are signed with (null: not signing),
/// the answer to a failed upstream fetch (the plan's answer form), the
/// address in wasm memory of the circuits' answered slots (one f64 each,
/// `CellHealth::answered_slots`) and their count]`. What it does with each
/// client header it asks [`header_kind`]. Asked at the top level, after
/// `routerStart`, so writes no held line ([`crate::start::router_release`]
/// does, in the first invocation).
#[wasm_bindgen(js_name = routerSetup)]
pub fn router_setup(env: Env) -> js_sys::Array {
    let iso = Isolate::get_or_make(&env);
    let state = &iso.state;
    let names: JsValue = match &state.header_names {
        Some(names) => js_array(names).into(),
        None => JsValue::NULL,
    };
    let seed: JsValue = match &state.config.signer {
        Ok(Some(signer)) => js_sys::Uint8Array::from(&signer.seed()[..]).into(),
        _ => JsValue::NULL,
    };
    let (slots, count) = {
        let health = state.health.borrow();
        let slots = health.answered_slots();
        (slots.as_ptr() as usize, slots.len())
    };
    js_sys::Array::of5(
        &names,
        &seed,
        &JsValue::from(wire::encoded_upstream_failure_answer()),
        &JsValue::from(slots),
        &JsValue::from(count),
    )
}

/// Every position, code and name the entry reads plans and writes its
/// input with (`router_core::wire::layout`, JSON): asked once, when the
/// entry's module is loaded.
#[wasm_bindgen(js_name = wireLayout)]
pub fn wire_layout() -> String {
    wire::layout()
}

/// What the entry does with a client header named `name` (lower case),
/// which it remembers per name: bit 0 set when it is always dropped
/// (`forward::drops_header`), and above it the name's position among the
/// header names [`router_setup`] gave plus one (0: not read).
#[wasm_bindgen(js_name = headerKind)]
pub fn header_kind(name: &str) -> u32 {
    let dropped = forward::drops_header(name, &[], false);
    let position = Isolate::made()
        .and_then(|iso| {
            let names = iso.state.header_names.as_ref()?;
            names.iter().position(|n| n == name)
        })
        .map_or(0, |at| at as u32 + 1);
    (position << 1) | u32::from(dropped)
}

/// Whether a plan that names its own drop list (`drop`, the plan's field:
/// names joined by `ITEM`) drops the client header `name`: named there
/// (compared with `_` read as `-`) or of a family always dropped.
#[wasm_bindgen(js_name = droppedBy)]
pub fn dropped_by(name: &str, drop: &str) -> bool {
    let key = forward::drop_key(name);
    drop.split(wire::ITEM).any(|n| n == key)
        || forward::FORBIDDEN_PREFIXES
            .iter()
            .any(|p| key.starts_with(p))
}

/// The plan for a request the entry could not route at all (an exception
/// in the entry, a wasm instance that panicked): an answer and an error
/// log line with `message`.
#[wasm_bindgen(js_name = internalError)]
pub fn internal_error(message: &str) -> String {
    let iso = Isolate::made();
    let metrics = iso.as_ref().and_then(|iso| iso.state.metrics.as_deref());
    forward::build::internal_error(message, metrics).encode()
}

/// The entry's report of an upstream outcome for circuit `circuit` (the
/// plan's report fields): a fetch that threw (`cells::circuit::FETCH_FAILED`),
/// response headers that did not come in time (`NO_HEADERS`), or a status
/// the plan asked to hear of, `retry_after` telling whether the response
/// carries `Retry-After`; `flags` as the plan gave them (`wire::flag`), `sent_ms` when the
/// request was sent. Feeds the address's circuit; a circuit that opens or
/// closes is logged.
#[wasm_bindgen(js_name = cellOutcome)]
pub fn cell_outcome(circuit: usize, flags: u32, status: u16, sent_ms: f64, retry_after: bool) {
    let Some(iso) = Isolate::made() else {
        return;
    };
    let now = clock::now_ms();
    let sent = sent_ms.max(0.0) as u64;
    let view = iso.forward_view();
    let change =
        forward::build::report_outcome(&view, circuit, flags, status, sent, retry_after, now);
    if let Some(message) = change {
        log::warn("cell-health", &message);
    }
}

/// The Cron Trigger (`scheduled`): probes every listed cell's health URL,
/// keeps the result in the deployment's KV namespace for every isolate
/// (read at most once per `GITLAB_CELL_HEALTH_REFRESH_MS` each), applies it
/// to this isolate at once, and logs one summary line.
#[wasm_bindgen(js_name = routerScheduled)]
pub async fn router_scheduled(env: Env) {
    let iso = Isolate::get_or_make(&env);
    held_lines::release();
    let config = iso.config();
    if config.cells.is_empty() {
        log::warn(
            "cell-health",
            "GITLAB_CELLS lists no cell: nothing to probe",
        );
        return;
    }
    let record = probe::probe_cells(
        &config.cells,
        config.upstream_scheme,
        config.probe_timeout_ms,
    )
    .await;
    match iso.health_store() {
        Some(store) => store.put(&record, config.health_max_age_secs).await,
        None => log::warn(
            "cell-health",
            &format!(
                "no {} KV binding: the probe's record reaches only the isolate that ran it",
                control::BINDING
            ),
        ),
    }
    iso.apply_health(&record);
    let line = record.summary_line(&config.cells);
    held_lines::write(!line.starts_with(r#"{"level":"info""#), line);
}

/// Routes a request whose route is known without waiting, and writes its
/// encoded plan over the [`input_buffer`] (read by then): returns the
/// plan's length in bytes, [`NOT_ROUTED`] to send the request to
/// [`route_async`] (a classification the memory cache does not hold, a URL
/// that does not parse, headers that need asking one by one), or
/// [`PLAN_TOO_LONG`] for a plan longer than the buffer, which
/// [`take_plan`] then returns. Nothing is allocated for the entry to free
/// and no result array is made (a returned `String` cost both, and a
/// shrinking copy).
///
/// The input: the first `len` bytes of the [`input_buffer`], UTF-8, the
/// URL, NUL, the method, NUL, then the values of the names from
/// [`router_setup`], in order, joined by NUL, an absent header as `\x01`
/// (the entry's `scanHeaders`). Input that does not read so goes to
/// [`route_async`], which is handed the same parts as strings.
///
/// No `Env` is passed: the isolate's state was made by [`router_setup`],
/// which the entry calls first (and again after a panic); without it the
/// request goes to [`route_async`]. An `Env` argument cost ~0.9 k wasm
/// instructions a call in wasm-bindgen's externref shim.
#[wasm_bindgen(js_name = routeSync)]
pub fn route_sync(len: usize) -> i32 {
    let Some(iso) = Isolate::made() else {
        return NOT_ROUTED;
    };
    let plan = INPUT.with(|input| {
        let input = input.borrow();
        let (url, method, headers) = split_input(input.get(..len)?)?;
        route_sync_parts(&iso, url, method, headers)
    });
    let Some(plan) = plan else {
        return NOT_ROUTED;
    };
    INPUT.with(|input| {
        let mut input = input.borrow_mut();
        match (input.get_mut(..plan.len()), i32::try_from(plan.len())) {
            (Some(room), Ok(length)) => {
                room.copy_from_slice(plan.as_bytes());
                length
            }
            _ => {
                LONG_PLAN.with(|long| *long.borrow_mut() = Some(plan));
                PLAN_TOO_LONG
            }
        }
    })
}

/// The plan [`route_sync`] could not write into the input buffer.
#[wasm_bindgen(js_name = takePlan)]
pub fn take_plan() -> Option<String> {
    LONG_PLAN.with(|long| long.borrow_mut().take())
}

fn route_sync_parts(iso: &Isolate, url: &str, method: &str, headers: &str) -> Option<String> {
    let state = &iso.state;
    let names = state.header_names.as_ref()?;
    // One clock read for the whole call (the checks below, the memory
    // cache, the cell's circuit).
    let _clock = HeldClock::hold();
    let now = (iso.controls.is_some() || !state.config.cells.is_empty()).then(clock::now_ms);
    if now.is_some_and(|now| iso.health_read_due_at(now) || iso.health_must_wait(now)) {
        // routeAsync starts the probe record's read in the background of
        // this request (it needs the request's ctx), and waits only for an
        // isolate's first read, briefly.
        return None;
    }
    let mut incoming = Incoming::parse(url, method.to_string())?;
    // Test builds only: the panic this probe exists to cause.
    #[cfg(feature = "panic-probe")]
    #[allow(clippy::panic)]
    match incoming.parts.path.as_str() {
        "/__panic_probe__/sync" => panic!("panic probe: routeSync"),
        "/__panic_probe__/async" => return None,
        _ => {}
    }
    #[cfg(feature = "memory-probe")]
    if incoming.parts.path == memory_probe::PATH {
        return Some(memory_probe::answer(iso).encode());
    }
    if !fill_headers(&mut incoming.parts, names, headers) {
        return None;
    }
    incoming.trace_from_headers(&JsPlatform);
    if let Some(controls) = &iso.controls {
        if controls.needs_read(now.unwrap_or_default()) {
            return None;
        }
    }
    let view = iso.forward_view();
    let Some(rules) = state.ruleset.as_ref().filter(|_| !view.passthrough) else {
        return Some(forward::plan(&view, &JsPlatform, &incoming, None).encode());
    };
    match route::route_from_memory(rules, iso.resolver.as_ref(), &incoming.parts) {
        Ok(mut routed) => {
            iso.evaluate_shadow(&incoming, &mut routed);
            Some(forward::plan(&view, &JsPlatform, &incoming, Some(&routed)).encode())
        }
        Err(pending) => {
            PENDING.with(|p| *p.borrow_mut() = Some((url.to_string(), incoming, pending)));
            None
        }
    }
}

/// Routes any request and returns its encoded plan. A request
/// [`route_sync`] stopped goes on from where it stopped; others are routed
/// from the start. The Topology Service's answers are cached for
/// [`route_sync`]; Cache API writes are handed to `ctx.waitUntil`.
///
/// `headers`: as for [`route_sync`], or `None` when the rules need every
/// header (read from `req` here).
#[wasm_bindgen(js_name = routeAsync)]
pub async fn route_async(
    env: Env,
    ctx: worker_sys::Context,
    req: Request,
    url: String,
    method: String,
    headers: Option<String>,
) -> String {
    let iso = Isolate::get_or_make(&env);
    // In the background: only an isolate's first requests wait for it
    // (below, after the control document's first read has started too).
    Isolate::start_health_read(&iso, &ctx, clock::now_ms());
    let stopped = PENDING
        .with(|p| p.borrow_mut().take())
        .filter(|(u, _, _)| *u == url);
    let (incoming, pending) = match stopped {
        Some((_, incoming, pending)) => (incoming, Some(pending)),
        None => {
            let Some(mut incoming) = Incoming::parse(&url, method) else {
                return Plan::Answer {
                    answer: wire::Answer::text(400, "gitlab-http-router: bad request URL\n"),
                    log: None,
                }
                .encode();
            };
            ingest::read_headers(
                iso.state.header_names.as_deref(),
                &mut incoming.parts,
                &req,
                headers.as_deref(),
            );
            incoming.trace_from_headers(&JsPlatform);
            (incoming, None)
        }
    };
    // Test builds only: the panic this probe exists to cause.
    #[cfg(feature = "panic-probe")]
    #[allow(clippy::panic)]
    if incoming.parts.path == "/__panic_probe__/async" {
        // After an await, as a panic in the resolver would be: from a
        // microtask, not from the entry's call.
        router_core::platform::Platform::sleep(&JsPlatform, 1).await;
        panic!("panic probe: routeAsync");
    }
    #[cfg(feature = "memory-probe")]
    if incoming.parts.path == memory_probe::PATH {
        return memory_probe::answer(&iso).encode();
    }
    Isolate::refresh_control(&iso, &ctx).await;
    iso.wait_for_first_health_read().await;
    let rules = iso.state.ruleset.as_ref().filter(|_| !iso.passthrough());
    let mut routed = match (rules, &iso.resolver, pending) {
        (None, _, _) => None,
        (Some(rules), Some(resolver), Some(pending)) => Some(
            route::route_pending(rules, resolver, &incoming.parts, &incoming.trace, pending).await,
        ),
        (Some(rules), resolver, _) => {
            Some(route::route(rules, resolver.as_ref(), &incoming.parts, &incoming.trace).await)
        }
    };
    if let Some(routed) = &mut routed {
        iso.evaluate_shadow(&incoming, routed);
    }
    if let Some(resolver) = &iso.resolver {
        // Cache API writes finish after the response is sent.
        for write in resolver.shared_cache().take_pending() {
            let _ = ctx.wait_until(&write);
        }
    }
    forward::plan(&iso.forward_view(), &JsPlatform, &incoming, routed.as_ref()).encode()
}

/// The edge's pure parts, natively: settings to isolate state, and the
/// request's parts read from the entry's input.
#[cfg(test)]
mod tests;

/// The edge's wasm-only parts, as wasm (`wasm-bindgen-test` under Node).
/// Test code only: the allocator's tests call `GlobalAlloc` and read wasm
/// memory through raw pointers.
#[cfg(all(test, target_family = "wasm"))]
#[allow(unsafe_code)]
mod wasm_tests;
