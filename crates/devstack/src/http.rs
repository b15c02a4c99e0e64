//! Small HTTP helpers shared by the topology service and the demo cell.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub type Body = BoxBody<Bytes, Infallible>;

pub fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into()).boxed()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

pub fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut text = serde_json::to_string(value).expect("JSON values serialize");
    text.push('\n');
    let mut resp = Response::new(full(text));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// Request headers as a map of lower-case name → value; repeated headers are
/// joined with ", ".
pub fn headers_map(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        map.entry(name.as_str().to_string())
            .and_modify(|e| {
                e.push_str(", ");
                e.push_str(&v);
            })
            .or_insert(v);
    }
    map
}

pub fn headers_json(headers: &HeaderMap) -> Value {
    Value::Object(
        headers_map(headers)
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    )
}

pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Serves one HTTP/1.1 connection (with upgrades). When `cancel` becomes
/// true the connection is dropped at once.
pub async fn serve_connection<H, F>(
    stream: TcpStream,
    peer: SocketAddr,
    handler: H,
    cancel: Option<watch::Receiver<bool>>,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let _ = stream.set_nodelay(true);
    let io = TokioIo::new(stream);
    let svc = service_fn(move |req| {
        let h = handler.clone();
        async move { Ok::<_, Infallible>(h(req, peer).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .serve_connection(io, svc)
        .with_upgrades();
    match cancel {
        None => {
            let _ = conn.await;
        }
        Some(mut cancel) => {
            tokio::select! {
                _ = conn => {}
                _ = cancel.wait_for(|v| *v) => {}
            }
        }
    }
}

/// Accepts connections forever and serves each on its own task.
pub fn spawn_accept_loop<H, F>(listener: TcpListener, handler: H)
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    tokio::spawn(serve_connection(stream, peer, handler.clone(), None));
                }
                Err(e) => {
                    eprintln!("devstack: accept error: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    });
}

/// Prints one ready line (a JSON object) to stdout.
pub fn print_ready(value: &Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

/// How many recent requests (or closes) the `/_stats` endpoints keep.
pub const LAST_REQUESTS: usize = 50;

/// Appends to a `/_stats` history, dropping the oldest beyond
/// [`LAST_REQUESTS`].
pub fn push_capped<T>(history: &mut VecDeque<T>, item: T) {
    if history.len() == LAST_REQUESTS {
        history.pop_front();
    }
    history.push_back(item);
}
