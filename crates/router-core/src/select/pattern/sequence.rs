//! A rule regex that is a run of character classes, each repeated a
//! bounded number of times, anchored at both ends, that can match a value
//! in one way only (`^(?<cell_name>cell-[0-9]+)-[0-9a-f]{32}$`,
//! `^[Bb]asic (?<credentials>[A-Za-z0-9+/]+={0,2})$`): matched by one pass
//! over the value's characters, each step taking all it can, instead of by
//! the regex's program (`vm.rs`): natively a third of a `session_token`
//! request's instructions (docs/benchmark.md, the ledger); every session
//! cookie and routable token goes through such a regex. Which regexes
//! qualify is decided from the parsed regex (at build time for the
//! rulesets compiled in), and tests hold the pass to the `regex` crate's
//! answers.
//!
//! One way only: a step that may take a varying number of characters
//! takes none that the steps after it could start with (up to and with the
//! first step that must take one), so taking all it can is the only parse.

use std::ops::Range;

#[cfg(feature = "compile")]
use regex_syntax::hir::{Class, Hir, HirKind, Look};

/// A compiled sequence, as `u32`s (so `build.rs` writes it as one array):
/// its capture group's first step and end step (`NO_GROUP` twice when it
/// has none), then per step: the least and most it takes (`UNBOUNDED`: no
/// most), the ASCII characters it takes as four 32-bit masks, the number of
/// non-ASCII ranges and those ranges (first, last).
pub type Code = [u32];

/// A step's most when it has none (`+`, `*`, `{n,}`).
#[cfg(feature = "compile")]
const UNBOUNDED: u32 = u32::MAX;
/// The group fields of a sequence without a capture group.
#[cfg(feature = "compile")]
const NO_GROUP: u32 = u32::MAX;
/// Longer regexes are left to the program (the code stays small).
#[cfg(feature = "compile")]
const MAX_STEPS: usize = 64;

#[cfg(feature = "compile")]
/// One step while compiling: the characters it takes as sorted, disjoint
/// ranges, and how many times.
struct Step {
    ranges: Vec<(u32, u32)>,
    min: u32,
    max: u32,
}

/// The sequence `hir` compiles to, or `None` when it is not one.
#[cfg(feature = "compile")]
pub(crate) fn compile(hir: &Hir) -> Option<Vec<u32>> {
    if hir.properties().explicit_captures_len() > 1 {
        return None;
    }
    let HirKind::Concat(parts) = hir.kind() else {
        return None;
    };
    // `^` and `$` of the whole value (`(?m)` would make them line anchors).
    let [first, middle @ .., last] = parts.as_slice() else {
        return None;
    };
    if !matches!(first.kind(), HirKind::Look(Look::Start))
        || !matches!(last.kind(), HirKind::Look(Look::End))
    {
        return None;
    }
    let mut steps = Vec::new();
    let mut group = (NO_GROUP, NO_GROUP);
    for part in middle {
        if let HirKind::Capture(capture) = part.kind() {
            let start = steps.len() as u32;
            push_steps(&capture.sub, &mut steps)?;
            // An empty group is left to the program.
            (steps.len() as u32 > start).then_some(())?;
            group = (start, steps.len() as u32);
        } else {
            push_steps(part, &mut steps)?;
        }
    }
    if steps.len() > MAX_STEPS || !one_parse(&steps) {
        return None;
    }
    let mut code = vec![group.0, group.1];
    for step in &steps {
        code.extend([step.min, step.max]);
        let mut ascii = [0u32; 4];
        let mut wide = Vec::new();
        for &(lo, hi) in &step.ranges {
            for c in lo..=hi.min(0x7f) {
                if let Some(word) = ascii.get_mut(c as usize / 32) {
                    *word |= 1 << (c % 32);
                }
            }
            if hi > 0x7f {
                wide.push((lo.max(0x80), hi));
            }
        }
        code.extend(ascii);
        code.push(wide.len() as u32);
        code.extend(wide.into_iter().flat_map(|(lo, hi)| [lo, hi]));
    }
    Some(code)
}

#[cfg(feature = "compile")]
/// Appends the steps of `hir` (no capture groups inside), or `None` when
/// it is not made of steps.
fn push_steps(hir: &Hir, steps: &mut Vec<Step>) -> Option<()> {
    match hir.kind() {
        HirKind::Empty => {}
        HirKind::Literal(literal) => {
            for c in std::str::from_utf8(&literal.0).ok()?.chars() {
                steps.push(Step {
                    ranges: vec![(c as u32, c as u32)],
                    min: 1,
                    max: 1,
                });
            }
        }
        HirKind::Class(class) => steps.push(Step {
            ranges: class_ranges(class)?,
            min: 1,
            max: 1,
        }),
        HirKind::Repetition(rep) => {
            let ranges = match rep.sub.kind() {
                HirKind::Class(class) => class_ranges(class)?,
                HirKind::Literal(literal) => {
                    let mut chars = std::str::from_utf8(&literal.0).ok()?.chars();
                    let (Some(c), None) = (chars.next(), chars.next()) else {
                        return None;
                    };
                    vec![(c as u32, c as u32)]
                }
                _ => return None,
            };
            steps.push(Step {
                ranges,
                min: rep.min,
                max: rep.max.unwrap_or(UNBOUNDED),
            });
        }
        HirKind::Concat(parts) => {
            for part in parts {
                push_steps(part, steps)?;
            }
        }
        HirKind::Look(_) | HirKind::Capture(_) | HirKind::Alternation(_) => return None,
    }
    Some(())
}

