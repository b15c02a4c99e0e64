//! The worker edge: the `fetch` handler of the GitLab Cells HTTP router.
//!
//! It stays thin: it reads only the request parts the ruleset needs, asks
//! the pure core (`router_core`) for a decision, resolves it through the
//! core's resolver (with the I/O adapters in [`io`]), and forwards the
//! incoming request to the cell without touching its body. It works on raw
//! `web_sys` types so a request crosses the wasm boundary a few times, not
//! once per header.

mod io;

use std::cell::OnceCell;
use std::rc::Rc;

use router_core::config::{Config, RequestLogging, SigningPolicy};
use router_core::forward::{
    self, AllowList, RULE_ACTION_HEADER, RULE_TYPE_HEADER, X_FORWARDED_HOST, X_FORWARDED_PROTO,
};
use router_core::log::RequestLog;
use router_core::request::{normalize_path, UrlParts};
use router_core::resolve::{CacheLevel, Resolver};
use router_core::ruleset::HeaderInterest;
use router_core::signing::{SignedRequest, SIGNATURE_HEADER};
use router_core::{Action, Decision, RequestParts, RouterError, Ruleset};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Headers, Request, Response, ResponseInit};
use worker::{event, Context, Env};

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
    /// The headers read per request (the rules' plus `connection` and
    /// `upgrade`), with a JS array of them made once; `None`: the rules
    /// need every header.
    header_names: Option<(Vec<String>, js_sys::Array)>,
    /// The client headers dropped from a request without `Connection` or
    /// `Upgrade` (the common case), made once.
    base_drop: js_sys::Array,
    /// The names of the headers the router sets, in `forwardRequest`'s order.
    set_names: js_sys::Array,
}

fn js_array<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> js_sys::Array {
    items
        .into_iter()
        .map(|s| JsValue::from_str(s.as_ref()))
        .collect()
}

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
                io::CacheApi::default(),
                io::JsPlatform,
                config.cache.clone(),
                config.client.clone(),
            )
        });
        let header_names = match ruleset.as_ref().map(Ruleset::header_interest) {
            Some(HeaderInterest::All) => None,
            Some(HeaderInterest::Names(names)) => Some(names.clone()),
            None => Some(Vec::new()),
        }
        .map(|mut names| {
            for extra in ["connection", "upgrade"] {
                if !names.iter().any(|n| n == extra) {
                    names.push(extra.to_string());
                }
            }
            let js = js_array(&names);
            (names, js)
        });
        Isolate {
            config,
            ruleset,
            allowed,
            resolver,
            header_names,
            base_drop: js_array(forward::dropped_names(None, None)),
            set_names: js_array([
                X_FORWARDED_HOST,
                X_FORWARDED_PROTO,
                RULE_ACTION_HEADER,
                RULE_TYPE_HEADER,
                SIGNATURE_HEADER,
            ]),
        }
    }
}

