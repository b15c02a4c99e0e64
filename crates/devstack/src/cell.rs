//! A demo cell: echoes every request as JSON, with request-header controls
//! for status, delay, response size and extra headers, and a WebSocket echo.
//! A cell configured with Git repositories also serves them over smart HTTP
//! (`crate::git_http`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::git_http::{GitPath, GitRepos};
use crate::http::{empty, header_str, headers_json, json_response, Body};

const MAX_DELAY_MS: u64 = 600_000;
const CHUNK: usize = 64 * 1024;

pub struct CellState {
    id: String,
    stats: CellStats,
    /// Repositories served over Git smart HTTP, if any.
    git: Option<Arc<GitRepos>>,
    /// The route-learning endpoint, on cells started by `devstack up`.
    learn: Option<Arc<LearnService>>,
    /// Maintenance mode (`POST /_maintenance`): requests whose path starts
    /// with one of these prefixes (compared case-insensitively) are
    /// answered 503 with `Retry-After` (seconds), as a cell moving an
    /// organization away answers it.
    maintenance: Mutex<(Vec<String>, u32)>,
}

/// What a cell's `GET /_stats` reports, field for field;
/// `POST /_stats/reset` zeroes its counts and histories (not its gauges)
/// and reports it again.
#[derive(Default)]
struct CellStats {
    /// HTTP requests answered by the echo (not the test endpoints).
    requests: AtomicU64,
    /// WebSocket echo sessions opened.
    websockets: AtomicU64,
    /// The most recent requests, as echoed.
    last_requests: Mutex<VecDeque<Value>>,
    /// HTTP requests (not WebSockets) being handled now: gauge.
    in_flight: AtomicU64,
    /// HTTP requests whose handler was dropped before it produced an
    /// answer: the connection went away while the cell was still working
    /// (e.g. during `x-demo-delay-ms`).
    abandoned: AtomicU64,
    /// Streamed `x-demo-response-bytes` bodies dropped before their end:
    /// the reader went away mid-answer.
    responses_cut: AtomicU64,
    /// WebSocket echo sessions open now: gauge.
    websockets_open: AtomicU64,
    /// How the most recent WebSocket sessions ended (see [`ws_end`]).
    websocket_closes: Mutex<VecDeque<Value>>,
    /// `GET /-/readiness` answered (the router's health probe; not counted
    /// in `requests`).
    health_probes: AtomicU64,
    /// Route-learning calls answered (0 on a cell without the endpoint).
    learn_calls: AtomicU64,
    /// Requests refused by maintenance mode.
    maintenance_refused: AtomicU64,
}

impl CellStats {
    fn to_json(&self, cell: &str) -> Value {
        let count = |c: &AtomicU64| c.load(Ordering::SeqCst);
        json!({
            "cell": cell,
            "requests": count(&self.requests),
            "websockets": count(&self.websockets),
            "last_requests": *self.last_requests.lock().unwrap(),
            "in_flight": count(&self.in_flight),
            "abandoned": count(&self.abandoned),
            "responses_cut": count(&self.responses_cut),
            "websockets_open": count(&self.websockets_open),
            "websocket_closes": *self.websocket_closes.lock().unwrap(),
            "health_probes": count(&self.health_probes),
            "learn_calls": count(&self.learn_calls),
            "maintenance_refused": count(&self.maintenance_refused),
        })
    }

    /// Every count and history back to empty; the gauges (`in_flight`,
    /// `websockets_open`) stay what they are.
    fn reset(&self) {
        for count in [
            &self.requests,
            &self.websockets,
            &self.abandoned,
            &self.responses_cut,
            &self.health_probes,
            &self.learn_calls,
            &self.maintenance_refused,
        ] {
            count.store(0, Ordering::SeqCst);
        }
        self.last_requests.lock().unwrap().clear();
        self.websocket_closes.lock().unwrap().clear();
    }
}

