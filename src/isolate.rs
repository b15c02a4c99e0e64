//! What an isolate builds once, while it starts (`src/start.rs`) or else
//! on its first request: the core's
//! [`IsolateState`] (settings, ruleset, allow-list, circuits) from the
//! environment's variables and the compiled rulesets, and around it the
//! I/O it needs (the resolver over `fetch` and the Cache API, the control
//! document and the probe record in KV).

use std::cell::{Cell, OnceCell};
use std::rc::Rc;

use router_core::config::Config;
use router_core::control::{Control, Mode, ReadOutcome};
use router_core::forward::{Incoming, IsolateView};
use router_core::isolate::IsolateState;
use router_core::log::RequestLogging;
use router_core::platform::Platform;
use router_core::resolve::cells::HealthRecord;
use router_core::resolve::Resolver;
use router_core::route::Routed;
use router_core::Ruleset;
use wasm_bindgen::JsValue;
use worker::Env;

use crate::cache_api::CacheApi;
use crate::control::{self, Controls};
use crate::health_store::HealthStore;
use crate::platform::JsPlatform;
use crate::rulesets::{compiled_ruleset, compiled_shadow};
use crate::transport::{self, FetchTransport};
use crate::{clock, log};

pub(crate) type EdgeResolver = Resolver<FetchTransport, CacheApi, JsPlatform>;

/// How long an isolate's first requests wait for its first read of the
/// probe record (as for the control document's first read,
/// `router_core::control::FIRST_READ_WAIT_MS`, and at the same time): KV
/// answers in a few ms; this bounds what a slow KV adds to them.
const HEALTH_FIRST_READ_WAIT_MS: u64 = 200;

/// How often a request waiting for that read looks for it.
const HEALTH_FIRST_READ_POLL_MS: u32 = 5;

/// How often a request waiting for the isolate's first read of the control
/// document looks for it.
const CONTROL_FIRST_READ_POLL_MS: u32 = 5;

/// The version metadata binding (`[version_metadata]` in wrangler.toml).
const VERSION_BINDING: &str = "CF_VERSION_METADATA";

pub(crate) struct Isolate {
    pub state: IsolateState,
    pub resolver: Option<EdgeResolver>,
    /// When the scheduled probe's record is read next (ms since the
    /// epoch): at most once per `config.health_refresh_ms`.
    next_health_read_ms: Cell<u64>,
    /// When the isolate's first read of the record began, until a read has
    /// finished (`health_read_once`).
    health_first_read_since: Cell<Option<u64>>,
    health_read_once: Cell<bool>,
    /// The probe record's home: the deployment's own KV namespace
    /// (`ROUTER_CONTROL`); `None` without one.
    health_store: Option<HealthStore>,
    /// The runtime control document, when `ROUTER_CONTROL` is bound.
    pub controls: Option<Controls>,
}

thread_local! {
    static ISOLATE: OnceCell<Rc<Isolate>> = const { OnceCell::new() };
}

impl Isolate {
    /// The isolate's state, made on the first call.
    pub fn get_or_make(env: &Env) -> Rc<Isolate> {
        Isolate::made().unwrap_or_else(|| Isolate::make(env))
    }

    /// Makes the isolate's state: its own function, so that the calls that
    /// find it made (every `routerSetup` and `routeAsync`) do not carry its
    /// code. V8 compiles a wasm function whole on its first call, and with the
    /// state's making inlined the function was ~230 KB of machine code to
    /// compile on a fresh isolate's first request (`bench/first-request.mjs`).
    #[cold]
    #[inline(never)]
    fn make(env: &Env) -> Rc<Isolate> {
        ISOLATE.with(|cell| cell.get_or_init(|| Rc::new(Isolate::new(env))).clone())
    }

    /// The isolate's state, once `routerSetup` (or a `routeAsync`) made it.
    pub fn made() -> Option<Rc<Isolate>> {
        ISOLATE.with(|cell| cell.get().cloned())
    }

    pub fn new(env: &Env) -> Isolate {
        let lookup = |name: &str| {
            env.var(name)
                .map(|v| v.to_string())
                .ok()
                .or_else(|| env.secret(name).map(|v| v.to_string()).ok())
        };
        let mtls = FetchTransport::mtls_binding(env);
        if mtls.is_some() {
            log::info(
                "config",
                &format!(
                    "Topology Service calls go through the {} mtls_certificates binding",
                    transport::MTLS_BINDING
                ),
            );
        }
        let mut iso = Isolate::from_lookup(lookup, log::at, mtls);
        iso.state.version = js_sys::Reflect::get(env, &VERSION_BINDING.into())
            .ok()
            .filter(|m| m.is_object())
            .and_then(|m| js_sys::Reflect::get(&m, &"id".into()).ok())
            .and_then(|id| id.as_string())
            .filter(|id| !id.is_empty());
        if js_sys::Reflect::get(env, &router_core::metrics::BINDING.into())
            .is_ok_and(|dataset| dataset.is_object())
        {
            iso.state.bind_metrics();
        }
        let binding = js_sys::Reflect::get(env, &control::BINDING.into())
            .ok()
            .filter(JsValue::is_object);
        iso.health_store = binding.clone().map(HealthStore::new);
        iso.controls = binding
            .and_then(|binding| Controls::new(binding, iso.state.config.control_refresh_secs));
        if let (Some(_), Some(resolver)) = (&iso.controls, &iso.resolver) {
            // Until the control document's purge generation is known.
            resolver.set_shared_usable(false);
        }
        iso
    }

