//! The `base64` transform (SPEC §3): a captured value decoded to UTF-8 text.

use crate::base64_codec::{decode, Alphabet, Padding};

/// Longest input [`decode_base64_text`] looks at (64 KiB); anything longer is rejected.
pub const MAX_BASE64_INPUT: usize = 64 * 1024;

/// Decode `s` as base64 and return it as text.
///
/// Accepts the standard (`+/`) and the URL-safe (`-_`) alphabets, with or without `=` padding
/// (padding, when present, must be complete). Returns `None` when `s` mixes both alphabets, holds
/// any other character (whitespace included: trim before calling), has an impossible length or
/// non-zero trailing bits, decodes to something that is not UTF-8, or is longer than
/// [`MAX_BASE64_INPUT`]. The empty string decodes to the empty string.
#[must_use]
pub fn decode_base64_text(s: &str) -> Option<String> {
    if s.len() > MAX_BASE64_INPUT {
        return None;
    }
    let standard = s.bytes().any(|b| b == b'+' || b == b'/');
    let url_safe = s.bytes().any(|b| b == b'-' || b == b'_');
    let padded = s.ends_with('=');
    if standard && url_safe {
        return None;
    }
    let alphabet = if url_safe {
        Alphabet::UrlSafe
    } else {
        Alphabet::Standard
    };
    let padding = if padded {
        Padding::Canonical
    } else {
        Padding::Absent
    };
    String::from_utf8(decode(s.as_bytes(), alphabet, padding)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    use base64::Engine as _;
    use proptest::prelude::*;

    #[test]
    fn standard_padded_and_unpadded() {
        assert_eq!(decode_base64_text("aGVsbG8="), Some("hello".to_owned()));
        assert_eq!(decode_base64_text("aGVsbG8"), Some("hello".to_owned()));
        assert_eq!(decode_base64_text("aGk="), Some("hi".to_owned()));
        assert_eq!(decode_base64_text("aGk"), Some("hi".to_owned()));
        assert_eq!(decode_base64_text("aA=="), Some("h".to_owned()));
        assert_eq!(decode_base64_text("aA"), Some("h".to_owned()));
        assert_eq!(decode_base64_text("YWJj"), Some("abc".to_owned()));
    }

    #[test]
    fn empty_is_empty() {
        assert_eq!(decode_base64_text(""), Some(String::new()));
    }

    #[test]
    fn basic_auth_credentials() {
        // `Authorization: Basic` value carrying a routable token as the password.
        let creds = "oauth2:glpat-W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ.01.181uebm4k";
        let encoded = STANDARD.encode(creds);
        assert_eq!(decode_base64_text(&encoded).as_deref(), Some(creds));
    }

    #[test]
    fn both_alphabets() {
        // 0xfb 0xff 0xbf encodes to "+/+/" / "-_-_" — not UTF-8, so use text whose encoding has
        // the alphabet-specific characters: "?>?" -> "Pz4/", "~~~" -> "fn5+".
        assert_eq!(STANDARD.encode("?>?"), "Pz4/");
        assert_eq!(decode_base64_text("Pz4/"), Some("?>?".to_owned()));
        assert_eq!(decode_base64_text("Pz4_"), Some("?>?".to_owned()));
        assert_eq!(STANDARD.encode("~~~"), "fn5+");
        assert_eq!(decode_base64_text("fn5+"), Some("~~~".to_owned()));
        assert_eq!(decode_base64_text("fn5-"), Some("~~~".to_owned()));
        // Mixed alphabets are refused.
        assert_eq!(decode_base64_text("fn5+Pz4_"), None);
    }

    #[test]
    fn unicode_text() {
        let text = "cellule été — セル 🚀";
        for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
            let encoded = engine.encode(text);
            assert_eq!(
                decode_base64_text(&encoded).as_deref(),
                Some(text),
                "{encoded}"
            );
        }
    }

    #[test]
    fn invalid_inputs() {
        for bad in [
            "a",         // impossible length
            "aGVsbG8=x", // data after padding
            "aGVsbG8==", // too much padding
            "aA=",       // incomplete padding
            "=",
            "====",
            "aGVs bG8=", // whitespace
            " aGVsbG8=",
            "aGVsbG8=\n",
            "aGVsbG8*",
            "aB==", // non-zero trailing bits
            "éé",
        ] {
            assert_eq!(decode_base64_text(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn non_utf8_is_rejected() {
        assert_eq!(decode_base64_text("/w=="), None); // 0xff
        assert_eq!(decode_base64_text("_w"), None);
        assert_eq!(decode_base64_text(&STANDARD.encode([0xc3u8, 0x28])), None);
    }

    #[test]
    fn nul_bytes_are_text() {
        assert_eq!(decode_base64_text("AAA="), Some("\0\0".to_owned()));
    }

    #[test]
    fn size_cap() {
        let max_input = STANDARD.encode(vec![b'x'; MAX_BASE64_INPUT / 4 * 3]);
        assert_eq!(max_input.len(), MAX_BASE64_INPUT);
        assert_eq!(
            decode_base64_text(&max_input).map(|s| s.len()),
            Some(MAX_BASE64_INPUT / 4 * 3)
        );
        let over = STANDARD.encode(vec![b'x'; MAX_BASE64_INPUT / 4 * 3 + 1]);
        assert_eq!(decode_base64_text(&over), None);
    }

    proptest! {
        #[test]
        fn prop_never_panics(s in "\\PC{0,300}") {
            let _ = decode_base64_text(&s);
        }

        #[test]
        fn prop_never_panics_on_base64_like(s in "[A-Za-z0-9+/_=-]{0,300}") {
            let _ = decode_base64_text(&s);
        }

        #[test]
        fn prop_round_trip(text in "\\PC{0,200}", url_safe in any::<bool>(), pad in any::<bool>()) {
            let engine = match (url_safe, pad) {
                (false, true) => STANDARD,
                (false, false) => STANDARD_NO_PAD,
                (true, true) => URL_SAFE,
                (true, false) => URL_SAFE_NO_PAD,
            };
            prop_assert_eq!(decode_base64_text(&engine.encode(&text)), Some(text));
        }
    }
}
