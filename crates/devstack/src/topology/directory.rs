//! The cell directory and the classify logic of `POST /v1/classify`
//! (SPEC §5): pure, no I/O, unit-tested here.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use serde_json::{Map, Value};

use router_core::question::CLAIM_TYPES;

use crate::config::{normalize_route, Config};

#[derive(Debug, Clone)]
pub struct Cell {
    pub id: u64,
    pub address: String,
    pub registry_address: Option<String>,
    pub session_prefix: String,
    pub cache_tags: Vec<String>,
    /// Normalized route entries.
    pub routes: Vec<String>,
    pub organization_paths: HashSet<String>,
    pub organization_ids: HashSet<u64>,
    pub project_ids: HashSet<u64>,
    pub namespace_ids: HashSet<u64>,
    pub usernames: HashSet<String>,
    /// Normalized redirect route entries.
    pub redirect_routes: Vec<String>,
    pub user_ids: HashSet<u64>,
    pub snippet_ids: HashSet<u64>,
}

#[derive(Debug, Clone)]
pub struct Directory {
    pub cells: Vec<Cell>,
}

/// What a valid classify request resolved to.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Found {
        cell: usize,
        matched: Value,
        type_tag: String,
    },
    NotFound {
        message: String,
        type_tags: Vec<String>,
    },
}

/// The claim keys classify accepts: the camelCase names of the core's
/// [`CLAIM_TYPES`], so the router and the dev stack cannot disagree. Keys
/// ending in `Id` take decimal ids; keys with no directory data here
/// (`email`, `sshKey`, …) are valid and answer not found.
fn claim_keys() -> impl Iterator<Item = &'static str> {
    CLAIM_TYPES.iter().map(|(_, camel)| *camel)
}

enum ClaimValue {
    Text(String),
    Id(u64),
}

impl Directory {
    /// Builds the directory; `bound` gives the real address of demo cells
    /// started by `devstack up`, used for cells without an `address`.
    pub fn new(cfg: &Config, bound: &HashMap<u64, SocketAddr>) -> Result<Directory, String> {
        let mut cells = Vec::new();
        for c in &cfg.cells {
            let address = match (&c.address, bound.get(&c.id)) {
                (Some(a), _) => a.clone(),
                (None, Some(b)) => b.to_string(),
                (None, None) => {
                    return Err(format!(
                        "cell {} has no address (only `devstack up` may omit it, for cells with `listen`)",
                        c.id
                    ))
                }
            };
            cells.push(Cell {
                id: c.id,
                address,
                registry_address: c.registry_address.clone(),
                session_prefix: c.session_prefix(),
                cache_tags: c.cache_tags.clone(),
                routes: c.routes.iter().map(|r| normalize_route(r)).collect(),
                organization_paths: c
                    .organization_paths
                    .iter()
                    .map(|s| s.to_lowercase())
                    .collect(),
                organization_ids: c.organization_ids.iter().copied().collect(),
                project_ids: c.project_ids.iter().copied().collect(),
                namespace_ids: c.namespace_ids.iter().copied().collect(),
                usernames: c.usernames.iter().map(|s| s.to_lowercase()).collect(),
                redirect_routes: c
                    .redirect_routes
                    .iter()
                    .map(|r| normalize_route(r))
                    .collect(),
                user_ids: c.user_ids.iter().copied().collect(),
                snippet_ids: c.snippet_ids.iter().copied().collect(),
            });
        }
        Ok(Directory { cells })
    }

