//! A rule's regex: its program (`vm.rs`), its capture names and the fast
//! path in front of the program (required prefixes, `prefix.rs`).
//!
//! Rule regexes keep GitLab's JavaScript semantics: a search, anchored
//! only by `^` and `$`, leftmost-first, `\d \w \s \b` as JavaScript reads
//! them (`js_classes.rs`). Each is parsed by `regex-syntax` and compiled to
//! a program (`thompson.rs`, feature `compile`) that a Pike VM runs. The
//! rulesets compiled into the worker were compiled by `build.rs`, which
//! writes every regex's program, names and prefixes into a
//! [`RegexTable`] beside the ruleset; the worker loads them with
//! [`Ruleset::from_prechecked_json`](super::Ruleset::from_prechecked_json)
//! and holds no regex parser or compiler (built without `compile`), so a
//! fresh isolate compiles nothing. Everything else
//! ([`Ruleset::from_json`](super::Ruleset::from_json): rulesctl, build.rs,
//! the tests) compiles each regex when the ruleset loads, so an invalid or
//! too large one is an error there and then. The `regex` crate is the
//! tests' oracle: the programs find what its `captures` finds.

#[cfg(all(any(test, feature = "oracle"), feature = "compile"))]
mod differential;
mod js_classes;
#[cfg(all(test, feature = "compile"))]
mod oracle;
#[cfg(feature = "compile")]
mod prefix;
#[cfg(feature = "compile")]
mod thompson;
mod vm;

#[cfg(all(feature = "oracle", feature = "compile"))]
pub use differential::RegexOracle;
use js_classes::with_js_classes;
#[cfg(all(test, feature = "compile"))]
use thompson::MAX_STATES;
use vm::Program;

/// What `build.rs` records of one regex of a ruleset, so that the worker
/// runs it without parsing or compiling it.
#[derive(Debug, Clone, Copy)]
pub struct RegexFacts<'a> {
    pub source: &'a str,
    /// Capture group names by index (0, the whole match, is `None`).
    pub names: &'a [Option<&'a str>],
    /// Every match starts with one of these (`prefix.rs`); `None`: no
    /// such list.
    pub prefixes: Option<&'a [&'a [u8]]>,
    /// The regex's program (`vm.rs`).
    pub program: &'a [u32],
}

/// [`RegexFacts`] of a compiled regex, borrowed from it: what
/// [`Ruleset::regex_facts`](super::Ruleset::regex_facts) gives `build.rs`
/// to write out.
#[derive(Debug, PartialEq, Eq)]
pub struct OwnedRegexFacts<'a> {
    pub source: &'a str,
    pub names: Vec<Option<&'a str>>,
    pub prefixes: Option<Vec<&'a [u8]>>,
    pub program: &'a [u32],
}

impl OwnedRegexFacts<'_> {
    pub fn facts(&self) -> RegexFacts<'_> {
        RegexFacts {
            source: self.source,
            names: &self.names,
            prefixes: self.prefixes.as_deref(),
            program: self.program,
        }
    }
}

