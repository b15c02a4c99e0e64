//! The router's settings, read from wrangler `[vars]` and secrets (SPEC §2).
//!
//! A value that cannot be read never stops the router, and never turns into
//! a refusal of all traffic: it is reported as a [`Problem`] (the edge logs
//! each once per isolate; `rulesctl config check` fails a deploy on it) and
//! a stated fallback is used. What each setting falls back to, decided per
//! setting (README.md, Configuration, has the same table):
//!
//! - Whole numbers (every `*_MS`, `*_SECONDS`, `*_RETRIES`, ... setting):
//!   outside their range, the nearest bound (the operator's intent, as near
//!   as the router allows); not a whole number, the default. `warn`.
//! - `GITLAB_ROUTER_SIGNING_POLICY`, neither `required` nor `optional` (in
//!   any case): `optional`. With a usable key that signs every request, as
//!   `required` would; without one it forwards unsigned instead of refusing
//!   everything with 503. `warn`.
//! - `GITLAB_ALLOWED_UPSTREAMS`, `GITLAB_CELLS`: a bad entry is left out,
//!   the others are used (a cell list that is not JSON: none). `warn`.
//! - `GITLAB_UPSTREAM_SCHEME`: `https`; `GITLAB_REQUEST_LOG`: `all`;
//!   `GITLAB_NOT_FOUND_DELAY_MS`: no delay; `GITLAB_TOPOLOGY_SERVICE_URL`:
//!   none (classification off, the legacy cell). `warn`.
//! - `GITLAB_PROXY_HOST` missing or unreadable: there is nothing to fall
//!   back to; requests without a cell get a clear 502. `error`.
//! - `GITLAB_ROUTER_SIGNING_KEY` missing or unreadable under `required`:
//!   every request is refused (503), as `required` states (cells that
//!   verify would refuse unsigned requests anyway). `error`. Under
//!   `optional`: forwarded unsigned (`warn` for a bad key; a missing key is
//!   a `note`, the migration period's state).

use std::fmt;

use crate::address::validate_address;
use crate::forward::{AllowList, DelayRange, Settings, SigningPolicy};
use crate::log::RequestLogging;
use crate::resolve::cells::{CellList, CircuitPolicy};
use crate::resolve::guard::GuardPolicy;
use crate::resolve::topology::CachePolicy;
use crate::resolve::ClientPolicy;

/// Names of the variables the router reads.
pub mod vars {
    pub const RULES_CONFIG: &str = "GITLAB_RULES_CONFIG";
    pub const TOPOLOGY_SERVICE_URL: &str = "GITLAB_TOPOLOGY_SERVICE_URL";
    pub const PROXY_HOST: &str = "GITLAB_PROXY_HOST";
    pub const UPSTREAM_SCHEME: &str = "GITLAB_UPSTREAM_SCHEME";
    pub const ALLOWED_UPSTREAMS: &str = "GITLAB_ALLOWED_UPSTREAMS";
    pub const CLIENT_ID: &str = "GITLAB_TOPOLOGY_SERVICE_CLIENT_ID";
    pub const CLIENT_SECRET: &str = "GITLAB_TOPOLOGY_SERVICE_CLIENT_SECRET";
    pub const TIMEOUT_MS: &str = "GITLAB_TOPOLOGY_TIMEOUT_MS";
    pub const RETRIES: &str = "GITLAB_TOPOLOGY_RETRIES";
    pub const BACKOFF_BASE_MS: &str = "GITLAB_TOPOLOGY_BACKOFF_BASE_MS";
    pub const BACKOFF_MAX_MS: &str = "GITLAB_TOPOLOGY_BACKOFF_MAX_MS";
    pub const CACHE_MAX_TTL: &str = "GITLAB_CACHE_MAX_TTL_SECONDS";
    pub const CACHE_DEFAULT_TTL: &str = "GITLAB_CACHE_DEFAULT_TTL_SECONDS";
    pub const CACHE_NEGATIVE_TTL: &str = "GITLAB_CACHE_NEGATIVE_TTL_SECONDS";
    pub const CACHE_STALE: &str = "GITLAB_CACHE_STALE_IF_ERROR_SECONDS";
    pub const MEMORY_ENTRIES: &str = "GITLAB_MEMORY_CACHE_ENTRIES";
    pub const RETRY_BUDGET_PERCENT: &str = "GITLAB_TOPOLOGY_RETRY_BUDGET_PERCENT";
    pub const RETRY_BUDGET_MIN: &str = "GITLAB_TOPOLOGY_RETRY_BUDGET_MIN";
    pub const BREAKER_FAILURES: &str = "GITLAB_TOPOLOGY_BREAKER_FAILURES";
    pub const BREAKER_OPEN_MS: &str = "GITLAB_TOPOLOGY_BREAKER_OPEN_MS";
    pub const SIGNING_KEY: &str = "GITLAB_ROUTER_SIGNING_KEY";
    pub const SIGNING_POLICY: &str = "GITLAB_ROUTER_SIGNING_POLICY";
    pub const SIGNATURE_TTL: &str = "GITLAB_ROUTER_SIGNATURE_TTL_SECONDS";
    pub const SIGNING_ISSUER: &str = "GITLAB_ROUTER_SIGNING_ISSUER";
    pub const REQUEST_LOG: &str = "GITLAB_REQUEST_LOG";
    pub const CELLS: &str = "GITLAB_CELLS";
    pub const CELL_FAILURES: &str = "GITLAB_CELL_FAILURES";
    pub const CELL_FAILURE_WINDOW_MS: &str = "GITLAB_CELL_FAILURE_WINDOW_MS";
    pub const CELL_OPEN_MS: &str = "GITLAB_CELL_OPEN_MS";
    pub const CELL_HEALTH_REFRESH_MS: &str = "GITLAB_CELL_HEALTH_REFRESH_MS";
    pub const CELL_HEALTH_MAX_AGE_SECONDS: &str = "GITLAB_CELL_HEALTH_MAX_AGE_SECONDS";
    pub const CELL_PROBE_TIMEOUT_MS: &str = "GITLAB_CELL_PROBE_TIMEOUT_MS";
    pub const CELL_HEADERS_TIMEOUT_MS: &str = "GITLAB_CELL_HEADERS_TIMEOUT_MS";
    pub const CELL_TRIAL_SPACING_MS: &str = "GITLAB_CELL_TRIAL_SPACING_MS";
    pub const SMOKE_TEST_SECRET: &str = "GITLAB_SMOKE_TEST_SECRET";
    pub const CONTROL_REFRESH: &str = "GITLAB_CONTROL_REFRESH_SECONDS";
    pub const NOT_FOUND_DELAY_MS: &str = "GITLAB_NOT_FOUND_DELAY_MS";
    pub const ENVIRONMENT: &str = "GITLAB_ENVIRONMENT";

