//! A rule's regex, compiled when a request first needs it.
//!
//! Compiling a ruleset's regexes is most of what a fresh isolate does
//! before its first routed response (`session_token` ≈ 6 ms natively, far
//! more in wasm's baseline tier: every unicode class builds the thompson
//! compiler's 10,000-entry UTF-8 cache, and the one-pass DFA). The rulesets
//! compiled into the worker were compiled whole by `build.rs`, so the worker
//! loads them with [`Ruleset::from_prechecked_json`](super::Ruleset::from_prechecked_json):
//! each regex is only parsed (for its capture names, which compiling the
//! rule needs) and compiled on its first match. Everything else
//! ([`Ruleset::from_json`](super::Ruleset::from_json): rulesctl, tests, any
//! ruleset not checked at build time) compiles every regex up front as
//! before, so an invalid one is an error there and then.
//!
//! Either way a regex that starts with `^` and literal text (most path
//! rules: `^/api/v4/projects/…`, `^/jwt/auth$`; the session cookie's name)
//! first checks that the haystack starts with that text, and refuses it
//! without running the regex engine when it does not: the worker's regex
//! build leaves out the crate's literal optimisations (`perf-literal`) for
//! size, so this is the one that matters for rules most requests fail.

use std::sync::OnceLock;

use regex_syntax::ast::{self, Ast};

/// The size limit every rule regex is compiled with.
const SIZE_LIMIT: usize = 1 << 20;

fn build(source: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(source)
        .size_limit(SIZE_LIMIT)
        .build()
}

#[derive(Debug)]
pub(crate) struct Regex {
    source: Box<str>,
    /// Capture group names by index (0 is the whole match: `None`).
    names: Box<[Option<Box<str>>]>,
    compiled: OnceLock<regex::Regex>,
    /// What every match starts with at the haystack's start
    /// ([`required_prefix`]).
    prefix: Option<Box<str>>,
}

impl Regex {
    /// Compiled now: an invalid regex is an error.
    pub(crate) fn eager(source: &str) -> Result<Regex, String> {
        let re = build(source).map_err(|e| e.to_string())?;
        let prefix = ast::parse::Parser::new()
            .parse(source)
            .ok()
            .and_then(|parsed| required_prefix(&parsed));
        let names = re
            .capture_names()
            .map(|n| n.map(Box::from))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Ok(Regex {
            source: source.into(),
            names,
            compiled: OnceLock::from(re),
            prefix,
        })
    }

    /// Parsed now, compiled on first use. Only for regexes known to compile
    /// (checked at build time): a syntax error is still an error here, but
    /// a regex that parses and then fails to compile (over the size limit,
    /// an unknown unicode class) would panic on first use.
    pub(crate) fn lazy(source: &str) -> Result<Regex, String> {
        let parsed = ast::parse::Parser::new()
            .parse(source)
            .map_err(|e| e.to_string())?;
        let mut names: Vec<Option<Box<str>>> = vec![None];
        collect_groups(&parsed, &mut names);
        Ok(Regex {
            source: source.into(),
            names: names.into_boxed_slice(),
            compiled: OnceLock::new(),
            prefix: required_prefix(&parsed),
        })
    }

    fn get(&self) -> &regex::Regex {
        self.compiled.get_or_init(|| {
            build(&self.source).unwrap_or_else(|e| {
                panic!(
                    "rule regex {:?} was checked at build time but does not compile: {e}",
                    self.source
                )
            })
        })
    }

    /// Whether `haystack` lacks the text every match starts with.
    fn refused_by_prefix(&self, haystack: &str) -> bool {
        self.prefix
            .as_deref()
            .is_some_and(|prefix| !haystack.starts_with(prefix))
    }

    pub(crate) fn is_match(&self, haystack: &str) -> bool {
        !self.refused_by_prefix(haystack) && self.get().is_match(haystack)
    }

    pub(crate) fn captures<'h>(&self, haystack: &'h str) -> Option<regex::Captures<'h>> {
        if self.refused_by_prefix(haystack) {
            return None;
        }
        self.get().captures(haystack)
    }

    /// The number of groups, the whole match included (as
    /// [`regex::Regex::captures_len`]), without compiling.
    pub(crate) fn captures_len(&self) -> usize {
        self.names.len()
    }

    /// The groups' names by index (as [`regex::Regex::capture_names`]),
    /// without compiling.
    pub(crate) fn capture_names(&self) -> impl Iterator<Item = Option<&str>> {
        self.names.iter().map(|n| n.as_deref())
    }

    #[cfg(test)]
    pub(crate) fn is_compiled(&self) -> bool {
        self.compiled.get().is_some()
    }
}

