//! GitLab's route templates (Rails route syntax, as GitLab's route
//! snapshot writes them): `(…)` optional, `:param`, `*glob`, `.:format`,
//! `\(` `\)` literal parentheses. Parsed once; rendered into example paths
//! the way GitLab's gem `gitlab-cells-http_router` derives its examples,
//! matched against a request path, and read for its literal words.

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    Literal(String),
    /// `:name`: one segment.
    Param(String),
    /// `*name`: one or more segments.
    Glob(String),
    /// `( … )`: present or absent.
    Optional(Vec<Token>),
    /// `.:format` inside a template (a trailing `(.:format)` is already
    /// dropped by the snapshot's writer).
    Format,
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub tokens: Vec<Token>,
}

/// What the gem substitutes: named parameters, wildcards, and their
/// dotted variants (a dot is legal in a namespace or user name).
pub const PARAM: &str = "foo";
pub const GLOB: &str = "foo/bar";
pub const DOTTED_PARAM: &str = "john.doe";
pub const DOTTED_GLOB: &str = "john.doe/bar";

impl Template {
    pub fn parse(source: &str) -> Result<Template, String> {
        let mut stack: Vec<Vec<Token>> = vec![Vec::new()];
        let mut rest = source;
        while let Some(c) = rest.chars().next() {
            let top = stack.last_mut().expect("the outermost level stays");
            if let Some(after) = rest
                .strip_prefix("\\(")
                .or_else(|| rest.strip_prefix("\\)"))
            {
                push_literal(top, &rest[1..2]);
                rest = after;
            } else if let Some(after) = rest.strip_prefix(".:format") {
                top.push(Token::Format);
                rest = after;
            } else if c == '(' {
                stack.push(Vec::new());
                rest = &rest[1..];
            } else if c == ')' {
                if stack.len() == 1 {
                    return Err(format!("template {source:?}: \")\" closes nothing"));
                }
                let group = stack.pop().expect("checked above");
                stack
                    .last_mut()
                    .expect("outer level")
                    .push(Token::Optional(group));
                rest = &rest[1..];
            } else if c == ':' || c == '*' {
                let name_len = rest[1..]
                    .bytes()
                    .take_while(|b| b.is_ascii_lowercase() || *b == b'_')
                    .count();
                if name_len == 0 {
                    push_literal(top, &rest[..1]);
                    rest = &rest[1..];
                    continue;
                }
                let name = rest[1..1 + name_len].to_string();
                top.push(if c == ':' {
                    Token::Param(name)
                } else {
                    Token::Glob(name)
                });
                rest = &rest[1 + name_len..];
            } else {
                push_literal(top, &rest[..c.len_utf8()]);
                rest = &rest[c.len_utf8()..];
            }
        }
        if stack.len() != 1 {
            return Err(format!("template {source:?}: \"(\" is never closed"));
        }
        let tokens = stack.pop().expect("one level");
        if !matches!(tokens.first(), Some(Token::Literal(l)) if l.starts_with('/'))
            && !matches!(tokens.first(), Some(Token::Optional(_)))
        {
            return Err(format!("template {source:?}: does not start with /"));
        }
        Ok(Template { tokens })
    }

    /// The example path for these parameter values: optional parts
    /// present, `.:format` dropped, `/api/:version` as `/api/v4`, repeated
    /// slashes collapsed and trailing ones removed (the root stays `/`).
    pub fn render(&self, value: &dyn Fn(&Token) -> String) -> String {
        let mut out = String::new();
        render_into(&self.tokens, value, &mut out);
        let mut collapsed = String::with_capacity(out.len());
        for c in out.chars() {
            if !(c == '/' && collapsed.ends_with('/')) {
                collapsed.push(c);
            }
        }
        let trimmed = collapsed.trim_end_matches('/');
        if trimmed.is_empty() {
            "/".to_string()
        } else {
            trimmed.to_string()
        }
    }

    /// The gem's `example` (`dotted: false`) and `dottedExample` (`true`;
    /// `None` when the template has nothing to dot).
    pub fn example(&self, dotted: bool) -> Option<String> {
        let values = |t: &Token| -> String {
            match (t, dotted) {
                (Token::Glob(_), false) => GLOB.to_string(),
                (Token::Glob(_), true) => DOTTED_GLOB.to_string(),
                (_, false) => PARAM.to_string(),
                (_, true) => DOTTED_PARAM.to_string(),
            }
        };
        let example = self.render(&values);
        if dotted && example == self.example(false)? {
            return None;
        }
        Some(example)
    }

    /// Every way of choosing which optional parts are present, each as the
    /// flat list of its tokens (`Optional` never appears in one), all of
    /// them present first.
    pub fn variants(&self) -> Vec<Vec<&Token>> {
        variants_of(&self.tokens)
            .into_iter()
            .map(|(v, _)| v)
            .collect()
    }

