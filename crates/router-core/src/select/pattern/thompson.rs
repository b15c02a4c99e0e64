//! Compiles a parsed rule regex into its program (`vm.rs`): at build time
//! for the rulesets compiled into the worker, and whenever a ruleset is
//! loaded from its JSON (rulesctl, the tests).
//!
//! The construction is the `regex` crate's own Thompson compiler's
//! (regex-automata's `nfa::thompson`), over characters instead of UTF-8
//! bytes: the same states in the same order of preference, so the VM
//! resolves a match and its groups as the crate's engines do (the property
//! tests hold it to that). Bounded repetitions are written out, one copy
//! per repetition; a regex whose program would exceed [`MAX_STATES`] is
//! refused.

use regex_syntax::hir::{Capture, Class, Hir, HirKind, Look, Repetition};

use super::vm::*;

/// The most states a rule regex's program may have. A bounded repetition
/// counts once per copy (`[0-9]{1,19}`: 19 classes, 18 splits), so this
/// allows, e.g., `[a-z0-9]{1,255}` several times over; it bounds the VM's
/// memory (a few words per state and slot).
pub const MAX_STATES: usize = 2_000;

/// A state being built: what it does and the state after it (for those
/// with one next state).
enum Kind {
    Char(u32),
    Class(Vec<u32>),
    /// Alternatives by preference; `reverse`: they were added lowest first
    /// (a lazy repetition).
    Union {
        alts: Vec<u32>,
        reverse: bool,
    },
    Save(u32),
    Look(u32),
    Match,
    Fail,
    Empty,
}

struct Builder {
    kinds: Vec<Kind>,
    nexts: Vec<u32>,
}

/// A compiled part: its first state and the state whose next is the part
/// after it.
#[derive(Clone, Copy)]
struct Part {
    start: u32,
    end: u32,
}

fn too_big() -> String {
    format!(
        "the regex is too large: it compiles to more than {MAX_STATES} states \
         (each copy of a bounded repetition counts; shorten {{n,m}})"
    )
}

impl Builder {
    fn add(&mut self, kind: Kind) -> Result<u32, String> {
        // Empty states go when the program is written: allow for them.
        if self.kinds.len() >= 4 * MAX_STATES {
            return Err(too_big());
        }
        self.kinds.push(kind);
        self.nexts.push(u32::MAX);
        Ok(self.kinds.len() as u32 - 1)
    }

    fn one(&mut self, kind: Kind) -> Result<Part, String> {
        let id = self.add(kind)?;
        Ok(Part { start: id, end: id })
    }

    fn union(&mut self, greedy: bool) -> Result<u32, String> {
        self.add(Kind::Union {
            alts: Vec::new(),
            reverse: !greedy,
        })
    }

    fn patch(&mut self, from: u32, to: u32) {
        match self.kinds.get_mut(from as usize) {
            Some(Kind::Union { alts, .. }) => alts.push(to),
            _ => {
                if let Some(next) = self.nexts.get_mut(from as usize) {
                    *next = to;
                }
            }
        }
    }

