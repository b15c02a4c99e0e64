//! Classify requests: what the router asks the Topology Service (SPEC §5).

use std::fmt::Write as _;

/// Claim types the Topology Service knows, as `(UPPER_SNAKE, camelCase)`:
/// the fields of its `Claim` message. A ruleset naming anything else is
/// rejected when it is compiled; the schema (`schema/ruleset.schema.json`)
/// and devstack's Topology Service take their lists from here (tests hold
/// them equal). A group is a namespace: there is no group or runner claim.
pub const CLAIM_TYPES: &[(&str, &str)] = &[
    ("ROUTE", "route"),
    ("ORGANIZATION_PATH", "organizationPath"),
    ("REDIRECT_ROUTE", "redirectRoute"),
    ("USERNAME", "username"),
    ("EMAIL", "email"),
    ("PROJECT_ID", "projectId"),
    ("NAMESPACE_ID", "namespaceId"),
    ("GPG_KEY", "gpgKey"),
    ("SSH_KEY", "sshKey"),
    ("USER_ID", "userId"),
    ("ORGANIZATION_ID", "organizationId"),
    ("SERVICE_DESK_CUSTOM_EMAIL", "serviceDeskCustomEmail"),
    ("GPG_KEY_FINGERPRINT", "gpgKeyFingerprint"),
    ("INVITE_EMAIL", "inviteEmail"),
    ("SSH_KEY_FINGERPRINT", "sshKeyFingerprint"),
    ("SNIPPET_ID", "snippetId"),
];

/// What kind of key a rule classifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClassifyKind {
    FirstCell,
    SessionPrefix,
    CellId,
    /// A claim, by its index in [`CLAIM_TYPES`].
    Claim(usize),
}

impl ClassifyKind {
    /// Parses an upper snake case type name as rulesets spell it.
    pub fn parse(name: &str) -> Option<ClassifyKind> {
        match name {
            "FIRST_CELL" => Some(ClassifyKind::FirstCell),
            "SESSION_PREFIX" => Some(ClassifyKind::SessionPrefix),
            "CELL_ID" => Some(ClassifyKind::CellId),
            _ => CLAIM_TYPES
                .iter()
                .position(|(upper, _)| *upper == name)
                .map(ClassifyKind::Claim),
        }
    }

    /// The upper snake case name, e.g. `SESSION_PREFIX` or `ROUTE`.
    pub fn name(self) -> &'static str {
        match self {
            ClassifyKind::FirstCell => "FIRST_CELL",
            ClassifyKind::SessionPrefix => "SESSION_PREFIX",
            ClassifyKind::CellId => "CELL_ID",
            ClassifyKind::Claim(i) => CLAIM_TYPES[i].0,
        }
    }

    /// What `X-Gitlab-Http-Router-Rule-Type` says: the type name, or for a
    /// claim its camelCase key (e.g. `organizationPath`).
    pub fn rule_type_header(self) -> &'static str {
        match self {
            ClassifyKind::Claim(i) => CLAIM_TYPES[i].1,
            other => other.name(),
        }
    }

    /// Whether this kind needs a value (all but `FIRST_CELL`).
    pub fn needs_value(self) -> bool {
        self != ClassifyKind::FirstCell
    }
}

/// Which address of the cell the request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Target {
    #[default]
    Web,
    Registry,
}

impl Target {
    pub fn parse(name: &str) -> Option<Target> {
        match name {
            "web" | "WEB" => Some(Target::Web),
            "registry" | "REGISTRY" => Some(Target::Registry),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Target::Web => "web",
            Target::Registry => "registry",
        }
    }
}

/// One question for the Topology Service.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClassifyRequest {
    pub kind: ClassifyKind,
    /// The key; `None` only for `FIRST_CELL`.
    pub value: Option<String>,
    pub target: Target,
}

