//! GitLab routable tokens (SPEC §4).
//!
//! A routable token is
//!
//! ```text
//! <prefix><base64url(16 random bytes ‖ payload ‖ payload length byte)>.01.<LL><CCCCCCC>
//! ```
//!
//! * `prefix` is whatever the token type (or the instance) uses: `glpat-`, `glrt-`, `glrtr-`,
//!   `glcbt-`, `gldt-`, a custom instance prefix, or nothing. It is not interpreted here: the
//!   base64 part is located from the end of the token using the length field.
//! * The base64 part is URL-safe and unpadded.
//! * `payload` is `k:v` lines joined by `\n`, sorted by key, values written in lowercase base36.
//!   The keys GitLab generates are `c g o p u t`; `c` is the cell id.
//! * `01` is the token format version.
//! * `LL` is the length of the base64 part in lowercase base36, left-padded with `0` to 2 chars.
//! * `CCCCCCC` is the zlib (IEEE) CRC32 of every byte before it — prefix included — in lowercase
//!   base36, left-padded with `0` to 7 chars.
//!
//! Decoding never panics and allocates at most a few hundred bytes: the input is capped at
//! [`MAX_TOKEN_LEN`] bytes before anything else is done.

use crate::base64_codec::{decode, encode_url_safe_unpadded, Alphabet, Padding};

/// Longest input [`decode_routable_token`] looks at; anything longer is rejected outright.
///
/// The largest possible base64 part (16 + 255 + 1 bytes) is 363 chars, the fixed suffix is 13,
/// which leaves a generous allowance for prefixes.
pub const MAX_TOKEN_LEN: usize = 1024;

/// Format version of the tokens this module reads and writes.
pub const TOKEN_VERSION: &str = "01";

const RANDOM_BYTES_LENGTH: usize = 16;
const LENGTH_DIGITS: usize = 2;
const CRC_DIGITS: usize = 7;
/// `.` + version + `.` + length digits + CRC digits.
const SUFFIX_LEN: usize = 1 + TOKEN_VERSION.len() + 1 + LENGTH_DIGITS + CRC_DIGITS;
/// Longest accepted payload key. GitLab's keys are single letters; longer ones are tolerated so
/// that keys GitLab may add later do not make the whole token unreadable.
const MAX_KEY_LEN: usize = 16;

const BASE36_DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// Fields of a routable token's payload, values converted from base36 to decimal strings
/// (`c:b` → `("c", "11")`), in the order they appear in the token (GitLab sorts them by key).
///
/// `token` is the whole token including its prefix, with nothing around it (no whitespace, no
/// `Bearer `). Returns `None` when anything is wrong: wrong CRC (the CRC is always checked),
/// wrong version, inconsistent length field or payload length byte, bad base64, non-UTF-8 or
/// empty payload, malformed `k:v` lines, values that are not base36 or overflow `u64`,
/// duplicated keys, or input longer than [`MAX_TOKEN_LEN`].
///
/// Keys other than `c g o p u t` are returned as they are (GitLab's own decoder does not filter
/// keys either), as long as they look like keys: 1 to 16 ASCII letters, digits or `_`. Empty
/// lines are skipped, as GitLab's decoder does.
#[must_use]
pub fn decode_routable_token(token: &str) -> Option<Vec<(String, String)>> {
    let bytes = token.as_bytes();
    if bytes.len() > MAX_TOKEN_LEN || bytes.len() < SUFFIX_LEN {
        return None;
    }

    // <signed><crc>: the CRC covers everything before it, prefix included.
    let (signed, crc) = bytes.split_at(bytes.len() - CRC_DIGITS);
    if crc != crc_field(signed).as_bytes() {
        return None;
    }

    // <prefix><base64>.<version>.<LL>
    let (head, rest) = signed.split_at(signed.len() - (SUFFIX_LEN - CRC_DIGITS));
    let (separators, length_field) = rest.split_at(rest.len() - LENGTH_DIGITS);
    let version = separators
        .strip_prefix(b".")
        .and_then(|s| s.strip_suffix(b"."));
    if version != Some(TOKEN_VERSION.as_bytes()) {
        return None;
    }
    let base64_len = usize::try_from(parse_base36_strict(length_field)?).ok()?;
    if base64_len > head.len() {
        return None;
    }
    let (prefix, base64_part) = head.split_at(head.len() - base64_len);
    // GitLab's decoder splits the token on '.', so a prefix holding a dot is not a token it can
    // read; refuse it too rather than route something GitLab would not.
    if prefix.contains(&b'.') {
        return None;
    }

    // base64_len <= 36^2 - 1, so this buffer is bounded (< 1 KiB).
    let decoded = decode(base64_part, Alphabet::UrlSafe, Padding::Absent)?;
    let (&length_byte, random_and_payload) = decoded.split_last()?;
    let payload = random_and_payload.get(RANDOM_BYTES_LENGTH..)?;
    if payload.len() != usize::from(length_byte) {
        return None;
    }
    parse_payload(std::str::from_utf8(payload).ok()?)
}

