//! The router's settings, read from wrangler `[vars]` and secrets (SPEC §2).
//!
//! Each setting is declared once, in the block beside the policy it fills
//! ([`setting`] says how): its name, meaning, default, accepted values and
//! what a value the router cannot read does at run time. README.md's
//! settings table is those declarations printed ([`readme_table`],
//! `rulesctl config table`).
//!
//! A value that cannot be read never stops the router, and never turns into
//! a refusal of all traffic: it is reported as a [`Problem`] (the edge logs
//! each once per isolate; `rulesctl config check` fails a deploy on it) and
//! the fallback its declaration states is used. Two settings log an
//! `error`: a missing or unreadable `GITLAB_PROXY_HOST` (nothing to fall
//! back to: requests without a cell get a clear 502) and
//! `GITLAB_ROUTER_SIGNING_KEY` missing or unreadable under `required`
//! (every request is refused with 503, as `required` states).

mod cache;
mod cells;
mod edge;
mod problem;
pub mod setting;
mod signing;
mod topology;
mod upstream;

pub use edge::{RULES_CONFIG, SHADOW_RULES_CONFIG};
pub use problem::{Level, Problem};
pub use setting::Row;

use crate::forward::{AllowList, DelayRange, Settings, SigningPolicy};
use crate::log::RequestLogging;
use crate::resolve::cells::{CellList, CircuitPolicy};
use crate::resolve::topology::CachePolicy;
use crate::resolve::ClientPolicy;
use setting::Reader;

/// Every setting the router reads, in README.md's order.
pub fn settings() -> Vec<Row> {
    [
        edge::rows(),
        upstream::rows(),
        cells::rows(),
        topology::rows(),
        cache::rows(),
        signing::rows(),
    ]
    .concat()
}

/// The names of the settings that are Worker secrets (`wrangler secret
/// put`), never `[vars]`: their values are never shown.
pub fn secrets() -> Vec<&'static str> {
    settings()
        .into_iter()
        .filter(|s| s.secret)
        .map(|s| s.name)
        .collect()
}

/// A value of the secret's form, for checking a configuration whose
/// secrets are known by name only (`rulesctl config check`): the value
/// itself is never read there.
pub fn secret_stand_in(name: &str) -> &'static str {
    if name == signing::KEY.name {
        // 32 bytes, an Ed25519 seed's length.
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
    } else {
        "set"
    }
}

/// README.md's settings table, in Markdown: one row per [`settings`].
pub fn readme_table() -> String {
    let mut out = String::from(
        "| variable | meaning | default | accepted | a value it cannot read, at run time |\n\
         |---|---|---|---|---|\n",
    );
    for s in settings() {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            s.name, s.meaning, s.default, s.accepted, s.fallback
        ));
    }
    out
}

/// Everything the edge needs, parsed once per isolate.
#[derive(Debug)]
pub struct Config {
    pub rules_config: Option<String>,
    /// `GITLAB_SHADOW_RULES_CONFIG`: the ruleset evaluated in the shadow.
    pub shadow_rules_config: Option<String>,
    /// `GITLAB_SHADOW_SAMPLE`, in millionths (0: off).
    pub shadow_per_million: u32,
    pub topology_url: Option<String>,
    /// `None` when missing or malformed: every request then gets a clear 502.
    pub proxy_host: Option<String>,
    pub upstream_scheme: &'static str,
    /// The explicit allow-list (the legacy cell and the ruleset's fixed
    /// addresses are added by the edge).
    pub allowed_upstreams: AllowList,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    pub client: ClientPolicy,
    pub cache: CachePolicy,
    /// Result of parsing the signing key; `Ok(None)` when none is set.
    pub signer: Result<Option<crate::forward::signing::Signer>, String>,
    pub signing_policy: SigningPolicy,
    pub request_logging: RequestLogging,
    /// `GITLAB_CELLS`, its bad entries left out (and reported).
    pub cells: CellList,
    pub circuits: CircuitPolicy,
    /// How often an isolate re-reads the scheduled probe's record.
    pub health_refresh_ms: u32,
    /// A probe record older than this is not believed (the cron stopped).
    pub health_max_age_secs: u32,
    /// Per probe of a cell's health URL.
    pub probe_timeout_ms: u32,
    /// `None`: 404s are not delayed (the default).
    pub not_found_delay: Option<DelayRange>,
    /// How often an isolate reads the runtime control document
    /// ([`crate::control`]), in seconds.
    pub control_refresh_secs: u32,
    /// The secret a request with `Cloudflare-Workers-Version-Overrides`
    /// must carry (the deploy's smoke test sends it); `None`: every such
    /// request is refused.
    pub smoke_test_secret: Option<String>,
    /// The deployment's name in every metrics data point (blob1; empty
    /// when not set).
    pub environment: String,
}

