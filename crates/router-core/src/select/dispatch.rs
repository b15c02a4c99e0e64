//! Which rules a request's path can reach, found in one walk over the path.
//!
//! A rule whose path regex has required literal prefixes (`prefix.rs`)
//! matches only paths that start with one of them. A ruleset with many
//! path rules (`cells`: one per family of GitLab routes that names an
//! owner) would otherwise compare every request's path with every rule's
//! prefixes in turn; a byte trie of all those prefixes, built once per
//! ruleset, gives the rules a path starts right for by walking the path
//! once, and the select phase evaluates only those (and the rules with no
//! such prefix).

use super::model::{Matcher, Rule};

/// At most this many rules are dispatched (one bit each); a bigger
/// ruleset evaluates every rule, as without a dispatch.
const MAX_RULES: usize = 128;

#[derive(Debug)]
pub(super) struct PathDispatch {
    /// The trie; `nodes[0]` is the root (the empty prefix).
    nodes: Vec<Node>,
    /// Rules that no prefix gates: no path matcher, one whose regex has no
    /// required prefix, or several path matchers. All bits when the
    /// ruleset has more than [`MAX_RULES`] rules.
    ungated: u128,
}

#[derive(Debug, Default)]
struct Node {
    /// (byte, node), sorted by byte.
    children: Vec<(u8, u32)>,
    /// Rules one of whose prefixes ends here.
    rules: u128,
}

impl PathDispatch {
    pub(super) fn new(rules: &[Rule]) -> PathDispatch {
        let mut dispatch = PathDispatch {
            nodes: vec![Node::default()],
            ungated: 0,
        };
        if rules.len() > MAX_RULES {
            dispatch.ungated = u128::MAX;
            return dispatch;
        }
        for (index, rule) in rules.iter().enumerate() {
            let bit = 1u128 << index;
            match path_prefixes(rule) {
                Some(prefixes) => prefixes.iter().for_each(|p| dispatch.insert(p, bit)),
                None => dispatch.ungated |= bit,
            }
        }
        dispatch
    }

    fn insert(&mut self, prefix: &[u8], bit: u128) {
        let mut at = 0usize;
        for &byte in prefix {
            let next = self.nodes.len();
            let Some(node) = self.nodes.get_mut(at) else {
                return;
            };
            let pos = node.children.partition_point(|c| c.0 < byte);
            at = match node.children.get(pos) {
                Some(&(b, child)) if b == byte => child as usize,
                _ => {
                    node.children.insert(pos, (byte, next as u32));
                    self.nodes.push(Node::default());
                    next
                }
            };
        }
        if let Some(node) = self.nodes.get_mut(at) {
            node.rules |= bit;
        }
    }

    /// The rules (bit `i` for rule `i`) that `path` may match: the ungated
    /// ones and those with a prefix `path` starts with.
    pub(super) fn candidates(&self, path: &str) -> u128 {
        let mut found = self.ungated;
        let Some(mut node) = self.nodes.first() else {
            return found;
        };
        for byte in path.bytes() {
            let Some(&(_, next)) = node.children.iter().find(|c| c.0 == byte) else {
                break;
            };
            let Some(child) = self.nodes.get(next as usize) else {
                break;
            };
            node = child;
            found |= node.rules;
        }
        found
    }
}

impl PathDispatch {
    /// Whether rule `index` is among `candidates` (every rule past
    /// [`MAX_RULES`] is).
    pub(super) fn reaches(candidates: u128, index: usize) -> bool {
        index >= MAX_RULES || (candidates >> index) & 1 == 1
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
    use super::super::tests::shipped_rulesets;
    use super::*;

    /// A path rule's bit is set exactly when its regex's prefixes admit
    /// the path, and every other rule's always.
    fn agrees(rules: &[Rule], dispatch: &PathDispatch, path: &str) -> Result<(), String> {
        let found = dispatch.candidates(path);
        for (i, rule) in rules.iter().enumerate() {
            let admitted = match path_prefixes(rule) {
                Some(prefixes) => prefixes.iter().any(|p| path.as_bytes().starts_with(p)),
                None => true,
            };
            if (found >> i) & 1 == 1 && !admitted || (found >> i) & 1 == 0 && admitted {
                return Err(format!(
                    "{}: {path:?}: candidate {} admitted {admitted}",
                    rule.id,
                    (found >> i) & 1
                ));
            }
        }
        Ok(())
    }

    #[test]
    fn the_shipped_rulesets_dispatch_as_their_prefixes_admit() {
        for (name, ruleset, dispatch) in shipped() {
            let rules = ruleset.rules();
            for path in [
                "/",
                "",
                "/api/v4/user",
                "/api/v4/projects/1",
                "/api/v4/group",
                "/api/v4/groups/x",
                "/users/sign_in",
                "/-/p/1",
                "/-",
                "/v2/",
                "/v2/a/dependency_proxy/containers/b/manifests/c",
                "/o/acme",
                "/groups/x/-/edit",
                "/jwt/auth",
                "/a/b/c",
            ] {
                agrees(rules, dispatch, path).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }

    /// The shipped rulesets and their dispatches, compiled once.
    fn shipped() -> &'static [(String, crate::Ruleset, PathDispatch)] {
        static SHIPPED: std::sync::OnceLock<Vec<(String, crate::Ruleset, PathDispatch)>> =
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

    proptest::proptest! {
        #[test]
        fn any_path_dispatches_as_the_prefixes_admit(
            path in "(/|api|v4|users|user|projects|groups|group|-|p|g|u|s|o|v2|jira|ide|packages|npm|@|x|1|%2F)*"
        ) {
            for (name, ruleset, dispatch) in shipped() {
                if let Err(e) = agrees(ruleset.rules(), dispatch, &path) {
                    return Err(proptest::test_runner::TestCaseError::fail(format!("{name}: {e}")));
                }
            }
        }
    }

    #[test]
    fn too_many_rules_dispatch_nothing() {
        let rules: Vec<String> = (0..=MAX_RULES)
            .map(|i| format!(r#"{{"id": "r{i}", "match": {{"type": "path", "regexValue": "^/r{i}/"}}, "action": "proxy"}}"#))
            .collect();
        let ruleset = crate::Ruleset::from_json("big", &format!("[{}]", rules.join(","))).unwrap();
        assert_eq!(
            PathDispatch::new(ruleset.rules()).candidates("/x"),
            u128::MAX
        );
        let r = crate::RequestParts::from_url("GET", "https://gitlab.com/r128/x").unwrap();
        assert_eq!(ruleset.decide(&r).rule_id, Some("r128"));
    }
}
