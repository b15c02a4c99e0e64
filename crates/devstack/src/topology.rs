//! The local Topology Service: `POST /v1/classify` (SPEC §5) plus the
//! operator/test endpoints `/_stats` and `/_faults`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL};
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

use router_core::classify::CLAIM_TYPES;

use crate::config::{normalize_route, Config, TopologySection};
use crate::http::{header_str, headers_json, json_response, serve_connection, Body};

const MAX_BODY: usize = 1 << 20;

// ---------------------------------------------------------------------------
// The cell directory and the classify logic (pure, unit-tested).

#[derive(Debug, Clone)]
pub struct Cell {
    pub id: u64,
    pub address: String,
    pub registry_address: Option<String>,
    pub session_prefix: String,
    pub cache_tags: Vec<String>,
    /// Normalized route entries.
    pub routes: Vec<String>,
    pub organization_paths: HashSet<String>,
    pub organization_ids: HashSet<u64>,
    pub project_ids: HashSet<u64>,
    pub namespace_ids: HashSet<u64>,
    pub usernames: HashSet<String>,
    /// Normalized redirect route entries.
    pub redirect_routes: Vec<String>,
    pub user_ids: HashSet<u64>,
    pub snippet_ids: HashSet<u64>,
}

#[derive(Debug, Clone)]
pub struct Directory {
    pub cells: Vec<Cell>,
}

/// What a valid classify request resolved to.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Found {
        cell: usize,
        matched: Value,
        type_tag: String,
    },
    NotFound {
        message: String,
        type_tags: Vec<String>,
    },
}

/// The claim keys classify accepts: the camelCase names of the core's
/// [`CLAIM_TYPES`], so the router and the dev stack cannot disagree. Keys
/// ending in `Id` take decimal ids; keys with no directory data here
/// (`email`, `sshKey`, …) are valid and answer not found.
fn claim_keys() -> impl Iterator<Item = &'static str> {
    CLAIM_TYPES.iter().map(|(_, camel)| *camel)
}

enum ClaimValue {
    Text(String),
    Id(u64),
}

impl Directory {
    /// Builds the directory; `bound` gives the real address of demo cells
    /// started by `devstack up`, used for cells without an `address`.
    pub fn new(cfg: &Config, bound: &HashMap<u64, SocketAddr>) -> Result<Directory, String> {
        let mut cells = Vec::new();
        for c in &cfg.cells {
            let address = match (&c.address, bound.get(&c.id)) {
                (Some(a), _) => a.clone(),
                (None, Some(b)) => b.to_string(),
                (None, None) => {
                    return Err(format!(
                        "cell {} has no address (only `devstack up` may omit it, for cells with `listen`)",
                        c.id
                    ))
                }
            };
            cells.push(Cell {
                id: c.id,
                address,
                registry_address: c.registry_address.clone(),
                session_prefix: c.session_prefix(),
                cache_tags: c.cache_tags.clone(),
                routes: c.routes.iter().map(|r| normalize_route(r)).collect(),
                organization_paths: c
                    .organization_paths
                    .iter()
                    .map(|s| s.to_lowercase())
                    .collect(),
                organization_ids: c.organization_ids.iter().copied().collect(),
                project_ids: c.project_ids.iter().copied().collect(),
                namespace_ids: c.namespace_ids.iter().copied().collect(),
                usernames: c.usernames.iter().map(|s| s.to_lowercase()).collect(),
                redirect_routes: c
                    .redirect_routes
                    .iter()
                    .map(|r| normalize_route(r))
                    .collect(),
                user_ids: c.user_ids.iter().copied().collect(),
                snippet_ids: c.snippet_ids.iter().copied().collect(),
            });
        }
        Ok(Directory { cells })
    }

