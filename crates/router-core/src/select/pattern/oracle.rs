//! The programs held to the `regex` crate: for every regex of every
//! shipped ruleset, on values generated from the regex and near misses of
//! them, on random values over its alphabet, and on every real value of the
//! route tables and of GitLab's route snapshot, the program finds what the
//! crate's `captures` finds: whether it matches and every group's span.
//! Also the VM's rules one by one (priority, laziness, empty branches,
//! anchors, word boundaries), against the crate and written out.

use std::collections::BTreeSet;
use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use regex_syntax::hir::{Class, Hir, HirKind};

use super::differential::{ours, Groups, RegexOracle as Subject};
use super::Regex;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// `hir` without its assertions (proptest cannot generate them) and with
/// unbounded repetitions bounded (nested ones would make values of
/// thousands of characters): what it generates is then a candidate match,
/// or a near one, of a value's length.
fn without_looks(hir: &Hir) -> Hir {
    match hir.kind() {
        HirKind::Look(_) => Hir::empty(),
        HirKind::Repetition(rep) => {
            let mut rep = rep.clone();
            rep.sub = Box::new(without_looks(&rep.sub));
            rep.max = Some(rep.max.unwrap_or(rep.min + 4));
            Hir::repetition(rep)
        }
        HirKind::Capture(cap) => {
            let mut cap = cap.clone();
            cap.sub = Box::new(without_looks(&cap.sub));
            Hir::capture(cap)
        }
        HirKind::Concat(subs) => Hir::concat(subs.iter().map(without_looks).collect()),
        HirKind::Alternation(subs) => Hir::alternation(subs.iter().map(without_looks).collect()),
        _ => hir.clone(),
    }
}

/// The characters `hir` names (literals, class bounds and their
/// neighbours) and those a value often holds: what mutations and random
/// values are made of.
fn alphabet(hir: &Hir) -> Vec<char> {
    fn walk(hir: &Hir, out: &mut BTreeSet<char>) {
        match hir.kind() {
            HirKind::Literal(l) => out.extend(std::str::from_utf8(&l.0).unwrap().chars()),
            HirKind::Class(Class::Unicode(c)) => {
                for r in c.ranges() {
                    for c in [r.start() as u32, r.end() as u32] {
                        out.extend(
                            [c.wrapping_sub(1), c, c + 1]
                                .into_iter()
                                .filter_map(char::from_u32),
                        );
                    }
                }
            }
            HirKind::Repetition(rep) => walk(&rep.sub, out),
            HirKind::Capture(cap) => walk(&cap.sub, out),
            HirKind::Concat(subs) | HirKind::Alternation(subs) => {
                subs.iter().for_each(|s| walk(s, out))
            }
            _ => {}
        }
    }
    let mut out: BTreeSet<char> = "/.%-_:@+= aZ09\t\n".chars().collect();
    out.extend(['é', '\u{a0}', '\u{2028}', '€', '𝄞', '\u{10ffff}']);
    walk(hir, &mut out);
    out.into_iter().collect()
}

