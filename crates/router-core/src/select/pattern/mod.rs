//! A rule's regex, compiled when a request first needs it.
//!
//! Compiling a ruleset's regexes is most of what a fresh isolate does
//! before its first routed response (`session_token` ≈ 6 ms natively, far
//! more in wasm's baseline tier: every unicode class builds the thompson
//! compiler's 10,000-entry UTF-8 cache, and the one-pass DFA). The rulesets
//! compiled into the worker were compiled whole by `build.rs`, so the worker
//! loads them with [`Ruleset::from_prechecked_json`](super::Ruleset::from_prechecked_json):
//! what compiling a rule needs of each regex (its capture names) and its
//! required prefixes (`prefix.rs`) come from the [`RegexTable`] `build.rs`
//! wrote beside the ruleset, and the regex is compiled on the first value
//! that passes its prefixes. Parsing every regex at isolate start instead
//! ran regex-syntax's parser often enough that V8 optimised its one large
//! function with TurboFan during the first request, ~40 ms of CPU for
//! `session_token` (docs/benchmark.md). Everything else
//! ([`Ruleset::from_json`](super::Ruleset::from_json): rulesctl, tests, any
//! ruleset not checked at build time) compiles every regex up front as
//! before, so an invalid one is an error there and then.

use std::sync::OnceLock;

use regex_syntax::ast::{self, Ast};

mod js_classes;
mod prefix;
mod sequence;

use js_classes::{unavailable, with_js_classes};
use prefix::required_prefixes;

/// What `build.rs` records of one regex of a ruleset, so that a fresh
/// isolate loads it without parsing the regex.
#[derive(Debug, Clone, Copy)]
pub struct RegexFacts<'a> {
    pub source: &'a str,
    /// Capture group names by index (0, the whole match, is `None`).
    pub names: &'a [Option<&'a str>],
    /// Every match starts with one of these (`prefix.rs`); `None`: no
    /// such list.
    pub prefixes: Option<&'a [&'a [u8]]>,
    /// The regex as a sequence (`sequence.rs`); `None`: not one.
    pub sequence: Option<&'a [u32]>,
}

/// [`RegexFacts`] of a compiled regex, borrowed from it: what
/// [`Ruleset::regex_facts`](super::Ruleset::regex_facts) gives `build.rs`
/// to write out.
#[derive(Debug, PartialEq, Eq)]
pub struct OwnedRegexFacts<'a> {
    pub source: &'a str,
    pub names: Vec<Option<&'a str>>,
    pub prefixes: Option<Vec<&'a [u8]>>,
    pub sequence: Option<&'a [u32]>,
}

impl OwnedRegexFacts<'_> {
    pub fn facts(&self) -> RegexFacts<'_> {
        RegexFacts {
            source: self.source,
            names: &self.names,
            prefixes: self.prefixes.as_deref(),
            sequence: self.sequence,
        }
    }
}

/// Every regex of a ruleset, sorted by source: what
/// [`Ruleset::regex_facts`](super::Ruleset::regex_facts) lists, as
/// `build.rs` embeds it.
pub type RegexTable<'a> = &'a [RegexFacts<'a>];

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
    /// A value that starts with none of these does not match (`None`:
    /// every value goes to the regex).
    prefixes: Prefixes,
    /// See [`RegexFacts::sequence`]: matched without compiling the regex.
    sequence: Option<Box<sequence::Code>>,
    compiled: OnceLock<regex::Regex>,
}

/// Required prefixes, as a [`Regex`] keeps them.
type Prefixes = Option<Box<[Box<[u8]>]>>;

/// What the table holds of a listed regex, found from its source.
struct Analysis {
    /// Its required prefixes (`prefix.rs`).
    prefixes: Prefixes,
    /// It as a sequence (`sequence.rs`).
    sequence: Option<Box<sequence::Code>>,
}

/// `source`'s prefixes (its sequence is for the caller to add).
fn analysed(source: &str) -> Analysis {
    Analysis {
        prefixes: required_prefixes(source)
            .map(|ps| ps.into_iter().map(Vec::into_boxed_slice).collect()),
        sequence: None,
    }
}

