//! The Topology Service configuration file (TOML), shaped like the real
//! Topology Service's `config.toml`. See `devstack/topology.toml` for a
//! commented example.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use serde::Deserialize;

pub const DEFAULT_TOPOLOGY_LISTEN: &str = "127.0.0.1:9096";
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:0";

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub topology: TopologySection,
    #[serde(default)]
    pub cells: Vec<CellConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySection {
    /// Address of the classify API (`--listen` overrides it).
    pub listen: Option<String>,
    /// Address of the operator listener serving `/_stats` and `/_faults`
    /// (`--admin-listen` overrides it). Default: port 0.
    pub admin_listen: Option<String>,
    /// `Cache-Control` sent on 200 answers.
    #[serde(default = "default_cache_control")]
    pub cache_control: String,
    /// `Cache-Control` sent on 404 answers.
    #[serde(default = "default_not_found_cache_control")]
    pub not_found_cache_control: String,
    /// When both are set, `POST /v1/classify` requires the headers
    /// `CF-Access-Client-Id` / `CF-Access-Client-Secret` to match (else 403).
    pub access_client_id: Option<String>,
    pub access_client_secret: Option<String>,
}

impl Default for TopologySection {
    fn default() -> Self {
        TopologySection {
            listen: None,
            admin_listen: None,
            cache_control: default_cache_control(),
            not_found_cache_control: default_not_found_cache_control(),
            access_client_id: None,
            access_client_secret: None,
        }
    }
}

fn default_cache_control() -> String {
    "max-age=60".to_string()
}

fn default_not_found_cache_control() -> String {
    "max-age=10".to_string()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellConfig {
    pub id: u64,
    /// `host:port` the router proxies to. Optional only for `devstack up`
    /// cells that have a `listen` address: then the real bound address is used.
    pub address: Option<String>,
    pub registry_address: Option<String>,
    /// Default: `cell-<id>`.
    pub session_prefix: Option<String>,
    /// Where `devstack up` starts this cell's demo server (optional).
    pub listen: Option<String>,
    #[serde(default)]
    pub cache_tags: Vec<String>,
    #[serde(default)]
    pub routes: Vec<String>,
    #[serde(default)]
    pub organization_paths: Vec<String>,
    #[serde(default)]
    pub organization_ids: Vec<u64>,
    #[serde(default)]
    pub project_ids: Vec<u64>,
    #[serde(default)]
    pub namespace_ids: Vec<u64>,
    #[serde(default)]
    pub usernames: Vec<String>,
    /// Old paths of renamed namespaces (`redirectRoute` claims), matched
    /// like `routes`.
    #[serde(default)]
    pub redirect_routes: Vec<String>,
    #[serde(default)]
    pub user_ids: Vec<u64>,
    #[serde(default)]
    pub snippet_ids: Vec<u64>,
    /// Repositories (`group/project`, without `.git`) the demo cell started
    /// by `devstack up` creates and serves over Git smart HTTP.
    #[serde(default)]
    pub git_repositories: Vec<String>,
}

impl CellConfig {
    pub fn session_prefix(&self) -> String {
        self.session_prefix
            .clone()
            .unwrap_or_else(|| format!("cell-{}", self.id))
    }
}

impl Config {
    pub fn load(path: &str) -> Result<Config, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read config {path}: {e}"))?;
        Config::parse(&text).map_err(|e| format!("config {path}: {e}"))
    }

    pub fn parse(text: &str) -> Result<Config, String> {
        let cfg: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Structural checks that do not depend on how the config is used.
    pub fn validate(&self) -> Result<(), String> {
        let mut ids = HashSet::new();
        let mut prefixes = HashSet::new();
        let mut routes: HashMap<(&str, String), u64> = HashMap::new();
        let mut git_repositories = HashSet::new();
        let mut keyed: HashMap<(&str, String), u64> = HashMap::new();
        for cell in &self.cells {
            if !ids.insert(cell.id) {
                return Err(format!("duplicate cell id {}", cell.id));
            }
            let prefix = cell.session_prefix();
            if prefix.is_empty() {
                return Err(format!("cell {}: empty session_prefix", cell.id));
            }
            if !prefixes.insert(prefix.clone()) {
                return Err(format!("duplicate session_prefix {prefix:?}"));
            }
            if let Some(l) = &cell.listen {
                parse_listen(l).map_err(|e| format!("cell {}: listen: {e}", cell.id))?;
            }
            for (kind, entries) in [
                ("route", &cell.routes),
                ("redirect_route", &cell.redirect_routes),
            ] {
                for r in entries {
                    let norm = normalize_route(r);
                    if norm.is_empty() {
                        return Err(format!("cell {}: empty {kind} entry", cell.id));
                    }
                    if let Some(other) = routes.insert((kind, norm.clone()), cell.id) {
                        return Err(format!(
                            "{kind} {norm:?} is owned by both cell {other} and cell {}",
                            cell.id
                        ));
                    }
                }
            }
            for repo in &cell.git_repositories {
                validate_git_repository(repo)
                    .map_err(|e| format!("cell {}: git_repositories: {e}", cell.id))?;
                if !git_repositories.insert(repo.to_lowercase()) {
                    return Err(format!("git repository {repo:?} is listed twice"));
                }
            }
            let lists: [(&str, Vec<String>); 7] = [
                (
                    "organization_paths",
                    cell.organization_paths
                        .iter()
                        .map(|s| s.to_lowercase())
                        .collect(),
                ),
                (
                    "organization_ids",
                    cell.organization_ids.iter().map(u64::to_string).collect(),
                ),
                (
                    "project_ids",
                    cell.project_ids.iter().map(u64::to_string).collect(),
                ),
                (
                    "namespace_ids",
                    cell.namespace_ids.iter().map(u64::to_string).collect(),
                ),
                (
                    "usernames",
                    cell.usernames.iter().map(|s| s.to_lowercase()).collect(),
                ),
                (
                    "user_ids",
                    cell.user_ids.iter().map(u64::to_string).collect(),
                ),
                (
                    "snippet_ids",
                    cell.snippet_ids.iter().map(u64::to_string).collect(),
                ),
            ];
            for (kind, values) in lists {
                for v in values {
                    if let Some(other) = keyed.insert((kind, v.clone()), cell.id) {
                        return Err(format!(
                            "{kind} entry {v:?} is owned by both cell {other} and cell {}",
                            cell.id
                        ));
                    }
                }
            }
        }
        if let Some(l) = &self.topology.listen {
            parse_listen(l).map_err(|e| format!("topology.listen: {e}"))?;
        }
        if let Some(l) = &self.topology.admin_listen {
            parse_listen(l).map_err(|e| format!("topology.admin_listen: {e}"))?;
        }
        if self.topology.access_client_id.is_some() != self.topology.access_client_secret.is_some()
        {
            return Err(
                "topology.access_client_id and access_client_secret must be set together"
                    .to_string(),
            );
        }
        Ok(())
    }
}

/// A repository name is `namespace/…/project`: at least two segments of
/// ASCII letters, digits, `.`, `_` and `-`, none starting with `.`, and no
/// `.git` suffix (the cell adds it). This keeps the name safe as a path
/// under the cell's repository root.
fn validate_git_repository(repo: &str) -> Result<(), String> {
    let segments: Vec<&str> = repo.split('/').collect();
    let ok = segments.len() >= 2
        && !repo.to_ascii_lowercase().ends_with(".git")
        && segments.iter().all(|s| {
            !s.is_empty()
                && !s.starts_with('.')
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{repo:?} is not a repository path like \"group/project\" (no .git suffix)"
        ))
    }
}

