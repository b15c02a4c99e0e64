//! Reserved top-level routes: first path segments that are not a namespace
//! (`/admin`, `/api`, `/-/…`), so a path under them is never a route claim,
//! and the literal words GitLab routes beside a name the router claims
//! (`groups/new`, `users/sign_in`, `api/v4/namespaces/storage`). The list
//! is data, `rules/reserved_top_level_routes.txt`: every word sits under a
//! `[source]` line that names where it comes from. `build.rs` reads it
//! ([`ReservedList::parse`]; a bad list fails the build) and compiles the
//! words into a sorted table, so nothing is parsed at run time.

mod list;

pub use list::{ReservedList, Source};

/// The list as shipped, for the tools that read its sources.
pub const RESERVED_TOP_LEVEL_ROUTES_TXT: &str =
    include_str!("../../../../rules/reserved_top_level_routes.txt");

// `WORDS`: every word of the list, sorted, each once (build.rs).
include!(concat!(env!("OUT_DIR"), "/reserved_words.rs"));

/// The words, lower case, sorted, each once.
pub fn reserved_top_level_routes() -> &'static [&'static str] {
    WORDS
}

/// Whether `segment` (any case) is a reserved top-level route.
pub fn is_reserved_top_level_route(segment: &str) -> bool {
    if segment.bytes().any(|b| b.is_ascii_uppercase()) {
        WORDS
            .binary_search(&segment.to_ascii_lowercase().as_str())
            .is_ok()
    } else {
        WORDS.binary_search(&segment).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitlab_words_and_the_routers_own_are_reserved() {
        for word in [
            "-",
            "api",
            "API",
            "Admin",
            ".well-known",
            "v2",
            "jwt",
            "o",
            "users",
            "cdn-cgi",
            "groups/new",
            "o/new",
            "users/sign_in",
            "api/v4/namespaces/storage",
        ] {
            assert!(is_reserved_top_level_route(word), "{word}");
        }
        for word in [
            "gitlab-org",
            "cell2-group",
            "apis",
            "",
            "john.doe",
            "storage",
        ] {
            assert!(!is_reserved_top_level_route(word), "{word}");
        }
    }

    /// Words GitLab reserved once and has since freed: a
    /// namespace may carry them, so the router claims them.
    #[test]
    fn words_gitlab_freed_are_claimable() {
        for word in [
            "ci",
            "u",
            "invites",
            "koding",
            "autocomplete",
            "abuse_reports",
            "notification_settings",
            "sent_notifications",
            "unicorn_test",
            "header_logo_dark.png",
            "header_logo_light.png",
            "rails",
        ] {
            assert!(!is_reserved_top_level_route(word), "{word}");
        }
    }

    #[test]
    fn the_shipped_list_names_a_source_for_every_word() {
        let list = ReservedList::parse(RESERVED_TOP_LEVEL_ROUTES_TXT).unwrap();
        let ids: Vec<&str> = list.sources.iter().map(|s| s.id).collect();
        assert_eq!(ids, ["snapshot", "reserved_names", "static", "router"]);
        let listed: usize = list.sources.iter().map(|s| s.words.len()).sum();
        assert!(listed >= reserved_top_level_routes().len());
        assert!(reserved_top_level_routes().len() >= 60);
        for word in reserved_top_level_routes() {
            assert!(!list.sources_of(word).is_empty(), "{word}");
        }
        assert!(reserved_top_level_routes().windows(2).all(|w| w[0] < w[1]));
        assert_eq!(list.sources_of("assets"), ["reserved_names", "static"]);
        assert_eq!(list.sources_of("admin"), ["snapshot", "reserved_names"]);
    }

    #[test]
    fn a_word_without_a_source_and_other_slips_are_refused() {
        let cases = [
            ("admin\n[s] somewhere\nx\n", ":1: \"admin\" has no source"),
            ("[s]\nx\n", "says nothing of where"),
            ("[s] a\n[s] b\nx\n", "listed twice"),
            ("[s] a\n", "lists no word"),
            ("[s] a\nAdmin\n", "'A'"),
            ("[s] a\nx y\n", "one word a line"),
            ("[s] a\nx\nx\n", "\"x\" is listed twice under [s]"),
            ("[s] a\n/x\n", "none at either end"),
            ("[S] a\nx\n", "lower case letters"),
            ("", "no source"),
        ];
        for (text, want) in cases {
            let err = ReservedList::parse(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
        let ok = ReservedList::parse("# c\n[a] one\nx\n[b] two\nx\ny/z\n").unwrap();
        assert_eq!(ok.sources_of("x"), ["a", "b"]);
        assert_eq!(ok.source("b").unwrap().words, ["x", "y/z"]);
    }
}
