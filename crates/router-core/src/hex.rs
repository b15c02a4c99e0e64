//! Lower-case hexadecimal, appended to a string the caller already holds
//! (trace ids, cache keys, JSON `\u00XX` escapes): no allocation of its own.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends each of `bytes` as two lower-case hex digits: written into a
/// stack buffer and appended 32 bytes at a time (one capacity check and
/// one copy each, not two pushes per byte).
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    let mut digits = [0u8; 64];
    for chunk in bytes.chunks(32) {
        for (pair, &b) in digits.chunks_exact_mut(2).zip(chunk) {
            pair[0] = DIGITS[usize::from(b >> 4)];
            pair[1] = DIGITS[usize::from(b & 0x0f)];
        }
        // Only ASCII digits were written: this never fails.
        if let Ok(text) = std::str::from_utf8(&digits[..2 * chunk.len()]) {
            out.push_str(text);
        }
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
        // Longer than one stack buffer's worth.
        let bytes: Vec<u8> = (0..=255).collect();
        let mut out = String::new();
        push_hex(&mut out, &bytes);
        let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(out, expected);
    }
}
