//! The expectation table, `rules/route_claims.txt`: for every shape of
//! GitLab route template, the claim the router must send for a request to
//! it, or that it sends none and why. `rulesctl routes-check` takes its
//! expectations from here; `rulesctl explain` names the entry that decided
//! a path.
//!
//! A line is `PATTERN CLAIM [note]`. `PATTERN` is a template as GitLab's
//! snapshot writes it, matching that template only, or ending in `/**`,
//! matching it and every template under it (`P/…` or `P(…`). `CLAIM` is
//! `KIND(PARAMETER)`: the parameter whose value names the owner and how
//! the router reads it, or `none`, whose note (required) says why no claim
//! is sent. The first entry that matches a template decides it. The
//! `owners` line lists the parameter names that name an owner: a template
//! with one that no entry covers is unclassified.

use std::fmt;

use router_core::select::reserved::is_reserved_top_level_route;
use router_core::select::transform::{Output, TransformKind};

/// How a parameter's value names its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A namespace or project path: its first segment is the route.
    Route,
    /// A user name.
    Username,
    /// An organization's path.
    Organization,
    /// Numeric ids only; anything else is no claim.
    ProjectId,
    NamespaceId,
    UserId,
    SnippetId,
    OrganizationId,
    /// GitLab's API `:id` of a project: a numeric id, or a URL-encoded
    /// full path whose first segment is the route (a name without a
    /// namespace is no project: no claim).
    Project,
    /// The API `:id` of a group or namespace: a numeric id, or a
    /// (URL-encoded) path whose first segment is the route.
    Namespace,
    /// The API `:id` of a user: a numeric id, or a user name.
    User,
    /// An npm package name: `@scope/name` names the top-level namespace
    /// `scope`; an unscoped name is no claim.
    NpmScope,
    /// A Conan recipe's user: `group+project` names the top-level
    /// namespace `group`; a user without `+` is no claim.
    ConanUser,
}

const KINDS: &[(&str, Kind)] = &[
    ("route", Kind::Route),
    ("username", Kind::Username),
    ("organization", Kind::Organization),
    ("project_id", Kind::ProjectId),
    ("namespace_id", Kind::NamespaceId),
    ("user_id", Kind::UserId),
    ("snippet_id", Kind::SnippetId),
    ("organization_id", Kind::OrganizationId),
    ("project", Kind::Project),
    ("namespace", Kind::Namespace),
    ("user", Kind::User),
    ("npm_scope", Kind::NpmScope),
    ("conan_user", Kind::ConanUser),
];

impl Kind {
    pub fn name(self) -> &'static str {
        KINDS
            .iter()
            .find(|(_, k)| *k == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    /// Whether the router claims a *name* here (not only a numeric id), so
    /// a literal word GitLab routes at this position must be reserved.
    pub fn claims_names(self) -> bool {
        matches!(
            self,
            Kind::Route | Kind::Username | Kind::Organization | Kind::Namespace | Kind::User
        )
    }

    /// The claim a request whose owner parameter is `value` (as it stands
    /// in the path) must send.
    pub fn expect(self, value: &str) -> Expected {
        let numeric =
            !value.is_empty() && value.len() <= 19 && value.bytes().all(|b| b.is_ascii_digit());
        let claim = |key: &'static str, v: &str| Expected::Claim {
            key,
            value: v.to_string(),
        };
        let route_of = |path: &str| match path.split('/').next() {
            Some(top) if is_name(top) && !is_reserved_top_level_route(top) => {
                claim("route", &top.to_ascii_lowercase())
            }
            _ => Expected::None,
        };
        match self {
            Kind::Route => route_of(value),
            Kind::Username | Kind::Organization | Kind::User if !is_name(value) && !numeric => {
                Expected::None
            }
            Kind::Username => claim("username", &value.to_ascii_lowercase()),
            Kind::Organization => claim("organizationPath", &value.to_ascii_lowercase()),
            Kind::ProjectId if numeric => claim("projectId", value),
            Kind::NamespaceId if numeric => claim("namespaceId", value),
            Kind::UserId if numeric => claim("userId", value),
            Kind::SnippetId if numeric => claim("snippetId", value),
            Kind::OrganizationId if numeric => claim("organizationId", value),
            Kind::ProjectId
            | Kind::NamespaceId
            | Kind::UserId
            | Kind::SnippetId
            | Kind::OrganizationId => Expected::None,
            Kind::Project if numeric => claim("projectId", value),
            Kind::Project => match percent_decode(value) {
                Some(path) if path.contains('/') => route_of(&path),
                _ => Expected::None,
            },
            Kind::Namespace if numeric => claim("namespaceId", value),
            Kind::Namespace => percent_decode(value).map_or(Expected::None, |p| route_of(&p)),
            Kind::User if numeric => claim("userId", value),
            Kind::User => claim("username", &value.to_ascii_lowercase()),
            Kind::NpmScope => match percent_decode(value) {
                Some(name) => match name.strip_prefix('@').and_then(|n| n.split_once('/')) {
                    Some((scope, package)) if !scope.is_empty() && !package.is_empty() => {
                        route_of(scope)
                    }
                    _ => Expected::None,
                },
                None => Expected::None,
            },
            Kind::ConanUser => match value.split_once('+') {
                Some((group, _)) if !group.is_empty() => route_of(group),
                _ => Expected::None,
            },
        }
    }

