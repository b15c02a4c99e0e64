//! Signed proxied requests: the router vouches for every request it sends
//! to a cell with a short-lived Ed25519 JWT (made with `jwt-compact`), so a
//! cell on the public internet can refuse anything that did not come
//! through the router (zero trust).
//!
//! The token travels in [`SIGNATURE_HEADER`]. Its claims bind it to one
//! request: the audience is the cell address, `mth` the method and `pqh`
//! the SHA-256 of the path and query, with `iat`/`exp` a few seconds apart
//! and a unique `jti` a cell may use to refuse replays. [`verify`] is what a
//! cell (or its nginx auth hook, through `rulesctl signature verify`) runs.
//!
//! Key handling (deriving the public key, signing in Rust, verifying) is
//! behind the `keys` feature, on by default: the worker builds without it,
//! since WebCrypto signs for the edge and only `rulesctl` and cells verify.

use std::fmt;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use chrono::{DateTime, TimeZone, Utc};
#[cfg(feature = "keys")]
use ed25519_compact::{KeyPair, SecretKey, Seed};
#[cfg(feature = "keys")]
use jwt_compact::alg::Ed25519;
#[cfg(feature = "keys")]
use jwt_compact::{AlgorithmExt as _, Header, UntrustedToken};
use jwt_compact::{Claims, TimeOptions};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[cfg(feature = "keys")]
pub use ed25519_compact::PublicKey;

/// The request header that carries the router's signature.
pub const SIGNATURE_HEADER: &str = "x-gitlab-http-router-signature";

/// Claims of a signed request, besides `iat` and `exp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestClaims {
    pub iss: String,
    /// The cell address (`host[:port]`) the request was sent to.
    pub aud: String,
    /// Unique per request.
    pub jti: String,
    /// HTTP method.
    pub mth: String,
    /// base64url(SHA-256(path + "?" + query)), or of the path alone when
    /// there is no query.
    pub pqh: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The classify type, or the claim key, when the rule classified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typ: Option<String>,
    /// The request's `Content-Length`, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cl: Option<String>,
    /// The request's `Content-Type`, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cty: Option<String>,
}

/// The issuer the router writes unless configured otherwise.
pub const DEFAULT_ISSUER: &str = "gitlab-http-router";

/// The router's default signature lifetime, and so the default cap
/// [`verify`] puts on `exp - iat`.
pub const DEFAULT_TTL_SECS: u32 = 60;

/// The hash that binds a token to a path and query.
pub fn path_query_hash(path: &str, query: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(path.as_bytes());
    if !query.is_empty() {
        hasher.update(b"?");
        hasher.update(query.as_bytes());
    }
    URL_SAFE_NO_PAD.encode(hasher.finalize())
}

fn decode_key_bytes(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    STANDARD
        .decode(text)
        .ok()
        .or_else(|| URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')).ok())
}

fn datetime(unix_ms: u64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(unix_ms as i64)
        .single()
        .unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
}

/// Signs proxied requests; parsed once per isolate.
pub struct Signer {
    /// The Ed25519 seed (the private key's first half).
    seed: [u8; 32],
    issuer: String,
    ttl_secs: u32,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("issuer", &self.issuer)
            .field("ttl_secs", &self.ttl_secs)
            .finish_non_exhaustive()
    }
}

/// What one signature covers.
#[derive(Debug, Clone, Copy)]
pub struct SignedRequest<'a> {
    pub audience: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub rule: Option<&'a str>,
    pub classify_type: Option<&'a str>,
    /// `Content-Length` and `Content-Type` as forwarded, when present. The
    /// body itself is streamed and never covered (it would have to be
    /// buffered to be hashed).
    pub content_length: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub jti: &'a str,
    pub now_ms: u64,
}

impl Signer {
    /// A signer from a base64 Ed25519 key: the 32-byte seed, or the 64-byte
    /// secret key (seed followed by public key).
    pub fn from_base64(key: &str, issuer: &str, ttl_secs: u32) -> Result<Signer, String> {
        let bytes = decode_key_bytes(key).ok_or("the signing key is not base64")?;
        if bytes.len() != 32 && bytes.len() != 64 {
            return Err(format!(
                "the signing key has {} bytes; an Ed25519 seed has 32 (or 64 with the public key)",
                bytes.len()
            ));
        }
        let mut seed = [0u8; 32];
        seed.copy_from_slice(&bytes[..32]);
        // A 64-byte key whose halves do not belong together would sign
        // tokens nobody can verify: refuse it (where the curve arithmetic
        // is built in: rulesctl and the deploy checks).
        #[cfg(feature = "keys")]
        if bytes.len() == 64 {
            let key = SecretKey::from_slice(&bytes)
                .map_err(|e| format!("the signing key is not an Ed25519 key: {e}"))?;
            key.validate_public_key(&key.public_key())
                .map_err(|e| format!("the signing key is inconsistent: {e}"))?;
        }
        Ok(Signer {
            seed,
            issuer: issuer.to_string(),
            ttl_secs: ttl_secs.max(1),
        })
    }

    #[cfg(feature = "keys")]
    fn key(&self) -> SecretKey {
        KeyPair::from_seed(Seed::new(self.seed)).sk
    }

    /// The public key cells verify with, base64.
    #[cfg(feature = "keys")]
    pub fn public_key_base64(&self) -> String {
        STANDARD.encode(self.key().public_key().as_ref())
    }

