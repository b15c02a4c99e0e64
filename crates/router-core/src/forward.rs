//! The forwarding plan (SPEC §7): where a request goes and which headers
//! go with it. The edge applies it to the incoming request without copying
//! the body.

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
];

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
/// lists (but never one [`kept_despite_connection`] keeps), exactly the
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
/// those the router never removes for it ([`kept_despite_connection`]).
pub fn connection_tokens(connection: Option<&str>, relied_on: &[String]) -> Vec<String> {
    connection
        .unwrap_or("")
        .split(',')
        .map(|t| drop_key(&t.trim().to_ascii_lowercase()).into_owned())
        .filter(|t| !t.is_empty() && !kept_despite_connection(t, relied_on))
        .collect()
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

/// `scheme://address/path?query` for the cell.
pub fn upstream_url(scheme: &str, address: &str, path: &str, query: &str) -> String {
    let mut url =
        String::with_capacity(scheme.len() + address.len() + path.len() + query.len() + 5);
    url.push_str(scheme);
    url.push_str("://");
    url.push_str(address);
    url.push_str(if path.is_empty() { "/" } else { path });
    if !query.is_empty() {
        url.push('?');
        url.push_str(query);
    }
    url
}

/// Checks that an address is a bare `host[:port]`: no scheme, userinfo,
/// path or whitespace, a DNS name or IPv4 literal, a port in range.
pub fn validate_address(address: &str) -> Result<(), String> {
    let (host, port) = split_host_port(address)?;
    if host.is_empty() || host.len() > 253 {
        return Err(format!("{address:?}: empty or overlong host"));
    }
    let ok_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if !host.split('.').all(ok_label) {
        return Err(format!("{address:?}: not a host name"));
    }
    if let Some(port) = port {
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(format!("{address:?}: bad port")),
        }
    }
    Ok(())
}

fn split_host_port(address: &str) -> Result<(&str, Option<&str>), String> {
    if address.contains(['/', '@', '?', '#', '\\', ' ', '\t', '\r', '\n', '[', ']']) {
        return Err(format!("{address:?}: expected host[:port] only"));
    }
    Ok(match address.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (address, None),
    })
}

/// The upstream hosts the router may proxy to (the SSRF guard). Entries:
/// `host`, `host:port`, `*.domain` (any subdomain), with `:*` for any port.
/// An entry without a port allows the scheme's default port only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<AllowEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct AllowEntry {
    /// Lower-case host, or the suffix (with leading dot) for wildcards.
    host: String,
    wildcard: bool,
    port: AllowPort,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum AllowPort {
    Default,
    Any,
    Exact(String),
}

