//! Topology Service answers (SPEC §5) and how long they may be cached (§6).

use std::fmt;

use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{RouterError, ServiceFailure};
use crate::question::{ClassifyRequest, Target};

/// A cell as the Topology Service describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellAnswer {
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_address: Option<String>,
}

/// The outcome of a classify call that the service answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Classification {
    Cell(CellAnswer),
    /// 404: the key belongs to no cell; the legacy cell serves it.
    NotFound,
}

impl Classification {
    /// The address to proxy to for `target`; `Ok(None)` is the legacy cell.
    pub fn address_for(&self, target: Target) -> Result<Option<&str>, RouterError> {
        match (self, target) {
            (Classification::NotFound, _) => Ok(None),
            (Classification::Cell(cell), Target::Web) => Ok(Some(&cell.address)),
            (Classification::Cell(cell), Target::Registry) => cell
                .registry_address
                .as_deref()
                .map(Some)
                .ok_or(RouterError::NoRegistryAddress),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerBody {
    action: AnswerAction,
    #[serde(default)]
    proxy: Option<ProxyBody>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProxyBody {
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    registry_address: Option<String>,
}

/// An answer's `action`, read as it comes: a string or a number. Not a
/// `serde_json::Value`: a fresh isolate's first request compiles the
/// deserializer it runs, and `Value`'s is several times this one
/// (docs/performance-ledger.md, "Ruleset loading and the first request").
enum AnswerAction {
    Proxy,
    /// Anything else, described for the error.
    Other(String),
}

impl<'de> Deserialize<'de> for AnswerAction {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ActionVisitor)
    }
}

struct ActionVisitor;

impl<'de> Visitor<'de> for ActionVisitor {
    type Value = AnswerAction;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an action")
    }

    fn visit_str<E>(self, s: &str) -> Result<AnswerAction, E> {
        Ok(if s.eq_ignore_ascii_case("proxy") {
            AnswerAction::Proxy
        } else {
            AnswerAction::Other(format!("{s:?}"))
        })
    }

    fn visit_u64<E>(self, n: u64) -> Result<AnswerAction, E> {
        Ok(if n == 1 {
            AnswerAction::Proxy
        } else {
            AnswerAction::Other(n.to_string())
        })
    }

    fn visit_i64<E>(self, n: i64) -> Result<AnswerAction, E> {
        Ok(AnswerAction::Other(n.to_string()))
    }

    fn visit_f64<E>(self, _: f64) -> Result<AnswerAction, E> {
        Ok(AnswerAction::Other("a fractional number".into()))
    }

    fn visit_bool<E>(self, b: bool) -> Result<AnswerAction, E> {
        Ok(AnswerAction::Other(b.to_string()))
    }

    fn visit_unit<E>(self) -> Result<AnswerAction, E> {
        Ok(AnswerAction::Other("null".into()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AnswerAction, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(AnswerAction::Other("an array".into()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnswerAction, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(AnswerAction::Other("an object".into()))
    }
}

/// Parses the service's answer leniently: `"PROXY"`, `"Proxy"` and `1` all
/// mean proxy. Anything unusable is an error for this request, never a panic.
pub fn parse_answer(status: u16, body: &str) -> Result<Classification, ServiceFailure> {
    match status {
        200 => {}
        404 => return Ok(Classification::NotFound),
        other => return Err(ServiceFailure::Status(other)),
    }
    let answer: AnswerBody =
        serde_json::from_str(body).map_err(|e| ServiceFailure::BadAnswer(format!("body: {e}")))?;
    if let AnswerAction::Other(action) = answer.action {
        return Err(ServiceFailure::BadAnswer(format!(
            "unsupported action {action}"
        )));
    }
    let proxy = answer
        .proxy
        .ok_or_else(|| ServiceFailure::BadAnswer("no proxy block".into()))?;
    let address = proxy
        .address
        .filter(|a| !a.is_empty())
        .ok_or_else(|| ServiceFailure::BadAnswer("no proxy address".into()))?;
    Ok(Classification::Cell(CellAnswer {
        address,
        registry_address: proxy.registry_address.filter(|a| !a.is_empty()),
    }))
}

/// How long answers may be kept; every figure in seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachePolicy {
    /// Upper bound on any TTL the service asks for.
    pub max_ttl: u32,
    /// TTL when a positive answer carries no usable `Cache-Control`.
    pub default_ttl: u32,
    /// TTL cap for 404 answers.
    pub negative_ttl: u32,
    /// How long past expiry an entry may still be served when the service
    /// fails: memory entries are kept that long unless evicted, shared
    /// (Cache API) entries that long past their TTL.
    pub stale_if_error: u32,
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy {
            max_ttl: 3600,
            default_ttl: 60,
            negative_ttl: 30,
            stale_if_error: 600,
        }
    }
}

impl CachePolicy {
    /// The TTL for an answer: the service's `s-maxage` or `max-age`, capped;
    /// `None` when it says `no-store` / `no-cache` / `private` or a TTL of 0.
    pub fn ttl(&self, cache_control: Option<&str>, classification: &Classification) -> Option<u32> {
        let mut max_age = None;
        let mut s_maxage = None;
        for directive in cache_control.unwrap_or("").split(',') {
            let directive = directive.trim().to_ascii_lowercase();
            let (name, value) = match directive.split_once('=') {
                Some((n, v)) => (
                    n.trim().to_string(),
                    Some(v.trim().trim_matches('"').to_string()),
                ),
                None => (directive.clone(), None),
            };
            match name.as_str() {
                "no-store" | "no-cache" | "private" => return None,
                "max-age" => max_age = value.and_then(|v| v.parse::<u32>().ok()),
                "s-maxage" => s_maxage = value.and_then(|v| v.parse::<u32>().ok()),
                _ => {}
            }
        }
        let cap = match classification {
            Classification::Cell(_) => self.max_ttl,
            Classification::NotFound => self.negative_ttl.min(self.max_ttl),
        };
        let asked = s_maxage.or(max_age).unwrap_or(self.default_ttl);
        let ttl = asked.min(cap);
        (ttl > 0).then_some(ttl)
    }
}

/// Cache tags for an answer: the service's own `Cache-Tag` values, plus the
/// router's: one per classify type and target, and one per cell address,
/// so an operator can purge "all SESSION_PREFIX answers" or "everything
/// pointing at one cell".
pub fn cache_tags(
    service_tags: Option<&str>,
    request: &ClassifyRequest,
    answer: &Classification,
) -> Vec<String> {
    let mut tags: Vec<String> = service_tags
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    let kind = request.kind.name().to_ascii_lowercase().replace('_', "-");
    tags.push(tag("router-classify-", &kind));
    tags.push(tag("router-target-", request.target.name()));
    match answer {
        Classification::Cell(cell) => {
            tags.push(tag("router-cell-", &cell.address.to_ascii_lowercase()))
        }
        Classification::NotFound => tags.push("router-not-found".to_string()),
    }
    tags.dedup();
    tags
}

/// `prefix` and `value` as one tag. Not `format!`: a fresh isolate's first
/// request stores its answer with these tags, and would compile
/// `format!`'s machinery for them alone (docs/performance-ledger.md,
/// "Ruleset loading and the first request").
fn tag(prefix: &str, value: &str) -> String {
    let mut tag = String::with_capacity(prefix.len() + value.len());
    tag.push_str(prefix);
    tag.push_str(value);
    tag
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::question::ClassifyKind;

    #[test]
    fn accepts_every_spelling_of_proxy() {
        for action in [r#""PROXY""#, r#""Proxy""#, "1"] {
            let body =
                format!(r#"{{"action": {action}, "proxy": {{"address": "cell-2.example.com"}}}}"#);
            assert_eq!(
                parse_answer(200, &body).unwrap(),
                Classification::Cell(CellAnswer {
                    address: "cell-2.example.com".into(),
                    registry_address: None
                })
            );
        }
    }

    #[test]
    fn not_found_errors_and_garbage() {
        assert_eq!(parse_answer(404, "{}").unwrap(), Classification::NotFound);
        assert_eq!(
            parse_answer(503, "").unwrap_err(),
            ServiceFailure::Status(503)
        );
        for body in [
            "",
            "nope",
            "{}",
            r#"{"action":"DENY"}"#,
            r#"{"action":"PROXY"}"#,
            r#"{"action":"PROXY","proxy":{"address":""}}"#,
        ] {
            assert!(
                matches!(parse_answer(200, body), Err(ServiceFailure::BadAnswer(_))),
                "{body}"
            );
        }
    }

    #[test]
    fn an_unsupported_action_is_named_in_the_error() {
        for (action, named) in [
            (r#""DENY""#, r#""DENY""#),
            ("2", "2"),
            ("-1", "-1"),
            ("1.0", "a fractional number"),
            ("true", "true"),
            ("null", "null"),
            (r#"["PROXY"]"#, "an array"),
            (r#"{"kind":"PROXY"}"#, "an object"),
        ] {
            let body = format!(r#"{{"action": {action}, "proxy": {{"address": "a"}}}}"#);
            assert_eq!(
                parse_answer(200, &body),
                Err(ServiceFailure::BadAnswer(format!(
                    "unsupported action {named}"
                ))),
                "{body}"
            );
        }
        // A nested action is read to its end, and the body after it too.
        assert_eq!(
            parse_answer(200, r#"{"action":[1,{"a":[2]}],"proxy":{"address":"a"}}"#),
            Err(ServiceFailure::BadAnswer(
                "unsupported action an array".into()
            ))
        );
    }

    #[test]
    fn registry_target_needs_a_registry_address() {
        let cell = parse_answer(
            200,
            r#"{"action":"PROXY","proxy":{"address":"a","registryAddress":"r"},"matchedClaim":{"route":"x"}}"#,
        )
        .unwrap();
        assert_eq!(cell.address_for(Target::Registry).unwrap(), Some("r"));
        let web_only = parse_answer(200, r#"{"action":"PROXY","proxy":{"address":"a"}}"#).unwrap();
        assert_eq!(web_only.address_for(Target::Web).unwrap(), Some("a"));
        assert_eq!(
            web_only.address_for(Target::Registry),
            Err(RouterError::NoRegistryAddress)
        );
    }

    #[test]
    fn ttl_honours_cache_control_and_caps() {
        let p = CachePolicy::default();
        let cell = Classification::Cell(CellAnswer {
            address: "a".into(),
            registry_address: None,
        });
        assert_eq!(p.ttl(Some("max-age=120"), &cell), Some(120));
        assert_eq!(
            p.ttl(Some("public, max-age=120, s-maxage=300"), &cell),
            Some(300)
        );
        assert_eq!(p.ttl(Some("max-age=999999"), &cell), Some(3600));
        assert_eq!(p.ttl(Some("no-store"), &cell), None);
        assert_eq!(p.ttl(Some("max-age=0"), &cell), None);
        assert_eq!(p.ttl(None, &cell), Some(60));
        assert_eq!(p.ttl(Some("max-age=bogus"), &cell), Some(60));
        assert_eq!(
            p.ttl(Some("max-age=300"), &Classification::NotFound),
            Some(30)
        );
    }

    #[test]
    fn tags_keep_the_services_and_add_the_routers() {
        let req = ClassifyRequest {
            kind: ClassifyKind::SessionPrefix,
            value: Some("cell-2".into()),
            method: None,
            target: Target::Web,
        };
        let cell = Classification::Cell(CellAnswer {
            address: "Cell-2.example.com".into(),
            registry_address: None,
        });
        assert_eq!(
            cache_tags(Some("cell-2, classify-session-prefix"), &req, &cell),
            vec![
                "cell-2",
                "classify-session-prefix",
                "router-classify-session-prefix",
                "router-target-web",
                "router-cell-cell-2.example.com"
            ]
        );
    }
}
