//! Which rules a request's path can reach, found in one walk over the path.
//!
//! A rule whose path regex has required literal prefixes (`prefix.rs`)
//! matches only paths that start with one of them. A ruleset with many
//! path rules (`cells`: one per family of GitLab routes that names an
//! owner) would otherwise compare every request's path with every rule's
//! prefixes in turn; a byte trie of all those prefixes, built once per
//! ruleset, gives the rules a path starts right for by walking the path
//! once, and the select phase evaluates only those (and the rules with no
//! such prefix), in the rules' order. Each trie node holds the whole set
//! a path reaching it may match, worked out when the ruleset is compiled,
//! so a request's cost does not grow with the rules it cannot match, however
//! many the ruleset has.

use super::model::{Matcher, Rule};

/// A set of rules, bit `i` (of word `i / 64`) for rule `i`.
type Word = u64;
const WORD_BITS: usize = Word::BITS as usize;

#[derive(Debug)]
pub(super) struct PathDispatch {
    /// The trie; `nodes[0]` is the root (the empty prefix). A node's
    /// children come after it.
    nodes: Vec<Node>,
    /// The rule sets the nodes name, [`PathDispatch::words`] words each:
    /// set 0 the rules that no prefix gates (no path matcher, one whose
    /// regex has no required prefix, or several path matchers); each
    /// other set one node's, computed when the ruleset is compiled.
    sets: Vec<Word>,
    words: usize,
}

#[derive(Debug, Default)]
struct Node {
    /// (byte, node), sorted by byte.
    children: Vec<(u8, u32)>,
    /// The rules a path that reaches this node may match (an index into
    /// [`PathDispatch::sets`]): the ungated ones and those with a prefix
    /// ending here or at a node above. Shared with its parent when no
    /// prefix ends here.
    set: u32,
}

impl PathDispatch {
    pub(super) fn new(rules: &[Rule]) -> PathDispatch {
        let words = rules.len().div_ceil(WORD_BITS).max(1);
        let mut dispatch = PathDispatch {
            nodes: vec![Node::default()],
            sets: vec![0; words],
            words,
        };
        // While building, a node's `set` holds only the rules whose
        // prefixes end there (0: none yet; the root's is the ungated set).
        let mut parents = vec![0u32];
        for (index, rule) in rules.iter().enumerate() {
            let Some(prefixes) = path_prefixes(rule) else {
                dispatch.add(0, index);
                continue;
            };
            for prefix in prefixes {
                let at = dispatch.insert(prefix, &mut parents);
                let own = match dispatch.nodes.get(at).map_or(0, |n| n.set) {
                    0 if at != 0 => dispatch.new_set(),
                    own => own,
                };
                if let Some(node) = dispatch.nodes.get_mut(at) {
                    node.set = own;
                }
                dispatch.add(own, index);
            }
        }
        // Then each node's whole set: its own rules and its parent's set
        // (parents come before their children, so theirs is final).
        for (at, &parent) in parents.iter().enumerate().skip(1) {
            let above = dispatch.nodes.get(parent as usize).map_or(0, |n| n.set);
            let own = dispatch.nodes.get(at).map_or(0, |n| n.set);
            let set = if own == 0 {
                above
            } else {
                dispatch.merge(own, above);
                own
            };
            if let Some(node) = dispatch.nodes.get_mut(at) {
                node.set = set;
            }
        }
        dispatch
    }

    /// The node for `prefix`, made if new (its parent pushed on `parents`).
    fn insert(&mut self, prefix: &[u8], parents: &mut Vec<u32>) -> usize {
        let mut at = 0usize;
        for &byte in prefix {
            let next = self.nodes.len();
            let Some(node) = self.nodes.get_mut(at) else {
                break;
            };
            let pos = node.children.partition_point(|c| c.0 < byte);
            at = match node.children.get(pos) {
                Some(&(b, child)) if b == byte => child as usize,
                _ => {
                    node.children.insert(pos, (byte, next as u32));
                    self.nodes.push(Node::default());
                    parents.push(at as u32);
                    next
                }
            };
        }
        at
    }

    /// A new empty set; its index.
    fn new_set(&mut self) -> u32 {
        self.sets.resize(self.sets.len() + self.words, 0);
        (self.sets.len() / self.words - 1) as u32
    }