/// The literal text a match of `ast` must start with at the haystack's
/// start: the literal characters right after a leading `^` (or `\A`),
/// through groups that begin with them. `None` when the regex does not
/// start with `^` and a literal, or sets flags anywhere (case-insensitive
/// or multi-line would change what the text or `^` match).
fn required_prefix(ast: &Ast) -> Option<Box<str>> {
    if sets_flags(ast) {
        return None;
    }
    let Ast::Concat(concat) = ast else {
        return None;
    };
    let (first, rest) = concat.asts.split_first()?;
    let Ast::Assertion(anchor) = first else {
        return None;
    };
    if !matches!(
        anchor.kind,
        ast::AssertionKind::StartLine | ast::AssertionKind::StartText
    ) {
        return None;
    }
    let mut prefix = String::new();
    push_literal_start(rest, &mut prefix);
    (!prefix.is_empty()).then(|| prefix.into())
}

/// Appends the literal characters `items` start with; true when every item
/// was literal (so what follows them continues the text).
fn push_literal_start(items: &[Ast], out: &mut String) -> bool {
    for item in items {
        let whole = match item {
            Ast::Literal(literal) => {
                out.push(literal.c);
                true
            }
            Ast::Group(group) => match &*group.ast {
                Ast::Concat(inner) => push_literal_start(&inner.asts, out),
                other => push_literal_start(std::slice::from_ref(other), out),
            },
            _ => false,
        };
        if !whole {
            return false;
        }
    }
    true
}

/// Whether `ast` sets any flag (`(?i)`, `(?m:…)`, …) anywhere.
fn sets_flags(ast: &Ast) -> bool {
    match ast {
        Ast::Flags(_) => true,
        Ast::Group(group) => {
            matches!(&group.kind, ast::GroupKind::NonCapturing(flags) if !flags.items.is_empty())
                || sets_flags(&group.ast)
        }
        Ast::Repetition(rep) => sets_flags(&rep.ast),
        Ast::Alternation(alt) => alt.asts.iter().any(sets_flags),
        Ast::Concat(concat) => concat.asts.iter().any(sets_flags),
        _ => false,
    }
}

