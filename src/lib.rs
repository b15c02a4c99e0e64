//! The worker edge of the GitLab Cells HTTP router.
//!
//! The Worker's fetch handler is `src/entry.js` (worker-build's
//! `CUSTOM_SHIM`): it reads the URL, the method and only the headers the
//! ruleset needs, and asks this module where the request goes:
//!
//! * [`route_sync`], a plain synchronous call, answers every request whose
//!   route is known without waiting: fixed cells, the legacy cell, and
//!   classifications in the isolate's memory cache. That is nearly all
//!   traffic, and it never enters Rust's async machinery.
//! * [`route_async`] answers the rest: Topology Service lookups (through the
//!   Cache API and the service), rejections and errors.
//!
//! Both answer with a forwarding plan (see `plan`): the upstream URL and the
//! headers to drop and set. The entry applies it and forwards the incoming
//! request with its body stream, which never crosses into wasm. Routing
//! itself is the pure core's (`router_core`).

mod io;

use std::cell::OnceCell;
use std::rc::Rc;

use router_core::config::{Config, RequestLogging, SigningPolicy};
use router_core::forward::{
    self, AllowList, CF_CONNECTING_IP, RULE_ACTION_HEADER, RULE_TYPE_HEADER, X_FORWARDED_FOR,
    X_FORWARDED_HOST, X_FORWARDED_PROTO,
};
use router_core::log::RequestLog;
use router_core::request::UrlParts;
use router_core::resolve::{CacheLevel, Resolution, Resolver};
use router_core::ruleset::HeaderInterest;
use router_core::signing::{SignedRequest, SIGNATURE_HEADER};
use router_core::{Action, Decision, RequestParts, RouterError, Ruleset};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Headers, Request, Response, ResponseInit};
use worker::{event, worker_sys, Env};

mod compiled {
    include!(concat!(env!("OUT_DIR"), "/rulesets.rs"));
}

type EdgeResolver = Resolver<io::FetchTransport, io::CacheApi, io::JsPlatform>;

/// What an isolate builds once, on its first request.
struct Isolate {
    config: Config,
    ruleset: Option<Ruleset>,
    /// The configured allow-list plus the legacy cell and fixed addresses.
    allowed: AllowList,
    resolver: Option<EdgeResolver>,
    /// The headers the entry reads per request (the rules' plus
    /// [`EDGE_HEADERS`]); `None`: the rules need every header.
    header_names: Option<Vec<String>>,
    /// Headers a client's `Connection` can never have removed, besides
    /// those `forward` always keeps: the ones the rules read.
    relied_on: Vec<String>,
}

/// Headers the edge reads besides the rules': for hop-by-hop handling, for
/// `X-Forwarded-For`, and for the signature.
const EDGE_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    CF_CONNECTING_IP,
    "content-length",
    "content-type",
];

thread_local! {
    static ISOLATE: OnceCell<Rc<Isolate>> = const { OnceCell::new() };
}

fn isolate(env: &Env) -> Rc<Isolate> {
    ISOLATE.with(|cell| cell.get_or_init(|| Rc::new(Isolate::new(env))).clone())
}

