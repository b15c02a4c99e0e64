//! Signed proxied requests: the router vouches for every request it sends
//! to a cell with a short-lived Ed25519 JWT (made with `jwt-compact`), so a
//! cell on the public internet can refuse anything that did not come
//! through the router (zero trust).
//!
//! The token travels in [`SIGNATURE_HEADER`]. Its claims bind it to one
//! request: the audience is the cell address, `mth` the method and `pqh`
//! the SHA-256 of the path and query, with `iat`/`exp` a few seconds apart
//! and a unique `jti` a cell may use to refuse replays. `router_keys::verify` is what a
//! cell (or its nginx auth hook, through `rulesctl signature verify`) runs.
//!
//! The key itself (deriving the public key, signing in Rust, verifying) is
//! the `router-keys` crate's: the worker never links it, since WebCrypto
//! signs for the edge and only `rulesctl`, cells and tests verify.

use std::fmt;

use crate::base64_codec::{decode, encode_url_safe_unpadded, Alphabet, Padding};
use chrono::{DateTime, TimeZone, Utc};
use jwt_compact::{Claims, TimeOptions};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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
/// `router_keys::verify` puts on `exp - iat`.
pub const DEFAULT_TTL_SECS: u32 = 60;

/// The hash that binds a token to a path and query.
pub fn path_query_hash(path: &str, query: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(path.as_bytes());
    if !query.is_empty() {
        hasher.update(b"?");
        hasher.update(query.as_bytes());
    }
    encode_url_safe_unpadded(&hasher.finalize())
}

/// A key's bytes from base64 (standard, or URL-safe without padding).
pub fn decode_key_bytes(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    decode(text.as_bytes(), Alphabet::Standard, Padding::Canonical).or_else(|| {
        decode(
            text.trim_end_matches('=').as_bytes(),
            Alphabet::UrlSafe,
            Padding::Absent,
        )
    })
}

/// Milliseconds since the Unix epoch as the time JWT claims are made of.
pub fn datetime(unix_ms: u64) -> DateTime<Utc> {
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
        let Some(seed) = bytes.first_chunk::<32>().copied() else {
            return Err("the signing key is shorter than an Ed25519 seed".into());
        };
        // Whether a 64-byte key's halves belong together is checked where
        // the curve arithmetic is built in (router_keys::signer_from_base64:
        // rulesctl and the deploy checks); the worker uses the seed alone.
        Ok(Signer {
            seed,
            issuer: issuer.to_string(),
            ttl_secs: ttl_secs.max(1),
        })
    }

    /// The token's first two parts (`base64url(header).base64url(claims)`),
    /// which the Ed25519 signature covers: the edge has them signed by the
    /// platform (WebCrypto, native code) instead of in wasm. Appending
    /// `"." + base64url(signature)` gives exactly the token `router-keys`
    /// signs in Rust.
    pub fn signing_input(&self, request: &SignedRequest) -> String {
        // What jwt-compact writes for this header and algorithm.
        const HEADER: &str = r#"{"alg":"EdDSA","typ":"JWT"}"#;
        let claims = serde_json::to_string(&self.claims(request)).unwrap_or_default();
        format!(
            "{}.{}",
            encode_url_safe_unpadded(HEADER.as_bytes()),
            encode_url_safe_unpadded(claims.as_bytes())
        )
    }

    /// The Ed25519 seed, for a platform signer.
    pub fn seed(&self) -> [u8; 32] {
        self.seed
    }

    /// The token's claims for one request.
    pub fn claims(&self, request: &SignedRequest) -> Claims<RequestClaims> {
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