/// Every regex of a ruleset, sorted by source: what
/// [`Ruleset::regex_facts`](super::Ruleset::regex_facts) lists, as
/// `build.rs` embeds it.
pub type RegexTable<'a> = &'a [RegexFacts<'a>];

#[derive(Debug)]
pub(crate) struct Regex {
    source: Box<str>,
    /// Capture group names by index (0 is the whole match: `None`).
    names: Box<[Option<Box<str>>]>,
    /// A value that starts with none of these does not match (`None`:
    /// every value goes to the program).
    prefixes: Prefixes,
    /// Checked by [`Program::new`] when the regex was made.
    program: Box<[u32]>,
}

/// Required prefixes, as a [`Regex`] keeps them.
type Prefixes = Option<Box<[Box<[u8]>]>>;

impl Regex {
    /// Parsed and compiled now: an invalid regex, or one too large, is an
    /// error.
    #[cfg(feature = "compile")]
    pub(crate) fn eager(source: &str) -> Result<Regex, String> {
        let source = &*with_js_classes(source);
        if let Some(missing) = js_classes::unavailable(source) {
            return Err(missing.to_owned());
        }
        let hir = regex_syntax::Parser::new()
            .parse(source)
            .map_err(|e| e.to_string())?;
        let program = thompson::compile(&hir)?;
        Ok(Regex {
            source: source.into(),
            names: thompson::capture_names(&hir).into_boxed_slice(),
            prefixes: prefix::required_prefixes(&hir)
                .map(|ps| ps.into_iter().map(Vec::into_boxed_slice).collect()),
            program: program.into_boxed_slice(),
        })
    }

    /// Taken from `table`, where `build.rs` recorded it. A source the
    /// table does not list is compiled now (feature `compile`) or an
    /// error (the worker: its rulesets are all listed).
    pub(crate) fn prebuilt(source: &str, table: RegexTable) -> Result<Regex, String> {
        let source = &*with_js_classes(source);
        let found = table.binary_search_by(|f| f.source.cmp(source));
        let Some(facts) = found.ok().and_then(|i| table.get(i)) else {
            #[cfg(feature = "compile")]
            return Regex::eager(source);
            #[cfg(not(feature = "compile"))]
            return Err("not compiled at build time".into());
        };
        if Program::new(facts.program).is_none_or(|p| p.slots() != 2 * facts.names.len()) {
            return Err("its build-time program is malformed".into());
        }
        Ok(Regex {
            source: source.into(),
            names: facts.names.iter().map(|n| n.map(Box::from)).collect(),
            prefixes: facts
                .prefixes
                .map(|ps| ps.iter().map(|p| Box::from(*p)).collect()),
            program: facts.program.into(),
        })
    }

    fn program(&self) -> Program<'_> {
        // Checked when the regex was made (compiled, or by `prebuilt`).
        Program::of(&self.program)
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
            program: &self.program,
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
        self.admits(haystack) && self.program().is_match(haystack)
    }

    /// Matches `haystack`, handing `group` each named group that took part
    /// (its name and span); returns whether it matched.
    pub(crate) fn named_groups<'s>(
        &'s self,
        haystack: &str,
        mut group: impl FnMut(&'s str, std::ops::Range<usize>),
    ) -> bool {
        if !self.admits(haystack) {
            return false;
        }
        self.program().captures(haystack, |slots| {
            for (name, span) in self.names.iter().zip(slots.chunks_exact(2)) {
                if let (Some(name), &[start, end]) = (name.as_deref(), span) {
                    if start != u32::MAX && end != u32::MAX {
                        group(name, start as usize..end as usize);
                    }
                }
            }
        })
    }

    /// The number of groups, the whole match included (as
    /// `regex::Regex::captures_len`).
    pub(crate) fn captures_len(&self) -> usize {
        self.names.len()
    }

    /// The groups' names by index (as `regex::Regex::capture_names`).
    pub(crate) fn capture_names(&self) -> impl Iterator<Item = Option<&str>> {
        self.names.iter().map(|n| n.as_deref())
    }
}

#[cfg(all(test, feature = "compile"))]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_regex_crates() {
        for source in [
            "^/jwt/auth$",
            r"^(?<cell_name>cell-[0-9]+)-[0-9a-f]{32}$",
            r"^(a)(?:b)(?P<x>c(d)|(?<y>e))*(f)?$",
            r"((?<n>[Xx])|[()](y))",
            r"\((?<after>z)\)",
            r"[a-z(]+(?<q>.)",
        ] {
            let ours = Regex::eager(source).unwrap();
            let theirs = regex::Regex::new(source).unwrap();
            assert_eq!(
                ours.capture_names().collect::<Vec<_>>(),
                theirs.capture_names().collect::<Vec<_>>(),
                "{source}"
            );
            assert_eq!(ours.captures_len(), theirs.captures_len(), "{source}");
        }
        assert!(Regex::eager("(unclosed").is_err());
        assert!(Regex::prebuilt("(unclosed", &[]).is_err());
    }

    #[test]
    fn too_large_regexes_are_refused_with_the_bound() {
        let err = Regex::eager("^[a-z]{1,3000}$").unwrap_err();
        assert!(err.contains(&MAX_STATES.to_string()), "{err}");
        assert!(Regex::eager("^(?:[a-z]{1,40}){1,40}$").is_err());
        assert!(Regex::eager("^[a-z]{1,255}$").is_ok());
    }

    /// The table's entry is what runs: its program, names and prefixes.
    #[test]
    fn listed_sources_are_taken_from_the_table() {
        let compiled = Regex::eager("(?<a>x)(y)").unwrap();
        let anchored = Regex::eager("^z").unwrap();
        let table: RegexTable = &[
            RegexFacts {
                source: "(?<a>x)(y)",
                names: &[None, Some("a"), None],
                prefixes: None,
                program: &compiled.program,
            },
            RegexFacts {
                source: "^z",
                names: &[None],
                // Not its real prefix: shows the table's is used.
                prefixes: Some(&[b"zz"]),
                program: &anchored.program,
            },
        ];
        let listed = Regex::prebuilt("(?<a>x)(y)", table).unwrap();
        let mut groups = Vec::new();
        assert!(listed.named_groups("_xy", |n, span| groups.push((n, span))));
        assert_eq!(groups, [("a", 1..2)]);
        let anchored = Regex::prebuilt("^z", table).unwrap();
        assert!(!anchored.is_match("z"));
        assert!(anchored.is_match("zz"));
        // Not listed: compiled now.
        let unlisted = Regex::prebuilt("(?<b>q)", table).unwrap();
        assert_eq!(
            unlisted.capture_names().collect::<Vec<_>>(),
            [None, Some("b")]
        );
        // A program that does not fit its names is refused.
        let bad: RegexTable = &[RegexFacts {
            source: "x",
            names: &[None, Some("a")],
            prefixes: None,
            program: &anchored.program,
        }];
        assert!(Regex::prebuilt("x", bad).is_err());
    }
}
