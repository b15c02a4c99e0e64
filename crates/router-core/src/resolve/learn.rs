//! Route learning (the earlier router proposal, kept beside the Topology
//! Service): the router asks a cell `GET
//! /api/v4/internal/cells/learn?method=M&path_info=P` and routes by the
//! answer, `{"path": "/gitlab-org/gitlab-test", "cell": "cell_0", "source":
//! "routable"}` (a prefix: every path under it goes to that cell) or
//! `{"path": "/-/profile", "cell": "cell_0", "source": "fixed", "exact":
//! true}` (that path only). A 404 means no cell knows the path.
//!
//! The design's answer names the cell (`cell_0`) but not where it is; this
//! router needs an address, so the answer must also carry `"address"`
//! (`host[:port]`, the extension the devstack's learn endpoint answers
//! with; docs/decisions.md). An answer without one is not usable.
//!
//! This module owns what is pure about it: the question (method and path,
//! carried in a [`ClassifyRequest::learn`](crate::question::ClassifyRequest::learn) so the
//! [`crate::resolve::Resolver`]'s caches, coalescing and breaker serve it
//! too), the answer's parsing and validation, and the cache keys: an exact
//! answer (and a 404) is kept under the method and path, a prefix under the
//! prefix alone, and a path is looked up under its own key and then under
//! each of its ancestors on a segment boundary, longest first.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Deserialize;

use crate::error::ServiceFailure;
use crate::resolve::topology::{CellAnswer, Classification};

/// The deepest ancestor a lookup tries (segments); deeper prefixes are
/// not looked up, so a learned prefix deeper than this serves nothing
/// beyond its exact path (GitLab namespaces nest at most 20 deep; real
/// project paths are far shallower).
pub const MAX_PREFIX_DEPTH: usize = 8;

/// The learn endpoint's path on a cell.
pub const LEARN_PATH: &str = "/api/v4/internal/cells/learn";

/// What stays as it is in the learn call's query values: unreserved
/// characters (RFC 3986) and `/`, which keeps paths readable in logs.
const LEARN_QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// The URL path and query the learn call asks: `method` and `path_info`
/// percent-encoded.
pub fn learn_path_and_query(method: &str, path: &str) -> String {
    format!(
        "{LEARN_PATH}?method={}&path_info={}",
        utf8_percent_encode(method, LEARN_QUERY_VALUE),
        utf8_percent_encode(path, LEARN_QUERY_VALUE)
    )
}

/// The memory and shared-cache key of a learned prefix (method-free: a
/// routable prefix is a namespace or project, whatever the method).
pub fn prefix_key(prefix: &str) -> String {
    format!(r#"{{"learnPrefix":{}}}"#, json_string(prefix))
}

/// `path`'s ancestors on segment boundaries, longest first, `path` itself
/// included, never `/`: `/a/b/c` → `/a/b/c`, `/a/b`, `/a`. At most
/// [`MAX_PREFIX_DEPTH`] segments deep.
pub fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let trimmed = path.trim_end_matches('/');
    let mut ends: Vec<usize> = trimmed
        .char_indices()
        .filter(|&(i, c)| c == '/' && i > 0)
        .map(|(i, _)| i)
        .collect();
    ends.push(trimmed.len());
    ends.truncate(MAX_PREFIX_DEPTH);
    ends.into_iter()
        .rev()
        .filter(|&end| end > 1)
        .filter_map(move |end| trimmed.get(..end))
}

/// Whether `prefix` covers `path`: equal, or `path` goes on after it with
/// a `/` (segment boundary: `/ab` does not cover `/abc`).
pub fn covers(prefix: &str, path: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    !prefix.is_empty()
        && path.starts_with(prefix)
        && matches!(path.as_bytes().get(prefix.len()), None | Some(b'/'))
}

/// What an answer applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every path under this prefix (cached under [`prefix_key`]).
    Prefix(String),
    /// The asked method and path only (cached under the question's body).
    Exact,
}

/// A usable learn answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Learned {
    pub classification: Classification,
    pub scope: Scope,
}