impl Isolate {
    fn new(env: &Env) -> Isolate {
        let lookup = |name: &str| {
            env.var(name)
                .map(|v| v.to_string())
                .ok()
                .or_else(|| env.secret(name).map(|v| v.to_string()).ok())
        };
        let (config, problems) = Config::from_lookup(lookup);
        for problem in &problems {
            log_error("config", problem);
        }
        let ruleset = match config.rules_config.as_deref() {
            None => {
                log_error(
                    "config",
                    "GITLAB_RULES_CONFIG is not set: every request goes to the legacy cell",
                );
                None
            }
            Some(name) => match compiled::RULESETS.iter().find(|(n, _)| *n == name) {
                None => {
                    let known: Vec<&str> = compiled::RULESETS.iter().map(|(n, _)| *n).collect();
                    log_error(
                        "config",
                        &format!(
                            "GITLAB_RULES_CONFIG={name:?} names no compiled ruleset (known: {}): every request goes to the legacy cell",
                            known.join(", ")
                        ),
                    );
                    None
                }
                // Validated by build.rs; an error here would be a bug, and
                // it still only sends traffic to the legacy cell.
                Some((_, json)) => Ruleset::from_json(name, json)
                    .map_err(|e| log_error("config", &e.to_string()))
                    .ok(),
            },
        };
        let mut allowed = config.allowed_upstreams.clone();
        if let Some(host) = &config.proxy_host {
            allowed.allow_exact(host);
        }
        if let Some(rules) = &ruleset {
            for address in rules.fixed_addresses() {
                allowed.allow_exact(address);
            }
        }
        let resolver = config.topology_url.as_ref().map(|url| {
            Resolver::new(
                io::FetchTransport::new(
                    url,
                    config.client_id.clone(),
                    config.client_secret.clone(),
                ),
                io::CacheApi::new(&config.cache_namespace()),
                io::JsPlatform,
                config.cache.clone(),
                config.client.clone(),
            )
        });
        let rule_headers = match ruleset.as_ref().map(Ruleset::header_interest) {
            Some(HeaderInterest::All) => None,
            Some(HeaderInterest::Names(names)) => Some(names.clone()),
            None => Some(Vec::new()),
        };
        let relied_on = rule_headers.clone().unwrap_or_default();
        let header_names = rule_headers.map(|mut names| {
            for extra in EDGE_HEADERS {
                if !names.iter().any(|n| n == extra) {
                    names.push(extra.to_string());
                }
            }
            names
        });
        Isolate {
            config,
            ruleset,
            allowed,
            resolver,
            header_names,
            relied_on,
        }
    }
}

#[event(start)]
fn start() {
    console_error_panic_hook::set_once();
}

fn js_array<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> js_sys::Array {
    items
        .into_iter()
        .map(|s| JsValue::from_str(s.as_ref()))
        .collect()
}

/// What the entry needs once per isolate: `[header names (null: all of
/// them), client headers always dropped, the headers a plan sets (in the
/// plan's order), the prefixes of client headers always dropped, the
/// Ed25519 seed requests are signed with (null: not signing)]`. The entry
/// compares client header names with `_` read as `-` (`forward::drop_key`).
#[wasm_bindgen(js_name = routerSetup)]
pub fn router_setup(env: Env) -> js_sys::Array {
    let iso = isolate(&env);
    let names: JsValue = match &iso.header_names {
        Some(names) => js_array(names).into(),
        None => JsValue::NULL,
    };
    let seed: JsValue = match &iso.config.signer {
        Ok(Some(signer)) => js_sys::Uint8Array::from(&signer.seed()[..]).into(),
        _ => JsValue::NULL,
    };
    js_sys::Array::of5(
        &names,
        &js_array(forward::dropped_names(None, None, &[])).into(),
        &js_array([
            X_FORWARDED_HOST,
            X_FORWARDED_PROTO,
            RULE_ACTION_HEADER,
            RULE_TYPE_HEADER,
            SIGNATURE_HEADER,
            X_FORWARDED_FOR,
        ])
        .into(),
        &js_array(forward::FORBIDDEN_PREFIXES).into(),
        &seed,
    )
}

