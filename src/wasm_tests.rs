//! The edge's wasm-only parts, run as wasm (`wasm-bindgen-test` under
//! Node, `scripts/test.sh`): the worker's allocator (talc) in wasm memory, the
//! input buffer and plan that `routeSync` shares with the entry, and the
//! isolate's setup and the `routeSync` -> `routeAsync` hand-off, driven as
//! `src/entry.js` drives them (its views of wasm memory, `TextEncoder`).
//! What needs workerd's globals (the Cache API, KV, a request's upstream
//! fetch) is left to the end-to-end suites (tests/e2e).

use std::alloc::{GlobalAlloc, Layout};

use js_sys::{Array, Function, Object, Reflect, Uint8Array};
use router_core::wire::{self, forward, head, NOT_ROUTED, PLAN_TOO_LONG};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::wasm_bindgen_test;
use worker::Env;

/// A live block: its address, layout and the byte its contents start at.
struct Block {
    ptr: *mut u8,
    layout: Layout,
    tag: u8,
}

impl Block {
    fn fill(&self, from: usize) {
        for i in from..self.layout.size() {
            // SAFETY: i < the block's size.
            unsafe { self.ptr.add(i).write(self.tag.wrapping_add(i as u8)) };
        }
    }

    fn holds(&self, upto: usize) -> bool {
        // SAFETY: a live block of at least `upto` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr, upto) };
        bytes
            .iter()
            .enumerate()
            .all(|(i, &b)| b == self.tag.wrapping_add(i as u8))
    }
}

