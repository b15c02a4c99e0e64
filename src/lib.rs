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
//! Both answer with a plan (`router_core::plan::Plan`, encoded once for the
//! boundary): forward (URL, headers to drop and set, what to sign, what
//! each failure answers, the log line) or answer from the router. The entry
//! applies it without deciding anything and forwards the incoming request
//! with its body stream, which never crosses into wasm. A request
//! `routeSync` cannot finish (a memory-cache miss) is handed to
//! `routeAsync` as it stands, so the rules run once per request.

#[cfg(any(test, all(not(target_feature = "atomics"), target_family = "wasm")))]
mod alloc;
mod control;
mod io;

use std::borrow::Cow;
use std::cell::{Cell, OnceCell, RefCell};
use std::rc::Rc;

use router_core::cells::{self, Admission, CellHealth, HealthRecord, OpenedBy};
use router_core::config::{Config, RequestLogging, SigningPolicy};
use router_core::forward::{
    self, AllowList, CF_CONNECTING_IP, RULE_ACTION_HEADER, RULE_TYPE_HEADER, X_FORWARDED_FOR,
    X_FORWARDED_HOST, X_FORWARDED_PROTO,
};
use router_core::log::RequestLog;
use router_core::plan::{Answer, Failure, Forward, LogPlan, Plan, Report, Signing};
use router_core::request::UrlParts;
use router_core::resolve::{CacheLevel, Resolver};
use router_core::route::{self, Pending, Routed};
use router_core::ruleset::HeaderInterest;
use router_core::signing::{SignedRequest, SIGNATURE_HEADER};
use router_core::topology::Classification;
use router_core::trace::{Trace, CF_RAY_HEADER, TRACEPARENT_HEADER};
use router_core::{Action, ClassifyKind, RequestParts, RouterError, Ruleset, Target};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Headers, Request};
use worker::{event, worker_sys, Env};

mod compiled {
    include!(concat!(env!("OUT_DIR"), "/rulesets.rs"));
}

type EdgeResolver = Resolver<io::FetchTransport, io::CacheApi, io::JsPlatform>;

/// Talc instead of Rust's default dlmalloc: allocating (the plan, the log
/// line, the request's parts) was a quarter of a request's time in wasm,
/// and talc does it in fewer instructions and less code. Small blocks are
/// recycled in front of it (`alloc.rs`).
#[cfg(all(not(target_feature = "atomics"), target_family = "wasm"))]
#[global_allocator]
static ALLOCATOR: alloc::SizeClassCache<talc::wasm::WasmDynamicTalc> =
    alloc::SizeClassCache::new(talc::wasm::new_wasm_dynamic_allocator());

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
    /// The Worker version answering (the version metadata binding's id),
    /// named in every log line.
    version: Option<String>,
    /// The circuit of every cell of `GITLAB_CELLS` (`config.cells`).
    health: RefCell<CellHealth>,
    /// When the scheduled probe's record is read next (ms since the
    /// epoch): at most once per `config.health_refresh_ms`.
    next_health_read_ms: Cell<u64>,
    /// The probe record's home in the Cache API.
    health_store: io::HealthStore,
    /// The clock and the random source (JS; fakes in native tests).
    now: fn() -> f64,
    random: fn() -> f64,
    /// The runtime control document, when `ROUTER_CONTROL` is bound.
    controls: Option<control::Controls>,
}

/// Headers the edge reads besides the rules': for hop-by-hop handling, for
/// `X-Forwarded-For`, and for the signature.
const EDGE_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    CF_CONNECTING_IP,
    "content-length",
    "content-type",
    CF_RAY_HEADER,
    TRACEPARENT_HEADER,
];

/// The version metadata binding (`[version_metadata]` in wrangler.toml).
const VERSION_BINDING: &str = "CF_VERSION_METADATA";