    /// The compact JWT for one request.
    #[cfg(feature = "keys")]
    pub fn sign(&self, request: &SignedRequest) -> String {
        // Signing cannot fail for Ed25519 with serialisable claims; an
        // empty header would only make the request fail verification.
        Ed25519
            .token(&Self::header(), &self.claims(request), &self.key())
            .unwrap_or_default()
    }

    /// The token's first two parts (`base64url(header).base64url(claims)`),
    /// which the Ed25519 signature covers: the edge has them signed by the
    /// platform (WebCrypto, native code) instead of in wasm. Appending
    /// `"." + base64url(signature)` gives exactly [`Signer::sign`]'s token.
    pub fn signing_input(&self, request: &SignedRequest) -> String {
        // What jwt-compact writes for this header and algorithm.
        const HEADER: &str = r#"{"alg":"EdDSA","typ":"JWT"}"#;
        let claims = serde_json::to_string(&self.claims(request)).unwrap_or_default();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(HEADER),
            URL_SAFE_NO_PAD.encode(claims)
        )
    }

    /// The Ed25519 seed, for a platform signer.
    pub fn seed(&self) -> [u8; 32] {
        self.seed
    }

    #[cfg(feature = "keys")]
    fn header() -> Header {
        Header::empty().with_token_type("JWT")
    }

    fn claims(&self, request: &SignedRequest) -> Claims<RequestClaims> {
        let claims = RequestClaims {
            iss: self.issuer.clone(),
            aud: request.audience.to_string(),
            jti: request.jti.to_string(),
            mth: request.method.to_string(),
            pqh: path_query_hash(request.path, request.query),
            rule: request.rule.map(str::to_string),
            typ: request.classify_type.map(str::to_string),
            cl: request.content_length.map(str::to_string),
            cty: request.content_type.map(str::to_string),
        };
        let now = datetime(request.now_ms);
        let options = TimeOptions::new(chrono::Duration::zero(), move || now);
        Claims::new(claims).set_duration_and_issuance(
            &options,
            chrono::Duration::seconds(i64::from(self.ttl_secs)),
        )
    }
}

/// A verified token: its claims and validity window (Unix seconds).
#[cfg(feature = "keys")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub claims: RequestClaims,
    pub issued_at: Option<i64>,
    pub expires_at: Option<i64>,
}

/// Why a signature was refused.
#[cfg(feature = "keys")]
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

#[cfg(feature = "keys")]
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

#[cfg(feature = "keys")]
impl std::error::Error for VerifyError {}

/// Parses a base64 Ed25519 public key.
#[cfg(feature = "keys")]
pub fn public_key_from_base64(text: &str) -> Result<PublicKey, String> {
    let bytes = decode_key_bytes(text).ok_or("the public key is not base64")?;
    PublicKey::from_slice(&bytes).map_err(|e| format!("not an Ed25519 public key: {e}"))
}

/// What a cell expects of the signature on a request it received. Build it
/// with [`Expected::new`] and change what differs from the defaults.
#[cfg(feature = "keys")]
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

#[cfg(feature = "keys")]
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

#[cfg(feature = "keys")]
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
#[cfg(feature = "keys")]
pub trait ReplayStore {
    /// Records `jti` until `expires_at` (Unix seconds); `false` when it is
    /// already there (a replay). `now` lets a store forget expired ids.
    fn remember(&mut self, jti: &str, expires_at: i64, now: i64) -> bool;
}

/// The replay check for a token [`verify`] accepted: refused when its `jti`
/// was seen before within its lifetime. Signed requests are unique (a new
/// `jti` for every request the router forwards), so a second sighting is a
/// replay.
#[cfg(feature = "keys")]
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
#[cfg(feature = "keys")]
#[derive(Debug, Default)]
pub struct MemoryReplayStore {
    seen: std::collections::HashMap<String, i64>,
}

#[cfg(feature = "keys")]
impl MemoryReplayStore {
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(feature = "keys")]
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

#[cfg(all(test, feature = "keys"))]
mod tests {
    use super::*;

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
        assert_eq!(
            check(
                &token,
                &key,
                "cell-2.example.com",
                "POST",
                "/api/v4/projects",
                "a=1",
                NOW + 36_000
            ),
            Err(VerifyError::Expired)
        );
        assert!(matches!(
            check(
                &token,
                &key,
                "cell-3.example.com",
                "POST",
                "/api/v4/projects",
                "a=1",
                NOW
            ),
            Err(VerifyError::WrongAudience { .. })
        ));
        assert_eq!(
            check(
                &token,
                &key,
                "cell-2.example.com",
                "POST",
                "/api/v4/projects",
                "a=2",
                NOW
            ),
            Err(VerifyError::WrongPath)
        );
        assert_eq!(
            check(
                &token,
                &key,
                "cell-2.example.com",
                "POST",
                "/api/v4/users",
                "a=1",
                NOW
            ),
            Err(VerifyError::WrongPath)
        );
        assert!(matches!(
            check(
                &token,
                &key,
                "cell-2.example.com",
                "DELETE",
                "/api/v4/projects",
                "a=1",
                NOW
            ),
            Err(VerifyError::WrongMethod { .. })
        ));
        assert_eq!(
            check(
                &token,
                &key,
                "cell-2.example.com",
                "POST",
                "/api/v4/projects",
                "a=1",
                NOW - 60_000
            ),
            Err(VerifyError::NotYetValid)
        );

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
        Ed25519.token(&Signer::header(), &claims, &s.key()).unwrap()
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
        assert!(Signer::from_base64(&STANDARD.encode(&full), "i", 30).is_ok());
        full[40] ^= 1;
        assert!(
            Signer::from_base64(&STANDARD.encode(&full), "i", 30).is_err(),
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