#[event(start)]
fn start() {
    console_error_panic_hook::set_once();
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    let iso = isolate(&env);
    Ok(route(&iso, req, &ctx).await)
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

/// Reads only what the rules need: one call for the URL (split in Rust),
/// one for the method, one for all the headers the ruleset names.
fn incoming(iso: &Isolate, req: &Request) -> Option<Incoming> {
    let url = req.url();
    let split = UrlParts::parse(&url)?;
    let mut parts = RequestParts {
        method: req.method(),
        host: split.host.to_ascii_lowercase(),
        path: normalize_path(split.path).into_owned(),
        query: split.query.to_string(),
        headers: Vec::new(),
    };
    match &iso.header_names {
        Some((names, js_names)) => {
            let joined = read_headers(req, js_names);
            let values: Vec<&str> = joined.split(HEADER_SEPARATOR).collect();
            if values.len() == names.len() {
                for (name, value) in names.iter().zip(values) {
                    if value != HEADER_ABSENT {
                        parts.headers.push((name.clone(), value.to_string()));
                    }
                }
            } else {
                // A value held a separator (invalid in HTTP): ask one by one.
                let headers = req.headers();
                for name in names {
                    if let Ok(Some(value)) = headers.get(name) {
                        parts.headers.push((name.clone(), value));
                    }
                }
            }
        }
        None => parts.headers = header_pairs(&req.headers()),
    }
    Some(Incoming {
        public_host: split.authority.to_string(),
        public_proto: if split.scheme == "https" {
            "https"
        } else {
            "http"
        },
        parts,
    })
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

/// Routes one request; every failure becomes a response, never a panic.
async fn route(iso: &Isolate, req: Request, ctx: &Context) -> Response {
    let started = js_sys::Date::now();
    let ruleset_name = iso.ruleset.as_ref().map_or("none", Ruleset::name);
    let Some(Incoming {
        parts,
        public_host,
        public_proto,
    }) = incoming(iso, &req)
    else {
        return text_response(400, "bad request URL\n");
    };
    let mut log = RequestLog {
        ruleset: ruleset_name,
        method: &parts.method,
        path: &parts.path,
        action: "proxy",
        ..Default::default()
    };

    let decision = iso.ruleset.as_ref().map(|r| r.decide(&parts));
    if let Some(
        d @ Decision {
            action: Action::Reject { status, message },
            ..
        },
    ) = &decision
    {
        log.rule = d.rule_id;
        log.action = "reject";
        log.status = Some(*status);
        emit(&iso.config, &log);
        return text_response(*status, &format!("{message}\n"));
    }
    let mut rule_type: Option<&str> = None;
    let target: Result<Option<String>, RouterError> = match decision.as_ref().map(|d| &d.action) {
        None => Ok(None),
        Some(Action::Proxy { address }) => Ok(address.map(str::to_string)),
        // Answered above.
        Some(Action::Reject { .. }) => Ok(None),
        Some(Action::Classify(request)) => {
            rule_type = Some(request.kind.rule_type_header());
            log.classify_type = Some(request.kind.name());
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
                        ctx.wait_until(async move {
                            let _ = wasm_bindgen_futures::JsFuture::from(write).await;
                        });
                    }
                    log.cache = Some(res.level);
                    log.attempts = (res.attempts > 0).then_some(res.attempts);
                    log.service_ms = res.service_ms;
                    log.coalesced = res.coalesced;
                    log.error = res.error.as_ref().map(ToString::to_string);
                    match &res.classification {
                        None => Ok(None),
                        Some(c) => c.address_for(request.target).map(|a| a.map(str::to_string)),
                    }
                }
            }
        }
    };
    if let Some(d) = &decision {
        log.rule = d.rule_id;
        log.action = d.action.name();
    }

    let response = match target {
        Err(e) => {
            log.error = Some(e.to_string());
            text_response(502, &format!("gitlab-http-router: {e}\n"))
        }
        Ok(address) => match address.or_else(|| iso.config.proxy_host.clone()) {
            None => {
                log.error = Some("no legacy cell configured (GITLAB_PROXY_HOST)".into());
                text_response(502, "gitlab-http-router: no upstream configured\n")
            }
            Some(address) if !iso.allowed.allows(&address) => {
                log.error = Some(RouterError::UpstreamNotAllowed(address.clone()).to_string());
                log.upstream = Some(address);
                text_response(502, "gitlab-http-router: upstream not allowed\n")
            }
            Some(address) => {
                let url = forward::upstream_url(
                    iso.config.upstream_scheme,
                    &address,
                    &parts.path,
                    &parts.query,
                );
                let signature = match (&iso.config.signer, iso.config.signing_policy) {
                    (Ok(Some(signer)), _) => Ok(Some(signer.sign(&SignedRequest {
                        audience: &address,
                        method: &parts.method,
                        path: &parts.path,
                        query: &parts.query,
                        rule: log.rule,
                        classify_type: rule_type,
                        jti: &io::random_uuid(),
                        now_ms: js_sys::Date::now() as u64,
                    }))),
                    (_, SigningPolicy::Optional) => Ok(None),
                    (_, SigningPolicy::Required) => Err(()),
                };
                log.upstream = Some(address);
                let action = log.action;
                let Ok(signature) = signature else {
                    log.error = Some(
                        "request signing is required but no valid signing key is configured".into(),
                    );
                    log.status = Some(503);
                    emit(&iso.config, &log);
                    return text_response(503, "gitlab-http-router: request signing unavailable\n");
                };
                let signature = signature.as_deref();
                let set = Forwarded {
                    public_host: &public_host,
                    public_proto,
                    action,
                    rule_type,
                    signature,
                };
                match proxy(iso, req, &parts, &url, set).await {
                    Ok(resp) => resp,
                    Err(e) => {
                        log.error = Some(format!("upstream fetch failed: {e}"));
                        text_response(502, "gitlab-http-router: upstream unreachable\n")
                    }
                }
            }
        },
    };
    log.status = Some(response.status());
    log.duration_ms = (js_sys::Date::now() - started).max(0.0) as u64;
    emit(&iso.config, &log);
    response
}

