//! The literal prefixes every match of an anchored rule regex starts with,
//! found by regex-syntax's own literal extractor (at build time for the
//! rulesets compiled in): a request value that starts with none of them
//! cannot match, so the regex's program is not run for it, and the path
//! dispatch trie (`select/dispatch.rs`) is built from them. Most rule
//! regexes are anchored (`^/api/v4/projects/`, `^_gitlab_session`). The
//! program still decides every value that passes.

use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Hir, Look};

/// At most this many prefixes are compared per value.
const MAX_PREFIXES: usize = 4;

/// The prefixes (bytes) of which every match of `hir` starts with one,
/// or `None` when there is no such short list: the regex is not anchored
/// at the start of the value, or a match may start with anything. Too many literals are cut to a common length until few are
/// left (`cell-[0-9]+` → `cell-`): still a prefix of every match.
pub(crate) fn required_prefixes(hir: &Hir) -> Option<Vec<Vec<u8>>> {
    // Every match starts at the start of the value (not only after a line
    // break: `(?m)^` is Look::StartLF).
    if !hir.properties().look_set_prefix().contains(Look::Start) {
        return None;
    }
    let seq = Extractor::new().kind(ExtractKind::Prefix).extract(hir);
    let literals: Vec<&[u8]> = seq.literals()?.iter().map(|l| l.as_bytes()).collect();
    let shortest = literals.iter().map(|l| l.len()).min()?;
    if shortest == 0 {
        return None; // a match may start with anything
    }
    let cut = |len: usize| {
        let mut cut: Vec<Vec<u8>> = literals
            .iter()
            .map(|l| l.iter().take(len).copied().collect())
            .collect();
        cut.sort();
        cut.dedup();
        (cut.len() <= MAX_PREFIXES).then_some(cut)
    };
    cut(usize::MAX).or_else(|| (1..=shortest).rev().find_map(cut))
}

#[cfg(test)]
mod tests {
    fn required_prefixes(source: &str) -> Option<Vec<Vec<u8>>> {
        super::required_prefixes(&regex_syntax::Parser::new().parse(source).unwrap())
    }

    fn strings(p: Option<Vec<Vec<u8>>>) -> Option<Vec<String>> {
        p.map(|v| {
            v.into_iter()
                .map(|b| String::from_utf8(b).unwrap())
                .collect()
        })
    }

    #[test]
    fn anchored_regexes_have_their_literal_prefixes() {
        let prefixes = |s| strings(required_prefixes(s)).unwrap();
        assert_eq!(prefixes("^/jwt/auth$"), ["/jwt/auth"]);
        assert_eq!(prefixes("^(?:GET|HEAD)$"), ["GET", "HEAD"]);
        assert_eq!(prefixes("^[Bb]earer (?<t>.+)$"), ["Bearer ", "bearer "]);
        assert_eq!(
            prefixes("^(?:/-|/api/v4)?/snippets/"),
            ["/-/snippets/", "/api/v4/snippets/", "/snippets/"]
        );
        // Cut to a common length until few are left.
        assert_eq!(
            prefixes("^/api/v4/projects/(?<id>[0-9]{1,19})(?:/|$)"),
            ["/api/v4/projects/"]
        );
        assert_eq!(prefixes("^(?<cell>cell-[0-9]+)-[0-9a-f]{32}$"), ["cell-"]);
        assert_eq!(
            prefixes("^(?:/-|/api/v4)?/snippets/(?<id>[0-9]{1,19})(?:[/.]|$)"),
            ["/-/snippet", "/api/v4/sn", "/snippets/"]
        );
    }

    #[test]
    fn no_list_when_a_match_may_start_anywhere_or_with_anything() {
        for source in [
            "/jwt/auth",      // not anchored: searched anywhere
            "(?m)^/jwt/auth", // anchored at line starts only
            "^(?:a)?",        // may match the empty string
            "^[^/]+/",        // too many first characters
            "x|^y",           // one branch not anchored
        ] {
            assert_eq!(required_prefixes(source), None, "{source}");
        }
    }

    #[test]
    fn a_value_without_a_prefix_never_matches() {
        for (source, values) in [
            (
                "^/o/(?<org>[a-z]+)",
                &["/o/x", "/oo/x", "/groups/x", "", "/o"][..],
            ),
            (
                "^(?:/-|/api/v4)?/snippets/([0-9]+)",
                &[
                    "/snippets/1",
                    "/-/snippets/2",
                    "/api/v4/snippets/3",
                    "/api/v3/snippets/4",
                ],
            ),
            (
                "^[Bb]earer (?<t>.+)$",
                &["Bearer x", "bearer y", "BEARER z", "Basic q"],
            ),
            (
                "^_gitlab_session(_[0-9a-f]+)?$",
                &["_gitlab_session", "_gitlab_session_ab", "gitlab_session"],
            ),
        ] {
            let prefixes = required_prefixes(source).unwrap();
            let re = regex::Regex::new(source).unwrap();
            for value in values {
                let admitted = prefixes.iter().any(|p| value.as_bytes().starts_with(p));
                assert!(admitted || !re.is_match(value), "{source} {value}");
            }
        }
    }

    proptest::proptest! {
        /// Values built from the pieces the shipped regexes start with:
        /// one the prefixes refuse never matches.
        #[test]
        fn refused_values_never_match_shipped_regexes(
            value in "(/api/v4/|projects/|groups/|namespaces/|users/|snippets/|/o/|/groups/|/-/|/jwt/auth|cell-|[Bb]earer |[Bb]asic |_gitlab_session|repository:|GET|HEAD|PUT|[0-9a-zA-Z_.:/ -]){0,6}"
        ) {
            static SHIPPED: std::sync::OnceLock<Vec<(regex::Regex, Vec<Vec<u8>>)>> =
                std::sync::OnceLock::new();
            let shipped = SHIPPED.get_or_init(|| {
                crate::select::tests::shipped_regexes()
                    .iter()
                    .filter_map(|s| Some((regex::Regex::new(s).unwrap(), required_prefixes(s)?)))
                    .collect()
            });
            for (re, prefixes) in shipped {
                let admitted = prefixes.iter().any(|p| value.as_bytes().starts_with(p));
                proptest::prop_assert!(admitted || !re.is_match(&value), "{} {}", re, value);
            }
        }
    }
}