/// `GET /api/v4/internal/cells/learn?method=M&path_info=P`: route learning
/// (router_core::resolve::learn) answered from the same topology data as the
/// Topology Service, on every demo cell of `devstack up`. Test controls:
/// `POST /_learn/mode?set=ok|fail|garbage&delay_ms=N` (fail: 500; garbage:
/// a 200 that is not an answer; delay: before answering), and the calls
/// counted in the cell's `/_stats` as `learn_calls`.
pub struct LearnService {
    dir: crate::topology::Directory,
    cache_control: String,
    not_found_cache_control: String,
    mode: Mutex<(String, u64)>,
}

impl LearnService {
    pub fn new(
        dir: crate::topology::Directory,
        cache_control: String,
        not_found_cache_control: String,
    ) -> Arc<LearnService> {
        Arc::new(LearnService {
            dir,
            cache_control,
            not_found_cache_control,
            mode: Mutex::new(("ok".to_string(), 0)),
        })
    }

    /// The answer's status, JSON body and Cache-Control.
    pub fn answer(&self, path_info: &str) -> (StatusCode, Value, &str) {
        use crate::topology::Learned;
        match self.dir.learn(path_info) {
            Learned::Found {
                path,
                cell,
                source,
                exact,
            } => {
                let cell = &self.dir.cells[cell];
                let mut body = json!({
                    "path": path,
                    "cell": format!("cell_{}", cell.id),
                    "source": source,
                    "address": cell.address,
                });
                if exact {
                    body["exact"] = json!(true);
                }
                (StatusCode::OK, body, &self.cache_control)
            }
            Learned::NotFound { prefix } => {
                let mut body = json!({"message": "404 Not Found"});
                if let Some(prefix) = prefix {
                    body["path"] = json!(prefix);
                }
                (StatusCode::NOT_FOUND, body, &self.not_found_cache_control)
            }
        }
    }
}

/// The first value of `name` in `query`, `%XX` and `+` decoded.
fn query_param(query: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

async fn learn(state: &CellState, learn: &LearnService, query: &str) -> Response<Body> {
    state.stats.learn_calls.fetch_add(1, Ordering::SeqCst);
    let (mode, delay_ms) = learn.mode.lock().unwrap().clone();
    if delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(delay_ms.min(MAX_DELAY_MS))).await;
    }
    let path_info = query_param(query, "path_info").unwrap_or_default();
    eprintln!("cell {}: learn {path_info}", state.id);
    let (status, body, cache_control) = match mode.as_str() {
        "fail" => (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"message": "learn failed (injected)"}),
            "no-store",
        ),
        "garbage" => (
            StatusCode::OK,
            json!({"path": 42, "cell": ["not", "an", "answer"]}),
            "max-age=60",
        ),
        _ => learn.answer(&path_info),
    };
    let mut resp = json_response(status, &body);
    if let Ok(v) = HeaderValue::from_str(cache_control) {
        resp.headers_mut().insert("cache-control", v);
    }
    with_cell_header(state, resp)
}

/// Counts one HTTP request in flight; dropped without [`InFlight::answered`]
/// it counts as abandoned.
struct InFlight {
    state: Arc<CellState>,
    answered: bool,
}

impl InFlight {
    fn new(state: Arc<CellState>) -> InFlight {
        state.stats.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight {
            state,
            answered: false,
        }
    }

    fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state.stats.in_flight.fetch_sub(1, Ordering::SeqCst);
        if !self.answered {
            self.state.stats.abandoned.fetch_add(1, Ordering::SeqCst);
            eprintln!(
                "cell {}: request abandoned before its answer (connection closed)",
                self.state.id
            );
        }
    }
}

/// Binds a demo cell listener (the caller prints the ready line).
pub async fn bind(listen: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cell: cannot listen on {listen}: {e}"))
}

pub fn serve(
    id: String,
    listener: TcpListener,
    git: Option<Arc<GitRepos>>,
    learn: Option<Arc<LearnService>>,
) {
    let state = Arc::new(CellState {
        id,
        stats: CellStats::default(),
        git,
        learn,
        maintenance: Mutex::new((Vec::new(), 0)),
    });
    crate::http::spawn_accept_loop(listener, move |req, peer| handle(state.clone(), req, peer));
}

