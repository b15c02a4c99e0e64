//! Classify requests: what the router asks the Topology Service (SPEC §5).

use crate::json::PushAscii;
use sha2::{Digest, Sha256};

use crate::error::Service;
use crate::json::push_quoted;

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

/// The longest classify value, in bytes, the router asks about (a claim,
/// a session prefix, a learn question's path): the key sent to the
/// Topology Service and kept in the caches. A rule whose value is longer
/// does not apply, as when its `validate.maxLength` fails: the rules after
/// it decide, and the request's log line names it (`value_too_long`).
/// Every shipped rule whose value a client can make long bounds it lower
/// (`validate.maxLength`, 255 characters for routes); this bound holds for
/// any ruleset. Above every real key: GitLab's routes, emails and key
/// fingerprints are at most 255 characters, and no GitLab page's path is
/// 4 KiB long.
pub const MAX_CLASSIFY_VALUE_BYTES: usize = 4096;

/// What kind of key a rule classifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClassifyKind {
    FirstCell,
    SessionPrefix,
    CellId,
    /// A claim, by its index in [`CLAIM_TYPES`].
    Claim(usize),
    /// Route learning (`"source": "learn"`, [`crate::resolve::learn`]): the value is
    /// the request's `METHOD path`, asked of a cell, not the service.
    Learn,
}

/// Claim `i`'s names (upper snake case, camelCase): a `Claim` index is
/// only ever made by position in [`CLAIM_TYPES`]; past it, empty names.
pub fn claim_names(i: usize) -> (&'static str, &'static str) {
    CLAIM_TYPES.get(i).copied().unwrap_or(("", ""))
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
            ClassifyKind::Claim(i) => claim_names(i).0,
            ClassifyKind::Learn => "LEARN",
        }
    }

    /// The service asked for this kind: a cell's learn endpoint for a
    /// learn question, else the Topology Service.
    pub fn service(self) -> Service {
        match self {
            ClassifyKind::Learn => Service::Learn,
            _ => Service::Topology,
        }
    }

    /// What `X-Gitlab-Http-Router-Rule-Type` says: the type name, or for a
    /// claim its camelCase key (e.g. `organizationPath`).
    pub fn rule_type_header(self) -> &'static str {
        match self {
            ClassifyKind::Claim(i) => claim_names(i).1,
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
    /// The key; `None` only for `FIRST_CELL`. A learn question's is the
    /// request path.
    pub value: Option<String>,
    /// A learn question's request method; `None` for every other kind.
    pub method: Option<Box<str>>,
    pub target: Target,
}

impl ClassifyRequest {
    /// A question of `kind` about `value`.
    pub fn new(kind: ClassifyKind, value: Option<String>, target: Target) -> ClassifyRequest {
        ClassifyRequest {
            kind,
            value,
            method: None,
            target,
        }
    }

    /// A learn question (route learning) for `method` and `path` (the
    /// request path, no query).
    pub fn learn(method: &str, path: &str, target: Target) -> ClassifyRequest {
        ClassifyRequest {
            kind: ClassifyKind::Learn,
            value: Some(path.to_owned()),
            method: Some(method.into()),
            target,
        }
    }

    /// A learn question's method and path; `None` for other kinds.
    pub fn learn_method_and_path(&self) -> Option<(&str, &str)> {
        (self.kind == ClassifyKind::Learn).then(|| {
            (
                self.method.as_deref().unwrap_or("GET"),
                self.value.as_deref().unwrap_or(""),
            )
        })
    }