/// Records every capture group of `ast` at its index (named or not).
fn collect_groups(ast: &Ast, names: &mut Vec<Option<Box<str>>>) {
    match ast {
        Ast::Group(group) => {
            let slot = match &group.kind {
                ast::GroupKind::CaptureIndex(index) => Some((*index, None)),
                ast::GroupKind::CaptureName { name, .. } => {
                    Some((name.index, Some(Box::from(name.name.as_str()))))
                }
                ast::GroupKind::NonCapturing(_) => None,
            };
            if let Some((index, name)) = slot {
                let index = index as usize;
                if names.len() <= index {
                    names.resize(index + 1, None);
                }
                names[index] = name;
            }
            collect_groups(&group.ast, names);
        }
        Ast::Repetition(rep) => collect_groups(&rep.ast, names),
        Ast::Alternation(alt) => alt.asts.iter().for_each(|a| collect_groups(a, names)),
        Ast::Concat(concat) => concat.asts.iter().for_each(|a| collect_groups(a, names)),
        Ast::Empty(_)
        | Ast::Flags(_)
        | Ast::Literal(_)
        | Ast::Dot(_)
        | Ast::Assertion(_)
        | Ast::ClassUnicode(_)
        | Ast::ClassPerl(_)
        | Ast::ClassBracketed(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsed_names_are_the_compiled_ones() {
        for source in [
            "^/jwt/auth$",
            r"^(?<cell_name>cell-[0-9]+)-[0-9a-f]{32}$",
            r"^(a)(?:b)(?P<x>c(d)|(?<y>e))*(f)?$",
            r"(?i)((?<n>x)|[()](y))",
            r"\((?<after>z)\)",
            r"[a-z(]+(?<q>.)",
        ] {
            let eager = Regex::eager(source).unwrap();
            let lazy = Regex::lazy(source).unwrap();
            assert!(!lazy.is_compiled());
            assert_eq!(
                lazy.capture_names().collect::<Vec<_>>(),
                eager.capture_names().collect::<Vec<_>>(),
                "{source}"
            );
            assert_eq!(lazy.captures_len(), eager.captures_len(), "{source}");
            assert_eq!(lazy.is_match("cell-1-x"), eager.is_match("cell-1-x"));
            // A haystack the prefix check refuses never reaches the engine.
            assert_eq!(lazy.is_compiled(), !lazy.refused_by_prefix("cell-1-x"));
            assert_eq!(lazy.is_match("("), eager.is_match("("));
        }
        assert!(Regex::lazy("(unclosed").is_err());
        assert!(Regex::eager("(unclosed").is_err());
    }

    fn prefix_of(source: &str) -> Option<String> {
        let lazy = Regex::lazy(source).unwrap();
        let eager = Regex::eager(source).unwrap();
        assert_eq!(lazy.prefix, eager.prefix, "{source}");
        lazy.prefix.map(String::from)
    }

    #[test]
    fn the_literal_start_of_anchored_regexes_is_found() {
        for (source, prefix) in [
            ("^/jwt/auth$", Some("/jwt/auth")),
            (
                r"^/api/v4/projects/(?<id>[0-9]+)(?:/|$)",
                Some("/api/v4/projects/"),
            ),
            (r"^_gitlab_session(_[0-9a-f]+)?$", Some("_gitlab_session")),
            (r"^(?<cell_name>cell-[0-9]+)-[0-9a-f]{32}$", Some("cell-")),
            (r"^(?:ab)(c)d[e]", Some("abcd")),
            (r"^a\.b\x41", Some("a.bA")),
            (r"^/v2/(_catalog)?$", Some("/v2/")),
            (r"^a+", None),
            (r"^(?:GET|HEAD)$", None),
            (r"^(?:/-|/api/v4)?/snippets/", None),
            (r"^[Bb]earer ", None),
            (r"/jwt/auth$", None),
            (r"^a|b", None),
            (r"(?i)^abc", None),
            (r"^abc(?m:$)", None),
            (r"^ab(?i:c)", None),
        ] {
            assert_eq!(prefix_of(source).as_deref(), prefix, "{source}");
        }
    }

    /// Every regex of the shipped rulesets.
    fn shipped_regexes() -> Vec<String> {
        fn walk(value: &serde_json::Value, out: &mut Vec<String>) {
            match value {
                serde_json::Value::Object(map) => {
                    for (key, v) in map {
                        match v {
                            serde_json::Value::String(s) if key.starts_with("regex") => {
                                out.push(s.clone())
                            }
                            _ => walk(v, out),
                        }
                    }
                }
                serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
                _ => {}
            }
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../rules");
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                let text = std::fs::read_to_string(&path).unwrap();
                walk(&serde_json::from_str(&text).unwrap(), &mut out);
            }
        }
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn the_prefix_check_never_changes_an_answer() {
        let regexes = shipped_regexes();
        assert!(regexes.len() > 20, "{regexes:?}");
        let haystacks = [
            "",
            "/",
            "/jwt/auth",
            "/jwt/authx",
            "/api/v4/projects/12/x",
            "/api/v4/projects/",
            "/api/v4/groups/a%2Fb",
            "/api/v4/users/5",
            "/o/acme/x",
            "/groups/g/-/x",
            "/users/sign_in",
            "/v2/",
            "/v2/_catalog",
            "/v2/a/b/manifests/latest",
            "/snippets/3",
            "/-/snippets/3.json",
            "/group-3/project-1/-/tree/main",
            "_gitlab_session",
            "_gitlab_session_ab12",
            "_gitlab_sessionx",
            "cell-2-0123456789abcdef0123456789abcdef",
            "cell-",
            "Bearer a.b.c",
            "basic dXNlcjpwYXNz",
            "repository:a/b:pull",
            "GET",
            "HEAD",
            "POST",
            "glpat-abc.01.0123456789",
            "/API/V4/PROJECTS/1",
        ];
        let mut refused = 0;
        for source in &regexes {
            let filtered = Regex::lazy(source).unwrap();
            let plain = build(source).unwrap();
            for haystack in haystacks {
                refused += usize::from(filtered.refused_by_prefix(haystack));
                assert_eq!(
                    filtered.is_match(haystack),
                    plain.is_match(haystack),
                    "{source} {haystack:?}"
                );
                assert_eq!(
                    filtered
                        .captures(haystack)
                        .map(|c| c.get(0).map(|m| m.range())),
                    plain
                        .captures(haystack)
                        .map(|c| c.get(0).map(|m| m.range())),
                    "{source} {haystack:?}"
                );
            }
        }
        assert!(refused > 100, "the check refuses most of these: {refused}");
    }
}
