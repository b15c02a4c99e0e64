//! The demo cell's counters for long-lived connections: requests abandoned
//! while the cell held them, streamed answers cut by the reader, and how
//! WebSocket sessions ended (all in `GET /_stats`).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

fn cell(id: &str) -> Proc {
    Proc::start(&["cell", "--id", id, "--listen", "127.0.0.1:0"], 1)
}

async fn stats(a: SocketAddr) -> Value {
    get(a, "/_stats").await.json()
}

/// Polls `/_stats` until `ok` holds (or panics after 5 s).
async fn stats_until(a: SocketAddr, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = stats(a).await;
        if ok(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn raw_request(a: SocketAddr, headers: &str) -> TcpStream {
    let mut s = TcpStream::connect(a).await.unwrap();
    s.write_all(
        format!("GET /api/v4/jobs/request HTTP/1.1\r\nhost: {a}\r\n{headers}\r\n").as_bytes(),
    )
    .await
    .unwrap();
    s
}

#[tokio::test]
async fn a_request_whose_client_leaves_during_the_delay_counts_as_abandoned() {
    let p = cell("4");
    let a = p.addr();
    let s = stats(a).await;
    assert_eq!(
        (s["in_flight"].as_u64(), s["abandoned"].as_u64()),
        (Some(0), Some(0))
    );

    let conn = raw_request(a, "x-demo-delay-ms: 10000\r\n").await;
    stats_until(a, "the request in flight", |s| s["in_flight"] == 1).await;
    drop(conn);
    let s = stats_until(a, "the request abandoned", |s| s["abandoned"] == 1).await;
    assert_eq!(s["in_flight"], 0);

    // One that waits for its answer is not abandoned.
    let r = request(a, "GET", "/poll", &[("x-demo-delay-ms", "200")], full("")).await;
    assert_eq!(r.status, 200);
    let s = stats(a).await;
    assert_eq!(
        (s["in_flight"].as_u64(), s["abandoned"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(s["requests"], 2);
}

#[tokio::test]
async fn a_streamed_answer_the_reader_leaves_counts_as_cut() {
    let p = cell("1");
    let a = p.addr();
    let r = request(
        a,
        "GET",
        "/small",
        &[("x-demo-response-bytes", "100000")],
        full(""),
    )
    .await;
    assert_eq!(r.body.len(), 100_000);
    assert_eq!(stats(a).await["responses_cut"], 0);

    let mut conn = raw_request(a, "x-demo-response-bytes: 1073741824\r\n").await;
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0;
    while got < 1024 * 1024 {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0);
        got += n;
    }
    drop(conn);
    stats_until(a, "the answer cut", |s| s["responses_cut"] == 1).await;

    let r = request(a, "POST", "/_stats/reset", &[], full("")).await;
    assert_eq!(r.json()["responses_cut"], 0);
    assert_eq!(stats(a).await["responses_cut"], 0);
}

#[tokio::test]
async fn websocket_sessions_record_how_they_ended() {
    let p = cell("2");
    let a = p.addr();
    let open = || async move {
        let stream = TcpStream::connect(a).await.unwrap();
        let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{a}/-/cable"), stream)
            .await
            .unwrap();
        ws.next().await.unwrap().unwrap(); // the greeting
        ws
    };

    // The peer closes with a code.
    let mut ws = open().await;
    assert_eq!(stats(a).await["websockets_open"], 1);
    ws.close(Some(CloseFrame {
        code: CloseCode::from(4002),
        reason: "client done".into(),
    }))
    .await
    .unwrap();
    while let Some(Ok(_)) = ws.next().await {}
    let s = stats_until(a, "the first close", |s| {
        s["websocket_closes"].as_array().unwrap().len() == 1
    })
    .await;
    let end = &s["websocket_closes"][0];
    assert_eq!(
        (end["by"].as_str(), end["code"].as_u64()),
        (Some("peer"), Some(4002))
    );
    assert_eq!(end["reason"], "client done");
    assert_eq!(end["error"], Value::Null);

    // The cell closes on request.
    let mut ws = open().await;
    ws.send(Message::text("close:4001")).await.unwrap();
    while let Some(Ok(_)) = ws.next().await {}
    let s = stats_until(a, "the second close", |s| {
        s["websocket_closes"].as_array().unwrap().len() == 2
    })
    .await;
    let end = &s["websocket_closes"][1];
    assert_eq!(
        (end["by"].as_str(), end["code"].as_u64()),
        (Some("cell"), Some(4001))
    );

    // The peer just goes away.
    let ws = open().await;
    drop(ws);
    let s = stats_until(a, "the third end", |s| {
        s["websocket_closes"].as_array().unwrap().len() == 3
    })
    .await;
    let end = &s["websocket_closes"][2];
    assert_eq!(end["by"], "none");
    assert_eq!(end["code"], Value::Null);
    assert_eq!(s["websockets_open"], 0);
    assert_eq!(s["websockets"], 3);

    let r = request(a, "POST", "/_stats/reset", &[], full("")).await;
    assert_eq!(r.json()["websocket_closes"], serde_json::json!([]));
}

#[tokio::test]
async fn a_reset_reports_what_stats_reports_with_every_count_and_history_emptied() {
    let p = cell("5");
    let a = p.addr();
    get(a, "/x").await;
    get(a, "/-/readiness").await;
    let before = stats(a).await;
    assert_eq!(
        (
            before["requests"].as_u64(),
            before["health_probes"].as_u64()
        ),
        (Some(1), Some(1))
    );
    let reset = request(a, "POST", "/_stats/reset", &[], full(""))
        .await
        .json();
    let fields = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(fields(&reset), fields(&before));
    for (field, value) in reset.as_object().unwrap() {
        match field.as_str() {
            "cell" => assert_eq!(value, "5"),
            "last_requests" | "websocket_closes" => {
                assert_eq!(value, &serde_json::json!([]), "{field}")
            }
            _ => assert_eq!(value, 0, "{field}"),
        }
    }
    assert_eq!(stats(a).await, reset);
}
