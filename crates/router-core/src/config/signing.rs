//! Request signing ([`Signer`], [`SigningPolicy`]): the key, whether a
//! request may go unsigned, the signature's lifetime and issuer.

use super::setting::{Meaning, Number, Reader, Row, Text};
use crate::forward::signing::{Signer, DEFAULT_ISSUER, DEFAULT_TTL_SECS};
use crate::forward::SigningPolicy;

pub const KEY: Text = Text {
    name: "GITLAB_ROUTER_SIGNING_KEY",
    meaning: "Ed25519 key (base64 seed) that signs every proxied request (secret; `rulesctl \
              signature keygen`)",
    default: "none",
    accepted: "base64 of a 32-byte seed (or 64 with the public key)",
    fallback: "under `required`: every request 503, `error` (fail closed, as `required` \
               states); under `optional`: forwarded unsigned, `warn`",
    secret: true,
};

pub const POLICY: Text = Text {
    name: "GITLAB_ROUTER_SIGNING_POLICY",
    meaning: "`required`: without a valid key every request gets 503; `optional`: forward \
              unsigned (a migration period)",
    default: "`optional`",
    accepted: "`required`, `optional` (any case)",
    fallback: "`optional`, `warn`: signed while the key is usable, unsigned otherwise, never all \
               refused",
    secret: false,
};

/// Its default is [`DEFAULT_ISSUER`] (the row shows it).
pub const ISSUER: Text = Text {
    name: "GITLAB_ROUTER_SIGNING_ISSUER",
    meaning: "the signature's `iss`; cells check it (`rulesctl signature verify --issuer`)",
    default: "",
    accepted: "any",
    fallback: "—",
    secret: false,
};

fn ttl<M: Meaning>(value: &mut u32) -> Number<'_, M> {
    Number {
        name: "GITLAB_ROUTER_SIGNATURE_TTL_SECONDS",
        meaning: M::of(
            "signature lifetime; cells cap the lifetime they accept (`rulesctl signature \
                  verify --max-lifetime`, default 60)",
        ),
        min: 1,
        max: 3600,
        value,
    }
}

pub(super) fn rows() -> Vec<Row> {
    let mut ttl_secs = DEFAULT_TTL_SECS;
    vec![
        KEY.row(),
        POLICY.row(),
        ttl(&mut ttl_secs).row(),
        Row {
            default: format!("`{DEFAULT_ISSUER}`"),
            ..ISSUER.row()
        },
    ]
}

/// The block as read.
pub(super) struct Signing {
    /// `Ok(None)` when no key is set.
    pub signer: Result<Option<Signer>, String>,
    pub policy: SigningPolicy,
}

pub(super) fn read(r: &mut Reader<'_>) -> Signing {
    let mut ttl_secs = DEFAULT_TTL_SECS;
    r.number(ttl(&mut ttl_secs));
    let policy = policy(r);
    let issuer = r
        .get(ISSUER.name)
        .unwrap_or_else(|| DEFAULT_ISSUER.to_string());
    let signer = match r.get(KEY.name) {
        None => Ok(None),
        Some(key) => Signer::from_base64(&key, &issuer, ttl_secs).map(Some),
    };
    key_problem(r, &signer, policy);
    Signing { signer, policy }
}

fn policy(r: &mut Reader<'_>) -> SigningPolicy {
    match r.get(POLICY.name) {
        None => SigningPolicy::Optional,
        Some(v) if v.eq_ignore_ascii_case("optional") => SigningPolicy::Optional,
        Some(v) if v.eq_ignore_ascii_case("required") => SigningPolicy::Required,
        Some(other) => {
            r.warn(
                POLICY.name,
                Some(other.as_str()),
                "neither required nor optional",
                "using optional: requests are signed while the key is usable, \
                 forwarded unsigned otherwise (never all refused)",
            );
            SigningPolicy::Optional
        }
    }
}

/// What a missing or unusable key means under the policy. A secret: its
/// value is never in a problem.
fn key_problem(r: &mut Reader<'_>, signer: &Result<Option<Signer>, String>, policy: SigningPolicy) {
    match (signer, policy) {
        (Err(e), SigningPolicy::Required) => r.error(
            KEY.name,
            None,
            &format!("not a usable key: {e}"),
            "every request is refused (503) until it is fixed (GITLAB_ROUTER_SIGNING_POLICY is required)",
        ),
        (Err(e), SigningPolicy::Optional) => r.warn(
            KEY.name,
            None,
            &format!("not a usable key: {e}"),
            "requests are forwarded unsigned (GITLAB_ROUTER_SIGNING_POLICY is optional)",
        ),
        (Ok(None), SigningPolicy::Required) => r.error(
            KEY.name,
            None,
            "not set, but GITLAB_ROUTER_SIGNING_POLICY is required",
            "every request is refused (503)",
        ),
        (Ok(None), SigningPolicy::Optional) => r.note(
            KEY.name,
            None,
            "not set",
            "requests are forwarded unsigned (GITLAB_ROUTER_SIGNING_POLICY is optional)",
        ),
        (Ok(Some(_)), _) => {}
    }
}
