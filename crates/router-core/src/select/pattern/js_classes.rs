//! Perl classes as GitLab's rules mean them.
//!
//! GitLab writes its routing rules for JavaScript's `RegExp`, where `\d`
//! and `\w` are ASCII (`[0-9]`, `[0-9A-Za-z_]`), `\s` is JavaScript's
//! whitespace set and `\b` is an ASCII word boundary. Rust's `regex` reads
//! them as Unicode classes, which also need ~14 KiB gzip of Unicode tables
//! in the worker (`regex`'s `unicode-perl` feature). Every rule regex is
//! rewritten to JavaScript's meaning before it is compiled or analysed, so
//! a rule matches what it matches in GitLab's router and the tables stay
//! out of the wasm.

use std::borrow::Cow;

/// JavaScript's `\s`: WhiteSpace and LineTerminator (ECMA-262).
const SPACE: &str = r"\t\n\x0B\x0C\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}";
const DIGIT: &str = "0-9";
const WORD: &str = "0-9A-Za-z_";

/// `source` with `\d \D \w \W \s \S \b \B` written out as JavaScript reads
/// them; borrowed when it has none. A class inside a bracket class becomes
/// a nested class (`[^\s.]` is `[^[\t…].]`), which `regex` supports.
pub(crate) fn with_js_classes(source: &str) -> Cow<'_, str> {
    let bytes = source.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut i = 0;
    while let Some(&[first, second]) = bytes.get(i..i + 2) {
        if first != b'\\' {
            i += 1;
            continue;
        }
        let written = match second {
            b'd' => Some(format!("[{DIGIT}]")),
            b'D' => Some(format!("[^{DIGIT}]")),
            b'w' => Some(format!("[{WORD}]")),
            b'W' => Some(format!("[^{WORD}]")),
            b's' => Some(format!("[{SPACE}]")),
            b'S' => Some(format!("[^{SPACE}]")),
            b'b' => Some(r"(?-u:\b)".to_owned()),
            b'B' => Some(r"(?-u:\B)".to_owned()),
            _ => None,
        };
        if let Some(written) = written {
            // `i` is a backslash's index, so a character boundary.
            out.push_str(source.get(copied..i).unwrap_or_default());
            out.push_str(&written);
            copied = i + 2;
        }
        // An escape is always a pair here: `\\d` is a backslash and a `d`.
        i += 2;
    }
    if copied == 0 {
        return Cow::Borrowed(source);
    }
    out.push_str(source.get(copied..).unwrap_or_default());
    Cow::Owned(out)
}

/// What `source` (as [`with_js_classes`] wrote it) asks for that the
/// worker's `regex` lacks: Unicode classes and Unicode case folding. The
/// tools link `regex` with every Unicode feature, so this is the check
/// that keeps `rulesctl validate` and the worker in agreement.
#[cfg(feature = "compile")]
pub(crate) fn unavailable(source: &str) -> Option<&'static str> {
    let bytes = source.as_bytes();
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        match byte {
            b'\\' if matches!(bytes.get(i + 1), Some(b'p' | b'P')) => {
                return Some("Unicode classes (\\p{..}, \\P{..}) are not available in the worker");
            }
            b'\\' => i += 1,
            b'(' if bytes.get(i + 1) == Some(&b'?') => {
                let flags = bytes
                    .get(i + 2..)
                    .unwrap_or_default()
                    .iter()
                    .take_while(|b| b.is_ascii_alphabetic() || **b == b'-');
                let on = flags.take_while(|b| **b != b'-');
                if on.into_iter().any(|b| *b == b'i') {
                    return Some(
                        "case-insensitive matching ((?i)) is not available in the worker: write both cases, as in [Bb]earer",
                    );
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(source: &str, haystack: &str) -> bool {
        regex::Regex::new(&with_js_classes(source))
            .unwrap()
            .is_match(haystack)
    }

    #[test]
    fn leaves_sources_without_perl_classes_alone() {
        for s in [r"^/api/v4/projects/(?<id>[0-9]+)$", r"\\d", r"a\.b\/c", ""] {
            assert!(matches!(with_js_classes(s), Cow::Borrowed(_)), "{s}");
        }
        assert!(matches(r"^\\d$", r"\d"));
        assert!(!matches(r"^\\d$", "1"));
    }

    #[test]
    fn digits_and_words_are_ascii_as_in_javascript() {
        assert!(matches(r"^\d+$", "0123456789"));
        assert!(!matches(r"^\d+$", "١٢٣"), "Arabic-Indic digits");
        assert!(matches(r"^\w+$", "gitlab_org"));
        assert!(!matches(r"^\w+$", "é"));
        assert!(matches(r"^\D\W$", "a-"));
    }

    #[test]
    fn space_is_javascripts_whitespace() {
        for c in [
            '\t', '\n', '\u{b}', '\u{c}', '\r', ' ', '\u{a0}', '\u{2003}', '\u{feff}',
        ] {
            assert!(matches(r"^\s$", &c.to_string()), "{c:?}");
            assert!(!matches(r"^\S$", &c.to_string()), "{c:?}");
        }
        assert!(
            !matches(r"^\s$", "\u{85}"),
            "NEL is not JavaScript whitespace"
        );
    }

    #[test]
    fn inside_a_bracket_class_they_nest() {
        // GitLab's routable token rule.
        let token = r"^(?<token>[^\s.]+\.01\.[0-9a-z]{9})$";
        assert!(matches(token, "glpat-abc.01.012345678"));
        assert!(!matches(token, "glpat abc.01.012345678"));
        assert!(!matches(token, "glpat\u{a0}abc.01.012345678"));
        assert!(matches(r"^[\d_]+$", "1_2"));
    }

    #[test]
    #[cfg(feature = "compile")]
    fn what_the_worker_cannot_compile_is_named() {
        for s in [r"\p{L}", r"^[\pN]$", r"\PL", "(?i)bearer", "(?mi:x)"] {
            assert!(unavailable(&with_js_classes(s)).is_some(), "{s}");
        }
        for s in [
            r"^[Bb]earer\s",
            r"\\p",
            "(?-i)x",
            "(?m)^x$",
            r"\(?i\)",
            r"^(?<id>[0-9]+)$",
        ] {
            assert_eq!(unavailable(&with_js_classes(s)), None, "{s}");
        }
    }

    #[test]
    fn word_boundaries_are_ascii() {
        assert!(matches(r"\bapi\b", "/api/v4"));
        assert!(!matches(r"\bapi\b", "/apiv4"));
        assert!(matches(r"a\Bb", "ab"));
    }
}