    /// Adds set `from`'s rules to set `to`.
    fn merge(&mut self, to: u32, from: u32) {
        let (to, from) = (to as usize * self.words, from as usize * self.words);
        for w in 0..self.words {
            let rules = self.sets.get(from + w).copied().unwrap_or(0);
            if let Some(word) = self.sets.get_mut(to + w) {
                *word |= rules;
            }
        }
    }

    fn add(&mut self, set: u32, rule: usize) {
        if let Some(word) = self
            .sets
            .get_mut(set as usize * self.words + rule / WORD_BITS)
        {
            *word |= 1 << (rule % WORD_BITS);
        }
    }

    /// The rules `path` may match: the ungated ones and those with a
    /// prefix `path` starts with. One step per byte of the path that
    /// follows the trie; nothing is allocated.
    pub(super) fn candidates(&self, path: &str) -> Candidates<'_> {
        let mut set = 0u32;
        let mut node = self.nodes.first();
        for byte in path.bytes() {
            let Some(&(_, next)) = node.and_then(|n| n.children.iter().find(|c| c.0 == byte))
            else {
                break;
            };
            node = self.nodes.get(next as usize);
            set = node.map_or(set, |n| n.set);
        }
        let start = set as usize * self.words;
        Candidates(self.sets.get(start..start + self.words).unwrap_or(&[]))
    }
}

/// A set of rules [`PathDispatch::candidates`] found.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidates<'d>(&'d [Word]);

impl<'d> Candidates<'d> {
    /// The rules of the set from position `first` on, in order.
    pub(super) fn from(self, first: usize) -> RulesFrom<'d> {
        let w = first / WORD_BITS;
        let word = self
            .0
            .get(w)
            .map_or(0, |&word| word & (Word::MAX << (first % WORD_BITS)));
        RulesFrom {
            words: self.0,
            w,
            word,
        }
    }
}

/// [`Candidates::from`]: the set's rules in order, the lowest bit of each
/// word first.
pub(super) struct RulesFrom<'d> {
    words: &'d [Word],
    /// The word being read, and what is left of it.
    w: usize,
    word: Word,
}

impl Iterator for RulesFrom<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.word == 0 {
            self.w += 1;
            self.word = *self.words.get(self.w)?;
        }
        let bit = self.word.trailing_zeros() as usize;
        self.word &= self.word - 1;
        Some(self.w * WORD_BITS + bit)
    }
}

/// The required prefixes of the rule's one path matcher, if it has exactly
/// one and its regex has some.
fn path_prefixes(rule: &Rule) -> Option<&[Box<[u8]>]> {
    let mut paths = rule.matchers.iter().filter_map(|m| match m {
        Matcher::Path(re) => Some(re),
        _ => None,
    });
    let only = paths.next()?;
    if paths.next().is_some() {
        return None;
    }
    only.prefixes()
}

#[cfg(test)]
mod tests {
    use super::super::eval::Eval;
    use super::super::tests::shipped_rulesets;
    use super::*;
    use crate::{RequestParts, Ruleset};

    /// A path rule is a candidate exactly when its regex's prefixes admit
    /// the path, and every other rule always.
    fn agrees(rules: &[Rule], dispatch: &PathDispatch, path: &str) -> Result<(), String> {
        let found: Vec<usize> = dispatch.candidates(path).from(0).collect();
        for (i, rule) in rules.iter().enumerate() {
            let admitted = match path_prefixes(rule) {
                Some(prefixes) => prefixes.iter().any(|p| path.as_bytes().starts_with(p)),
                None => true,
            };
            if found.contains(&i) != admitted {
                return Err(format!(
                    "{}: {path:?}: candidate {} admitted {admitted}",
                    rule.id,
                    found.contains(&i)
                ));
            }
        }
        Ok(())
    }