impl ClassifyRequest {
    /// The exact JSON body POSTed to `/v1/classify`. It is canonical (fixed
    /// key order, `target` only when not `web`), so it doubles as the cache
    /// key's input.
    pub fn body(&self) -> String {
        // Written by hand, not through a JSON map, so the key order is the
        // spec's and cannot change with serde_json's feature flags.
        let value = self.value.as_deref().unwrap_or("");
        let mut body = match self.kind {
            ClassifyKind::Claim(i) => {
                format!(
                    r#"{{"claims":[{{"{}":{}}}]"#,
                    CLAIM_TYPES[i].1,
                    json_string(value)
                )
            }
            ClassifyKind::FirstCell => r#"{"type":"FIRST_CELL""#.to_string(),
            kind => format!(
                r#"{{"type":"{}","value":{}"#,
                kind.name(),
                json_string(value)
            ),
        };
        if self.target == Target::Registry {
            body.push_str(r#","target":"registry""#);
        }
        body.push('}');
        body
    }

    /// A stable, URL-safe cache key for this question (FNV-1a 64 of the
    /// canonical body, plus the kind for readability in logs and purges).
    pub fn cache_key(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in self.body().bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        let kind = self.kind.name();
        let mut key = String::with_capacity(kind.len() + 26);
        key.extend(kind.chars().map(|c| c.to_ascii_lowercase()));
        let _ = write!(key, "-{}-{hash:016x}", self.target.name());
        key
    }
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn req(kind: &str, value: Option<&str>, target: Target) -> ClassifyRequest {
        ClassifyRequest {
            kind: ClassifyKind::parse(kind).unwrap(),
            value: value.map(str::to_string),
            target,
        }
    }

    #[test]
    fn typed_bodies_match_the_spec() {
        assert_eq!(
            req("SESSION_PREFIX", Some("cell-2"), Target::Web).body(),
            r#"{"type":"SESSION_PREFIX","value":"cell-2"}"#
        );
        assert_eq!(
            req("FIRST_CELL", None, Target::Web).body(),
            r#"{"type":"FIRST_CELL"}"#
        );
        assert_eq!(
            req("CELL_ID", Some("11"), Target::Registry).body(),
            r#"{"type":"CELL_ID","value":"11","target":"registry"}"#
        );
    }

    #[test]
    fn claim_bodies_use_camel_case_keys() {
        assert_eq!(
            req("ROUTE", Some("gitlab-org/gitlab"), Target::Registry).body(),
            r#"{"claims":[{"route":"gitlab-org/gitlab"}],"target":"registry"}"#
        );
        assert_eq!(
            req("ORGANIZATION_PATH", Some("acme"), Target::Web).body(),
            r#"{"claims":[{"organizationPath":"acme"}]}"#
        );
    }

    #[test]
    fn values_that_look_like_json_stay_strings() {
        let body = req("ROUTE", Some(r#"a","x":"y"#), Target::Web).body();
        let parsed: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(parsed["claims"][0]["route"], r#"a","x":"y"#);
        assert_eq!(parsed.as_object().unwrap().len(), 1);
    }

    #[test]
    fn cache_keys_are_stable_and_distinct() {
        let a = req("SESSION_PREFIX", Some("cell-2"), Target::Web);
        // Shared-cache entries outlive deployments: the key must not change.
        assert_eq!(a.cache_key(), "session_prefix-web-76814df7c944ff7a");
        assert_ne!(
            a.cache_key(),
            req("SESSION_PREFIX", Some("cell-3"), Target::Web).cache_key()
        );
        assert_ne!(
            a.cache_key(),
            req("SESSION_PREFIX", Some("cell-2"), Target::Registry).cache_key()
        );
        assert!(a.cache_key().starts_with("session_prefix-web-"));
    }

    #[test]
    fn rule_type_header_names_claims_in_camel_case() {
        assert_eq!(
            ClassifyKind::parse("ORGANIZATION_PATH")
                .unwrap()
                .rule_type_header(),
            "organizationPath"
        );
        assert_eq!(
            ClassifyKind::parse("SESSION_PREFIX")
                .unwrap()
                .rule_type_header(),
            "SESSION_PREFIX"
        );
        assert!(ClassifyKind::parse("SESION_PREFIX").is_none());
    }
}
