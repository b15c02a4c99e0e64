//! The signing key of the router's signed requests: deriving its public
//! key, signing in Rust, and verifying a token as a cell does
//! (`router_core::forward::signing` makes the token's header and claims,
//! which the worker has WebCrypto sign; it never links this crate).
//! `rulesctl signature`, devstack and the tests use it.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ed25519_compact::{KeyPair, SecretKey, Seed};
use jwt_compact::alg::Ed25519;
use jwt_compact::{AlgorithmExt as _, Header, TimeOptions, UntrustedToken};
use router_core::forward::signing::{
    datetime, decode_key_bytes, path_query_hash, RequestClaims, SignedRequest, Signer,
    DEFAULT_ISSUER, DEFAULT_TTL_SECS,
};

pub use ed25519_compact::PublicKey;

/// [`Signer::from_base64`], with a 64-byte key's halves checked to belong
/// together (a key that does not would sign tokens nobody can verify).
pub fn signer_from_base64(key: &str, issuer: &str, ttl_secs: u32) -> Result<Signer, String> {
    let signer = Signer::from_base64(key, issuer, ttl_secs)?;
    if let Some(bytes) = decode_key_bytes(key).filter(|b| b.len() == 64) {
        let key = SecretKey::from_slice(&bytes)
            .map_err(|e| format!("the signing key is not an Ed25519 key: {e}"))?;
        key.validate_public_key(&key.public_key())
            .map_err(|e| format!("the signing key is inconsistent: {e}"))?;
    }
    Ok(signer)
}

/// What only the key can do for a [`Signer`].
pub trait SignerKeys {
    /// The public key cells verify with, base64.
    fn public_key_base64(&self) -> String;
    /// The compact JWT for one request.
    fn sign(&self, request: &SignedRequest) -> String;
}

fn secret_key(signer: &Signer) -> SecretKey {
    KeyPair::from_seed(Seed::new(signer.seed())).sk
}

impl SignerKeys for Signer {
    fn public_key_base64(&self) -> String {
        STANDARD.encode(secret_key(self).public_key().as_ref())
    }

    fn sign(&self, request: &SignedRequest) -> String {
        // Signing cannot fail for Ed25519 with serialisable claims; an
        // empty header would only make the request fail verification.
        Ed25519
            .token(
                &Header::empty().with_token_type("JWT"),
                &self.claims(request),
                &secret_key(self),
            )
            .unwrap_or_default()
    }
}

/// A verified token: its claims and validity window (Unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub claims: RequestClaims,
    pub issued_at: Option<i64>,
    pub expires_at: Option<i64>,
}

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    Malformed(String),
    WrongAlgorithm(String),
    BadSignature,
    Expired,
    NotYetValid,
    /// `exp - iat` is longer than the verifier accepts (or either is missing).
    LifetimeTooLong {
        secs: i64,
        max: u32,
    },
    WrongIssuer {
        expected: String,
        got: String,
    },
    WrongAudience {
        expected: String,
        got: String,
    },
    WrongMethod {
        expected: String,
        got: String,
    },
    WrongPath,
    /// `Content-Length` or `Content-Type` differ from what was signed.
    WrongBody(&'static str),
    /// The `jti` was accepted before ([`check_replay`]).
    Replayed,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::Malformed(e) => write!(f, "malformed token: {e}"),
            VerifyError::WrongAlgorithm(a) => write!(f, "algorithm {a:?} is not EdDSA"),
            VerifyError::BadSignature => write!(f, "bad signature"),
            VerifyError::Expired => write!(f, "token expired"),
            VerifyError::NotYetValid => write!(f, "token issued in the future or not yet valid"),
            VerifyError::LifetimeTooLong { secs, max } => {
                write!(
                    f,
                    "token lifetime {secs} s exceeds {max} s (or iat/exp missing)"
                )
            }
            VerifyError::WrongIssuer { expected, got } => {
                write!(f, "issuer {got:?} is not {expected:?}")
            }
            VerifyError::WrongBody(header) => {
                write!(f, "token was made for another {header}")
            }
            VerifyError::Replayed => write!(f, "token id (jti) was already used"),
            VerifyError::WrongAudience { expected, got } => {
                write!(f, "audience {got:?} is not {expected:?}")
            }
            VerifyError::WrongMethod { expected, got } => {
                write!(f, "method {got:?} is not {expected:?}")
            }
            VerifyError::WrongPath => write!(f, "token was made for another path or query"),
        }
    }
}

