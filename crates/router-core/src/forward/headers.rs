//! Which headers go with a forwarded request (SPEC §7): the ones the
//! router sets, the client's it drops (hop-by-hop, spoofable, the router's
//! own, Cloudflare's version overrides), and what a client's `Connection`
//! may and may not remove.

use std::borrow::Cow;

/// Header the router sets to the public host.
pub const X_FORWARDED_HOST: &str = "x-forwarded-host";
pub const X_FORWARDED_PROTO: &str = "x-forwarded-proto";
/// Set to the client address Cloudflare gives the router
/// ([`CF_CONNECTING_IP`]); a client-sent chain is dropped.
pub const X_FORWARDED_FOR: &str = "x-forwarded-for";
/// The client's address as Cloudflare's edge saw it (set by Cloudflare,
/// overwriting whatever the client sent).
pub const CF_CONNECTING_IP: &str = "cf-connecting-ip";
pub const RULE_ACTION_HEADER: &str = "x-gitlab-http-router-rule-action";
pub const RULE_TYPE_HEADER: &str = "x-gitlab-http-router-rule-type";
/// Every header with this prefix is the router's: a client's is dropped.
pub const ROUTER_HEADER_PREFIX: &str = "x-gitlab-http-router-";

/// Hop-by-hop headers (RFC 9110 §7.6.1 and the usual legacy ones), which
/// never travel past the router. `upgrade` and `connection` are kept for a
/// WebSocket handshake by [`drops_header`]'s caller.
const HOP_BY_HOP: &[&str] = &[
    // RFC 9110 §18.4 reserves the field name: it is the `close` connection
    // option, which a client's `Connection` names on its own.
    "close",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
];

/// Client-sent headers that only the router (or Cloudflare) may set:
/// forwarded-host spoofing, client identity, URL rewriting, and the
/// Cloudflare Access pair the router uses toward the Topology Service.
/// Whole families go by prefix ([`FORBIDDEN_PREFIXES`]).
const CLIENT_FORBIDDEN: &[&str] = &[
    X_FORWARDED_HOST,
    X_FORWARDED_PROTO,
    X_FORWARDED_FOR,
    // RFC 7239 `Forwarded`: registries prefer it to X-Forwarded-* when they
    // build upload Location URLs.
    "forwarded",
    // Client addresses other proxies set: Rails and nginx trust them.
    "x-real-ip",
    "true-client-ip",
    // Path overrides some frameworks honour (IIS, Symfony, Zend).
    "x-original-url",
    "x-rewrite-url",
    "cf-access-client-id",
    "cf-access-client-secret",
    // Cloudflare's gradual-deployment headers: honoured at the edge before
    // the Worker runs, meaningless to a cell (an override without the
    // smoke-test secret is refused: `forward::VERSION_OVERRIDES`).
    VERSION_OVERRIDES,
    "cloudflare-workers-version-key",
    // Vendor state of the client's trace: the router sets it again when
    // it keeps the client's `traceparent` (crate::trace).
    crate::trace::TRACESTATE_HEADER,
];

/// Cloudflare's gradual-deployment override: a request that carries it
/// reaches the version it names, whatever the traffic split.
pub const VERSION_OVERRIDES: &str = "cloudflare-workers-version-overrides";
/// The header the deploy's smoke test sends its secret in (with
/// [`VERSION_OVERRIDES`]); a router header, so it never reaches a cell.
pub const SMOKE_TEST_HEADER: &str = "x-gitlab-http-router-smoke-test";

/// Whether a request naming a Worker version carries the deploy's
/// smoke-test secret (`GITLAB_SMOKE_TEST_SECRET`): never without one
/// configured. Compared by their SHA-256, in time that does not depend on
/// where they differ.
pub fn is_smoke_test(sent: Option<&str>, secret: Option<&str>) -> bool {
    use sha2::{Digest, Sha256};
    let (Some(sent), Some(secret)) = (sent, secret) else {
        return false;
    };
    let (a, b) = (
        Sha256::digest(sent.as_bytes()),
        Sha256::digest(secret.as_bytes()),
    );
    a.iter()
        .zip(b.iter())
        .fold(0u8, |diff, (x, y)| diff | (x ^ y))
        == 0
}