/// Route entries and route claims are compared without surrounding slashes
/// and case-insensitively (GitLab paths are case-insensitive).
pub fn normalize_route(r: &str) -> String {
    r.trim_matches('/').to_lowercase()
}

/// Parses a listen address and insists on loopback: the dev stack never
/// listens on anything else.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    let addr: SocketAddr = if let Some(port) = s.strip_prefix("localhost:") {
        let port: u16 = port.parse().map_err(|_| format!("bad port in {s:?}"))?;
        SocketAddr::from(([127, 0, 0, 1], port))
    } else {
        s.parse()
            .map_err(|_| format!("{s:?} is not an IP:port address"))?
    };
    if !addr.ip().is_loopback() {
        return Err(format!(
            "{addr} is not a loopback address: the dev stack binds to loopback only"
        ));
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_config_parses() {
        let text = include_str!("../../../devstack/topology.toml");
        let cfg = Config::parse(text).unwrap();
        assert_eq!(cfg.cells.len(), 3);
        assert_eq!(cfg.cells[0].session_prefix(), "cell-1");
        assert_eq!(cfg.topology.listen.as_deref(), Some("127.0.0.1:9096"));
        for c in &cfg.cells {
            assert!(c.address.is_some());
            assert_eq!(c.listen, c.address);
        }
        let ids: Vec<(Vec<u64>, Vec<u64>)> = cfg
            .cells
            .iter()
            .map(|c| (c.user_ids.clone(), c.snippet_ids.clone()))
            .collect();
        assert_eq!(
            ids,
            [
                (vec![1], vec![1]),
                (vec![20], vec![200]),
                (vec![30], vec![300])
            ]
        );
        assert_eq!(cfg.cells[1].git_repositories, ["cell2-group/demo"]);
        assert!(cfg.cells[0].git_repositories.is_empty());
        assert!(cfg.cells[2].git_repositories.is_empty());
    }

    #[test]
    fn rejects_duplicates_and_non_loopback() {
        assert!(Config::parse("[[cells]]\nid = 1\n[[cells]]\nid = 1\n").is_err());
        assert!(Config::parse(
            "[[cells]]\nid = 1\nroutes=[\"a\"]\n[[cells]]\nid = 2\nroutes=[\"A/\"]\n"
        )
        .is_err());
        assert!(Config::parse("[topology]\nlisten = \"0.0.0.0:1\"\n").is_err());
        assert!(Config::parse("[topology]\nlisten = \"localhost:1\"\n").is_ok());
        assert!(Config::parse("[topology]\nbogus = 1\n").is_err());
        assert!(Config::parse("[topology]\naccess_client_id = \"x\"\n").is_err());
        assert!(Config::parse(
            "[[cells]]\nid = 1\nuser_ids=[5]\n[[cells]]\nid = 2\nuser_ids=[5]\n"
        )
        .is_err());
        assert!(Config::parse(
            "[[cells]]\nid = 1\nredirect_routes=[\"old\"]\n[[cells]]\nid = 2\nredirect_routes=[\"OLD/\"]\n"
        )
        .is_err());
    }

    #[test]
    fn git_repository_names() {
        let cfg = |repo: &str| {
            Config::parse(&format!(
                "[[cells]]\nid = 1\ngit_repositories = [{repo:?}]\n"
            ))
        };
        assert!(cfg("cell2-group/demo").is_ok());
        assert!(cfg("a/b/c_d.e-f").is_ok());
        for bad in [
            "demo", "a/b.git", "a/../b", "/a/b", "a/b/", "a//b", "a/.b", "a/b c", "",
        ] {
            assert!(cfg(bad).is_err(), "{bad:?}");
        }
        assert!(Config::parse(
            "[[cells]]\nid = 1\ngit_repositories=[\"a/b\"]\n[[cells]]\nid = 2\ngit_repositories=[\"A/b\"]\n"
        )
        .is_err());
    }
}