impl std::error::Error for VerifyError {}

/// Parses a base64 Ed25519 public key.
pub fn public_key_from_base64(text: &str) -> Result<PublicKey, String> {
    let bytes = decode_key_bytes(text).ok_or("the public key is not base64")?;
    PublicKey::from_slice(&bytes).map_err(|e| format!("not an Ed25519 public key: {e}"))
}

/// What a cell expects of the signature on a request it received. Build it
/// with [`Expected::new`] and change what differs from the defaults.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The cell's own address as the router dialled it (`host[:port]`).
    pub audience: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    /// The received `Content-Length` / `Content-Type` (`None`: absent).
    pub content_length: Option<&'a str>,
    pub content_type: Option<&'a str>,
    /// The router's `GITLAB_ROUTER_SIGNING_ISSUER` ([`DEFAULT_ISSUER`]).
    pub issuer: &'a str,
    /// The longest `exp - iat` accepted; the router's signature TTL
    /// ([`DEFAULT_TTL_SECS`]), so a leaked key cannot mint long-lived tokens
    /// that verify.
    pub max_lifetime_secs: u32,
    /// Clock skew allowed on `exp`, `iat` and `nbf`.
    pub leeway_secs: u32,
    pub now_ms: u64,
}

impl<'a> Expected<'a> {
    /// The defaults: no body headers, the default issuer and lifetime cap,
    /// 5 s of leeway.
    pub fn new(
        audience: &'a str,
        method: &'a str,
        path: &'a str,
        query: &'a str,
        now_ms: u64,
    ) -> Expected<'a> {
        Expected {
            audience,
            method,
            path,
            query,
            content_length: None,
            content_type: None,
            issuer: DEFAULT_ISSUER,
            max_lifetime_secs: DEFAULT_TTL_SECS,
            leeway_secs: 5,
            now_ms,
        }
    }
}

/// What a cell checks: signature, algorithm, expiry, `iat` and `nbf` (with
/// the leeway), lifetime (`exp - iat` at most `max_lifetime_secs`, both
/// required), issuer, audience, method, the path-and-query hash,
/// `Content-Type` (signed when present, so one must not appear or change)
/// and `Content-Length` (when signed). It does not cover the body (streamed,
/// never buffered) or other headers. A replayed token passes `verify`:
/// follow it with [`check_replay`] and the cell's own store.
pub fn verify(
    token: &str,
    public_key: &PublicKey,
    expected: &Expected,
) -> Result<Verified, VerifyError> {
    let untrusted =
        UntrustedToken::new(token).map_err(|e| VerifyError::Malformed(e.to_string()))?;
    if untrusted.algorithm() != "EdDSA" {
        return Err(VerifyError::WrongAlgorithm(
            untrusted.algorithm().to_string(),
        ));
    }
    let token = Ed25519
        .validator::<RequestClaims>(public_key)
        .validate(&untrusted)
        .map_err(|e| match e {
            jwt_compact::ValidationError::InvalidSignature => VerifyError::BadSignature,
            other => VerifyError::Malformed(other.to_string()),
        })?;
    let now = datetime(expected.now_ms);
    let leeway = chrono::Duration::seconds(i64::from(expected.leeway_secs));
    let options = TimeOptions::new(leeway, move || now);
    let claims = token.claims();
    claims.validate_expiration(&options).map_err(|e| match e {
        jwt_compact::ValidationError::Expired => VerifyError::Expired,
        other => VerifyError::Malformed(other.to_string()),
    })?;
    if claims.not_before.is_some_and(|nbf| nbf > now + leeway) {
        return Err(VerifyError::NotYetValid);
    }
    if let Some(iat) = claims.issued_at {
        if iat > now + leeway {
            return Err(VerifyError::NotYetValid);
        }
    }
    let lifetime = match (claims.issued_at, claims.expiration) {
        (Some(iat), Some(exp)) => (exp - iat).num_seconds(),
        _ => i64::MAX,
    };
    if lifetime > i64::from(expected.max_lifetime_secs) {
        return Err(VerifyError::LifetimeTooLong {
            secs: lifetime,
            max: expected.max_lifetime_secs,
        });
    }
    let custom = &claims.custom;
    if custom.iss != expected.issuer {
        return Err(VerifyError::WrongIssuer {
            expected: expected.issuer.to_string(),
            got: custom.iss.clone(),
        });
    }
    if !custom.aud.eq_ignore_ascii_case(expected.audience) {
        return Err(VerifyError::WrongAudience {
            expected: expected.audience.to_string(),
            got: custom.aud.clone(),
        });
    }
    if !custom.mth.eq_ignore_ascii_case(expected.method) {
        return Err(VerifyError::WrongMethod {
            expected: expected.method.to_string(),
            got: custom.mth.clone(),
        });
    }
    if custom.pqh != path_query_hash(expected.path, expected.query) {
        return Err(VerifyError::WrongPath);
    }
    if custom.cty.as_deref() != expected.content_type {
        return Err(VerifyError::WrongBody("content-type"));
    }
    // A streamed (chunked) request has no length to sign; when one was
    // signed it must be the one received.
    if custom.cl.is_some() && custom.cl.as_deref() != expected.content_length {
        return Err(VerifyError::WrongBody("content-length"));
    }
    Ok(Verified {
        claims: custom.clone(),
        issued_at: claims.issued_at.map(|t| t.timestamp()),
        expires_at: claims.expiration.map(|t| t.timestamp()),
    })
}