/// The response headers that name a smoke test's route: the rule that
/// decided, the listed cell (its `GITLAB_CELLS` id) and the address it was
/// forwarded to.
pub const ROUTE_RULE_HEADER: &str = "x-gitlab-http-router-route-rule";
pub const ROUTE_CELL_HEADER: &str = "x-gitlab-http-router-route-cell";
pub const ROUTE_UPSTREAM_HEADER: &str = "x-gitlab-http-router-route-upstream";

/// The headers a smoke test's response gets ([`is_smoke_test`]), naming
/// its route (an absent rule or cell: empty), so the deploy's checks see
/// where a request went; nothing for any other request.
pub fn route_names<'a>(
    smoke_test: bool,
    rule: Option<&'a str>,
    cell: Option<u64>,
    upstream: &str,
) -> Vec<(Cow<'static, str>, Cow<'a, str>)> {
    if !smoke_test {
        return Vec::new();
    }
    vec![
        (
            ROUTE_RULE_HEADER.into(),
            header_value(rule.unwrap_or_default()),
        ),
        (
            ROUTE_CELL_HEADER.into(),
            cell.map_or(Cow::Borrowed(""), |id| Cow::Owned(id.to_string())),
        ),
        (
            ROUTE_UPSTREAM_HEADER.into(),
            Cow::Owned(header_value(upstream).into_owned()),
        ),
    ]
}

/// `value` as a header value: visible ASCII and inner spaces only (a
/// rule's id is the operator's text), any other character left out.
fn header_value(value: &str) -> Cow<'_, str> {
    let fits = |c: char| c == ' ' || c.is_ascii_graphic();
    if value.chars().all(fits) {
        Cow::Borrowed(value.trim())
    } else {
        let kept: String = value.chars().filter(|c| fits(*c)).collect();
        Cow::Owned(kept.trim().to_string())
    }
}

/// Client-sent header families that are dropped whole: the router's own,
/// every `X-Forwarded-*` (the router sets host, proto and for; Rack also
/// reads port, ssl and scheme), and every `CF-Access-*` (Access's
/// credentials and its identity assertions, e.g. `CF-Access-Jwt-Assertion`
/// and `Cf-Access-Authenticated-User-Email`, which cells may trust).
pub const FORBIDDEN_PREFIXES: &[&str] = &[ROUTER_HEADER_PREFIX, "x-forwarded-", "cf-access-"];

