//! The core's I/O traits implemented with workerd's APIs: `fetch` for the
//! Topology Service, the Cache API as the shared cache, and JS time.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use router_core::resolve::cells::{CellList, HealthRecord, ProbeResult};
use router_core::resolve::{
    CachedAnswer, Platform, RawAnswer, SharedCache, TopologyTransport, TransportError,
};
use router_core::trace::Trace;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortSignal, Headers, Request, RequestInit, RequestRedirect, Response};

/// Calls the global `fetch` (workerd has no `window`).
pub fn global_fetch(request: &Request) -> js_sys::Promise {
    let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    global.fetch_with_request(request)
}

/// Fills `out` with CSPRNG bytes, for request ids and trace ids.
///
/// A request needs up to 56 (a request id, a trace id and a parent id,
/// a signature id);
/// asking `crypto.randomUUID()` for each id cost three calls out of wasm
/// (the global, its `crypto`, the UUID) and a string copied back per id.
/// Instead the bytes are drawn [`RANDOM_POOL`] at a time
/// (`crypto.getRandomValues`, one call per ~100 requests) and handed out
/// from the pool, which does not keep them.
pub fn random_bytes(out: &mut [u8]) {
    let drawn = RANDOM.with(|pool| {
        let mut pool = pool.borrow_mut();
        let (buf, used) = &mut *pool;
        if out.len() > RANDOM_POOL {
            return false;
        }
        if *used + out.len() > RANDOM_POOL {
            let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
            let filled = global
                .crypto()
                .and_then(|c| c.get_random_values_with_u8_array(&mut buf[..]));
            if filled.is_err() {
                return false;
            }
            *used = 0;
        }
        let Some(taken) = buf.get_mut(*used..*used + out.len()) else {
            return false;
        };
        out.copy_from_slice(taken);
        // Used bytes are not kept around.
        taken.fill(0);
        *used += out.len();
        true
    });
    if !drawn {
        // Never reached by the trace ids on workerd (at most 24 bytes at a
        // time, and crypto is there); still unique enough for routing.
        for b in out.iter_mut() {
            *b = (js_sys::Math::random() * 256.0) as u8;
        }
    }
}

/// Bytes drawn from the CSPRNG at a time for [`random_bytes`]: one
/// `getRandomValues` call per ~100 requests (a call costs workerd tens of
/// µs, most of it whatever the size, which is at most 64 KiB).
const RANDOM_POOL: usize = 4096;

thread_local! {
    /// The CSPRNG bytes not handed out yet, and how many of the pool are used.
    static RANDOM: RefCell<([u8; RANDOM_POOL], usize)> = const { RefCell::new(([0; RANDOM_POOL], RANDOM_POOL)) };
}

/// `POST {url}/v1/classify`, with the Cloudflare Access service token,
/// through the `mtls_certificates` binding when one is configured (its
/// `fetch` presents the client certificate); and route learning's `GET
/// <cell>/api/v4/internal/cells/learn`, with plain `fetch`.
pub struct FetchTransport {
    /// `None`: no Topology Service (route learning only).
    endpoint: Option<String>,
    /// `scheme://host[:port]` of the cell route learning asks.
    learn_base: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    /// The binding's `Fetcher` (`env.TOPOLOGY_MTLS`), if configured.
    mtls: Option<JsValue>,
}

/// The `mtls_certificates` binding the Topology Service is called through
/// when present (wrangler.toml, docs/deploying.md).
pub const MTLS_BINDING: &str = "TOPOLOGY_MTLS";

impl FetchTransport {
    pub fn new(
        base_url: Option<&str>,
        learn_base: Option<String>,
        client_id: Option<String>,
        client_secret: Option<String>,
        mtls: Option<JsValue>,
    ) -> Self {
        FetchTransport {
            endpoint: base_url.map(|u| format!("{}/v1/classify", u.trim_end_matches('/'))),
            learn_base,
            client_id,
            client_secret,
            mtls,
        }
    }

    /// `env[MTLS_BINDING]` when it is an object with a `fetch` method.
    pub fn mtls_binding(env: &JsValue) -> Option<JsValue> {
        let binding = js_sys::Reflect::get(env, &MTLS_BINDING.into()).ok()?;
        let fetch = js_sys::Reflect::get(&binding, &"fetch".into()).ok()?;
        fetch.is_function().then_some(binding)
    }

