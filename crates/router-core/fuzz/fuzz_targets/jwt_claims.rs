//! `cargo fuzz run jwt_claims`: unverified JWT claims and dot-path lookups on arbitrary text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core::select::transform::jwt_claims::{
    claim_at_path, header_alg, unverified_claims, MAX_JWT_LEN,
};

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    // Let the fuzzer pick a path too: everything after the last '\u{1}' (if any).
    let (token, path) = input.rsplit_once('\u{1}').unwrap_or((input, "sub"));
    let alg = header_alg(token);
    if let Some(claims) = unverified_claims(token) {
        assert!(token.len() <= MAX_JWT_LEN);
        assert!(claims.is_object());
        assert!(alg.is_some());
        let _ = claim_at_path(&claims, path);
        let _ = claim_at_path(&claims, "access.0.name");
    }
});