/// Runs `cases` generated values through `subject`; returns how many.
fn run_generated(subject: &Subject, cases: u32) -> u32 {
    let hir = regex_syntax::Parser::new()
        .parse(&subject.ours.source)
        .unwrap();
    let chars = alphabet(&hir);
    let generated = proptest::string::string_regex_parsed(&without_looks(&hir)).unwrap();
    let char_ = proptest::sample::select(chars);
    let noise = proptest::collection::vec(char_.clone(), 0..4);
    let edits =
        proptest::collection::vec((any::<prop::sample::Index>(), 0..3u8, char_.clone()), 0..3);
    let random =
        proptest::collection::vec(char_, 0..40).prop_map(|v| v.into_iter().collect::<String>());
    // A match with noise around it and perhaps a few characters deleted,
    // inserted or replaced; or a random value over the alphabet.
    let values = prop_oneof![
        3 => (noise.clone(), generated, noise, edits).prop_map(|(before, m, after, edits)| {
            let mut value: Vec<char> = before.into_iter().chain(m.chars()).chain(after).collect();
            for (at, edit, c) in edits {
                let at = at.index(value.len() + 1);
                match edit {
                    0 if at < value.len() => drop(value.remove(at)),
                    1 => value.insert(at, c),
                    _ if at < value.len() => value[at] = c,
                    _ => {}
                }
            }
            value.into_iter().collect::<String>()
        }),
        1 => random,
    ];
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let count = std::cell::Cell::new(0);
    let result = runner.run(&values, |value| {
        count.set(count.get() + 1);
        subject.check(&value).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    count.get()
}

/// Every value of the route tables (`tests/rules/*.cases.json`: URLs,
/// their paths and queries, headers, cookies) and every template and
/// example of GitLab's route snapshot.
fn real_values() -> Vec<String> {
    fn strings(v: &serde_json::Value, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::String(s) => {
                out.insert(s.clone());
                if let Some(rest) = s
                    .strip_prefix("https://")
                    .or_else(|| s.strip_prefix("http://"))
                {
                    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                    let (path, query) = path.split_once('?').unwrap_or((path, ""));
                    out.insert(host.to_string());
                    out.insert(path.to_string());
                    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
                        out.insert(k.into_owned());
                        out.insert(v.into_owned());
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            serde_json::Value::Object(m) => m.iter().for_each(|(k, x)| {
                out.insert(k.clone());
                strings(x, out)
            }),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(repo().join("tests/rules")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let doc = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            strings(&doc, &mut out);
        }
    }
    out.into_iter().collect()
}

#[test]
fn shipped_regexes_match_as_the_regex_crate_does() {
    let subjects: Vec<Subject> = crate::select::tests::shipped_regexes()
        .iter()
        .map(|s| Subject::new(s).unwrap_or_else(|e| panic!("{s}: {e}")))
        .collect();
    assert!(subjects.len() >= 40, "{} regexes", subjects.len());
    let real = real_values();
    // GitLab's 5,066 routes: templates and examples.
    assert!(real.len() > 10_000, "{} real values", real.len());
    let mut failures = Vec::new();
    let (mut generated, mut checked) = (0, 0);
    for subject in &subjects {
        generated += run_generated(subject, 1_000);
    }
    for subject in &subjects {
        for value in &real {
            checked += 1;
            if let Err(e) = subject.check(value) {
                failures.push(e);
            }
        }
    }
    eprintln!(
        "{} regexes: {generated} generated values, {checked} real ones ({} values each)",
        subjects.len(),
        real.len()
    );
    assert!(
        failures.is_empty(),
        "{}",
        failures[..failures.len().min(20)].join("\n")
    );
}

/// (regex, value, every group's span: `start..end`, `-` for a group
/// that took no part, `none` for no match) written out, each also held to
/// the crate.
#[test]
fn the_vm_resolves_as_written() {
    let cases = [
        // Alternation: the first branch that matches wins, not the longest.
        ("a|ab", "ab", "0..1"),
        ("ab|a", "ab", "0..2"),
        ("(a|ab)(c|bcd)", "abcd", "0..4 0..1 1..4"),
        // Greedy takes all it can, lazy as little.
        ("(a+)(a*)", "aaa", "0..3 0..3 3..3"),
        ("(a+?)(a*)", "aaa", "0..3 0..1 1..3"),
        ("(a{1,3}?)(a*)", "aaa", "0..3 0..1 1..3"),
        ("(a??)a", "aa", "0..1 0..0"),
        ("^/(?<top>[a-z.]+?)(?:\\.json)?$", "/x.json", "0..7 1..2"),
        // Empty branches, empty repetitions.
        ("(|a)", "a", "0..0 0..0"),
        ("(a|)", "a", "0..1 0..1"),
        ("(a*)*", "b", "0..0 0..0"),
        ("(a*)+", "b", "0..0 0..0"),
        ("(a|b)*", "ab", "0..2 1..2"),
        ("(?:(a)|b)*", "ab", "0..2 0..1"),
        ("(a)|b", "b", "0..1 -"),
        // The search is unanchored: the leftmost start wins.
        ("b+", "abbb", "1..4"),
        ("x*", "ax", "0..0"),
        // Anchors.
        ("^a", "ba", "none"),
        ("a$", "ab", "none"),
        ("^$", "", "0..0"),
        ("(?m)^b$", "a\nb\nc", "2..3"),
        ("^b$", "a\nb\nc", "none"),
        // Word boundaries are ASCII: é is not a word character.
        ("\\bapi\\b", "/api/v4", "1..4"),
        ("\\bapi\\b", "/apiv4", "none"),
        ("\\bé", "aé", "1..3"),
        ("\\bé", "é", "none"),
        ("a\\b", "aé", "0..1"),
        ("a\\Bb", "ab", "0..2"),
        ("\\B", "é", "0..0"),
        // Characters, not bytes.
        ("^.(.)$", "é€", "0..5 2..5"),
        ("[^a]", "a𝄞", "1..5"),
        // A class that matches nothing.
        ("a[^\\x00-\\x{10FFFF}]|b", "ab", "1..2"),
    ];
    for (source, value, expected) in cases {
        let expected: Groups = (expected != "none").then(|| {
            expected
                .split(' ')
                .map(|span| {
                    let (a, b) = span.split_once("..")?;
                    Some(a.parse().unwrap()..b.parse().unwrap())
                })
                .collect()
        });
        let subject = Subject::new(source).unwrap_or_else(|e| panic!("{source}: {e}"));
        assert_eq!(
            ours(&subject.ours.program, value).unwrap(),
            expected,
            "{source} on {value:?}"
        );
        subject.check(value).unwrap();
    }
}

proptest::proptest! {
    // A quarter of the generated sources are valid regexes.
    #![proptest_config(Config::with_cases(2_000))]

    /// Small regexes of every shape the VM has, on short values: as the
    /// crate.
    #[test]
    fn small_regexes_match_as_the_regex_crate_does(
        source in "(\\(|\\)|\\(\\?:|a|b|[ab]|\\||\\*|\\+|\\?|\\*\\?|\\+\\?|\\{0,2\\}|\\{1,2\\}\\?|\\^|\\$|\\\\b|\\\\B|\\.|é){1,10}",
        values in proptest::collection::vec("[abé \n]{0,6}", 1..8),
    ) {
        // Most generated sources are not valid regexes: those are skipped.
        if Regex::eager(&source).is_err() {
            return Ok(());
        }
        let subject = Subject::new(&source).unwrap_or_else(|e| panic!("{source}: {e}"));
        for value in &values {
            subject.check(value).map_err(TestCaseError::fail)?;
        }
    }
}