    /// Sends `request` through the mTLS binding when there is one and
    /// `mtls` asks for it, else through the global `fetch`.
    async fn send(&self, request: &Request, mtls: bool) -> Result<Response, JsValue> {
        let promise = match (&self.mtls, mtls) {
            (Some(binding), true) => {
                let fetch: js_sys::Function =
                    js_sys::Reflect::get(binding, &"fetch".into())?.unchecked_into();
                fetch.call1(binding, request)?.unchecked_into()
            }
            _ => global_fetch(request),
        };
        Ok(JsFuture::from(promise).await?.unchecked_into())
    }

    async fn call(&self, body: &str, timeout_ms: u32, trace: &Trace) -> Result<RawAnswer, JsValue> {
        let Some(endpoint) = &self.endpoint else {
            return Err(js_sys::Error::new("GITLAB_TOPOLOGY_SERVICE_URL is not set").into());
        };
        let headers = Headers::new()?;
        headers.set("content-type", "application/json")?;
        headers.set("accept", "application/json")?;
        for (name, value) in trace.headers() {
            if !value.is_empty() {
                headers.set(name, value)?;
            }
        }
        if let (Some(id), Some(secret)) = (&self.client_id, &self.client_secret) {
            headers.set("cf-access-client-id", id)?;
            headers.set("cf-access-client-secret", secret)?;
        }
        let init = RequestInit::new();
        init.set_method("POST");
        init.set_headers(&headers);
        init.set_body(&JsValue::from_str(body));
        // Never follow a redirect: it would resend the Access credentials to
        // wherever `Location` points and route by that host's answer. A 3xx
        // comes back as it is and the core treats it as a service error.
        init.set_redirect(RequestRedirect::Manual);
        // One signal covers the whole attempt, body included.
        let signal = AbortSignal::timeout_with_u32(timeout_ms);
        init.set_signal(Some(&signal));
        let request = Request::new_with_str_and_init(endpoint, &init)?;
        let response = self.send(&request, true).await?;
        raw_answer(response).await
    }

    async fn call_learn(
        &self,
        method: &str,
        path: &str,
        timeout_ms: u32,
        trace: &Trace,
    ) -> Result<RawAnswer, JsValue> {
        let Some(base) = &self.learn_base else {
            return Err(js_sys::Error::new("no cell to ask (GITLAB_PROXY_HOST is not set)").into());
        };
        let headers = Headers::new()?;
        headers.set("accept", "application/json")?;
        for (name, value) in trace.headers() {
            if !value.is_empty() {
                headers.set(name, value)?;
            }
        }
        let init = RequestInit::new();
        init.set_method("GET");
        init.set_headers(&headers);
        init.set_redirect(RequestRedirect::Manual);
        let signal = AbortSignal::timeout_with_u32(timeout_ms);
        init.set_signal(Some(&signal));
        let url = format!(
            "{base}{}",
            router_core::resolve::learn::learn_path_and_query(method, path)
        );
        let request = Request::new_with_str_and_init(&url, &init)?;
        let response = self.send(&request, false).await?;
        raw_answer(response).await
    }
}

async fn raw_answer(response: Response) -> Result<RawAnswer, JsValue> {
    let text = JsFuture::from(response.text()?).await?;
    let resp_headers = response.headers();
    Ok(RawAnswer {
        status: response.status(),
        body: text.as_string().unwrap_or_default(),
        cache_control: resp_headers.get("cache-control").ok().flatten(),
        cache_tag: resp_headers.get("cache-tag").ok().flatten(),
    })
}

/// A failed `fetch` as the core's transport error.
fn transport_error(e: JsValue) -> TransportError {
    let name = js_sys::Reflect::get(&e, &"name".into())
        .ok()
        .and_then(|n| n.as_string())
        .unwrap_or_default();
    if name == "TimeoutError" || name == "AbortError" {
        TransportError::Timeout
    } else {
        let message = js_sys::Reflect::get(&e, &"message".into())
            .ok()
            .and_then(|m| m.as_string())
            .unwrap_or_else(|| format!("{e:?}"));
        TransportError::Connect(message)
    }
}

impl TopologyTransport for FetchTransport {
    async fn classify(
        &self,
        body: &str,
        timeout_ms: u32,
        trace: &Trace,
    ) -> Result<RawAnswer, TransportError> {
        self.call(body, timeout_ms, trace)
            .await
            .map_err(transport_error)
    }

    async fn learn(
        &self,
        method: &str,
        path: &str,
        timeout_ms: u32,
        trace: &Trace,
    ) -> Result<RawAnswer, TransportError> {
        self.call_learn(method, path, timeout_ms, trace)
            .await
            .map_err(transport_error)
    }
}

