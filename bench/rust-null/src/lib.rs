//! The benchmark's Rust floor: `fetch` to the upstream named by the
//! UPSTREAM binding, through workers-rs and wasm-bindgen exactly as the
//! router is entered and returns, and nothing else.

use wasm_bindgen::prelude::*;
use web_sys::{Request, Response};
use worker::{event, Context, Env};

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
    fn forward_to(req: &Request, upstream: &str) -> Result<js_sys::Promise, JsValue>;
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> worker::Result<Response> {
    let upstream = env.var("UPSTREAM").map(|v| v.to_string()).unwrap_or_default();
    let promise = forward_to(&req, &upstream).map_err(|e| worker::Error::from(format!("{e:?}")))?;
    let resp = wasm_bindgen_futures::JsFuture::from(promise)
        .await
        .map_err(|e| worker::Error::from(format!("{e:?}")))?;
    Ok(resp.unchecked_into())
}
