//! `${name}` templates, parsed once when a ruleset is compiled.
//!
//! `${name}` is a named capture of one of the rule's matchers;
//! `${output}` / `${output.key}` is a value a transform derived (the key is
//! a field of a routable token or a dot path into JWT claims).

use std::borrow::Cow;

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(String),
    Var(VarRef),
}

/// What a `${...}` names, resolved against the rule when it is compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VarRef {
    Capture(String),
    Output { output: usize, key: Option<String> },
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub source: String,
    pub segments: Vec<Segment>,
}

/// A raw `${...}` reference before it is resolved: `head` and optional
/// `.tail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawVar {
    pub head: String,
    pub tail: Option<String>,
}

/// Splits a template into literals and raw variable references.
pub fn parse(source: &str) -> Result<Vec<Result<String, RawVar>>, String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some((literal, after)) = rest.split_once("${") {
        if !literal.is_empty() {
            out.push(Ok(literal.to_string()));
        }
        let (name, after_var) = after
            .split_once('}')
            .ok_or_else(|| format!("template {source:?}: unclosed \"${{\""))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(format!("template {source:?}: empty \"${{}}\""));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
        {
            return Err(format!("template {source:?}: bad variable name {name:?}"));
        }
        let (head, tail) = match name.split_once('.') {
            Some((h, t)) => (h.to_string(), Some(t.to_string())),
            None => (name.to_string(), None),
        };
        out.push(Err(RawVar { head, tail }));
        rest = after_var;
    }
    if !rest.is_empty() {
        out.push(Ok(rest.to_string()));
    }
    Ok(out)
}

/// Values a template can read while one rule is evaluated.
pub trait Scope {
    fn capture(&self, name: &str) -> Option<&str>;
    fn output(&self, output: usize, key: Option<&str>) -> Option<Cow<'_, str>>;
}

impl Template {
    /// Expands the template; `None` when any variable is missing or empty,
    /// which makes the rule not match.
    pub fn render<S: Scope>(&self, scope: &S) -> Option<String> {
        if let [Segment::Var(v)] = self.segments.as_slice() {
            return resolve(v, scope).map(Cow::into_owned);
        }
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) => out.push_str(text),
                Segment::Var(v) => out.push_str(&resolve(v, scope)?),
            }
        }
        Some(out)
    }

    /// How many characters the template renders to, without building the
    /// text (`None` where [`Template::render`] gives `None`).
    pub fn char_count<S: Scope>(&self, scope: &S) -> Option<usize> {
        self.segments
            .iter()
            .map(|segment| match segment {
                Segment::Literal(text) => Some(text.chars().count()),
                Segment::Var(v) => resolve(v, scope).map(|v| v.chars().count()),
            })
            .sum()
    }

    /// Whether every variable resolves to a non-empty value.
    pub fn exists<S: Scope>(&self, scope: &S) -> bool {
        self.segments.iter().all(|segment| match segment {
            Segment::Literal(_) => true,
            Segment::Var(v) => resolve(v, scope).is_some(),
        })
    }
}

fn resolve<'s, S: Scope>(var: &VarRef, scope: &'s S) -> Option<Cow<'s, str>> {
    let value = match var {
        VarRef::Capture(name) => Cow::Borrowed(scope.capture(name)?),
        VarRef::Output { output, key } => scope.output(*output, key.as_deref())?,
    };
    (!value.is_empty()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_literals_and_vars() {
        let parts = parse("cell-${id}/x/${decoded.c}").unwrap();
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[0], Ok("cell-".to_string()));
        assert_eq!(
            parts[3],
            Err(RawVar {
                head: "decoded".into(),
                tail: Some("c".into())
            })
        );
    }

    #[test]
    fn rejects_malformed_templates() {
        assert!(parse("${unclosed").is_err());
        assert!(parse("${}").is_err());
        assert!(parse("${a b}").is_err());
        assert_eq!(parse("no vars").unwrap(), vec![Ok("no vars".to_string())]);
    }

    struct Fixed;
    impl Scope for Fixed {
        fn capture(&self, name: &str) -> Option<&str> {
            match name {
                "a" => Some("1"),
                "empty" => Some(""),
                _ => None,
            }
        }
        fn output(&self, _: usize, key: Option<&str>) -> Option<Cow<'_, str>> {
            (key == Some("c")).then_some(Cow::Borrowed("11"))
        }
    }

    #[test]
    fn renders_and_fails_on_missing_or_empty() {
        let t = Template {
            source: String::new(),
            segments: vec![
                Segment::Literal("x-".into()),
                Segment::Var(VarRef::Capture("a".into())),
                Segment::Var(VarRef::Output {
                    output: 0,
                    key: Some("c".into()),
                }),
            ],
        };
        assert_eq!(t.render(&Fixed).as_deref(), Some("x-111"));
        assert_eq!(t.char_count(&Fixed), Some(5));
        let missing = Template {
            source: String::new(),
            segments: vec![Segment::Var(VarRef::Capture("empty".into()))],
        };
        assert_eq!(missing.render(&Fixed), None);
        assert_eq!(missing.char_count(&Fixed), None);
        assert!(!missing.exists(&Fixed));
    }
}
