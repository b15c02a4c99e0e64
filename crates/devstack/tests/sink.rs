//! `devstack sink`: the benchmark upstream, over real HTTP on 127.0.0.1.

mod common;

use common::*;
use http_body_util::BodyExt;

fn sink() -> Proc {
    Proc::start(&["sink", "--listen", "127.0.0.1:0"], 1)
}

#[tokio::test]
async fn answers_ok_and_counts_the_request_body() {
    let p = sink();
    assert_eq!(p.ready[0]["ready"], "sink");
    let a = p.addr();

    let r = get(a, "/anything?x=1").await;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..], b"ok\n");
    assert_eq!(r.header("x-sink-body-bytes"), Some("0"));

    // A streamed upload is drained and counted; keep-alive goes on.
    let mut conn = Conn::open(a).await.unwrap();
    let len = 3 * 1024 * 1024 + 17;
    let r = conn
        .request("PUT", "/upload", &[], StreamBody::new(7, len).boxed())
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-sink-body-bytes"),
        Some(len.to_string().as_str())
    );
    let r = conn.request("POST", "/again", &[], full("abc")).await;
    assert_eq!(r.header("x-sink-body-bytes"), Some("3"));
}

#[tokio::test]
async fn serves_downloads_of_the_asked_size() {
    let p = sink();
    let a = p.addr();
    let n: usize = 200_000;
    let r = request(
        a,
        "GET",
        "/download",
        &[("x-demo-response-bytes", &n.to_string())],
        full(""),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some(n.to_string().as_str()));
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.body.len(), n);
    assert!(r
        .body
        .iter()
        .enumerate()
        .all(|(i, b)| *b == (i % 251) as u8));

    let r = request(
        a,
        "GET",
        "/",
        &[("x-demo-response-bytes", "lots")],
        full(""),
    )
    .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn refuses_a_non_loopback_listen_address() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_devstack"))
        .args(["sink", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}