    /// Classifies a parsed request body. `Err` is a malformed request (400).
    pub fn classify(&self, body: &Value) -> Result<Answer, String> {
        let obj = body
            .as_object()
            .ok_or("the request body must be a JSON object")?;
        for key in obj.keys() {
            if !matches!(key.as_str(), "type" | "value" | "claims" | "target") {
                return Err(format!("unknown field {key:?}"));
            }
        }
        match obj.get("target") {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if t == "web" || t == "registry" => {}
            Some(other) => {
                return Err(format!(
                    "target must be \"web\" or \"registry\", got {other}"
                ))
            }
        }
        match (obj.get("type"), obj.get("claims")) {
            (Some(_), Some(_)) => Err("give either \"type\" or \"claims\", not both".into()),
            (None, None) => Err("missing \"type\" or \"claims\"".into()),
            (Some(t), None) => self.classify_typed(t, obj.get("value")),
            (None, Some(c)) => {
                if obj.contains_key("value") {
                    return Err("\"value\" is only valid with \"type\"".into());
                }
                self.classify_claims(c)
            }
        }
    }

    fn classify_typed(&self, t: &Value, value: Option<&Value>) -> Result<Answer, String> {
        let t = t.as_str().ok_or("\"type\" must be a string")?;
        let type_tag = format!("classify-{}", t.to_lowercase().replace('_', "-"));
        let value_str = || -> Result<&str, String> {
            match value {
                Some(Value::String(s)) => Ok(s.as_str()),
                Some(other) => Err(format!("{t}: \"value\" must be a string, got {other}")),
                None => Err(format!("{t}: missing \"value\"")),
            }
        };
        let mut matched = Map::new();
        matched.insert("type".into(), Value::String(t.to_string()));
        if let Some(v) = value {
            matched.insert("value".into(), v.clone());
        }
        let found = |cell: Option<usize>, what: String| -> Answer {
            match cell {
                Some(cell) => Answer::Found {
                    cell,
                    matched: Value::Object(matched.clone()),
                    type_tag: type_tag.clone(),
                },
                None => Answer::NotFound {
                    message: what,
                    type_tags: vec![type_tag.clone()],
                },
            }
        };
        match t {
            "FIRST_CELL" => Ok(found(
                if self.cells.is_empty() { None } else { Some(0) },
                "FIRST_CELL: the topology has no cells".into(),
            )),
            "SESSION_PREFIX" => {
                let v = value_str()?;
                Ok(found(
                    self.cells.iter().position(|c| c.session_prefix == v),
                    format!("SESSION_PREFIX: no cell has session prefix {v:?}"),
                ))
            }
            "CELL_ID" => {
                let v = value_str()?;
                let id: u64 = v
                    .parse()
                    .map_err(|_| format!("CELL_ID: value must be a decimal cell id, got {v:?}"))?;
                Ok(found(
                    self.cells.iter().position(|c| c.id == id),
                    format!("CELL_ID: no cell has id {id}"),
                ))
            }
            other => Err(format!(
                "unknown classify type {other:?} (expected FIRST_CELL, SESSION_PREFIX or CELL_ID)"
            )),
        }
    }

    fn classify_claims(&self, claims: &Value) -> Result<Answer, String> {
        let list = claims.as_array().ok_or("\"claims\" must be an array")?;
        if list.is_empty() {
            return Err("\"claims\" must not be empty".into());
        }
        // Validate every claim before matching any.
        let mut parsed = Vec::with_capacity(list.len());
        for (i, claim) in list.iter().enumerate() {
            let obj = claim
                .as_object()
                .ok_or_else(|| format!("claims[{i}] must be an object"))?;
            let keys = || claim_keys().collect::<Vec<_>>();
            if obj.len() != 1 {
                return Err(format!(
                    "claims[{i}] must have exactly one key among {:?}",
                    keys()
                ));
            }
            let (key, value) = obj.iter().next().expect("one entry");
            let Some(key) = claim_keys().find(|k| k == key) else {
                return Err(format!(
                    "claims[{i}]: unknown claim key {key:?} (expected one of {:?})",
                    keys()
                ));
            };
            let v = if key.ends_with("Id") {
                let id = match value {
                    Value::String(s) => s.parse::<u64>().ok(),
                    Value::Number(n) => n.as_u64(),
                    _ => None,
                };
                ClaimValue::Id(id.ok_or_else(|| {
                    format!("claims[{i}]: {key} must be a decimal id, got {value}")
                })?)
            } else {
                ClaimValue::Text(
                    value
                        .as_str()
                        .ok_or_else(|| format!("claims[{i}]: {key} must be a string"))?
                        .to_string(),
                )
            };
            parsed.push((key, v, claim));
        }
        for (key, value, claim) in &parsed {
            if let Some(cell) = self.match_claim(key, value) {
                return Ok(Answer::Found {
                    cell,
                    matched: (*claim).clone(),
                    type_tag: claim_tag(key),
                });
            }
        }
        let mut type_tags: Vec<String> = Vec::new();
        for (key, _, _) in &parsed {
            let tag = claim_tag(key);
            if !type_tags.contains(&tag) {
                type_tags.push(tag);
            }
        }
        let described: Vec<String> = list.iter().map(|c| c.to_string()).collect();
        Ok(Answer::NotFound {
            message: format!("no cell owns any of the claims {}", described.join(", ")),
            type_tags,
        })
    }

