//! The benchmark's `workers-rs`: the floor's forwarding (js-floor.mjs: the
//! client's headers less hop-by-hop ones, the forwarding and rule headers
//! set, the body streamed to the upstream, with `LOG=1` one JSON log line)
//! written the way a workers-rs user would, through `#[event(fetch)]` and
//! the crate's `Request`, `Headers` and `Fetch`. With `FORWARD_ONLY=1`
//! (`rust-null`) it only hands the request to the upstream, through one
//! inline JavaScript function: the workers-rs entry and nothing else.

#[path = "../../rust-floor/src/log_line.rs"]
mod log_line;

use wasm_bindgen::prelude::*;
use worker::{
    console_log, event, Context, Date, Env, Fetch, Headers, Request, RequestInit, RequestRedirect,
    Response,
};

#[wasm_bindgen(inline_js = r#"
export function forwardTo(req, upstream) {
  const url = new URL(req.url);
  url.host = upstream;
  url.protocol = "http:";
  return fetch(url, { method: req.method, headers: req.headers, body: req.body, redirect: "manual" });
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = forwardTo, catch)]
    fn forward_to(req: &web_sys::Request, upstream: &str) -> Result<js_sys::Promise, JsValue>;
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> worker::Result<Response> {
    let upstream = env
        .var("UPSTREAM")
        .map(|v| v.to_string())
        .unwrap_or_default();
    let flag = |name: &str| env.var(name).map(|v| v.to_string() == "1").unwrap_or(false);
    if flag("FORWARD_ONLY") {
        return forward_only(&req, &upstream).await;
    }
    let started = Date::now().as_millis();
    let url = req.url()?;
    let headers = Headers::new();
    for (name, value) in req.headers().entries() {
        if !log_line::dropped(&name) {
            headers.append(&name, &value)?;
        }
    }
    let host = url.host_str().unwrap_or_default();
    let host = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    headers.set("x-forwarded-host", &host)?;
    headers.set("x-forwarded-proto", url.scheme())?;
    headers.set("x-gitlab-http-router-rule-action", "proxy")?;
    headers.set("x-gitlab-http-router-rule-type", "")?;
    let target = match url.query() {
        Some(query) => format!("http://{upstream}{}?{query}", url.path()),
        None => format!("http://{upstream}{}", url.path()),
    };
    let mut init = RequestInit::new();
    init.with_method(req.method())
        .with_headers(headers)
        .with_redirect(RequestRedirect::Manual)
        .with_body(req.inner().body().map(JsValue::from));
    let res = Fetch::Request(Request::new_with_init(&target, &init)?)
        .send()
        .await?;
    if flag("LOG") {
        let head = log_line::log_head(req.method().as_ref(), url.path(), &upstream);
        let duration = Date::now().as_millis() - started;
        console_log!(
            "{head}\"status\":{},\"duration_ms\":{duration}}}",
            res.status_code()
        );
    }
    Ok(res)
}

/// The request handed to the upstream as it is (`rust-null`).
async fn forward_only(req: &Request, upstream: &str) -> worker::Result<Response> {
    let promise =
        forward_to(req.inner(), upstream).map_err(|e| worker::Error::from(format!("{e:?}")))?;
    let resp = wasm_bindgen_futures::JsFuture::from(promise)
        .await
        .map_err(|e| worker::Error::from(format!("{e:?}")))?;
    Ok(Response::from(web_sys::Response::from(resp)))
}
