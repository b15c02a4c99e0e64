//! Transforms: values derived from a capture, addressed as `${output.key}`.

pub mod base64;
pub mod jwt_claims;
pub mod routable_token;

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
    /// ASCII lower case, as GitLab compares namespace paths.
    Lowercase,
    /// Percent-decoded text (`gitlab-org%2Fgitlab` -> `gitlab-org/gitlab`);
    /// nothing when the result is not UTF-8 or holds a control character.
    PercentDecode,
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
            "lowercase" => Some(TransformKind::Lowercase),
            "percent-decode" | "percent_decode" => Some(TransformKind::PercentDecode),
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
            (
                TransformKind::Base64 | TransformKind::Lowercase | TransformKind::PercentDecode,
                key,
            ) => match key {
                None | Some("value") => Ok(()),
                Some(k) => Err(format!("a text output has no field {k:?}")),
            },
            (TransformKind::JwtClaims, Some(path)) if path.split('.').all(|p| !p.is_empty()) => {
                Ok(())
            }
            (TransformKind::JwtClaims, Some(path)) => Err(format!("bad claim path {path:?}")),
            (TransformKind::JwtClaims, None) => Err("name a claim, e.g. ${claims.sub}".to_string()),
        }
    }

    /// Whether the output is one text (`${out}`), which an `extract` regex
    /// may split into fields.
    pub fn yields_text(self) -> bool {
        matches!(
            self,
            TransformKind::Base64 | TransformKind::Lowercase | TransformKind::PercentDecode
        )
    }

    /// Runs the transform; `None` when the input is not what it decodes.
    pub fn apply(self, input: &str) -> Option<Output> {
        match self {
            TransformKind::RoutableTokenPayload => {
                crate::select::transform::routable_token::decode_routable_token(input)
                    .map(Output::Fields)
            }
            TransformKind::Base64 => {
                crate::select::transform::base64::decode_base64_text(input).map(Output::Text)
            }
            TransformKind::JwtClaims => {
                crate::select::transform::jwt_claims::unverified_claims(input).map(Output::Claims)
            }
            TransformKind::Lowercase => Some(Output::Text(input.to_ascii_lowercase())),
            TransformKind::PercentDecode => percent_encoding::percent_decode_str(input)
                .decode_utf8()
                .ok()
                .filter(|text| !text.chars().any(char::is_control))
                .map(|text| Output::Text(text.into_owned())),
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
                crate::select::transform::jwt_claims::claim_at_path(claims, path).map(Cow::Owned)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(kind: &str, input: &str) -> Option<String> {
        match TransformKind::parse(kind)?.apply(input)? {
            Output::Text(t) => Some(t),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lowercase_folds_ascii_only() {
        assert_eq!(text("lowercase", "Cell2-Group").unwrap(), "cell2-group");
        assert_eq!(text("lowercase", "ÄB").unwrap(), "Äb");
    }

    #[test]
    fn percent_decode_refuses_control_bytes_and_bad_utf8() {
        assert_eq!(
            text("percent-decode", "gitlab-org%2Fgitlab").unwrap(),
            "gitlab-org/gitlab"
        );
        assert_eq!(text("percent-decode", "a%2fb%2Ec").unwrap(), "a/b.c");
        assert_eq!(text("percent-decode", "plain").unwrap(), "plain");
        for bad in ["a%00b", "a%0Ab", "%ff%fe", "a%7f"] {
            assert_eq!(text("percent-decode", bad), None, "{bad}");
        }
    }

    #[test]
    fn text_outputs_have_no_fields() {
        for kind in [TransformKind::Lowercase, TransformKind::PercentDecode] {
            assert!(kind.check_key(None).is_ok());
            assert!(kind.check_key(Some("c")).is_err());
        }
    }
}
