//! A rule regex held to the `regex` crate on one value: the program the
//! build compiles (run as the worker runs it: required prefixes, the
//! backtracking VM and the Pike VM) finds what the
//! crate's `captures` finds on the same source after the JavaScript-class
//! rewrite: whether it matches, every group's span and every named group.
//! The tests' oracle (`oracle.rs`) and the `regex_differential` fuzz
//! target (feature `oracle`) both ask it.

use std::ops::Range;

use super::vm::Program;
use super::Regex;

/// Every group's span (`None`: took no part), or `None` when no match.
pub(super) type Groups = Option<Vec<Option<Range<usize>>>>;

/// A program's slots (start, end pairs; `u32::MAX`: unset) as spans.
fn spans(slots: &[u32]) -> Vec<Option<Range<usize>>> {
    slots
        .chunks_exact(2)
        .map(|s| match s {
            &[start, end] if start != u32::MAX => Some(start as usize..end as usize),
            _ => None,
        })
        .collect()
}

pub(super) fn theirs(re: &regex::Regex, value: &str) -> Groups {
    re.captures(value)
        .map(|c| (0..c.len()).map(|i| c.get(i).map(|m| m.range())).collect())
}

/// The program's groups on `value`, after checking that its entry points
/// (`is_match`, the backtracker's `captures`, the Pike VM) agree.
pub(super) fn ours(program: &[u32], value: &str) -> Result<Groups, String> {
    let program = Program::new(program).ok_or("a malformed program")?;
    let mut groups = None;
    let matched = program.captures(value, |slots| groups = Some(spans(slots)));
    if matched != groups.is_some() {
        return Err(format!(
            "captures said {matched} without groups on {value:?}"
        ));
    }
    if program.is_match(value) != matched {
        return Err(format!("is_match disagrees with captures on {value:?}"));
    }
    // The Pike VM, which longer values go to, finds the same.
    let mut pike = None;
    let (pike_matched, pike_any) = program.pike_captures(value, |slots| pike = Some(spans(slots)));
    if (pike_matched, pike_any) != (matched, matched) || pike != groups {
        return Err(format!(
            "the Pike VM found {pike:?} ({pike_matched}, {pike_any}), the backtracker {groups:?} on {value:?}"
        ));
    }
    Ok(groups)
}

/// One regex: its source as the rules give it, compiled both ways.
pub struct RegexOracle {
    source: String,
    re: regex::Regex,
    pub(super) ours: Regex,
}

impl RegexOracle {
    /// `source` as a rule's regex (an error when the rules refuse it), and
    /// the `regex` crate on the rewritten source (an error, prefixed
    /// `regex crate:`, when the crate refuses it, e.g. past its size limit).
    pub fn new(source: &str) -> Result<RegexOracle, String> {
        let ours = Regex::eager(source)?;
        let re = regex::Regex::new(&ours.source).map_err(|e| format!("regex crate: {e}"))?;
        Ok(RegexOracle {
            source: source.to_string(),
            re,
            ours,
        })
    }

    /// The program's groups, and the whole `Regex` (prefixes and
    /// program) on its named groups, against the crate.
    pub fn check(&self, value: &str) -> Result<(), String> {
        let expected = theirs(&self.re, value);
        let got = ours(&self.ours.program, value).map_err(|e| format!("{:?}: {e}", self.source))?;
        if got != expected {
            return Err(format!(
                "{:?} on {value:?}: program {got:?}, regex {expected:?}",
                self.source
            ));
        }
        let mut named = Vec::new();
        let matched = self
            .ours
            .named_groups(value, |name, span| named.push((name.to_string(), span)));
        let expected_named: Option<Vec<(String, Range<usize>)>> = expected.map(|groups| {
            self.re
                .capture_names()
                .zip(groups)
                .filter_map(|(n, g)| Some((n?.to_string(), g?)))
                .collect()
        });
        if (matched, matched.then_some(named.clone()))
            != (expected_named.is_some(), expected_named.clone())
            || self.ours.is_match(value) != matched
        {
            return Err(format!(
                "{:?} on {value:?}: named groups {named:?} ({matched}), regex {expected_named:?}",
                self.source
            ));
        }
        Ok(())
    }
}