/// Where a cell remembers the `jti`s it accepted, until they expire: in
/// process memory ([`MemoryReplayStore`]) for one process, or a shared
/// store (Redis `SET jti 1 NX EXAT exp`) for many.
pub trait ReplayStore {
    /// Records `jti` until `expires_at` (Unix seconds); `false` when it is
    /// already there (a replay). `now` lets a store forget expired ids.
    fn remember(&mut self, jti: &str, expires_at: i64, now: i64) -> bool;
}

/// The replay check for a token [`verify`] accepted: refused when its `jti`
/// was seen before within its lifetime. Signed requests are unique (a new
/// `jti` for every request the router forwards), so a second sighting is a
/// replay.
pub fn check_replay(
    verified: &Verified,
    store: &mut impl ReplayStore,
    now_ms: u64,
) -> Result<(), VerifyError> {
    let now = (now_ms / 1000) as i64;
    let expires_at = verified.expires_at.unwrap_or(now);
    if verified.claims.jti.is_empty() || !store.remember(&verified.claims.jti, expires_at, now) {
        return Err(VerifyError::Replayed);
    }
    Ok(())
}

/// A [`ReplayStore`] in process memory; expired ids are dropped as new ones
/// arrive, so it holds at most the ids of one signature lifetime.
#[derive(Debug, Default)]
pub struct MemoryReplayStore {
    seen: std::collections::HashMap<String, i64>,
}

