//! Which of GitLab's routes a path is, and what the expectation table says
//! the router must claim for it: `rulesctl explain`'s `gitlab_route`.

use std::path::{Path, PathBuf};

use crate::cli::{Failure, Outcome};
use crate::decision::{json_str, sent_claim};
use crate::route_claims::{Claim, Expected, Kind, Table};
use crate::routes_check::load_table;
use crate::rules::RulesDir;
use crate::snapshot::{Route, Snapshot};
use router_core::Decision;

pub struct Lookup {
    snapshot: Snapshot,
    table: Table,
}

/// The shipped snapshot, beside the rules: `tests/rules/gitlab_routes.json`.
fn default_snapshot(rules: &Path) -> PathBuf {
    rules
        .join("..")
        .join("tests")
        .join("rules")
        .join("gitlab_routes.json")
}

impl Lookup {
    /// The snapshot and table named, else the shipped ones when they are
    /// there (`None` when not: a rules directory without them).
    pub fn load(
        dir: &RulesDir,
        routes: Option<String>,
        claims: Option<String>,
    ) -> Outcome<Option<Lookup>> {
        let explicit = routes.is_some() || claims.is_some();
        let rules = dir.locate().ok();
        let routes = routes
            .map(PathBuf::from)
            .or_else(|| rules.as_deref().map(default_snapshot));
        let claims = claims
            .map(PathBuf::from)
            .or_else(|| rules.as_deref().map(|r| r.join("route_claims.txt")));
        let (routes, claims) = match (routes, claims) {
            (Some(r), Some(c)) if explicit || (r.is_file() && c.is_file()) => (r, c),
            _ if explicit => {
                return Err(Failure::usage(
                    "--routes and --claims go together when there is no rules directory",
                ))
            }
            _ => return Ok(None),
        };
        let text = std::fs::read_to_string(&routes)
            .map_err(|e| Failure::data(format!("{}: cannot read: {e}", routes.display())))?;
        let snapshot = Snapshot::parse(&text)
            .map_err(|e| Failure::data(format!("{}: {e}", routes.display())))?;
        Ok(Some(Lookup {
            snapshot,
            table: load_table(&claims)?,
        }))
    }

    /// The most specific template `path` is (most literal characters, then
    /// fewest optional parts left out, fewest parameters, the first), with
    /// one segment a `:param`; failing that, with `:param`s taking several
    /// (as Rails constraints let some). A template whose table entry claims
    /// a route is no match when the value it would take is no namespace
    /// (a reserved word: Rails' constraints refuse those too).
    fn route_of(&self, path: &str) -> Option<(&Route, bool)> {
        let path = path.split('?').next().unwrap_or(path);
        [false, true].into_iter().find_map(|spanning| {
            self.snapshot
                .routes
                .iter()
                .filter_map(|r| {
                    let (literal, left_in) =
                        r.template.match_path(path, r.accepts_format, spanning)?;
                    if let Some(Claim::Owner {
                        kind: Kind::Route,
                        param,
                    }) = self.table.entry_for(&r.template_source).map(|e| &e.claim)
                    {
                        let value = r
                            .template
                            .capture(path, param, r.accepts_format, spanning)?;
                        if Kind::Route.expect(&value) == Expected::None {
                            return None;
                        }
                    }
                    let fewer_parameters = std::cmp::Reverse(r.template.parameters().len());
                    Some((r, (literal, left_in, fewer_parameters)))
                })
                .fold(None, |best: Option<(&Route, _)>, candidate| match best {
                    Some(b) if b.1 >= candidate.1 => Some(b),
                    _ => Some(candidate),
                })
                .map(|(r, _)| (r, spanning))
        })
    }