/// `POST /_maintenance` `{"path_prefixes": ["/acme"], "retry_after": 5}`:
/// sets maintenance mode (an empty list ends it).
async fn maintenance(state: &CellState, req: Request<Incoming>) -> Response<Body> {
    use http_body_util::BodyExt;
    let bytes = match http_body_util::Limited::new(req.into_body(), 1 << 16)
        .collect()
        .await
    {
        Ok(c) => c.to_bytes(),
        Err(e) => return bad_request(state, format!("cannot read body: {e}")),
    };
    let parsed: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => return bad_request(state, format!("maintenance: invalid JSON: {e}")),
    };
    let prefixes: Option<Vec<String>> =
        parsed
            .get("path_prefixes")
            .and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_ascii_lowercase)
                    .collect()
            });
    let Some(prefixes) = prefixes else {
        return bad_request(
            state,
            "maintenance: path_prefixes must be a list of strings".into(),
        );
    };
    let retry_after = parsed
        .get("retry_after")
        .and_then(Value::as_u64)
        .unwrap_or(5) as u32;
    eprintln!(
        "cell {}: maintenance {prefixes:?} retry-after {retry_after}",
        state.id
    );
    *state.maintenance.lock().unwrap() = (prefixes.clone(), retry_after);
    with_cell_header(
        state,
        json_response(
            StatusCode::OK,
            &json!({"path_prefixes": prefixes, "retry_after": retry_after}),
        ),
    )
}

fn with_cell_header(state: &CellState, mut resp: Response<Body>) -> Response<Body> {
    if let Ok(v) = HeaderValue::from_str(&state.id) {
        resp.headers_mut().insert("x-demo-cell", v);
    }
    resp
}

fn bad_request(state: &CellState, msg: String) -> Response<Body> {
    with_cell_header(
        state,
        json_response(
            StatusCode::BAD_REQUEST,
            &json!({"cell": state.id, "error": msg}),
        ),
    )
}

struct Controls {
    status: StatusCode,
    location: Option<HeaderValue>,
    delay: Duration,
    response_bytes: Option<u64>,
    extra_header: Option<(HeaderName, HeaderValue)>,
}

/// The controls a request asks for: `x-demo-*` headers; the status also as
/// `x-demo-status=N` in the query, for callers that set no headers (the
/// router's health probe, whose `health_path` may carry a query).
fn parse_controls(headers: &hyper::HeaderMap, query: &str) -> Result<Controls, String> {
    let status_asked = header_str(headers, "x-demo-status")
        .map(str::to_string)
        .or_else(|| query_param(query, "x-demo-status"));
    let status = match status_asked.as_deref() {
        None => StatusCode::OK,
        Some(s) => s
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|c| (200..=999).contains(c))
            .and_then(|c| StatusCode::from_u16(c).ok())
            .ok_or_else(|| format!("x-demo-status: bad status {s:?}"))?,
    };
    let location = headers.get("x-demo-location").cloned();
    let delay = match header_str(headers, "x-demo-delay-ms") {
        None => Duration::ZERO,
        Some(s) => {
            let ms: u64 = s
                .trim()
                .parse()
                .map_err(|_| format!("x-demo-delay-ms: bad number {s:?}"))?;
            Duration::from_millis(ms.min(MAX_DELAY_MS))
        }
    };
    let response_bytes = match header_str(headers, "x-demo-response-bytes") {
        None => None,
        Some(s) => Some(
            s.trim()
                .parse::<u64>()
                .map_err(|_| format!("x-demo-response-bytes: bad number {s:?}"))?,
        ),
    };
    let extra_header = match header_str(headers, "x-demo-response-header") {
        None => None,
        Some(s) => {
            let (name, value) = s.split_once(':').ok_or_else(|| {
                format!("x-demo-response-header: want \"Name: value\", got {s:?}")
            })?;
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| format!("x-demo-response-header: bad name {name:?}"))?;
            let value = HeaderValue::from_str(value.trim())
                .map_err(|_| format!("x-demo-response-header: bad value {value:?}"))?;
            Some((name, value))
        }
    };
    Ok(Controls {
        status,
        location,
        delay,
        response_bytes,
        extra_header,
    })
}