#[cfg(feature = "compile")]
/// A Unicode class's ranges (a byte class, `(?-u)`, is left to the program).
fn class_ranges(class: &Class) -> Option<Vec<(u32, u32)>> {
    match class {
        Class::Unicode(class) => Some(
            class
                .ranges()
                .iter()
                .map(|r| (r.start() as u32, r.end() as u32))
                .collect(),
        ),
        Class::Bytes(_) => None,
    }
}

#[cfg(feature = "compile")]
/// Whether taking all it can at every step is the only way to match: a
/// step of varying length shares no character with the steps that could
/// follow it (up to and with the first that must take one).
fn one_parse(steps: &[Step]) -> bool {
    steps.iter().enumerate().all(|(i, step)| {
        step.min == step.max
            || steps
                .iter()
                .skip(i + 1)
                .scan(true, |open, next| {
                    let seen = *open;
                    *open = next.min == 0;
                    seen.then_some(next)
                })
                .all(|next| disjoint(&step.ranges, &next.ranges))
    })
}

#[cfg(feature = "compile")]
fn disjoint(a: &[(u32, u32)], b: &[(u32, u32)]) -> bool {
    a.iter()
        .all(|&(lo, hi)| b.iter().all(|&(l, h)| hi < l || h < lo))
}

/// Matches `haystack` against `code` ([`compile`]'s): `None` when it does
/// not match, else the span of the capture group (`0..0` when there is
/// none).
pub(crate) fn find(code: &Code, haystack: &str) -> Option<Range<usize>> {
    let bytes = haystack.as_bytes();
    let (group_first, group_end) = (code.first()?, code.get(1)?);
    let mut span = 0..0;
    let mut at = 0;
    let mut i = 2;
    let mut step = 0;
    while i < code.len() {
        let [min, max, a0, a1, a2, a3, wide] = *code.get(i..i + 7)? else {
            return None;
        };
        let ranges = code.get(i + 7..i + 7 + 2 * wide as usize)?;
        i += 7 + 2 * wide as usize;
        if step == *group_first {
            span.start = at;
        }
        // The ASCII set as one 128-bit map: bit `b` for byte `b`.
        let ascii =
            u128::from(a0) | u128::from(a1) << 32 | u128::from(a2) << 64 | u128::from(a3) << 96;
        let mut count = 0;
        while count < max {
            let Some(&b) = bytes.get(at) else {
                break;
            };
            let len = if b < 0x80 {
                if (ascii >> b) & 1 == 0 {
                    break;
                }
                1
            } else {
                let c = haystack.get(at..)?.chars().next()?;
                if !in_ranges(ranges, c as u32) {
                    break;
                }
                c.len_utf8()
            };
            at += len;
            count += 1;
        }
        if count < min {
            return None;
        }
        step += 1;
        if step == *group_end {
            span.end = at;
        }
    }
    (at == bytes.len()).then_some(span)
}

fn in_ranges(ranges: &[u32], c: u32) -> bool {
    ranges
        .chunks_exact(2)
        .any(|range| matches!(*range, [lo, hi] if lo <= c && c <= hi))
}

#[cfg(all(test, feature = "compile"))]
mod tests {
    use super::*;

    /// The regexes the rulesets' hot rules use, and shapes at the edges of
    /// what qualifies.
    const SEQUENCES: &[&str] = &[
        r"^(?<cell_name>cell-[0-9]+)-[0-9a-f]{32}$",
        r"^(?<token>[^\s.]+\.01\.[0-9a-z]{9})$",
        r"^[Bb]earer (?<token>[^\s.]+\.01\.[0-9a-z]{9})$",
        r"^[Bb]asic (?<credentials>[A-Za-z0-9+/]+={0,2})$",
        r"^[^:]*:(?<password>[^\s.]+\.01\.[0-9a-z]{9})$",
        r"^/jwt/auth$",
        r"^a*b?c{2,3}é+$",
        r"^(?:ab)c$",
        r"^$",
        r"^(x*)$",
        r"^a{0}b$",
    ];

    fn compile(source: &str) -> Option<Vec<u32>> {
        super::compile(&regex_syntax::Parser::new().parse(source).ok()?)
    }

