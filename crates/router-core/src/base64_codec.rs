//! Base64 (RFC 4648) as the router reads and writes it: the standard
//! (`+/`) and URL-safe (`-_`) alphabets, decoded strictly (no whitespace,
//! no non-zero trailing bits, `=` padding exactly where asked for). It
//! accepts and gives what the `base64` crate's `general_purpose` engines
//! did (the tests hold it to them), in less wasm.

use crate::json::PushAscii;

/// Which two symbols stand for 62 and 63.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alphabet {
    /// `+` and `/`.
    Standard,
    /// `-` and `_`.
    UrlSafe,
}

/// Whether the text ends in `=` padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// Padded to a multiple of four symbols with one or two `=`, no more,
    /// no fewer.
    Canonical,
    /// No `=` at all.
    Absent,
}

/// The bytes `input` encodes, or `None` when it is not base64 of this
/// alphabet and padding.
pub fn decode(input: &[u8], alphabet: Alphabet, padding: Padding) -> Option<Vec<u8>> {
    let symbols = match padding {
        Padding::Absent => input,
        Padding::Canonical => {
            if !input.len().is_multiple_of(4) {
                return None;
            }
            let pads = input
                .iter()
                .rev()
                .take(2)
                .take_while(|&&b| b == b'=')
                .count();
            input.get(..input.len() - pads)?
        }
    };
    let mut out = Vec::with_capacity(symbols.len() / 4 * 3 + 2);
    let mut quads = symbols.chunks_exact(4);
    for quad in &mut quads {
        let n = sextets(quad, alphabet)?;
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
    }
    let rest = quads.remainder();
    let n = sextets(rest, alphabet)?;
    // The last symbol's bits past the final byte must be zero.
    match rest.len() {
        0 => {}
        2 if n & 0xf == 0 => out.push((n >> 4) as u8),
        3 if n & 0x3 == 0 => out.extend_from_slice(&[(n >> 10) as u8, (n >> 2) as u8]),
        _ => return None,
    }
    Some(out)
}

/// `bytes` in the URL-safe alphabet, without padding.
pub fn encode_url_safe_unpadded(bytes: &[u8]) -> String {
    let mut out = String::with_capacity((bytes.len() * 4).div_ceil(3));
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push_ascii(char::from(symbol((n >> (18 - 6 * i)) & 63)));
        }
    }
    out
}

/// The symbols' values, six bits each, the first the highest.
fn sextets(symbols: &[u8], alphabet: Alphabet) -> Option<u32> {
    symbols
        .iter()
        .try_fold(0u32, |n, &b| Some(n << 6 | u32::from(value(b, alphabet)?)))
}

fn value(symbol: u8, alphabet: Alphabet) -> Option<u8> {
    match (symbol, alphabet) {
        (b'A'..=b'Z', _) => Some(symbol - b'A'),
        (b'a'..=b'z', _) => Some(symbol - b'a' + 26),
        (b'0'..=b'9', _) => Some(symbol - b'0' + 52),
        (b'+', Alphabet::Standard) | (b'-', Alphabet::UrlSafe) => Some(62),
        (b'/', Alphabet::Standard) | (b'_', Alphabet::UrlSafe) => Some(63),
        _ => None,
    }
}

/// The URL-safe symbol for `v` (< 64).
fn symbol(v: u32) -> u8 {
    let v = v as u8;
    match v {
        0..=25 => b'A' + v,
        26..=51 => b'a' + (v - 26),
        52..=61 => b'0' + (v - 52),
        62 => b'-',
        _ => b'_',
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{
        GeneralPurpose, STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
    };
    use base64::Engine as _;
    use proptest::prelude::*;

    const ENGINES: [(Alphabet, Padding, GeneralPurpose); 4] = [
        (Alphabet::Standard, Padding::Canonical, STANDARD),
        (Alphabet::Standard, Padding::Absent, STANDARD_NO_PAD),
        (Alphabet::UrlSafe, Padding::Canonical, URL_SAFE),
        (Alphabet::UrlSafe, Padding::Absent, URL_SAFE_NO_PAD),
    ];

    fn agrees(text: &str) {
        for (alphabet, padding, engine) in &ENGINES {
            assert_eq!(
                decode(text.as_bytes(), *alphabet, *padding),
                engine.decode(text).ok(),
                "{text:?} {alphabet:?} {padding:?}"
            );
        }
    }

    #[test]
    fn known_texts() {
        assert_eq!(
            decode(b"aGVsbG8=", Alphabet::Standard, Padding::Canonical),
            Some(b"hello".to_vec())
        );
        assert_eq!(
            decode(b"aGVsbG8", Alphabet::Standard, Padding::Canonical),
            None
        );
        assert_eq!(
            decode(b"aGVsbG8=", Alphabet::UrlSafe, Padding::Absent),
            None
        );
        assert_eq!(
            decode(b"aGk", Alphabet::UrlSafe, Padding::Absent),
            Some(b"hi".to_vec())
        );
        // Non-zero trailing bits: "aGl" would be "hi" with a stray bit.
        assert_eq!(decode(b"aGl", Alphabet::UrlSafe, Padding::Absent), None);
        assert_eq!(
            decode(b"", Alphabet::Standard, Padding::Canonical),
            Some(Vec::new())
        );
        assert_eq!(encode_url_safe_unpadded(b"\xfb\xff\xbf"), "-_-_");
        assert_eq!(encode_url_safe_unpadded(b"hello"), "aGVsbG8");
    }

    #[test]
    fn edge_texts_agree_with_the_base64_crate() {
        for text in [
            "",
            "=",
            "==",
            "===",
            "====",
            "a",
            "aA",
            "aA=",
            "aA==",
            "aA===",
            "aGk=",
            "aGk==",
            "aGl=",
            "aGVs====",
            "aA==aA==",
            "Pz4/",
            "Pz4_",
            "fn5+",
            "fn5-",
            "fn5+Pz4_",
            " aGk",
            "aGk\n",
            "aGVsbG8=\u{e9}",
        ] {
            agrees(text);
        }
    }

    proptest! {
        #[test]
        fn decodes_as_the_base64_crate(text in "[A-Za-z0-9+/_=-]{0,14}") {
            agrees(&text);
        }

        #[test]
        fn decodes_what_the_base64_crate_encodes(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            for (_, _, engine) in &ENGINES {
                agrees(&engine.encode(&bytes));
            }
        }

        #[test]
        fn encodes_as_the_base64_crate(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(encode_url_safe_unpadded(&bytes), URL_SAFE_NO_PAD.encode(&bytes));
        }
    }
}
