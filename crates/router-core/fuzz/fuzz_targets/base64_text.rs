//! `cargo fuzz run base64_text`: the base64 transform on arbitrary text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core::select::transform::base64::decode_base64_text;

fuzz_target!(|data: &[u8]| {
    if let Ok(input) = std::str::from_utf8(data) {
        let _ = decode_base64_text(input);
    }
});
