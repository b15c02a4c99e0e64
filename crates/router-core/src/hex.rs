//! Lower-case hexadecimal, appended to a string the caller already holds
//! (trace ids, cache keys, JSON `\u00XX` escapes): no allocation of its own.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends each of `bytes` as two lower-case hex digits, written straight
/// into the string's spare room through a pointer: `String::push` of each
/// digit was a call, a capacity test and a length update per digit in the
/// worker's wasm (~70 instructions a byte in workerd), and
/// `spare_capacity_mut().chunks_exact_mut(2).zip(bytes)` still built its
/// iterators in memory (~30 a byte).
// Reviewed: the two unsafe blocks keep `out` UTF-8 and write only inside
// its reserved capacity (below); a nibble (`b >> 4`, `b & 0x0f`) is < 16,
// the length of DIGITS.
#[allow(unsafe_code, clippy::indexing_slicing)]
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    let len = 2 * bytes.len();
    // SAFETY: only ASCII digits are appended, so `out` stays UTF-8.
    let out = unsafe { out.as_mut_vec() };
    out.reserve(len);
    let start = out.len();
    // SAFETY: `reserve` made room for `len` bytes after `start`, and the
    // loop writes exactly those: bytes 2i and 2i + 1 for i < bytes.len().
    unsafe {
        let spare = out.as_mut_ptr().add(start);
        for (i, &b) in bytes.iter().enumerate() {
            *spare.add(2 * i) = DIGITS[usize::from(b >> 4)];
            *spare.add(2 * i + 1) = DIGITS[usize::from(b & 0x0f)];
        }
        out.set_len(start + len);
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