async fn handle(state: Arc<CellState>, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
    let path = req.uri().path().to_string();
    if let Some(service) = &state.learn {
        let query = req.uri().query().unwrap_or("");
        match (req.method(), path.as_str()) {
            (&Method::GET, router_core::resolve::learn::LEARN_PATH) => {
                return learn(&state, service, query).await;
            }
            (&Method::POST, "/_learn/mode") => {
                let mode = query_param(query, "set").unwrap_or_else(|| "ok".into());
                let delay = query_param(query, "delay_ms")
                    .and_then(|d| d.parse().ok())
                    .unwrap_or(0);
                *service.mode.lock().unwrap() = (mode.clone(), delay);
                return with_cell_header(
                    &state,
                    json_response(StatusCode::OK, &json!({"mode": mode, "delay_ms": delay})),
                );
            }
            _ => {}
        }
    }
    match (req.method(), path.as_str()) {
        (&Method::POST, "/_maintenance") => return maintenance(&state, req).await,
        (&Method::GET, "/_stats") => {
            let body = state.stats.to_json(&state.id);
            return with_cell_header(&state, json_response(StatusCode::OK, &body));
        }
        // The router's scheduled health probe (GITLAB_CELLS health_path).
        (&Method::GET, "/-/readiness") => {
            state.stats.health_probes.fetch_add(1, Ordering::SeqCst);
            let body = json!({"status": "ok", "cell": state.id});
            return with_cell_header(&state, json_response(StatusCode::OK, &body));
        }
        (&Method::POST, "/_stats/reset") => {
            state.stats.reset();
            let body = state.stats.to_json(&state.id);
            return with_cell_header(&state, json_response(StatusCode::OK, &body));
        }
        _ => {}
    }

    state.stats.requests.fetch_add(1, Ordering::SeqCst);
    let method = req.method().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let headers = headers_json(req.headers());
    {
        crate::http::push_capped(
            &mut state.stats.last_requests.lock().unwrap(),
            json!({"method": method, "path": path, "query": query, "headers": headers.clone()}),
        );
    }
    eprintln!(
        "cell {}: {method} {path}{}{query}",
        state.id,
        if query.is_empty() { "" } else { "?" }
    );

    let refused_for = {
        let (prefixes, retry_after) = &*state.maintenance.lock().unwrap();
        let lower = path.to_ascii_lowercase();
        prefixes
            .iter()
            .any(|p| lower.starts_with(p.as_str()))
            .then_some(*retry_after)
    };
    if let Some(retry_after) = refused_for {
        state
            .stats
            .maintenance_refused
            .fetch_add(1, Ordering::SeqCst);
        let mut resp = json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"cell": state.id, "error": "maintenance", "path": path}),
        );
        if let Ok(v) = HeaderValue::from_str(&retry_after.to_string()) {
            resp.headers_mut().insert("retry-after", v);
        }
        return with_cell_header(&state, resp);
    }
    if is_websocket_upgrade(&req) {
        return websocket(state, req, headers);
    }
    let in_flight = InFlight::new(state.clone());

    let git_path = match &state.git {
        Some(git) => git.classify(&path),
        None => GitPath::NotGit,
    };
    if git_path != GitPath::NotGit {
        let resp = match (git_path, &state.git) {
            (GitPath::Repo(path_info), Some(git)) => git.serve(&path_info, req, peer).await,
            _ => crate::git_http::not_found(),
        };
        in_flight.answered();
        return with_cell_header(&state, resp);
    }

    let controls = match parse_controls(req.headers(), &query) {
        Ok(c) => c,
        Err(e) => {
            in_flight.answered();
            return bad_request(&state, e);
        }
    };

    // Hash the request body as it streams in: constant memory.
    let mut body = req.into_body();
    let mut hasher = Sha256::new();
    let mut body_bytes: u64 = 0;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    hasher.update(&data);
                    body_bytes += data.len() as u64;
                }
            }
            Err(e) => {
                eprintln!("cell {}: error reading request body: {e}", state.id);
                in_flight.answered();
                return bad_request(&state, format!("error reading request body: {e}"));
            }
        }
    }
    let body_sha256 = hex::encode(hasher.finalize());

    if !controls.delay.is_zero() {
        tokio::time::sleep(controls.delay).await;
    }

    let no_body = controls.status.is_informational()
        || controls.status == StatusCode::NO_CONTENT
        || controls.status == StatusCode::NOT_MODIFIED;
    let mut resp = if no_body {
        Response::new(empty())
    } else if let Some(n) = controls.response_bytes {
        let mut body = PatternBody::new(n);
        body.cut_counter = Some(state.clone());
        let mut r = Response::new(body.boxed());
        r.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("application/octet-stream"),
        );
        r.headers_mut()
            .insert("content-length", HeaderValue::from(n));
        r
    } else {
        json_response(
            StatusCode::OK,
            &json!({
                "cell": state.id,
                "method": method,
                "path": path,
                "query": query,
                "headers": headers,
                "body_bytes": body_bytes,
                "body_sha256": body_sha256,
            }),
        )
    };
    *resp.status_mut() = controls.status;
    // Like a cell of GitLab: the sign-in form starts a session whose cookie
    // names the cell, so the router's session rule sends the form's POST
    // back here.
    if method == "GET" && path == "/users/sign_in" {
        let n = state.stats.requests.load(Ordering::SeqCst);
        let secret = hex::encode(Sha256::digest(format!("{}-{n}", state.id)));
        let cookie = format!(
            "_gitlab_session=cell-{}-{}; path=/; HttpOnly",
            state.id,
            &secret[..32]
        );
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            resp.headers_mut().append("set-cookie", v);
        }
    }
    if let Some(loc) = controls.location {
        resp.headers_mut().insert("location", loc);
    }
    if let Some((name, value)) = controls.extra_header {
        resp.headers_mut().append(name, value);
    }
    in_flight.answered();
    with_cell_header(&state, resp)
}

