//! What the rules see of a request.
//!
//! The edge fills [`RequestParts`] with only the headers the ruleset asks
//! for ([`crate::Ruleset::header_interest`]), so a request crosses the wasm
//! boundary a handful of times, not once per header.

/// The parts of a request that rules match on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestParts {
    /// Upper-case method, e.g. `GET`.
    pub method: String,
    /// Host of the public URL, without port.
    pub host: String,
    /// Path as the URL parser gave it (percent-encoded, dot segments removed).
    pub path: String,
    /// Raw query string without the leading `?` ("" when none).
    pub query: String,
    /// Header names in lower case with their values (repeated headers joined
    /// with ", ", as `Headers.get` does).
    pub headers: Vec<(String, String)>,
}

/// The pieces of an absolute http(s) URL, borrowed from it. The edge
/// splits workerd's `request.url` with this, in one call instead of one per
/// URL property. workerd resolves literal `.` and `..` segments there but
/// keeps `\` and percent-encoded dot segments, which `fetch` resolves
/// later: run the path through [`normalize_path`] before matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrlParts<'a> {
    /// `http` or `https`.
    pub scheme: &'a str,
    /// `host[:port]`, as `X-Forwarded-Host` carries it.
    pub authority: &'a str,
    /// The host without port.
    pub host: &'a str,
    /// Never empty: at least `/`.
    pub path: &'a str,
    /// Without the `?`; "" when none.
    pub query: &'a str,
}

impl<'a> UrlParts<'a> {
    /// `None` for a URL that is not `http(s)://authority...`, or that holds
    /// a control character (NUL, CR, LF, ...): a WHATWG URL, which workerd
    /// hands the worker, percent-encodes them, so one here was not made by
    /// the platform and is refused (the plan's separators are control
    /// characters, and a CR would reach `X-Forwarded-Host`).
    pub fn parse(url: &'a str) -> Option<UrlParts<'a>> {
        if url.bytes().any(|b| b.is_ascii_control()) {
            return None;
        }
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
            ("https", rest)
        } else {
            ("http", url.strip_prefix("http://")?)
        };
        // A byte search: `find` with a set of chars decodes every char.
        let end = rest.bytes().position(|b| matches!(b, b'/' | b'?' | b'#'));
        let (authority, path_and_query) = match end {
            Some(i) => rest.split_at_checked(i)?,
            None => (rest, "/"),
        };
        let host = match authority.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) && port.len() <= 5 => h,
            _ => authority,
        };
        if !is_host(host) {
            return None;
        }
        let path_and_query = path_and_query.split('#').next().unwrap_or("");
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        Some(UrlParts {
            scheme,
            authority,
            host,
            path: if path.is_empty() { "/" } else { path },
            query,
        })
    }
}

/// Whether `host` is a DNS name or an IP literal, as a URL parser leaves
/// one: letters, digits, `-`, `.` and `_`, or `[` IPv6 `]`. The authority
/// becomes `X-Forwarded-Host`, which cells build links and redirects from;
/// workerd (from 1.20261117) no longer refuses a `Host` header with a
/// space, a comma (two `Host` headers joined), a `/` or an `@`, so the
/// router does.
fn is_host(host: &str) -> bool {
    let name = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
    let literal = |b: u8| b.is_ascii_hexdigit() || matches!(b, b':' | b'.');
    match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(ip) => !ip.is_empty() && ip.bytes().all(literal),
        None => !host.is_empty() && host.bytes().all(name),
    }
}

/// Whether a path segment is `.` (1), `..` (2) or neither (0), with the
/// WHATWG URL spec's percent-encoded spellings (`%2e`, any case).
fn dot_segment(segment: &str) -> u8 {
    // Only 1 to 6 bytes can spell one: most segments are refused by length,
    // and no segment is copied.
    let is = |spelling: &str| segment.eq_ignore_ascii_case(spelling);
    match segment.len() {
        1 if segment == "." => 1,
        2 if segment == ".." => 2,
        3 if is("%2e") => 1,
        4 if is(".%2e") || is("%2e.") => 2,
        6 if is("%2e%2e") => 2,
        _ => 0,
    }
}

