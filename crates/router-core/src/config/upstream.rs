//! Where requests are sent and what the forward phase does besides
//! ([`crate::forward::Settings`]): the legacy cell, the scheme, the
//! allow-list, the 404 delay and the smoke test's secret.

use super::setting::{Reader, Row, Text};
use crate::address::validate_address;
use crate::forward::{AllowList, DelayRange};

pub const PROXY_HOST: Text = Text {
    name: "GITLAB_PROXY_HOST",
    meaning: "`host[:port]` of the legacy cell",
    default: "none: 502 for requests with no cell",
    accepted: "`host[:port]`",
    fallback: "nothing to fall back to: 502 for requests with no cell, `error`",
    secret: false,
};

pub const UPSTREAM_SCHEME: Text = Text {
    name: "GITLAB_UPSTREAM_SCHEME",
    meaning: "`https` or `http`",
    default: "`https`",
    accepted: "`https`, `http`",
    fallback: "`https`, `warn`",
    secret: false,
};

pub const ALLOWED_UPSTREAMS: Text = Text {
    name: "GITLAB_ALLOWED_UPSTREAMS",
    meaning: "hosts the router may proxy to: `host`, `host:port`, `*.domain`, `host:*`, \
              comma-separated; the legacy cell, a ruleset's fixed addresses and the cells of \
              `GITLAB_CELLS` are always allowed",
    default: "only those",
    accepted: "entries as described",
    fallback: "that entry left out, the others allowed; `warn` per entry",
    secret: false,
};

pub const NOT_FOUND_DELAY_MS: Text = Text {
    name: "GITLAB_NOT_FOUND_DELAY_MS",
    meaning: "`MIN-MAX` (or one number): a 404 a cell sent for a classified request (a classify \
              rule decided, or handed the request on) is returned at a deadline drawn once per \
              request, uniformly from this range in ms after the request arrived, so its timing \
              does not tell which cell answered, or how fast, and so whether a private group \
              exists (keep `MIN` above the cells' 404 time). The entry waits on a timer and \
              returns the response as it came (no body is read or held). Never for other \
              statuses, unclassified requests or the router's own answers; at most 10000",
    default: "none: no delay",
    accepted: "`MIN-MAX` or one number, 0–10000",
    fallback: "no delay, `warn`",
    secret: false,
};

pub const SMOKE_TEST_SECRET: Text = Text {
    name: "GITLAB_SMOKE_TEST_SECRET",
    meaning: "the deploy's smoke-test secret (a Worker secret): a request carrying \
              `Cloudflare-Workers-Version-Overrides` is answered 403 unless its \
              `X-Gitlab-Http-Router-Smoke-Test` equals it \
              ([docs/deploying.md](docs/deploying.md#the-smoke-test))",
    default: "none: every override refused",
    accepted: "any (a secret)",
    fallback: "—",
    secret: true,
};

pub(super) fn rows() -> Vec<Row> {
    [
        PROXY_HOST,
        UPSTREAM_SCHEME,
        ALLOWED_UPSTREAMS,
        NOT_FOUND_DELAY_MS,
        SMOKE_TEST_SECRET,
    ]
    .iter()
    .map(Text::row)
    .collect()
}

/// The block as read.
pub(super) struct Upstream {
    pub proxy_host: Option<String>,
    pub upstream_scheme: &'static str,
    pub allowed_upstreams: AllowList,
    pub not_found_delay: Option<DelayRange>,
    pub smoke_test_secret: Option<String>,
}

pub(super) fn read(r: &mut Reader<'_>) -> Upstream {
    Upstream {
        proxy_host: proxy_host(r),
        upstream_scheme: upstream_scheme(r),
        allowed_upstreams: allowed_upstreams(r),
        not_found_delay: not_found_delay(r),
        smoke_test_secret: r.get(SMOKE_TEST_SECRET.name),
    }
}

/// `None` when missing or malformed: there is no legacy cell to fall back to.
fn proxy_host(r: &mut Reader<'_>) -> Option<String> {
    const INSTEAD: &str = "there is no legacy cell: requests no rule sends to a cell get a 502";
    let Some(host) = r.get(PROXY_HOST.name) else {
        r.error(PROXY_HOST.name, None, "not set", INSTEAD);
        return None;
    };
    match validate_address(&host) {
        Ok(()) => Some(host),
        Err(e) => {
            r.error(
                PROXY_HOST.name,
                Some(host.as_str()),
                &format!("not host[:port]: {e}"),
                INSTEAD,
            );
            None
        }
    }
}

fn upstream_scheme(r: &mut Reader<'_>) -> &'static str {
    match r.get(UPSTREAM_SCHEME.name).as_deref() {
        None | Some("https") => "https",
        Some("http") => "http",
        Some(other) => {
            r.warn(
                UPSTREAM_SCHEME.name,
                Some(other),
                "neither https nor http",
                "using https",
            );
            "https"
        }
    }
}

fn allowed_upstreams(r: &mut Reader<'_>) -> AllowList {
    let Some(spec) = r.get(ALLOWED_UPSTREAMS.name) else {
        return AllowList::default();
    };
    let (list, bad) = AllowList::parse_each(&spec);
    for (entry, e) in bad {
        r.warn(
            ALLOWED_UPSTREAMS.name,
            Some(entry.as_str()),
            &format!("not an allow-list entry: {e}"),
            "this entry is left out; the others are allowed",
        );
    }
    list
}

fn not_found_delay(r: &mut Reader<'_>) -> Option<DelayRange> {
    let v = r.get(NOT_FOUND_DELAY_MS.name)?;
    match DelayRange::parse(&v) {
        Some(range) if range.max_ms == 0 => None,
        Some(range) => Some(range),
        None => {
            r.warn(
                NOT_FOUND_DELAY_MS.name,
                Some(v.as_str()),
                &format!("not MIN-MAX milliseconds (0..={})", DelayRange::MAX_MS),
                "404s are not delayed",
            );
            None
        }
    }
}