/// The Cloudflare Cache API (`caches.default`), shared by every isolate of
/// a colo and by every Worker of the zone (staging, production and the
/// registry deployments alike). Entries are JSON responses whose
/// `Cache-Control` keeps them for the TTL plus the stale window (the
/// entry's `expires_at_ms` says when it expires; until the window ends it
/// can stand in for a failing service) and whose `Cache-Tag` lets
/// operators purge by tag. Keys are under the deployment's namespace
/// ([`router_core::config::Config::cache_namespace`]), so one deployment
/// never reads another's answers. Writes are started and left in `pending`
/// for the edge to hand to `waitUntil`, so no request waits for one.
pub struct CacheApi {
    /// `https://gitlab-http-router.internal/<namespace>/v1/classify/`.
    prefix: String,
    pending: RefCell<Vec<js_sys::Promise>>,
}

impl CacheApi {
    pub fn new(namespace: &str) -> CacheApi {
        CacheApi {
            // Cache keys are URLs; this host is never fetched.
            prefix: format!("https://gitlab-http-router.internal/{namespace}/v1/classify/"),
            pending: RefCell::default(),
        }
    }

    fn default_cache() -> Option<web_sys::Cache> {
        let caches = js_sys::Reflect::get(&js_sys::global(), &"caches".into()).ok()?;
        let default = js_sys::Reflect::get(&caches, &"default".into()).ok()?;
        default.dyn_into::<web_sys::Cache>().ok()
    }

    /// The writes started since the last call.
    pub fn take_pending(&self) -> Vec<js_sys::Promise> {
        std::mem::take(&mut self.pending.borrow_mut())
    }
}

impl SharedCache for CacheApi {
    async fn get(&self, key: &str) -> Option<CachedAnswer> {
        let cache = Self::default_cache()?;
        let found = JsFuture::from(cache.match_with_str(&format!("{}{key}", self.prefix)))
            .await
            .ok()?;
        let response: Response = found.dyn_into().ok()?;
        let text = JsFuture::from(response.text().ok()?)
            .await
            .ok()?
            .as_string()?;
        serde_json::from_str(&text).ok()
    }

    fn put(&self, key: &str, answer: &CachedAnswer, keep_secs: u32) {
        let Some(cache) = Self::default_cache() else {
            return;
        };
        let Ok(body) = serde_json::to_string(answer) else {
            return;
        };
        let Ok(headers) = Headers::new() else { return };
        let _ = headers.set("content-type", "application/json");
        let _ = headers.set("cache-control", &format!("max-age={keep_secs}"));
        let _ = headers.set("cache-tag", &answer.tags.join(","));
        let init = web_sys::ResponseInit::new();
        init.set_headers(&headers);
        let Ok(response) = Response::new_with_opt_str_and_init(Some(&body), &init) else {
            return;
        };
        // A failed put costs only a later miss.
        let promise = cache.put_with_str(&format!("{}{key}", self.prefix), &response);
        self.pending.borrow_mut().push(promise);
    }
}

/// Time, randomness and timers from JS.
pub struct JsPlatform;

/// The clock as [`now`] reads it.
#[derive(Clone, Copy)]
enum Clock {
    /// Read on every call.
    Live,
    /// A [`HeldClock`] lives and the clock has not been read yet.
    Held,
    /// A [`HeldClock`] lives: this reading stands.
    HeldAt(f64),
}

thread_local! {
    static CLOCK: Cell<Clock> = const { Cell::new(Clock::Live) };
}

/// `Date.now()`, read at most once per [`HeldClock`]: workerd moves the
/// clock only between I/O events, never while code runs, so a second read
/// inside one synchronous call would return the same value and only cost
/// another call out of wasm.
pub fn now() -> f64 {
    CLOCK.with(|clock| match clock.get() {
        Clock::HeldAt(now) => now,
        Clock::Held => {
            let now = js_sys::Date::now();
            clock.set(Clock::HeldAt(now));
            now
        }
        Clock::Live => js_sys::Date::now(),
    })
}

/// While alive, [`now`] reads the clock once and returns that reading.
/// Only for a synchronous call into wasm (an `await` lets time pass).
pub struct HeldClock;

impl HeldClock {
    pub fn hold() -> HeldClock {
        CLOCK.with(|clock| clock.set(Clock::Held));
        HeldClock
    }
}

impl Drop for HeldClock {
    fn drop(&mut self) {
        CLOCK.with(|clock| clock.set(Clock::Live));
    }
}