    /// `{"template", "entry", "line", "expect", "as_expected", "note"}`
    /// for `path` and what the ruleset decided, or `null` when the path is
    /// none of GitLab's routes.
    pub fn explain(&self, path: &str, decision: &Decision<'_>) -> String {
        let Some((route, spanning)) = self.route_of(path) else {
            return "null".to_string();
        };
        let entry = self.table.entry_for(&route.template_source);
        let owners = route
            .template
            .parameters()
            .into_iter()
            .any(|p| self.table.owners.iter().any(|o| o == p));
        let expected = match entry.map(|e| &e.claim) {
            Some(Claim::Owner { kind, param }) => route
                .template
                .capture(path, param, route.accepts_format, spanning)
                .map(|value| kind.expect(&value)),
            Some(Claim::None) => Some(Expected::None),
            None if owners => None,
            None => Some(Expected::None),
        };
        let sent = sent_claim(decision);
        let as_expected = match (&expected, &sent) {
            (Some(Expected::Claim { key, value }), Some((k, v))) => key == k && value == v,
            (Some(Expected::None), None) => true,
            _ => false,
        };
        let expect = match &expected {
            Some(Expected::Claim { key, value }) => {
                format!("{{{}:{}}}", json_str(key), json_str(value))
            }
            _ => "null".to_string(),
        };
        let note = match (entry, expected.is_some()) {
            (Some(e), _) if !e.note.is_empty() => json_str(&e.note),
            (None, false) => json_str("unclassified: an owner parameter that no entry covers"),
            (None, true) => json_str("no owner parameter: no claim"),
            _ => "null".to_string(),
        };
        format!(
            r#"{{"template":{},"entry":{},"line":{},"expect":{expect},"as_expected":{as_expected},"note":{note}}}"#,
            json_str(&route.template_source),
            entry.map_or("null".to_string(), |e| json_str(&e.pattern)),
            entry.map_or("null".to_string(), |e| e.line.to_string()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use router_core::{RequestParts, Ruleset};
    use serde_json::Value;

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    fn shipped() -> (Lookup, Ruleset) {
        let rules = repo().join("rules");
        let dir = RulesDir::new(Some(rules.display().to_string()));
        let lookup = Lookup::load(&dir, None, None)
            .unwrap()
            .expect("the shipped files");
        let json = std::fs::read_to_string(rules.join("cells.json")).unwrap();
        (lookup, Ruleset::from_json("cells", &json).unwrap())
    }

    /// The route table's cases that name the GitLab route and table entry
    /// deciding them (`expect.gitlab_route`) are what `explain` finds.
    #[test]
    fn route_table_cases_name_the_entry_that_decides_them() {
        let (lookup, cells) = shipped();
        let cases: Vec<Value> = serde_json::from_str(
            &std::fs::read_to_string(repo().join("tests/rules/cells.cases.json")).unwrap(),
        )
        .unwrap();
        let mut checked = 0;
        for case in &cases {
            let Some(want) = case["expect"].get("gitlab_route") else {
                continue;
            };
            let request = RequestParts::from_url(
                case["request"]["method"].as_str().unwrap(),
                case["request"]["url"].as_str().unwrap(),
            )
            .unwrap();
            let got: Value =
                serde_json::from_str(&lookup.explain(&request.path, &cells.decide(&request)))
                    .unwrap();
            for key in ["template", "entry"] {
                assert_eq!(got[key], want[key], "{}: {key}: {got}", case["name"]);
            }
            assert_eq!(got["as_expected"], true, "{}: {got}", case["name"]);
            checked += 1;
        }
        assert!(checked >= 40, "{checked}");
    }

    #[test]
    fn explain_says_what_the_table_expects() {
        let (lookup, cells) = shipped();
        let explain = |url: &str| -> Value {
            let request = RequestParts::from_url("GET", url).unwrap();
            serde_json::from_str(&lookup.explain(&request.path, &cells.decide(&request))).unwrap()
        };
        let v = explain("https://gitlab.com/api/v4/projects/300/issues?state=opened");
        assert_eq!(v["template"], "/api/:version/projects/:id/issues");
        assert_eq!(v["entry"], "/api/:version/projects/:id/**");
        assert_eq!(v["expect"], serde_json::json!({"projectId": "300"}));
        assert_eq!(v["as_expected"], true);
        let v = explain("https://gitlab.com/admin/users/5");
        assert_eq!(v["expect"], Value::Null);
        assert!(v["note"].as_str().unwrap().contains("Admin area"), "{v}");
        // A path that is no GitLab route: a reserved first segment that no
        // route under it has.
        let request = RequestParts::from_url("GET", "https://gitlab.com/-/nothing/here").unwrap();
        assert_eq!(
            lookup.explain(&request.path, &cells.decide(&request)),
            "null"
        );
    }
}