/// The worker's allocator as the worker sets it up (talc over wasm memory,
/// growing it on demand): blocks from a byte to past a wasm page (64 KiB),
/// aligned 1 to 64, come back aligned and apart, zeroed when asked, and
/// keep their contents when reallocated larger and smaller.
#[wasm_bindgen_test]
fn the_worker_s_own_allocator_keeps_blocks_apart_and_their_contents() {
    let heap = &crate::ALLOCATOR;
    let sizes = [1, 24, 100, 1_000, 4_096, 65_537, 300_000];
    let mut blocks: Vec<Block> = Vec::new();
    for (i, size) in sizes.into_iter().enumerate() {
        let layout = Layout::from_size_align(size, 1 << (i % 7)).unwrap();
        // SAFETY: a non-zero size.
        let ptr = unsafe { heap.alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory at {size}");
        assert_eq!(ptr as usize % layout.align(), 0, "{layout:?}");
        // SAFETY: just allocated, `size` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(ptr, size) };
        assert!(bytes.iter().all(|&b| b == 0), "alloc_zeroed of {size}");
        let block = Block {
            ptr,
            layout,
            tag: i as u8,
        };
        block.fill(0);
        blocks.push(block);
    }
    for block in &mut blocks {
        for new in [block.layout.size() * 3, block.layout.size() / 2 + 1] {
            let old = block.layout.size();
            // SAFETY: a live block of this layout; a non-zero size.
            let ptr = unsafe { heap.realloc(block.ptr, block.layout, new) };
            assert!(!ptr.is_null(), "out of memory at {new}");
            assert_eq!(ptr as usize % block.layout.align(), 0, "realloc to {new}");
            block.ptr = ptr;
            block.layout = Layout::from_size_align(new, block.layout.align()).unwrap();
            assert!(
                block.holds(old.min(new)),
                "realloc {old} -> {new} lost the contents"
            );
            block.fill(old.min(new));
        }
    }
    // Every block still holds what was written to it: none overlaps another.
    for block in blocks {
        assert!(
            block.holds(block.layout.size()),
            "{:?} overwritten",
            block.layout
        );
        // SAFETY: a live block of this layout, freed once.
        unsafe { heap.dealloc(block.ptr, block.layout) };
    }
}

// The entry's side, as src/entry.js does it.

/// `new TextEncoder().encodeInto(text, view of wasm memory at address)`:
/// the bytes written.
fn encode_into(text: &str, address: usize, capacity: usize) -> usize {
    let encode = Function::new_with_args(
        "memory, address, capacity, text",
        "return new TextEncoder().encodeInto(text, new Uint8Array(memory.buffer, address, capacity)).written;",
    );
    let args = Array::of4(
        &wasm_bindgen::memory(),
        &JsValue::from(address),
        &JsValue::from(capacity),
        &JsValue::from_str(text),
    );
    encode
        .apply(&JsValue::NULL, &args)
        .unwrap()
        .as_f64()
        .unwrap() as usize
}

/// The entry's `writeInput`: grows the buffer to `max(4096, the next power
/// of two of text.length * 3)` when needed; `(bytes written, address)`.
fn write_input(text: &str, buffer: &mut (usize, usize)) -> usize {
    let room = text.encode_utf16().count() * 3;
    if room > buffer.1 {
        buffer.1 = room.next_power_of_two().max(4096);
        buffer.0 = crate::input_buffer(buffer.1);
    }
    encode_into(text, buffer.0, buffer.1)
}

/// The plan `routeSync` wrote at `address`, decoded as the entry does.
fn read_plan(address: usize, length: usize) -> String {
    let memory: js_sys::WebAssembly::Memory = wasm_bindgen::memory().unchecked_into();
    let view = Uint8Array::new_with_byte_offset_and_length(
        &memory.buffer(),
        address as u32,
        length as u32,
    );
    String::from_utf8(view.to_vec()).expect("the plan is UTF-8")
}

const CELLS: &str =
    r#"[{"id": 2, "address": "cell2.example"}, {"id": 3, "address": "cell3.example:8443"}]"#;

/// The environment every test's isolate is made from (one per test
/// binary, as per isolate): the cells ruleset, two listed cells, and a
/// Topology Service on a loopback port nothing listens on.
fn env() -> Env {
    let env = Object::new();
    for (name, value) in [
        ("GITLAB_RULES_CONFIG", "cells"),
        ("GITLAB_PROXY_HOST", "legacy.example:8080"),
        ("GITLAB_UPSTREAM_SCHEME", "http"),
        ("GITLAB_TOPOLOGY_SERVICE_URL", "http://127.0.0.1:1"),
        ("GITLAB_TOPOLOGY_RETRIES", "0"),
        ("GITLAB_TOPOLOGY_TIMEOUT_MS", "2000"),
        ("GITLAB_CELLS", CELLS),
    ] {
        Reflect::set(&env, &name.into(), &value.into()).unwrap();
    }
    env.unchecked_into()
}

/// The entry's first call in an isolate, `routerSetup(env)`, as an array.
fn setup() -> Array {
    crate::router_setup(env())
}

/// A request's `routeSync` input: URL, method, then one value per header
/// name `routerSetup` gave (`HEADER_ABSENT` unless in `values`).
fn input(url: &str, method: &str, values: &[(&str, &str)]) -> String {
    let names = setup().get(0).unchecked_into::<Array>();
    let mut parts = vec![url.to_string(), method.to_string()];
    for name in names.iter() {
        let name = name.as_string().unwrap();
        let value = values.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        parts.push(value.unwrap_or(wire::HEADER_ABSENT).to_string());
    }
    parts.join(&wire::SEPARATOR.to_string())
}

fn fields(plan: &str) -> Vec<&str> {
    plan.split(wire::FIELD).collect()
}

#[wasm_bindgen_test]
fn router_setup_gives_the_header_names_no_key_the_failure_answer_and_the_answered_slots() {
    let first = setup();
    assert_eq!(first.length(), 5);
    let names: Vec<String> = first
        .get(0)
        .unchecked_into::<Array>()
        .iter()
        .map(|n| n.as_string().unwrap())
        .collect();
    assert!(!names.is_empty() && names.iter().all(|n| n == &n.to_lowercase()));
    assert!(first.get(1).is_null(), "no signing key set");
    assert_eq!(
        first.get(2).as_string().unwrap(),
        wire::encoded_upstream_failure_answer()
    );
    // One f64 per circuit, where the entry writes when a cell answered
    // (noteAnswered) and Rust reads it.
    let (address, count) = (
        first.get(3).as_f64().unwrap() as usize,
        first.get(4).as_f64().unwrap() as usize,
    );
    assert!(count >= 2, "{count} slots for two listed cells");
    assert_eq!(address % 8, 0);
    let write = Function::new_with_args(
        "memory, address, count",
        "const v = new Float64Array(memory.buffer, address, count); for (let i = 0; i < count; i++) v[i] = 1000 * (i + 1);",
    );
    write
        .apply(
            &JsValue::NULL,
            &Array::of3(&wasm_bindgen::memory(), &address.into(), &count.into()),
        )
        .unwrap();
    let iso = crate::isolate::Isolate::made().expect("made by routerSetup");
    let health = iso.state.health.borrow();
    for i in 0..count {
        assert_eq!(health.answered_ms(i), 1000 * (i as u64 + 1), "slot {i}");
    }
    // The isolate is made once: a second setup is the same state.
    drop(health);
    let again = setup();
    assert_eq!(again.get(3).as_f64(), first.get(3).as_f64());
    assert!(std::rc::Rc::ptr_eq(
        &iso,
        &crate::isolate::Isolate::made().unwrap()
    ));
}

#[wasm_bindgen_test]
fn route_sync_reads_the_input_the_entry_wrote_and_writes_the_plan_over_it() {
    let mut buffer = (0, 0);
    let text = input("https://gitlab.example/explore/projects", "GET", &[]);
    let len = write_input(&text, &mut buffer);
    assert_eq!(len, text.len());
    let length = crate::route_sync(len);
    assert!(length > 0, "routed at once: {length}");
    let plan = read_plan(buffer.0, length as usize);
    let f = fields(&plan);
    assert_eq!(f[head::KIND], wire::KIND_FORWARD);
    assert_eq!(
        f[forward::URL],
        "http://legacy.example:8080/explore/projects"
    );
    assert!(crate::take_plan().is_none(), "nothing left over");

    // A buffer grown for a longer request: a new address, and the same plan
    // for the same request.
    let long_url = format!("https://gitlab.example/explore?q={}", "a".repeat(5000));
    let long = input(&long_url, "GET", &[]);
    let len = write_input(&long, &mut buffer);
    assert!(buffer.1 >= long.len() * 3, "{buffer:?}");
    let length = crate::route_sync(len);
    assert!(length > 0);
    let plan = read_plan(buffer.0, length as usize);
    assert!(fields(&plan)[forward::URL].ends_with(&"a".repeat(5000)));
}

#[wasm_bindgen_test]
fn header_values_outside_ascii_cross_as_utf8_and_bytes_that_are_not_go_async() {
    let mut buffer = (0, 0);
    let names = setup().get(0).unchecked_into::<Array>();
    let name = names.get(0).as_string().unwrap();
    // Latin-1 characters (as a header value reaches JS: one UTF-16 unit
    // each, two bytes each in UTF-8).
    let value = "caf\u{e9} \u{ff}\u{b5}\u{c0}";
    let text = input(
        "https://gitlab.example/explore",
        "GET",
        &[(name.as_str(), value)],
    );
    let len = write_input(&text, &mut buffer);
    assert_eq!(len, text.len());
    assert!(len > text.encode_utf16().count(), "counted in bytes");
    // What routeSync reads from the buffer (before it writes the plan
    // over it): the same value.
    let read = crate::INPUT.with(|input| {
        let input = input.borrow();
        crate::split_input(&input[..len]).map(|(_, _, h)| h.to_string())
    });
    assert!(read.expect("UTF-8").starts_with(value));
    assert!(crate::route_sync(len) > 0);

    // Latin-1 bytes as they are (an entry that skipped TextEncoder): not
    // UTF-8, so routeAsync routes the request; nothing traps.
    let raw = b"https://gitlab.example/caf\xe9\0GET\0";
    crate::INPUT.with(|input| input.borrow_mut()[..raw.len()].copy_from_slice(raw));
    assert_eq!(crate::route_sync(raw.len()), NOT_ROUTED);
    // A length past the buffer, or past i32 (a JS number the glue wraps
    // to u32): the request goes async.
    assert_eq!(crate::route_sync(buffer.1 + 1), NOT_ROUTED);
    assert_eq!(crate::route_sync(i32::MAX as usize + 1), NOT_ROUTED);
    assert_eq!(crate::route_sync(u32::MAX as usize), NOT_ROUTED);
    assert!(crate::take_plan().is_none());
}

#[wasm_bindgen_test]
fn a_plan_longer_than_the_buffer_is_taken_whole_once() {
    let text = input("https://gitlab.example/explore", "GET", &[]);
    // A buffer that holds the input exactly: the plan (the URL, the log
    // line, …) is longer.
    let address = crate::input_buffer(text.len());
    let len = encode_into(&text, address, text.len());
    assert_eq!(len, text.len());
    assert_eq!(crate::route_sync(len), PLAN_TOO_LONG);
    let plan = crate::take_plan().expect("the long plan");
    assert!(plan.len() > text.len());
    let f = fields(&plan);
    assert_eq!(f[head::KIND], wire::KIND_FORWARD);
    assert_eq!(f[forward::URL], "http://legacy.example:8080/explore");
    assert!(crate::take_plan().is_none(), "taken once");
    // The entry's own buffer again: it fits.
    let mut buffer = (0, 0);
    let len = write_input(&text, &mut buffer);
    let length = crate::route_sync(len);
    assert_eq!(
        read_plan(buffer.0, length as usize)
            .split(wire::FIELD)
            .nth(forward::URL),
        Some(f[forward::URL])
    );
}

/// `routeAsync(env, ctx, request, url, method, headers)` as the entry
/// calls it, with a `ctx` whose `waitUntil` takes what it is given.
async fn route_async(url: &str, method: &str, headers: Option<String>) -> String {
    let ctx = Object::new();
    let wait_until = Function::new_with_args("promise", "promise.catch(() => {});");
    Reflect::set(&ctx, &"waitUntil".into(), &wait_until).unwrap();
    let req = web_sys::Request::new_with_str(url).unwrap();
    crate::route_async(
        env(),
        ctx.unchecked_into(),
        req,
        url.to_string(),
        method.to_string(),
        headers,
    )
    .await
}

fn pending_url() -> Option<String> {
    crate::PENDING.with(|p| p.borrow().as_ref().map(|(url, _, _)| url.clone()))
}

#[wasm_bindgen_test]
async fn a_request_route_sync_stopped_is_routed_on_by_route_async_and_a_stale_one_dropped() {
    let mut buffer = (0, 0);
    // An organization's path: the Topology Service must be asked, which
    // routeSync does not do.
    let url = "https://gitlab.example/o/acme/project";
    let text = input(url, "GET", &[]);
    let len = write_input(&text, &mut buffer);
    assert_eq!(crate::route_sync(len), NOT_ROUTED);
    assert_eq!(pending_url().as_deref(), Some(url), "handed on as it stood");
    // routeAsync goes on from there: the service (nothing listens) fails,
    // the rules fall through to the legacy cell or answer an error.
    let headers = text[url.len() + "GET".len() + 2..].to_string();
    let plan = route_async(url, "GET", Some(headers.clone())).await;
    assert!(pending_url().is_none(), "taken by routeAsync");
    let f = fields(&plan);
    assert!(
        f[0] == wire::KIND_FORWARD || f[0] == wire::KIND_ANSWER,
        "{plan:?}"
    );

    // A stopped request whose routeAsync never came (the entry failed in
    // between): the next routeAsync, for another URL, drops it and routes
    // its own request.
    let len = write_input(&text, &mut buffer);
    assert_eq!(crate::route_sync(len), NOT_ROUTED);
    assert_eq!(pending_url().as_deref(), Some(url));
    let other = "https://gitlab.example/explore";
    let plan = route_async(other, "GET", Some(headers)).await;
    assert!(pending_url().is_none());
    assert_eq!(
        fields(&plan)[forward::URL],
        "http://legacy.example:8080/explore"
    );
}