    /// The exact JSON body POSTed to `/v1/classify`. It is canonical (fixed
    /// key order, `target` only when not `web`), so it doubles as the cache
    /// key's input.
    pub fn body(&self) -> String {
        // Written by hand, not through a JSON map, so the key order is the
        // spec's and cannot change with serde_json's feature flags.
        let value = self.value.as_deref().unwrap_or("");
        let mut body = String::with_capacity(48 + value.len());
        match self.kind {
            ClassifyKind::Claim(i) => {
                body.push_str(r#"{"claims":[{""#);
                body.push_str(claim_names(i).1);
                body.push_str(r#"":"#);
                push_quoted(&mut body, value);
                body.push_str("}]");
            }
            ClassifyKind::FirstCell => body.push_str(r#"{"type":"FIRST_CELL""#),
            ClassifyKind::Learn => {
                let method = self.method.as_deref().unwrap_or("GET");
                let path = value;
                body.push_str(r#"{"learn":{"method":"#);
                push_quoted(&mut body, method);
                body.push_str(r#","path_info":"#);
                push_quoted(&mut body, path);
                body.push_ascii('}');
            }
            kind => {
                body.push_str(r#"{"type":""#);
                body.push_str(kind.name());
                body.push_str(r#"","value":"#);
                push_quoted(&mut body, value);
            }
        }
        if self.target == Target::Registry {
            body.push_str(r#","target":"registry""#);
        }
        body.push_ascii('}');
        body
    }

    /// A stable, URL-safe key for this question in the shared cache (the
    /// Cache API URL's last segment): the kind and target for readability in
    /// logs and purges, then the SHA-256 of the canonical body, so two
    /// questions can share a key only by breaking SHA-256. (It was FNV-1a
    /// 64, for which collisions are found in seconds: a forged session
    /// prefix could poison another's entry.) The in-isolate maps
    /// key by [`ClassifyRequest::body`] itself, which needs no hash at all.
    pub fn cache_key(&self) -> String {
        Self::cache_key_of(self.kind, self.target, &self.body())
    }

    /// [`ClassifyRequest::cache_key`] for an already built `body`.
    pub fn cache_key_of(kind: ClassifyKind, target: Target, body: &str) -> String {
        let digest = Sha256::digest(body.as_bytes());
        let kind = kind.name();
        let target = target.name();
        let mut key = String::with_capacity(kind.len() + target.len() + 2 + 64);
        key.extend(kind.chars().map(|c| c.to_ascii_lowercase()));
        key.push_ascii('-');
        key.push_str(target);
        key.push_ascii('-');
        crate::hex::push_hex(&mut key, &digest);
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn req(kind: &str, value: Option<&str>, target: Target) -> ClassifyRequest {
        ClassifyRequest::new(
            ClassifyKind::parse(kind).unwrap(),
            value.map(str::to_string),
            target,
        )
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
        assert_eq!(
            a.cache_key(),
            "session_prefix-web-f86762c77a24fd3f615166556ab0660db5e39b50edf4542550cfabb58a4cbb1b"
        );
        assert_ne!(
            a.cache_key(),
            req("SESSION_PREFIX", Some("cell-3"), Target::Web).cache_key()
        );
        assert_ne!(
            a.cache_key(),
            req("SESSION_PREFIX", Some("cell-2"), Target::Registry).cache_key()
        );
        assert!(a.cache_key().starts_with("session_prefix-web-"));
        assert_eq!(
            a.cache_key(),
            ClassifyRequest::cache_key_of(a.kind, a.target, &a.body())
        );
    }

    /// The earlier key scheme: `<type>-<target>-<FNV-1a 64>`.
    fn fnv_key(request: &ClassifyRequest) -> String {
        let hash = fnv1a64(FNV_OFFSET, request.body().as_bytes());
        let kind = request.kind.name().to_ascii_lowercase();
        format!("{kind}-{}-{hash:016x}", request.target.name())
    }

    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

    fn fnv1a64(mut hash: u64, bytes: &[u8]) -> u64 {
        for byte in bytes {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash
    }

    /// The audit's forged session prefix: its FNV key was
    /// `cell-2`'s, so one request could overwrite `cell-2`'s answer.
    const FORGED_CELL_2: &str = "cell-296371275170884690274592503895712990101298676239";

    #[test]
    fn the_audits_fnv_collision_no_longer_shares_a_key() {
        let victim = req("SESSION_PREFIX", Some("cell-2"), Target::Web);
        let forged = req("SESSION_PREFIX", Some(FORGED_CELL_2), Target::Web);
        assert_eq!(fnv_key(&victim), "session_prefix-web-76814df7c944ff7a");
        assert_eq!(
            fnv_key(&forged),
            fnv_key(&victim),
            "the old scheme confused them"
        );
        assert_ne!(forged.cache_key(), victim.cache_key());
        assert_ne!(forged.body(), victim.body());
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