/// The path `fetch` will send for `path`: backslashes become slashes and
/// dot segments (`.`, `..`, and `%2e` spellings) are resolved, as the URL
/// parser does for http(s) URLs. The rules must judge the path the cell
/// will receive, or `/v2/a\..\b/...` is classified as one repository and
/// stored in another. Borrowed when nothing needs resolving.
pub fn normalize_path(path: &str) -> std::borrow::Cow<'_, str> {
    // Every dot segment spelling has a `.` or a `%`: most paths have
    // neither and are judged in one pass over their bytes.
    let suspect = path.bytes().any(|b| matches!(b, b'.' | b'%' | b'\\'));
    let needs_work = suspect
        && (path.contains('\\') || path.split('/').any(|segment| dot_segment(segment) != 0));
    if !needs_work {
        return std::borrow::Cow::Borrowed(path);
    }
    let unified = path.replace('\\', "/");
    let rest = unified.strip_prefix('/').unwrap_or(&unified);
    let parts: Vec<&str> = rest.split('/').collect();
    let mut out: Vec<&str> = Vec::with_capacity(parts.len());
    for (i, segment) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        match dot_segment(segment) {
            2 => {
                out.pop();
                if last {
                    out.push("");
                }
            }
            1 => {
                if last {
                    out.push("");
                }
            }
            _ => out.push(segment),
        }
    }
    std::borrow::Cow::Owned(format!("/{}", out.join("/")))
}

impl RequestParts {
    /// A request from a method and a URL such as
    /// `https://gitlab.com/api/v4/user?x=1`.
    pub fn from_url(method: &str, url: &str) -> Option<RequestParts> {
        Some(RequestParts::from_url_parts(
            method.to_ascii_uppercase(),
            &UrlParts::parse(url)?,
        ))
    }

    /// A request from a split URL, the method as given; no headers yet.
    pub fn from_url_parts(method: String, url: &UrlParts) -> RequestParts {
        RequestParts {
            method,
            host: url.host.to_ascii_lowercase(),
            path: normalize_path(url.path).into_owned(),
            query: url.query.to_string(),
            headers: Vec::new(),
        }
    }

    /// Adds a header (name folded to lower case); repeated names are joined
    /// with ", " as the Fetch API does.
    pub fn add_header(&mut self, name: &str, value: &str) {
        let lower = name.to_ascii_lowercase();
        if let Some((_, existing)) = self.headers.iter_mut().find(|(n, _)| *n == lower) {
            // Cookies are joined with "; " by HTTP/2 clients and workerd alike.
            existing.push_str(if lower == "cookie" { "; " } else { ", " });
            existing.push_str(value);
        } else {
            self.headers.push((lower, value.to_string()));
        }
    }

    /// The value of a header, by lower-case name.
    pub fn header(&self, lower_name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == lower_name)
            .map(|(_, v)| v.as_str())
    }

    /// Cookies as `(name, value)` pairs in the order the client sent them.
    /// Malformed pieces (no `=`) are skipped, never an error.
    pub fn cookies(&self) -> impl Iterator<Item = (&str, &str)> {
        self.header("cookie")
            .unwrap_or("")
            .split(';')
            .filter_map(|piece| {
                let (name, value) = piece.split_once('=')?;
                // Only the white space HTTP allows around a cookie: a
                // value padded with U+00A0 is another value to Rails.
                let (name, value) = (trim_http_space(name), trim_http_space(value));
                let value = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(value);
                (!name.is_empty()).then_some((name, value))
            })
    }

    /// Query parameters, percent- and `+`-decoded.
    pub fn query_pairs(
        &self,
    ) -> impl Iterator<Item = (std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)> {
        form_urlencoded::parse(self.query.as_bytes())
    }
}