    /// Classifies a parsed request body. `Err` is a malformed request (400).
    pub fn classify(&self, body: &Value) -> Result<Answer, String> {
        let obj = body
            .as_object()
            .ok_or("the request body must be a JSON object")?;
        for key in obj.keys() {
            if !matches!(key.as_str(), "type" | "value" | "claims" | "target") {
                return Err(format!("unknown field {key:?}"));
            }
        }
        match obj.get("target") {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if t == "web" || t == "registry" => {}
            Some(other) => {
                return Err(format!(
                    "target must be \"web\" or \"registry\", got {other}"
                ))
            }
        }
        match (obj.get("type"), obj.get("claims")) {
            (Some(_), Some(_)) => Err("give either \"type\" or \"claims\", not both".into()),
            (None, None) => Err("missing \"type\" or \"claims\"".into()),
            (Some(t), None) => self.classify_typed(t, obj.get("value")),
            (None, Some(c)) => {
                if obj.contains_key("value") {
                    return Err("\"value\" is only valid with \"type\"".into());
                }
                self.classify_claims(c)
            }
        }
    }

    fn classify_typed(&self, t: &Value, value: Option<&Value>) -> Result<Answer, String> {
        let t = t.as_str().ok_or("\"type\" must be a string")?;
        let type_tag = format!("classify-{}", t.to_lowercase().replace('_', "-"));
        let value_str = || -> Result<&str, String> {
            match value {
                Some(Value::String(s)) => Ok(s.as_str()),
                Some(other) => Err(format!("{t}: \"value\" must be a string, got {other}")),
                None => Err(format!("{t}: missing \"value\"")),
            }
        };
        let mut matched = Map::new();
        matched.insert("type".into(), Value::String(t.to_string()));
        if let Some(v) = value {
            matched.insert("value".into(), v.clone());
        }
        let found = |cell: Option<usize>, what: String| -> Answer {
            match cell {
                Some(cell) => Answer::Found {
                    cell,
                    matched: Value::Object(matched.clone()),
                    type_tag: type_tag.clone(),
                },
                None => Answer::NotFound {
                    message: what,
                    type_tags: vec![type_tag.clone()],
                },
            }
        };
        match t {
            "FIRST_CELL" => Ok(found(
                if self.cells.is_empty() { None } else { Some(0) },
                "FIRST_CELL: the topology has no cells".into(),
            )),
            "SESSION_PREFIX" => {
                let v = value_str()?;
                Ok(found(
                    self.cells.iter().position(|c| c.session_prefix == v),
                    format!("SESSION_PREFIX: no cell has session prefix {v:?}"),
                ))
            }
            "CELL_ID" => {
                let v = value_str()?;
                let id: u64 = v
                    .parse()
                    .map_err(|_| format!("CELL_ID: value must be a decimal cell id, got {v:?}"))?;
                Ok(found(
                    self.cells.iter().position(|c| c.id == id),
                    format!("CELL_ID: no cell has id {id}"),
                ))
            }
            other => Err(format!(
                "unknown classify type {other:?} (expected FIRST_CELL, SESSION_PREFIX or CELL_ID)"
            )),
        }
    }

    fn classify_claims(&self, claims: &Value) -> Result<Answer, String> {
        let list = claims.as_array().ok_or("\"claims\" must be an array")?;
        if list.is_empty() {
            return Err("\"claims\" must not be empty".into());
        }
        // Validate every claim before matching any.
        let mut parsed = Vec::with_capacity(list.len());
        for (i, claim) in list.iter().enumerate() {
            let obj = claim
                .as_object()
                .ok_or_else(|| format!("claims[{i}] must be an object"))?;
            let keys = || claim_keys().collect::<Vec<_>>();
            if obj.len() != 1 {
                return Err(format!(
                    "claims[{i}] must have exactly one key among {:?}",
                    keys()
                ));
            }
            let (key, value) = obj.iter().next().expect("one entry");
            let Some(key) = claim_keys().find(|k| k == key) else {
                return Err(format!(
                    "claims[{i}]: unknown claim key {key:?} (expected one of {:?})",
                    keys()
                ));
            };
            let v = if key.ends_with("Id") {
                let id = match value {
                    Value::String(s) => s.parse::<u64>().ok(),
                    Value::Number(n) => n.as_u64(),
                    _ => None,
                };
                ClaimValue::Id(id.ok_or_else(|| {
                    format!("claims[{i}]: {key} must be a decimal id, got {value}")
                })?)
            } else {
                ClaimValue::Text(
                    value
                        .as_str()
                        .ok_or_else(|| format!("claims[{i}]: {key} must be a string"))?
                        .to_string(),
                )
            };
            parsed.push((key, v, claim));
        }
        for (key, value, claim) in &parsed {
            if let Some(cell) = self.match_claim(key, value) {
                return Ok(Answer::Found {
                    cell,
                    matched: (*claim).clone(),
                    type_tag: claim_tag(key),
                });
            }
        }
        let mut type_tags: Vec<String> = Vec::new();
        for (key, _, _) in &parsed {
            let tag = claim_tag(key);
            if !type_tags.contains(&tag) {
                type_tags.push(tag);
            }
        }
        let described: Vec<String> = list.iter().map(|c| c.to_string()).collect();
        Ok(Answer::NotFound {
            message: format!("no cell owns any of the claims {}", described.join(", ")),
            type_tags,
        })
    }