    fn c(&mut self, hir: &Hir) -> Result<Part, String> {
        match hir.kind() {
            HirKind::Empty => self.one(Kind::Empty),
            HirKind::Literal(literal) => {
                let text = std::str::from_utf8(&literal.0)
                    .map_err(|_| "the regex matches bytes that are not UTF-8".to_string())?;
                let mut parts = Vec::new();
                for c in text.chars() {
                    parts.push(self.one(Kind::Char(c as u32))?);
                }
                self.concat(parts)
            }
            HirKind::Class(class) => {
                let ranges: Vec<(u32, u32)> = match class {
                    Class::Unicode(class) => class
                        .ranges()
                        .iter()
                        .map(|r| (r.start() as u32, r.end() as u32))
                        .collect(),
                    Class::Bytes(class) => {
                        if class.ranges().iter().any(|r| r.end() > 0x7f) {
                            return Err("a byte class ((?-u)) beyond ASCII is not supported".into());
                        }
                        class
                            .ranges()
                            .iter()
                            .map(|r| (u32::from(r.start()), u32::from(r.end())))
                            .collect()
                    }
                };
                match ranges.as_slice() {
                    [] => self.one(Kind::Fail),
                    [(lo, hi)] if lo == hi => self.one(Kind::Char(*lo)),
                    _ => self.one(Kind::Class(
                        ranges.iter().flat_map(|&(lo, hi)| [lo, hi]).collect(),
                    )),
                }
            }
            HirKind::Look(look) => self.one(Kind::Look(look_kind(*look)?)),
            HirKind::Repetition(rep) => self.repetition(rep),
            HirKind::Capture(Capture { index, sub, .. }) => self.capture(*index, sub),
            HirKind::Concat(subs) => {
                let mut parts = Vec::with_capacity(subs.len());
                for sub in subs {
                    parts.push(self.c(sub)?);
                }
                self.concat(parts)
            }
            HirKind::Alternation(subs) => {
                let mut parts = Vec::with_capacity(subs.len());
                for sub in subs {
                    parts.push(self.c(sub)?);
                }
                match parts.as_slice() {
                    [] => self.one(Kind::Fail),
                    [only] => Ok(*only),
                    _ => {
                        let union = self.union(true)?;
                        let end = self.add(Kind::Empty)?;
                        for part in parts {
                            self.patch(union, part.start);
                            self.patch(part.end, end);
                        }
                        Ok(Part { start: union, end })
                    }
                }
            }
        }
    }

    fn concat(&mut self, parts: Vec<Part>) -> Result<Part, String> {
        let mut parts = parts.into_iter();
        let Some(first) = parts.next() else {
            return self.one(Kind::Empty);
        };
        let mut end = first.end;
        for part in parts {
            self.patch(end, part.start);
            end = part.end;
        }
        Ok(Part {
            start: first.start,
            end,
        })
    }

    fn capture(&mut self, index: u32, sub: &Hir) -> Result<Part, String> {
        let start = self.add(Kind::Save(2 * index))?;
        let inner = self.c(sub)?;
        let end = self.add(Kind::Save(2 * index + 1))?;
        self.patch(start, inner.start);
        self.patch(inner.end, end);
        Ok(Part { start, end })
    }

    fn exactly(&mut self, sub: &Hir, n: u32) -> Result<Part, String> {
        let mut parts = Vec::new();
        for _ in 0..n {
            parts.push(self.c(sub)?);
        }
        self.concat(parts)
    }

    /// As regex-automata's `c_repetition` (and the functions it calls).
    fn repetition(&mut self, rep: &Repetition) -> Result<Part, String> {
        let (sub, greedy) = (&*rep.sub, rep.greedy);
        match (rep.min, rep.max) {
            (0, Some(1)) => {
                let union = self.union(greedy)?;
                let part = self.c(sub)?;
                let empty = self.add(Kind::Empty)?;
                self.patch(union, part.start);
                self.patch(union, empty);
                self.patch(part.end, empty);
                Ok(Part {
                    start: union,
                    end: empty,
                })
            }
            (0, None) if sub.properties().minimum_len().is_some_and(|n| n > 0) => {
                let union = self.union(greedy)?;
                let part = self.c(sub)?;
                self.patch(union, part.start);
                self.patch(part.end, union);
                Ok(Part {
                    start: union,
                    end: union,
                })
            }
            (0, None) => {
                // `x*` where x may match the empty string is `(x+)?`, for
                // the preference order leftmost-first needs (regex#779).
                let part = self.c(sub)?;
                let plus = self.union(greedy)?;
                self.patch(part.end, plus);
                self.patch(plus, part.start);
                let question = self.union(greedy)?;
                let empty = self.add(Kind::Empty)?;
                self.patch(question, part.start);
                self.patch(question, empty);
                self.patch(plus, empty);
                Ok(Part {
                    start: question,
                    end: empty,
                })
            }
            (min, None) => {
                let prefix = self.exactly(sub, min - 1)?;
                let last = self.c(sub)?;
                let union = self.union(greedy)?;
                self.patch(prefix.end, last.start);
                self.patch(last.end, union);
                self.patch(union, last.start);
                Ok(Part {
                    start: prefix.start,
                    end: union,
                })
            }
            (min, Some(max)) if min == max => self.exactly(sub, min),
            (min, Some(max)) => {
                let prefix = self.exactly(sub, min)?;
                let empty = self.add(Kind::Empty)?;
                let mut prev_end = prefix.end;
                for _ in min..max {
                    let union = self.union(greedy)?;
                    let part = self.c(sub)?;
                    self.patch(prev_end, union);
                    self.patch(union, part.start);
                    self.patch(union, empty);
                    prev_end = part.end;
                }
                self.patch(prev_end, empty);
                Ok(Part {
                    start: prefix.start,
                    end: empty,
                })
            }
        }
    }