    /// Every setting the router reads.
    pub const ALL: &[&str] = &[
        RULES_CONFIG,
        TOPOLOGY_SERVICE_URL,
        PROXY_HOST,
        UPSTREAM_SCHEME,
        ALLOWED_UPSTREAMS,
        CLIENT_ID,
        CLIENT_SECRET,
        TIMEOUT_MS,
        RETRIES,
        BACKOFF_BASE_MS,
        BACKOFF_MAX_MS,
        CACHE_MAX_TTL,
        CACHE_DEFAULT_TTL,
        CACHE_NEGATIVE_TTL,
        CACHE_STALE,
        MEMORY_ENTRIES,
        RETRY_BUDGET_PERCENT,
        RETRY_BUDGET_MIN,
        BREAKER_FAILURES,
        BREAKER_OPEN_MS,
        SIGNING_KEY,
        SIGNING_POLICY,
        SIGNATURE_TTL,
        SIGNING_ISSUER,
        REQUEST_LOG,
        CELLS,
        CELL_FAILURES,
        CELL_FAILURE_WINDOW_MS,
        CELL_OPEN_MS,
        CELL_HEALTH_REFRESH_MS,
        CELL_HEALTH_MAX_AGE_SECONDS,
        CELL_PROBE_TIMEOUT_MS,
        CELL_HEADERS_TIMEOUT_MS,
        CELL_TRIAL_SPACING_MS,
        SMOKE_TEST_SECRET,
        CONTROL_REFRESH,
        NOT_FOUND_DELAY_MS,
        ENVIRONMENT,
    ];
}

/// How a [`Problem`] shows at run time, and whether it stops a deploy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The router has nothing to fall back to, or refuses traffic as a
    /// setting says (no legacy cell; signing required without a usable
    /// key): an `error` line (it reaches Sentry). Fails the deploy check.
    Error,
    /// A value the router cannot read, or reads only in part; the fallback
    /// it uses is stated: a `warn` line. Fails the deploy check.
    Warn,
    /// A deliberate state worth stating once (no signing key while signing
    /// is optional): an `info` line. The deploy check passes.
    Note,
}

impl Level {
    /// The log line's `level`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Note => "info",
        }
    }

    /// Whether `rulesctl config check` (and so a deploy) fails on it.
    pub fn fails_check(self) -> bool {
        !matches!(self, Level::Note)
    }
}

/// One setting's problem: which setting, its value as given (never a
/// secret's), what is wrong and what the router does instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub level: Level,
    pub setting: String,
    /// The value as given (trimmed), or the entry of a list that is wrong;
    /// `None` when not set, and always for a secret.
    pub value: Option<String>,
    pub wrong: String,
    /// What the router uses or does instead.
    pub instead: String,
}

impl Problem {
    fn new(level: Level, setting: &str, value: Option<&str>, wrong: &str, instead: &str) -> Self {
        Problem {
            level,
            setting: setting.to_string(),
            value: value.map(str::to_string),
            wrong: wrong.to_string(),
            instead: instead.to_string(),
        }
    }

    pub fn error(setting: &str, value: Option<&str>, wrong: &str, instead: &str) -> Self {
        Problem::new(Level::Error, setting, value, wrong, instead)
    }

    pub fn warn(setting: &str, value: Option<&str>, wrong: &str, instead: &str) -> Self {
        Problem::new(Level::Warn, setting, value, wrong, instead)
    }

    pub fn note(setting: &str, value: Option<&str>, wrong: &str, instead: &str) -> Self {
        Problem::new(Level::Note, setting, value, wrong, instead)
    }
}