    /// Values to send beside the gem's examples, so every way the router
    /// reads this kind is replayed (ids, encoded paths, upper case).
    pub fn samples(self, glob: bool) -> &'static [&'static str] {
        match self {
            Kind::Route | Kind::Username | Kind::Organization if glob => &["Gitlab-Org/Sub-Group"],
            Kind::Route | Kind::Username | Kind::Organization => &["Gitlab-Org"],
            Kind::ProjectId
            | Kind::NamespaceId
            | Kind::UserId
            | Kind::SnippetId
            | Kind::OrganizationId => &["1234"],
            Kind::Project => &["1234", "gitlab-org%2Fgitlab", "Gitlab-Org%2fSub%2FApp"],
            Kind::Namespace => &["1234", "gitlab-org%2Fsub", "Gitlab-Org"],
            Kind::User => &["1234", "Some.User"],
            Kind::NpmScope => &["@gitlab-org/app", "@Gitlab-Org%2fapp"],
            Kind::ConanUser => &["gitlab-org+app", "Gitlab-Org+sub+app"],
        }
    }
}

/// Whether `text` has the form of a GitLab path segment (a namespace,
/// user or organization name): `[A-Za-z0-9_.]` then also `-`, at most 255.
fn is_name(text: &str) -> bool {
    let mut bytes = text.bytes();
    text.len() <= 255
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
}

/// `%XX` decoded as the rules' `percent-decode` transform decodes it;
/// `None` for a control byte or invalid UTF-8 (the router claims nothing
/// for those either).
fn percent_decode(value: &str) -> Option<String> {
    match TransformKind::PercentDecode.apply(value)? {
        Output::Text(text) => Some(text),
        _ => None,
    }
}

/// The first whitespace-separated word of `text` and what follows it.
fn first_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    text.split_at(text.find(char::is_whitespace).unwrap_or(text.len()))
}

/// What the router must send for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// `{"claims": [{KEY: VALUE}]}`, KEY in the Topology Service's
    /// camelCase.
    Claim { key: &'static str, value: String },
    /// No path claim at all.
    None,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::Claim { key, value } => write!(f, "{key} {value:?}"),
            Expected::None => f.write_str("no claim"),
        }
    }
}

/// What an entry says of the templates it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The owner is parameter `param`, read as `kind`.
    Owner { kind: Kind, param: String },
    /// No claim; the entry's note says why.
    None,
}

#[derive(Debug, Clone)]
pub struct Entry {
    /// Its line in the file.
    pub line: usize,
    /// As written, `/**` included: the entry's name in reports.
    pub pattern: String,
    /// The pattern without `/**`.
    prefix: String,
    /// Ends in `/**`.
    deep: bool,
    pub claim: Claim,
    pub note: String,
}

impl Entry {
    pub fn covers(&self, template: &str) -> bool {
        if template == self.prefix {
            return true;
        }
        self.deep
            && template
                .strip_prefix(self.prefix.as_str())
                .is_some_and(|rest| rest.starts_with('/') || rest.starts_with('('))
    }

    pub fn describe(&self) -> String {
        match &self.claim {
            Claim::Owner { kind, param } => format!("{} {}({param})", self.pattern, kind.name()),
            Claim::None => format!("{} none", self.pattern),
        }
    }
}

/// The table, in file order.
pub struct Table {
    pub entries: Vec<Entry>,
    /// Parameter names that name an owner.
    pub owners: Vec<String>,
}