    /// The isolate's state from its settings; `log(level, scope, message)`
    /// reports what is wrong with them, once (never fatal): each problem at
    /// its level (`warn` for a value read with a fallback).
    /// `mtls`: the Topology Service's `mtls_certificates` binding, if any.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        log: impl Fn(&str, &str, &str),
        mtls: Option<JsValue>,
    ) -> Isolate {
        let (config, problems) = Config::from_lookup(lookup);
        for problem in &problems {
            log(problem.level.as_str(), "config", &problem.to_string());
        }
        let log_error = |scope: &str, message: &str| log("error", scope, message);
        let ruleset = compiled_ruleset(&config, &log_error);
        let shadow = compiled_shadow(&config, &log_error);
        let learning = ruleset.as_ref().is_some_and(Ruleset::uses_learning);
        let resolver = (config.topology_url.is_some() || learning).then(|| {
            Resolver::new(
                FetchTransport::new(
                    config.topology_url.as_deref(),
                    config
                        .learn_cell()
                        .map(|cell| format!("{}://{cell}", config.upstream_scheme)),
                    config.client_id.clone(),
                    config.client_secret.clone(),
                    mtls,
                ),
                CacheApi::new(&config.cache_namespace()),
                JsPlatform,
                config.cache.clone(),
                config.client.clone(),
            )
            .with_cells(config.cells.clone())
        });
        Isolate {
            state: IsolateState::new(config, ruleset).with_shadow(shadow),
            resolver,
            next_health_read_ms: Cell::new(0),
            health_first_read_since: Cell::new(None),
            health_read_once: Cell::new(false),
            health_store: None,
            controls: None,
        }
    }

    pub fn config(&self) -> &Config {
        &self.state.config
    }

    /// Whether the control document says every request goes to the legacy
    /// cell.
    pub fn passthrough(&self) -> bool {
        self.controls
            .as_ref()
            .is_some_and(|c| c.mode() == Mode::Passthrough)
    }

    /// `GITLAB_REQUEST_LOG`, unless the control document overrides it.
    fn request_logging(&self) -> RequestLogging {
        self.controls
            .as_ref()
            .and_then(Controls::request_log)
            .unwrap_or(self.state.config.request_logging)
    }

    /// `GITLAB_SHADOW_SAMPLE` in millionths, unless the control document
    /// overrides it.
    pub fn shadow_per_million(&self) -> u32 {
        self.controls
            .as_ref()
            .and_then(Controls::shadow_per_million)
            .unwrap_or(self.state.config.shadow_per_million)
    }

    /// Evaluates the shadow ruleset on a request `routed` by the active
    /// one, when sampled (`router_core::isolate::IsolateState::evaluate_shadow`),
    /// and logs a disagreement. Nothing without a shadow ruleset.
    pub fn evaluate_shadow<'s>(&'s self, incoming: &Incoming, routed: &mut Routed<'s>) {
        if self.state.shadow.is_none() {
            return;
        }
        let line = self.state.evaluate_shadow(
            self.shadow_per_million(),
            || JsPlatform.random(),
            incoming,
            routed,
        );
        if let Some(line) = line {
            log::whole(false, line);
        }
    }

    /// The forward phase's view of the isolate, as the control document
    /// stands now.
    pub fn forward_view(&self) -> IsolateView<'_> {
        self.state
            .forward_view(self.request_logging(), self.passthrough())
    }

    /// Whether the scheduled probe's record is due for a read at `now_ms`
    /// (never without a cell list or a store).
    pub fn health_read_due_at(&self, now_ms: u64) -> bool {
        !self.state.config.cells.is_empty()
            && self.health_store.is_some()
            && now_ms >= self.next_health_read_ms.get()
    }

    /// Whether requests at `now_ms` wait for the isolate's first read of the
    /// probe record: it has begun, has not finished, and began less than
    /// [`HEALTH_FIRST_READ_WAIT_MS`] ago.
    pub fn health_must_wait(&self, now_ms: u64) -> bool {
        !self.health_read_once.get()
            && self
                .health_first_read_since
                .get()
                .is_some_and(|since| now_ms.saturating_sub(since) < HEALTH_FIRST_READ_WAIT_MS)
    }

    /// Starts a read of the probe record in the background of the request
    /// `ctx` belongs to (`ctx.waitUntil`), when one is due at `now_ms`: the
    /// request goes on with the record last applied, and the read applies
    /// what it finds when KV answers (within the store's timeout). The next
    /// read is due one interval later, whatever this one finds.
    pub fn start_health_read(iso: &Rc<Isolate>, ctx: &worker::worker_sys::Context, now_ms: u64) {
        if !iso.health_read_due_at(now_ms) {
            return;
        }
        iso.next_health_read_ms
            .set(now_ms.saturating_add(u64::from(iso.state.config.health_refresh_ms)));
        if iso.health_first_read_since.get().is_none() {
            iso.health_first_read_since.set(Some(now_ms));
        }
        let iso = Rc::clone(iso);
        let read = wasm_bindgen_futures::future_to_promise(async move {
            if let Some(store) = &iso.health_store {
                if let Some(record) = store.get().await {
                    iso.apply_health(&record);
                }
            }
            iso.health_read_once.set(true);
            Ok(JsValue::UNDEFINED)
        });
        let _ = ctx.wait_until(&read);
    }

    /// Until the isolate's first read of the probe record has finished, and
    /// for at most [`HEALTH_FIRST_READ_WAIT_MS`], waits for it: a new
    /// isolate's first requests do not go to a cell the probe found down.
    /// Later reads are never waited for.
    pub async fn wait_for_first_health_read(&self) {
        while self.health_must_wait(clock::now_ms()) {
            JsPlatform.sleep(HEALTH_FIRST_READ_POLL_MS).await;
        }
    }

    pub fn apply_health(&self, record: &HealthRecord) {
        let config = &self.state.config;
        let opened = self.state.health.borrow_mut().apply_record(
            &config.cells,
            record,
            clock::now_ms(),
            u64::from(config.health_max_age_secs) * 1000,
        );
        if !opened.is_empty() {
            log::warn(
                "cell-health",
                &format!(
                    "the health probe found cells {opened:?} down: circuits opened in this isolate"
                ),
            );
        }
    }

    /// The probe record's store, when `ROUTER_CONTROL` is bound.
    pub fn health_store(&self) -> Option<&HealthStore> {
        self.health_store.as_ref()
    }

    /// Starts a read of the control document in the background of this
    /// request (`ctx`) if one is due; then, until the isolate's first read
    /// has finished (and for at most `FIRST_READ_WAIT_MS`), waits for it.
    pub async fn refresh_control(iso: &Rc<Isolate>, ctx: &worker::worker_sys::Context) {
        let Some(controls) = &iso.controls else {
            return;
        };
        if controls.begin_read_if_due(clock::now_ms()) {
            let iso = Rc::clone(iso);
            let read = wasm_bindgen_futures::future_to_promise(async move {
                if let Some(controls) = &iso.controls {
                    let outcome = controls.read().await;
                    iso.finish_control_read(controls, outcome);
                }
                Ok(JsValue::UNDEFINED)
            });
            let _ = ctx.wait_until(&read);
        }
        while controls.must_wait(clock::now_ms()) {
            JsPlatform.sleep(CONTROL_FIRST_READ_POLL_MS).await;
        }
    }

    fn finish_control_read(&self, controls: &Controls, outcome: ReadOutcome) {
        let applied = controls.finish_read(outcome, clock::now_ms());
        if let Some(resolver) = &self.resolver {
            resolver.set_shared_usable(controls.is_known());
        }
        if applied.changed {
            self.apply_control(&controls.current(), applied.purged);
        }
    }

    /// Applies a control document that changed: its disabled rules, its
    /// purge generation (when `purged`) and its invalidations.
    fn apply_control(&self, control: &Control, purged: bool) {
        log::info(
            "control",
            &format!("control document applied: {}", control.summary()),
        );
        if let Some(rules) = &self.state.ruleset {
            let unknown = rules.set_disabled(&control.disabled_rules);
            if !unknown.is_empty() {
                log::error(
                    "control",
                    &format!(
                        "disabled_rules names no rule of ruleset {}: {}",
                        rules.name(),
                        unknown.join(", ")
                    ),
                );
            }
        }
        if let Some(resolver) = &self.resolver {
            if purged {
                resolver.purge(control.purge_generation);
            }
            // Once per control read that changed the document, never per
            // request: the list is indexed and the memory entries it names
            // are dropped now.
            let (in_force, dropped) = resolver.invalidate(&control.invalidations);
            if in_force > 0 || !control.invalidations.is_empty() {
                log::info(
                    "control",
                    &format!(
                        "invalidations applied: {in_force} in force ({} in the document), {dropped} memory entries dropped",
                        control.invalidations.len()
                    ),
                );
            }
        }
    }
}
