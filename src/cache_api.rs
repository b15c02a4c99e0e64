//! The shared cache of the Topology Service's answers: the Cloudflare
//! Cache API (`caches.default`), the core's [`SharedCache`].

use std::cell::RefCell;

use router_core::json::push_u64;
use router_core::out_of_line::out_of_line;
use router_core::resolve::{CachedAnswer, SharedCache};
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{Headers, Response};

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

    /// The entry's URL: the prefix and `key`. Written without `format!`,
    /// whose machinery a fresh isolate's first request would otherwise
    /// compile for this alone (docs/performance-ledger.md, "Ruleset
    /// loading and the first request"); so is the entry's `Cache-Control`.
    fn url(&self, key: &str) -> String {
        let mut url = String::with_capacity(self.prefix.len() + key.len());
        url.push_str(&self.prefix);
        url.push_str(key);
        url
    }

    /// The writes started since the last call.
    pub fn take_pending(&self) -> Vec<js_sys::Promise> {
        std::mem::take(&mut self.pending.borrow_mut())
    }
}

/// A found entry's answer; `None` when its body is unreadable.
async fn read_entry(response: Response) -> Option<CachedAnswer> {
    let text = JsFuture::from(response.text().ok()?)
        .await
        .ok()?
        .as_string()?;
    serde_json::from_str(&text).ok()
}

impl SharedCache for CacheApi {
    async fn get(&self, key: &str) -> Option<CachedAnswer> {
        let cache = Self::default_cache()?;
        let found = JsFuture::from(cache.match_with_str(&self.url(key)))
            .await
            .ok()?;
        let response: Response = found.dyn_into().ok()?;
        // A hit: out of line, since a fresh isolate's first lookup misses.
        out_of_line(read_entry(response)).await
    }

    fn put(&self, key: &str, answer: &CachedAnswer, keep_secs: u32) {
        let Some(cache) = Self::default_cache() else {
            return;
        };
        let body = answer.to_json();
        let Ok(headers) = Headers::new() else { return };
        let _ = headers.set("content-type", "application/json");
        let mut cache_control = String::from("max-age=");
        push_u64(&mut cache_control, u64::from(keep_secs));
        let _ = headers.set("cache-control", &cache_control);
        let _ = headers.set("cache-tag", &answer.tags.join(","));
        let init = web_sys::ResponseInit::new();
        init.set_headers(&headers);
        let Ok(response) = Response::new_with_opt_str_and_init(Some(&body), &init) else {
            return;
        };
        // A failed put costs only a later miss.
        let promise = cache.put_with_str(&self.url(key), &response);
        self.pending.borrow_mut().push(promise);
    }
}