impl AllowList {
    /// Parses a comma- or whitespace-separated list.
    pub fn parse(spec: &str) -> Result<AllowList, String> {
        let mut entries = Vec::new();
        for raw in spec
            .split([',', ' ', '\n', '\t'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let lower = raw.to_ascii_lowercase();
            let (host_part, port) = match lower.rsplit_once(':') {
                Some((h, "*")) => (h.to_string(), AllowPort::Any),
                Some((h, p)) => (h.to_string(), AllowPort::Exact(p.to_string())),
                None => (lower.clone(), AllowPort::Default),
            };
            let (host, wildcard) = match host_part.strip_prefix("*.") {
                Some(rest) => (format!(".{rest}"), true),
                None => (host_part.clone(), false),
            };
            let check = format!(
                "{}{}",
                host.trim_start_matches('.'),
                match &port {
                    AllowPort::Exact(p) => format!(":{p}"),
                    _ => String::new(),
                }
            );
            validate_address(&check).map_err(|e| format!("allow-list entry {raw:?}: {e}"))?;
            entries.push(AllowEntry {
                host,
                wildcard,
                port,
            });
        }
        Ok(AllowList { entries })
    }

    /// Adds one exact `host[:port]` (the legacy cell, a rule's fixed address).
    pub fn allow_exact(&mut self, address: &str) {
        if let Ok(mut list) = AllowList::parse(address) {
            self.entries.append(&mut list.entries);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `address` (`host[:port]`) may be proxied to. Asked for
    /// every forwarded request, so the usual case (a listed cell's exact
    /// address) allocates nothing and skips the address check: an exact
    /// entry was checked when the list was parsed.
    pub fn allows(&self, address: &str) -> bool {
        let (host, port) = match address.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (address, None),
        };
        // Not with a `:*` entry: any text after the colon would pass it.
        let exact = |e: &AllowEntry| {
            !e.wildcard
                && e.port != AllowPort::Any
                && e.port_accepts(port)
                && host.eq_ignore_ascii_case(&e.host)
        };
        if self.entries.iter().any(exact) {
            return true;
        }
        if validate_address(address).is_err() {
            return false;
        }
        self.entries.iter().any(|e| {
            let host_ok = if e.wildcard {
                // `e.host` is ".suffix": at least one label before it.
                host.len() > e.host.len()
                    && host.as_bytes()[host.len() - e.host.len()..]
                        .eq_ignore_ascii_case(e.host.as_bytes())
            } else {
                host.eq_ignore_ascii_case(&e.host)
            };
            host_ok && e.port_accepts(port)
        })
    }
}

impl AllowEntry {
    fn port_accepts(&self, port: Option<&str>) -> bool {
        match (&self.port, port) {
            (AllowPort::Any, _) | (AllowPort::Default, None) => true,
            (AllowPort::Exact(p), Some(q)) => p == q,
            _ => false,
        }
    }
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
    fn forwarded_for_is_cloudflares_address_or_nothing() {
        assert_eq!(forwarded_for(Some("203.0.113.7")), Some("203.0.113.7"));
        assert_eq!(forwarded_for(Some(" 2001:db8::1 ")), Some("2001:db8::1"));
        assert_eq!(forwarded_for(None), None);
        assert_eq!(forwarded_for(Some("")), None);
        assert_eq!(forwarded_for(Some("1.2.3.4, 5.6.7.8")), None);
        assert_eq!(forwarded_for(Some("evil.example")), None);
    }

    #[test]
    fn builds_upstream_urls() {
        assert_eq!(
            upstream_url("https", "cell-2.example.com", "/a/b", "x=1"),
            "https://cell-2.example.com/a/b?x=1"
        );
        assert_eq!(
            upstream_url("http", "127.0.0.1:9102", "", ""),
            "http://127.0.0.1:9102/"
        );
    }

    #[test]
    fn validates_addresses() {
        for ok in [
            "cell-2.example.com",
            "127.0.0.1:9102",
            "localhost",
            "a.b:443",
        ] {
            assert!(validate_address(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "http://x", "user@x", "x/y", "x y", "x:0", "x:99999", "x:", "-x.com", "x..com",
            "[::1]:80", "x\r\n",
        ] {
            assert!(validate_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn allow_list_matches_hosts_wildcards_and_ports() {
        let list = AllowList::parse(
            "*.cells.example.com, legacy.example.com, 127.0.0.1:9102 ,dev.local:*",
        )
        .unwrap();
        assert!(list.allows("cell-2.cells.example.com"));
        assert!(list.allows("CELL-2.Cells.Example.com"));
        assert!(!list.allows("cells.example.com"));
        assert!(!list.allows("evilcells.example.com"));
        assert!(!list.allows("cell-2.cells.example.com:8443"));
        assert!(list.allows("legacy.example.com"));
        assert!(list.allows("127.0.0.1:9102"));
        assert!(!list.allows("127.0.0.1:9103"));
        assert!(!list.allows("127.0.0.1"));
        assert!(list.allows("dev.local:1234"));
        assert!(!list.allows("user@legacy.example.com"));
        // Exact entries compare without case; nothing else passes them.
        assert!(list.allows("Legacy.Example.COM"));
        assert!(!list.allows("legacy.example.com:443"));
        assert!(!list.allows("legacy.example.com/x"));
        assert!(!list.allows("127.0.0.1:9102/x"));
        // A `:*` entry still checks what follows the colon.
        assert!(!list.allows("dev.local:1234/path"));
        assert!(!list.allows("dev.local:0"));
        assert!(!list.allows("dev.local:x"));
        // A wildcard's suffix is matched on bytes: no panic on non-ASCII.
        assert!(!list.allows("é.cells.example.com"));
        assert!(!list.allows("éé.example.com"));
        assert!(AllowList::parse("http://x").is_err());
        assert!(AllowList::parse("").unwrap().is_empty());
    }
}