thread_local! {
    static ISOLATE: OnceCell<Rc<Isolate>> = const { OnceCell::new() };
    /// The request `routeSync` stopped at a memory-cache miss, for the
    /// `routeAsync` call the entry makes right after it (nothing runs in
    /// between: the entry calls one after the other without awaiting).
    static PENDING: RefCell<Option<(String, Incoming, Pending)>> = const { RefCell::new(None) };
    /// Where the entry writes each request's input for [`route_sync`]
    /// (`TextEncoder.encodeInto`, native code, instead of the glue's
    /// character-by-character copy of three strings into three fresh
    /// allocations). Sized by [`input_buffer`].
    static INPUT: RefCell<Box<[u8]>> = RefCell::new(Box::default());
    /// A plan [`route_sync`] found too long for the input buffer, until
    /// the entry takes it ([`take_plan`]).
    static LONG_PLAN: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Makes [`route_sync`]'s input buffer `capacity` bytes (its contents are
/// not kept) and returns its address in wasm memory, where the entry
/// writes. Called again only when a request needs more room.
#[wasm_bindgen(js_name = inputBuffer)]
pub fn input_buffer(capacity: usize) -> usize {
    INPUT.with(|input| {
        let mut input = input.borrow_mut();
        *input = vec![0; capacity].into_boxed_slice();
        input.as_mut_ptr() as usize
    })
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
        let mtls = io::FetchTransport::mtls_binding(env);
        if mtls.is_some() {
            let line = serde_json::json!({"level": "info", "scope": "config", "message": format!(
                "Topology Service calls go through the {} mtls_certificates binding", io::MTLS_BINDING
            )});
            web_sys::console::log_1(&line.to_string().into());
        }
        let mut iso = Isolate::from_lookup(lookup, log_error, mtls);
        iso.version = js_sys::Reflect::get(env, &VERSION_BINDING.into())
            .ok()
            .filter(|m| m.is_object())
            .and_then(|m| js_sys::Reflect::get(&m, &"id".into()).ok())
            .and_then(|id| id.as_string())
            .filter(|id| !id.is_empty());
        iso.controls = js_sys::Reflect::get(env, &control::BINDING.into())
            .ok()
            .and_then(|binding| control::Controls::new(binding, iso.config.control_refresh_secs));
        iso
    }

    /// Whether the control document says every request goes to the legacy
    /// cell.
    fn passthrough(&self) -> bool {
        self.controls
            .as_ref()
            .is_some_and(|c| c.mode() == router_core::control::Mode::Passthrough)
    }

    /// `GITLAB_REQUEST_LOG`, unless the control document overrides it.
    fn request_logging(&self) -> RequestLogging {
        self.controls
            .as_ref()
            .and_then(control::Controls::request_log)
            .unwrap_or(self.config.request_logging)
    }

    /// The isolate's state from its settings; `log_error(scope, message)`
    /// reports what is wrong with them (never fatal).
    /// `mtls`: the Topology Service's `mtls_certificates` binding, if any.
    fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        log_error: impl Fn(&str, &str),
        mtls: Option<JsValue>,
    ) -> Isolate {
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
            Some(name) => match compiled::RULESETS.iter().find(|(n, _, _)| *n == name) {
                None => {
                    let known: Vec<&str> = compiled::RULESETS.iter().map(|(n, _, _)| *n).collect();
                    log_error(
                        "config",
                        &format!(
                            "GITLAB_RULES_CONFIG={name:?} names no compiled ruleset (known: {}): every request goes to the legacy cell",
                            known.join(", ")
                        ),
                    );
                    None
                }
                // Validated by build.rs (every regex compiled there), so its
                // regexes compile on first use; an error here would be a
                // bug, and it still only sends traffic to the legacy cell.
                Some((_, json, regexes)) => Ruleset::from_prechecked_json(name, json, regexes)
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
        for cell in config.cells.cells() {
            allowed.allow_exact(&cell.address);
            if let Some(registry) = &cell.registry_address {
                allowed.allow_exact(registry);
            }
        }
        let learning = ruleset.as_ref().is_some_and(Ruleset::uses_learning);
        let resolver = (config.topology_url.is_some() || learning).then(|| {
            Resolver::new(
                io::FetchTransport::new(
                    config.topology_url.as_deref(),
                    config
                        .learn_cell()
                        .map(|cell| format!("{}://{cell}", config.upstream_scheme)),
                    config.client_id.clone(),
                    config.client_secret.clone(),
                    mtls,
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
        let health = RefCell::new(CellHealth::new(&config.cells, config.circuits));
        let health_store = io::HealthStore::new(&config.cache_namespace());
        Isolate {
            config,
            ruleset,
            allowed,
            resolver,
            header_names,
            relied_on,
            version: None,
            controls: None,
            health,
            next_health_read_ms: Cell::new(0),
            health_store,
            now: io::now,
            random: js_sys::Math::random,
        }
    }
}

impl Isolate {
    fn now_ms(&self) -> u64 {
        (self.now)() as u64
    }

    /// Whether the scheduled probe's record is due for a read (never
    /// without a cell list).
    fn health_read_due(&self) -> bool {
        !self.config.cells.is_empty() && self.health_read_due_at(self.now_ms())
    }

    fn health_read_due_at(&self, now_ms: u64) -> bool {
        !self.config.cells.is_empty() && now_ms >= self.next_health_read_ms.get()
    }

    /// Reads the probe record from the Cache API and applies it; the next
    /// read is due one interval later, whatever this one finds.
    async fn read_health(&self) {
        self.next_health_read_ms
            .set(self.now_ms() + u64::from(self.config.health_refresh_ms));
        if let Some(record) = self.health_store.get().await {
            self.apply_health(&record);
        }
    }

    fn apply_health(&self, record: &HealthRecord) {
        let opened = self.health.borrow_mut().apply_record(
            &self.config.cells,
            record,
            self.now_ms(),
            u64::from(self.config.health_max_age_secs) * 1000,
        );
        if !opened.is_empty() {
            log_warn(
                "cell-health",
                &format!(
                    "the health probe found cells {opened:?} down: circuits opened in this isolate"
                ),
            );
        }
    }

    /// A cell for a spread rule (its address), or `None`: the legacy cell.
    fn spread(&self, log: &mut RequestLog) -> Option<String> {
        let chosen = self.health.borrow().choose((self.random)(), self.now_ms());
        match chosen {
            Some(i) => {
                log.chosen_by = Some("spread");
                Some(self.config.cells.cells()[i].address.clone())
            }
            None => {
                log.chosen_by = Some("legacy");
                if !self.config.cells.is_empty() {
                    log.add_error(
                        "spread: no healthy cell in GITLAB_CELLS; the legacy cell serves it",
                    );
                }
                None
            }
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
/// them), client headers always dropped, prefixes of client headers always
/// dropped, the Ed25519 seed requests are signed with (null: not
/// signing), the answer to a failed upstream fetch (the plan's answer
/// form)]`. The entry compares client header names with `_` read as `-`
/// (`forward::drop_key`).
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
        &js_array(forward::FORBIDDEN_PREFIXES).into(),
        &seed,
        &JsValue::from(router_core::plan::encoded_upstream_failure_answer()),
    )
}

/// The plan for a request the entry could not route at all (an exception
/// in the entry, a wasm instance that panicked): an answer and an error
/// log line with `message`.
#[wasm_bindgen(js_name = internalError)]
pub fn internal_error(message: &str) -> String {
    let error = RouterError::Internal(message.to_string());
    let line =
        serde_json::json!({"level": "error", "scope": "router", "message": error.to_string()})
            .to_string();
    Plan::Answer {
        answer: error.answer(),
        log: Some(LogPlan {
            head: format!("{},", &line[..line.len() - 1]),
            tail: "}".to_string(),
            min_status: 0,
        }),
    }
    .encode()
}

/// The entry's report of an upstream outcome (the plan's report field):
/// every failed fetch (`status` 0) or 502/503/504 of a listed cell, and
/// any outcome of a circuit's trial request. Feeds the cell's circuit; a
/// circuit that opens or closes is logged.
#[wasm_bindgen(js_name = cellOutcome)]
pub fn cell_outcome(report: &str, status: u16, elapsed_ms: f64) {
    let Some(iso) = ISOLATE.with(|cell| cell.get().cloned()) else {
        return;
    };
    let Some(report) = Report::decode(report) else {
        return;
    };
    let failed = cells::is_failure(status, elapsed_ms.max(0.0) as u64, report.long_lived);
    if !failed && !report.always {
        return;
    }
    let Some(cell) = iso.config.cells.cells().get(report.cell) else {
        return;
    };
    let now = iso.now_ms();
    let mut health = iso.health.borrow_mut();
    let was_closed = health.circuit(report.cell).is_some_and(|c| c.is_closed());
    health.record(report.cell, failed, now);
    let is_closed = health.circuit(report.cell).is_some_and(|c| c.is_closed());
    let policy = *health.policy();
    drop(health);
    let outcome = if status == 0 {
        "fetch failed".to_string()
    } else {
        format!("status {status}")
    };
    let message = match (was_closed, is_closed) {
        (true, false) => format!(
            "circuit opened in this isolate after {} failures within {} ms (last: {outcome}); 503 for {} ms, then one trial request",
            policy.failures, policy.window_ms, policy.open_ms
        ),
        (false, true) => format!("circuit closed in this isolate (trial request: {outcome})"),
        (false, false) if failed && report.always => {
            format!("trial request failed ({outcome}); circuit open again")
        }
        _ => return,
    };
    log_warn(
        "cell-health",
        &format!("cell {} ({}): {message}", cell.id, cell.address),
    );
}

/// The Cron Trigger (`scheduled`): probes every listed cell's health URL,
/// keeps the result in the Cache API for every isolate of the colo (read
/// at most once per `GITLAB_CELL_HEALTH_REFRESH_MS` each), applies it to
/// this isolate at once, and logs one summary line.
#[wasm_bindgen(js_name = routerScheduled)]
pub async fn router_scheduled(env: Env) {
    let iso = isolate(&env);
    if iso.config.cells.is_empty() {
        log_warn(
            "cell-health",
            "GITLAB_CELLS lists no cell: nothing to probe",
        );
        return;
    }
    let record = io::probe_cells(
        &iso.config.cells,
        iso.config.upstream_scheme,
        iso.config.probe_timeout_ms,
    )
    .await;
    iso.health_store
        .put(&record, iso.config.health_max_age_secs)
        .await;
    iso.apply_health(&record);
    web_sys::console::log_1(&record.summary_line(&iso.config.cells).into());
}

/// Routes a request whose route is known without waiting, and writes its
/// encoded plan over the [`input_buffer`] (read by then): returns the
/// plan's length in bytes, [`NOT_ROUTED`] to send the request to
/// [`route_async`] (a classification the memory cache does not hold, a URL
/// that does not parse, headers that need asking one by one), or
/// [`PLAN_TOO_LONG`] for a plan longer than the buffer, which
/// [`take_plan`] then returns. Nothing is allocated for the entry to free
/// and no result array is made (a returned `String` cost both, and a
/// shrinking copy).
///
/// The input: the first `len` bytes of the [`input_buffer`], UTF-8, the
/// URL, NUL, the method, NUL, then the values of the names from
/// [`router_setup`], in order, joined by NUL, an absent header as `\x01`
/// (the entry's `scanHeaders`). Input that does not read so goes to
/// [`route_async`], which is handed the same parts as strings.
///
/// No `Env` is passed: the isolate's state was made by [`router_setup`],
/// which the entry calls first (and again after a panic); without it the
/// request goes to [`route_async`]. An `Env` argument cost ~0.9 k wasm
/// instructions a call in wasm-bindgen's externref shim.
#[wasm_bindgen(js_name = routeSync)]
pub fn route_sync(len: usize) -> i32 {
    let Some(iso) = ISOLATE.with(|cell| cell.get().cloned()) else {
        return NOT_ROUTED;
    };
    let plan = INPUT.with(|input| {
        let input = input.borrow();
        let (url, method, headers) = split_input(input.get(..len)?)?;
        route_sync_parts(&iso, url, method, headers)
    });
    let Some(plan) = plan else {
        return NOT_ROUTED;
    };
    INPUT.with(|input| {
        let mut input = input.borrow_mut();
        match (input.get_mut(..plan.len()), i32::try_from(plan.len())) {
            (Some(room), Ok(length)) => {
                room.copy_from_slice(plan.as_bytes());
                length
            }
            _ => {
                LONG_PLAN.with(|long| *long.borrow_mut() = Some(plan));
                PLAN_TOO_LONG
            }
        }
    })
}

/// [`route_sync`]: the request goes to [`route_async`].
const NOT_ROUTED: i32 = -1;
/// [`route_sync`]: the plan did not fit the input buffer; [`take_plan`]
/// has it.
const PLAN_TOO_LONG: i32 = -2;

/// The plan [`route_sync`] could not write into the input buffer.
#[wasm_bindgen(js_name = takePlan)]
pub fn take_plan() -> Option<String> {
    LONG_PLAN.with(|long| long.borrow_mut().take())
}

/// [`route_sync`]'s input as its URL, method and joined header values.
fn split_input(bytes: &[u8]) -> Option<(&str, &str, &str)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (url, rest) = text.split_once(SEPARATOR)?;
    let (method, headers) = rest.split_once(SEPARATOR)?;
    Some((url, method, headers))
}

fn route_sync_parts(iso: &Isolate, url: &str, method: &str, headers: &str) -> Option<String> {
    let names = iso.header_names.as_ref()?;
    // One clock read for the whole call (the checks below, the memory
    // cache, the cell's circuit).
    let _clock = io::HeldClock::hold();
    let now = (iso.controls.is_some() || !iso.config.cells.is_empty()).then(|| iso.now_ms());
    if now.is_some_and(|now| iso.health_read_due_at(now)) {
        // routeAsync reads the probe record first (one request per
        // interval per isolate pays for it).
        return None;
    }
    let mut incoming = Incoming::parse(url, method.to_string())?;
    #[cfg(feature = "panic-probe")]
    match incoming.parts.path.as_str() {
        "/__panic_probe__/sync" => panic!("panic probe: routeSync"),
        "/__panic_probe__/async" => return None,
        _ => {}
    }
    if !fill_headers(&mut incoming.parts, names, headers) {
        return None;
    }
    incoming.trace_from_headers();
    if let Some(controls) = &iso.controls {
        if controls.needs_read(now.unwrap_or_default()) {
            return None;
        }
    }
    let Some(rules) = iso.ruleset.as_ref().filter(|_| !iso.passthrough()) else {
        return Some(plan(iso, &incoming, None).encode());
    };
    match route::route_from_memory(rules, iso.resolver.as_ref(), &incoming.parts) {
        Ok(routed) => Some(plan(iso, &incoming, Some(&routed)).encode()),
        Err(pending) => {
            PENDING.with(|p| *p.borrow_mut() = Some((url.to_string(), incoming, pending)));
            None
        }
    }
}

/// Routes any request and returns its encoded plan. A request
/// [`route_sync`] stopped goes on from where it stopped; others are routed
/// from the start. The Topology Service's answers are cached for
/// [`route_sync`]; Cache API writes are handed to `ctx.waitUntil`.
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
) -> String {
    let iso = isolate(&env);
    if iso.health_read_due() {
        iso.read_health().await;
    }
    let stopped = PENDING
        .with(|p| p.borrow_mut().take())
        .filter(|(u, _, _)| *u == url);
    let (incoming, pending) = match stopped {
        Some((_, incoming, pending)) => (incoming, Some(pending)),
        None => {
            let Some(mut incoming) = Incoming::parse(&url, method) else {
                return Plan::Answer {
                    answer: Answer::text(400, "gitlab-http-router: bad request URL\n"),
                    log: None,
                }
                .encode();
            };
            read_headers(&iso, &mut incoming.parts, &req, headers.as_deref());
            incoming.trace_from_headers();
            (incoming, None)
        }
    };
    #[cfg(feature = "panic-probe")]
    if incoming.parts.path == "/__panic_probe__/async" {
        // After an await, as a panic in the resolver would be: from a
        // microtask, not from the entry's call.
        router_core::resolve::Platform::sleep(&io::JsPlatform, 1).await;
        panic!("panic probe: routeAsync");
    }
    if let Some(controls) = &iso.controls {
        controls
            .refresh(iso.ruleset.as_ref(), iso.resolver.as_ref())
            .await;
    }
    let rules = iso.ruleset.as_ref().filter(|_| !iso.passthrough());
    let routed = match (rules, &iso.resolver, pending) {
        (None, _, _) => None,
        (Some(rules), Some(resolver), Some(pending)) => Some(
            route::route_pending(rules, resolver, &incoming.parts, &incoming.trace, pending).await,
        ),
        (Some(rules), resolver, _) => {
            Some(route::route(rules, resolver.as_ref(), &incoming.parts, &incoming.trace).await)
        }
    };
    if let Some(resolver) = &iso.resolver {
        // Cache API writes finish after the response is sent.
        for write in resolver.shared_cache().take_pending() {
            let _ = ctx.wait_until(&write);
        }
    }
    plan(&iso, &incoming, routed.as_ref()).encode()
}

/// Fills `parts` with the headers the rules need: from the entry's joined
/// values, or asked one by one when a value held the separator (invalid in
/// HTTP), or every header when a rule tests names by regex.
fn read_headers(iso: &Isolate, parts: &mut RequestParts, req: &Request, joined: Option<&str>) {
    match (&iso.header_names, joined) {
        (Some(names), Some(joined)) if fill_headers(parts, names, joined) => {}
        (Some(names), _) => {
            let all = req.headers();
            for name in names {
                if let Ok(Some(value)) = all.get(name) {
                    parts.headers.push((name.clone(), value));
                }
            }
        }
        (None, _) => parts.headers = header_pairs(&req.headers()),
    }
}

/// The address a routed request goes to (`None`: the legacy cell), with
/// how it was resolved written into `log`.
fn target_of<'r>(
    iso: &Isolate,
    routed: Option<&Routed<'r>>,
    log: &mut RequestLog<'r>,
) -> Result<Option<String>, RouterError> {
    let Some(routed) = routed else {
        log.chosen_by = Some("legacy");
        return Ok(None);
    };
    log.fell_through = routed.fell_through.iter().map(|(rule, _)| *rule).collect();
    // A rule that handed the request on may have done so on a stale
    // not-found while the service failed: its error and level belong in
    // the line (found by the soak test).
    for (rule, res) in &routed.fell_through {
        if let Some(e) = &res.error {
            log.add_error(format_args!("{rule}: {e}"));
        }
        if res.level == CacheLevel::Stale {
            log.cache = Some(CacheLevel::Stale);
        }
    }
    let attempts = routed.attempts();
    log.attempts = (attempts > 0).then_some(attempts);
    log.service_ms = routed.service_ms();
    log.coalesced = routed.coalesced();
    let question = match &routed.decision.action {
        Action::Proxy { address } => {
            log.chosen_by = Some(if address.is_some() { "fixed" } else { "legacy" });
            return Ok(address.map(str::to_string));
        }
        Action::Reject { .. } => return Ok(None),
        Action::Spread => return Ok(iso.spread(log)),
        Action::Classify(question) => question,
    };
    let Some(res) = &routed.resolution else {
        if let Some(address) = static_target(iso, question, log) {
            return address.map(Some);
        }
        log.cache = Some(CacheLevel::Fallback);
        log.chosen_by = Some("legacy");
        log.add_error("GITLAB_TOPOLOGY_SERVICE_URL is not set");
        return Ok(None);
    };
    if log.cache != Some(CacheLevel::Stale) || res.level == CacheLevel::Fallback {
        log.cache = Some(res.level);
    }
    if let Some(e) = &res.error {
        log.add_error(e);
    }
    match &res.classification {
        // The service could not answer and nothing was cached: a listed
        // cell the key names, else the rule's outage policy.
        None => match static_target(iso, question, log) {
            Some(address) => address.map(Some),
            None if routed.unavailable() => Err(RouterError::OutageUnavailable),
            None => {
                log.chosen_by = Some("legacy");
                Ok(None)
            }
        },
        Some(Classification::NotFound) => {
            log.chosen_by = Some("legacy");
            Ok(None)
        }
        Some(c) => {
            log.chosen_by = Some(match res.level {
                CacheLevel::Memory | CacheLevel::CacheApi => "cache",
                CacheLevel::Service => "service",
                CacheLevel::Stale => "stale",
                CacheLevel::Fallback | CacheLevel::Static => "legacy",
            });
            c.address_for(question.target)
                .map(|a| a.map(str::to_string))
        }
    }
}

/// Resolution without the service: a `CELL_ID` or `SESSION_PREFIX` key
/// naming a cell of `GITLAB_CELLS` goes to that cell (`None`: the key
/// names no listed cell).
fn static_target(
    iso: &Isolate,
    question: &router_core::ClassifyRequest,
    log: &mut RequestLog,
) -> Option<Result<String, RouterError>> {
    if !matches!(
        question.kind,
        ClassifyKind::CellId | ClassifyKind::SessionPrefix
    ) {
        return None;
    }
    let cell = iso
        .config
        .cells
        .named_by(question.kind, question.value.as_deref()?)?;
    log.cache = Some(CacheLevel::Static);
    log.chosen_by = Some("static");
    Some(match question.target {
        Target::Web => Ok(cell.address.clone()),
        Target::Registry => cell
            .registry_address
            .clone()
            .ok_or(RouterError::NoRegistryAddress),
    })
}

fn log_warn(scope: &str, message: &str) {
    let line = serde_json::json!({"level": "warn", "scope": scope, "message": message});
    web_sys::console::error_1(&line.to_string().into());
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
    /// The request id and `traceparent` it is forwarded with.
    trace: Trace,
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
            trace: Trace::default(),
        })
    }

    /// Sets the request id and `traceparent` from the headers read
    /// (generated where missing or invalid).
    fn trace_from_headers(&mut self) {
        self.trace = Trace::from_headers(
            self.parts.header(CF_RAY_HEADER),
            self.parts.header(TRACEPARENT_HEADER),
            io::random_bytes,
        );
    }

    fn log<'a>(&'a self, iso: &'a Isolate) -> RequestLog<'a> {
        RequestLog {
            ruleset: iso.ruleset.as_ref().map_or("none", Ruleset::name),
            method: &self.parts.method,
            path: &self.parts.path,
            action: "proxy",
            request_id: &self.trace.request_id,
            traceparent: &self.trace.traceparent,
            version: iso.version.as_deref(),
            ..Default::default()
        }
    }
}