#[derive(Deserialize)]
struct AnswerBody {
    path: String,
    cell: String,
    source: String,
    #[serde(default)]
    exact: bool,
    #[serde(default)]
    address: Option<String>,
}

#[derive(Deserialize)]
struct NotFoundBody {
    path: String,
}

/// Parses a learn answer to `path`. A 404 is a negative answer for the
/// exact path, or for a prefix when its body names one that covers the
/// path (`{"path": "/no-such-group"}`: no cell owns anything under it, an
/// extension of the design's answer that the devstack sends); any other
/// non-200, or a body that is not an answer to this path, is an error (the
/// request goes to the legacy cell, and the error into its log line).
pub fn parse_answer(status: u16, body: &str, path: &str) -> Result<Learned, ServiceFailure> {
    match status {
        200 => {}
        404 => {
            let prefix = serde_json::from_str::<NotFoundBody>(body)
                .ok()
                .map(|b| b.path.trim_end_matches('/').to_string())
                .filter(|p| {
                    p.starts_with('/')
                        && covers(p, path)
                        && p.matches('/').count() <= MAX_PREFIX_DEPTH
                });
            return Ok(Learned {
                classification: Classification::NotFound,
                scope: prefix.map_or(Scope::Exact, Scope::Prefix),
            });
        }
        other => return Err(ServiceFailure::Status(other)),
    }
    let bad = ServiceFailure::BadAnswer;
    let answer: AnswerBody = serde_json::from_str(body).map_err(|e| bad(format!("body: {e}")))?;
    if answer.cell.is_empty() {
        return Err(bad("no cell".into()));
    }
    let address = answer
        .address
        .filter(|a| !a.is_empty())
        .ok_or_else(|| bad(format!("no address for cell {:?}", answer.cell)))?;
    crate::address::validate_address(&address).map_err(|e| bad(format!("address: {e}")))?;
    // Either source may be a prefix (`/api`, a group) or one path.
    if !matches!(answer.source.as_str(), "routable" | "fixed") {
        return Err(bad(format!("unknown source {:?}", answer.source)));
    }
    let exact = answer.exact;
    let scope = if exact {
        if answer.path != path {
            return Err(bad(format!(
                "exact answer for {:?}, asked {path:?}",
                answer.path
            )));
        }
        Scope::Exact
    } else {
        let prefix = answer.path.trim_end_matches('/');
        if !prefix.starts_with('/') || !covers(prefix, path) {
            return Err(bad(format!(
                "prefix {:?} does not cover {path:?}",
                answer.path
            )));
        }
        if prefix.matches('/').count() > MAX_PREFIX_DEPTH {
            // Deeper than lookups go: keep it for this path only.
            Scope::Exact
        } else {
            Scope::Prefix(prefix.to_string())
        }
    };
    Ok(Learned {
        classification: Classification::Cell(CellAnswer {
            address,
            registry_address: None,
        }),
        scope,
    })
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::question::{ClassifyRequest, Target};

    fn cell(address: &str) -> Classification {
        Classification::Cell(CellAnswer {
            address: address.into(),
            registry_address: None,
        })
    }

    #[test]
    fn ancestors_walk_segment_boundaries_longest_first() {
        assert_eq!(
            ancestors("/a/b/c").collect::<Vec<_>>(),
            ["/a/b/c", "/a/b", "/a"]
        );
        assert_eq!(ancestors("/a/b/").collect::<Vec<_>>(), ["/a/b", "/a"]);
        assert_eq!(ancestors("/").count(), 0);
        let deep = "/1/2/3/4/5/6/7/8/9/10";
        assert_eq!(ancestors(deep).count(), MAX_PREFIX_DEPTH);
        assert_eq!(ancestors(deep).next(), Some("/1/2/3/4/5/6/7/8"));
    }

    #[test]
    fn a_prefix_covers_paths_on_segment_boundaries_only() {
        assert!(covers("/gitlab-org", "/gitlab-org"));
        assert!(covers("/gitlab-org", "/gitlab-org/gitlab/-/issues"));
        assert!(covers("/gitlab-org/", "/gitlab-org/x"));
        assert!(!covers("/gitlab-org", "/gitlab-orgx"));
        assert!(!covers("/gitlab-org/gitlab", "/gitlab-org"));
        assert!(!covers("/", "/anything"));
        assert!(!covers("", "/anything"));
    }

    #[test]
    fn routable_answers_are_prefixes_and_fixed_ones_exact() {
        let got = parse_answer(
            200,
            r#"{"path":"/gitlab-org/gitlab-test","cell":"cell_2","source":"routable","address":"c2:80"}"#,
            "/gitlab-org/gitlab-test/-/issues",
        )
        .unwrap();
        assert_eq!(got.scope, Scope::Prefix("/gitlab-org/gitlab-test".into()));
        assert_eq!(got.classification, cell("c2:80"));

        let fixed = parse_answer(
            200,
            r#"{"path":"/-/profile","cell":"cell_1","source":"fixed","exact":true,"address":"c1"}"#,
            "/-/profile",
        )
        .unwrap();
        assert_eq!(fixed.scope, Scope::Exact);

        let not_found = parse_answer(404, "nothing", "/x").unwrap();
        assert_eq!(not_found.classification, Classification::NotFound);
        assert_eq!(not_found.scope, Scope::Exact);
        // A 404 may name the prefix nobody owns; one that does not cover
        // the path is ignored (exact).
        let nobody = parse_answer(404, r#"{"path":"/nobody"}"#, "/nobody/app/-/tree").unwrap();
        assert_eq!(nobody.classification, Classification::NotFound);
        assert_eq!(nobody.scope, Scope::Prefix("/nobody".into()));
        for body in [
            r#"{"path":"/other"}"#,
            r#"{"path":"/"}"#,
            r#"{"path":"nobody"}"#,
        ] {
            let got = parse_answer(404, body, "/nobody/app").unwrap();
            assert_eq!(got.scope, Scope::Exact, "{body}");
        }
    }

    #[test]
    fn garbage_and_answers_to_other_paths_are_errors() {
        let path = "/gitlab-org/gitlab";
        for (status, body) in [
            (500, "{}"),
            (200, "<html>"),
            (
                200,
                r#"{"path":"/gitlab-org","cell":"cell_2","source":"routable"}"#,
            ),
            (
                200,
                r#"{"path":"/other","cell":"cell_2","source":"routable","address":"c2"}"#,
            ),
            (
                200,
                r#"{"path":"/gitlab-or","cell":"cell_2","source":"routable","address":"c2"}"#,
            ),
            (
                200,
                r#"{"path":"/","cell":"cell_2","source":"routable","address":"c2"}"#,
            ),
            (
                200,
                r#"{"path":"/gitlab-org","cell":"cell_2","source":"fixed","exact":true,"address":"c2"}"#,
            ),
            (
                200,
                r#"{"path":"/gitlab-org","cell":"cell_2","source":"magic","address":"c2"}"#,
            ),
            (
                200,
                r#"{"path":"/gitlab-org","cell":"cell_2","source":"routable","address":"c2/evil"}"#,
            ),
            (
                200,
                r#"{"path":"/gitlab-org","cell":"","source":"routable","address":"c2"}"#,
            ),
        ] {
            assert!(
                parse_answer(status, body, path).is_err(),
                "{status} {body} was accepted"
            );
        }
    }

    #[test]
    fn the_learn_call_encodes_method_and_path() {
        assert_eq!(
            learn_path_and_query("GET", "/a b/c&d=e"),
            "/api/v4/internal/cells/learn?method=GET&path_info=/a%20b/c%26d%3De"
        );
        let q = ClassifyRequest::learn("POST", "/a/b", Target::Web);
        assert_eq!(q.learn_method_and_path(), Some(("POST", "/a/b")));
        assert_eq!(
            q.body(),
            r#"{"learn":{"method":"POST","path_info":"/a/b"}}"#
        );
        assert_eq!(prefix_key("/a"), r#"{"learnPrefix":"/a"}"#);
    }
}