// ---------------------------------------------------------------------------
// Deterministic response body: byte i = (i % 251) as u8, generated in chunks.

fn pattern() -> &'static Bytes {
    static PATTERN: OnceLock<Bytes> = OnceLock::new();
    PATTERN.get_or_init(|| {
        let v: Vec<u8> = (0..CHUNK + 251).map(|i| (i % 251) as u8).collect();
        Bytes::from(v)
    })
}

pub struct PatternBody {
    offset: u64,
    remaining: u64,
    /// Counts the body in `responses_cut` when dropped before its end.
    cut_counter: Option<Arc<CellState>>,
}

impl PatternBody {
    pub fn new(len: u64) -> Self {
        PatternBody {
            offset: 0,
            remaining: len,
            cut_counter: None,
        }
    }
}

impl Drop for PatternBody {
    fn drop(&mut self) {
        if let (Some(state), true) = (&self.cut_counter, self.remaining > 0) {
            state.stats.responses_cut.fetch_add(1, Ordering::SeqCst);
            eprintln!(
                "cell {}: response body cut with {} bytes unsent",
                state.id, self.remaining
            );
        }
    }
}

impl hyper::body::Body for PatternBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let n = self.remaining.min(CHUNK as u64) as usize;
        let start = (self.offset % 251) as usize;
        let chunk = pattern().slice(start..start + n);
        self.offset += n as u64;
        self.remaining -= n as u64;
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

// ---------------------------------------------------------------------------
// WebSocket echo.

fn is_websocket_upgrade(req: &Request<Incoming>) -> bool {
    req.method() == Method::GET
        && header_str(req.headers(), "upgrade")
            .is_some_and(|u| u.to_ascii_lowercase().contains("websocket"))
        && req.headers().contains_key("sec-websocket-key")
}

