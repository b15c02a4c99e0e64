//! GitLab's route snapshot (`config/routing/gitlab_routes.json`), as the
//! Rails gem `gitlab-cells-http_router` writes it: a JSON array of
//! `{"template", "example", "acceptsFormat"?, "dottedExample"?}`, sorted by
//! template; older snapshots carry only `template` and `example`. Every
//! entry is checked against its template (the example must be the one the
//! gem derives from it), so a damaged or hand-made file is refused with
//! the entry and the problem named.

use serde_json::Value;

use crate::route_template::Template;

/// Fewer routes than this is a truncated download or an error page, not a
/// snapshot (GitLab's own check, `SnapshotComparison::MIN_ROUTES`).
pub const MIN_ROUTES: usize = 1000;

/// The keys GitLab writes.
const KEYS: &[&str] = &["template", "example", "acceptsFormat", "dottedExample"];

/// One route of the snapshot, its template parsed.
#[derive(Debug, Clone)]
pub struct Route {
    pub template_source: String,
    pub template: Template,
    pub example: String,
    pub accepts_format: bool,
    pub dotted_example: Option<String>,
}

/// Which of GitLab's two formats a file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `template`, `example`, `acceptsFormat`, `dottedExample`.
    Current,
    /// `template` and `example` only.
    Older,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Current => "current format",
            Format::Older => "older format: template and example only",
        }
    }
}

#[derive(Debug)]
pub struct Snapshot {
    pub routes: Vec<Route>,
    pub format: Format,
}

impl Snapshot {
    /// Reads a snapshot; an error names the entry (its position and
    /// template) and the problem.
    pub fn parse(text: &str) -> Result<Snapshot, String> {
        let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let Value::Array(entries) = doc else {
            return Err(format!(
                "not a route snapshot: {}, GitLab writes an array of routes",
                kind(&doc)
            ));
        };
        if entries.len() < MIN_ROUTES {
            return Err(format!(
                "holds only {} routes, GitLab's snapshot has thousands (at least {MIN_ROUTES}): a truncated file or an error page?",
                entries.len()
            ));
        }
        let mut routes = Vec::with_capacity(entries.len());
        let mut extended = false;
        for (i, entry) in entries.iter().enumerate() {
            let route = read_entry(entry).map_err(|e| {
                let template = entry.get("template").and_then(Value::as_str);
                match template {
                    Some(t) => format!("entry {i} (template {t:?}): {e}"),
                    None => format!("entry {i}: {e}"),
                }
            })?;
            extended |=
                entry.get("acceptsFormat").is_some() || entry.get("dottedExample").is_some();
            if let Some(previous) = routes.last().map(|r: &Route| r.template_source.as_str()) {
                if previous >= route.template_source.as_str() {
                    return Err(format!(
                        "entry {i} (template {:?}): not after {previous:?}: GitLab's snapshot lists each template once, sorted",
                        route.template_source
                    ));
                }
            }
            routes.push(route);
        }
        let format = if extended {
            Format::Current
        } else {
            Format::Older
        };
        Ok(Snapshot { routes, format })
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn read_entry(entry: &Value) -> Result<Route, String> {
    let Value::Object(fields) = entry else {
        return Err(format!("{}, want an object", kind(entry)));
    };
    if let Some(key) = fields.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!(
            "unknown key {key:?} (GitLab's snapshot has template, example, acceptsFormat and dottedExample)"
        ));
    }
    let text = |key: &str| -> Result<Option<&str>, String> {
        match fields.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
            Some(v) => Err(format!("{key} is {}, want a non-empty string", kind(v))),
        }
    };
    let template_source = text("template")?.ok_or("no template")?;
    let example = text("example")?.ok_or("no example")?;
    let dotted_example = text("dottedExample")?;
    let accepts_format = match fields.get("acceptsFormat") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(format!("acceptsFormat is {}, want true or false", kind(v))),
    };
    let template = Template::parse(template_source)?;
    let derived = template
        .example(false)
        .expect("a template always has an example");
    if example != derived {
        return Err(format!(
            "example {example:?} is not the template's ({derived:?}, as GitLab derives it)"
        ));
    }
    let derived_dotted = template.example(true);
    if let Some(dotted) = dotted_example {
        if Some(dotted) != derived_dotted.as_deref() {
            return Err(format!(
                "dottedExample {dotted:?} is not the template's ({})",
                derived_dotted.map_or("none: nothing to dot".to_string(), |d| format!("{d:?}"))
            ));
        }
    }
    Ok(Route {
        template_source: template_source.to_string(),
        template,
        example: example.to_string(),
        accepts_format,
        dotted_example: dotted_example.map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `n` routes `/r0000`, `/r0001`, ... plus `extra`, sorted.
    fn snapshot(extra: Vec<Value>) -> String {
        let mut entries: Vec<Value> = (0..MIN_ROUTES)
            .map(|i| json!({"template": format!("/r{i:04}"), "example": format!("/r{i:04}")}))
            .collect();
        entries.extend(extra);
        entries.sort_by(|a, b| a["template"].as_str().cmp(&b["template"].as_str()));
        Value::Array(entries).to_string()
    }

    #[test]
    fn both_formats_load() {
        let older = Snapshot::parse(&snapshot(vec![
            json!({"template": "/:username", "example": "/foo"}),
        ]))
        .unwrap();
        assert_eq!(older.format, Format::Older);
        assert_eq!(older.routes.len(), MIN_ROUTES + 1);
        let current = Snapshot::parse(&snapshot(vec![json!({
            "template": "/:username", "example": "/foo", "acceptsFormat": true, "dottedExample": "/john.doe"
        })]))
        .unwrap();
        assert_eq!(current.format, Format::Current);
        let route = current
            .routes
            .iter()
            .find(|r| r.template_source == "/:username")
            .unwrap();
        assert!(route.accepts_format);
        assert_eq!(route.dotted_example.as_deref(), Some("/john.doe"));
    }

    #[test]
    fn other_shapes_are_refused_naming_the_entry() {
        let err = |extra: Value| Snapshot::parse(&snapshot(vec![extra])).unwrap_err();
        assert!(err(json!({"verb": "GET", "path": "/x", "example": "/x"}))
            .contains("unknown key \"path\""));
        assert!(err(json!({"template": "/x"})).contains("(template \"/x\"): no example"));
        assert!(err(json!({"template": "/:id", "example": "/bar"}))
            .contains("example \"/bar\" is not the template's (\"/foo\""));
        assert!(
            err(json!({"template": "/:id", "example": "/foo", "dottedExample": "/j.d"}))
                .contains("dottedExample \"/j.d\"")
        );
        assert!(
            err(json!({"template": "/x", "example": "/x", "acceptsFormat": "yes"}))
                .contains("acceptsFormat is a string")
        );
        assert!(err(json!({"template": "/a(b", "example": "/ab"})).contains("never closed"));
        assert!(err(json!(["/x"])).contains("an array, want an object"));
        assert!(err(json!({"template": "/r0001", "example": "/r0001"}))
            .contains("lists each template once"));
        assert!(Snapshot::parse("{\"routes\": []}")
            .unwrap_err()
            .contains("not a route snapshot: an object"));
        assert!(Snapshot::parse("[]").unwrap_err().contains("only 0 routes"));
        assert!(Snapshot::parse("<html>").unwrap_err().contains("not JSON"));
    }
}