/// `SETTING="value": what is wrong; what is used instead` (without
/// `="value"` when there is none to show).
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.setting)?;
        if let Some(value) = &self.value {
            write!(f, "={value:?}")?;
        }
        write!(f, ": {}; {}", self.wrong, self.instead)
    }
}

/// A whole-number setting's value: `(the number used, Some((what is wrong,
/// what is used instead)))`. Out of `min..=max` it is the nearest bound;
/// not a whole number, `default`.
fn read_number(v: &str, default: u32, min: u32, max: u32) -> (u32, Option<(String, String)>) {
    let (negative, digits) = match v.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, v.strip_prefix('+').unwrap_or(v)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return (
            default,
            Some((
                format!("not a whole number ({min}..={max})"),
                format!("using the default, {default}"),
            )),
        );
    }
    // Digits alone: too many for u64 is above any maximum.
    let n = if negative {
        None
    } else {
        Some(digits.parse::<u64>().unwrap_or(u64::MAX))
    };
    match n {
        Some(n) if n >= u64::from(min) && n <= u64::from(max) => {
            (u32::try_from(n).unwrap_or(max), None)
        }
        Some(n) if n > u64::from(max) => (
            max,
            Some((format!("above the maximum, {max}"), format!("using {max}"))),
        ),
        _ => (
            min,
            Some((format!("below the minimum, {min}"), format!("using {min}"))),
        ),
    }
}

/// The settings that are Worker secrets (`wrangler secret put`), never
/// `[vars]`: their values are never shown.
pub const SECRETS: &[&str] = &[
    vars::CLIENT_ID,
    vars::CLIENT_SECRET,
    vars::SIGNING_KEY,
    vars::SMOKE_TEST_SECRET,
];

/// A value of the secret's form, for checking a configuration whose
/// secrets are known by name only (`rulesctl config check`): the value
/// itself is never read there.
pub fn secret_stand_in(name: &str) -> &'static str {
    if name == vars::SIGNING_KEY {
        // 32 bytes, an Ed25519 seed's length.
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
    } else {
        "set"
    }
}

/// Everything the edge needs, parsed once per isolate.
#[derive(Debug)]
pub struct Config {
    pub rules_config: Option<String>,
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

/// The control document's default refresh interval.
pub const DEFAULT_CONTROL_REFRESH_SECS: u32 = 30;

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