    fn match_claim(&self, key: &str, value: &ClaimValue) -> Option<usize> {
        match (key, value) {
            ("route", ClaimValue::Text(route)) => self.match_route(route, |c| &c.routes),
            ("redirectRoute", ClaimValue::Text(route)) => {
                self.match_route(route, |c| &c.redirect_routes)
            }
            ("organizationPath", ClaimValue::Text(p)) => {
                let p = normalize_route(p);
                self.cells
                    .iter()
                    .position(|c| c.organization_paths.contains(&p))
            }
            ("username", ClaimValue::Text(u)) => {
                let u = u.to_lowercase();
                self.cells.iter().position(|c| c.usernames.contains(&u))
            }
            ("organizationId", ClaimValue::Id(id)) => self
                .cells
                .iter()
                .position(|c| c.organization_ids.contains(id)),
            ("projectId", ClaimValue::Id(id)) => {
                self.cells.iter().position(|c| c.project_ids.contains(id))
            }
            ("namespaceId", ClaimValue::Id(id)) => {
                self.cells.iter().position(|c| c.namespace_ids.contains(id))
            }
            ("userId", ClaimValue::Id(id)) => {
                self.cells.iter().position(|c| c.user_ids.contains(id))
            }
            ("snippetId", ClaimValue::Id(id)) => {
                self.cells.iter().position(|c| c.snippet_ids.contains(id))
            }
            _ => None,
        }
    }

    /// A route matches an entry equal to it or starting with `entry/`; the
    /// longest entry wins.
    fn match_route(&self, route: &str, entries: impl Fn(&Cell) -> &Vec<String>) -> Option<usize> {
        let route = normalize_route(route);
        if route.is_empty() {
            return None;
        }
        let mut best: Option<(usize, usize)> = None;
        for (i, cell) in self.cells.iter().enumerate() {
            for entry in entries(cell) {
                let hit = route == *entry
                    || (route.len() > entry.len()
                        && route.starts_with(entry.as_str())
                        && route.as_bytes()[entry.len()] == b'/');
                if hit && best.is_none_or(|(_, len)| entry.len() > len) {
                    best = Some((i, entry.len()));
                }
            }
        }
        best.map(|(i, _)| i)
    }
}

/// What the learn endpoint (`GET /api/v4/internal/cells/learn`) answers
/// for a path: route learning's view of the same topology data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Learned {
    Found {
        /// The prefix (or, when `exact`, the path) the answer is for.
        path: String,
        /// Index into [`Directory::cells`].
        cell: usize,
        /// `routable` (a namespace or project) or `fixed` (the
        /// application's own routes).
        source: &'static str,
        exact: bool,
    },
    /// No cell owns the path; `prefix`: nor anything under this prefix
    /// (the path's first segment, when no route entry starts with it).
    NotFound { prefix: Option<String> },
}

