//! The `jwt-claims` transform (SPEC §3): claims of a JWT read without verifying it.
//!
//! Parsing is done by `jwt-compact` (`UntrustedToken`): a compact JWS of exactly three
//! dot-separated parts, each unpadded URL-safe base64, a JSON header with an `alg`, JSON claims.
//! Nothing here checks the signature, the algorithm or the time claims: the router only routes on
//! what a token says, the cell that receives the request authenticates it.

use jwt_compact::{Claims, UntrustedToken};
use serde_json::{Map, Value};

/// Longest token (16 KiB) that is parsed at all; anything longer is rejected outright.
pub const MAX_JWT_LEN: usize = 16 * 1024;

/// The claims object of `token` (no `Bearer ` prefix, no surrounding whitespace), without
/// verifying its signature. `None` if the token is malformed or longer than [`MAX_JWT_LEN`].
///
/// Malformed means: not three parts, a part that is not unpadded URL-safe base64, a header that
/// is not a JSON object with a string `alg`, a `cty` other than JSON, claims that are not a JSON
/// object. `jwt-compact` also requires `exp`, `nbf` and `iat`, when present, to be numeric dates
/// (representable as a UTC timestamp); they are returned as whole seconds (a fractional part is
/// dropped).
#[must_use]
pub fn unverified_claims(token: &str) -> Option<Value> {
    let token = parse(token)?;
    let claims: Claims<Map<String, Value>> = token.deserialize_claims_unchecked().ok()?;
    // jwt-compact moves the registered time claims out of the custom ones: put them back.
    let mut object = claims.custom;
    for (name, time) in [
        ("exp", claims.expiration),
        ("nbf", claims.not_before),
        ("iat", claims.issued_at),
    ] {
        if let Some(time) = time {
            object.insert(name.to_owned(), Value::from(time.timestamp()));
        }
    }
    Some(Value::Object(object))
}

/// The `alg` of the token's header (e.g. `RS256`, or `none`), so that a caller configured to
/// verify tokens can refuse `none`. `None` if the token is malformed or oversized, as for
/// [`unverified_claims`].
#[must_use]
pub fn header_alg(token: &str) -> Option<String> {
    parse(token).map(|token| token.algorithm().to_owned())
}

/// The claim at `dot_path` as text: `"access.0.name"` walks object keys and array indices
/// (decimal, no sign). Strings are returned as they are, numbers and booleans as their JSON text,
/// objects and arrays as compact JSON. `None` for `null`, a missing claim, an empty path or an
/// empty segment (keys containing `.` cannot be addressed).
#[must_use]
pub fn claim_at_path(claims: &Value, dot_path: &str) -> Option<String> {
    if dot_path.is_empty() {
        return None;
    }
    let mut current = claims;
    for segment in dot_path.split('.') {
        if segment.is_empty() {
            return None;
        }
        current = match current {
            Value::Object(map) => map.get(segment)?,
            Value::Array(items) => {
                if !segment.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                items.get(segment.parse::<usize>().ok()?)?
            }
            _ => return None,
        };
    }
    match current {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Array(_) | Value::Object(_) => serde_json::to_string(current).ok(),
    }
}