    /// The state `id` leads to once empty states are skipped.
    fn resolve(&self, mut id: u32) -> u32 {
        // Empty states form no cycle: each leads to a state added for the
        // part after it, and the last to the match.
        while let (Some(Kind::Empty), Some(&next)) =
            (self.kinds.get(id as usize), self.nexts.get(id as usize))
        {
            id = next;
        }
        id
    }
}

fn look_kind(look: Look) -> Result<u32, String> {
    Ok(match look {
        Look::Start => LOOK_START,
        Look::End => LOOK_END,
        Look::StartLF => LOOK_START_LF,
        Look::EndLF => LOOK_END_LF,
        Look::WordAscii => LOOK_WORD,
        Look::WordAsciiNegate => LOOK_NOT_WORD,
        Look::WordStartAscii => LOOK_WORD_START,
        Look::WordEndAscii => LOOK_WORD_END,
        Look::WordStartHalfAscii => LOOK_WORD_START_HALF,
        Look::WordEndHalfAscii => LOOK_WORD_END_HALF,
        other => return Err(format!("the assertion {other:?} is not supported in rules")),
    })
}

/// The program of `hir` (a rule regex parsed as the `regex` crate parses
/// it), or why it has none.
pub(crate) fn compile(hir: &Hir) -> Result<Vec<u32>, String> {
    let mut b = Builder {
        kinds: Vec::new(),
        nexts: Vec::new(),
    };
    // The whole match is group 0, as in the crate's NFA.
    let body = b.capture(0, hir)?;
    let matched = b.add(Kind::Match)?;
    b.patch(body.end, matched);
    // Number the states that are not empty, in order.
    let mut count = 0u32;
    let ids: Vec<u32> = b
        .kinds
        .iter()
        .map(|kind| match kind {
            Kind::Empty => u32::MAX,
            _ => {
                count += 1;
                count - 1
            }
        })
        .collect();
    if count as usize > MAX_STATES {
        return Err(too_big());
    }
    // An id off the list becomes u32::MAX, which `Program::new` refuses.
    let to = |id: u32| ids.get(b.resolve(id) as usize).copied().unwrap_or(u32::MAX);
    let slots = 2 * (hir.properties().explicit_captures_len() as u32 + 1);
    let anchored = hir.properties().look_set_prefix().contains(Look::Start);
    let mut states = vec![count, slots, if anchored { FLAG_ANCHORED } else { 0 }];
    states.push(to(body.start));
    let mut tail: Vec<u32> = Vec::new();
    let mut classes: std::collections::HashMap<&Vec<u32>, u32> = Default::default();
    let tail_at = HEADER as u32 + 3 * count;
    for (kind, &next) in b.kinds.iter().zip(&b.nexts) {
        let state = match kind {
            Kind::Empty => continue,
            Kind::Char(c) => [OP_CHAR, to(next), *c],
            Kind::Class(ranges) => {
                // Copies of a repeated class share one entry.
                let at = *classes.entry(ranges).or_insert_with(|| {
                    let at = tail_at + tail.len() as u32;
                    let mut ascii = [0u32; 4];
                    for pair in ranges.chunks_exact(2) {
                        let &[first, last] = pair else {
                            continue;
                        };
                        for c in first..=last.min(0x7f) {
                            if let Some(word) = ascii.get_mut(c as usize / 32) {
                                *word |= 1 << (c % 32);
                            }
                        }
                    }
                    tail.extend(ascii);
                    tail.extend(ranges);
                    at
                });
                [OP_CLASS | ((ranges.len() as u32 / 2) << 8), to(next), at]
            }
            Kind::Union { alts, reverse } => {
                let mut alts: Vec<u32> = alts.iter().map(|&a| to(a)).collect();
                if *reverse {
                    alts.reverse();
                }
                match alts.as_slice() {
                    [] => [OP_FAIL, 0, 0],
                    [only] => [OP_SPLIT2, *only, *only],
                    [a, b] => [OP_SPLIT2, *a, *b],
                    _ => {
                        let at = tail_at + tail.len() as u32;
                        tail.extend(&alts);
                        [OP_SPLITN | ((alts.len() as u32) << 8), at, 0]
                    }
                }
            }
            Kind::Save(slot) => [OP_SAVE, to(next), *slot],
            Kind::Look(kind) => [OP_LOOK, to(next), *kind],
            Kind::Match => [OP_MATCH, 0, 0],
            Kind::Fail => [OP_FAIL, 0, 0],
        };
        states.extend(state);
    }
    states.extend(tail);
    mark_joins(&mut states);
    if Program::new(&states).is_none() {
        return Err("the compiled program is malformed (a bug in the compiler)".into());
    }
    Ok(states)
}