/// A header name as the drop rules compare it: `_` read as `-` (Rack, PHP
/// and CGI map both to the same variable: `X_Forwarded_Host` is
/// `HTTP_X_FORWARDED_HOST`). Names arrive lower case from the runtime.
pub fn drop_key(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains('_') {
        std::borrow::Cow::Owned(name.replace('_', "-"))
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

/// Whether a header may never be removed because a client named it in
/// `Connection`: the headers the router sets or relies on (`relied_on`:
/// the ones it read to route, e.g. `cookie`), `host`, the body's
/// `content-length` and `content-type` (signed), and every `cf-*` header
/// (Cloudflare's own, e.g. `CF-Connecting-IP`).
fn kept_despite_connection(name: &str, relied_on: &[String]) -> bool {
    name.starts_with("cf-")
        || matches!(name, "host" | "content-length" | "content-type")
        || CLIENT_FORBIDDEN.contains(&name)
        || FORBIDDEN_PREFIXES.iter().any(|p| name.starts_with(p))
        || relied_on.iter().any(|r| r == name)
}

/// The client headers to delete by name before forwarding, given the
/// request's `Connection` and `Upgrade` values and the headers the router
/// relies on: the hop-by-hop and forbidden names plus those `Connection`
/// lists (but never one `kept_despite_connection` keeps), exactly the
/// names [`drops_header`] refuses (a WebSocket handshake keeps its
/// `Upgrade` and `Connection`). The edge also drops every name that starts
/// with one of [`FORBIDDEN_PREFIXES`], and compares names by [`drop_key`].
pub fn dropped_names(
    connection: Option<&str>,
    upgrade: Option<&str>,
    relied_on: &[String],
) -> Vec<String> {
    let websocket = is_websocket(upgrade);
    let tokens = connection_tokens(connection, relied_on);
    let mut names: Vec<String> = HOP_BY_HOP
        .iter()
        .chain(CLIENT_FORBIDDEN)
        .map(|n| n.to_string())
        .chain(tokens.iter().cloned())
        .filter(|n| drops_header(n, &tokens, websocket))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Whether a request's `Connection` and `Upgrade` make its drop list
/// differ from the one every request gets (`dropped_names(None, None, _)`,
/// which the edge applies when a plan names none): a WebSocket handshake
/// keeps its `Upgrade`, and a `Connection` token naming a header that list
/// does not drop adds it (tokens read as [`connection_tokens`] reads
/// them). The usual `Connection: keep-alive` (or `close`) does not, and
/// costs no list of its own.
pub fn needs_own_drops(
    connection: Option<&str>,
    upgrade: Option<&str>,
    relied_on: &[String],
) -> bool {
    is_websocket(upgrade)
        || connection_tokens(connection, relied_on)
            .iter()
            .any(|t| !drops_header(t, &[], false))
}

/// Whether a client-sent header (lower-case name) must not be forwarded.
/// `connection_tokens` are the names the client's `Connection` header lists
/// ([`connection_tokens`]), which are hop-by-hop too; `websocket` keeps the
/// upgrade handshake. Names compare with `_` read as `-` ([`drop_key`]).
pub fn drops_header(name: &str, connection_tokens: &[String], websocket: bool) -> bool {
    let name = drop_key(name);
    let name = name.as_ref();
    if websocket && (name == "upgrade" || name == "connection") {
        return false;
    }
    HOP_BY_HOP.contains(&name)
        || CLIENT_FORBIDDEN.contains(&name)
        || FORBIDDEN_PREFIXES.iter().any(|p| name.starts_with(p))
        || connection_tokens.iter().any(|t| t == name)
}

/// Names listed in a `Connection` header, lower case, `_` read as `-`
/// (`close` and `keep-alive` included; they are hop-by-hop anyway), minus
/// those the router never removes for it (`kept_despite_connection`).
/// Only RFC 9110 tokens are header names: anything else in the list
/// (control bytes, the plan's separators, spaces) names no header and is
/// left out.
pub fn connection_tokens(connection: Option<&str>, relied_on: &[String]) -> Vec<String> {
    connection
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|t| is_token(t))
        .map(|t| drop_key(&t.to_ascii_lowercase()).into_owned())
        .filter(|t| !kept_despite_connection(t, relied_on))
        .collect()
}

/// An RFC 9110 `token` (a header name): one or more of the visible ASCII
/// characters but delimiters.
pub fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        })
}

/// The `X-Forwarded-For` the router sends: Cloudflare's `CF-Connecting-IP`
/// when it is an IP address (IPv4 or IPv6 characters only), else none.
pub fn forwarded_for(cf_connecting_ip: Option<&str>) -> Option<&str> {
    let ip = cf_connecting_ip?.trim();
    (!ip.is_empty()
        && ip.len() <= 45
        && ip
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'.' || b == b':'))
    .then_some(ip)
}