impl Directory {
    /// Route learning for `path_info`: paths under `/-/` are fixed routes
    /// of the first cell, each exact; a reserved top-level route (`/api`,
    /// `/explore`, …) is a fixed prefix of the first cell; a namespace path
    /// is routable on the cell owning its longest route entry, answered
    /// with that entry's prefix in the request's own spelling, made deeper
    /// while another cell owns an entry under it (`gitlab-org` is cell 1's
    /// but `gitlab-org/cell2-moved` cell 2's: `/gitlab-org/www` is
    /// answered with the prefix `/gitlab-org/www`, not `/gitlab-org`). A
    /// path no cell owns is not found.
    pub fn learn(&self, path_info: &str) -> Learned {
        let path = path_info.trim_end_matches('/');
        let Some(rest) = path.strip_prefix('/') else {
            return Learned::NotFound { prefix: None };
        };
        let segments: Vec<&str> = rest.split('/').collect();
        let first = segments[0];
        if self.cells.is_empty() || first.is_empty() {
            return Learned::NotFound { prefix: None };
        }
        if first == "-" {
            return Learned::Found {
                path: path.to_string(),
                cell: 0,
                source: "fixed",
                exact: true,
            };
        }
        if router_core::select::reserved::is_reserved_top_level_route(first) {
            return Learned::Found {
                path: format!("/{first}"),
                cell: 0,
                source: "fixed",
                exact: false,
            };
        }
        // The namespace part: up to GitLab's `/-/` separator.
        let route_len = segments
            .iter()
            .position(|s| *s == "-")
            .unwrap_or(segments.len());
        let route = segments[..route_len].join("/");
        let Some((cell, entry)) = self.longest_route(&route) else {
            let below = format!("{}/", normalize_route(first));
            let owned_below = self
                .cells
                .iter()
                .any(|c| c.routes.iter().any(|r| r.starts_with(below.as_str())));
            return Learned::NotFound {
                prefix: (!owned_below).then(|| format!("/{first}")),
            };
        };
        let mut depth = entry.split('/').count();
        let others_below = |prefix: &str| {
            let below = format!("{prefix}/");
            self.cells
                .iter()
                .enumerate()
                .any(|(i, c)| i != cell && c.routes.iter().any(|r| r.starts_with(below.as_str())))
        };
        while others_below(&normalize_route(&segments[..depth].join("/"))) {
            if depth == route_len {
                // Nothing deeper to answer with: this path only.
                return Learned::Found {
                    path: path.to_string(),
                    cell,
                    source: "routable",
                    exact: true,
                };
            }
            depth += 1;
        }
        Learned::Found {
            path: format!("/{}", segments[..depth].join("/")),
            cell,
            source: "routable",
            exact: false,
        }
    }

    /// The cell and entry (normalized) of the longest route entry `route`
    /// is equal to or under.
    fn longest_route(&self, route: &str) -> Option<(usize, String)> {
        let route = normalize_route(route);
        let i = self.match_route(&route, |c| &c.routes)?;
        self.cells[i]
            .routes
            .iter()
            .filter(|e| route == **e || route.starts_with(&format!("{e}/")))
            .max_by_key(|e| e.len())
            .map(|e| (i, e.clone()))
    }
}

