//! The reserved words GitLab's routes imply: the literal first segment of
//! every template (`/admin/…` → `admin`), and the literal words at a
//! position where the router claims a name (`/groups/new` beside
//! `/groups/*group_id` → `groups/new`). `[snapshot]` of
//! `rules/reserved_top_level_routes.txt` must be exactly these.

use std::collections::BTreeMap;

use router_core::select::reserved::{ReservedList, RESERVED_TOP_LEVEL_ROUTES_TXT};

use crate::route_claims::{Claim, Table};
use crate::route_template::{Template, Token};
use crate::snapshot::Snapshot;

/// The words, each with a template that implies it.
pub struct Derived {
    pub words: BTreeMap<String, String>,
}

/// How the shipped list compares with the snapshot.
pub struct Comparison {
    pub derived: usize,
    /// (word, template) the snapshot has and `[snapshot]` does not.
    pub missing: Vec<(String, String)>,
    /// Words `[snapshot]` lists and the snapshot does not have.
    pub extra: Vec<String>,
}

impl Comparison {
    pub fn is_clean(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty()
    }

    /// The differences, one report line each.
    pub fn problems(&self) -> Vec<String> {
        let missing = self.missing.iter().map(|(word, template)| {
            format!(
                "reserved words: {word:?} (template {template}) is missing from [snapshot] of rules/reserved_top_level_routes.txt"
            )
        });
        let extra = self.extra.iter().map(|word| {
            format!(
                "reserved words: {word:?} is listed under [snapshot] but no template of the snapshot has it: free it, or list it under its real source"
            )
        });
        missing.chain(extra).collect()
    }
}

/// The literal text a flat variant starts with (`/api/:version` read as
/// `/api/v4`, as the gem pins it), and whether that is all of it.
fn literal_prefix(variant: &[&Token]) -> (String, bool) {
    let mut text = String::new();
    for t in variant {
        match t {
            Token::Literal(l) => text.push_str(l),
            Token::Param(n) if n == "version" && text.ends_with("/api/") => text.push_str("v4"),
            _ => return (text, false),
        }
    }
    (text, true)
}

/// The positions where the router claims a name: the literal text before
/// the owner parameter of every entry that claims names (`/`, `/groups/`,
/// `/users/`, `/api/v4/namespaces/`, ...).
fn claimed_positions(snapshot: &Snapshot, table: &Table) -> Vec<String> {
    let mut positions = vec!["/".to_string()];
    for route in &snapshot.routes {
        let Some(Claim::Owner { kind, param }) =
            table.entry_for(&route.template_source).map(|e| &e.claim)
        else {
            continue;
        };
        if !kind.claims_names() {
            continue;
        }
        for variant in route.template.variants() {
            let Some(at) = variant
                .iter()
                .position(|t| matches!(t, Token::Param(n) | Token::Glob(n) if n == param))
            else {
                continue;
            };
            let (before, whole) = literal_prefix(&variant[..at]);
            if whole && before.ends_with('/') && !positions.contains(&before) {
                positions.push(before);
            }
        }
    }
    positions
}

/// The words of one template at the given positions.
fn words_of(template: &Template, positions: &[String], out: &mut Vec<String>) {
    for variant in template.variants() {
        let (text, whole) = literal_prefix(&variant);
        for position in positions {
            let Some(rest) = text.strip_prefix(position.as_str()) else {
                continue;
            };
            let word = match rest.split_once('/') {
                Some((word, _)) => word,
                None if whole => rest,
                // The segment goes on with a parameter (`/:username.keys`).
                None => continue,
            };
            if !word.is_empty() {
                out.push(format!("{}{}", &position[1..], word).to_ascii_lowercase());
            }
        }
    }
}

pub fn derive(snapshot: &Snapshot, table: &Table) -> Derived {
    let positions = claimed_positions(snapshot, table);
    let mut words = BTreeMap::new();
    let mut found = Vec::new();
    for route in &snapshot.routes {
        found.clear();
        words_of(&route.template, &positions, &mut found);
        for word in found.drain(..) {
            words
                .entry(word)
                .or_insert_with(|| route.template_source.clone());
        }
    }
    Derived { words }
}

impl Derived {
    /// Compared with `[snapshot]` of the list compiled into the router.
    pub fn compare(&self) -> Comparison {
        let list = ReservedList::parse(RESERVED_TOP_LEVEL_ROUTES_TXT)
            .expect("router-core's build.rs checks the list");
        let listed: Vec<&str> = list
            .source("snapshot")
            .map(|s| s.words.clone())
            .unwrap_or_default();
        Comparison {
            derived: self.words.len(),
            missing: self
                .words
                .iter()
                .filter(|(w, _)| !listed.contains(&w.as_str()))
                .map(|(w, t)| (w.clone(), t.clone()))
                .collect(),
            extra: listed
                .iter()
                .filter(|w| !self.words.contains_key(**w))
                .map(|w| w.to_string())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_words_at_claimed_positions() {
        let positions = [
            "/".to_string(),
            "/groups/".to_string(),
            "/api/v4/namespaces/".to_string(),
        ];
        let words = |source: &str| {
            let mut out = Vec::new();
            words_of(&Template::parse(source).unwrap(), &positions, &mut out);
            out
        };
        assert_eq!(words("/admin/users/:id"), ["admin"]);
        assert_eq!(words("/groups/new"), ["groups", "groups/new"]);
        assert_eq!(words("/groups/*group_id/-/edit"), ["groups"]);
        assert_eq!(
            words("/api/:version/namespaces/storage/limit_exclusions"),
            ["api", "api/v4/namespaces/storage"]
        );
        assert_eq!(
            words("/health_check(/:checks)"),
            ["health_check", "health_check"]
        );
        assert_eq!(words("(/-/jira)/*namespace_id/:project_id"), ["-"]);
        assert!(words("/:username.keys").is_empty());
        assert!(words("/").is_empty());
        assert_eq!(words("/Favicon.ico"), ["favicon.ico"]);
    }
}