/// Separates header values in `scanHeaders`' answer and marks an absent
/// header; neither can occur in a valid HTTP field value. A `char`, so
/// splitting looks for one byte instead of setting up a substring search
/// per call.
const SEPARATOR: char = '\u{0}';
const HEADER_ABSENT: &str = "\u{1}";

/// Adds the joined header values to `parts`; false when their count does
/// not match (a value held the separator).
fn fill_headers(parts: &mut RequestParts, names: &[String], joined: &str) -> bool {
    if names.is_empty() {
        // `joined` is then "" (one empty value for no name): a mismatch.
        return false;
    }
    let before = parts.headers.len();
    parts.headers.reserve(names.len());
    let mut rest = joined;
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        // Most values are one byte (an absent header's `\x01`): a byte loop
        // finds the separator sooner than `str::split`'s searcher did.
        let (value, after) = match (rest.bytes().position(|b| b == SEPARATOR as u8), last) {
            (Some(at), false) => (&rest[..at], &rest[at + 1..]),
            (None, true) => (rest, ""),
            // Too few values, or more than one in the last.
            _ => {
                parts.headers.truncate(before);
                return false;
            }
        };
        if value != HEADER_ABSENT {
            parts.headers.push((name.clone(), value.to_string()));
        }
        rest = after;
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

/// How the log line of a request is written, as `GITLAB_REQUEST_LOG`
/// asks: every line, only notable ones (and any 5xx), or those plus a
/// random share of the rest (`random` is asked only then).
fn log_plan(logging: RequestLogging, log: &RequestLog, random: impl FnOnce() -> f64) -> LogPlan {
    let (head, tail) = log.to_json_around_status();
    let always = logging.always(log.is_notable_whatever_the_status(), random);
    LogPlan {
        head,
        tail,
        min_status: if always { 0 } else { 500 },
    }
}

/// The delay the entry adds to a 404 from the upstream: drawn from
/// `GITLAB_NOT_FOUND_DELAY_MS` for a classified request (`random` is asked
/// only then), else none.
fn not_found_delay(config: &Config, classified: bool, random: impl FnOnce() -> f64) -> u32 {
    match config.not_found_delay {
        Some(range) if classified => range.pick(random()),
        _ => 0,
    }
}

/// The 503 for a request whose rule says `onOutage: unavailable` while the
/// service cannot answer: `Retry-After` is the service breaker's open time
/// (when it tries the service again); a registry client gets the error in
/// the distribution spec's JSON form.
fn outage_answer(config: &Config, registry: bool) -> Answer {
    let error = RouterError::OutageUnavailable;
    let mut answer = error.answer();
    if registry {
        answer.headers = vec![("content-type".into(), "application/json".into())];
        answer.body = format!(
            r#"{{"errors":[{{"code":"UNAVAILABLE","message":"{}","detail":null}}]}}"#,
            error.public_message()
        );
    }
    let secs = config.client.guard.open_ms.div_ceil(1000).max(1);
    answer
        .headers
        .push(("retry-after".into(), secs.to_string()));
    answer
}

/// The router's own answer to a request, logged always.
fn answer(log: &RequestLog, answer: Answer) -> Plan<'static> {
    let (head, tail) = log.to_json_around_status();
    Plan::Answer {
        answer,
        log: Some(LogPlan {
            head,
            tail,
            min_status: 0,
        }),
    }
}