/// Routes a request whose route is known without waiting, and returns its
/// encoded plan ([`plan`]); `None` sends the request to [`route_async`].
///
/// `headers`: the values of the names from [`router_setup`], in order,
/// joined by NUL, an absent header as `\x01` (the entry's `scanHeaders`).
#[wasm_bindgen(js_name = routeSync)]
pub fn route_sync(env: Env, url: &str, method: String, headers: &str) -> Option<String> {
    let iso = isolate(&env);
    let names = iso.header_names.as_ref()?;
    let mut incoming = Incoming::parse(url, method)?;
    #[cfg(feature = "panic-probe")]
    match incoming.parts.path.as_str() {
        "/__panic_probe__/sync" => panic!("panic probe: routeSync"),
        "/__panic_probe__/async" => return None,
        _ => {}
    }
    if !fill_headers(&mut incoming.parts, names, headers) {
        return None;
    }
    let mut log = incoming.log(&iso);
    let decision = iso.ruleset.as_ref().map(|r| r.decide(&incoming.parts));
    let target = match decision.as_ref().map(|d| &d.action) {
        None => Ok(None),
        Some(Action::Proxy { address }) => Ok(address.map(str::to_string)),
        Some(Action::Reject { .. }) => return None,
        Some(Action::Classify(request)) => {
            let resolution = iso.resolver.as_ref()?.resolve_from_memory(request)?;
            target_of(&resolution, request.target, &mut log)
        }
    };
    // Errors are rare and answered by route_async, which logs them.
    plan(&iso, &incoming, decision.as_ref(), &mut log, target).ok()
}

/// Routes any request: returns its encoded plan ([`plan`]), or the `Response` it
/// gets instead (a rejection, a 4xx or 5xx from the router). The Topology
/// Service's answers are cached for [`route_sync`]; Cache API writes are
/// handed to `ctx.waitUntil`.
///
/// `headers`: as for [`route_sync`], or `None` when the rules need every
/// header (read from `req` here).
#[wasm_bindgen(js_name = routeAsync)]
pub async fn route_async(
    env: Env,
    ctx: worker_sys::Context,
    req: Request,
    url: String,
    method: String,
    headers: Option<String>,
) -> JsValue {
    let started = js_sys::Date::now();
    let iso = isolate(&env);
    let Some(mut incoming) = Incoming::parse(&url, method) else {
        return text_response(400, "bad request URL\n").into();
    };
    #[cfg(feature = "panic-probe")]
    if incoming.parts.path == "/__panic_probe__/async" {
        // After an await, as a panic in the resolver would be: from a
        // microtask, not from the entry's call.
        router_core::resolve::Platform::sleep(&io::JsPlatform, 1).await;
        panic!("panic probe: routeAsync");
    }
    let parts = &mut incoming.parts;
    match (&iso.header_names, headers) {
        (Some(names), Some(joined)) if fill_headers(parts, names, &joined) => {}
        (Some(names), _) => {
            // A value held a separator (invalid in HTTP): ask one by one.
            let all = req.headers();
            for name in names {
                if let Ok(Some(value)) = all.get(name) {
                    parts.headers.push((name.clone(), value));
                }
            }
        }
        (None, _) => parts.headers = header_pairs(&req.headers()),
    }
    let mut log = incoming.log(&iso);
    let respond = |log: &mut RequestLog, status: u16, body: &str| -> JsValue {
        log.status = Some(status);
        log.duration_ms = (js_sys::Date::now() - started).max(0.0) as u64;
        emit(&iso.config, log);
        text_response(status, body).into()
    };

    let decision = iso.ruleset.as_ref().map(|r| r.decide(&incoming.parts));
    let target = match decision.as_ref().map(|d| &d.action) {
        None => Ok(None),
        Some(Action::Proxy { address }) => Ok(address.map(str::to_string)),
        Some(Action::Reject { status, message }) => {
            let d = decision.as_ref().expect("matched above");
            log.rule = d.rule_id;
            log.action = "reject";
            return respond(&mut log, *status, &format!("{message}\n"));
        }
        Some(Action::Classify(request)) => {
            match &iso.resolver {
                None => {
                    log.cache = Some(CacheLevel::Fallback);
                    log.error = Some("GITLAB_TOPOLOGY_SERVICE_URL is not set".into());
                    Ok(None)
                }
                Some(resolver) => {
                    let res = resolver.resolve(request).await;
                    // Cache API writes finish after the response is sent.
                    for write in resolver.shared_cache().take_pending() {
                        let _ = ctx.wait_until(&write);
                    }
                    log.attempts = (res.attempts > 0).then_some(res.attempts);
                    log.service_ms = res.service_ms;
                    log.coalesced = res.coalesced;
                    log.error = res.error.as_ref().map(ToString::to_string);
                    target_of(&res, request.target, &mut log)
                }
            }
        }
    };
    match plan(&iso, &incoming, decision.as_ref(), &mut log, target) {
        Ok(plan) => JsValue::from_str(&plan),
        Err((status, body)) => respond(&mut log, status, &body),
    }
}