impl Table {
    pub fn parse(text: &str) -> Result<Table, String> {
        let mut entries: Vec<Entry> = Vec::new();
        let mut owners: Option<Vec<String>> = None;
        for (n, raw) in text.lines().enumerate() {
            let line = n + 1;
            let at = |what: String| format!("route_claims.txt:{line}: {what}");
            let text = raw.trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            let (pattern, after) = first_word(text);
            let (rest, note) = first_word(after);
            let note = note.trim().to_string();
            if pattern == "owners:" {
                if owners.is_some() {
                    return Err(at("a second owners: line".to_string()));
                }
                let names: Vec<String> = text["owners:".len()..]
                    .split_whitespace()
                    .map(str::to_string)
                    .collect();
                if names.is_empty() {
                    return Err(at("owners: lists no parameter".to_string()));
                }
                owners = Some(names);
                continue;
            }
            if !pattern.starts_with('/') && !pattern.starts_with('(') {
                return Err(at(format!(
                    "{pattern:?}: a pattern is a template (it starts with /)"
                )));
            }
            let (prefix, deep) = match pattern.strip_suffix("/**") {
                Some(p) => (p.to_string(), true),
                None => (pattern.to_string(), false),
            };
            if prefix.contains("**") {
                return Err(at(format!("{pattern:?}: ** only at the end, as /**")));
            }
            let claim = if rest == "none" {
                if note.is_empty() {
                    return Err(at(format!("{pattern} none: say why no claim is sent")));
                }
                Claim::None
            } else {
                let (kind, param) = rest
                    .strip_suffix(')')
                    .and_then(|r| r.split_once('('))
                    .ok_or_else(|| at(format!("{rest:?}: want KIND(PARAMETER) or none")))?;
                let kind = KINDS
                    .iter()
                    .find(|(name, _)| *name == kind)
                    .map(|(_, k)| *k)
                    .ok_or_else(|| {
                        let known: Vec<&str> = KINDS.iter().map(|(n, _)| *n).collect();
                        at(format!(
                            "unknown kind {kind:?} (known: {}, none)",
                            known.join(", ")
                        ))
                    })?;
                if !prefix.contains(&format!(":{param}")) && !prefix.contains(&format!("*{param}"))
                {
                    return Err(at(format!(
                        "{pattern}: the pattern names no parameter {param:?}"
                    )));
                }
                Claim::Owner {
                    kind,
                    param: param.to_string(),
                }
            };
            if let Some(earlier) = entries.iter().find(|e| e.pattern == pattern) {
                return Err(at(format!(
                    "{pattern} is listed twice (line {})",
                    earlier.line
                )));
            }
            entries.push(Entry {
                line,
                pattern: pattern.to_string(),
                prefix,
                deep,
                claim,
                note,
            });
        }
        let owners = owners.ok_or("route_claims.txt: no owners: line")?;
        Ok(Table { entries, owners })
    }

    /// The entry that decides `template`.
    pub fn entry_for(&self, template: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.covers(template))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_read_values_as_the_router_must() {
        let claim = |key, value: &str| Expected::Claim {
            key,
            value: value.to_string(),
        };
        let cases = [
            (Kind::Route, "Gitlab-Org/sub", claim("route", "gitlab-org")),
            (Kind::Route, "john.doe", claim("route", "john.doe")),
            (Kind::Route, "admin/x", Expected::None),
            (Kind::Route, "-x", Expected::None),
            (Kind::Username, "a b", Expected::None),
            (Kind::Project, "1234", claim("projectId", "1234")),
            (
                Kind::Project,
                "gitlab-org%2Fgitlab",
                claim("route", "gitlab-org"),
            ),
            (Kind::Project, "foo", Expected::None),
            (Kind::Project, "a%0Ab%2Fc", Expected::None),
            (Kind::Namespace, "foo", claim("route", "foo")),
            (Kind::Namespace, "12", claim("namespaceId", "12")),
            (Kind::ProjectId, "foo", Expected::None),
            (Kind::ProjectId, "12345678901234567890", Expected::None),
            (Kind::User, "Some.User", claim("username", "some.user")),
            (Kind::User, "7", claim("userId", "7")),
            (Kind::NpmScope, "@Acme%2fapp", claim("route", "acme")),
            (Kind::NpmScope, "foo/bar", Expected::None),
            (Kind::NpmScope, "@acme", Expected::None),
            (Kind::ConanUser, "acme+app", claim("route", "acme")),
            (Kind::ConanUser, "foo", Expected::None),
            (
                Kind::Organization,
                "Acme",
                claim("organizationPath", "acme"),
            ),
        ];
        for (kind, value, want) in cases {
            assert_eq!(kind.expect(value), want, "{kind:?} {value}");
        }
    }

    #[test]
    fn entries_cover_their_templates_and_bad_lines_are_refused() {
        let t = Table::parse(
            "owners: id\n/api/:version/projects/:id/** project(id)\n/admin/** none instance administration\n/x none only x\n",
        )
        .unwrap();
        let e = |template| t.entry_for(template).map(|e| e.pattern.as_str());
        assert_eq!(
            e("/api/:version/projects/:id"),
            Some("/api/:version/projects/:id/**")
        );
        assert_eq!(
            e("/api/:version/projects/:id/issues"),
            Some("/api/:version/projects/:id/**")
        );
        assert_eq!(e("/api/:version/projects/:id_x"), None);
        assert_eq!(e("/admin(/*vueroute)"), Some("/admin/**"));
        assert_eq!(e("/x/y"), None);
        assert_eq!(t.owners, ["id"]);
        for (text, want) in [
            ("owners: id\n/a none\n", "say why"),
            ("owners: id\n/a bogus(x)\n", "unknown kind"),
            ("owners: id\n/a route(id)\n", "names no parameter"),
            ("owners: id\n/:a route\n", "want KIND(PARAMETER)"),
            ("owners: id\na none x\n", "starts with /"),
            ("owners: id\n/a/**/b none x\n", "only at the end"),
            (
                "owners: id\n/a none x\n/a none y\n",
                "listed twice (line 2)",
            ),
            ("/a none x\n", "no owners: line"),
        ] {
            let err = Table::parse(text).err().unwrap();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