    fn match_claim(&self, key: &str, value: &ClaimValue) -> Option<usize> {
        match (key, value) {
            ("route", ClaimValue::Text(route)) => self.match_route(route, |c| &c.routes),
            ("redirectRoute", ClaimValue::Text(route)) => {
                self.match_route(route, |c| &c.redirect_routes)
            }
            ("organizationPath", ClaimValue::Text(p)) => {
                let p = normalize_route(p);
                self.cells
                    .iter()
                    .position(|c| c.organization_paths.contains(&p))
            }
            ("username", ClaimValue::Text(u)) => {
                let u = u.to_lowercase();
                self.cells.iter().position(|c| c.usernames.contains(&u))
            }
            ("organizationId", ClaimValue::Id(id)) => self
                .cells
                .iter()
                .position(|c| c.organization_ids.contains(id)),
            ("projectId", ClaimValue::Id(id)) => {
                self.cells.iter().position(|c| c.project_ids.contains(id))
            }
            ("namespaceId", ClaimValue::Id(id)) => {
                self.cells.iter().position(|c| c.namespace_ids.contains(id))
            }
            ("userId", ClaimValue::Id(id)) => {
                self.cells.iter().position(|c| c.user_ids.contains(id))
            }
            ("snippetId", ClaimValue::Id(id)) => {
                self.cells.iter().position(|c| c.snippet_ids.contains(id))
            }
            _ => None,
        }
    }

    /// A route matches an entry equal to it or starting with `entry/`; the
    /// longest entry wins.
    fn match_route(&self, route: &str, entries: impl Fn(&Cell) -> &Vec<String>) -> Option<usize> {
        let route = normalize_route(route);
        if route.is_empty() {
            return None;
        }
        let mut best: Option<(usize, usize)> = None;
        for (i, cell) in self.cells.iter().enumerate() {
            for entry in entries(cell) {
                let hit = route == *entry
                    || (route.len() > entry.len()
                        && route.starts_with(entry.as_str())
                        && route.as_bytes()[entry.len()] == b'/');
                if hit && best.is_none_or(|(_, len)| entry.len() > len) {
                    best = Some((i, entry.len()));
                }
            }
        }
        best.map(|(i, _)| i)
    }
}

