//! The router's settings, read from wrangler `[vars]` and secrets (SPEC §2).
//!
//! A malformed value never stops the router: it is reported as a problem
//! (logged once per isolate by the edge) and the safe default is used.

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
    /// problems found, each a sentence naming the variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> (Config, Vec<String>) {
        let mut problems = Vec::new();
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };

        let proxy_host = match get(vars::PROXY_HOST) {
            None => {
                problems.push(format!(
                    "{} is not set: the router has no legacy cell to send requests to",
                    vars::PROXY_HOST
                ));
                None
            }
            Some(host) => match validate_address(&host) {
                Ok(()) => Some(host),
                Err(e) => {
                    problems.push(format!("{}: {e}", vars::PROXY_HOST));
                    None
                }
            },
        };
        let upstream_scheme = match get(vars::UPSTREAM_SCHEME).as_deref() {
            None | Some("https") => "https",
            Some("http") => "http",
            Some(other) => {
                problems.push(format!(
                    "{}: {other:?} is neither https nor http; using https",
                    vars::UPSTREAM_SCHEME
                ));
                "https"
            }
        };
        let allowed_upstreams = match get(vars::ALLOWED_UPSTREAMS) {
            None => AllowList::default(),
            Some(spec) => AllowList::parse(&spec).unwrap_or_else(|e| {
                problems.push(format!(
                    "{}: {e}; only the legacy cell and the ruleset's fixed addresses are allowed",
                    vars::ALLOWED_UPSTREAMS
                ));
                AllowList::default()
            }),
        };
        let topology_url = get(vars::TOPOLOGY_SERVICE_URL).and_then(|url| {
            if url.starts_with("https://") || url.starts_with("http://") {
                Some(url.trim_end_matches('/').to_string())
            } else {
                problems.push(format!(
                    "{}: {url:?} is not an http(s) URL; classification is off",
                    vars::TOPOLOGY_SERVICE_URL
                ));
                None
            }
        });

        let mut number = |name: &str, default: u32, min: u32, max: u32| -> u32 {
            match get(name) {
                None => default,
                Some(v) => match v.parse::<u32>() {
                    Ok(n) if (min..=max).contains(&n) => n,
                    _ => {
                        problems.push(format!(
                            "{name}: {v:?} is not a number in {min}..={max}; using {default}"
                        ));
                        default
                    }
                },
            }
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
        let signing_policy = match get(vars::SIGNING_POLICY).as_deref() {
            None | Some("optional") => SigningPolicy::Optional,
            Some("required") => SigningPolicy::Required,
            Some(other) => {
                problems.push(format!(
                    "{}: {other:?} is neither required nor optional; using required",
                    vars::SIGNING_POLICY
                ));
                SigningPolicy::Required
            }
        };
        let issuer = get(vars::SIGNING_ISSUER)
            .unwrap_or_else(|| crate::forward::signing::DEFAULT_ISSUER.to_string());
        let signer = match get(vars::SIGNING_KEY) {
            None => Ok(None),
            Some(key) => crate::forward::signing::Signer::from_base64(&key, &issuer, ttl).map(Some),
        };
        match (&signer, signing_policy) {
            (Err(e), SigningPolicy::Required) => problems.push(format!(
                "{}: {e}; every request is refused (503) until it is fixed",
                vars::SIGNING_KEY
            )),
            (Err(e), SigningPolicy::Optional) => problems.push(format!(
                "{}: {e}; requests are forwarded unsigned",
                vars::SIGNING_KEY
            )),
            (Ok(None), SigningPolicy::Required) => problems.push(format!(
                "{} is not set but {} is required: every request is refused (503)",
                vars::SIGNING_KEY,
                vars::SIGNING_POLICY
            )),
            (Ok(None), SigningPolicy::Optional) => problems.push(format!(
                "{} is not set: requests are forwarded unsigned ({}=optional)",
                vars::SIGNING_KEY,
                vars::SIGNING_POLICY
            )),
            (Ok(Some(_)), _) => {}
        }

        let request_logging = match get(vars::REQUEST_LOG).as_deref() {
            None => RequestLogging::All,
            Some(value) if RequestLogging::parse(value).is_some() => {
                RequestLogging::parse(value).unwrap_or(RequestLogging::All)
            }
            Some(other) => {
                problems.push(format!(
                    "{}: {other:?} is none of all, errors, sample:<share from 0 to 1>; using all",
                    vars::REQUEST_LOG
                ));
                RequestLogging::All
            }
        };

        let cells = match get(vars::CELLS) {
            None => CellList::default(),
            Some(json) => {
                let (cells, bad) = CellList::parse(&json);
                for problem in bad {
                    problems.push(format!("{}: {problem}", vars::CELLS));
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
                    problems.push(format!(
                        "{}: {v:?} is not MIN-MAX milliseconds (0..={}); 404s are not delayed",
                        vars::NOT_FOUND_DELAY_MS,
                        DelayRange::MAX_MS
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
    /// namespace one environment would read another's answers (issue 14).
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

    fn read(pairs: &[(&str, &str)]) -> (Config, Vec<String>) {
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
        assert!(problems.iter().all(|p| !p.contains("NOT_FOUND")));
        let (c, _) = read(&[]);
        assert_eq!(c.not_found_delay, None, "off by default");
        let (c, _) = read(&[("GITLAB_NOT_FOUND_DELAY_MS", "0")]);
        assert_eq!(c.not_found_delay, None);
        let (c, problems) = read(&[("GITLAB_NOT_FOUND_DELAY_MS", "250-50")]);
        assert_eq!(c.not_found_delay, None);
        assert!(problems
            .iter()
            .any(|p| p.contains("GITLAB_NOT_FOUND_DELAY_MS") && p.contains("250-50")));
    }

    #[test]
    fn request_log_sampling() {
        let log_problems = |p: Vec<String>| -> Vec<String> {
            p.into_iter()
                .filter(|p| p.contains("GITLAB_REQUEST_LOG"))
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
    fn malformed_values_are_reported_and_defaulted() {
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
        assert!(c.allowed_upstreams.is_empty());
        assert_eq!(problems.len(), 6, "{problems:#?}");
        assert!(problems.iter().all(|p| p.starts_with("GITLAB_")));
    }

    #[test]
    fn signing_policy_is_explicit_about_a_missing_or_bad_key() {
        let (c, problems) = read(&[
            ("GITLAB_PROXY_HOST", "legacy"),
            ("GITLAB_ROUTER_SIGNING_POLICY", "required"),
        ]);
        assert!(matches!(c.signer, Ok(None)));
        assert!(problems[0].contains("refused (503)"), "{problems:?}");
        let (c, problems) = read(&[
            ("GITLAB_PROXY_HOST", "legacy"),
            ("GITLAB_ROUTER_SIGNING_KEY", "short"),
        ]);
        assert!(c.signer.is_err());
        assert_eq!(c.signing_policy, SigningPolicy::Optional);
        assert!(problems[0].contains("forwarded unsigned"), "{problems:?}");
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
        assert_eq!(c.circuits.open_ms, CircuitPolicy::default().open_ms);
        assert_eq!(c.health_refresh_ms, 5_000);
        let mine: Vec<&String> = problems
            .iter()
            .filter(|p| p.starts_with("GITLAB_CELL"))
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
            .any(|p| p.starts_with("GITLAB_CELLS: not JSON")));
    }

    #[test]
    fn missing_proxy_host_is_a_problem() {
        let (c, problems) = read(&[]);
        assert_eq!(c.proxy_host, None);
        assert!(problems[0].contains("GITLAB_PROXY_HOST is not set"));
    }
}