impl Config {
    /// What the forward phase reads of these settings.
    pub fn forward_settings(&self) -> Settings<'_> {
        Settings {
            proxy_host: self.proxy_host.as_deref(),
            upstream_scheme: self.upstream_scheme,
            signer: &self.signer,
            signing_policy: self.signing_policy,
            not_found_delay: self.not_found_delay,
            smoke_test_secret: self.smoke_test_secret.as_deref(),
            cells: &self.cells,
            headers_timeout_ms: self.circuits.headers_timeout_ms,
            outage_retry_after_secs: self.client.guard.open_ms.div_ceil(1000).max(1),
        }
    }

    /// Reads every setting through `lookup`, block by block; returns the
    /// config and the problems found, in the order read (each setting's
    /// declaration states its fallback). A secret's value is never put in
    /// a problem.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> (Config, Vec<Problem>) {
        let mut r = Reader::new(&lookup);
        let upstream = upstream::read(&mut r);
        let topology = topology::read(&mut r);
        let cache = cache::read(&mut r);
        let cells = cells::read(&mut r);
        let signing = signing::read(&mut r);
        let edge = edge::read(&mut r);
        let config = Config {
            rules_config: edge.rules_config,
            shadow_rules_config: edge.shadow_rules_config,
            shadow_per_million: edge.shadow_per_million,
            topology_url: topology.url,
            proxy_host: upstream.proxy_host,
            upstream_scheme: upstream.upstream_scheme,
            allowed_upstreams: upstream.allowed_upstreams,
            client_id: topology.client_id,
            client_secret: topology.client_secret,
            client: topology.client,
            cache,
            signer: signing.signer,
            signing_policy: signing.policy,
            request_logging: edge.request_logging,
            cells: cells.list,
            circuits: cells.circuits,
            health_refresh_ms: cells.probe.refresh_ms,
            health_max_age_secs: cells.probe.max_age_secs,
            probe_timeout_ms: cells.probe.timeout_ms,
            not_found_delay: upstream.not_found_delay,
            control_refresh_secs: edge.refresh.control_secs,
            smoke_test_secret: upstream.smoke_test_secret,
            environment: edge.environment,
        };
        (config, r.problems)
    }

    /// The cell route learning asks (`host[:port]`): the legacy cell. This
    /// is the one place that chooses it; once the router knows a list of
    /// cells, it can pick among them here.
    pub fn learn_cell(&self) -> Option<&str> {
        self.proxy_host.as_deref()
    }

    /// The deployment's namespace in the shared cache: 32 hex digits of the
    /// SHA-256 of the Topology Service URL and the legacy cell. Cloudflare's
    /// `caches.default` is one per zone, shared by every Worker on it
    /// (staging, production, the registry deployments): without a
    /// namespace one environment would read another's answers.
    /// Deployments that ask the same service and fall back to the same
    /// legacy cell get the same answers, so they may share entries.
    pub fn cache_namespace(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        hasher.update(self.topology_url.as_deref().unwrap_or("").as_bytes());
        hasher.update(b"\n");
        hasher.update(self.proxy_host.as_deref().unwrap_or("").as_bytes());
        let digest = hasher.finalize();
        let mut out = String::with_capacity(32);
        crate::hex::push_hex(&mut out, digest.get(..16).unwrap_or(&digest));
        out
    }
}

#[cfg(test)]
mod tests;