/// A request that ends in `error`: its answer, the error in its log line.
fn failed(mut log: RequestLog, error: RouterError) -> Plan<'static> {
    log.add_error(&error);
    answer(&log, error.answer())
}

/// The plan for a routed request (`routed`: `None` when no ruleset is
/// loaded): forward to its cell, or the router's own answer.
fn plan<'a>(iso: &'a Isolate, incoming: &'a Incoming, routed: Option<&Routed<'a>>) -> Plan<'a> {
    let mut log = incoming.log(iso);
    let mut rule_type = None;
    // A classified request (or one a classify rule handed on): a 404 from
    // its cell may be delayed, so timing does not tell which cell knew
    // the path. The router's own answers never are.
    let classified = routed.is_some_and(|r| {
        matches!(r.decision.action, Action::Classify(_)) || !r.fell_through.is_empty()
    });
    let not_found_delay_ms = not_found_delay(&iso.config, classified, js_sys::Math::random);
    if let Some(d) = routed.map(|r| &r.decision) {
        log.rule = d.rule_id;
        log.action = d.action.name();
        match &d.action {
            Action::Classify(request) => {
                log.classify_type = Some(request.kind.name());
                rule_type = Some(request.kind.rule_type_header());
            }
            Action::Reject { status, message } => {
                return answer(&log, Answer::text(*status, format!("{message}\n")));
            }
            Action::Proxy { .. } | Action::Spread => {}
        }
    }
    let parts = &incoming.parts;
    if routed.is_none() && iso.passthrough() {
        log.mode = Some("passthrough");
    }
    let address = match target_of(iso, routed, &mut log) {
        Err(RouterError::OutageUnavailable) => {
            log.add_error(RouterError::OutageUnavailable);
            let registry = routed.is_some_and(|r| {
                matches!(&r.decision.action, Action::Classify(q) if q.target == router_core::Target::Registry)
            });
            return answer(&log, outage_answer(&iso.config, registry));
        }
        Err(e) => return failed(log, e),
        Ok(address) => address.or_else(|| iso.config.proxy_host.clone()),
    };
    let Some(address) = address else {
        return failed(log, RouterError::NoLegacyCell);
    };
    if !iso.allowed.allows(&address) {
        log.upstream = Some(address.clone());
        return failed(log, RouterError::UpstreamNotAllowed(address));
    }
    // A listed cell: its circuit decides between forwarding and a fast 503.
    let mut report = None;
    if let Some(i) = iso.config.cells.position_of_address(&address) {
        let cell = &iso.config.cells.cells()[i];
        log.cell = Some(cell.id);
        let admission = iso.health.borrow_mut().admit(i, || iso.now_ms());
        match admission {
            Admission::Refused { retry_after_secs } => {
                let why = match iso.health.borrow().circuit(i).and_then(|c| c.opened_by()) {
                    Some(OpenedBy::Probe) => "the health probe found it down",
                    _ => "its requests failed",
                };
                log.upstream = Some(address.clone());
                log.chosen_by = Some("circuit_open");
                return failed(
                    log,
                    RouterError::CellUnavailable {
                        cell: cell.id,
                        address,
                        why,
                        retry_after_secs,
                    },
                );
            }
            Admission::Forward | Admission::Trial => {
                report = Some(Report {
                    cell: i,
                    always: admission == Admission::Trial,
                    long_lived: cells::is_long_lived(&parts.path, parts.header("upgrade")),
                });
            }
        }
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
            now_ms: io::now() as u64,
        })),
        (_, SigningPolicy::Optional) => None,
        (_, SigningPolicy::Required) => {
            log.upstream = Some(address);
            return failed(log, RouterError::SigningUnavailable);
        }
    };
    log.upstream = Some(address);
    let (connection, upgrade) = (parts.header("connection"), parts.header("upgrade"));
    let drop = if forward::needs_own_drops(connection, upgrade, &iso.relied_on) {
        forward::dropped_names(connection, upgrade, &iso.relied_on)
    } else {
        Vec::new()
    };
    let mut set: Vec<(Cow<'static, str>, Cow<'a, str>)> = Vec::with_capacity(8);
    set.extend([
        (
            X_FORWARDED_HOST.into(),
            incoming.public_host.as_str().into(),
        ),
        (X_FORWARDED_PROTO.into(), incoming.public_proto.into()),
        // A spread rule proxies without classifying: cells know the
        // header's values `classify` and `proxy` only.
        (
            RULE_ACTION_HEADER.into(),
            if log.action == "spread" {
                "proxy"
            } else {
                log.action
            }
            .into(),
        ),
    ]);
    if let Some(rule_type) = rule_type {
        set.push((RULE_TYPE_HEADER.into(), rule_type.into()));
    }
    if let Some(client) = forward::forwarded_for(parts.header(CF_CONNECTING_IP)) {
        set.push((X_FORWARDED_FOR.into(), client.into()));
    }
    // Replaces a client's own X-Request-Id.
    for (name, value) in incoming.trace.headers() {
        if !value.is_empty() {
            set.push((name.into(), value.into()));
        }
    }
    let signing = signing_input.map(|input| Signing {
        input,
        header: SIGNATURE_HEADER.to_string(),
        on_failure: (iso.config.signing_policy == SigningPolicy::Required).then(|| Failure {
            answer: RouterError::SigningFailed(String::new()).answer(),
            log_error_open: log.error_open("request signing failed: "),
        }),
    });
    Plan::Forward(Box::new(Forward {
        url,
        drop,
        set,
        signing,
        upstream_failure_log: upstream_failure_log(&log),
        log: log_plan(iso.request_logging(), &log, iso.random),
        not_found_delay_ms,
        report,
    }))
}

/// How the log line of a failed upstream fetch opens its `error`; without
/// an earlier error (nearly always) the same for every request.
fn upstream_failure_log(log: &RequestLog) -> Cow<'static, str> {
    if log.error.is_none() {
        Cow::Borrowed(UPSTREAM_FAILURE_OPEN)
    } else {
        Cow::Owned(log.error_open(UPSTREAM_FAILURE_STEP))
    }
}

const UPSTREAM_FAILURE_STEP: &str = "upstream fetch failed: ";

/// [`upstream_failure_log`] when nothing failed before the fetch:
/// `error_open(UPSTREAM_FAILURE_STEP)` of a line without errors (tested).
const UPSTREAM_FAILURE_OPEN: &str = r#","error":"upstream fetch failed: "#;

/// The edge's pure parts, natively: settings to isolate state, header
/// filling, and the plan for decided requests (no signing key, so nothing
/// here touches a JS object).
#[cfg(test)]
mod tests;