/// `organizationPath` → `classify-claim-organization-path`.
fn claim_tag(key: &str) -> String {
    let mut out = String::from("classify-claim-");
    for ch in key.chars() {
        if ch.is_ascii_uppercase() {
            out.push('-');
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Faults and stats.

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Faults {
    pub latency_ms: u64,
    pub error_rate: f64,
    pub error_status: u16,
    pub fail_next: u64,
    pub not_found_all: bool,
    pub refuse_connections: bool,
    pub cache_control: Option<String>,
    /// Answer every classify call with `307 Temporary Redirect` to this URL
    /// (a router must not follow it: issue 14).
    pub redirect_to: Option<String>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            latency_ms: 0,
            error_rate: 0.0,
            error_status: 503,
            fail_next: 0,
            not_found_all: false,
            refuse_connections: false,
            cache_control: None,
            redirect_to: None,
        }
    }
}

impl Faults {
    /// Applies a partial update: only the given fields change. All-or-nothing.
    pub fn apply(&mut self, patch: &Value) -> Result<(), String> {
        let obj = patch.as_object().ok_or("faults must be a JSON object")?;
        let mut next = self.clone();
        for (key, v) in obj {
            let bad = || format!("bad value for {key}: {v}");
            match key.as_str() {
                "latency_ms" => next.latency_ms = v.as_u64().ok_or_else(bad)?,
                "error_rate" => {
                    let r = v.as_f64().ok_or_else(bad)?;
                    if !(0.0..=1.0).contains(&r) {
                        return Err(format!("error_rate must be within 0..=1, got {r}"));
                    }
                    next.error_rate = r;
                }
                "error_status" => {
                    let s = v
                        .as_u64()
                        .filter(|s| (200..=599).contains(s))
                        .ok_or_else(bad)?;
                    next.error_status = s as u16;
                }
                "fail_next" => next.fail_next = v.as_u64().ok_or_else(bad)?,
                "not_found_all" => next.not_found_all = v.as_bool().ok_or_else(bad)?,
                "refuse_connections" => next.refuse_connections = v.as_bool().ok_or_else(bad)?,
                "cache_control" => {
                    next.cache_control = match v {
                        Value::Null => None,
                        Value::String(s) => {
                            HeaderValue::from_str(s).map_err(|_| bad())?;
                            Some(s.clone())
                        }
                        _ => return Err(bad()),
                    }
                }
                "redirect_to" => {
                    next.redirect_to = match v {
                        Value::Null => None,
                        Value::String(s) => {
                            HeaderValue::from_str(s).map_err(|_| bad())?;
                            Some(s.clone())
                        }
                        _ => return Err(bad()),
                    }
                }
                other => return Err(format!("unknown fault {other:?}")),
            }
        }
        *self = next;
        Ok(())
    }
}

#[derive(Default)]
struct Stats {
    classify_calls: u64,
    by_type: BTreeMap<String, u64>,
    last_requests: VecDeque<Value>,
}

impl Stats {
    fn to_json(&self) -> Value {
        json!({
            "classify_calls": self.classify_calls,
            "by_type": self.by_type,
            "last_requests": self.last_requests,
        })
    }
}

struct FaultState {
    faults: Faults,
    rng: u64,
}

impl FaultState {
    fn next_unit(&mut self) -> f64 {
        // xorshift64*: plenty for a fault probability.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

// ---------------------------------------------------------------------------
// The service.

pub struct Topology {
    dir: Directory,
    section: TopologySection,
    faults: Mutex<FaultState>,
    stats: Mutex<Stats>,
    refuse_tx: watch::Sender<bool>,
    bound_tx: watch::Sender<bool>,
    /// Open connections on the classify listener.
    live: AtomicUsize,
}

/// Decrements the live-connection count when a classify connection ends.
struct LiveGuard(Arc<Topology>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

pub struct Started {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
}

/// Binds the classify and admin listeners and starts serving.
pub async fn start(
    dir: Directory,
    section: TopologySection,
    listen: SocketAddr,
    admin_listen: SocketAddr,
    faults: Faults,
) -> Result<Started, String> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("topology: cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let admin_listener = TcpListener::bind(admin_listen)
        .await
        .map_err(|e| format!("topology: cannot listen on {admin_listen} (admin): {e}"))?;
    let admin = admin_listener.local_addr().map_err(|e| e.to_string())?;

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9E37_79B9_7F4A_7C15)
        | 1;
    let (refuse_tx, refuse_rx) = watch::channel(faults.refuse_connections);
    let (bound_tx, _) = watch::channel(true);
    let topo = Arc::new(Topology {
        dir,
        section,
        faults: Mutex::new(FaultState { faults, rng: seed }),
        stats: Mutex::new(Stats::default()),
        refuse_tx,
        bound_tx,
        live: AtomicUsize::new(0),
    });

    tokio::spawn(classify_accept_loop(
        topo.clone(),
        listener,
        addr,
        refuse_rx,
    ));
    let t = topo.clone();
    crate::http::spawn_accept_loop(admin_listener, move |req, _peer| {
        handle(t.clone(), req, true)
    });
    if topo.faults.lock().unwrap().faults.refuse_connections
        && !topo.wait_listener_state(true).await
    {
        return Err("topology: could not stop listening for refuse_connections".into());
    }
    Ok(Started { addr, admin })
}

/// Accepts classify connections; while `refuse_connections` is set the
/// listener is closed (connects are refused) and open connections are
/// dropped; afterwards it is bound again on the same address.
async fn classify_accept_loop(
    topo: Arc<Topology>,
    listener: TcpListener,
    addr: SocketAddr,
    mut refuse_rx: watch::Receiver<bool>,
) {
    let mut listener = Some(listener);
    loop {
        let refuse = *refuse_rx.borrow_and_update();
        if refuse {
            if listener.take().is_some() {
                eprintln!("topology: refusing connections on {addr}");
            }
            topo.bound_tx.send_replace(false);
            let _ = refuse_rx.changed().await;
            continue;
        }
        let Some(l) = &listener else {
            match TcpListener::bind(addr).await {
                Ok(l) => {
                    eprintln!("topology: accepting connections on {addr} again");
                    listener = Some(l);
                    topo.bound_tx.send_replace(true);
                }
                Err(e) => {
                    eprintln!("topology: cannot re-bind {addr}: {e}; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                        _ = refuse_rx.changed() => {}
                    }
                }
            }
            continue;
        };
        tokio::select! {
            r = l.accept() => match r {
                Ok((stream, peer)) => {
                    let t = topo.clone();
                    t.live.fetch_add(1, Ordering::SeqCst);
                    let guard = LiveGuard(t.clone());
                    let cancel = refuse_rx.clone();
                    tokio::spawn(async move {
                        serve_connection(
                            stream,
                            peer,
                            move |req, _peer| handle(t.clone(), req, false),
                            Some(cancel),
                        )
                        .await;
                        drop(guard);
                    });
                }
                Err(e) => {
                    eprintln!("topology: accept error: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = refuse_rx.changed() => {}
        }
    }
}

fn grpc_code(status: u16) -> u16 {
    match status {
        400 => 3,
        401 => 16,
        403 => 7,
        404 => 5,
        409 => 6,
        429 => 8,
        500 => 13,
        501 => 12,
        503 => 14,
        504 => 4,
        _ => 2,
    }
}

fn error_response(status: u16, message: &str) -> Response<Body> {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(
        status,
        &json!({"code": grpc_code(status.as_u16()), "message": message, "details": []}),
    );
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn set_header(resp: &mut Response<Body>, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

async fn handle(topo: Arc<Topology>, req: Request<Incoming>, admin: bool) -> Response<Body> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let known = |p: &str| -> bool {
        matches!(
            p,
            "/_stats" | "/_stats/reset" | "/_faults" | "/_faults/reset" | "/healthz"
        ) || (!admin && p == "/v1/classify")
    };
    match (method.clone(), path.as_str()) {
        (Method::POST, "/v1/classify") if !admin => topo.classify_request(req).await,
        (Method::GET, "/healthz") => json_response(StatusCode::OK, &json!({"status": "ok"})),
        (Method::GET, "/_stats") => {
            let stats = topo.stats.lock().unwrap().to_json();
            json_response(StatusCode::OK, &stats)
        }
        (Method::POST, "/_stats/reset") => {
            *topo.stats.lock().unwrap() = Stats::default();
            json_response(StatusCode::OK, &Stats::default().to_json())
        }
        (Method::GET, "/_faults") => {
            let f = topo.faults.lock().unwrap().faults.clone();
            json_response(StatusCode::OK, &json!(f))
        }
        (Method::POST, "/_faults") | (Method::POST, "/_faults/reset") => {
            let patch = if path == "/_faults/reset" {
                None
            } else {
                let bytes = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                    Ok(c) => c.to_bytes(),
                    Err(e) => return error_response(400, &format!("cannot read body: {e}")),
                };
                match serde_json::from_slice::<Value>(&bytes) {
                    Ok(v) => Some(v),
                    Err(e) => return error_response(400, &format!("faults: invalid JSON: {e}")),
                }
            };
            topo.update_faults(patch.as_ref()).await
        }
        (_, p) if known(p) => error_response(405, &format!("method {method} not allowed on {p}")),
        (_, p) => error_response(404, &format!("no such endpoint: {method} {p}")),
    }
}

impl Topology {
    async fn update_faults(&self, patch: Option<&Value>) -> Response<Body> {
        let faults = {
            let mut st = self.faults.lock().unwrap();
            match patch {
                None => st.faults = Faults::default(),
                Some(p) => {
                    if let Err(e) = st.faults.apply(p) {
                        return error_response(400, &e);
                    }
                }
            }
            st.faults.clone()
        };
        eprintln!("topology: faults now {}", json!(faults));
        let refuse = faults.refuse_connections;
        self.refuse_tx.send_replace(refuse);
        // Answer only once the classify listener is in the wanted state (and,
        // when refusing, every open classify connection is gone), so a test
        // can connect, or fail to, right after this returns.
        if !self.wait_listener_state(refuse).await {
            return error_response(
                500,
                "the classify listener did not reach the requested state within 5 s",
            );
        }
        json_response(StatusCode::OK, &json!(faults))
    }

    async fn wait_listener_state(&self, refuse: bool) -> bool {
        let mut bound_rx = self.bound_tx.subscribe();
        let wait = async {
            let _ = bound_rx.wait_for(|bound| *bound != refuse).await;
            while refuse && self.live.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .is_ok()
    }

    /// Returns the status of an injected failure for this call, if any.
    fn injected_failure(&self) -> Option<(u16, &'static str)> {
        let mut st = self.faults.lock().unwrap();
        if st.faults.fail_next > 0 {
            st.faults.fail_next -= 1;
            return Some((st.faults.error_status, "fail_next"));
        }
        let rate = st.faults.error_rate;
        if rate > 0.0 && st.next_unit() < rate {
            return Some((st.faults.error_status, "error_rate"));
        }
        None
    }

    async fn classify_request(&self, req: Request<Incoming>) -> Response<Body> {
        let started = Instant::now();
        let (parts, body) = req.into_parts();
        let bytes = match Limited::new(body, MAX_BODY).collect().await {
            Ok(c) => c.to_bytes(),
            Err(e) => return error_response(400, &format!("cannot read request body: {e}")),
        };
        let parsed = serde_json::from_slice::<Value>(&bytes);
        let body_json = match &parsed {
            Ok(v) => v.clone(),
            Err(_) => Value::String(String::from_utf8_lossy(&bytes).into_owned()),
        };
        let type_key = match &parsed {
            Ok(Value::Object(o)) => match (o.get("type"), o.get("claims")) {
                (Some(Value::String(t)), _) => t.clone(),
                (None, Some(_)) => "CLAIMS".to_string(),
                _ => "INVALID".to_string(),
            },
            _ => "INVALID".to_string(),
        };
        {
            let mut stats = self.stats.lock().unwrap();
            stats.classify_calls += 1;
            *stats.by_type.entry(type_key).or_insert(0) += 1;
            crate::http::push_capped(
                &mut stats.last_requests,
                json!({"body": body_json, "headers": headers_json(&parts.headers)}),
            );
        }

        let latency = self.faults.lock().unwrap().faults.latency_ms;
        if latency > 0 {
            tokio::time::sleep(Duration::from_millis(latency)).await;
        }

        let resp = self.answer(&parts.headers, parsed);
        eprintln!(
            "topology: classify {} -> {} in {} ms",
            body_json,
            resp.status().as_u16(),
            started.elapsed().as_millis()
        );
        resp
    }

    fn answer(
        &self,
        headers: &hyper::HeaderMap,
        parsed: Result<Value, serde_json::Error>,
    ) -> Response<Body> {
        if let (Some(id), Some(secret)) = (
            &self.section.access_client_id,
            &self.section.access_client_secret,
        ) {
            let ok = header_str(headers, "cf-access-client-id") == Some(id.as_str())
                && header_str(headers, "cf-access-client-secret") == Some(secret.as_str());
            if !ok {
                return error_response(
                    403,
                    "forbidden: missing or wrong CF-Access-Client-Id / CF-Access-Client-Secret",
                );
            }
        }
        let redirect = self.faults.lock().unwrap().faults.redirect_to.clone();
        if let Some(location) = redirect {
            let mut resp = error_response(307, "injected fault (redirect_to)");
            set_header(&mut resp, "location", &location);
            return resp;
        }
        if let Some((status, why)) = self.injected_failure() {
            return error_response(status, &format!("injected fault ({why})"));
        }
        let body = match parsed {
            Ok(v) => v,
            Err(e) => return error_response(400, &format!("invalid JSON body: {e}")),
        };
        let answer = match self.dir.classify(&body) {
            Ok(a) => a,
            Err(msg) => return error_response(400, &msg),
        };
        let faults = self.faults.lock().unwrap().faults.clone();
        let answer = match answer {
            Answer::Found { type_tag, .. } if faults.not_found_all => Answer::NotFound {
                message: "not found (injected fault not_found_all)".into(),
                type_tags: vec![type_tag],
            },
            a => a,
        };
        match answer {
            Answer::Found {
                cell,
                matched,
                type_tag,
            } => {
                let cell = &self.dir.cells[cell];
                let mut proxy = Map::new();
                proxy.insert("address".into(), Value::String(cell.address.clone()));
                if let Some(r) = &cell.registry_address {
                    proxy.insert("registryAddress".into(), Value::String(r.clone()));
                }
                let mut resp = json_response(
                    StatusCode::OK,
                    &json!({"action": "PROXY", "proxy": proxy, "matchedClaim": matched}),
                );
                let cc = faults
                    .cache_control
                    .as_deref()
                    .unwrap_or(&self.section.cache_control);
                set_header(&mut resp, "cache-control", cc);
                let mut tags = vec![format!("cell-{}", cell.id), type_tag];
                tags.extend(cell.cache_tags.iter().cloned());
                set_header(&mut resp, "cache-tag", &tags.join(","));
                resp
            }
            Answer::NotFound { message, type_tags } => {
                let mut resp = error_response(404, &message);
                let cc = faults
                    .cache_control
                    .as_deref()
                    .unwrap_or(&self.section.not_found_cache_control);
                set_header(&mut resp, "cache-control", cc);
                set_header(&mut resp, "cache-tag", &type_tags.join(","));
                resp
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> Directory {
        let cfg = Config::parse(include_str!("../../../devstack/topology.toml")).unwrap();
        Directory::new(&cfg, &HashMap::new()).unwrap()
    }

    fn cell_of(a: Answer) -> Option<u64> {
        match a {
            Answer::Found { cell, .. } => Some(dir().cells[cell].id),
            Answer::NotFound { .. } => None,
        }
    }

    #[test]
    fn typed() {
        let d = dir();
        let c = |v: Value| cell_of(d.classify(&v).unwrap());
        assert_eq!(c(json!({"type": "FIRST_CELL"})), Some(1));
        assert_eq!(
            c(json!({"type": "SESSION_PREFIX", "value": "cell-3"})),
            Some(3)
        );
        assert_eq!(
            c(json!({"type": "SESSION_PREFIX", "value": "cell-9"})),
            None
        );
        assert_eq!(
            c(json!({"type": "CELL_ID", "value": "2", "target": "registry"})),
            Some(2)
        );
        assert_eq!(c(json!({"type": "CELL_ID", "value": "11"})), None);
        assert!(d
            .classify(&json!({"type": "CELL_ID", "value": "x"}))
            .is_err());
        assert!(d.classify(&json!({"type": "CELL_ID", "value": 2})).is_err());
        assert!(d.classify(&json!({"type": "SESSION_PREFIX"})).is_err());
        assert!(d.classify(&json!({"type": "BOGUS"})).is_err());
        assert!(d
            .classify(&json!({"type": "FIRST_CELL", "target": "x"}))
            .is_err());
        assert!(d.classify(&json!([])).is_err());
        assert!(d.classify(&json!({})).is_err());
    }

    #[test]
    fn claims() {
        let d = dir();
        let c = |v: Value| cell_of(d.classify(&v).unwrap());
        assert_eq!(
            c(json!({"claims": [{"route": "gitlab-org/gitlab"}]})),
            Some(1)
        );
        assert_eq!(c(json!({"claims": [{"route": "gitlab-org"}]})), Some(1));
        assert_eq!(c(json!({"claims": [{"route": "gitlab-orgx"}]})), None);
        assert_eq!(
            c(json!({"claims": [{"route": "gitlab-org/cell2-moved/sub"}]})),
            Some(2)
        );
        assert_eq!(c(json!({"claims": [{"route": "ACME/Proj"}]})), Some(2));
        assert_eq!(
            c(json!({"claims": [{"route": "nope"}, {"projectId": "300"}]})),
            Some(3)
        );
        assert_eq!(c(json!({"claims": [{"namespaceId": 20}]})), Some(2));
        assert_eq!(c(json!({"claims": [{"username": "Cell3-User"}]})), Some(3));
        assert_eq!(
            c(json!({"claims": [{"organizationPath": "acme-org"}]})),
            Some(2)
        );
        assert_eq!(c(json!({"claims": [{"organizationId": "3"}]})), Some(3));
        assert!(d.classify(&json!({"claims": []})).is_err());
        assert!(d.classify(&json!({"claims": [{"bogus": "x"}]})).is_err());
        assert!(d
            .classify(&json!({"claims": [{"route": "a", "username": "b"}]}))
            .is_err());
        assert!(d
            .classify(&json!({"claims": [{"projectId": "x1"}]}))
            .is_err());
        match d
            .classify(&json!({"claims": [{"route": "zz"}, {"projectId": 9}]}))
            .unwrap()
        {
            Answer::NotFound { type_tags, .. } => assert_eq!(
                type_tags,
                vec!["classify-claim-route", "classify-claim-project-id"]
            ),
            other => panic!("{other:?}"),
        }
    }

    /// Every claim key of the core is accepted: a value gets an answer
    /// (found or not found, tagged with its own claim tag), never a 400.
    #[test]
    fn every_core_claim_key_is_accepted() {
        let d = dir();
        assert_eq!(CLAIM_TYPES.len(), 16);
        for (upper, key) in CLAIM_TYPES {
            let value = if key.ends_with("Id") {
                json!("1")
            } else {
                json!("some-value")
            };
            let answer = d
                .classify(&json!({"claims": [{*key: value}]}))
                .unwrap_or_else(|e| panic!("{upper} ({key}) rejected: {e}"));
            match answer {
                Answer::Found { type_tag, .. } => assert_eq!(type_tag, claim_tag(key)),
                Answer::NotFound { type_tags, .. } => assert_eq!(type_tags, vec![claim_tag(key)]),
            }
        }
    }

    #[test]
    fn new_claims() {
        let d = dir();
        let c = |v: Value| cell_of(d.classify(&v).unwrap());
        assert_eq!(c(json!({"claims": [{"userId": 1}]})), Some(1));
        assert_eq!(c(json!({"claims": [{"userId": "20"}]})), Some(2));
        assert_eq!(c(json!({"claims": [{"userId": "30"}]})), Some(3));
        assert_eq!(c(json!({"claims": [{"userId": "21"}]})), None);
        assert_eq!(c(json!({"claims": [{"snippetId": "1"}]})), Some(1));
        assert_eq!(c(json!({"claims": [{"snippetId": 200}]})), Some(2));
        assert_eq!(c(json!({"claims": [{"snippetId": "300"}]})), Some(3));
        assert_eq!(c(json!({"claims": [{"snippetId": "301"}]})), None);
        assert_eq!(
            c(json!({"claims": [{"redirectRoute": "Cell2-Old-Group/app"}]})),
            Some(2)
        );
        // A redirect route entry is not a route, and the other way round.
        assert_eq!(c(json!({"claims": [{"route": "cell2-old-group"}]})), None);
        assert_eq!(
            c(json!({"claims": [{"redirectRoute": "cell2-group"}]})),
            None
        );
        assert_eq!(c(json!({"claims": [{"email": "a@example.com"}]})), None);
        assert!(d.classify(&json!({"claims": [{"userId": "x"}]})).is_err());
        assert!(d.classify(&json!({"claims": [{"groupId": "1"}]})).is_err());
        assert!(d.classify(&json!({"claims": [{"email": 1}]})).is_err());
    }

    #[test]
    fn faults_patch() {
        let mut f = Faults::default();
        f.apply(&json!({"latency_ms": 5, "cache_control": "no-store"}))
            .unwrap();
        assert_eq!(f.latency_ms, 5);
        assert_eq!(f.error_status, 503);
        f.apply(&json!({"cache_control": null})).unwrap();
        assert_eq!(f.cache_control, None);
        assert!(f.apply(&json!({"error_rate": 2.0})).is_err());
        assert!(f.apply(&json!({"latency_ms": 1, "bogus": 1})).is_err());
        assert_eq!(f.latency_ms, 5);
    }

    #[test]
    fn tags() {
        assert_eq!(
            claim_tag("organizationPath"),
            "classify-claim-organization-path"
        );
        assert_eq!(claim_tag("route"), "classify-claim-route");
    }
}
