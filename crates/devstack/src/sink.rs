//! A benchmark upstream: as cheap as an HTTP/1.1 server gets, so that a
//! benchmark through the router measures the router, not the cell.
//!
//! Every request (any method, path) is answered 200 with the fixed body
//! `ok\n` after the request body has been drained (counted, not hashed),
//! with `X-Sink-Body-Bytes: <bytes received>`. `x-demo-response-bytes: N`
//! asks for an N-byte `application/octet-stream` body instead, byte i =
//! `i % 251`, streamed in 64 KiB chunks (the demo cell's download). No
//! per-request logging, no request history.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;

use crate::cell::PatternBody;
use crate::http::{full, header_str, Body};

const OK_BODY: &[u8] = b"ok\n";

/// Binds the sink listener (the caller prints the ready line).
pub async fn bind(listen: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(listen)
        .await
        .map_err(|e| format!("sink: cannot listen on {listen}: {e}"))
}

pub fn serve(listener: TcpListener) {
    crate::http::spawn_accept_loop(listener, |req, _peer| handle(req));
}

async fn handle(req: Request<Incoming>) -> Response<Body> {
    let response_bytes = match header_str(req.headers(), "x-demo-response-bytes") {
        None => None,
        Some(s) => match s.trim().parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                let mut r = Response::new(full(Bytes::from_static(
                    b"x-demo-response-bytes: not a number\n",
                )));
                *r.status_mut() = StatusCode::BAD_REQUEST;
                return r;
            }
        },
    };
    let mut body = req.into_body();
    let mut received: u64 = 0;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    received += data.len() as u64;
                }
            }
            Err(_) => {
                let mut r = Response::new(full(Bytes::from_static(b"request body error\n")));
                *r.status_mut() = StatusCode::BAD_REQUEST;
                return r;
            }
        }
    }
    let mut resp = match response_bytes {
        Some(n) => {
            let mut r = Response::new(PatternBody::new(n).boxed());
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            r.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from(n));
            r
        }
        None => {
            let mut r = Response::new(full(Bytes::from_static(OK_BODY)));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            r
        }
    };
    resp.headers_mut()
        .insert("x-sink-body-bytes", HeaderValue::from(received));
    resp
}
