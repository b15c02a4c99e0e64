//! The JSON and number writers the log line, the plan and the classify
//! bodies are written with: a leaf, used by every phase.

/// `n` in decimal, without a temporary string.
pub fn push_u64(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// Appending a `char` that is ASCII (a separator, a quote, a comma) as one
/// byte, without `String::push`'s UTF-8 encoding, which is a call of its
/// own at the worker's `opt-level = "z"` (5.5 k instructions of a warm
/// request's wasm went there).
pub trait PushAscii {
    /// Appends `c`: as its byte when it is ASCII, else as `String::push`
    /// would.
    fn push_ascii(&mut self, c: char);
}

impl PushAscii for String {
    #[inline(always)]
    // Reviewed: only an ASCII char's byte goes in unchecked.
    #[allow(unsafe_code)]
    fn push_ascii(&mut self, c: char) {
        if c.is_ascii() {
            // SAFETY: an ASCII char is one byte and a whole UTF-8 character.
            unsafe { self.as_mut_vec() }.push(c as u8);
        } else {
            self.push(c);
        }
    }
}

/// `text` as a JSON string, quotes included (escaped as serde_json writes it).
pub fn push_quoted(out: &mut String, text: &str) {
    out.push_ascii('"');
    push_escaped(out, text);
    out.push_ascii('"');
}

/// `text` escaped for the inside of a JSON string, as serde_json escapes
/// it: `"`, `\\` and control characters, nothing else.
pub fn push_escaped(out: &mut String, text: &str) {
    if !needs_escape(text.as_bytes()) {
        // Nearly every field: one copy.
        out.push_str(text);
        return;
    }
    let mut start = 0;
    for (at, &b) in text.as_bytes().iter().enumerate() {
        if !byte_needs_escape(b) {
            continue;
        }
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            _ => "",
        };
        // `at` is an ASCII byte's index, so a character boundary.
        out.push_str(text.get(start..at).unwrap_or_default());
        if short.is_empty() {
            out.push_str("\\u00");
            crate::hex::push_hex(out, &[b]);
        } else {
            out.push_str(short);
        }
        start = at + 1;
    }
    out.push_str(text.get(start..).unwrap_or_default());
}

/// Whether `bytes` holds a byte [`push_escaped`] escapes: eight bytes at a
/// time, the last few as one overlapping word (or byte by byte when there
/// are fewer than eight in all).
fn needs_escape(bytes: &[u8]) -> bool {
    let (words, rest) = bytes.as_chunks::<8>();
    if words.iter().any(|w| word_needs_escape(*w)) {
        return true;
    }
    match bytes.last_chunk::<8>() {
        Some(last) if !rest.is_empty() => word_needs_escape(*last),
        Some(_) => false,
        None => rest.iter().any(|&b| byte_needs_escape(b)),
    }
}

/// A control character, `"` or `\`.
fn byte_needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Whether one of these 8 bytes is a control character, `"` or `\`
/// (exact, with no false positive: the bit tricks of "Bit Twiddling
/// Hacks", `hasless` and `haszero`, over the word).
fn word_needs_escape(word: [u8; 8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let v = u64::from_le_bytes(word);
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let below_space = v.wrapping_sub(ONES * 0x20) & !v & HIGHS;
    (below_space | has_zero(v ^ (ONES * u64::from(b'"'))) | has_zero(v ^ (ONES * u64::from(b'\\'))))
        != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_ascii_appends_ascii_as_a_byte_and_any_other_char_whole() {
        let mut out = String::from("é");
        out.push_ascii('"');
        out.push_ascii('\u{0}');
        out.push_ascii('é');
        assert_eq!(out, "é\"\u{0}é");
    }

    #[test]
    fn every_ascii_byte_is_escaped_as_serde_json_escapes_it() {
        for b in 0u8..=0x7f {
            let text = format!("a{}b{}", b as char, b as char);
            let mut out = String::new();
            push_quoted(&mut out, &text);
            assert_eq!(out, serde_json::to_string(&text).unwrap(), "byte {b:#04x}");
        }
    }

    #[test]
    fn a_byte_to_escape_is_found_wherever_it_falls_in_a_word() {
        // Every ASCII byte at every offset of the first words, between
        // text with nothing to escape, multi-byte characters included.
        for b in 0u8..=0x7f {
            for at in 0..20 {
                let text = format!("{}{}{}é€", "x".repeat(at), b as char, "y".repeat(19 - at));
                let mut out = String::new();
                push_quoted(&mut out, &text);
                assert_eq!(
                    out,
                    serde_json::to_string(&text).unwrap(),
                    "byte {b:#04x} at {at}"
                );
            }
        }
        for text in ["", "é", "12345678", "1234567\"", "\u{1f}2345678abcdefgh\\"] {
            let mut out = String::new();
            push_quoted(&mut out, text);
            assert_eq!(out, serde_json::to_string(text).unwrap(), "{text:?}");
        }
    }

    #[test]
    fn a_byte_to_escape_is_found_in_texts_of_every_length() {
        // Shorter than a word, a word and a bit (the overlapping last
        // word), whole words: the byte at every position.
        for len in 1..=20 {
            for at in 0..len {
                for b in [0x00, 0x1f, b'"', b'\\', b' ', b'a', 0x7f] {
                    let mut bytes = vec![b'x'; len];
                    bytes[at] = b;
                    let text = String::from_utf8(bytes).unwrap();
                    let mut out = String::new();
                    push_quoted(&mut out, &text);
                    assert_eq!(out, serde_json::to_string(&text).unwrap(), "{text:?}");
                }
            }
        }
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for n in [0, 7, 10, 4_294_967_296, u64::MAX] {
            let mut out = String::from("x");
            push_u64(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
    }
}
