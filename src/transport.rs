//! The requests the router makes itself, through `fetch`: the Topology
//! Service's `POST {url}/v1/classify` and route learning's `GET
//! <cell>/api/v4/internal/cells/learn` (the core's [`TopologyTransport`]),
//! and the health probe's `GET`s, all built by [`Outgoing::request`].

use router_core::resolve::{RawAnswer, TopologyTransport, TransportError};
use router_core::trace::Trace;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortSignal, Headers, Request, RequestInit, RequestRedirect, Response};

/// Calls the global `fetch` (workerd has no `window`).
pub fn global_fetch(request: &Request) -> js_sys::Promise {
    let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    global.fetch_with_request(request)
}

/// A request of the router's own, as [`Outgoing::request`] builds it.
pub struct Outgoing<'a> {
    pub method: &'a str,
    pub url: &'a str,
    /// Set in this order; an empty value is not sent.
    pub headers: Vec<(&'a str, &'a str)>,
    pub body: Option<&'a str>,
    /// One signal abandons the whole attempt, body included, after this.
    pub timeout_ms: u32,
}

impl Outgoing<'_> {
    /// The request. It never follows a redirect: the Topology Service's
    /// would resend the Access credentials to wherever `Location` points
    /// and route by that host's answer, so a 3xx comes back as it is (the
    /// core treats it as a service error).
    pub fn request(&self) -> Result<Request, JsValue> {
        let headers = Headers::new()?;
        for (name, value) in &self.headers {
            if !value.is_empty() {
                headers.set(name, value)?;
            }
        }
        let init = RequestInit::new();
        init.set_method(self.method);
        init.set_headers(&headers);
        if let Some(body) = self.body {
            init.set_body(&JsValue::from_str(body));
        }
        init.set_redirect(RequestRedirect::Manual);
        init.set_signal(Some(&AbortSignal::timeout_with_u32(self.timeout_ms)));
        Request::new_with_str_and_init(self.url, &init)
    }
}

/// The Topology Service's and route learning's transport: `classify` with
/// the Cloudflare Access service token, through the `mtls_certificates`
/// binding when one is configured (its `fetch` presents the client
/// certificate); `learn` with plain `fetch`.
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

/// Which of the two services a call asks.
#[derive(Clone, Copy)]
enum Service {
    Topology,
    Learn,
}

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

    /// Sends `request` through the mTLS binding for the Topology Service
    /// when there is one, else through the global `fetch`.
    async fn send(&self, request: &Request, service: Service) -> Result<Response, JsValue> {
        let promise = match (&self.mtls, service) {
            (Some(binding), Service::Topology) => {
                let fetch: js_sys::Function =
                    js_sys::Reflect::get(binding, &"fetch".into())?.unchecked_into();
                fetch.call1(binding, request)?.unchecked_into()
            }
            _ => global_fetch(request),
        };
        Ok(JsFuture::from(promise).await?.unchecked_into())
    }

    /// One call to `service`, its answer read whole.
    async fn call(&self, service: Service, outgoing: Outgoing<'_>) -> Result<RawAnswer, JsValue> {
        let response = self.send(&outgoing.request()?, service).await?;
        raw_answer(response).await
    }

    async fn call_classify(
        &self,
        body: &str,
        timeout_ms: u32,
        trace: &Trace,
    ) -> Result<RawAnswer, JsValue> {
        let Some(endpoint) = &self.endpoint else {
            return Err(js_sys::Error::new("GITLAB_TOPOLOGY_SERVICE_URL is not set").into());
        };
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "application/json"),
        ];
        headers.extend(trace.headers());
        if let (Some(id), Some(secret)) = (&self.client_id, &self.client_secret) {
            headers.push(("cf-access-client-id", id));
            headers.push(("cf-access-client-secret", secret));
        }
        let outgoing = Outgoing {
            method: "POST",
            url: endpoint,
            headers,
            body: Some(body),
            timeout_ms,
        };
        self.call(Service::Topology, outgoing).await
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
        let url = format!(
            "{base}{}",
            router_core::resolve::learn::learn_path_and_query(method, path)
        );
        let mut headers = vec![("accept", "application/json")];
        headers.extend(trace.headers());
        let outgoing = Outgoing {
            method: "GET",
            url: &url,
            headers,
            body: None,
            timeout_ms,
        };
        self.call(Service::Learn, outgoing).await
    }
}

/// The answer's status, body and cache headers.
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
        self.call_classify(body, timeout_ms, trace)
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