/// Sets `OP_MARKED` on every state of `program` with more than one edge
/// into it (the start counts as one).
fn mark_joins(program: &mut [u32]) {
    fn bump(into: &mut [u32], sid: u32) {
        if let Some(n) = into.get_mut(sid as usize) {
            *n += 1;
        }
    }
    let states = program.first().copied().unwrap_or(0) as usize;
    let mut into = vec![0u32; states];
    bump(&mut into, program.get(3).copied().unwrap_or(u32::MAX));
    let body = program.get(HEADER..HEADER + 3 * states).unwrap_or_default();
    for state in body.chunks_exact(3) {
        let &[op, a, b] = state else {
            continue;
        };
        let n = (op >> 8) as usize;
        match op & 0x7f {
            OP_CHAR | OP_CLASS | OP_SAVE | OP_LOOK => bump(&mut into, a),
            OP_SPLIT2 => {
                bump(&mut into, a);
                bump(&mut into, b);
            }
            OP_SPLITN => {
                let targets = program.get(a as usize..).and_then(|t| t.get(..n));
                for &t in targets.unwrap_or_default() {
                    bump(&mut into, t);
                }
            }
            _ => {}
        }
    }
    for (sid, n) in into.into_iter().enumerate() {
        if let (true, Some(op)) = (n > 1, program.get_mut(HEADER + 3 * sid)) {
            *op |= OP_MARKED;
        }
    }
}

/// The names of `hir`'s capture groups by index (0, the whole match, and
/// unnamed groups: `None`), as [`regex::Regex::capture_names`] lists them.
pub(crate) fn capture_names(hir: &Hir) -> Vec<Option<Box<str>>> {
    fn walk(hir: &Hir, names: &mut Vec<Option<Box<str>>>) {
        match hir.kind() {
            HirKind::Capture(capture) => {
                let index = capture.index as usize;
                if names.len() <= index {
                    names.resize(index + 1, None);
                }
                if let Some(name) = names.get_mut(index) {
                    *name = capture.name.clone();
                }
                walk(&capture.sub, names);
            }
            HirKind::Repetition(rep) => walk(&rep.sub, names),
            HirKind::Concat(subs) | HirKind::Alternation(subs) => {
                subs.iter().for_each(|s| walk(s, names))
            }
            HirKind::Empty | HirKind::Literal(_) | HirKind::Class(_) | HirKind::Look(_) => {}
        }
    }
    let mut names = vec![None; hir.properties().explicit_captures_len() + 1];
    walk(hir, &mut names);
    names
}