    /// Reads every setting through `lookup`; returns the config and the
    /// problems found (see the module docs for what each setting falls
    /// back to). A secret's value is never put in a problem.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> (Config, Vec<Problem>) {
        let mut problems = Vec::new();
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };

        let proxy_host = match get(vars::PROXY_HOST) {
            None => {
                problems.push(Problem::error(
                    vars::PROXY_HOST,
                    None,
                    "not set",
                    "there is no legacy cell: requests no rule sends to a cell get a 502",
                ));
                None
            }
            Some(host) => match validate_address(&host) {
                Ok(()) => Some(host),
                Err(e) => {
                    problems.push(Problem::error(
                        vars::PROXY_HOST,
                        Some(host.as_str()),
                        &format!("not host[:port]: {e}"),
                        "there is no legacy cell: requests no rule sends to a cell get a 502",
                    ));
                    None
                }
            },
        };
        let upstream_scheme = match get(vars::UPSTREAM_SCHEME).as_deref() {
            None | Some("https") => "https",
            Some("http") => "http",
            Some(other) => {
                problems.push(Problem::warn(
                    vars::UPSTREAM_SCHEME,
                    Some(other),
                    "neither https nor http",
                    "using https",
                ));
                "https"
            }
        };
        let allowed_upstreams = match get(vars::ALLOWED_UPSTREAMS) {
            None => AllowList::default(),
            Some(spec) => {
                let (list, bad) = AllowList::parse_each(&spec);
                for (entry, e) in bad {
                    problems.push(Problem::warn(
                        vars::ALLOWED_UPSTREAMS,
                        Some(entry.as_str()),
                        &format!("not an allow-list entry: {e}"),
                        "this entry is left out; the others are allowed",
                    ));
                }
                list
            }
        };
        let topology_url = get(vars::TOPOLOGY_SERVICE_URL).and_then(|url| {
            if url.starts_with("https://") || url.starts_with("http://") {
                Some(url.trim_end_matches('/').to_string())
            } else {
                problems.push(Problem::warn(
                    vars::TOPOLOGY_SERVICE_URL,
                    Some(url.as_str()),
                    "not an http(s) URL",
                    "classification is off: requests it would classify go to the legacy cell",
                ));
                None
            }
        });

        let mut number = |name: &'static str, default: u32, min: u32, max: u32| -> u32 {
            let Some(v) = get(name) else {
                return default;
            };
            let (n, problem) = read_number(&v, default, min, max);
            if let Some((wrong, instead)) = problem {
                problems.push(Problem::warn(name, Some(v.as_str()), &wrong, &instead));
            }
            n
        };
        let defaults = ClientPolicy::default();
        let control_refresh_secs = number(
            vars::CONTROL_REFRESH,
            DEFAULT_CONTROL_REFRESH_SECS,
            1,
            3_600,
        );

        let client = ClientPolicy {
            timeout_ms: number(vars::TIMEOUT_MS, defaults.timeout_ms, 10, 30_000),
            retries: number(vars::RETRIES, defaults.retries, 0, 10),
            backoff_base_ms: number(vars::BACKOFF_BASE_MS, defaults.backoff_base_ms, 0, 10_000),
            backoff_max_ms: number(vars::BACKOFF_MAX_MS, defaults.backoff_max_ms, 0, 60_000),
            memory_entries: number(
                vars::MEMORY_ENTRIES,
                defaults.memory_entries as u32,
                1,
                1_000_000,
            ) as usize,
            guard: GuardPolicy {
                retry_percent: number(
                    vars::RETRY_BUDGET_PERCENT,
                    defaults.guard.retry_percent,
                    0,
                    1_000,
                ),
                min_retries: number(
                    vars::RETRY_BUDGET_MIN,
                    defaults.guard.min_retries,
                    0,
                    100_000,
                ),
                failures: number(vars::BREAKER_FAILURES, defaults.guard.failures, 0, 10_000),
                open_ms: number(vars::BREAKER_OPEN_MS, defaults.guard.open_ms, 100, 600_000),
                ..defaults.guard
            },
        };
        let cache_defaults = CachePolicy::default();
        let cache = CachePolicy {
            max_ttl: number(vars::CACHE_MAX_TTL, cache_defaults.max_ttl, 0, 86_400 * 7),
            default_ttl: number(
                vars::CACHE_DEFAULT_TTL,
                cache_defaults.default_ttl,
                0,
                86_400,
            ),
            negative_ttl: number(
                vars::CACHE_NEGATIVE_TTL,
                cache_defaults.negative_ttl,
                0,
                86_400,
            ),
            stale_if_error: number(vars::CACHE_STALE, cache_defaults.stale_if_error, 0, 86_400),
        };

        let circuit_defaults = CircuitPolicy::default();
        let circuits = CircuitPolicy {
            failures: number(vars::CELL_FAILURES, circuit_defaults.failures, 0, 10_000),
            window_ms: number(
                vars::CELL_FAILURE_WINDOW_MS,
                circuit_defaults.window_ms,
                100,
                600_000,
            ),
            open_ms: number(vars::CELL_OPEN_MS, circuit_defaults.open_ms, 100, 600_000),
            trial_spacing_ms: number(
                vars::CELL_TRIAL_SPACING_MS,
                circuit_defaults.trial_spacing_ms,
                10,
                600_000,
            ),
            headers_timeout_ms: number(
                vars::CELL_HEADERS_TIMEOUT_MS,
                circuit_defaults.headers_timeout_ms,
                0,
                3_600_000,
            ),
        };
        let health_refresh_ms = number(vars::CELL_HEALTH_REFRESH_MS, 5_000, 500, 600_000);
        let health_max_age_secs = number(vars::CELL_HEALTH_MAX_AGE_SECONDS, 180, 10, 86_400);
        let probe_timeout_ms = number(vars::CELL_PROBE_TIMEOUT_MS, 2_000, 100, 30_000);

        let ttl = number(
            vars::SIGNATURE_TTL,
            crate::forward::signing::DEFAULT_TTL_SECS,
            1,
            3600,
        );
        let signing_policy = match get(vars::SIGNING_POLICY) {
            None => SigningPolicy::Optional,
            Some(v) if v.eq_ignore_ascii_case("optional") => SigningPolicy::Optional,
            Some(v) if v.eq_ignore_ascii_case("required") => SigningPolicy::Required,
            Some(other) => {
                problems.push(Problem::warn(
                    vars::SIGNING_POLICY,
                    Some(other.as_str()),
                    "neither required nor optional",
                    "using optional: requests are signed while the key is usable, \
                     forwarded unsigned otherwise (never all refused)",
                ));
                SigningPolicy::Optional
            }
        };
        let issuer = get(vars::SIGNING_ISSUER)
            .unwrap_or_else(|| crate::forward::signing::DEFAULT_ISSUER.to_string());
        let signer = match get(vars::SIGNING_KEY) {
            None => Ok(None),
            Some(key) => crate::forward::signing::Signer::from_base64(&key, &issuer, ttl).map(Some),
        };
        // A secret: its value is never in a problem.
        match (&signer, signing_policy) {
            (Err(e), SigningPolicy::Required) => problems.push(Problem::error(
                vars::SIGNING_KEY,
                None,
                &format!("not a usable key: {e}"),
                "every request is refused (503) until it is fixed (GITLAB_ROUTER_SIGNING_POLICY is required)",
            )),
            (Err(e), SigningPolicy::Optional) => problems.push(Problem::warn(
                vars::SIGNING_KEY,
                None,
                &format!("not a usable key: {e}"),
                "requests are forwarded unsigned (GITLAB_ROUTER_SIGNING_POLICY is optional)",
            )),
            (Ok(None), SigningPolicy::Required) => problems.push(Problem::error(
                vars::SIGNING_KEY,
                None,
                "not set, but GITLAB_ROUTER_SIGNING_POLICY is required",
                "every request is refused (503)",
            )),
            (Ok(None), SigningPolicy::Optional) => problems.push(Problem::note(
                vars::SIGNING_KEY,
                None,
                "not set",
                "requests are forwarded unsigned (GITLAB_ROUTER_SIGNING_POLICY is optional)",
            )),
            (Ok(Some(_)), _) => {}
        }

        let request_logging = match get(vars::REQUEST_LOG) {
            None => RequestLogging::All,
            Some(value) => match RequestLogging::parse(&value) {
                Some(logging) => logging,
                None => {
                    problems.push(Problem::warn(
                        vars::REQUEST_LOG,
                        Some(value.as_str()),
                        "none of all, errors, sample:<share from 0 to 1>",
                        "using all",
                    ));
                    RequestLogging::All
                }
            },
        };

        let cells = match get(vars::CELLS) {
            None => CellList::default(),
            Some(json) => {
                let (cells, bad) = CellList::parse(&json);
                let whole = cells.is_empty() && bad.len() == 1;
                for problem in bad {
                    let wrong = problem.strip_suffix("; left out").unwrap_or(&problem);
                    let instead = if whole && !problem.starts_with("entry ") {
                        "no cell list is used"
                    } else {
                        "this entry is left out; the other cells are used"
                    };
                    problems.push(Problem::warn(vars::CELLS, None, wrong, instead));
                }
                cells
            }
        };
        let not_found_delay = match get(vars::NOT_FOUND_DELAY_MS) {
            None => None,
            Some(v) => match DelayRange::parse(&v) {
                Some(range) if range.max_ms == 0 => None,
                Some(range) => Some(range),
                None => {
                    problems.push(Problem::warn(
                        vars::NOT_FOUND_DELAY_MS,
                        Some(v.as_str()),
                        &format!("not MIN-MAX milliseconds (0..={})", DelayRange::MAX_MS),
                        "404s are not delayed",
                    ));
                    None
                }
            },
        };

        let config = Config {
            rules_config: get(vars::RULES_CONFIG),
            topology_url,
            proxy_host,
            upstream_scheme,
            allowed_upstreams,
            client_id: get(vars::CLIENT_ID),
            client_secret: get(vars::CLIENT_SECRET),
            client,
            cache,
            signer,
            signing_policy,
            request_logging,
            cells,
            circuits,
            health_refresh_ms,
            health_max_age_secs,
            probe_timeout_ms,
            not_found_delay,
            control_refresh_secs,
            smoke_test_secret: get(vars::SMOKE_TEST_SECRET),
            environment: get(vars::ENVIRONMENT).unwrap_or_default(),
        };
        (config, problems)
    }

    /// The deployment's namespace in the shared cache: 32 hex digits of the
    /// SHA-256 of the Topology Service URL and the legacy cell. Cloudflare's
    /// `caches.default` is one per zone, shared by every Worker on it
    /// (staging, production, the registry deployments): without a
    /// namespace one environment would read another's answers.
    /// Deployments that ask the same service and fall back to the same
    /// legacy cell get the same answers, so they may share entries.
    /// The cell route learning asks (`host[:port]`): the legacy cell. This
    /// is the one place that chooses it; once the router knows a list of
    /// cells, it can pick among them here.
    pub fn learn_cell(&self) -> Option<&str> {
        self.proxy_host.as_deref()
    }

    pub fn cache_namespace(&self) -> String {
        use sha2::{Digest, Sha256};
        use std::fmt::Write as _;
        let mut hasher = Sha256::new();
        hasher.update(self.topology_url.as_deref().unwrap_or("").as_bytes());
        hasher.update(b"\n");
        hasher.update(self.proxy_host.as_deref().unwrap_or("").as_bytes());
        let mut out = String::with_capacity(32);
        for byte in hasher.finalize().iter().take(16) {
            let _ = write!(out, "{byte:02x}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(pairs: &[(&str, &str)]) -> (Config, Vec<Problem>) {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn not_found_delay_ranges() {
        let r = |v| DelayRange::parse(v);
        assert_eq!(
            r("50-250"),
            Some(DelayRange {
                min_ms: 50,
                max_ms: 250
            })
        );
        assert_eq!(
            r(" 100 "),
            Some(DelayRange {
                min_ms: 100,
                max_ms: 100
            })
        );
        assert_eq!(r("0-0").map(|d| d.max_ms), Some(0));
        for bad in [
            "", "-", "250-50", "a-b", "1-2-3", "-5", "5-", "0-10001", "1.5-2",
        ] {
            assert_eq!(r(bad), None, "{bad:?}");
        }
        let d = r("50-250").unwrap();
        assert_eq!(d.pick(0.0), 50);
        assert_eq!(d.pick(0.999_999), 250);
        assert_eq!(d.pick(1.0), 250);
        assert_eq!(d.pick(0.5), 150);

        let (c, problems) = read(&[("GITLAB_NOT_FOUND_DELAY_MS", "50-250")]);
        assert_eq!(c.not_found_delay, d.into());
        assert!(problems
            .iter()
            .all(|p| p.setting != "GITLAB_NOT_FOUND_DELAY_MS"));
        let (c, _) = read(&[]);
        assert_eq!(c.not_found_delay, None, "off by default");
        let (c, _) = read(&[("GITLAB_NOT_FOUND_DELAY_MS", "0")]);
        assert_eq!(c.not_found_delay, None);
        let (c, problems) = read(&[("GITLAB_NOT_FOUND_DELAY_MS", "250-50")]);
        assert_eq!(c.not_found_delay, None);
        assert!(problems
            .iter()
            .any(|p| p.setting == "GITLAB_NOT_FOUND_DELAY_MS"
                && p.value.as_deref() == Some("250-50")
                && p.level == Level::Warn));
    }

    #[test]
    fn request_log_sampling() {
        let log_problems = |p: Vec<Problem>| -> Vec<Problem> {
            p.into_iter()
                .filter(|p| p.setting == "GITLAB_REQUEST_LOG")
                .collect()
        };
        let (c, problems) = read(&[("GITLAB_REQUEST_LOG", "sample:0.01")]);
        assert!(log_problems(problems).is_empty());
        assert_eq!(
            c.request_logging,
            RequestLogging::Sample {
                per_million: 10_000
            }
        );
        let sample = c.request_logging;
        assert!(sample.always(true, || panic!("notable lines are not drawn")));
        assert!(sample.always(false, || 0.0099));
        assert!(!sample.always(false, || 0.01));
        assert!(!RequestLogging::Errors.always(false, || 0.0));
        assert!(RequestLogging::All.always(false, || 1.0));
        for (share, expected) in [
            ("1", 1_000_000),
            (".5", 500_000),
            ("0.0000019", 1),
            ("0", 0),
        ] {
            assert_eq!(
                RequestLogging::parse(&format!("sample:{share}")),
                Some(RequestLogging::Sample {
                    per_million: expected
                }),
                "{share}"
            );
        }
        for bad in [
            "sample:2",
            "sample:1.5",
            "sample:x",
            "sample:",
            "sample:.",
            "sample:-0.1",
            "some",
        ] {
            let (c, problems) = read(&[("GITLAB_REQUEST_LOG", bad)]);
            assert_eq!(c.request_logging, RequestLogging::All, "{bad}");
            assert_eq!(log_problems(problems).len(), 1, "{bad}");
        }
    }

    #[test]
    fn a_complete_config_has_no_problems() {
        let (c, problems) = read(&[
            ("GITLAB_RULES_CONFIG", "session_prefix"),
            ("GITLAB_TOPOLOGY_SERVICE_URL", "http://127.0.0.1:9096/"),
            ("GITLAB_PROXY_HOST", "127.0.0.1:9101"),
            ("GITLAB_UPSTREAM_SCHEME", "http"),
            ("GITLAB_ALLOWED_UPSTREAMS", "127.0.0.1:9102,127.0.0.1:9103"),
            ("GITLAB_TOPOLOGY_TIMEOUT_MS", "250"),
            (
                "GITLAB_ROUTER_SIGNING_KEY",
                "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
            ),
            ("GITLAB_ROUTER_SIGNING_POLICY", "required"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(matches!(c.signer, Ok(Some(_))));
        assert_eq!(c.signing_policy, SigningPolicy::Required);
        assert_eq!(c.topology_url.as_deref(), Some("http://127.0.0.1:9096"));
        assert_eq!(c.upstream_scheme, "http");
        assert_eq!(c.client.timeout_ms, 250);
        assert!(c.allowed_upstreams.allows("127.0.0.1:9103"));
    }

    #[test]
    fn malformed_values_are_reported_and_fall_back() {
        let (c, problems) = read(&[
            ("GITLAB_PROXY_HOST", "https://legacy/"),
            ("GITLAB_UPSTREAM_SCHEME", "gopher"),
            ("GITLAB_TOPOLOGY_SERVICE_URL", "ts.internal"),
            ("GITLAB_TOPOLOGY_RETRIES", "many"),
            ("GITLAB_ALLOWED_UPSTREAMS", "ok.example.com, bad/host"),
        ]);
        assert_eq!(c.proxy_host, None);
        assert_eq!(c.upstream_scheme, "https");
        assert_eq!(c.topology_url, None);
        assert_eq!(c.client.retries, ClientPolicy::default().retries);
        assert!(c.allowed_upstreams.allows("ok.example.com"));
        assert_eq!(problems.len(), 6, "{problems:#?}");
        assert!(problems
            .iter()
            .all(|p| p.to_string().starts_with("GITLAB_")));
    }

    #[test]
    fn signing_policy_is_explicit_about_a_missing_or_bad_key() {
        let (c, problems) = read(&[
            ("GITLAB_PROXY_HOST", "legacy"),
            ("GITLAB_ROUTER_SIGNING_POLICY", "required"),
        ]);
        assert!(matches!(c.signer, Ok(None)));
        assert!(
            problems[0].to_string().contains("refused (503)"),
            "{problems:?}"
        );
        assert_eq!(problems[0].level, Level::Error);
        let (c, problems) = read(&[
            ("GITLAB_PROXY_HOST", "legacy"),
            ("GITLAB_ROUTER_SIGNING_KEY", "short"),
        ]);
        assert!(c.signer.is_err());
        assert_eq!(c.signing_policy, SigningPolicy::Optional);
        assert!(
            problems[0].to_string().contains("forwarded unsigned"),
            "{problems:?}"
        );
        assert_eq!(problems[0].level, Level::Warn);
    }

    #[test]
    fn cache_namespaces_separate_deployments() {
        let ns = |url: &str, legacy: &str| {
            read(&[
                ("GITLAB_TOPOLOGY_SERVICE_URL", url),
                ("GITLAB_PROXY_HOST", legacy),
            ])
            .0
            .cache_namespace()
        };
        let production = ns("https://ts.gitlab.com", "legacy.gitlab.com");
        assert_eq!(production.len(), 32);
        assert_eq!(
            production,
            ns("https://ts.gitlab.com/", "legacy.gitlab.com")
        );
        assert_ne!(
            production,
            ns("https://ts.staging.gitlab.com", "legacy.gitlab.com")
        );
        assert_ne!(
            production,
            ns("https://ts.gitlab.com", "legacy.staging.gitlab.com")
        );
        // No ambiguity from where one value ends and the other begins.
        assert_ne!(
            ns("https://a.example", "b.example"),
            ns("https://a.exampleb", "example")
        );
    }

    #[test]
    fn the_cell_list_and_circuit_settings() {
        let (c, problems) = read(&[
            ("GITLAB_PROXY_HOST", "legacy"),
            (
                "GITLAB_CELLS",
                r#"[{"id": 2, "address": "cell2.example"}, {"id": 3, "address": "bad/"}]"#,
            ),
            ("GITLAB_CELL_FAILURES", "3"),
            ("GITLAB_CELL_OPEN_MS", "1"),
        ]);
        assert_eq!(c.cells.len(), 1);
        assert_eq!(c.circuits.failures, 3);
        assert_eq!(c.circuits.open_ms, 100, "below the minimum: the minimum");
        assert_eq!(c.health_refresh_ms, 5_000);
        let mine: Vec<String> = problems
            .iter()
            .filter(|p| p.setting.starts_with("GITLAB_CELL"))
            .map(ToString::to_string)
            .collect();
        assert_eq!(mine.len(), 2, "{problems:#?}");
        assert!(
            mine.iter()
                .any(|p| p.starts_with("GITLAB_CELLS: entry 2: cell 3: address")),
            "{mine:?}"
        );
        let (c, problems) = read(&[("GITLAB_PROXY_HOST", "legacy"), ("GITLAB_CELLS", "{")]);
        assert!(c.cells.is_empty());
        assert!(problems
            .iter()
            .any(|p| p.to_string().starts_with("GITLAB_CELLS: not JSON")
                && p.instead == "no cell list is used"));
    }

    #[test]
    fn missing_proxy_host_is_a_problem() {
        let (c, problems) = read(&[]);
        assert_eq!(c.proxy_host, None);
        assert_eq!(problems[0].setting, "GITLAB_PROXY_HOST");
        assert!(problems[0]
            .to_string()
            .starts_with("GITLAB_PROXY_HOST: not set; "));
        assert_eq!(problems[0].level, Level::Error);
    }

    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    fn about<'a>(problems: &'a [Problem], setting: &str) -> Vec<&'a Problem> {
        problems.iter().filter(|p| p.setting == setting).collect()
    }

    #[test]
    fn a_signing_policy_typo_falls_back_to_optional_not_to_refusing_everything() {
        // No key: `required` would refuse every request (503).
        let (c, problems) = read(&[
            ("GITLAB_PROXY_HOST", "legacy"),
            ("GITLAB_ROUTER_SIGNING_POLICY", "requird"),
        ]);
        assert_eq!(c.signing_policy, SigningPolicy::Optional);
        let mine = about(&problems, "GITLAB_ROUTER_SIGNING_POLICY");
        assert_eq!(mine.len(), 1, "{problems:#?}");
        assert_eq!(mine[0].level, Level::Warn);
        assert_eq!(mine[0].value.as_deref(), Some("requird"));
        assert!(mine[0].instead.starts_with("using optional"), "{mine:?}");
        assert!(
            problems.iter().all(|p| p.level != Level::Error),
            "nothing is refused: {problems:#?}"
        );
        // With a usable key every request is still signed.
        let (c, _) = read(&[
            ("GITLAB_PROXY_HOST", "legacy"),
            ("GITLAB_ROUTER_SIGNING_KEY", KEY),
            ("GITLAB_ROUTER_SIGNING_POLICY", "requierd"),
        ]);
        assert!(matches!(c.signer, Ok(Some(_))));
        // The two words in any case; unset is optional without a problem.
        for (value, policy) in [
            ("REQUIRED", SigningPolicy::Required),
            (" Optional ", SigningPolicy::Optional),
        ] {
            let (c, problems) = read(&[
                ("GITLAB_ROUTER_SIGNING_KEY", KEY),
                ("GITLAB_ROUTER_SIGNING_POLICY", value),
            ]);
            assert_eq!(c.signing_policy, policy, "{value}");
            assert!(about(&problems, "GITLAB_ROUTER_SIGNING_POLICY").is_empty());
        }
    }

    #[test]
    fn one_bad_allowed_upstream_leaves_the_others_allowed() {
        let (c, problems) = read(&[(
            "GITLAB_ALLOWED_UPSTREAMS",
            "*.cells.example.com, bad/host,10.0.0.1:8080 https://x.example",
        )]);
        assert!(c.allowed_upstreams.allows("cell-2.cells.example.com"));
        assert!(c.allowed_upstreams.allows("10.0.0.1:8080"));
        assert!(!c.allowed_upstreams.allows("bad"));
        let mine = about(&problems, "GITLAB_ALLOWED_UPSTREAMS");
        let values: Vec<Option<&str>> = mine.iter().map(|p| p.value.as_deref()).collect();
        assert_eq!(values, [Some("bad/host"), Some("https://x.example")]);
        assert!(mine.iter().all(|p| p.level == Level::Warn));
        assert!(mine[0]
            .to_string()
            .starts_with(r#"GITLAB_ALLOWED_UPSTREAMS="bad/host": not an allow-list entry"#));
    }

    #[test]
    fn numbers_out_of_range_take_the_nearest_bound_and_non_numbers_the_default() {
        let timeout = |v: &str| {
            let (c, problems) = read(&[("GITLAB_TOPOLOGY_TIMEOUT_MS", v)]);
            let mine: Vec<Problem> = about(&problems, "GITLAB_TOPOLOGY_TIMEOUT_MS")
                .into_iter()
                .cloned()
                .collect();
            (c.client.timeout_ms, mine)
        };
        let default = ClientPolicy::default().timeout_ms;
        for (value, used) in [("250", 250), (" 30000 ", 30_000), ("+10", 10)] {
            let (n, problems) = timeout(value);
            assert_eq!(n, used, "{value}");
            assert!(problems.is_empty(), "{value}: {problems:?}");
        }
        for (value, used, instead) in [
            ("50000", 30_000, "using 30000"),
            ("99999999999999999999999", 30_000, "using 30000"),
            ("5", 10, "using 10"),
            ("-3", 10, "using 10"),
            ("abc", default, "using the default, 1000"),
            ("1e3", default, "using the default, 1000"),
            ("2.5", default, "using the default, 1000"),
            ("-", default, "using the default, 1000"),
        ] {
            let (n, problems) = timeout(value);
            assert_eq!(n, used, "{value}");
            assert_eq!(problems.len(), 1, "{value}");
            assert_eq!(problems[0].level, Level::Warn);
            assert_eq!(problems[0].value.as_deref(), Some(value.trim()));
            assert_eq!(problems[0].instead, instead, "{value}");
        }
    }

    #[test]
    fn a_secret_value_is_never_in_a_problem() {
        let secret = "this-is-not-a-key-but-secret";
        let (c, problems) = read(&[
            ("GITLAB_ROUTER_SIGNING_KEY", secret),
            ("GITLAB_ROUTER_SIGNING_POLICY", "required"),
        ]);
        assert!(c.signer.is_err());
        let mine = about(&problems, "GITLAB_ROUTER_SIGNING_KEY");
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].value, None);
        assert!(problems
            .iter()
            .all(|p| !format!("{p} {p:?}").contains(secret)));
    }

    #[test]
    fn levels_say_what_fails_a_deploy() {
        let (_, problems) = read(&[]);
        let levels: Vec<(&str, Level)> = problems
            .iter()
            .map(|p| (p.setting.as_str(), p.level))
            .collect();
        assert_eq!(
            levels,
            [
                ("GITLAB_PROXY_HOST", Level::Error),
                ("GITLAB_ROUTER_SIGNING_KEY", Level::Note),
            ]
        );
        assert!(Level::Error.fails_check() && Level::Warn.fails_check());
        assert!(!Level::Note.fails_check());
        assert_eq!(
            [Level::Error, Level::Warn, Level::Note].map(Level::as_str),
            ["error", "warn", "info"]
        );
    }

    #[test]
    fn every_setting_read_is_listed_and_secret_stand_ins_read_as_set() {
        let asked = std::cell::RefCell::new(Vec::new());
        let _ = Config::from_lookup(|name| {
            asked.borrow_mut().push(name.to_string());
            None
        });
        let mut asked = asked.into_inner();
        asked.sort();
        asked.dedup();
        let mut all: Vec<&str> = vars::ALL.to_vec();
        all.sort_unstable();
        assert_eq!(asked, all);
        assert!(SECRETS.iter().all(|s| vars::ALL.contains(s)));
        let (c, problems) = Config::from_lookup(|name| {
            SECRETS
                .contains(&name)
                .then(|| secret_stand_in(name).to_string())
        });
        assert!(matches!(c.signer, Ok(Some(_))));
        assert!(about(&problems, "GITLAB_ROUTER_SIGNING_KEY").is_empty());
        assert!(c.smoke_test_secret.is_some() && c.client_secret.is_some());
    }

    /// README.md's settings table has a row for every setting, each with
    /// its accepted values and what an unreadable value does.
    #[test]
    fn the_readme_table_has_every_setting() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
                .expect("README.md");
        let section = readme
            .split("## Configuration\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("a Configuration section");
        let mut named = Vec::new();
        for row in section.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 5, "{row}");
            // `A_B_C` / `_D`: A_B_D.
            let mut first: Option<String> = None;
            for item in cells[0].split(" / ") {
                let item = item.trim().trim_matches('`');
                match (&first, item.strip_prefix('_')) {
                    (Some(full), Some(tail)) => {
                        let keep = full.split('_').count() - tail.split('_').count();
                        let base: Vec<&str> = full.split('_').take(keep).collect();
                        named.push(format!("{}_{tail}", base.join("_")));
                    }
                    _ => {
                        first = Some(item.to_string());
                        named.push(item.to_string());
                    }
                }
            }
        }
        for name in vars::ALL {
            assert!(
                named.iter().any(|n| n == name),
                "{name} is not in README.md's table: {named:?}"
            );
        }
    }
}