/// The address a resolution gives for `target` (`None`: the legacy cell).
fn target_of(
    res: &Resolution,
    target: router_core::Target,
    log: &mut RequestLog,
) -> Result<Option<String>, RouterError> {
    log.cache = Some(res.level);
    match &res.classification {
        None => Ok(None),
        Some(c) => c.address_for(target).map(|a| a.map(str::to_string)),
    }
}

/// Writes the request's log line, as `GITLAB_REQUEST_LOG` asks.
fn emit(config: &Config, log: &RequestLog) {
    if config.request_logging == RequestLogging::All || log.is_notable() {
        web_sys::console::log_1(&log.to_json().into());
    }
}

fn log_error(scope: &str, message: &str) {
    let line = serde_json::json!({"level": "error", "scope": scope, "message": message});
    web_sys::console::error_1(&line.to_string().into());
}

/// What the edge knows of the incoming request: the parts the rules see,
/// plus the public authority and scheme for the forwarded headers.
struct Incoming {
    parts: RequestParts,
    public_host: String,
    public_proto: &'static str,
}

impl Incoming {
    /// The URL split in Rust; headers are added by the caller.
    fn parse(url: &str, method: String) -> Option<Incoming> {
        let split = UrlParts::parse(url)?;
        Some(Incoming {
            public_host: split.authority.to_string(),
            public_proto: if split.scheme == "https" {
                "https"
            } else {
                "http"
            },
            parts: RequestParts::from_url_parts(method, &split),
        })
    }

    fn log<'a>(&'a self, iso: &'a Isolate) -> RequestLog<'a> {
        RequestLog {
            ruleset: iso.ruleset.as_ref().map_or("none", Ruleset::name),
            method: &self.parts.method,
            path: &self.parts.path,
            action: "proxy",
            ..Default::default()
        }
    }
}

/// Separates header values in `scanHeaders`' answer and in an encoded
/// plan, and marks an absent header; neither can occur in a valid HTTP
/// field value, a URL or a JSON text.
const SEPARATOR: &str = "\u{0}";
const HEADER_ABSENT: &str = "\u{1}";

/// Adds the joined header values to `parts`; false when their count does
/// not match (a value held the separator).
fn fill_headers(parts: &mut RequestParts, names: &[String], joined: &str) -> bool {
    let values: Vec<&str> = joined.split(SEPARATOR).collect();
    if values.len() != names.len() {
        return false;
    }
    for (name, value) in names.iter().zip(values) {
        if value != HEADER_ABSENT {
            parts.headers.push((name.clone(), value.to_string()));
        }
    }
    true
}

fn header_pairs(headers: &Headers) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(Some(iter)) = js_sys::try_iter(headers) else {
        return out;
    };
    for entry in iter.flatten() {
        let pair: js_sys::Array = entry.unchecked_into();
        if let (Some(n), Some(v)) = (pair.get(0).as_string(), pair.get(1).as_string()) {
            out.push((n, v));
        }
    }
    out
}

