//! How the router calls the Topology Service ([`ClientPolicy`], with its
//! [`GuardPolicy`]): where, with which credentials, and how hard it tries.
//! The defaults are the policies' own.
//!
//! [`GuardPolicy`]: crate::resolve::guard::GuardPolicy

use super::setting::{Meaning, Number, Reader, Row, Text};
use crate::resolve::ClientPolicy;

pub const SERVICE_URL: Text = Text {
    name: "GITLAB_TOPOLOGY_SERVICE_URL",
    meaning: "Topology Service base URL",
    default: "none: classification off, legacy cell",
    accepted: "`https://…` or `http://…`",
    fallback: "none: classification off, `warn`",
    secret: false,
};

pub const CLIENT_ID: Text = Text {
    name: "GITLAB_TOPOLOGY_SERVICE_CLIENT_ID",
    meaning: "Cloudflare Access service token's id (a secret)",
    default: "none",
    accepted: "any (a secret)",
    fallback: "—",
    secret: true,
};

pub const CLIENT_SECRET: Text = Text {
    name: "GITLAB_TOPOLOGY_SERVICE_CLIENT_SECRET",
    meaning: "Cloudflare Access service token's secret (a secret)",
    default: "none",
    accepted: "any (a secret)",
    fallback: "—",
    secret: true,
};

/// The client's whole-number settings, each bound to its field of `p`.
fn numbers<M: Meaning>(p: &mut ClientPolicy) -> [Number<'_, M>; 9] {
    [
        Number {
            name: "GITLAB_TOPOLOGY_TIMEOUT_MS",
            meaning: M::of("per-attempt timeout"),
            min: 10,
            max: 30_000,
            value: &mut p.timeout_ms,
        },
        Number {
            name: "GITLAB_TOPOLOGY_RETRIES",
            meaning: M::of(
                "attempts after the first (timeouts, connection errors, 5xx, 3xx: redirects \
                      are never followed)",
            ),
            min: 0,
            max: 10,
            value: &mut p.retries,
        },
        Number {
            name: "GITLAB_TOPOLOGY_BACKOFF_BASE_MS",
            meaning: M::of(
                "back-off before the first retry, doubled for each next one up to \
                      `GITLAB_TOPOLOGY_BACKOFF_MAX_MS`; half of each is random (jitter)",
            ),
            min: 0,
            max: 10_000,
            value: &mut p.backoff_base_ms,
        },
        Number {
            name: "GITLAB_TOPOLOGY_BACKOFF_MAX_MS",
            meaning: M::of("the longest back-off before a retry"),
            min: 0,
            max: 60_000,
            value: &mut p.backoff_max_ms,
        },
        Number {
            name: "GITLAB_MEMORY_CACHE_ENTRIES",
            meaning: M::of(
                "in-isolate cache size, in entries (it also holds at most 32 MiB: \
                      docs/decisions.md)",
            ),
            min: 1,
            max: 1_000_000,
            value: &mut p.memory_entries,
        },
        Number {
            name: "GITLAB_TOPOLOGY_RETRY_BUDGET_PERCENT",
            meaning: M::of(
                "retry budget per isolate: retries add at most this % to a 10 s window's \
                      first attempts, plus `GITLAB_TOPOLOGY_RETRY_BUDGET_MIN`",
            ),
            min: 0,
            max: 1_000,
            value: &mut p.guard.retry_percent,
        },
        Number {
            name: "GITLAB_TOPOLOGY_RETRY_BUDGET_MIN",
            meaning: M::of("retries a 10 s window allows besides the percentage"),
            min: 0,
            max: 100_000,
            value: &mut p.guard.min_retries,
        },
        Number {
            name: "GITLAB_TOPOLOGY_BREAKER_FAILURES",
            meaning: M::of(
                "failed attempts in a row that open the service circuit breaker (no calls; \
                      stale entries or the legacy cell); `0`: no breaker",
            ),
            min: 0,
            max: 10_000,
            value: &mut p.guard.failures,
        },
        Number {
            name: "GITLAB_TOPOLOGY_BREAKER_OPEN_MS",
            meaning: M::of("how long the breaker stays open before one request probes"),
            min: 100,
            max: 600_000,
            value: &mut p.guard.open_ms,
        },
    ]
}

pub(super) fn rows() -> Vec<Row> {
    let mut rows: Vec<Row> = [SERVICE_URL, CLIENT_ID, CLIENT_SECRET]
        .iter()
        .map(Text::row)
        .collect();
    rows.extend(
        numbers(&mut ClientPolicy::default())
            .iter()
            .map(Number::row),
    );
    rows
}

/// The block as read.
pub(super) struct Topology {
    pub url: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    pub client: ClientPolicy,
}

pub(super) fn read(r: &mut Reader<'_>) -> Topology {
    let url = service_url(r);
    let mut client = ClientPolicy::default();
    for number in numbers(&mut client) {
        r.number(number);
    }
    Topology {
        url,
        client_id: r.get(CLIENT_ID.name),
        client_secret: r.get(CLIENT_SECRET.name),
        client,
    }
}

/// Without a trailing `/`; `None` (classification off) when not an
/// http(s) URL.
fn service_url(r: &mut Reader<'_>) -> Option<String> {
    let url = r.get(SERVICE_URL.name)?;
    if url.starts_with("https://") || url.starts_with("http://") {
        return Some(url.trim_end_matches('/').to_string());
    }
    r.warn(
        SERVICE_URL.name,
        Some(url.as_str()),
        "not an http(s) URL",
        "classification is off: requests it would classify go to the legacy cell",
    );
    None
}