    /// The parameter and glob names, in order.
    pub fn parameters(&self) -> Vec<&str> {
        fn collect<'t>(tokens: &'t [Token], out: &mut Vec<&'t str>) {
            for t in tokens {
                match t {
                    Token::Param(n) | Token::Glob(n) => out.push(n),
                    Token::Optional(inner) => collect(inner, out),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        collect(&self.tokens, &mut out);
        out
    }

    /// Whether `path` is one of this template's paths, and if so how
    /// specific the match is: how many of its characters the template's
    /// literals gave, and (negated, so more is better) how many optional
    /// parts it left out. A format suffix (`.json`) may follow when
    /// `accepts_format`. `spanning`: a `:param` may take several segments
    /// (Rails constraints let some, e.g. the Web IDE's `:project_id`).
    pub fn match_path(
        &self,
        path: &str,
        accepts_format: bool,
        spanning: bool,
    ) -> Option<(usize, isize)> {
        let path = match path.strip_suffix('/') {
            Some(p) if !p.is_empty() => p,
            _ => path,
        };
        variants_of(&self.tokens)
            .iter()
            .filter_map(|(variant, omitted)| {
                let literal: usize = variant
                    .iter()
                    .map(|t| match t {
                        Token::Literal(l) => l.len(),
                        _ => 0,
                    })
                    .sum();
                candidates(path, accepts_format)
                    .into_iter()
                    .any(|p| capture_tokens(variant, p, "", &mut None, spanning))
                    .then_some((literal, -(*omitted as isize)))
            })
            .max()
    }

    /// The value `path` gives parameter `name` (its first occurrence), when
    /// the template matches it.
    pub fn capture(
        &self,
        path: &str,
        name: &str,
        accepts_format: bool,
        spanning: bool,
    ) -> Option<String> {
        let path = match path.strip_suffix('/') {
            Some(p) if !p.is_empty() => p,
            _ => path,
        };
        let candidates = candidates(path, accepts_format);
        for variant in self.variants() {
            for p in &candidates {
                let mut found = None;
                if capture_tokens(&variant, p, name, &mut found, spanning) {
                    return found.map(str::to_string);
                }
            }
        }
        None
    }
}

/// The format suffixes a request may add to a route that accepts one.
const FORMATS: &[&str] = &[".json", ".atom"];

/// `path` without its format suffix first (a format variant is its plain
/// route: `/o/acme.json` is the organization `acme`), then `path` itself.
fn candidates(path: &str, accepts_format: bool) -> Vec<&str> {
    let stem = FORMATS
        .iter()
        .find_map(|f| path.strip_suffix(f))
        .filter(|stem| accepts_format && !stem.is_empty() && !stem.ends_with('/'));
    stem.into_iter().chain(std::iter::once(path)).collect()
}

fn push_literal(tokens: &mut Vec<Token>, text: &str) {
    match tokens.last_mut() {
        Some(Token::Literal(l)) => l.push_str(text),
        _ => tokens.push(Token::Literal(text.to_string())),
    }
}

fn render_into(tokens: &[Token], value: &dyn Fn(&Token) -> String, out: &mut String) {
    for t in tokens {
        match t {
            Token::Literal(l) => out.push_str(l),
            Token::Optional(inner) => render_into(inner, value, out),
            Token::Format => {}
            Token::Param(n) if n == "version" && out.ends_with("/api/") => out.push_str("v4"),
            Token::Param(_) | Token::Glob(_) => out.push_str(&value(t)),
        }
    }
}

/// The flat variants, each with how many optional parts it leaves out.
fn variants_of(tokens: &[Token]) -> Vec<(Vec<&Token>, usize)> {
    let mut out: Vec<(Vec<&Token>, usize)> = vec![(Vec::new(), 0)];
    for t in tokens {
        match t {
            Token::Optional(inner) => {
                let inner = variants_of(inner);
                out = out
                    .iter()
                    .flat_map(|(head, left_out)| {
                        inner
                            .iter()
                            .map(move |(tail, more)| {
                                (head.iter().chain(tail).copied().collect(), left_out + more)
                            })
                            .chain(std::iter::once((head.clone(), left_out + 1)))
                    })
                    .collect();
            }
            t => out.iter_mut().for_each(|(v, _)| v.push(t)),
        }
    }
    out
}

/// Backtracking match of a flat variant against the whole of `path`,
/// recording in `found` what parameter `name` took.
fn capture_tokens<'p>(
    tokens: &[&Token],
    path: &'p str,
    name: &str,
    found: &mut Option<&'p str>,
    spanning: bool,
) -> bool {
    let Some((first, rest)) = tokens.split_first() else {
        return path.is_empty();
    };
    match first {
        Token::Literal(l) => path
            .strip_prefix(l.as_str())
            .is_some_and(|p| capture_tokens(rest, p, name, found, spanning)),
        Token::Format => {
            capture_tokens(rest, path, name, found, spanning)
                || path.strip_prefix('.').is_some_and(|p| {
                    let ext = p.bytes().take_while(u8::is_ascii_alphanumeric).count();
                    ext > 0 && capture_tokens(rest, &p[ext..], name, found, spanning)
                })
        }
        Token::Param(n) | Token::Glob(n) => {
            let glob = spanning || matches!(first, Token::Glob(_));
            let most = if glob {
                path.len()
            } else {
                path.find('/').unwrap_or(path.len())
            };
            (1..=most)
                .filter(|end| path.is_char_boundary(*end))
                .any(|end| {
                    // Set on the way back out, so the first occurrence wins.
                    let matched = capture_tokens(rest, &path[end..], name, found, spanning);
                    if matched && n == name {
                        *found = Some(&path[..end]);
                    }
                    matched
                })
        }
        Token::Optional(_) => unreachable!("variants are flat"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_are_derived_as_the_gem_derives_them() {
        let cases = [
            ("/", "/", None),
            (
                "/groups/*group_id/-/milestones/:id",
                "/groups/foo/bar/-/milestones/foo",
                Some("/groups/john.doe/bar/-/milestones/john.doe"),
            ),
            (
                "/api/:version/groups/:id",
                "/api/v4/groups/foo",
                Some("/api/v4/groups/john.doe"),
            ),
            (
                "/api/scim/:version/groups/:group",
                "/api/scim/foo/groups/foo",
                Some("/api/scim/john.doe/groups/john.doe"),
            ),
            (
                "(/-/jira)/*namespace_id/:project_id",
                "/-/jira/foo/bar/foo",
                Some("/-/jira/john.doe/bar/john.doe"),
            ),
            (
                "/health_check(/:checks)",
                "/health_check/foo",
                Some("/health_check/john.doe"),
            ),
            (
                "/-/archive/*id.:format",
                "/-/archive/foo/bar",
                Some("/-/archive/john.doe/bar"),
            ),
            (
                "/api/:version/projects/:id/packages/nuget/v2/FindPackagesById\\(\\)",
                "/api/v4/projects/foo/packages/nuget/v2/FindPackagesById()",
                Some("/api/v4/projects/john.doe/packages/nuget/v2/FindPackagesById()"),
            ),
            ("/users/sign_in", "/users/sign_in", None),
            ("/:username.keys", "/foo.keys", Some("/john.doe.keys")),
            ("/help/", "/help", None),
        ];
        for (source, example, dotted) in cases {
            let t = Template::parse(source).unwrap();
            assert_eq!(t.example(false).as_deref(), Some(example), "{source}");
            assert_eq!(t.example(true).as_deref(), dotted, "{source}");
        }
    }

    #[test]
    fn bad_templates_are_refused() {
        for (source, want) in [
            ("/a(/b", "never closed"),
            ("/a)/b", "closes nothing"),
            ("a/b", "does not start with /"),
        ] {
            let err = Template::parse(source).unwrap_err();
            assert!(err.contains(want), "{source}: {err}");
        }
    }

    #[test]
    fn paths_match_and_give_their_parameters() {
        let t = Template::parse("/*namespace_id/:project_id/-/issues/:id").unwrap();
        assert!(t.match_path("/a/b/c/-/issues/1", false, false).is_some());
        assert_eq!(
            t.capture("/a/b/c/-/issues/1", "namespace_id", false, false)
                .as_deref(),
            Some("a/b")
        );
        assert!(t.match_path("/a/-/issues/1", false, false).is_none());
        let users = Template::parse("/users/:username/activity").unwrap();
        assert!(users
            .match_path("/users/x/activity.json", false, false)
            .is_none());
        assert!(users
            .match_path("/users/x/activity.json", true, false)
            .is_some());
        let o =
            Template::parse("/o/:organization_path(/-/jira)/*namespace_id/:project_id").unwrap();
        assert_eq!(o.variants().len(), 2);
        assert_eq!(
            o.match_path("/o/acme/-/jira/g/p", false, false),
            Some((12, 0))
        );
        assert_eq!(o.match_path("/o/acme/g/p", false, false), Some((5, -1)));
        assert_eq!(
            o.capture("/o/acme/g/p", "organization_path", false, false)
                .as_deref(),
            Some("acme")
        );
        // More literal characters: more specific.
        let glob = Template::parse("/*id").unwrap();
        assert!(
            glob.match_path("/a/b/c/-/issues/1", false, false)
                < t.match_path("/a/b/c/-/issues/1", false, false)
        );
        assert_eq!(t.parameters(), ["namespace_id", "project_id", "id"]);
    }
}