impl MemoryReplayStore {
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

impl ReplayStore for MemoryReplayStore {
    fn remember(&mut self, jti: &str, expires_at: i64, now: i64) -> bool {
        self.seen.retain(|_, exp| *exp >= now);
        if self.seen.contains_key(jti) {
            return false;
        }
        self.seen.insert(jti.to_string(), expires_at);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use jwt_compact::Claims;
    use sha2::{Digest, Sha256};

    const SEED: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="; // bytes 0..32
    const NOW: u64 = 1_800_000_000_000;

    fn signer() -> Signer {
        Signer::from_base64(SEED, "gitlab-http-router", 30).unwrap()
    }

    fn request<'a>() -> SignedRequest<'a> {
        SignedRequest {
            audience: "cell-2.example.com",
            method: "POST",
            path: "/api/v4/projects",
            query: "a=1",
            rule: Some("private_token"),
            classify_type: Some("CELL_ID"),
            content_length: None,
            content_type: None,
            jti: "6f1c2d3e-0000-4000-8000-000000000001",
            now_ms: NOW,
        }
    }

    fn check(
        token: &str,
        key: &PublicKey,
        aud: &str,
        method: &str,
        path: &str,
        query: &str,
        now: u64,
    ) -> Result<RequestClaims, VerifyError> {
        verify(
            token,
            key,
            &Expected {
                max_lifetime_secs: 30,
                ..Expected::new(aud, method, path, query, now)
            },
        )
        .map(|v| v.claims)
    }

    #[test]
    fn a_fresh_token_verifies_and_carries_the_request() {
        let s = signer();
        let token = s.sign(&request());
        let key = public_key_from_base64(&s.public_key_base64()).unwrap();
        let claims = check(
            &token,
            &key,
            "cell-2.example.com",
            "POST",
            "/api/v4/projects",
            "a=1",
            NOW + 1000,
        )
        .unwrap();
        assert_eq!(claims.rule.as_deref(), Some("private_token"));
        assert_eq!(claims.typ.as_deref(), Some("CELL_ID"));
        assert_eq!(claims.iss, "gitlab-http-router");
        assert_eq!(claims.jti, "6f1c2d3e-0000-4000-8000-000000000001");
        assert_eq!(UntrustedToken::new(&token).unwrap().algorithm(), "EdDSA");
    }

    #[test]
    fn signing_input_plus_a_signature_of_it_is_the_token() {
        let s = signer();
        for r in [
            request(),
            SignedRequest {
                rule: None,
                classify_type: None,
                query: "",
                path: "/\"quoted\"/ü",
                ..request()
            },
        ] {
            let input = s.signing_input(&r);
            let reference = s.sign(&r);
            assert_eq!(
                Some(input.as_str()),
                reference.rsplit_once('.').map(|(i, _)| i)
            );
            // Signed elsewhere (as the edge's WebCrypto does, from the seed).
            let keys = KeyPair::from_seed(Seed::new(s.seed()));
            let signature = keys.sk.sign(input.as_bytes(), None);
            let token = format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()));
            let key = public_key_from_base64(&s.public_key_base64()).unwrap();
            let claims = check(
                &token,
                &key,
                r.audience,
                r.method,
                r.path,
                r.query,
                NOW + 1000,
            );
            assert_eq!(
                claims,
                check(&reference, &key, r.audience, r.method, r.path, r.query, NOW)
            );
            assert!(claims.is_ok());
        }
    }

