//! Transforms: values derived from a capture, addressed as `${output.key}`.

use std::borrow::Cow;

use serde_json::Value;

/// Routable token payload keys GitLab writes (SPEC §4).
pub const ROUTABLE_TOKEN_KEYS: &[&str] = &["c", "g", "o", "p", "u", "t"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransformKind {
    /// A GitLab routable token's `k:v` payload, CRC checked, values decimal.
    RoutableTokenPayload,
    /// Base64 (standard or URL-safe) decoded to text.
    Base64,
    /// The unverified JSON claims of a JWT.
    JwtClaims,
}

/// A transform's result for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Fields(Vec<(String, String)>),
    Text(String),
    Claims(Value),
}

impl TransformKind {
    pub fn parse(name: &str) -> Option<TransformKind> {
        match name {
            "routable-token-payload" | "routable_token_payload" => {
                Some(TransformKind::RoutableTokenPayload)
            }
            "base64" => Some(TransformKind::Base64),
            "jwt-claims" | "jwt_claims" => Some(TransformKind::JwtClaims),
            _ => None,
        }
    }

    /// Checks at compile time that `${output.key}` can ever resolve.
    pub fn check_key(self, key: Option<&str>) -> Result<(), String> {
        match (self, key) {
            (TransformKind::RoutableTokenPayload, Some(k)) if ROUTABLE_TOKEN_KEYS.contains(&k) => {
                Ok(())
            }
            (TransformKind::RoutableTokenPayload, Some(k)) => Err(format!(
                "a routable token has no field {k:?} (fields: {})",
                ROUTABLE_TOKEN_KEYS.join(", ")
            )),
            (TransformKind::RoutableTokenPayload, None) => {
                Err("name a field of the token, e.g. ${decoded.c}".to_string())
            }
            (TransformKind::Base64, None | Some("value")) => Ok(()),
            (TransformKind::Base64, Some(k)) => Err(format!("base64 output has no field {k:?}")),
            (TransformKind::JwtClaims, Some(path)) if path.split('.').all(|p| !p.is_empty()) => {
                Ok(())
            }
            (TransformKind::JwtClaims, Some(path)) => Err(format!("bad claim path {path:?}")),
            (TransformKind::JwtClaims, None) => Err("name a claim, e.g. ${claims.sub}".to_string()),
        }
    }

    /// Runs the transform; `None` when the input is not what it decodes.
    pub fn apply(self, input: &str) -> Option<Output> {
        match self {
            TransformKind::RoutableTokenPayload => {
                crate::token::decode_routable_token(input).map(Output::Fields)
            }
            TransformKind::Base64 => crate::b64::decode_base64_text(input).map(Output::Text),
            TransformKind::JwtClaims => crate::jwt::unverified_claims(input).map(Output::Claims),
        }
    }
}

impl Output {
    /// The value at `key` (see [`TransformKind::check_key`]).
    pub fn get(&self, key: Option<&str>) -> Option<Cow<'_, str>> {
        match (self, key) {
            (Output::Fields(fields), Some(k)) => fields
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| Cow::Borrowed(v.as_str())),
            (Output::Text(text), None | Some("value")) => Some(Cow::Borrowed(text)),
            (Output::Claims(claims), Some(path)) => {
                crate::jwt::claim_at_path(claims, path).map(Cow::Owned)
            }
            _ => None,
        }
    }
}
