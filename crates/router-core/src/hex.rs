//! Lower-case hexadecimal, appended to a string the caller already holds
//! (trace ids, cache keys, JSON `\u00XX` escapes): no allocation of its own.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends each of `bytes` as two lower-case hex digits, written straight
/// into the string's spare room: `String::push` of each digit was a call,
/// a capacity test and a length update per digit at the worker's
/// `opt-level = "s"` (~70 instructions a byte in workerd), and a stack
/// buffer appended with `push_str` paid for its zeroing and UTF-8 check.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    let len = 2 * bytes.len();
    // SAFETY: only ASCII digits are appended, so `out` stays UTF-8.
    let out = unsafe { out.as_mut_vec() };
    out.reserve(len);
    let spare = &mut out.spare_capacity_mut()[..len];
    for (pair, &b) in spare.chunks_exact_mut(2).zip(bytes) {
        pair[0].write(DIGITS[usize::from(b >> 4)]);
        pair[1].write(DIGITS[usize::from(b & 0x0f)]);
    }
    // SAFETY: the `len` bytes after the old length were all written above.
    unsafe { out.set_len(out.len() + len) };
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
