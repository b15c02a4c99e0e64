//! The service: binds the classify and admin listeners, serves
//! `POST /v1/classify`, `/healthz`, `/_stats` and `/_faults`, and applies
//! the faults (refused connections, latency, injected errors) to classify.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::directory::{Answer, Directory};
use super::faults::{FaultState, Faults, Stats};
use crate::config::TopologySection;
use crate::http::{header_str, headers_json, json_response, serve_connection, Body};

const MAX_BODY: usize = 1 << 20;

pub struct Topology {
    /// Changed by `POST /_move`.
    dir: Mutex<Directory>,
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
        dir: Mutex::new(dir),
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
            "/_stats" | "/_stats/reset" | "/_faults" | "/_faults/reset" | "/_move" | "/healthz"
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
        (Method::POST, "/_move") => {
            let bytes = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(c) => c.to_bytes(),
                Err(e) => return error_response(400, &format!("cannot read body: {e}")),
            };
            let patch = match serde_json::from_slice::<Value>(&bytes) {
                Ok(v) => v,
                Err(e) => return error_response(400, &format!("move: invalid JSON: {e}")),
            };
            let moved = topo.dir.lock().unwrap().move_claims(&patch);
            match moved {
                Ok(moved) => {
                    eprintln!("topology: moved {moved}");
                    json_response(StatusCode::OK, &moved)
                }
                Err(e) => error_response(400, &e),
            }
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

        // A strict service: trace headers it cannot read are the caller's
        // error, as a real gRPC gateway answers them.
        if let Some(t) = header_str(&parts.headers, "traceparent") {
            if !router_core::trace::is_traceparent(t) || !t.starts_with("00-") || t.len() != 55 {
                return error_response(400, "invalid traceparent");
            }
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
        let injected = self.faults.lock().unwrap().injected_failure();
        if let Some((status, why)) = injected {
            return error_response(status, &format!("injected fault ({why})"));
        }
        let body = match parsed {
            Ok(v) => v,
            Err(e) => return error_response(400, &format!("invalid JSON body: {e}")),
        };
        let dir = self.dir.lock().unwrap();
        let answer = match dir.classify(&body) {
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
                let cell = &dir.cells[cell];
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