/// Build a routable token the way GitLab's `Authn::TokenField::Generator::RoutableToken` does:
/// fields sorted by key, values in lowercase base36, payload length byte, unpadded URL-safe
/// base64, version `01`, base36 length field and CRC32.
///
/// Meant for tests, `rulesctl` and demos; it does not validate its input. GitLab itself refuses
/// keys outside `c g o p u t` and payloads over 159 bytes; here such tokens are still produced
/// (a payload over 255 bytes wraps its length byte, exactly like Ruby's `pack('C')`, and will not
/// decode). Keys should be ASCII letters; `:` or `\n` in a key yields an undecodable token.
#[must_use]
pub fn encode_routable_token(prefix: &str, random: [u8; 16], fields: &[(char, u64)]) -> String {
    let mut sorted: Vec<(char, u64)> = fields.to_vec();
    sorted.sort_unstable();
    let payload = sorted
        .iter()
        .map(|(k, v)| format!("{k}:{}", base36(*v)))
        .collect::<Vec<_>>()
        .join("\n");

    let mut encodable = Vec::with_capacity(RANDOM_BYTES_LENGTH + payload.len() + 1);
    encodable.extend_from_slice(&random);
    encodable.extend_from_slice(payload.as_bytes());
    // Ruby's `[size].pack('C')` keeps the low byte only.
    encodable.push(payload.len().to_le_bytes()[0]);

    let base64_part = encode_url_safe_unpadded(&encodable);
    let length_field = base36_padded(base64_part.len() as u64, LENGTH_DIGITS);
    let signed = format!("{prefix}{base64_part}.{TOKEN_VERSION}.{length_field}");
    let crc = crc_field(signed.as_bytes());
    signed + &crc
}

fn parse_payload(payload: &str) -> Option<Vec<(String, String)>> {
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in payload.split('\n').filter(|line| !line.is_empty()) {
        let (key, value) = line.split_once(':')?;
        if !is_valid_key(key) || fields.iter().any(|(k, _)| k == key) {
            return None;
        }
        let value = parse_base36_value(value)?;
        fields.push((key.to_owned(), value.to_string()));
    }
    if fields.is_empty() {
        None
    } else {
        Some(fields)
    }
}

fn is_valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A payload value: base36, case-insensitive like Ruby's `String#to_i(36)` (GitLab writes
/// lowercase), at least one digit, no sign, fits in a `u64`.
fn parse_base36_value(value: &str) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.bytes().try_fold(0u64, |acc, b| {
        let digit = char::from(b).to_digit(36)?;
        acc.checked_mul(36)?.checked_add(u64::from(digit))
    })
}

/// A structural base36 field: lowercase digits only, as GitLab writes them.
fn parse_base36_strict(field: &[u8]) -> Option<u64> {
    if field.is_empty() {
        return None;
    }
    field.iter().try_fold(0u64, |acc, &b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'z' => b - b'a' + 10,
            _ => return None,
        };
        acc.checked_mul(36)?.checked_add(u64::from(digit))
    })
}

/// Lowercase base36, like Ruby's `Integer#to_s(36)`.
fn base36(mut n: u64) -> String {
    // u64::MAX has 13 base36 digits; they come least significant first.
    let mut digits = Vec::with_capacity(13);
    loop {
        digits.extend(BASE36_DIGITS.get((n % 36) as usize).map(|&b| char::from(b)));
        n /= 36;
        if n == 0 {
            break;
        }
    }
    digits.iter().rev().collect()
}

/// Lowercase base36 left-padded with `0` to `width` (never truncated), like Ruby's
/// `n.to_s(36).rjust(width, '0')`.
/// A routable token's last field: the CRC32 of everything before it, in
/// base36, zero-padded.
pub fn crc_field(signed: &[u8]) -> String {
    base36_padded(u64::from(crc32fast::hash(signed)), CRC_DIGITS)
}