impl Regex {
    /// Compiled now: an invalid regex is an error.
    pub(crate) fn eager(source: &str) -> Result<Regex, String> {
        let source = &*with_js_classes(source);
        if let Some(missing) = unavailable(source) {
            return Err(missing.to_owned());
        }
        let re = build(source).map_err(|e| e.to_string())?;
        let names = re
            .capture_names()
            .map(|n| n.map(Box::from))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        let Analysis { prefixes, .. } = analysed(source);
        let sequence = sequence::compile(source).map(Vec::into_boxed_slice);
        Ok(Regex {
            source: source.into(),
            names,
            prefixes,
            sequence,
            compiled: OnceLock::from(re),
        })
    }

    /// Compiled on first use, its capture names and prefixes from `table`
    /// (or, for a source the table does not list, parsed now). Only for
    /// regexes known to compile (checked at build time): a syntax error is
    /// still an error when it is parsed here, but a regex that does not
    /// compile (over the size limit, an unknown unicode class) would panic
    /// on first use.
    pub(crate) fn lazy(source: &str, table: RegexTable) -> Result<Regex, String> {
        let source = &*with_js_classes(source);
        let (names, analysis) = match table.binary_search_by(|f| f.source.cmp(source)) {
            Ok(i) => {
                let facts = &table[i];
                let names = facts.names.iter().map(|n| n.map(Box::from)).collect();
                let analysis = Analysis {
                    prefixes: facts
                        .prefixes
                        .map(|ps| ps.iter().map(|p| Box::from(*p)).collect()),
                    sequence: facts.sequence.map(Box::from),
                };
                (names, analysis)
            }
            Err(_) => {
                let parsed = ast::parse::Parser::new()
                    .parse(source)
                    .map_err(|e| e.to_string())?;
                let mut names: Vec<Option<Box<str>>> = vec![None];
                collect_groups(&parsed, &mut names);
                // Not compiled to a sequence: the worker lists all its
                // regexes, and with `Regex::eager` not in its wasm either
                // (`Ruleset::compile` is handed the constructor) that
                // leaves `sequence::compile` out: ~2 KiB gzip.
                (names, analysed(source))
            }
        };
        Ok(Regex {
            source: source.into(),
            names: names.into_boxed_slice(),
            prefixes: analysis.prefixes,
            sequence: analysis.sequence,
            compiled: OnceLock::new(),
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

    /// What `build.rs` records of this regex.
    pub(crate) fn facts(&self) -> OwnedRegexFacts<'_> {
        OwnedRegexFacts {
            source: &self.source,
            names: self.capture_names().collect(),
            prefixes: self
                .prefixes
                .as_ref()
                .map(|ps| ps.iter().map(|p| &**p).collect()),
            sequence: self.sequence.as_deref(),
        }
    }

    /// Its required prefixes (`prefix.rs`), if it has any.
    pub(super) fn prefixes(&self) -> Option<&[Box<[u8]>]> {
        self.prefixes.as_deref()
    }

    /// Whether `haystack` starts with one of the required prefixes (or
    /// none are known): else it cannot match.
    fn admits(&self, haystack: &str) -> bool {
        self.prefixes
            .as_ref()
            .is_none_or(|ps| ps.iter().any(|p| haystack.as_bytes().starts_with(p)))
    }

    pub(crate) fn is_match(&self, haystack: &str) -> bool {
        self.admits(haystack)
            && match &self.sequence {
                Some(code) => sequence::find(code, haystack).is_some(),
                None => self.get().is_match(haystack),
            }
    }

    fn captures<'h>(&self, haystack: &'h str) -> Option<regex::Captures<'h>> {
        if !self.admits(haystack) {
            return None;
        }
        self.get().captures(haystack)
    }

    /// For a regex with one capture group that is a sequence
    /// (`sequence.rs`): `Some` of whether
    /// `haystack` matches and, if so, its group's span; `None` for other
    /// regexes (use [`Regex::captures`]).
    fn group_match(&self, haystack: &str) -> Option<Option<std::ops::Range<usize>>> {
        if self.names.len() != 2 {
            return None;
        }
        let code = self.sequence.as_ref()?;
        Some(
            self.admits(haystack)
                .then(|| sequence::find(code, haystack))
                .flatten(),
        )
    }

