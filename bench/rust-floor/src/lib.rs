//! The benchmark's `rust-floor`: the floor's per-request work (js-floor.mjs)
//! decided in Rust and applied by `entry.mjs`, the way the router's
//! src/entry.js applies `routeSync`'s plan. The entry writes the request's
//! URL, method and header names as UTF-8 into a buffer in wasm memory and
//! calls `forward` once; `forward` writes the plan over that buffer:
//! fields separated by `FIELD` (U+001F): the upstream URL, the log line's
//! head (empty without `LOG`), the dropped header names (separated by
//! `ITEM`, U+001E), then the headers to set as name, value pairs. No rules,
//! no cache, no wasm-bindgen: what any Rust/wasm router pays.

mod log_line;

use std::cell::RefCell;

const FIELD: char = '\u{1f}';
const ITEM: char = '\u{1e}';

#[derive(Default)]
struct State {
    /// The buffer the entry writes a request into and reads the plan from.
    buffer: Vec<u8>,
    /// `host:port` every request goes to (the `UPSTREAM` binding).
    upstream: String,
    /// Whether to plan the log line (the `LOG` binding is `1`).
    log: bool,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// Makes the buffer at least `capacity` bytes and returns its address.
#[no_mangle]
pub extern "C" fn input_buffer(capacity: usize) -> *mut u8 {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        if s.buffer.len() < capacity {
            s.buffer.resize(capacity, 0);
        }
        s.buffer.as_mut_ptr()
    })
}

/// Reads the isolate's settings from the buffer's first `length` bytes:
/// the upstream, then `1` when every request is logged.
#[no_mangle]
pub extern "C" fn setup(length: usize) {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let text = String::from_utf8_lossy(s.buffer.get(..length).unwrap_or_default()).into_owned();
        let (upstream, log) = text.split_once('\n').unwrap_or((&text, ""));
        s.upstream = upstream.to_string();
        s.log = log == "1";
    });
}

/// Plans the request in the buffer's first `length` bytes (URL, method,
/// header names, one a line) and writes the plan over the buffer; returns
/// its length, or -1 when the request is not a URL or the plan does not fit.
#[no_mangle]
pub extern "C" fn forward(length: usize) -> i32 {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let plan = {
            let Some(bytes) = s.buffer.get(..length) else {
                return -1;
            };
            let Ok(text) = std::str::from_utf8(bytes) else {
                return -1;
            };
            let Some(plan) = plan(text, &s.upstream, s.log) else {
                return -1;
            };
            plan
        };
        match s.buffer.get_mut(..plan.len()) {
            Some(out) => {
                out.copy_from_slice(plan.as_bytes());
                i32::try_from(plan.len()).unwrap_or(-1)
            }
            None => -1,
        }
    })
}

/// The plan for `text` (see the module's comment).
fn plan(text: &str, upstream: &str, log: bool) -> Option<String> {
    let mut lines = text.split('\n');
    let url = lines.next()?;
    let method = lines.next()?;
    let (scheme, rest) = url.split_once("://")?;
    let slash = rest.find('/').unwrap_or(rest.len());
    let (host, target) = rest.split_at(slash);
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    let mut plan = String::with_capacity(2 * text.len() + upstream.len() + 160);
    plan.push_str("http://");
    plan.push_str(upstream);
    plan.push_str(if target.is_empty() { "/" } else { target });
    plan.push(FIELD);
    if log {
        plan.push_str(&log_line::log_head(method, path, upstream));
    }
    plan.push(FIELD);
    let mut first = true;
    for name in lines.filter(|name| log_line::dropped(name)) {
        if !first {
            plan.push(ITEM);
        }
        first = false;
        plan.push_str(name);
    }
    for (name, value) in [
        ("x-forwarded-host", host),
        ("x-forwarded-proto", scheme),
        ("x-gitlab-http-router-rule-action", "proxy"),
        ("x-gitlab-http-router-rule-type", ""),
    ] {
        plan.push(FIELD);
        plan.push_str(name);
        plan.push(FIELD);
        plan.push_str(value);
    }
    Some(plan)
}