fn parse(token: &str) -> Option<UntrustedToken<'_>> {
    if token.len() > MAX_JWT_LEN {
        return None;
    }
    UntrustedToken::new(token).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
    use base64::Engine as _;
    use jwt_compact::alg::{Hs256, Hs256Key};
    use jwt_compact::{AlgorithmExt as _, Header};
    use proptest::prelude::*;
    use serde_json::json;

    fn b64(data: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(data)
    }

    /// An unsigned-looking token assembled by hand.
    fn raw_token(header: &str, claims: &str, signature: &[u8]) -> String {
        format!(
            "{}.{}.{}",
            b64(header.as_bytes()),
            b64(claims.as_bytes()),
            b64(signature)
        )
    }

    fn registry_claims() -> Value {
        json!({
            "iss": "gitlab-issuer",
            "aud": "container_registry",
            "sub": "root",
            "jti": "4b6f9e3c-2f3d-4d8a-9a5e-0c9b1f0d2a11",
            "iat": 1_700_000_000,
            "nbf": 1_699_999_995,
            "exp": 1_700_000_300,
            "auth_type": "gitlab_or_ldap",
            "user": {"username": "root", "user_id": 1},
            "access": [
                {
                    "type": "repository",
                    "name": "gitlab-org/gitlab-runner",
                    "actions": ["pull", "push"],
                    "meta": {"project_path": "gitlab-org/gitlab-runner", "project_id": 278_964,
                             "root_namespace_id": 9970, "namespace_id": 9970}
                },
                {"type": "repository", "name": "gitlab-org/gitaly", "actions": ["pull"]}
            ],
            "admin": false,
            "score": 1.5,
            "nothing": null
        })
    }

    fn registry_token() -> String {
        raw_token(
            r#"{"alg":"RS256","typ":"JWT","kid":"ABCD:EFGH:IJKL"}"#,
            &registry_claims().to_string(),
            &[0x42; 256],
        )
    }

    #[test]
    fn reads_registry_token_claims() {
        assert_eq!(
            unverified_claims(&registry_token()),
            Some(registry_claims())
        );
        assert_eq!(header_alg(&registry_token()).as_deref(), Some("RS256"));
    }

    #[test]
    fn claim_paths() {
        let claims = unverified_claims(&registry_token()).unwrap();
        let at = |path: &str| claim_at_path(&claims, path);
        assert_eq!(at("sub").as_deref(), Some("root"));
        assert_eq!(
            at("access.0.name").as_deref(),
            Some("gitlab-org/gitlab-runner")
        );
        assert_eq!(at("access.1.name").as_deref(), Some("gitlab-org/gitaly"));
        assert_eq!(at("access.0.meta.project_id").as_deref(), Some("278964"));
        assert_eq!(at("access.0.actions.1").as_deref(), Some("push"));
        assert_eq!(
            at("access.0.actions").as_deref(),
            Some(r#"["pull","push"]"#)
        );
        assert_eq!(
            at("user").as_deref(),
            Some(r#"{"user_id":1,"username":"root"}"#)
        );
        assert_eq!(at("user.user_id").as_deref(), Some("1"));
        assert_eq!(at("exp").as_deref(), Some("1700000300"));
        assert_eq!(at("iat").as_deref(), Some("1700000000"));
        assert_eq!(at("nbf").as_deref(), Some("1699999995"));
        assert_eq!(at("admin").as_deref(), Some("false"));
        assert_eq!(at("score").as_deref(), Some("1.5"));
        assert_eq!(at("nothing"), None);
        assert_eq!(at("missing"), None);
        assert_eq!(at("access.2.name"), None);
        assert_eq!(at("access.-1.name"), None);
        assert_eq!(at("access.+0.name"), None);
        assert_eq!(at("access.x.name"), None);
        assert_eq!(at("access.99999999999999999999999.name"), None);
        assert_eq!(at("sub.0"), None);
        assert_eq!(at("access..name"), None);
        assert_eq!(at("access.0."), None);
        assert_eq!(at(".sub"), None);
        assert_eq!(at(""), None);
    }

    #[test]
    fn numeric_object_keys_and_leading_zero_indices() {
        let claims = json!({"0": "zero", "list": ["a", "b"], "k.dotted": 1});
        assert_eq!(claim_at_path(&claims, "0").as_deref(), Some("zero"));
        assert_eq!(claim_at_path(&claims, "list.01").as_deref(), Some("b"));
        assert_eq!(claim_at_path(&claims, "k.dotted"), None);
        assert_eq!(claim_at_path(&json!("scalar"), "a"), None);
        assert_eq!(claim_at_path(&json!(["x"]), "0").as_deref(), Some("x"));
    }

    #[test]
    fn real_hs256_token() {
        let key = Hs256Key::new(b"super_secret_key_donut_steel");
        let claims = Claims::new(json!({"sub": "user-1", "org": {"id": 42, "path": "acme"}}));
        let header = Header::empty().with_token_type("JWT");
        let token = Hs256.token(&header, &claims, &key).unwrap();
        let read = unverified_claims(&token).unwrap();
        assert_eq!(claim_at_path(&read, "org.path").as_deref(), Some("acme"));
        assert_eq!(claim_at_path(&read, "org.id").as_deref(), Some("42"));
        assert_eq!(header_alg(&token).as_deref(), Some("HS256"));
    }

    #[test]
    fn alg_none_is_read_but_reported() {
        let token = format!("{}.{}.", b64(br#"{"alg":"none"}"#), b64(br#"{"sub":"x"}"#));
        assert_eq!(unverified_claims(&token), Some(json!({"sub": "x"})));
        assert_eq!(header_alg(&token).as_deref(), Some("none"));
    }

    #[test]
    fn part_count() {
        let token = registry_token();
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        // Two parts (no signature separator) are not a JWS.
        assert_eq!(unverified_claims(&parts[..2].join(".")), None);
        assert_eq!(header_alg(&parts[..2].join(".")), None);
        assert_eq!(unverified_claims(parts[0]), None);
        // Four or five parts (JWE) neither.
        assert_eq!(unverified_claims(&format!("{token}.")), None);
        assert_eq!(unverified_claims(&format!("{token}.{}", parts[2])), None);
        assert_eq!(unverified_claims(&format!("{token}.a.b")), None);
        assert_eq!(unverified_claims(""), None);
        assert_eq!(unverified_claims(".."), None);
    }

    #[test]
    fn bad_base64() {
        let header = r#"{"alg":"HS256"}"#;
        let claims = r#"{"sub":"x"}"#;
        let good = raw_token(header, claims, b"sig");
        assert!(unverified_claims(&good).is_some());
        let padded = format!(
            "{}.{}.{}",
            URL_SAFE.encode(header),
            URL_SAFE.encode(claims),
            b64(b"sig")
        );
        assert!(padded.contains('='));
        assert_eq!(unverified_claims(&padded), None);
        let standard = format!(
            "{}.{}.{}",
            b64(header.as_bytes()),
            STANDARD.encode([0xfbu8, 0xff]),
            b64(b"sig")
        );
        assert_eq!(unverified_claims(&standard), None);
        for bad in [
            format!("{}.e30*.c2ln", b64(header.as_bytes())),
            format!(
                "{}.{}.c2ln!",
                b64(header.as_bytes()),
                b64(claims.as_bytes())
            ),
            format!(
                "!{}.{}.c2ln",
                b64(header.as_bytes()),
                b64(claims.as_bytes())
            ),
            format!(
                "{}.{}x.c2ln",
                b64(header.as_bytes()),
                b64(claims.as_bytes())
            ),
            format!(" {good}"),
            format!("{good} "),
            format!("Bearer {good}"),
        ] {
            assert_eq!(unverified_claims(&bad), None, "{bad}");
        }
    }

    #[test]
    fn bad_json() {
        let header = r#"{"alg":"HS256"}"#;
        for claims in [
            "not json",
            "",
            "[1,2,3]",
            "\"string\"",
            "42",
            "null",
            r#"{"sub":"x""#,
            r#"{"sub":"x"} trailing"#,
            r#"{"exp":"tomorrow"}"#,
            r#"{"exp":null}"#,
            r#"{"iat":1e300}"#,
        ] {
            assert_eq!(
                unverified_claims(&raw_token(header, claims, b"sig")),
                None,
                "{claims}"
            );
        }
        for header in [
            "not json",
            "{}",
            r#"{"alg":5}"#,
            r#"{"typ":"JWT"}"#,
            "[]",
            r#"{"alg":"HS256","cty":"cbor"}"#,
        ] {
            let token = raw_token(header, r#"{"sub":"x"}"#, b"sig");
            assert_eq!(unverified_claims(&token), None, "{header}");
            assert_eq!(header_alg(&token), None, "{header}");
        }
        // A non-UTF-8 claims part.
        let token = format!(
            "{}.{}.{}",
            b64(header.as_bytes()),
            b64(&[0x7b, 0xff, 0x7d]),
            b64(b"sig")
        );
        assert_eq!(unverified_claims(&token), None);
    }

    #[test]
    fn empty_claims_and_extra_header_fields() {
        let token = raw_token(
            r#"{"alg":"ES256","typ":"JWT","kid":"k1","x-custom":[1,2]}"#,
            "{}",
            b"",
        );
        assert_eq!(unverified_claims(&token), Some(json!({})));
        assert_eq!(header_alg(&token).as_deref(), Some("ES256"));
        let json_cty = raw_token(r#"{"alg":"HS256","cty":"JSON"}"#, r#"{"a":1}"#, b"s");
        assert_eq!(unverified_claims(&json_cty), Some(json!({"a": 1})));
    }

    #[test]
    fn time_claims_are_integral_seconds() {
        let token = raw_token(
            r#"{"alg":"HS256"}"#,
            r#"{"exp":1700000000.75,"nbf":-5,"iat":0}"#,
            b"s",
        );
        assert_eq!(
            unverified_claims(&token),
            Some(json!({"exp": 1_700_000_000, "nbf": -5, "iat": 0}))
        );
    }

    #[test]
    fn deeply_nested_claims() {
        let nested = format!("{{\"a\":{}1{}}}", "[".repeat(100), "]".repeat(100));
        let token = raw_token(r#"{"alg":"HS256"}"#, &nested, b"s");
        let claims = unverified_claims(&token).unwrap();
        let path = format!("a{}", ".0".repeat(100));
        assert_eq!(claim_at_path(&claims, &path).as_deref(), Some("1"));
        // Beyond serde_json's recursion limit: an error, not a stack overflow.
        let too_deep = format!("{{\"a\":{}1{}}}", "[".repeat(5000), "]".repeat(5000));
        let token = raw_token(r#"{"alg":"HS256"}"#, &too_deep, b"s");
        assert!(token.len() <= MAX_JWT_LEN);
        assert_eq!(unverified_claims(&token), None);
    }

    #[test]
    fn size_cap() {
        let header = r#"{"alg":"HS256"}"#;
        let overhead = raw_token(header, r#"{"p":""}"#, b"").len();
        // Grow the claims so the token lands exactly on the cap, then one byte over.
        let fill = (MAX_JWT_LEN - overhead) / 4 * 3;
        let fits = raw_token(header, &format!(r#"{{"p":"{}"}}"#, "x".repeat(fill)), b"");
        assert!(fits.len() <= MAX_JWT_LEN, "{}", fits.len());
        assert!(unverified_claims(&fits).is_some());
        let huge = raw_token(header, &format!(r#"{{"p":"{}"}}"#, "x".repeat(20_000)), b"");
        assert!(huge.len() > MAX_JWT_LEN);
        assert_eq!(unverified_claims(&huge), None);
        assert_eq!(header_alg(&huge), None);
        assert_eq!(unverified_claims(&"a.".repeat(1_000_000)), None);
    }

    proptest! {
        #[test]
        fn prop_never_panics(s in "\\PC{0,600}", path in "[a-z0-9.]{0,12}") {
            if let Some(claims) = unverified_claims(&s) {
                let _ = claim_at_path(&claims, &path);
            }
            let _ = header_alg(&s);
        }

        #[test]
        fn prop_never_panics_on_jwt_like(s in "[A-Za-z0-9_-]{0,60}\\.[A-Za-z0-9_-]{0,60}\\.[A-Za-z0-9_=-]{0,40}") {
            let _ = unverified_claims(&s);
            let _ = header_alg(&s);
        }

        #[test]
        fn prop_never_panics_on_arbitrary_json_parts(header in "\\PC{0,40}", claims in "\\PC{0,80}", sig in any::<Vec<u8>>()) {
            let token = raw_token(&header, &claims, &sig);
            if let Some(value) = unverified_claims(&token) {
                prop_assert!(value.is_object());
            }
            let _ = header_alg(&token);
        }

        #[test]
        fn prop_string_claims_round_trip(sub in "\\PC{0,50}", name in "\\PC{0,50}") {
            let claims = json!({"sub": sub, "access": [{"name": name}]});
            let token = raw_token(r#"{"alg":"RS256"}"#, &claims.to_string(), b"sig");
            let read = unverified_claims(&token).unwrap();
            prop_assert_eq!(claim_at_path(&read, "sub"), Some(sub));
            prop_assert_eq!(claim_at_path(&read, "access.0.name"), Some(name));
        }
    }
}