    #[test]
    fn expiry_audience_path_method_and_key_are_enforced() {
        let s = signer();
        let token = s.sign(&request());
        let key = public_key_from_base64(&s.public_key_base64()).unwrap();
        // (audience, method, path, query, now) and what the check says.
        type Case = (
            &'static str,
            &'static str,
            &'static str,
            &'static str,
            u64,
            fn(&VerifyError) -> bool,
        );
        let cases: [Case; 6] = [
            (
                "cell-2.example.com",
                "POST",
                "/api/v4/projects",
                "a=1",
                NOW + 36_000,
                |e| *e == VerifyError::Expired,
            ),
            (
                "cell-3.example.com",
                "POST",
                "/api/v4/projects",
                "a=1",
                NOW,
                |e| matches!(e, VerifyError::WrongAudience { .. }),
            ),
            (
                "cell-2.example.com",
                "POST",
                "/api/v4/projects",
                "a=2",
                NOW,
                |e| *e == VerifyError::WrongPath,
            ),
            (
                "cell-2.example.com",
                "POST",
                "/api/v4/users",
                "a=1",
                NOW,
                |e| *e == VerifyError::WrongPath,
            ),
            (
                "cell-2.example.com",
                "DELETE",
                "/api/v4/projects",
                "a=1",
                NOW,
                |e| matches!(e, VerifyError::WrongMethod { .. }),
            ),
            (
                "cell-2.example.com",
                "POST",
                "/api/v4/projects",
                "a=1",
                NOW - 60_000,
                |e| *e == VerifyError::NotYetValid,
            ),
        ];
        for (aud, method, path, query, now, expected) in cases {
            let err = check(&token, &key, aud, method, path, query, now).unwrap_err();
            assert!(
                expected(&err),
                "{aud} {method} {path}?{query} at {now}: {err:?}"
            );
        }

        let other =
            Signer::from_base64("BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=", "x", 30).unwrap();
        let wrong_key = public_key_from_base64(&other.public_key_base64()).unwrap();
        assert_eq!(
            check(
                &token,
                &wrong_key,
                "cell-2.example.com",
                "POST",
                "/api/v4/projects",
                "a=1",
                NOW
            ),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn tampered_and_foreign_tokens_are_refused() {
        let s = signer();
        let key = public_key_from_base64(&s.public_key_base64()).unwrap();
        let token = s.sign(&request());
        let (head, rest) = token.split_once('.').unwrap();
        let (payload, sig) = rest.split_once('.').unwrap();
        let mut claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
        claims["aud"] = "evil.example.com".into();
        let forged = format!(
            "{head}.{}.{sig}",
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        assert_eq!(
            check(
                &forged,
                &key,
                "evil.example.com",
                "POST",
                "/api/v4/projects",
                "a=1",
                NOW
            ),
            Err(VerifyError::BadSignature)
        );

        let none = format!("{}.{payload}.", URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#));
        assert_eq!(
            check(
                &none,
                &key,
                "cell-2.example.com",
                "POST",
                "/api/v4/projects",
                "a=1",
                NOW
            ),
            Err(VerifyError::WrongAlgorithm("none".into()))
        );
        for garbage in ["", "a.b", "a.b.c", "...."] {
            assert!(
                check(garbage, &key, "cell-2.example.com", "POST", "/", "", NOW).is_err(),
                "{garbage}"
            );
        }
    }

    /// A token with `request()`'s claims changed by `edit`, signed with the
    /// test key: what a holder of the key (or a bug) could mint.
    fn minted(edit: impl FnOnce(&mut Claims<RequestClaims>)) -> String {
        let s = signer();
        let mut claims = s.claims(&request());
        edit(&mut claims);
        Ed25519
            .token(
                &Header::empty().with_token_type("JWT"),
                &claims,
                &secret_key(&s),
            )
            .unwrap()
    }

    fn key() -> PublicKey {
        public_key_from_base64(&signer().public_key_base64()).unwrap()
    }

    fn expected<'a>() -> Expected<'a> {
        Expected::new("cell-2.example.com", "POST", "/api/v4/projects", "a=1", NOW)
    }

    #[test]
    fn issuer_nbf_and_lifetime_are_enforced() {
        let ok = minted(|_| {});
        assert!(verify(&ok, &key(), &expected()).is_ok());
        let other_issuer = minted(|c| c.custom.iss = "someone-else".into());
        assert!(matches!(
            verify(&other_issuer, &key(), &expected()),
            Err(VerifyError::WrongIssuer { .. })
        ));
        let later = minted(|c| c.not_before = Some(datetime(NOW + 60_000)));
        assert_eq!(
            verify(&later, &key(), &expected()),
            Err(VerifyError::NotYetValid)
        );
        let within_leeway = minted(|c| c.not_before = Some(datetime(NOW + 2_000)));
        assert!(verify(&within_leeway, &key(), &expected()).is_ok());
        // The audit's token: valid for 10^8 s.
        let long = minted(|c| c.expiration = Some(datetime(NOW + 100_000_000_000)));
        assert!(matches!(
            verify(&long, &key(), &expected()),
            Err(VerifyError::LifetimeTooLong { max: 60, .. })
        ));
        let no_iat = minted(|c| c.issued_at = None);
        assert!(matches!(
            verify(&no_iat, &key(), &expected()),
            Err(VerifyError::LifetimeTooLong { .. })
        ));
        // The cap is the verifier's: a cell may allow the router a longer TTL.
        let two_minutes = minted(|c| c.expiration = Some(datetime(NOW + 120_000)));
        assert!(verify(&two_minutes, &key(), &expected()).is_err());
        let relaxed = Expected {
            max_lifetime_secs: 120,
            ..expected()
        };
        assert!(verify(&two_minutes, &key(), &relaxed).is_ok());
    }

    #[test]
    fn content_length_and_type_are_bound_when_signed() {
        let s = signer();
        let token = s.sign(&SignedRequest {
            content_length: Some("42"),
            content_type: Some("application/json"),
            ..request()
        });
        let body = |cl, cty| Expected {
            content_length: cl,
            content_type: cty,
            ..expected()
        };
        assert!(verify(&token, &key(), &body(Some("42"), Some("application/json"))).is_ok());
        assert_eq!(
            verify(&token, &key(), &body(Some("43"), Some("application/json"))),
            Err(VerifyError::WrongBody("content-length"))
        );
        assert_eq!(
            verify(&token, &key(), &body(None, Some("application/json"))),
            Err(VerifyError::WrongBody("content-length"))
        );
        assert_eq!(
            verify(&token, &key(), &body(Some("42"), Some("text/plain"))),
            Err(VerifyError::WrongBody("content-type"))
        );
        // Signed without a type: one added in transit is refused; a length
        // (a streamed body has none to sign) is not bound.
        let bare = s.sign(&request());
        assert_eq!(
            verify(&bare, &key(), &body(None, Some("text/plain"))),
            Err(VerifyError::WrongBody("content-type"))
        );
        assert!(verify(&bare, &key(), &body(Some("7"), None)).is_ok());
    }

    #[test]
    fn a_replayed_jti_is_refused_until_it_expires() {
        let token = signer().sign(&request());
        let verified = verify(&token, &key(), &expected()).unwrap();
        let mut store = MemoryReplayStore::default();
        assert_eq!(check_replay(&verified, &mut store, NOW), Ok(()));
        assert_eq!(
            check_replay(&verified, &mut store, NOW + 1_000),
            Err(VerifyError::Replayed)
        );
        // Another request (another jti) passes; expired ids are forgotten.
        let other = verify(
            &signer().sign(&SignedRequest {
                jti: "6f1c2d3e-0000-4000-8000-000000000002",
                ..request()
            }),
            &key(),
            &expected(),
        )
        .unwrap();
        assert_eq!(check_replay(&other, &mut store, NOW + 1_000), Ok(()));
        assert_eq!(store.len(), 2);
        let late = NOW + 31_000;
        let third = Verified {
            claims: RequestClaims {
                jti: "third".into(),
                ..verified.claims.clone()
            },
            ..verified.clone()
        };
        assert_eq!(check_replay(&third, &mut store, late), Ok(()));
        assert_eq!(store.len(), 1, "the two expired ids were dropped");
    }

    #[test]
    fn keys_are_checked_when_parsed() {
        assert!(Signer::from_base64("not base64!", "i", 30)
            .unwrap_err()
            .contains("base64"));
        assert!(Signer::from_base64("AAAA", "i", 30)
            .unwrap_err()
            .contains("32"));
        let s = signer();
        let mut full = STANDARD.decode(SEED).unwrap();
        full.extend(STANDARD.decode(s.public_key_base64()).unwrap());
        assert!(signer_from_base64(&STANDARD.encode(&full), "i", 30).is_ok());
        full[40] ^= 1;
        assert!(
            signer_from_base64(&STANDARD.encode(&full), "i", 30).is_err(),
            "mismatched halves"
        );
        assert!(public_key_from_base64("AAAA").is_err());
    }

    #[test]
    fn path_hash_is_the_hash_of_the_request_target() {
        // A path never holds a raw "?", so "path?query" is unambiguous.
        let target = URL_SAFE_NO_PAD.encode(Sha256::digest(b"/a/b?x=1&y=2"));
        assert_eq!(path_query_hash("/a/b", "x=1&y=2"), target);
        assert_ne!(path_query_hash("/a/b", "x=1&y=3"), target);
        assert_ne!(path_query_hash("/a/b", ""), path_query_hash("/a/b", "x"));
    }
}
