//! `cargo fuzz run routable_token`: the routable-token decoder on arbitrary text.
//!
//! Random input almost never carries a valid CRC, which would stop the decoder at its first
//! check; so each input is tried as is and again with its correct CRC appended, which lets the
//! fuzzer reach the length field, base64 and payload parsing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core::select::transform::routable_token::{decode_routable_token, MAX_TOKEN_LEN};

fn check(input: &str) {
    if let Some(fields) = decode_routable_token(input) {
        assert!(input.len() <= MAX_TOKEN_LEN);
        assert!(!fields.is_empty());
        for (i, (key, value)) in fields.iter().enumerate() {
            assert!(!key.is_empty());
            assert!(value.parse::<u64>().is_ok(), "{value}");
            assert!(fields[..i].iter().all(|(k, _)| k != key), "duplicate {key}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    check(input);
    check(&format!(
        "{input}{}",
        router_core::select::transform::routable_token::crc_field(input.as_bytes())
    ));
});
