//! Lower-case hexadecimal, appended to a string the caller already holds
//! (trace ids, cache keys, JSON `\u00XX` escapes): no allocation of its own.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends each of `bytes` as two lower-case hex digits, with room made
/// once. (A stack buffer appended with `push_str` was tried: at the
/// worker's `opt-level = "s"` its zeroing, iterator and UTF-8 check cost
/// twice these pushes in workerd.)
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    out.reserve(2 * bytes.len());
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_two_digits_per_byte() {
        let mut out = String::from("x");
        push_hex(&mut out, &[0x00, 0x0f, 0xa5, 0xff]);
        assert_eq!(out, "x000fa5ff");
        push_hex(&mut out, &[]);
        assert_eq!(out, "x000fa5ff");
        // Every byte value.
        let bytes: Vec<u8> = (0..=255).collect();
        let mut out = String::new();
        push_hex(&mut out, &bytes);
        let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(out, expected);
    }
}