/// `organizationPath` → `classify-claim-organization-path`.
impl Directory {
    /// Moves claims to the cell `to` (the admin API's `POST /_move`, as the
    /// Organization Mover flips an organization's claims): `{"to": 3,
    /// "routes": [..], "organization_paths": [..], "organization_ids": [..],
    /// "project_ids": [..], "namespace_ids": [..]}`. Each value is taken
    /// from whichever cell holds it and given to `to`. All or nothing.
    pub fn move_claims(&mut self, patch: &Value) -> Result<Value, String> {
        let Value::Object(fields) = patch else {
            return Err("move: expected a JSON object".into());
        };
        const LISTS: [&str; 5] = [
            "routes",
            "organization_paths",
            "organization_ids",
            "project_ids",
            "namespace_ids",
        ];
        if let Some(unknown) = fields
            .keys()
            .find(|k| *k != "to" && !LISTS.contains(&k.as_str()))
        {
            return Err(format!("move: unknown field {unknown:?}"));
        }
        let to_id = fields
            .get("to")
            .and_then(Value::as_u64)
            .ok_or("move: \"to\" must be a cell id")?;
        let to = self
            .cells
            .iter()
            .position(|c| c.id == to_id)
            .ok_or_else(|| format!("move: no cell {to_id}"))?;
        let texts = |name: &str| -> Result<Vec<String>, String> {
            match fields.get(name) {
                None => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| format!("move: {name}: {v} is not a string"))
                    })
                    .collect(),
                Some(other) => Err(format!("move: {name}: {other} is not a list")),
            }
        };
        let ids = |name: &str| -> Result<Vec<u64>, String> {
            match fields.get(name) {
                None => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| {
                        v.as_u64()
                            .ok_or_else(|| format!("move: {name}: {v} is not an id"))
                    })
                    .collect(),
                Some(other) => Err(format!("move: {name}: {other} is not a list")),
            }
        };
        let routes: Vec<String> = texts("routes")?
            .iter()
            .map(|r| normalize_route(r))
            .collect();
        let org_paths: Vec<String> = texts("organization_paths")?
            .iter()
            .map(|p| p.to_lowercase())
            .collect();
        let (org_ids, project_ids, namespace_ids) = (
            ids("organization_ids")?,
            ids("project_ids")?,
            ids("namespace_ids")?,
        );
        for (i, cell) in self.cells.iter_mut().enumerate() {
            let here = i == to;
            for r in &routes {
                cell.routes.retain(|e| e != r);
                if here {
                    cell.routes.push(r.clone());
                }
            }
            for p in &org_paths {
                cell.organization_paths.remove(p);
                if here {
                    cell.organization_paths.insert(p.clone());
                }
            }
            for (set, list) in [
                (&mut cell.organization_ids, &org_ids),
                (&mut cell.project_ids, &project_ids),
                (&mut cell.namespace_ids, &namespace_ids),
            ] {
                for id in list {
                    set.remove(id);
                    if here {
                        set.insert(*id);
                    }
                }
            }
        }
        Ok(serde_json::json!({
            "to": to_id,
            "routes": routes,
            "organization_paths": org_paths,
            "organization_ids": org_ids,
            "project_ids": project_ids,
            "namespace_ids": namespace_ids,
        }))
    }
}