fn websocket(state: Arc<CellState>, mut req: Request<Incoming>, headers: Value) -> Response<Body> {
    let key = req.headers()["sec-websocket-key"].as_bytes().to_vec();
    let protocol = header_str(req.headers(), "sec-websocket-protocol")
        .and_then(|p| p.split(',').next())
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty());
    let path = req.uri().path().to_string();
    let on_upgrade = hyper::upgrade::on(&mut req);
    let greeting = json!({"cell": state.id, "path": path, "headers": headers}).to_string();
    let st = state.clone();
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                st.stats.websockets.fetch_add(1, Ordering::SeqCst);
                st.stats.websockets_open.fetch_add(1, Ordering::SeqCst);
                let ws =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                let end = websocket_echo(ws, greeting).await;
                if let Err(e) = &end.error {
                    eprintln!("cell {}: websocket ended with error: {e}", st.id);
                }
                st.stats.websockets_open.fetch_sub(1, Ordering::SeqCst);
                crate::http::push_capped(
                    &mut st.stats.websocket_closes.lock().unwrap(),
                    ws_end(&end),
                );
            }
            Err(e) => eprintln!("cell {}: websocket upgrade failed: {e}", st.id),
        }
    });
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert("upgrade", HeaderValue::from_static("websocket"));
    h.insert("connection", HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&derive_accept_key(&key)) {
        h.insert("sec-websocket-accept", v);
    }
    if let Some(p) = protocol.and_then(|p| HeaderValue::from_str(&p).ok()) {
        h.insert("sec-websocket-protocol", p);
    }
    with_cell_header(&state, resp)
}

/// How one WebSocket echo session ended.
struct WsEnd {
    /// `"peer"` (the other side sent a close frame first), `"cell"` (the
    /// cell closed on `close:<code>`) or `"none"` (the connection ended
    /// without a close frame).
    by: &'static str,
    code: Option<u16>,
    reason: String,
    error: Result<(), tokio_tungstenite::tungstenite::Error>,
}

/// `{"by","code","reason","error"}` for `/_stats`' `websocket_closes`.
fn ws_end(end: &WsEnd) -> Value {
    json!({
        "by": end.by,
        "code": end.code,
        "reason": end.reason,
        "error": end.error.as_ref().err().map(|e| e.to_string()),
    })
}

async fn websocket_echo<S>(mut ws: WebSocketStream<S>, greeting: String) -> WsEnd
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut end = WsEnd {
        by: "none",
        code: None,
        reason: String::new(),
        error: Ok(()),
    };
    end.error = echo_loop(&mut ws, greeting, &mut end).await;
    end
}

async fn echo_loop<S>(
    ws: &mut WebSocketStream<S>,
    greeting: String,
    end: &mut WsEnd,
) -> Result<(), tokio_tungstenite::tungstenite::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    ws.send(Message::text(greeting)).await?;
    while let Some(msg) = ws.next().await {
        match msg? {
            Message::Text(t) => {
                if let Some(code) = t.as_str().strip_prefix("close:") {
                    match code.trim().parse::<u16>() {
                        Ok(code) => {
                            end.by = "cell";
                            end.code = Some(code);
                            end.reason = "closed on request".into();
                            ws.close(Some(CloseFrame {
                                code: CloseCode::from(code),
                                reason: "closed on request".into(),
                            }))
                            .await?;
                        }
                        Err(_) => {
                            ws.send(Message::text(format!("bad close code {code:?}")))
                                .await?
                        }
                    }
                } else {
                    ws.send(Message::Text(t)).await?;
                }
            }
            Message::Binary(b) => ws.send(Message::Binary(b)).await?,
            // The peer's close (or its answer to ours): tungstenite answers it.
            Message::Close(frame) if end.by == "none" => {
                end.by = "peer";
                end.code = frame.as_ref().map(|f| u16::from(f.code));
                end.reason = frame.map(|f| f.reason.to_string()).unwrap_or_default();
            }
            // Pings are answered by tungstenite.
            _ => {}
        }
    }
    Ok(())
}
