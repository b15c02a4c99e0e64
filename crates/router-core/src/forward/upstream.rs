//! Where a forwarded request goes: the cell's URL, and the allow-list of
//! upstream hosts the router may proxy to (the SSRF guard).

use crate::json::PushAscii;
use std::collections::HashSet;

use crate::address::validate_address;

/// `scheme://address/path?query` for the cell.
pub fn upstream_url(scheme: &str, address: &str, path: &str, query: &str) -> String {
    let mut url =
        String::with_capacity(scheme.len() + address.len() + path.len() + query.len() + 5);
    url.push_str(scheme);
    url.push_str("://");
    url.push_str(address);
    url.push_str(if path.is_empty() { "/" } else { path });
    if !query.is_empty() {
        url.push_ascii('?');
        url.push_str(query);
    }
    url
}

/// The upstream hosts the router may proxy to (the SSRF guard). Entries:
/// `host`, `host:port`, `*.domain` (any subdomain), with `:*` for any port.
/// An entry without a port allows the scheme's default port only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    /// Exact entries (`host` or `host:port`, lower case), looked up in one
    /// step: a cell list of 1,000 cells is 1,000 of them, asked on every
    /// forwarded request.
    exact: HashSet<String>,
    /// Wildcard and `:*` entries, scanned.
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
    /// Parses a comma- or whitespace-separated list; the first bad entry
    /// is the error.
    pub fn parse(spec: &str) -> Result<AllowList, String> {
        let (list, bad) = AllowList::parse_each(spec);
        match bad.into_iter().next() {
            Some((raw, e)) => Err(format!("allow-list entry {raw:?}: {e}")),
            None => Ok(list),
        }
    }

    /// Parses a comma- or whitespace-separated list entry by entry: the
    /// good entries, and each bad one (as given) with what is wrong with
    /// it. A bad entry never costs the others.
    pub fn parse_each(spec: &str) -> (AllowList, Vec<(String, String)>) {
        let mut exact = HashSet::new();
        let mut entries = Vec::new();
        let mut bad = Vec::new();
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
            if let Err(e) = validate_address(&check) {
                bad.push((raw.to_string(), e));
                continue;
            }
            if !wildcard && port != AllowPort::Any {
                exact.insert(lower);
                continue;
            }
            entries.push(AllowEntry {
                host,
                wildcard,
                port,
            });
        }
        (AllowList { exact, entries }, bad)
    }

    /// Adds one exact `host[:port]` (the legacy cell, a rule's fixed address).
    pub fn allow_exact(&mut self, address: &str) {
        if let Ok(mut list) = AllowList::parse(address) {
            self.exact.extend(list.exact);
            self.entries.append(&mut list.entries);
        }
    }

    /// [`AllowList::allow_exact`] for addresses [`validate_address`]
    /// accepted (a cell list's, checked as it was read): such an address is
    /// one exact entry, its lower case, so it is inserted as that without
    /// being parsed and checked again (a start-up cost per listed cell).
    pub fn allow_validated<'a>(&mut self, addresses: impl Iterator<Item = &'a str>) {
        self.exact.reserve(addresses.size_hint().0);
        for address in addresses {
            debug_assert!(validate_address(address).is_ok(), "{address:?}");
            self.exact.insert(address.to_ascii_lowercase());
        }
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.entries.is_empty()
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
        let listed = if address.bytes().any(|b| b.is_ascii_uppercase()) {
            self.exact.contains(&address.to_ascii_lowercase())
        } else {
            self.exact.contains(address)
        };
        if listed {
            return true;
        }
        if validate_address(address).is_err() {
            return false;
        }
        self.entries.iter().any(|e| {
            let host_ok = if e.wildcard {
                // `e.host` is ".suffix": at least one label before it.
                host.len() > e.host.len()
                    && host
                        .as_bytes()
                        .get(host.len() - e.host.len()..)
                        .is_some_and(|tail| tail.eq_ignore_ascii_case(e.host.as_bytes()))
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

    #[test]
    fn a_validated_address_is_allowed_as_allow_exact_allows_it() {
        let addresses = [
            "cell-2.example.com",
            "Cell-3.Example.COM:8443",
            "127.0.0.1:9102",
            "localhost",
            "a-b.c:1",
        ];
        let mut exact = AllowList::parse("*.other.example, dev.local:*").unwrap();
        let mut validated = exact.clone();
        for address in addresses {
            assert!(validate_address(address).is_ok(), "{address}");
            exact.allow_exact(address);
        }
        validated.allow_validated(addresses.into_iter());
        assert_eq!(validated, exact);
        assert!(validated.allows("cell-3.example.com:8443"));
        assert!(!validated.allows("cell-3.example.com"));
    }
}