fn claim_tag(key: &str) -> String {
    let mut out = String::from("classify-claim-");
    for ch in key.chars() {
        if ch.is_ascii_uppercase() {
            out.push('-');
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dir() -> Directory {
        let cfg = Config::parse(include_str!("../../../../devstack/topology.toml")).unwrap();
        Directory::new(&cfg, &HashMap::new()).unwrap()
    }

    #[test]
    fn learning_answers_prefixes_fixed_routes_and_not_found() {
        let d = dir();
        let found = |p: &str| match d.learn(p) {
            Learned::Found {
                path,
                cell,
                source,
                exact,
            } => Some((path, d.cells[cell].id, source, exact)),
            Learned::NotFound { .. } => None,
        };
        assert_eq!(
            found("/cell2-group/demo/-/issues"),
            Some(("/cell2-group".into(), 2, "routable", false))
        );
        assert_eq!(
            found("/Cell3-Group/x"),
            Some(("/Cell3-Group".into(), 3, "routable", false))
        );
        // gitlab-org is cell 1's, gitlab-org/cell2-moved cell 2's.
        assert_eq!(
            found("/gitlab-org/gitlab/-/issues"),
            Some(("/gitlab-org/gitlab".into(), 1, "routable", false))
        );
        assert_eq!(
            found("/gitlab-org/cell2-moved/app"),
            Some(("/gitlab-org/cell2-moved".into(), 2, "routable", false))
        );
        assert_eq!(
            found("/gitlab-org"),
            Some(("/gitlab-org".into(), 1, "routable", true))
        );
        assert_eq!(
            found("/-/profile"),
            Some(("/-/profile".into(), 1, "fixed", true))
        );
        assert_eq!(
            found("/explore/projects"),
            Some(("/explore".into(), 1, "fixed", false))
        );
        assert_eq!(found("/nobody/app"), None);
        assert_eq!(
            d.learn("/nobody/app/-/tree"),
            Learned::NotFound {
                prefix: Some("/nobody".into())
            }
        );
        assert_eq!(found("/"), None);
        assert_eq!(found("relative"), None);
    }

    fn cell_of(a: Answer) -> Option<u64> {
        match a {
            Answer::Found { cell, .. } => Some(dir().cells[cell].id),
            Answer::NotFound { .. } => None,
        }
    }

    #[test]
    fn typed() {
        let d = dir();
        let c = |v: Value| cell_of(d.classify(&v).unwrap());
        assert_eq!(c(json!({"type": "FIRST_CELL"})), Some(1));
        assert_eq!(
            c(json!({"type": "SESSION_PREFIX", "value": "cell-3"})),
            Some(3)
        );
        assert_eq!(
            c(json!({"type": "SESSION_PREFIX", "value": "cell-9"})),
            None
        );
        assert_eq!(
            c(json!({"type": "CELL_ID", "value": "2", "target": "registry"})),
            Some(2)
        );
        assert_eq!(c(json!({"type": "CELL_ID", "value": "11"})), None);
        assert!(d
            .classify(&json!({"type": "CELL_ID", "value": "x"}))
            .is_err());
        assert!(d.classify(&json!({"type": "CELL_ID", "value": 2})).is_err());
        assert!(d.classify(&json!({"type": "SESSION_PREFIX"})).is_err());
        assert!(d.classify(&json!({"type": "BOGUS"})).is_err());
        assert!(d
            .classify(&json!({"type": "FIRST_CELL", "target": "x"}))
            .is_err());
        assert!(d.classify(&json!([])).is_err());
        assert!(d.classify(&json!({})).is_err());
    }

    #[test]
    fn claims() {
        let d = dir();
        let c = |v: Value| cell_of(d.classify(&v).unwrap());
        assert_eq!(
            c(json!({"claims": [{"route": "gitlab-org/gitlab"}]})),
            Some(1)
        );
        assert_eq!(c(json!({"claims": [{"route": "gitlab-org"}]})), Some(1));
        assert_eq!(c(json!({"claims": [{"route": "gitlab-orgx"}]})), None);
        assert_eq!(
            c(json!({"claims": [{"route": "gitlab-org/cell2-moved/sub"}]})),
            Some(2)
        );
        assert_eq!(c(json!({"claims": [{"route": "ACME/Proj"}]})), Some(2));
        assert_eq!(
            c(json!({"claims": [{"route": "nope"}, {"projectId": "300"}]})),
            Some(3)
        );
        assert_eq!(c(json!({"claims": [{"namespaceId": 20}]})), Some(2));
        assert_eq!(c(json!({"claims": [{"username": "Cell3-User"}]})), Some(3));
        assert_eq!(
            c(json!({"claims": [{"organizationPath": "acme-org"}]})),
            Some(2)
        );
        assert_eq!(c(json!({"claims": [{"organizationId": "3"}]})), Some(3));
        assert!(d.classify(&json!({"claims": []})).is_err());
        assert!(d.classify(&json!({"claims": [{"bogus": "x"}]})).is_err());
        assert!(d
            .classify(&json!({"claims": [{"route": "a", "username": "b"}]}))
            .is_err());
        assert!(d
            .classify(&json!({"claims": [{"projectId": "x1"}]}))
            .is_err());
        match d
            .classify(&json!({"claims": [{"route": "zz"}, {"projectId": 9}]}))
            .unwrap()
        {
            Answer::NotFound { type_tags, .. } => assert_eq!(
                type_tags,
                vec!["classify-claim-route", "classify-claim-project-id"]
            ),
            other => panic!("{other:?}"),
        }
    }

    /// Every claim key of the core is accepted: a value gets an answer
    /// (found or not found, tagged with its own claim tag), never a 400.
    #[test]
    fn every_core_claim_key_is_accepted() {
        let d = dir();
        assert_eq!(CLAIM_TYPES.len(), 16);
        for (upper, key) in CLAIM_TYPES {
            let value = if key.ends_with("Id") {
                json!("1")
            } else {
                json!("some-value")
            };
            let answer = d
                .classify(&json!({"claims": [{*key: value}]}))
                .unwrap_or_else(|e| panic!("{upper} ({key}) rejected: {e}"));
            match answer {
                Answer::Found { type_tag, .. } => assert_eq!(type_tag, claim_tag(key)),
                Answer::NotFound { type_tags, .. } => assert_eq!(type_tags, vec![claim_tag(key)]),
            }
        }
    }

    #[test]
    fn new_claims() {
        let d = dir();
        let c = |v: Value| cell_of(d.classify(&v).unwrap());
        assert_eq!(c(json!({"claims": [{"userId": 1}]})), Some(1));
        assert_eq!(c(json!({"claims": [{"userId": "20"}]})), Some(2));
        assert_eq!(c(json!({"claims": [{"userId": "30"}]})), Some(3));
        assert_eq!(c(json!({"claims": [{"userId": "21"}]})), None);
        assert_eq!(c(json!({"claims": [{"snippetId": "1"}]})), Some(1));
        assert_eq!(c(json!({"claims": [{"snippetId": 200}]})), Some(2));
        assert_eq!(c(json!({"claims": [{"snippetId": "300"}]})), Some(3));
        assert_eq!(c(json!({"claims": [{"snippetId": "301"}]})), None);
        assert_eq!(
            c(json!({"claims": [{"redirectRoute": "Cell2-Old-Group/app"}]})),
            Some(2)
        );
        // A redirect route entry is not a route, and the other way round.
        assert_eq!(c(json!({"claims": [{"route": "cell2-old-group"}]})), None);
        assert_eq!(
            c(json!({"claims": [{"redirectRoute": "cell2-group"}]})),
            None
        );
        assert_eq!(c(json!({"claims": [{"email": "a@example.com"}]})), None);
        assert!(d.classify(&json!({"claims": [{"userId": "x"}]})).is_err());
        assert!(d.classify(&json!({"claims": [{"groupId": "1"}]})).is_err());
        assert!(d.classify(&json!({"claims": [{"email": 1}]})).is_err());
    }

    #[test]
    fn claims_move_between_cells() {
        let mut d = dir();
        let route = json!({"claims": [{"route": "cell2-group/app"}]});
        assert_eq!(cell_of(d.classify(&route).unwrap()), Some(2));
        d.move_claims(&json!({"to": 3, "routes": ["cell2-group"], "project_ids": [200]}))
            .unwrap();
        assert_eq!(cell_of(d.classify(&route).unwrap()), Some(3));
        let project = json!({"claims": [{"projectId": 200}]});
        assert_eq!(cell_of(d.classify(&project).unwrap()), Some(3));
        for bad in [
            json!({"to": 9, "routes": ["x"]}),
            json!({"routes": ["x"]}),
            json!({"to": 3, "colour": ["x"]}),
            json!({"to": 3, "project_ids": ["x"]}),
        ] {
            assert!(d.move_claims(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tags() {
        assert_eq!(
            claim_tag("organizationPath"),
            "classify-claim-organization-path"
        );
        assert_eq!(claim_tag("route"), "classify-claim-route");
    }
}
