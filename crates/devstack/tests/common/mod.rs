//! Helpers for the devstack integration tests: start the binary on port 0,
//! read its ready lines, and talk HTTP/1.1 to it with a tiny hyper client.

#![allow(dead_code)]

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Frame, SizeHint};
use hyper::{HeaderMap, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;

pub type ReqBody = BoxBody<Bytes, Infallible>;

/// A running `devstack` process; killed on drop.
pub struct Proc {
    pub child: Child,
    pub ready: Vec<Value>,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    /// Starts `devstack ARGS` and waits for `n_ready` ready lines.
    pub fn start(args: &[&str], n_ready: usize) -> Proc {
        let log = std::env::var_os("DEVSTACK_TEST_LOG").is_some();
        let mut child = Command::new(env!("CARGO_BIN_EXE_devstack"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if log { Stdio::inherit() } else { Stdio::null() })
            .spawn()
            .expect("spawn devstack");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut p = Proc {
            child,
            ready: Vec::new(),
            lines: rx,
        };
        for _ in 0..n_ready {
            let line = p
                .lines
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("devstack {args:?} printed no ready line"));
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("ready line {line:?} is not JSON: {e}"));
            assert!(v["ready"].is_string(), "not a ready line: {line}");
            p.ready.push(v);
        }
        p
    }

    pub fn ready_of(&self, kind: &str, id: Option<&str>) -> &Value {
        self.ready
            .iter()
            .find(|v| v["ready"] == kind && id.is_none_or(|id| v["id"] == id))
            .unwrap_or_else(|| panic!("no ready line for {kind} {id:?}: {:?}", self.ready))
    }

    pub fn addr(&self) -> SocketAddr {
        self.ready[self.ready.len() - 1]["addr"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    pub fn admin(&self) -> SocketAddr {
        self.ready_of("topology", None)["admin"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Peak resident memory of the process (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }
}

impl Drop for Proc {
    /// SIGTERM first, so the process cleans up after itself (e.g. the Git
    /// repositories of `up`), then SIGKILL if it is still there after 2 s.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes a config file into a fresh temp path and returns it.
pub fn temp_config(text: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "devstack-test-{}-{}.toml",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::write(&path, text).unwrap();
    path
}

pub fn shipped_config() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../devstack/topology.toml").to_string()
}

pub fn full(data: impl Into<Bytes>) -> ReqBody {
    Full::new(data.into()).boxed()
}

pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

/// A one-connection HTTP/1.1 client.
pub struct Conn {
    sender: hyper::client::conn::http1::SendRequest<ReqBody>,
    addr: SocketAddr,
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn { sender, addr })
    }

    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: ReqBody,
    ) -> Result<hyper::Response<hyper::body::Incoming>, hyper::Error> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(body).unwrap();
        self.sender.ready().await?;
        self.sender.send_request(req).await
    }

    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: ReqBody,
    ) -> Resp {
        let resp = self.send(method, path, headers, body).await.unwrap();
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Resp {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }
}

/// One request on a fresh connection.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: ReqBody,
) -> Resp {
    Conn::open(addr)
        .await
        .unwrap()
        .request(method, path, headers, body)
        .await
}

pub async fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, &[], full("")).await
}

pub async fn post_json(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    request(
        addr,
        "POST",
        path,
        &[("content-type", "application/json")],
        full(body.to_string()),
    )
    .await
}

pub async fn classify(addr: SocketAddr, body: &Value) -> Resp {
    post_json(addr, "/v1/classify", body).await
}

/// A streamed request body of `len` pseudo-random bytes, produced in 64 KiB
/// chunks, with its SHA-256 computed up front by `pseudo_random_sha256`.
pub struct StreamBody {
    state: u64,
    remaining: u64,
}

impl StreamBody {
    pub fn new(seed: u64, len: u64) -> Self {
        StreamBody {
            state: seed | 1,
            remaining: len,
        }
    }

    fn next_chunk(&mut self) -> Option<Vec<u8>> {
        if self.remaining == 0 {
            return None;
        }
        let n = self.remaining.min(64 * 1024) as usize;
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            let b = self.state.to_le_bytes();
            let take = (n - v.len()).min(8);
            v.extend_from_slice(&b[..take]);
        }
        self.remaining -= n as u64;
        Some(v)
    }
}

impl hyper::body::Body for StreamBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.next_chunk().map(|c| Ok(Frame::data(Bytes::from(c)))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

pub fn pseudo_random_sha256(seed: u64, len: u64) -> String {
    let mut s = StreamBody::new(seed, len);
    let mut h = Sha256::new();
    while let Some(c) = s.next_chunk() {
        h.update(&c);
    }
    hex::encode(h.finalize())
}

/// Sends SIGTERM to a process (via kill(1): no libc dependency).
pub fn sigterm(pid: u32) {
    let ok = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM {pid}");
}
