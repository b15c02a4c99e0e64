//! The deployment's own KV namespace (`ROUTER_CONTROL`), as the control
//! document and the probe record read and write it: reads bounded in size
//! while they are read (a value's stream, never the whole value) and in
//! time.

use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

/// What a bounded read found.
pub enum Read {
    Text(String),
    /// No such key.
    Absent,
    Failed(String),
}

/// Reads `key` as UTF-8 text of at most `max_bytes`, abandoned after
/// `timeout_ms`. A longer value fails after `max_bytes + 1` bytes, its
/// stream cancelled: the rest is never read into the isolate.
pub async fn get_bounded(binding: &JsValue, key: &str, max_bytes: usize, timeout_ms: u32) -> Read {
    match within(timeout_ms, read_stream(binding, key, max_bytes)).await {
        Some(read) => read,
        None => Read::Failed(format!("no answer within {timeout_ms} ms")),
    }
}

async fn read_stream(binding: &JsValue, key: &str, max_bytes: usize) -> Read {
    let options = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&options, &"type".into(), &"stream".into());
    let stream = match call(binding, "get", &[key.into(), options.into()]).await {
        Ok(value) if value.is_null() || value.is_undefined() => return Read::Absent,
        Ok(value) => value,
        Err(e) => return Read::Failed(e),
    };
    let reader = match method(&stream, "getReader").and_then(|f| f.call0(&stream).map_err(describe))
    {
        Ok(reader) => reader,
        Err(e) => return Read::Failed(e),
    };
    let mut bytes: Vec<u8> = Vec::new();
    loop {
        let chunk = match call(&reader, "read", &[]).await {
            Ok(chunk) => chunk,
            Err(e) => return Read::Failed(e),
        };
        let done = js_sys::Reflect::get(&chunk, &"done".into()).ok();
        if done.is_some_and(|d| d.is_truthy()) {
            break;
        }
        let value = js_sys::Reflect::get(&chunk, &"value".into()).unwrap_or(JsValue::UNDEFINED);
        let Some(array) = value.dyn_ref::<js_sys::Uint8Array>() else {
            return Read::Failed("the value's stream gave something other than bytes".into());
        };
        if bytes.len() + array.length() as usize > max_bytes {
            let _ = call(&reader, "cancel", &[]).await;
            return Read::Failed(format!(
                "the value is over the {max_bytes}-byte limit (not read further)"
            ));
        }
        let start = bytes.len();
        bytes.resize(start + array.length() as usize, 0);
        if let Some(tail) = bytes.get_mut(start..) {
            array.copy_to(tail);
        }
    }
    match String::from_utf8(bytes) {
        Ok(text) => Read::Text(text),
        Err(_) => Read::Failed("the value is not UTF-8 text".into()),
    }
}

/// Writes `value` under `key`, kept for `ttl_secs` (KV's least is 60).
pub async fn put(binding: &JsValue, key: &str, value: &str, ttl_secs: u32) -> Result<(), String> {
    let options = js_sys::Object::new();
    let _ = js_sys::Reflect::set(
        &options,
        &"expirationTtl".into(),
        &JsValue::from(ttl_secs.max(60)),
    );
    call(binding, "put", &[key.into(), value.into(), options.into()])
        .await
        .map(|_| ())
}

/// `future`, or `None` once `timeout_ms` has passed (the future is then
/// dropped; the JS promise behind it is left to finish unobserved).
pub async fn within<T>(timeout_ms: u32, future: impl std::future::Future<Output = T>) -> Option<T> {
    use std::future::Future;
    use std::pin::pin;
    let timer = worker::Delay::from(std::time::Duration::from_millis(u64::from(timeout_ms)));
    let mut future = pin!(future);
    let mut timer = pin!(timer);
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(value) = future.as_mut().poll(cx) {
            return std::task::Poll::Ready(Some(value));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
}

fn method(target: &JsValue, name: &str) -> Result<js_sys::Function, String> {
    js_sys::Reflect::get(target, &name.into())
        .ok()
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
        .ok_or_else(|| format!("{name} is not a function here"))
}

/// `target[name](...args)`, awaited when it returns a promise.
async fn call(target: &JsValue, name: &str, args: &[JsValue]) -> Result<JsValue, String> {
    let f = method(target, name)?;
    let array: js_sys::Array = args.iter().collect();
    let value = f.apply(target, &array).map_err(describe)?;
    match value.dyn_into::<js_sys::Promise>() {
        Ok(promise) => JsFuture::from(promise).await.map_err(describe),
        Err(value) => Ok(value),
    }
}

pub fn describe(error: JsValue) -> String {
    error
        .dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| error.as_string())
        .unwrap_or_else(|| "KV error".into())
}
