//! How a request's parts cross from the entry into Rust: the URL, the
//! method and the values of the headers the isolate reads, joined by
//! [`SEPARATOR`] into one flat string (`routeSync`'s input buffer, or
//! `routeAsync`'s argument), read back here. The edge (`src/ingest.rs`)
//! and the fuzz targets read it with these same functions.

use crate::wire::{HEADER_ABSENT, SEPARATOR};
use crate::RequestParts;

/// `routeSync`'s input as its URL, method and joined header values.
pub fn split_input(bytes: &[u8]) -> Option<(&str, &str, &str)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (url, rest) = text.split_once(SEPARATOR)?;
    let (method, headers) = rest.split_once(SEPARATOR)?;
    Some((url, method, headers))
}

/// Adds the joined header values to `parts`; false when their count does
/// not match (a value held the separator).
pub fn fill_headers(parts: &mut RequestParts, names: &[String], joined: &str) -> bool {
    if names.is_empty() {
        // `joined` is then "" (one empty value for no name): a mismatch.
        return false;
    }
    let before = parts.headers.len();
    parts.headers.reserve(names.len());
    let mut rest = joined;
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        // Most values are one byte (an absent header's `\x01`): a byte loop
        // finds the separator sooner than `str::split`'s searcher did.
        let split = match (rest.bytes().position(|b| b == SEPARATOR as u8), last) {
            (Some(at), false) => rest.get(..at).zip(rest.get(at + 1..)),
            (None, true) => Some((rest, "")),
            // Too few values, or more than one in the last.
            _ => None,
        };
        let Some((value, after)) = split else {
            parts.headers.truncate(before);
            return false;
        };
        if value != HEADER_ABSENT {
            parts.headers.push((name.clone(), value.to_string()));
        }
        rest = after;
    }
    true
}