/// Separates header values in `readHeaders`' answer, and marks an absent
/// header; neither can occur in a valid HTTP field value.
const HEADER_SEPARATOR: char = '\u{0}';
const HEADER_ABSENT: &str = "\u{1}";

#[wasm_bindgen(inline_js = r#"
export function readHeaders(req, names) {
  const headers = req.headers;
  let out = "";
  for (let i = 0; i < names.length; i++) {
    const value = headers.get(names[i]);
    out += (i ? "\u0000" : "") + (value === null ? "\u0001" : value);
  }
  return out;
}

export function forwardRequest(req, url, drop, dropPrefix, setNames, host, proto, action, ruleType, signature) {
  const headers = new Headers(req.headers);
  for (const name of [...headers.keys()]) if (name.startsWith(dropPrefix)) headers.delete(name);
  for (const name of drop) headers.delete(name);
  const values = [host, proto, action, ruleType, signature];
  for (let i = 0; i < setNames.length; i++) if (values[i] !== undefined) headers.set(setNames[i], values[i]);
  return fetch(url, { method: req.method, headers, body: req.body, redirect: "manual" });
}
"#)]
extern "C" {
    /// The values of `names` joined by `HEADER_SEPARATOR`, absent ones as
    /// `HEADER_ABSENT`: one boundary crossing for all the headers.
    #[wasm_bindgen(js_name = readHeaders)]
    fn read_headers(req: &Request, names: &js_sys::Array) -> String;

    /// Applies a forwarding plan and fetches, all on the JS side: the
    /// headers and the body stream never cross into wasm.
    #[wasm_bindgen(js_name = forwardRequest, catch)]
    #[allow(clippy::too_many_arguments)]
    fn forward_request(
        req: &Request,
        url: &str,
        dropped: &js_sys::Array,
        drop_prefix: &str,
        set_names: &js_sys::Array,
        host: &str,
        proto: &str,
        action: &str,
        rule_type: Option<String>,
        signature: Option<String>,
    ) -> Result<js_sys::Promise, JsValue>;
}

/// What the router sets on a forwarded request.
struct Forwarded<'a> {
    public_host: &'a str,
    public_proto: &'a str,
    action: &'a str,
    rule_type: Option<&'a str>,
    signature: Option<&'a str>,
}

/// Forwards the incoming request to `url`: same method and body stream,
/// headers cleaned per the core's forwarding plan, redirects not followed.
async fn proxy(
    iso: &Isolate,
    req: Request,
    parts: &RequestParts,
    url: &str,
    set: Forwarded<'_>,
) -> Result<Response, String> {
    let js_err = |e: JsValue| {
        js_sys::Reflect::get(&e, &"message".into())
            .ok()
            .and_then(|m| m.as_string())
            .unwrap_or_else(|| format!("{e:?}"))
    };
    let (connection, upgrade) = (parts.header("connection"), parts.header("upgrade"));
    let fresh;
    let dropped = if connection.is_none() && upgrade.is_none() {
        &iso.base_drop
    } else {
        fresh = js_array(forward::dropped_names(connection, upgrade));
        &fresh
    };
    let promise = forward_request(
        &req,
        url,
        dropped,
        forward::ROUTER_HEADER_PREFIX,
        &iso.set_names,
        set.public_host,
        set.public_proto,
        set.action,
        set.rule_type.map(str::to_string),
        set.signature.map(str::to_string),
    )
    .map_err(js_err)?;
    let resp: Response = wasm_bindgen_futures::JsFuture::from(promise)
        .await
        .map_err(js_err)?
        .unchecked_into();
    Ok(resp)
}

fn text_response(status: u16, body: &str) -> Response {
    let init = ResponseInit::new();
    init.set_status(status);
    let headers = Headers::new().expect("Headers::new");
    let _ = headers.set("content-type", "text/plain; charset=utf-8");
    init.set_headers(&headers);
    Response::new_with_opt_str_and_init(Some(body), &init).expect("static response")
}