/// `n` in base36, left-padded with zeros to `width` digits (not through
/// `format!`: the CRC check runs on every token-bearing request).
fn base36_padded(n: u64, width: usize) -> String {
    let digits = base36(n);
    let mut out = String::with_capacity(width.max(digits.len()));
    out.extend(std::iter::repeat_n('0', width.saturating_sub(digits.len())));
    out.push_str(&digits);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use proptest::prelude::*;

    /// From gitlab-org/gitlab `spec/lib/authn/token_field/decoders/v1/routable_payload_spec.rb`:
    /// a runner token whose payload is `c:1 g:8 o:rz t:2`.
    const GITLAB_RUNNER_TOKEN: &str =
        "glrtr-W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ.01.181uebm4k";

    const RANDOM: [u8; 16] = [
        0x5b, 0x99, 0xb5, 0x70, 0x74, 0x7a, 0xb2, 0x40, 0xbd, 0xf0, 0x1c, 0x7b, 0x5e, 0x4b, 0x98,
        0x8e,
    ];

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Append a correct CRC to `signed`, like the GitLab spec's `crc_of` helper.
    fn with_crc(signed: &str) -> String {
        format!(
            "{signed}{}",
            base36_padded(u64::from(crc32fast::hash(signed.as_bytes())), 7)
        )
    }

    /// Build a token around arbitrary decoded bytes (for payloads `encode` cannot produce).
    fn token_from_bytes(prefix: &str, decoded: &[u8]) -> String {
        let b64 = URL_SAFE_NO_PAD.encode(decoded);
        with_crc(&format!(
            "{prefix}{b64}.01.{}",
            base36_padded(b64.len() as u64, 2)
        ))
    }

    fn raw_payload_token(payload: &[u8]) -> String {
        let mut bytes = RANDOM.to_vec();
        bytes.extend_from_slice(payload);
        bytes.push(u8::try_from(payload.len()).unwrap());
        token_from_bytes("glpat-", &bytes)
    }

    #[test]
    fn gitlab_known_answer_vector() {
        assert_eq!(
            decode_routable_token(GITLAB_RUNNER_TOKEN),
            Some(pairs(&[("c", "1"), ("g", "8"), ("o", "1007"), ("t", "2")]))
        );
    }

    #[test]
    fn encoder_reproduces_gitlab_vector() {
        // The random bytes are the first 16 bytes of the known token's base64 part.
        let decoded = URL_SAFE_NO_PAD
            .decode("W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ")
            .unwrap();
        let random: [u8; 16] = decoded[..16].try_into().unwrap();
        assert_eq!(random, RANDOM);
        // Given out of order on purpose: the encoder sorts like GitLab does.
        let token = encode_routable_token(
            "glrtr-",
            random,
            &[('t', 2), ('o', 1007), ('c', 1), ('g', 8)],
        );
        assert_eq!(token, GITLAB_RUNNER_TOKEN);
    }

    #[test]
    fn gitlab_spec_invalid_tokens() {
        // CRC off by one digit.
        assert_eq!(
            decode_routable_token(
                "glrtr-W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ.01.181uebm4l"
            ),
            None
        );
        // No dots, valid CRC.
        assert_eq!(
            decode_routable_token(&with_crc(
                "glrtr-W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ"
            )),
            None
        );
        // A whole token (CRC included) used as the signed part, with a new CRC.
        assert_eq!(
            decode_routable_token(&with_crc(&format!("wrong-{GITLAB_RUNNER_TOKEN}"))),
            None
        );
        // Empty payload.
        assert_eq!(
            decode_routable_token(&with_crc("glrtr-8CLoDbhWwqW3qiRbgpHYEwA.01.0n")),
            None
        );
        // Payload made of lines without ':'.
        assert_eq!(
            decode_routable_token(&with_crc("glrtr-igz7z_MRijGFhUQwq0FCzWEKeAoxCjIH.01.0w")),
            None
        );
    }

    #[test]
    fn round_trips_for_prefixes_and_cells() {
        let prefixes = [
            "glpat-",
            "glrt-",
            "glrtr-",
            "glcbt-",
            "gldt-",
            "glft-",
            "glimt-",
            "gloas-",
            "mycompany-glpat-",
            "",
            "x",
        ];
        let cells: [(u64, &str); 6] = [
            (1, "1"),
            (2, "2"),
            (11, "11"),
            (100, "100"),
            (4_294_967_295, "4294967295"),
            (u64::MAX, "18446744073709551615"),
        ];
        for prefix in prefixes {
            for (cell, cell_decimal) in cells {
                let token = encode_routable_token(
                    prefix,
                    RANDOM,
                    &[('o', 42), ('c', cell), ('u', 9_000_001)],
                );
                assert!(token.starts_with(prefix), "{token}");
                assert_eq!(
                    decode_routable_token(&token),
                    Some(pairs(&[("c", cell_decimal), ("o", "42"), ("u", "9000001")])),
                    "{token}"
                );
            }
        }
    }

    #[test]
    fn cell_b_is_eleven() {
        let token = raw_payload_token(b"c:b");
        assert_eq!(decode_routable_token(&token), Some(pairs(&[("c", "11")])));
        let token = encode_routable_token("glpat-", RANDOM, &[('c', 11)]);
        assert!(URL_SAFE_NO_PAD
            .decode(token[6..].split('.').next().unwrap())
            .unwrap()
            .ends_with(b"c:b\x03"));
        assert_eq!(decode_routable_token(&token), Some(pairs(&[("c", "11")])));
    }

    #[test]
    fn all_gitlab_keys_and_zero_values() {
        let fields = [
            ('c', 0),
            ('g', 1),
            ('o', 35),
            ('p', 36),
            ('t', 1295),
            ('u', 1296),
        ];
        let token = encode_routable_token("glpat-", [0xff; 16], &fields);
        assert_eq!(
            decode_routable_token(&token),
            Some(pairs(&[
                ("c", "0"),
                ("g", "1"),
                ("o", "35"),
                ("p", "36"),
                ("t", "1295"),
                ("u", "1296")
            ]))
        );
    }

    #[test]
    fn encoder_matches_gitlab_layout() {
        let token = encode_routable_token("glpat-", [0; 16], &[('o', 1), ('c', 2)]);
        let (signed, crc) = token.split_at(token.len() - 7);
        assert_eq!(crc.len(), 7);
        assert!(crc.bytes().all(|b| BASE36_DIGITS.contains(&b)));
        let (head, length) = signed.split_at(signed.len() - 2);
        assert!(head.ends_with(".01."));
        let b64 = &head["glpat-".len()..head.len() - 4];
        assert_eq!(usize::from_str_radix(length, 36).unwrap(), b64.len());
        assert!(!b64.contains('='));
        let decoded = URL_SAFE_NO_PAD.decode(b64).unwrap();
        assert_eq!(&decoded[..16], &[0; 16]);
        assert_eq!(&decoded[16..], b"c:2\no:1\x07");
    }

    #[test]
    fn every_single_character_change_is_rejected() {
        let tokens = [
            GITLAB_RUNNER_TOKEN.to_owned(),
            encode_routable_token("glpat-", RANDOM, &[('c', 11), ('o', 1), ('u', 77)]),
            encode_routable_token("", [7; 16], &[('c', 2)]),
        ];
        let replacements = b"0aAzZ9-_.=+/: \n\x00";
        for token in &tokens {
            assert!(decode_routable_token(token).is_some());
            for i in 0..token.len() {
                for &r in replacements {
                    if token.as_bytes()[i] == r {
                        continue;
                    }
                    let mut mutated = token.as_bytes().to_vec();
                    mutated[i] = r;
                    let mutated = String::from_utf8(mutated).unwrap();
                    // CRC32 detects every single-byte error, and the CRC field must be canonical.
                    assert_eq!(decode_routable_token(&mutated), None, "{mutated:?}");
                }
                // Case flip.
                let c = token.as_bytes()[i];
                if c.is_ascii_alphabetic() {
                    let mut mutated = token.as_bytes().to_vec();
                    mutated[i] = c ^ 0x20;
                    let mutated = String::from_utf8(mutated).unwrap();
                    assert_eq!(decode_routable_token(&mutated), None, "{mutated:?}");
                }
                // Deletion and insertion.
                let mut deleted = token.clone();
                deleted.remove(i);
                assert_eq!(decode_routable_token(&deleted), None, "{deleted:?}");
                let mut inserted = token.clone();
                inserted.insert(i, 'a');
                assert_eq!(decode_routable_token(&inserted), None, "{inserted:?}");
            }
        }
    }

    #[test]
    fn truncations_are_rejected() {
        let token = encode_routable_token("glcbt-", RANDOM, &[('c', 5), ('o', 9), ('p', 123)]);
        for end in 0..token.len() {
            assert_eq!(
                decode_routable_token(&token[..end]),
                None,
                "{}",
                &token[..end]
            );
        }
        for start in 1..token.len() {
            assert_eq!(
                decode_routable_token(&token[start..]),
                None,
                "{}",
                &token[start..]
            );
        }
    }

    #[test]
    fn prefix_removal_is_rejected_but_prefix_is_free_form() {
        let token = encode_routable_token("gldt-", RANDOM, &[('c', 3)]);
        assert_eq!(decode_routable_token(&token["gldt-".len()..]), None);
        let custom = encode_routable_token("acme_glpat-", RANDOM, &[('c', 3)]);
        assert_eq!(decode_routable_token(&custom), Some(pairs(&[("c", "3")])));
        let unicode = encode_routable_token("jeton-é-", RANDOM, &[('c', 3)]);
        assert_eq!(decode_routable_token(&unicode), Some(pairs(&[("c", "3")])));
    }

    #[test]
    fn dotted_prefix_is_rejected() {
        let token = encode_routable_token("gl.pat-", RANDOM, &[('c', 3)]);
        assert_eq!(decode_routable_token(&token), None);
    }

    #[test]
    fn whitespace_is_rejected() {
        let token = encode_routable_token("glpat-", RANDOM, &[('c', 1)]);
        for wrapped in [
            format!(" {token}"),
            format!("{token} "),
            format!("{token}\n"),
            format!("\t{token}"),
            format!("Bearer {token}"),
        ] {
            assert_eq!(decode_routable_token(&wrapped), None, "{wrapped:?}");
        }
    }

    #[test]
    fn wrong_version_is_rejected_even_with_valid_crc() {
        let token = encode_routable_token("glpat-", RANDOM, &[('c', 1)]);
        let signed = &token[..token.len() - 7];
        for version in ["02", "00", "1", "001", "0A", "10"] {
            let other = signed.replacen(".01.", &format!(".{version}."), 1);
            assert_eq!(decode_routable_token(&with_crc(&other)), None, "{other}");
        }
        // Sanity: recomputing the CRC of the original signed part gives the token back.
        assert_eq!(with_crc(signed), token);
    }

    #[test]
    fn inconsistent_length_field_is_rejected() {
        let token = encode_routable_token("glpat-", RANDOM, &[('c', 1), ('o', 2)]);
        let signed = &token[..token.len() - 7];
        let (head, length) = signed.split_at(signed.len() - 2);
        let n = usize::from_str_radix(length, 36).unwrap();
        for other in [n - 1, n + 1, n + 4, 0, 1295] {
            let forged = with_crc(&format!("{head}{}", base36_padded(other as u64, 2)));
            assert_eq!(decode_routable_token(&forged), None, "{forged}");
        }
        // Upper-case length digits are not what GitLab writes.
        let forged = with_crc(&format!("{head}{}", length.to_ascii_uppercase()));
        if length.bytes().any(|b| b.is_ascii_alphabetic()) {
            assert_eq!(decode_routable_token(&forged), None);
        }
        // Non-base36 length digits.
        assert_eq!(decode_routable_token(&with_crc(&format!("{head}-1"))), None);
    }

    #[test]
    fn upper_case_crc_is_rejected() {
        let token = encode_routable_token("glpat-", RANDOM, &[('c', 1)]);
        let (signed, crc) = token.split_at(token.len() - 7);
        if crc.bytes().any(|b| b.is_ascii_alphabetic()) {
            let upper = format!("{signed}{}", crc.to_ascii_uppercase());
            assert_eq!(decode_routable_token(&upper), None);
        }
    }

    #[test]
    fn inconsistent_payload_length_byte_is_rejected() {
        let payload = b"c:1\no:2";
        for length in [0u8, 6, 8, 255] {
            let mut bytes = RANDOM.to_vec();
            bytes.extend_from_slice(payload);
            bytes.push(length);
            assert_eq!(
                decode_routable_token(&token_from_bytes("glpat-", &bytes)),
                None
            );
        }
        assert_eq!(
            decode_routable_token(&raw_payload_token(payload)),
            Some(pairs(&[("c", "1"), ("o", "2")]))
        );
    }

    #[test]
    fn too_short_decoded_data_is_rejected() {
        for len in 0..=16 {
            let bytes = vec![0u8; len];
            assert_eq!(
                decode_routable_token(&token_from_bytes("glpat-", &bytes)),
                None
            );
        }
    }

    #[test]
    fn bad_base64_is_rejected() {
        let valid = raw_payload_token(b"c:1");
        let b64_len = usize::from_str_radix(&valid[valid.len() - 9..valid.len() - 7], 36).unwrap();
        let b64 = &valid["glpat-".len().."glpat-".len() + b64_len];
        // Standard alphabet, padding, invalid characters, impossible length.
        for bad in [
            b64.replace('_', "/").replace('-', "+"),
            format!("{b64}="),
            format!("{}*", &b64[..b64.len() - 1]),
            format!("{b64}A"),
        ] {
            if bad == b64 {
                continue;
            }
            let signed = format!("glpat-{bad}.01.{}", base36_padded(bad.len() as u64, 2));
            assert_eq!(decode_routable_token(&with_crc(&signed)), None, "{signed}");
        }
    }

    #[test]
    fn non_canonical_trailing_bits_are_rejected() {
        // 20 bytes -> 27 chars, the last carrying 2 unused bits.
        let mut bytes = RANDOM.to_vec();
        bytes.extend_from_slice(b"c:1\x03");
        let b64 = URL_SAFE_NO_PAD.encode(&bytes);
        let last = b64.as_bytes()[b64.len() - 1];
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let index = alphabet.iter().position(|&c| c == last).unwrap();
        let tweaked = char::from(alphabet[index | 1]);
        assert_ne!(tweaked, char::from(last));
        let bad = format!("{}{tweaked}", &b64[..b64.len() - 1]);
        let signed = format!("glpat-{bad}.01.{}", base36_padded(bad.len() as u64, 2));
        assert_eq!(decode_routable_token(&with_crc(&signed)), None);
    }

    #[test]
    fn malformed_payloads_are_rejected() {
        for payload in [
            &b""[..],
            b"\n\n",
            b"c",
            b"c:",
            b":1",
            b"c:1:2",
            b"c:-1",
            b"c:+1",
            b"c: 1",
            b" c:1",
            b"c:1 ",
            b"c:1\r",
            b"c:1\nc:2",
            b"c:1\no:2\nc:1",
            b"c:1\nbad",
            b"c:\xff",
            b"\xc3\xa9:1",
            b"c:\xc3\xa9",
            b"c:3w5e11264sgsg",
            b"key-with-dash:1",
            b"averyveryverylongkey:1",
            b"c:1\x00",
        ] {
            assert_eq!(
                decode_routable_token(&raw_payload_token(payload)),
                None,
                "{:?}",
                String::from_utf8_lossy(payload)
            );
        }
    }

    #[test]
    fn lenient_payload_details_follow_gitlab() {
        // Blank lines are skipped.
        assert_eq!(
            decode_routable_token(&raw_payload_token(b"\nc:1\n\no:2\n")),
            Some(pairs(&[("c", "1"), ("o", "2")]))
        );
        // Unknown keys are kept.
        assert_eq!(
            decode_routable_token(&raw_payload_token(b"c:1\nx:z\nzone_2:10")),
            Some(pairs(&[("c", "1"), ("x", "35"), ("zone_2", "36")]))
        );
        // Values are read like Ruby's to_i(36): case-insensitive, leading zeros allowed.
        assert_eq!(
            decode_routable_token(&raw_payload_token(b"c:B\no:00rz")),
            Some(pairs(&[("c", "11"), ("o", "1007")]))
        );
        // Largest u64 and one past it.
        assert_eq!(
            decode_routable_token(&raw_payload_token(b"c:3w5e11264sgsf")),
            Some(pairs(&[("c", "18446744073709551615")]))
        );
    }

    #[test]
    fn largest_payload_round_trips() {
        // 255-byte payload: the largest the length byte can describe.
        let mut payload = b"c:1\no:".to_vec();
        payload.resize(255, b'0');
        let token = raw_payload_token(&payload);
        assert_eq!(
            decode_routable_token(&token),
            Some(pairs(&[("c", "1"), ("o", "0")]))
        );
        assert!(token.len() < MAX_TOKEN_LEN);
    }

    #[test]
    fn overlong_input_is_rejected() {
        let token = encode_routable_token(&"p".repeat(MAX_TOKEN_LEN), RANDOM, &[('c', 1)]);
        assert!(token.len() > MAX_TOKEN_LEN);
        assert_eq!(decode_routable_token(&token), None);
        let fits = encode_routable_token(&"p".repeat(MAX_TOKEN_LEN - 100), RANDOM, &[('c', 1)]);
        assert!(fits.len() <= MAX_TOKEN_LEN);
        assert_eq!(decode_routable_token(&fits), Some(pairs(&[("c", "1")])));
        assert_eq!(decode_routable_token(&"a".repeat(1_000_000)), None);
    }

    #[test]
    fn oversized_payload_from_encoder_does_not_decode() {
        // 300-byte payload: the length byte wraps (as in Ruby) and decoding refuses it.
        let fields: Vec<(char, u64)> = ('a'..='z').map(|k| (k, u64::MAX)).collect();
        let token = encode_routable_token("glpat-", RANDOM, &fields);
        assert_eq!(decode_routable_token(&token), None);
    }

    #[test]
    fn short_and_degenerate_inputs() {
        for input in [
            "",
            ".",
            ".01.",
            ".01.00",
            ".01.000000000",
            "glpat-",
            "glpat-.01.000000000",
            "0000000000000",
            "\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}",
        ] {
            assert_eq!(decode_routable_token(input), None, "{input:?}");
        }
        // Valid CRC over an empty base64 part.
        assert_eq!(decode_routable_token(&with_crc("glpat-.01.00")), None);
        assert_eq!(decode_routable_token(&with_crc(".01.00")), None);
        // Length field larger than what precedes it.
        assert_eq!(decode_routable_token(&with_crc("ab.01.zz")), None);
    }

    #[test]
    fn base36_helpers() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
        assert_eq!(base36(1007), "rz");
        assert_eq!(base36(u64::MAX), "3w5e11264sgsf");
        assert_eq!(base36(u64::from(u32::MAX)), "1z141z3");
        assert_eq!(base36_padded(5, 7), "0000005");
        assert_eq!(base36_padded(1296, 2), "100");
        assert_eq!(parse_base36_strict(b"zz"), Some(1295));
        assert_eq!(parse_base36_strict(b"Zz"), None);
        assert_eq!(parse_base36_strict(b""), None);
        assert_eq!(parse_base36_value("3w5e11264sgsg"), None);
        assert_eq!(parse_base36_value("ZZ"), Some(1295));
    }

    fn field_strategy() -> impl Strategy<Value = Vec<(char, u64)>> {
        proptest::sample::subsequence(vec!['c', 'g', 'o', 'p', 'u', 't'], 1..=6).prop_flat_map(
            |keys| {
                let n = keys.len();
                (Just(keys), proptest::collection::vec(any::<u64>(), n))
                    .prop_map(|(keys, values)| keys.into_iter().zip(values).collect())
            },
        )
    }

    proptest! {
        #[test]
        fn prop_decode_never_panics(s in "\\PC{0,1200}") {
            let _ = decode_routable_token(&s);
        }

        #[test]
        fn prop_decode_never_panics_on_token_like(s in "[a-z_-]{0,8}[A-Za-z0-9_=+/-]{0,80}(\\.[0-9a-z]{0,3}){0,3}[0-9a-z]{0,12}") {
            let _ = decode_routable_token(&s);
        }

        #[test]
        fn prop_round_trip(
            prefix in "[a-z0-9_-]{0,20}",
            random in any::<[u8; 16]>(),
            fields in field_strategy(),
        ) {
            let token = encode_routable_token(&prefix, random, &fields);
            let mut expected: Vec<(String, String)> =
                fields.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            expected.sort();
            prop_assert_eq!(decode_routable_token(&token), Some(expected));
        }

        #[test]
        fn prop_mutation_is_detected(
            random in any::<[u8; 16]>(),
            fields in field_strategy(),
            index in any::<proptest::sample::Index>(),
            byte in 0x21u8..0x7f,
        ) {
            let token = encode_routable_token("glpat-", random, &fields);
            let mut bytes = token.clone().into_bytes();
            let i = index.index(bytes.len());
            prop_assume!(bytes[i] != byte);
            bytes[i] = byte;
            let mutated = String::from_utf8(bytes).unwrap();
            prop_assert_eq!(decode_routable_token(&mutated), None);
        }
    }
}
