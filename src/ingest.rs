//! How a request's parts cross from the entry into Rust: the URL, the
//! method and the values of the headers the isolate reads, joined into one
//! flat string (`routeSync`'s input buffer, or `routeAsync`'s argument),
//! and read back by `router_core::input`; headers the joined form cannot
//! carry are asked of the request one by one here.

use router_core::input::fill_headers;
use router_core::RequestParts;
use wasm_bindgen::JsCast;
use web_sys::{Headers, Request};

/// Fills `parts` with the headers the rules need (`names`; `None`: every
/// header): from the entry's joined values, or asked one by one when a
/// value held the separator (invalid in HTTP).
pub fn read_headers(
    names: Option<&[String]>,
    parts: &mut RequestParts,
    req: &Request,
    joined: Option<&str>,
) {
    match (names, joined) {
        (Some(names), Some(joined)) if fill_headers(parts, names, joined) => {}
        (Some(names), _) => {
            let all = req.headers();
            for name in names {
                if let Ok(Some(value)) = all.get(name) {
                    parts.headers.push((name.clone(), value));
                }
            }
        }
        (None, _) => parts.headers = header_pairs(&req.headers()),
    }
}

fn header_pairs(headers: &Headers) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(Some(iter)) = js_sys::try_iter(headers) else {
        return out;
    };
    for entry in iter.flatten() {
        let pair: js_sys::Array = entry.unchecked_into();
        if let (Some(n), Some(v)) = (pair.get(0).as_string(), pair.get(1).as_string()) {
            out.push((n, v));
        }
    }
    out
}