impl Platform for JsPlatform {
    fn now_ms(&self) -> u64 {
        now() as u64
    }

    fn random(&self) -> f64 {
        js_sys::Math::random()
    }

    fn random_bytes(&self, out: &mut [u8]) {
        random_bytes(out);
    }

    async fn sleep(&self, ms: u32) {
        worker::Delay::from(Duration::from_millis(u64::from(ms))).await;
    }

    fn warn(&self, message: &str) {
        crate::log_warn("resolver", message);
    }
}

/// The scheduled probe's record ([`HealthRecord`]) in the deployment's own
/// KV namespace (`ROUTER_CONTROL`), under [`HEALTH_KEY`]: only this
/// deployment's Worker can write there (the zone-wide Cache API, where it
/// lived before, is writable by any Worker on the zone), and KV carries it
/// to every isolate, in every location.
pub struct HealthStore {
    binding: JsValue,
}

/// The probe record's key.
pub use router_core::resolve::cells::HEALTH_KEY;

/// The largest probe record read (a line per cell: 1,000 cells fit).
const HEALTH_MAX_BYTES: usize = 256 * 1024;

/// A KV read of the record that takes longer is abandoned.
const HEALTH_READ_TIMEOUT_MS: u32 = 1_000;

impl HealthStore {
    pub fn new(binding: JsValue) -> HealthStore {
        HealthStore { binding }
    }

    pub async fn get(&self) -> Option<HealthRecord> {
        match crate::kv::get_bounded(
            &self.binding,
            HEALTH_KEY,
            HEALTH_MAX_BYTES,
            HEALTH_READ_TIMEOUT_MS,
        )
        .await
        {
            crate::kv::Read::Text(text) => HealthRecord::decode(&text),
            _ => None,
        }
    }

    /// Stores `record` for `ttl_secs`; a failure only costs isolates the
    /// record (they then rely on their own circuits), and is logged.
    pub async fn put(&self, record: &HealthRecord, ttl_secs: u32) {
        if let Err(e) = crate::kv::put(&self.binding, HEALTH_KEY, &record.encode(), ttl_secs).await
        {
            crate::log_error(
                "cell-health",
                &format!("storing the probe record failed: {e}"),
            );
        }
    }
}

/// Probes every listed cell's health URL at once (`GET
/// <scheme>://<address><health_path>`, no redirects followed, abandoned
/// after `timeout_ms`); what each answer means is
/// [`router_core::resolve::cells::Verdict`]'s.
pub async fn probe_cells(list: &CellList, scheme: &str, timeout_ms: u32) -> HealthRecord {
    let started = js_sys::Date::now();
    // Every fetch is started before any is awaited: they run together.
    let pending: Vec<(u64, Result<js_sys::Promise, JsValue>)> = list
        .cells()
        .iter()
        .map(|cell| {
            let url = format!("{scheme}://{}{}", cell.address, cell.health_path);
            (
                cell.id,
                probe_request(&url, timeout_ms).map(|r| global_fetch(&r)),
            )
        })
        .collect();
    let mut cells = Vec::with_capacity(pending.len());
    for (id, promise) in pending {
        let outcome = match promise {
            Ok(p) => JsFuture::from(p).await,
            Err(e) => Err(e),
        };
        let ms = (js_sys::Date::now() - started).max(0.0) as u64;
        cells.push(match outcome {
            Ok(response) => {
                let response = response.unchecked_into::<Response>();
                if let Some(body) = response.body() {
                    let _ = body.cancel();
                }
                ProbeResult {
                    id,
                    status: response.status(),
                    ms,
                    error: None,
                }
            }
            Err(e) => ProbeResult {
                id,
                status: 0,
                ms,
                error: Some(
                    js_sys::Reflect::get(&e, &"message".into())
                        .ok()
                        .and_then(|m| m.as_string())
                        .unwrap_or_else(|| "fetch failed".to_string()),
                ),
            },
        });
    }
    HealthRecord {
        checked_at_ms: js_sys::Date::now() as u64,
        cells,
    }
}

fn probe_request(url: &str, timeout_ms: u32) -> Result<Request, JsValue> {
    let headers = Headers::new()?;
    headers.set("user-agent", "gitlab-http-router-health-probe")?;
    let init = RequestInit::new();
    init.set_method("GET");
    init.set_headers(&headers);
    init.set_redirect(RequestRedirect::Manual);
    init.set_signal(Some(&AbortSignal::timeout_with_u32(timeout_ms)));
    Request::new_with_str_and_init(url, &init)
}