/// Whether the request is a WebSocket handshake to pass through.
pub fn is_websocket(upgrade: Option<&str>) -> bool {
    upgrade.is_some_and(|u| u.trim().eq_ignore_ascii_case("websocket"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_spoofed_router_and_hop_by_hop_headers() {
        let none: Vec<String> = vec![];
        for h in [
            "x-forwarded-host",
            "x-gitlab-http-router-rule-action",
            "x-gitlab-http-router-anything",
            "connection",
            "transfer-encoding",
            "te",
            "keep-alive",
            "upgrade",
            "cf-access-client-secret",
        ] {
            assert!(drops_header(h, &none, false), "{h}");
        }
        for h in ["cookie", "authorization", "private-token", "content-type"] {
            assert!(!drops_header(h, &none, false), "{h}");
        }
        let listed = connection_tokens(Some("close, X-Secret-Hop"), &[]);
        assert!(drops_header("x-secret-hop", &listed, false));
        assert!(!drops_header("upgrade", &none, true));
        assert!(!drops_header("connection", &none, true));
    }

    #[test]
    fn dropped_names_agree_with_drops_header() {
        let plain = dropped_names(Some("keep-alive, X-Hop"), None, &[]);
        for n in [
            "connection",
            "upgrade",
            "te",
            "x-forwarded-host",
            "cf-access-client-id",
            "x-hop",
            "keep-alive",
        ] {
            assert!(plain.contains(&n.to_string()), "{n}");
        }
        let ws = dropped_names(Some("Upgrade"), Some("websocket"), &[]);
        assert!(
            !ws.contains(&"upgrade".to_string()),
            "a WebSocket handshake keeps Upgrade"
        );
        assert!(!ws.contains(&"connection".to_string()));
        assert!(ws.contains(&"te".to_string()));
        // And the list is complete: every name drops_header drops is on it.
        let tokens = connection_tokens(Some("keep-alive, X-Hop"), &[]);
        for n in HOP_BY_HOP
            .iter()
            .chain(CLIENT_FORBIDDEN)
            .copied()
            .chain(["x-hop"])
        {
            if drops_header(n, &tokens, false) {
                assert!(plain.contains(&n.to_string()), "{n}");
            }
        }
    }

    #[test]
    fn drops_client_identity_rewrites_and_whole_families() {
        let none: Vec<String> = vec![];
        for h in [
            "x-forwarded-for",
            "x-forwarded-proto",
            "x-forwarded-port",
            "x-forwarded-anything",
            "x-real-ip",
            "true-client-ip",
            "x-original-url",
            "x-rewrite-url",
            "cf-access-jwt-assertion",
            "cf-access-authenticated-user-email",
            "forwarded",
        ] {
            assert!(drops_header(h, &none, false), "{h}");
        }
        assert!(!drops_header("cf-connecting-ip", &none, false));
        assert!(!drops_header("x-request-id", &none, false));
    }

    #[test]
    fn underscore_spellings_of_protected_names_are_dropped() {
        let none: Vec<String> = vec![];
        for h in [
            "x_forwarded_host",
            "x_forwarded_proto",
            "x-forwarded_for",
            "x_gitlab_http_router_rule_type",
            "x_gitlab_http_router_signature",
            "cf_access_client_secret",
            "x_real_ip",
            "true_client_ip",
            "x_original_url",
            "transfer_encoding",
        ] {
            assert!(drops_header(h, &none, false), "{h}");
        }
        // Other underscore names pass: only protected ones are refused.
        assert!(!drops_header("private_token", &none, false));
        assert_eq!(drop_key("x_forwarded_host"), "x-forwarded-host");
        assert!(matches!(
            drop_key("cookie"),
            std::borrow::Cow::Borrowed("cookie")
        ));
    }

    #[test]
    fn only_unusual_connection_tokens_need_a_drop_list_of_their_own() {
        let base = dropped_names(None, None, &[]);
        let relied_on = vec!["cookie".to_string()];
        for (connection, upgrade, own) in [
            (Some("keep-alive"), None, false),
            (Some("Keep-Alive, close"), None, false),
            (Some(" close , ,TE"), None, false),
            (Some("x-forwarded-foo, x_gitlab_http_router_x"), None, false),
            (Some("keep-alive, X-Hop"), None, true),
            (Some("cookie"), None, true),
            (Some("upgrade"), Some("h2c"), false),
            (Some("Upgrade"), Some("websocket"), true),
            (None, Some("websocket"), true),
            (None, None, false),
        ] {
            assert_eq!(
                needs_own_drops(connection, upgrade, &[]),
                own,
                "{connection:?} {upgrade:?}"
            );
            if !own {
                // The edge's default list drops exactly what the full one would.
                for name in dropped_names(connection, upgrade, &relied_on) {
                    assert!(
                        base.contains(&name)
                            || FORBIDDEN_PREFIXES.iter().any(|p| name.starts_with(p)),
                        "{connection:?}: {name}"
                    );
                }
            }
        }
        assert!(base.contains(&"close".to_string()));
    }

    #[test]
    fn connection_never_removes_what_the_router_sets_or_relies_on() {
        let relied_on = vec!["cookie".to_string(), "private-token".to_string()];
        let tokens = connection_tokens(
            Some("close, CF-Connecting-IP, cf-ray, Cookie, private_token, Host, Content-Length, Content-Type, X-Forwarded-For, X-Hop, x_other"),
            &relied_on,
        );
        assert_eq!(tokens, vec!["close", "x-hop", "x-other"]);
        let dropped = dropped_names(Some("cf-connecting-ip, cookie, x-hop"), None, &relied_on);
        for kept in ["cf-connecting-ip", "cookie"] {
            assert!(!dropped.contains(&kept.to_string()), "{kept}");
        }
        assert!(dropped.contains(&"x-hop".to_string()));
        assert!(dropped.contains(&"x-forwarded-for".to_string()));
    }

    #[test]
    fn connection_tokens_with_separators_or_controls_name_no_header() {
        let relied_on = vec!["cookie".to_string()];
        // `x-foo\x01cookie` once split into `x-foo` and `cookie` in the
        // entry's plan reading, stripping the Cookie the request was routed by.
        for odd in [
            "x-foo\u{1}cookie",
            "x-foo\u{0}cookie",
            "x foo",
            "x-foo\tbar",
            "caf\u{e9}",
            "a:b",
        ] {
            assert_eq!(
                connection_tokens(Some(odd), &relied_on),
                Vec::<String>::new(),
                "{odd:?}"
            );
            assert!(!needs_own_drops(Some(odd), None, &relied_on), "{odd:?}");
            let dropped = dropped_names(Some(odd), None, &relied_on);
            assert!(dropped.iter().all(|n| is_token(n)), "{dropped:?}");
        }
        assert_eq!(
            connection_tokens(Some("x-foo\u{1}cookie, x-bar"), &relied_on),
            vec!["x-bar"]
        );
        assert!(is_token("x-Custom_1!#$%&'*+.^`|~"));
        for not in ["", "a b", "a,b", "a\"", "(a)", "\u{7f}"] {
            assert!(!is_token(not), "{not:?}");
        }
    }

    #[test]
    fn only_the_smoke_tests_secret_opens_a_version_override() {
        assert!(is_smoke_test(Some("s3cret"), Some("s3cret")));
        for (sent, secret) in [
            (None, Some("s3cret")),
            (Some(""), Some("s3cret")),
            (Some("s3cre"), Some("s3cret")),
            (Some("s3cret"), None),
            (None, None),
        ] {
            assert!(!is_smoke_test(sent, secret), "{sent:?} {secret:?}");
        }
    }

    #[test]
    fn version_overrides_and_tracestate_are_never_forwarded() {
        for name in [
            "cloudflare-workers-version-overrides",
            "cloudflare-workers-version-key",
            "tracestate",
            "x-gitlab-http-router-smoke-test",
        ] {
            assert!(drops_header(name, &[], false), "{name}");
            assert!(
                dropped_names(None, None, &[]).contains(&name.to_string())
                    || FORBIDDEN_PREFIXES.iter().any(|p| name.starts_with(p)),
                "{name}"
            );
        }
    }

    #[test]
    fn forwarded_for_is_cloudflares_address_or_nothing() {
        assert_eq!(forwarded_for(Some("203.0.113.7")), Some("203.0.113.7"));
        assert_eq!(forwarded_for(Some(" 2001:db8::1 ")), Some("2001:db8::1"));
        assert_eq!(forwarded_for(None), None);
        assert_eq!(forwarded_for(Some("")), None);
        assert_eq!(forwarded_for(Some("1.2.3.4, 5.6.7.8")), None);
        assert_eq!(forwarded_for(Some("evil.example")), None);
    }
}
