//! Reserved top-level routes: first path segments that Rails routes own
//! (`/admin`, `/api`, `/-/…`), so no namespace can be named after them and
//! a path under them is never a route claim. The list is data,
//! `rules/reserved_top_level_routes.txt`, compiled into the router.

use std::sync::OnceLock;

/// The list as shipped: one word per line, `#` comments.
pub const RESERVED_TOP_LEVEL_ROUTES_TXT: &str =
    include_str!("../../../rules/reserved_top_level_routes.txt");

/// The words, lower case, sorted (built once per isolate).
pub fn reserved_top_level_routes() -> &'static [String] {
    static WORDS: OnceLock<Vec<String>> = OnceLock::new();
    WORDS.get_or_init(|| {
        let mut words: Vec<String> = RESERVED_TOP_LEVEL_ROUTES_TXT
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_ascii_lowercase)
            .collect();
        words.sort();
        words.dedup();
        words
    })
}

/// Whether `segment` (any case) is a reserved top-level route.
pub fn is_reserved_top_level_route(segment: &str) -> bool {
    let words = reserved_top_level_routes();
    if segment.bytes().any(|b| b.is_ascii_uppercase()) {
        words.binary_search(&segment.to_ascii_lowercase()).is_ok()
    } else {
        words.binary_search_by(|w| w.as_str().cmp(segment)).is_ok()
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
        ] {
            assert!(is_reserved_top_level_route(word), "{word}");
        }
        for word in ["gitlab-org", "cell2-group", "apis", "", "john.doe"] {
            assert!(!is_reserved_top_level_route(word), "{word}");
        }
    }

    #[test]
    fn the_list_has_no_blank_or_duplicate_words() {
        let lines: Vec<&str> = RESERVED_TOP_LEVEL_ROUTES_TXT
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .collect();
        assert!(lines.len() >= 50, "{}", lines.len());
        assert_eq!(lines.len(), reserved_top_level_routes().len(), "duplicates");
        assert!(lines.iter().all(|l| *l == l.trim()));
    }
}
