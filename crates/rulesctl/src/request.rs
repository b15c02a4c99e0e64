//! Building a [`RequestParts`] from what the user typed or wrote in a
//! requests file, with messages that say what is wrong.

use std::fmt;

use router_core::RequestParts;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A request as given: method, URL, headers and cookies in the order given.
#[derive(Debug, Clone, Default)]
pub struct RequestSpec {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub cookies: Vec<(String, String)>,
}

fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

impl RequestSpec {
    /// Checks every part and builds the request the rules see. Cookies are
    /// sent as one `cookie` header, `a=1; b=2`, after the headers given.
    pub fn build(&self) -> Result<RequestParts, String> {
        if self.method.is_empty() || !self.method.chars().all(is_tchar) {
            return Err(format!("invalid method {:?}", self.method));
        }
        if self
            .url
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(format!(
                "invalid URL {:?}: contains whitespace or control characters",
                self.url
            ));
        }
        let mut parts = RequestParts::from_url(&self.method, &self.url).ok_or_else(|| {
            format!(
                "invalid URL {:?}: expected http://HOST/PATH or https://HOST/PATH (no user info)",
                self.url
            )
        })?;
        for (name, value) in &self.headers {
            if name.is_empty() || !name.chars().all(is_tchar) {
                return Err(format!("invalid header name {name:?}"));
            }
            if value.contains(['\r', '\n', '\0']) {
                return Err(format!("header {name}: value contains a line break or NUL"));
            }
            parts.add_header(name, value.trim());
        }
        for (name, value) in &self.cookies {
            if name.is_empty() || name.contains(['=', ';', ' ', '\t', '\r', '\n']) {
                return Err(format!("invalid cookie name {name:?}"));
            }
            if value.contains([';', '\r', '\n', '\0']) {
                return Err(format!("cookie {name}: value contains ';' or a line break"));
            }
            parts.add_header("cookie", &format!("{name}={value}"));
        }
        Ok(parts)
    }
}

/// `Name: value` from `--header`.
pub fn parse_header_arg(arg: &str) -> Option<(String, String)> {
    let (name, value) = arg.split_once(':')?;
    let name = name.trim();
    (!name.is_empty()).then(|| (name.to_string(), value.trim().to_string()))
}

/// `name=value` from `--cookie`.
pub fn parse_cookie_arg(arg: &str) -> Option<(String, String)> {
    let (name, value) = arg.split_once('=')?;
    let name = name.trim();
    (!name.is_empty()).then(|| (name.to_string(), value.to_string()))
}

// ---------------------------------------------------------------------------
// Request files: one JSON object per line, objects kept in document order
// (serde_json's own map sorts keys, which would reorder cookies).

/// A JSON value whose objects keep their keys in document order.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.to_string()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.to_string()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        Ok(Json::Number(v.to_string()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut entries: Vec<(String, Json)> = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Json>()? {
            if entries.iter().any(|(k, _)| *k == key) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            entries.push((key, value));
        }
        Ok(Json::Object(entries))
    }
}

const REQUEST_KEYS: &str = "method, url, headers, cookies, comment";

/// Parses one line of a requests file:
/// `{"method": "GET", "url": "...", "headers": {..}, "cookies": {..}}`.
/// `method` defaults to `GET`; a header value may be a list (sent joined).
pub fn parse_request_line(line: &str) -> Result<RequestSpec, String> {
    let doc: Json = serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let Json::Object(fields) = doc else {
        return Err(format!("expected a JSON object, found {}", doc.kind()));
    };
    let mut spec = RequestSpec {
        method: "GET".to_string(),
        ..RequestSpec::default()
    };
    let mut url = None;
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("method", Json::String(m)) => spec.method = m,
            ("url", Json::String(u)) => url = Some(u),
            ("headers", Json::Object(map)) => spec.headers = string_pairs("headers", map, true)?,
            ("cookies", Json::Object(map)) => spec.cookies = string_pairs("cookies", map, false)?,
            ("headers" | "cookies", Json::Null) => {}
            ("comment", _) => {}
            ("method" | "url", other) => {
                return Err(format!("{key:?} must be a string, not {}", other.kind()))
            }
            ("headers" | "cookies", other) => {
                return Err(format!(
                    "{key:?} must be an object of name: value, not {}",
                    other.kind()
                ))
            }
            _ => return Err(format!("unknown key {key:?} (known: {REQUEST_KEYS})")),
        }
    }
    spec.url = url.ok_or_else(|| "missing \"url\"".to_string())?;
    Ok(spec)
}

fn string_pairs(
    what: &str,
    map: Vec<(String, Json)>,
    lists: bool,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (name, value) in map {
        match value {
            Json::String(v) => out.push((name, v)),
            Json::Array(items) if lists => {
                for item in items {
                    match item {
                        Json::String(v) => out.push((name.clone(), v)),
                        other => {
                            return Err(format!(
                                "{what}.{name}: list items must be strings, not {}",
                                other.kind()
                            ))
                        }
                    }
                }
            }
            other => {
                let expected = if lists {
                    "a string or a list of strings"
                } else {
                    "a string"
                };
                return Err(format!(
                    "{what}.{name} must be {expected}, not {}",
                    other.kind()
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_keep_cookie_order() {
        let spec = parse_request_line(
            r#"{"url": "https://gitlab.com/x", "cookies": {"z": "1", "a": "2"}, "headers": {"X-A": ["1", "2"]}}"#,
        )
        .unwrap();
        assert_eq!(spec.method, "GET");
        let parts = spec.build().unwrap();
        assert_eq!(parts.header("cookie"), Some("z=1; a=2"));
        assert_eq!(parts.header("x-a"), Some("1, 2"));
    }

    #[test]
    fn bad_request_lines_say_why() {
        for (line, needle) in [
            ("[1]", "expected a JSON object"),
            ("{", "not valid JSON"),
            (r#"{"method": "GET"}"#, "missing \"url\""),
            (r#"{"url": 1}"#, "must be a string"),
            (r#"{"url": "x", "header": {}}"#, "unknown key \"header\""),
            (r#"{"url": "x", "url": "y"}"#, "duplicate key"),
            (
                r#"{"url": "x", "cookies": {"a": 1}}"#,
                "cookies.a must be a string",
            ),
        ] {
            let err = parse_request_line(line).unwrap_err();
            assert!(err.contains(needle), "{line}: {err}");
        }
    }

    #[test]
    fn build_rejects_bad_parts() {
        let spec = |method: &str, url: &str| RequestSpec {
            method: method.into(),
            url: url.into(),
            ..RequestSpec::default()
        };
        assert!(spec("GET", "gitlab.com/x")
            .build()
            .unwrap_err()
            .contains("invalid URL"));
        assert!(spec("GET", "https://gitlab.com/a b").build().is_err());
        assert!(spec("G ET", "https://gitlab.com/")
            .build()
            .unwrap_err()
            .contains("invalid method"));
        assert!(spec("get", "https://gitlab.com/").build().is_ok());
    }

    #[test]
    fn header_and_cookie_args() {
        assert_eq!(
            parse_header_arg("PRIVATE-TOKEN: abc"),
            Some(("PRIVATE-TOKEN".into(), "abc".into()))
        );
        assert_eq!(
            parse_header_arg("Authorization: Basic a:b"),
            Some(("Authorization".into(), "Basic a:b".into()))
        );
        assert_eq!(parse_header_arg("nocolon"), None);
        assert_eq!(parse_cookie_arg("a=b=c"), Some(("a".into(), "b=c".into())));
        assert_eq!(parse_cookie_arg("=x"), None);
    }
}