    /// Matches `haystack`, handing `group` each named group that took part
    /// (its name and span); returns whether it matched. A regex with one
    /// group that is a sequence is answered without the
    /// engine's captures.
    pub(crate) fn named_groups<'s>(
        &'s self,
        haystack: &str,
        mut group: impl FnMut(&'s str, std::ops::Range<usize>),
    ) -> bool {
        if let Some(found) = self.group_match(haystack) {
            let Some(span) = found else {
                return false;
            };
            if let Some(name) = self.names[1].as_deref() {
                group(name, span);
            }
            return true;
        }
        let Some(caps) = self.captures(haystack) else {
            return false;
        };
        for (i, name) in self.capture_names().enumerate() {
            if let (Some(name), Some(m)) = (name, caps.get(i)) {
                group(name, m.range());
            }
        }
        true
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
            r"((?<n>[Xx])|[()](y))",
            r"\((?<after>z)\)",
            r"[a-z(]+(?<q>.)",
        ] {
            let eager = Regex::eager(source).unwrap();
            let lazy = Regex::lazy(source, &[]).unwrap();
            assert!(!lazy.is_compiled());
            assert_eq!(
                lazy.capture_names().collect::<Vec<_>>(),
                eager.capture_names().collect::<Vec<_>>(),
                "{source}"
            );
            assert_eq!(lazy.captures_len(), eager.captures_len(), "{source}");
            assert_eq!(lazy.is_match("cell-1-x"), eager.is_match("cell-1-x"));
            // Compiled unless the value lacks the regex's required prefix.
            assert_eq!(lazy.is_compiled(), lazy.admits("cell-1-x"), "{source}");
        }
        assert!(Regex::lazy("(unclosed", &[]).is_err());
        assert!(Regex::eager("(unclosed").is_err());
    }

    #[test]
    fn listed_sources_take_their_names_from_the_table() {
        let table: RegexTable = &[
            RegexFacts {
                source: "(?<a>x)(y)",
                names: &[None, Some("a"), None],
                prefixes: None,
                sequence: None,
            },
            RegexFacts {
                source: "^z",
                names: &[None],
                prefixes: Some(&[b"z"]),
                sequence: None,
            },
        ];
        let listed = Regex::lazy("(?<a>x)(y)", table).unwrap();
        assert_eq!(
            listed.capture_names().collect::<Vec<_>>(),
            [None, Some("a"), None]
        );
        assert!(listed.captures("xy").is_some());
        // Not listed: parsed for its names.
        let unlisted = Regex::lazy("(?<b>q)", table).unwrap();
        assert_eq!(
            unlisted.capture_names().collect::<Vec<_>>(),
            [None, Some("b")]
        );
        assert!(Regex::lazy("(unlisted", table).is_err());
        // A value without a listed prefix is refused without compiling.
        let anchored = Regex::lazy("^z", table).unwrap();
        assert!(!anchored.is_match("az"));
        assert!(anchored.captures("yz").is_none());
        assert!(!anchored.is_compiled());
        assert!(anchored.is_match("zz"));
        assert!(anchored.is_compiled());
    }

    #[test]
    fn a_listed_sequence_is_matched_without_compiling() {
        let source = r"^(?<cell>cell-[0-9]+)-[0-9a-f]{4}$";
        let code = sequence::compile(source).unwrap();
        let table: RegexTable = &[RegexFacts {
            source,
            names: &[None, Some("cell")],
            prefixes: Some(&[b"cell-"]),
            sequence: Some(&code),
        }];
        let listed = Regex::lazy(source, table).unwrap();
        assert!(listed.is_match("cell-12-00ff"));
        assert!(!listed.is_match("cell-12-00fg"));
        assert_eq!(listed.group_match("cell-12-00ff"), Some(Some(0..7)));
        assert_eq!(listed.group_match("cell-x-00ff"), Some(None));
        assert!(!listed.is_compiled());
        // The same regex made from its source alone is compiled to match.
        let unlisted = Regex::lazy(source, &[]).unwrap();
        assert!(unlisted.is_match("cell-12-00ff"));
        assert!(unlisted.is_compiled());
    }
}