/// The upstream for a decided request, as an encoded plan, or the status
/// and body the request gets instead (the error is in `log`).
///
/// A plan says how the entry forwards the request, as one string (one
/// boundary crossing) of fields joined by NUL, in this order:
///
/// | field | |
/// |---|---|
/// | url | the upstream URL |
/// | drop | client headers to drop, comma-separated; empty: the usual set |
/// | host, proto | `X-Forwarded-Host`, `X-Forwarded-Proto` |
/// | action, type | the rule headers (`type` empty: not set) |
/// | sign | what the entry signs for `X-Gitlab-Http-Router-Signature` (the JWT's header and claims; empty: not signed) |
/// | log head, log tail | the log line around `"status":…,"duration_ms":…` |
/// | log always | `1`: log whatever the status; `0`: only a 5xx |
/// | for | `X-Forwarded-For` (empty: not set) |
fn plan<'a>(
    iso: &'a Isolate,
    incoming: &'a Incoming,
    decision: Option<&Decision<'a>>,
    log: &mut RequestLog<'a>,
    target: Result<Option<String>, RouterError>,
) -> Result<String, (u16, String)> {
    let mut rule_type = None;
    if let Some(d) = decision {
        log.rule = d.rule_id;
        log.action = d.action.name();
        if let Action::Classify(request) = &d.action {
            log.classify_type = Some(request.kind.name());
            rule_type = Some(request.kind.rule_type_header());
        }
    }
    let parts = &incoming.parts;
    let address = match target {
        Err(e) => {
            log.error = Some(e.to_string());
            return Err((502, format!("gitlab-http-router: {e}\n")));
        }
        Ok(address) => address.or_else(|| iso.config.proxy_host.clone()),
    };
    let Some(address) = address else {
        log.error = Some("no legacy cell configured (GITLAB_PROXY_HOST)".into());
        return Err((502, "gitlab-http-router: no upstream configured\n".into()));
    };
    if !iso.allowed.allows(&address) {
        log.error = Some(RouterError::UpstreamNotAllowed(address.clone()).to_string());
        log.upstream = Some(address);
        return Err((502, "gitlab-http-router: upstream not allowed\n".into()));
    }
    let url = forward::upstream_url(
        iso.config.upstream_scheme,
        &address,
        &parts.path,
        &parts.query,
    );
    // The JWT's header and claims; the entry has the platform sign them.
    let signing_input = match (&iso.config.signer, iso.config.signing_policy) {
        (Ok(Some(signer)), _) => Some(signer.signing_input(&SignedRequest {
            audience: &address,
            method: &parts.method,
            path: &parts.path,
            query: &parts.query,
            rule: log.rule,
            classify_type: rule_type,
            content_length: parts.header("content-length"),
            content_type: parts.header("content-type"),
            jti: &io::random_uuid(),
            now_ms: js_sys::Date::now() as u64,
        })),
        (_, SigningPolicy::Optional) => None,
        (_, SigningPolicy::Required) => {
            log.upstream = Some(address);
            log.error =
                Some("request signing is required but no valid signing key is configured".into());
            return Err((
                503,
                "gitlab-http-router: request signing unavailable\n".into(),
            ));
        }
    };
    log.upstream = Some(address);
    let (connection, upgrade) = (parts.header("connection"), parts.header("upgrade"));
    let drop = if connection.is_none() && upgrade.is_none() {
        String::new()
    } else {
        forward::dropped_names(connection, upgrade, &iso.relied_on).join(",")
    };
    let (log_head, log_tail) = log.to_json_around_status();
    let log_always =
        iso.config.request_logging == RequestLogging::All || log.is_notable_whatever_the_status();
    let forwarded_for = forward::forwarded_for(parts.header(CF_CONNECTING_IP)).unwrap_or("");
    let fields: [&str; 11] = [
        &url,
        &drop,
        &incoming.public_host,
        incoming.public_proto,
        log.action,
        rule_type.unwrap_or(""),
        signing_input.as_deref().unwrap_or(""),
        &log_head,
        &log_tail,
        if log_always { "1" } else { "0" },
        forwarded_for,
    ];
    Ok(fields.join(SEPARATOR))
}

fn text_response(status: u16, body: &str) -> Response {
    let init = ResponseInit::new();
    init.set_status(status);
    let headers = Headers::new().expect("Headers::new");
    let _ = headers.set("content-type", "text/plain; charset=utf-8");
    init.set_headers(&headers);
    Response::new_with_opt_str_and_init(Some(body), &init).expect("static response")
}