    #[test]
    fn sequences_compile_and_others_do_not() {
        for source in SEQUENCES {
            assert!(compile(source).is_some(), "{source}");
        }
        for source in [
            r"^_gitlab_session(_[0-9a-f]+)?$", // a repeated group
            r"^a*a$",                          // a step could give way to the next
            r"^a*b?a$",                        // ... past an optional step
            r"^[a-z]+[0-9a-f]$",               // ... sharing part of a class
            r"^(?<a>x)(?<b>y)$",               // two groups
            r"^(?<a>(?<b>x))$",                // nested groups
            r"^x|^y$",                         // an alternation
            r"^x(?:yy|z)$",                    // ... inside
            r"^x",                             // not anchored at the end
            r"x$",                             // nor at the start
            r"(?m)^x$",                        // line anchors
            r"^\bx$",                          // a word boundary
            r"(?-u)^\xff$",                    // a byte class
            r"^(?:ab)+$",                      // a repeated literal of two
            r"^a()$",                          // an empty group
            r"^(unclosed",                     // invalid
        ] {
            assert!(compile(source).is_none(), "{source}");
        }
    }

    #[test]
    fn groups_and_matches_are_found() {
        let code = compile(r"^(?<cell_name>cell-[0-9]+)-[0-9a-f]{32}$").unwrap();
        let value = format!("cell-12-{}", "a".repeat(32));
        assert_eq!(find(&code, &value), Some(0..7));
        assert_eq!(find(&code, &format!("{value}0")), None);
        assert_eq!(find(&code, &format!("cell--{}", "a".repeat(32))), None);
        let code = compile(r"^[Bb]asic (?<credentials>[A-Za-z0-9+/]+={0,2})$").unwrap();
        assert_eq!(find(&code, "Basic dXNlcjpwdw=="), Some(6..18));
        assert_eq!(find(&code, "basic x==="), None);
        let code = compile(r"^/jwt/auth$").unwrap();
        assert_eq!(find(&code, "/jwt/auth"), Some(0..0));
        assert_eq!(find(&code, "/jwt/aut"), None);
        // Non-ASCII characters: in a negated class, and as a literal.
        let code = compile(r"^(?<token>[^\s.]+\.01\.[0-9a-z]{9})$").unwrap();
        assert_eq!(find(&code, "glpat-ü€𝄞.01.abcdefghi"), Some(0..28));
        assert_eq!(find(&code, "glpat\u{a0}x.01.abcdefghi"), None);
        assert_eq!(find(&compile("^é+$").unwrap(), "ééé"), Some(0..0));
    }

    /// Values the regex itself generates, then perhaps one character
    /// deleted, inserted or replaced (matches and near misses), judged as
    /// the regex engine's `captures` judges them.
    fn judged_as_the_engine_does(source: &str, code: &Code) {
        use proptest::prelude::*;
        let chars = prop::sample::select(vec![
            'a', 'Z', '0', 'f', '-', '.', ':', '=', '/', ' ', 'é', '\u{a0}',
        ]);
        let re = regex::Regex::new(source).unwrap();
        let inner = &source[1..source.len() - 1];
        let values = (
            proptest::string::string_regex(inner).unwrap(),
            any::<prop::sample::Index>(),
            0..4u8,
            chars,
        );
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(&values, |(value, at, edit, c)| {
                let mut value: Vec<char> = value.chars().collect();
                let at = at.index(value.len() + 1);
                match edit {
                    1 if at < value.len() => drop(value.remove(at)),
                    2 => value.insert(at, c),
                    3 if at < value.len() => value[at] = c,
                    _ => {}
                }
                let value: String = value.into_iter().collect();
                let expected = re
                    .captures(&value)
                    .map(|c| c.get(1).map_or(0..0, |m| m.range()));
                prop_assert_eq!(find(code, &value), expected, "{} {:?}", source, value);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn near_matches_are_judged_as_the_engine_does() {
        for source in SEQUENCES {
            judged_as_the_engine_does(source, &compile(source).unwrap());
        }
    }

    /// Every regex of the shipped rulesets that is matched as a sequence.
    #[test]
    fn shipped_sequences_are_judged_as_the_engine_does() {
        let mut sequences = 0;
        for (_, rules) in crate::select::tests::shipped_rulesets() {
            for facts in rules.regex_facts() {
                if let Some(code) = facts.sequence {
                    judged_as_the_engine_does(facts.source, code);
                    sequences += 1;
                }
            }
        }
        // The session cookie's and the routable tokens' regexes at least.
        assert!(sequences >= 5, "{sequences} sequences in rules/");
    }

    proptest::proptest! {
        /// Whether it matches, and the group, are as the regex engine's
        /// `captures` finds them, for values made of pieces the regexes
        /// look for.
        #[test]
        fn sequences_match_as_the_engine_does(
            value in "(cell-|[0-9a-f]{1,3}|-|\\.|01|[a-z0-9]{1,9}|[Bb]asic |[Bb]earer |=|:|/|é|ü|\u{a0}|\u{2028}| |\t|x|c|/jwt/auth|[A-Z+]){0,10}"
        ) {
            for source in SEQUENCES {
                let code = compile(source).unwrap();
                let re = regex::Regex::new(source).unwrap();
                let expected = re.captures(&value).map(|c| c.get(1).map_or(0..0, |m| m.range()));
                proptest::prop_assert_eq!(find(&code, &value), expected, "{} {:?}", source, value);
            }
        }
    }
}