    /// The first rule from `first` on, not in `disabled`, whose evaluation
    /// holds: every rule tried in turn, with no index.
    fn first_match<'r>(
        ruleset: &'r Ruleset,
        request: &RequestParts,
        first: usize,
        disabled: &[String],
    ) -> Option<&'r str> {
        let mut eval = Eval::default();
        ruleset
            .rules()
            .iter()
            .skip(first)
            .filter(|rule| !disabled.contains(&rule.id))
            .find(|rule| {
                eval.clear();
                rule.evaluate(request, &mut eval).is_some()
            })
            .map(|rule| rule.id.as_str())
    }

    /// `decide_from` picks what trying every rule in turn picks, from
    /// every position, with and without `disabled` switched off.
    fn decides_as_in_turn(
        ruleset: &Ruleset,
        path: &str,
        disabled: &[String],
    ) -> Result<(), String> {
        let Some(request) = RequestParts::from_url("GET", &format!("https://gitlab.com{path}"))
        else {
            return Ok(());
        };
        // (The shared ruleset of the other tests is never switched.)
        if !disabled.is_empty() {
            ruleset.set_disabled(disabled);
        }
        let mut result = Ok(());
        for first in 0..=ruleset.rules().len() + 1 {
            let indexed = ruleset.decide_from(&request, first).rule_id;
            let in_turn = first_match(ruleset, &request, first, disabled);
            if indexed != in_turn {
                result = Err(format!(
                    "{}: {path:?} from {first}: {indexed:?}, in turn {in_turn:?}",
                    ruleset.name()
                ));
                break;
            }
        }
        if !disabled.is_empty() {
            ruleset.set_disabled(&[]);
        }
        result
    }

    /// Rules past one word of the set, whose prefixes overlap and nest,
    /// with rules no prefix gates between them (a header, no path, a
    /// regex not anchored, a case-insensitive one, one with two path
    /// matchers), and the shipped `cells` rules after them.
    fn crowded() -> &'static Ruleset {
        static CROWDED: std::sync::OnceLock<Ruleset> = std::sync::OnceLock::new();
        CROWDED.get_or_init(crowded_ruleset)
    }

    fn crowded_ruleset() -> Ruleset {
        {
            let path_rule = |id: String, regex: &str| {
                format!(
                    r#"{{"id": "{id}", "match": {{"type": "path", "regexValue": "{regex}"}}, "action": "proxy", "proxy": {{"address": "{id}.example"}}}}"#
                )
            };
            let mut rules: Vec<String> = (0..150)
                .map(|n| match n % 10 {
                    0 => path_rule(format!("family-{n}"), &format!("^/api/v4/bench-family-{n}/")),
                    1 => path_rule(format!("nested-{n}"), &format!("^/api/v4/bench-family-{}/x", n - 1)),
                    2 => path_rule(format!("short-{n}"), "^/api/v4/"),
                    3 => path_rule(format!("ci-{n}"), "^/[Aa][Pp][Ii]/v4/[Cc]ase/"),
                    4 => path_rule(format!("anywhere-{n}"), "bench-anywhere"),
                    5 => path_rule(format!("encoded-{n}"), "^/a%2Fb/"),
                    6 => format!(
                        r#"{{"id": "header-{n}", "match": {{"type": "header", "name": "x-bench-{n}", "regexValue": "^y$"}}, "action": "proxy"}}"#
                    ),
                    7 => format!(
                        r#"{{"id": "two-paths-{n}", "match": [{{"type": "path", "regexValue": "^/-/two/"}}, {{"type": "path", "regexValue": "/{n}$"}}], "action": "proxy"}}"#
                    ),
                    8 => path_rule(format!("alternatives-{n}"), &format!("^/(?:-/bench-{n}|g/{n})/")),
                    _ => path_rule(format!("exact-{n}"), &format!("^/-/bench-{}/1$", n - 1)),
                })
                .collect();
            let cells = std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../rules/cells.json"),
            )
            .unwrap();
            let cells: serde_json::Value = serde_json::from_str(&cells).unwrap();
            rules.extend(
                cells["rules"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r.to_string()),
            );
            Ruleset::from_json("crowded", &format!("[{}]", rules.join(","))).unwrap()
        }
    }

    const PATHS: &[&str] = &[
        "/",
        "",
        "/api/v4/user",
        "/api/v4/projects/1",
        "/api/v4/bench-family-0/",
        "/api/v4/bench-family-0/x",
        "/api/v4/bench-family-10/x/1",
        "/api/v4/bench-family-100/",
        "/api/v4/bench-family-1/",
        "/api/v4/bench-family-140/x",
        "/API/V4/BENCH-FAMILY-0/",
        "/api/v4/case/1",
        "/API/V4/CASE/1",
        "/aPi/v4/Case/1",
        "/Api/v4/Case/",
        "/x/bench-anywhere",
        "/a%2Fb/c",
        "/a%2fb/c",
        "/a/b/c",
        "/-/bench-8/1",
        "/-/bench-8/12",
        "/-/bench-88/",
        "/g/88/",
        "/-/two/17",
        "/-/two/27",
        "/-/p/1",
        "/users/sign_in",
        "/groups/x/-/edit",
        "/v2/a/dependency_proxy/containers/b/manifests/c",
    ];

    #[test]
    fn the_shipped_rulesets_dispatch_as_their_prefixes_admit() {
        for (name, ruleset, dispatch) in shipped() {
            let rules = ruleset.rules();
            for path in PATHS.iter().chain(&[
                "/api/v4/group",
                "/api/v4/groups/x",
                "/-",
                "/v2/",
                "/o/acme",
                "/jwt/auth",
            ]) {
                agrees(rules, dispatch, path).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }

    #[test]
    fn a_crowded_ruleset_decides_as_trying_every_rule_in_turn() {
        let ruleset = crowded();
        assert!(ruleset.rules().len() > 2 * WORD_BITS);
        let dispatch = PathDispatch::new(ruleset.rules());
        for path in PATHS {
            agrees(ruleset.rules(), &dispatch, path).unwrap();
            decides_as_in_turn(ruleset, path, &[]).unwrap();
        }
        // The index skips rules that cannot match, not rules that can.
        let decide = |path: &str| {
            let r = RequestParts::from_url("GET", &format!("https://gitlab.com{path}")).unwrap();
            ruleset.decide(&r).rule_id.map(str::to_string)
        };
        assert_eq!(
            decide("/api/v4/bench-family-140/x").as_deref(),
            Some("short-2")
        );
        assert_eq!(decide("/aPi/v4/Case/1").as_deref(), Some("ci-3"));
        assert_eq!(decide("/a%2Fb/c").as_deref(), Some("encoded-5"));
        assert_eq!(decide("/-/bench-8/1").as_deref(), Some("alternatives-8"));
    }

    #[test]
    fn switched_off_rules_are_passed_over_as_in_turn() {
        let ruleset = &crowded_ruleset();
        let off: Vec<String> = [
            "short-2",
            "short-12",
            "anywhere-4",
            "ci-3",
            "family-140",
            "encoded-5",
        ]
        .map(String::from)
        .to_vec();
        for path in PATHS {
            decides_as_in_turn(ruleset, path, &off).unwrap();
        }
    }

    #[test]
    fn a_set_is_walked_in_order_from_any_position_across_words() {
        let set = [1 | 1 << 63, 1, 1 << 5 | 1 << 9];
        let from = |first| Candidates(&set).from(first).collect::<Vec<_>>();
        assert_eq!(from(0), [0, 63, 64, 133, 137]);
        assert_eq!(from(1), [63, 64, 133, 137]);
        assert_eq!(from(64), [64, 133, 137]);
        assert_eq!(from(65), [133, 137]);
        assert_eq!(from(134), [137]);
        assert_eq!(from(138), Vec::<usize>::new());
        assert_eq!(from(500), Vec::<usize>::new());
    }

    /// The shipped rulesets and their dispatches, compiled once.
    fn shipped() -> &'static [(String, Ruleset, PathDispatch)] {
        static SHIPPED: std::sync::OnceLock<Vec<(String, Ruleset, PathDispatch)>> =
            std::sync::OnceLock::new();
        SHIPPED.get_or_init(|| {
            shipped_rulesets()
                .into_iter()
                .map(|(name, ruleset)| {
                    let dispatch = PathDispatch::new(ruleset.rules());
                    (name, ruleset, dispatch)
                })
                .collect()
        })
    }

    const ANY_PATH: &str = "(/|api|API|v4|V4|case|Case|users|user|projects|groups|group|-|p|g|u|s|o|v2|bench-family-|bench-|two|anywhere|a%2Fb|x|1|0|4|8|%2F)*";

    proptest::proptest! {
        #[test]
        fn any_path_dispatches_as_the_prefixes_admit(path in ANY_PATH) {
            for (name, ruleset, dispatch) in shipped() {
                if let Err(e) = agrees(ruleset.rules(), dispatch, &path) {
                    return Err(proptest::test_runner::TestCaseError::fail(format!("{name}: {e}")));
                }
            }
        }

        #[test]
        fn any_path_decides_as_in_turn_in_a_crowded_ruleset(path in ANY_PATH) {
            if let Err(e) = decides_as_in_turn(crowded(), &path, &[]) {
                return Err(proptest::test_runner::TestCaseError::fail(e));
            }
        }
    }
}