/// `text` without the spaces and tabs around it, the only white space
/// HTTP allows around a cookie. Byte by byte, as `trim_matches` decodes
/// every character (docs/performance-ledger.md): both are ASCII, so every
/// cut is at a character boundary.
fn trim_http_space(text: &str) -> &str {
    let is_space = |b: &u8| *b == b' ' || *b == b'\t';
    let bytes = text.as_bytes();
    let start = bytes
        .iter()
        .position(|b| !is_space(b))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |last| last + 1);
    text.get(start..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_url_splits_host_path_and_query() {
        let r = RequestParts::from_url("get", "https://GitLab.com:443/a/b?x=1&y=%20#frag").unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.host, "gitlab.com");
        assert_eq!(r.path, "/a/b");
        assert_eq!(r.query, "x=1&y=%20");
        let r = RequestParts::from_url("GET", "http://h").unwrap();
        assert_eq!(r.path, "/");
        assert!(RequestParts::from_url("GET", "ftp://h/").is_none());
        assert!(RequestParts::from_url("GET", "https://user@h/").is_none());
    }

    #[test]
    fn url_parts_keep_the_authority_and_scheme() {
        let u = UrlParts::parse("http://Gitlab.example.com:8787/a?b=1").unwrap();
        assert_eq!(
            (u.scheme, u.authority, u.host, u.path, u.query),
            (
                "http",
                "Gitlab.example.com:8787",
                "Gitlab.example.com",
                "/a",
                "b=1"
            )
        );
        let u = UrlParts::parse("https://h?x").unwrap();
        assert_eq!((u.path, u.query), ("/", "x"));
    }

    #[test]
    fn an_authority_that_is_no_host_is_refused() {
        for url in [
            "http://gitlab.example.com/a",
            "http://gitlab.example.com:8787/a",
            "http://127.0.0.1:8787/a",
            "http://[::1]:8787/a",
            "http://my_cell.internal/a",
        ] {
            assert!(UrlParts::parse(url).is_some(), "{url}");
        }
        for url in [
            "http://a b/a",
            "http://127.0.0.1:8787, evil.example/a",
            "http://user@evil.example/a",
            "http://evil.example\\x/a",
            "http://:8787/a",
            "http:///a",
            "http://[]/a",
            "http://[::1/a",
            "http://evil.example:123456/a",
            "http://ev\u{ef}l.example/a",
            "http://evil\".example/a",
        ] {
            assert!(UrlParts::parse(url).is_none(), "{url}");
        }
    }

    #[test]
    fn paths_are_resolved_like_the_url_parser_does() {
        for (raw, want) in [
            ("/a/b", "/a/b"),
            ("/", "/"),
            (
                "/v2/acme/img\\..\\..\\cell3-group/x/manifests/y",
                "/v2/cell3-group/x/manifests/y",
            ),
            ("/jwt/%2e/auth", "/jwt/auth"),
            ("/jwt/%2E%2e/jwt/auth", "/jwt/auth"),
            ("/a/.%2E/b", "/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/../..", "/"),
            ("/a/%2ex/b", "/a/%2ex/b"),
            ("/a/%2E./b", "/b"),
            ("/a/%2E/b", "/a/b"),
            ("/a/.../b", "/a/.../b"),
        ] {
            assert_eq!(normalize_path(raw), want, "{raw}");
        }
        assert!(matches!(
            normalize_path("/plain/path"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn cookie_values_keep_non_http_white_space() {
        let mut r = RequestParts::default();
        r.add_header("cookie", "a=\u{a0}x; b=y\u{3000}; c= z ");
        let got: Vec<_> = r.cookies().collect();
        assert_eq!(got, vec![("a", "\u{a0}x"), ("b", "y\u{3000}"), ("c", "z")]);
    }

    proptest::proptest! {
        #[test]
        fn http_space_trims_as_trim_matches_does(text in "[ \t\u{a0}\u{3000}a=;\"]{0,12}") {
            proptest::prop_assert_eq!(trim_http_space(&text), text.trim_matches([' ', '\t']));
        }
    }

    #[test]
    fn cookies_skip_garbage_and_keep_order() {
        let mut r = RequestParts::default();
        r.add_header("Cookie", "a=1; junk; =x; b=\"2\";c=3=4");
        r.add_header("cookie", "d=5");
        let got: Vec<_> = r.cookies().collect();
        assert_eq!(got, vec![("a", "1"), ("b", "2"), ("c", "3=4"), ("d", "5")]);
    }

    #[test]
    fn repeated_headers_join_like_fetch() {
        let mut r = RequestParts::default();
        r.add_header("X-A", "1");
        r.add_header("x-a", "2");
        assert_eq!(r.header("x-a"), Some("1, 2"));
    }

    #[test]
    fn query_pairs_decode() {
        let r = RequestParts::from_url("GET", "https://h/?scope=repository%3Aa%2Fb%3Apull&x=a+b")
            .unwrap();
        let got: Vec<_> = r.query_pairs().collect();
        assert_eq!(got[0].1, "repository:a/b:pull");
        assert_eq!(got[1].1, "a b");
    }
}
