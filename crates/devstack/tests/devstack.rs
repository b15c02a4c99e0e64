//! End-to-end tests of the `devstack` binary over real HTTP on 127.0.0.1.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use futures_util::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

fn topology() -> Proc {
    let cfg = shipped_config();
    Proc::start(
        &["topology", "--config", &cfg, "--listen", "127.0.0.1:0"],
        1,
    )
}

fn cell(id: &str) -> Proc {
    Proc::start(&["cell", "--id", id, "--listen", "127.0.0.1:0"], 1)
}

// ---------------------------------------------------------------------------
// Topology Service

#[tokio::test]
async fn classify_typed_requests() {
    let p = topology();
    let a = p.addr();

    let r = classify(a, &json!({"type": "FIRST_CELL"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"action": "PROXY",
               "proxy": {"address": "127.0.0.1:9101", "registryAddress": "127.0.0.1:5001"},
               "matchedClaim": {"type": "FIRST_CELL"}})
    );
    assert_eq!(r.header("cache-control"), Some("max-age=60"));
    assert_eq!(
        r.header("cache-tag"),
        Some("cell-1,classify-first-cell,legacy")
    );
    assert_eq!(r.header("content-type"), Some("application/json"));

    let r = classify(a, &json!({"type": "SESSION_PREFIX", "value": "cell-2"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["proxy"]["address"], "127.0.0.1:9102");
    assert_eq!(
        r.json()["matchedClaim"],
        json!({"type": "SESSION_PREFIX", "value": "cell-2"})
    );
    assert_eq!(
        r.header("cache-tag"),
        Some("cell-2,classify-session-prefix")
    );

    let r = classify(a, &json!({"type": "CELL_ID", "value": "3"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["proxy"]["address"], "127.0.0.1:9103");
    assert_eq!(r.header("cache-tag"), Some("cell-3,classify-cell-id"));

    // Registry target.
    let r = classify(
        a,
        &json!({"type": "CELL_ID", "value": "2", "target": "registry"}),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["proxy"]["registryAddress"], "127.0.0.1:5002");

    // Not found.
    let r = classify(a, &json!({"type": "SESSION_PREFIX", "value": "cell-9"})).await;
    assert_eq!(r.status, 404);
    let body = r.json();
    assert_eq!(body["code"], 5);
    assert_eq!(body["details"], json!([]));
    assert!(body["message"].as_str().unwrap().contains("cell-9"));
    assert_eq!(r.header("cache-control"), Some("max-age=10"));
    assert_eq!(r.header("cache-tag"), Some("classify-session-prefix"));

    let r = classify(a, &json!({"type": "CELL_ID", "value": "42"})).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("cache-tag"), Some("classify-cell-id"));

    // Malformed.
    for bad in [
        json!({"type": "NOPE"}),
        json!({"type": "CELL_ID", "value": "two"}),
        json!({"type": "SESSION_PREFIX"}),
        json!({"type": "FIRST_CELL", "target": "ftp"}),
        json!({"claims": []}),
        json!({"claims": [{"color": "red"}]}),
        json!({}),
        json!([1, 2]),
    ] {
        let r = classify(a, &bad).await;
        assert_eq!(r.status, 400, "{bad}");
        assert_eq!(r.json()["code"], 3, "{bad}");
        assert_eq!(r.json()["details"], json!([]));
    }
    let r = request(a, "POST", "/v1/classify", &[], full("{not json")).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["code"], 3);

    // Wrong method / unknown path.
    assert_eq!(get(a, "/v1/classify").await.status, 405);
    assert_eq!(get(a, "/v2/nothing").await.status, 404);
}

#[tokio::test]
async fn classify_claims() {
    let p = topology();
    let a = p.addr();

    let r = classify(a, &json!({"claims": [{"route": "gitlab-org/gitlab"}]})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["proxy"]["address"], "127.0.0.1:9101");
    assert_eq!(
        r.json()["matchedClaim"],
        json!({"route": "gitlab-org/gitlab"})
    );
    assert_eq!(
        r.header("cache-tag"),
        Some("cell-1,classify-claim-route,legacy")
    );

    // Longest route entry wins; prefix must end at a path boundary.
    let r = classify(
        a,
        &json!({"claims": [{"route": "gitlab-org/cell2-moved/project"}]}),
    )
    .await;
    assert_eq!(r.json()["proxy"]["address"], "127.0.0.1:9102");
    let r = classify(a, &json!({"claims": [{"route": "gitlab-orgs/x"}]})).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("cache-tag"), Some("classify-claim-route"));
    assert_eq!(r.header("cache-control"), Some("max-age=10"));

    // First claim that resolves wins.
    let r = classify(
        a,
        &json!({"claims": [{"route": "unknown/x"}, {"username": "cell3-user"}, {"route": "acme"}]}),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["proxy"]["address"], "127.0.0.1:9103");
    assert_eq!(r.json()["matchedClaim"], json!({"username": "cell3-user"}));
    assert_eq!(
        r.header("cache-tag"),
        Some("cell-3,classify-claim-username")
    );

    for (claim, addr, tag) in [
        (
            json!({"organizationPath": "acme-org"}),
            "127.0.0.1:9102",
            "classify-claim-organization-path",
        ),
        (
            json!({"organizationId": "3"}),
            "127.0.0.1:9103",
            "classify-claim-organization-id",
        ),
        (
            json!({"projectId": "200"}),
            "127.0.0.1:9102",
            "classify-claim-project-id",
        ),
        (
            json!({"namespaceId": 2}),
            "127.0.0.1:9101",
            "classify-claim-namespace-id",
        ),
    ] {
        let r = classify(a, &json!({"claims": [claim.clone()], "target": "web"})).await;
        assert_eq!(r.status, 200, "{claim}");
        assert_eq!(r.json()["proxy"]["address"], addr, "{claim}");
        assert!(r.header("cache-tag").unwrap().contains(tag), "{claim}");
    }

    // Registry target on a route claim (container registry, ADR 017).
    let r = classify(
        a,
        &json!({"claims": [{"route": "cell3-group/app"}], "target": "registry"}),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["proxy"]["registryAddress"], "127.0.0.1:5003");
}

#[tokio::test]
async fn cell_without_registry_and_custom_cache_headers() {
    let cfg = temp_config(
        r#"
[topology]
cache_control = "max-age=5, public"
not_found_cache_control = "no-store"

[[cells]]
id = 7
address = "cell-7.internal:8080"
routes = ["seven"]
"#,
    );
    let p = Proc::start(
        &[
            "topology",
            "--config",
            cfg.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        1,
    );
    let r = classify(
        p.addr(),
        &json!({"claims": [{"route": "seven/x"}], "target": "registry"}),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["proxy"],
        json!({"address": "cell-7.internal:8080"})
    );
    assert_eq!(r.header("cache-control"), Some("max-age=5, public"));
    // Default session prefix is cell-<id>.
    let r = classify(
        p.addr(),
        &json!({"type": "SESSION_PREFIX", "value": "cell-7"}),
    )
    .await;
    assert_eq!(r.status, 200);
    let r = classify(
        p.addr(),
        &json!({"type": "SESSION_PREFIX", "value": "cell-1"}),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let _ = std::fs::remove_file(cfg);
}

#[tokio::test]
async fn stats_count_and_reset() {
    let p = topology();
    let (a, admin) = (p.addr(), p.admin());
    classify(a, &json!({"type": "SESSION_PREFIX", "value": "cell-2"})).await;
    classify(a, &json!({"type": "SESSION_PREFIX", "value": "cell-3"})).await;
    classify(a, &json!({"claims": [{"route": "acme"}]})).await;
    request(
        a,
        "POST",
        "/v1/classify",
        &[("cf-access-client-id", "abc"), ("x-extra", "1")],
        full(r#"{"type":"FIRST_CELL"}"#),
    )
    .await;

    for addr in [a, admin] {
        let s = get(addr, "/_stats").await.json();
        assert_eq!(s["classify_calls"], 4);
        assert_eq!(s["by_type"]["SESSION_PREFIX"], 2);
        assert_eq!(s["by_type"]["CLAIMS"], 1);
        assert_eq!(s["by_type"]["FIRST_CELL"], 1);
        let last = s["last_requests"].as_array().unwrap();
        assert_eq!(last.len(), 4);
        assert_eq!(
            last[0]["body"],
            json!({"type": "SESSION_PREFIX", "value": "cell-2"})
        );
        assert_eq!(last[3]["body"], json!({"type": "FIRST_CELL"}));
        assert_eq!(last[3]["headers"]["cf-access-client-id"], "abc");
    }
    // The admin listener does not classify.
    assert_eq!(
        classify(admin, &json!({"type": "FIRST_CELL"})).await.status,
        404
    );

    let r = request(admin, "POST", "/_stats/reset", &[], full("")).await;
    assert_eq!(r.status, 200);
    let s = get(a, "/_stats").await.json();
    assert_eq!(s["classify_calls"], 0);
    assert_eq!(s["last_requests"], json!([]));

    // Only the 50 most recent requests are kept.
    let mut conn = Conn::open(a).await.unwrap();
    for i in 0..55 {
        let body = json!({"type": "CELL_ID", "value": (i % 3 + 1).to_string()});
        let r = conn
            .request("POST", "/v1/classify", &[], full(body.to_string()))
            .await;
        assert_eq!(r.status, 200);
    }
    let s = get(a, "/_stats").await.json();
    assert_eq!(s["classify_calls"], 55);
    assert_eq!(s["last_requests"].as_array().unwrap().len(), 50);
}

#[tokio::test]
async fn fault_latency_and_cache_control_override() {
    let p = topology();
    let (a, admin) = (p.addr(), p.admin());
    let r = post_json(admin, "/_faults", &json!({"latency_ms": 800})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["latency_ms"], 800);
    assert_eq!(r.json()["error_status"], 503);

    let t = Instant::now();
    let r = classify(a, &json!({"type": "FIRST_CELL"})).await;
    assert_eq!(r.status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(800),
        "{:?}",
        t.elapsed()
    );

    let r = post_json(
        admin,
        "/_faults",
        &json!({"latency_ms": 0, "cache_control": "no-store"}),
    )
    .await;
    assert_eq!(r.json()["cache_control"], "no-store");
    let t = Instant::now();
    let r = classify(a, &json!({"type": "FIRST_CELL"})).await;
    assert!(
        t.elapsed() < Duration::from_millis(800),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let r = classify(a, &json!({"type": "CELL_ID", "value": "99"})).await;
    assert_eq!(r.header("cache-control"), Some("no-store"));

    // redirect_to answers every classify call 307 to its URL; null clears it.
    let r = post_json(
        admin,
        "/_faults",
        &json!({"redirect_to": "http://127.0.0.1:9/v1/classify"}),
    )
    .await;
    assert_eq!(r.json()["redirect_to"], "http://127.0.0.1:9/v1/classify");
    let r = classify(a, &json!({"type": "FIRST_CELL"})).await;
    assert_eq!(r.status, 307);
    assert_eq!(r.header("location"), Some("http://127.0.0.1:9/v1/classify"));
    let r = post_json(admin, "/_faults", &json!({"redirect_to": null})).await;
    assert_eq!(r.json()["redirect_to"], Value::Null);
    assert_eq!(
        classify(a, &json!({"type": "FIRST_CELL"})).await.status,
        200
    );

    // Only given fields change; null resets cache_control.
    let r = post_json(admin, "/_faults", &json!({"cache_control": null})).await;
    assert_eq!(r.json()["cache_control"], Value::Null);
    assert_eq!(r.json()["latency_ms"], 0);
    let r = classify(a, &json!({"type": "FIRST_CELL"})).await;
    assert_eq!(r.header("cache-control"), Some("max-age=60"));

    // Invalid fault updates are rejected whole.
    let r = post_json(admin, "/_faults", &json!({"latency_ms": 5, "nope": 1})).await;
    assert_eq!(r.status, 400);
    assert_eq!(get(admin, "/_faults").await.json()["latency_ms"], 0);
    assert_eq!(
        post_json(admin, "/_faults", &json!({"error_rate": 1.5}))
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn fault_fail_next_error_rate_not_found_all() {
    let p = topology();
    let (a, admin) = (p.addr(), p.admin());
    // The classify port serves /_faults too.
    let r = post_json(a, "/_faults", &json!({"fail_next": 2})).await;
    assert_eq!(r.json()["fail_next"], 2);
    for _ in 0..2 {
        let r = classify(a, &json!({"type": "FIRST_CELL"})).await;
        assert_eq!(r.status, 503);
        assert_eq!(r.json()["code"], 14);
        assert_eq!(r.header("cache-control"), Some("no-store"));
    }
    assert_eq!(
        classify(a, &json!({"type": "FIRST_CELL"})).await.status,
        200
    );
    assert_eq!(get(admin, "/_faults").await.json()["fail_next"], 0);

    post_json(
        admin,
        "/_faults",
        &json!({"error_rate": 1.0, "error_status": 500}),
    )
    .await;
    for _ in 0..5 {
        let r = classify(a, &json!({"type": "FIRST_CELL"})).await;
        assert_eq!(r.status, 500);
        assert_eq!(r.json()["code"], 13);
    }
    post_json(admin, "/_faults", &json!({"error_rate": 0.0})).await;
    assert_eq!(
        classify(a, &json!({"type": "FIRST_CELL"})).await.status,
        200
    );

    post_json(admin, "/_faults", &json!({"not_found_all": true})).await;
    let r = classify(a, &json!({"type": "SESSION_PREFIX", "value": "cell-2"})).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["code"], 5);
    assert_eq!(r.header("cache-tag"), Some("classify-session-prefix"));
    assert_eq!(r.header("cache-control"), Some("max-age=10"));
    let r = classify(a, &json!({"claims": [{"route": "gitlab-org"}]})).await;
    assert_eq!(r.status, 404);

    // Reset restores everything.
    let r = request(admin, "POST", "/_faults/reset", &[], full("")).await;
    assert_eq!(r.json()["not_found_all"], false);
    assert_eq!(
        classify(a, &json!({"type": "FIRST_CELL"})).await.status,
        200
    );

    // The stats count every call that reached the handler, faulted or not.
    let s = get(admin, "/_stats").await.json();
    assert_eq!(s["classify_calls"], 12);
}

#[tokio::test]
async fn faults_given_at_start() {
    let cfg = shipped_config();
    let p = Proc::start(
        &[
            "topology",
            "--config",
            &cfg,
            "--listen",
            "127.0.0.1:0",
            "--faults",
            r#"{"fail_next": 1, "error_status": 502}"#,
        ],
        1,
    );
    assert_eq!(
        classify(p.addr(), &json!({"type": "FIRST_CELL"}))
            .await
            .status,
        502
    );
    assert_eq!(
        classify(p.addr(), &json!({"type": "FIRST_CELL"}))
            .await
            .status,
        200
    );
}

async fn connect_refused(addr: SocketAddr) -> bool {
    match tokio::net::TcpStream::connect(addr).await {
        Ok(_) => false,
        Err(e) => {
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
            true
        }
    }
}

#[tokio::test]
async fn fault_refuse_connections_and_recover() {
    let p = topology();
    let (a, admin) = (p.addr(), p.admin());
    let mut kept = Conn::open(a).await.unwrap();
    assert_eq!(
        kept.request(
            "POST",
            "/v1/classify",
            &[],
            full(r#"{"type":"FIRST_CELL"}"#)
        )
        .await
        .status,
        200
    );

    let r = post_json(admin, "/_faults", &json!({"refuse_connections": true})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["refuse_connections"], true);
    assert!(connect_refused(a).await);
    // Open keep-alive connections are dropped too.
    assert!(kept
        .send(
            "POST",
            "/v1/classify",
            &[],
            full(r#"{"type":"FIRST_CELL"}"#)
        )
        .await
        .is_err());
    // The admin listener still answers.
    assert_eq!(
        get(admin, "/_faults").await.json()["refuse_connections"],
        true
    );
    assert_eq!(get(admin, "/_stats").await.json()["classify_calls"], 1);

    let r = post_json(admin, "/_faults", &json!({"refuse_connections": false})).await;
    assert_eq!(r.status, 200);
    let r = classify(a, &json!({"type": "CELL_ID", "value": "2"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["proxy"]["address"], "127.0.0.1:9102");

    // And once more, started refused from the command line.
    let cfg = shipped_config();
    let p2 = Proc::start(
        &[
            "topology",
            "--config",
            &cfg,
            "--listen",
            "127.0.0.1:0",
            "--faults",
            r#"{"refuse_connections": true}"#,
        ],
        1,
    );
    // The listener is dropped right after the ready line; give it a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !connect_refused(p2.addr()).await {
        assert!(Instant::now() < deadline, "port never refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    post_json(
        p2.admin(),
        "/_faults",
        &json!({"refuse_connections": false}),
    )
    .await;
    assert_eq!(
        classify(p2.addr(), &json!({"type": "FIRST_CELL"}))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn access_token_check() {
    let cfg = temp_config(
        r#"
[topology]
access_client_id = "client-id.access"
access_client_secret = "s3cret"

[[cells]]
id = 1
address = "127.0.0.1:9101"
"#,
    );
    let p = Proc::start(
        &[
            "topology",
            "--config",
            cfg.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        1,
    );
    let a = p.addr();
    let body = r#"{"type":"FIRST_CELL"}"#;
    let r = request(a, "POST", "/v1/classify", &[], full(body)).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["code"], 7);
    let r = request(
        a,
        "POST",
        "/v1/classify",
        &[
            ("cf-access-client-id", "client-id.access"),
            ("cf-access-client-secret", "wrong"),
        ],
        full(body),
    )
    .await;
    assert_eq!(r.status, 403);
    let r = request(
        a,
        "POST",
        "/v1/classify",
        &[
            ("CF-Access-Client-Id", "client-id.access"),
            ("CF-Access-Client-Secret", "s3cret"),
        ],
        full(body),
    )
    .await;
    assert_eq!(r.status, 200);
    let s = get(p.admin(), "/_stats").await.json();
    assert_eq!(s["classify_calls"], 3);
    assert_eq!(
        s["last_requests"][2]["headers"]["cf-access-client-secret"],
        "s3cret"
    );
    let _ = std::fs::remove_file(cfg);
}

#[tokio::test]
async fn bad_config_and_args_fail_fast() {
    let bin = env!("CARGO_BIN_EXE_devstack");
    let cfg = temp_config("[topology]\nlisten = \"0.0.0.0:0\"\n");
    for args in [
        vec!["topology", "--config", cfg.to_str().unwrap()],
        vec!["topology"],
        vec!["cell", "--id", "1", "--listen", "10.0.0.1:0"],
        vec!["cell", "--bogus", "1"],
        vec!["frobnicate"],
    ] {
        let out = std::process::Command::new(bin)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    let _ = std::fs::remove_file(cfg);
}

// ---------------------------------------------------------------------------
// Demo cell

#[tokio::test]
async fn cell_echo() {
    let p = cell("2");
    assert_eq!(
        p.ready[0],
        json!({"ready": "cell", "id": "2", "addr": p.addr().to_string()})
    );
    let a = p.addr();

    let r = request(
        a,
        "PUT",
        "/group/project/-/issues?state=opened&x=%2F",
        &[
            ("X-Forwarded-Host", "gitlab.example.com"),
            ("x-multi", "one"),
            ("x-multi", "two"),
        ],
        full("hello"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-demo-cell"), Some("2"));
    let e = r.json();
    assert_eq!(e["cell"], "2");
    assert_eq!(e["method"], "PUT");
    assert_eq!(e["path"], "/group/project/-/issues");
    assert_eq!(e["query"], "state=opened&x=%2F");
    assert_eq!(e["headers"]["x-forwarded-host"], "gitlab.example.com");
    assert_eq!(e["headers"]["x-multi"], "one, two");
    assert_eq!(e["headers"]["host"], a.to_string());
    assert_eq!(e["body_bytes"], 5);
    assert_eq!(
        e["body_sha256"],
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );

    let r = get(a, "/").await;
    assert_eq!(r.json()["query"], "");
    assert_eq!(r.json()["method"], "GET");
    assert_eq!(r.json()["body_bytes"], 0);

    // A multi-MiB streamed (chunked) upload.
    let len = 12 * 1024 * 1024 + 7;
    let mut conn = Conn::open(a).await.unwrap();
    let r = conn
        .request(
            "POST",
            "/v2/group/app/blobs/uploads/1",
            &[("transfer-encoding", "chunked")],
            BodyExt::boxed(StreamBody::new(42, len)),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["body_bytes"], len);
    assert_eq!(r.json()["body_sha256"], pseudo_random_sha256(42, len));
    assert_eq!(r.json()["headers"]["transfer-encoding"], "chunked");
    // Keep-alive still works after a streamed body.
    let r = conn.request("HEAD", "/x", &[], full("")).await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());

    let s = get(a, "/_stats").await.json();
    assert_eq!(s["requests"], 4);
    assert_eq!(s["last_requests"][0]["method"], "PUT");
    let r = request(a, "POST", "/_stats/reset", &[], full("")).await;
    assert_eq!(r.json()["requests"], 0);
    assert_eq!(get(a, "/_stats").await.json()["requests"], 0);
}

#[tokio::test]
async fn cell_upload_memory_is_constant() {
    let p = cell("1");
    let before = p.peak_rss_kib();
    let len: u64 = 96 * 1024 * 1024;
    let r = request(
        p.addr(),
        "POST",
        "/big",
        &[],
        BodyExt::boxed(StreamBody::new(7, len)),
    )
    .await;
    assert_eq!(r.json()["body_bytes"], len);
    let after = p.peak_rss_kib();
    eprintln!("peak RSS {before} KiB -> {after} KiB after a {len}-byte upload");
    assert!(
        after < before + 32 * 1024,
        "peak RSS grew from {before} KiB to {after} KiB for a {len}-byte upload"
    );
}

#[tokio::test]
async fn cell_controls() {
    let p = cell("3");
    let a = p.addr();

    let r = request(
        a,
        "GET",
        "/users/sign_in",
        &[
            ("x-demo-status", "302"),
            ("x-demo-location", "https://gitlab.example.com/dashboard"),
        ],
        full(""),
    )
    .await;
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("location"),
        Some("https://gitlab.example.com/dashboard")
    );
    assert_eq!(r.json()["path"], "/users/sign_in");

    let r = request(a, "GET", "/", &[("x-demo-status", "503")], full("")).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["cell"], "3");
    let r = request(a, "GET", "/", &[("x-demo-status", "204")], full("")).await;
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());

    let r = request(
        a,
        "GET",
        "/",
        &[("x-demo-response-header", "X-Gitlab-Meta: {\"a\":1}")],
        full(""),
    )
    .await;
    assert_eq!(r.header("x-gitlab-meta"), Some("{\"a\":1}"));

    let r = request(a, "GET", "/", &[("x-demo-status", "abc")], full("")).await;
    assert_eq!(r.status, 400);

    // Delay.
    let t = Instant::now();
    let r = request(a, "GET", "/poll", &[("x-demo-delay-ms", "500")], full("")).await;
    assert_eq!(r.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(500));

    // Many concurrent long waits are cheap.
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..200 {
        tasks.push(tokio::spawn(async move {
            request(a, "GET", "/poll", &[("x-demo-delay-ms", "1000")], full(""))
                .await
                .status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // Streamed deterministic response body.
    let n: u64 = 5 * 1024 * 1024 + 3;
    let mut conn = Conn::open(a).await.unwrap();
    let resp = conn
        .send(
            "GET",
            "/archive.zip",
            &[("x-demo-response-bytes", &n.to_string())],
            full(""),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-length"].to_str().unwrap(),
        n.to_string()
    );
    let mut body = resp.into_body();
    let mut got: u64 = 0;
    let mut want = Sha256::new();
    let mut have = Sha256::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            for (i, b) in data.iter().enumerate() {
                assert_eq!(
                    *b,
                    ((got + i as u64) % 251) as u8,
                    "byte {}",
                    got + i as u64
                );
            }
            have.update(&data);
            got += data.len() as u64;
        }
    }
    assert_eq!(got, n);
    let pattern: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    want.update(&pattern);
    assert_eq!(have.finalize(), want.finalize());

    let r = request(a, "GET", "/", &[("x-demo-response-bytes", "0")], full("")).await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
}

#[tokio::test]
async fn cell_websocket_echo() {
    let p = cell("2");
    let a = p.addr();
    let stream = tokio::net::TcpStream::connect(a).await.unwrap();
    let mut req = format!("ws://{a}/-/cable").into_client_request().unwrap();
    req.headers_mut().insert(
        "sec-websocket-protocol",
        "actioncable-v1-json, actioncable-unsupported"
            .parse()
            .unwrap(),
    );
    req.headers_mut()
        .insert("x-forwarded-host", "gitlab.example.com".parse().unwrap());
    let (mut ws, resp) = tokio_tungstenite::client_async(req, stream).await.unwrap();
    assert_eq!(resp.status(), 101);
    assert_eq!(resp.headers()["x-demo-cell"], "2");
    assert_eq!(
        resp.headers()["sec-websocket-protocol"],
        "actioncable-v1-json"
    );

    let hello = ws.next().await.unwrap().unwrap();
    let hello: Value = serde_json::from_str(hello.to_text().unwrap()).unwrap();
    assert_eq!(hello["cell"], "2");
    assert_eq!(hello["headers"]["x-forwarded-host"], "gitlab.example.com");
    assert_eq!(hello["headers"]["upgrade"], "websocket");

    ws.send(Message::text("ping from test")).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::text("ping from test")
    );
    let bin: Vec<u8> = (0..70_000u32).map(|i| (i % 256) as u8).collect();
    ws.send(Message::binary(bin.clone())).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::binary(bin));

    ws.send(Message::text("close:4001")).await.unwrap();
    match ws.next().await.unwrap().unwrap() {
        Message::Close(Some(frame)) => assert_eq!(frame.code, CloseCode::from(4001)),
        other => panic!("expected a close frame, got {other:?}"),
    }
    // The stream ends after the close handshake.
    while let Some(m) = ws.next().await {
        if m.is_err() {
            break;
        }
    }

    // The client can close too, and the server answers it.
    let stream = tokio::net::TcpStream::connect(a).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{a}/-/cable"), stream)
        .await
        .unwrap();
    ws.next().await.unwrap().unwrap();
    ws.close(None).await.unwrap();
    let mut saw_close = false;
    while let Some(Ok(m)) = ws.next().await {
        if m.is_close() {
            saw_close = true;
        }
    }
    assert!(saw_close);

    let s = get(a, "/_stats").await.json();
    assert_eq!(s["websockets"], 2);
}

// ---------------------------------------------------------------------------
// `devstack up`

#[tokio::test]
async fn up_starts_topology_and_cells() {
    let cfg = temp_config(
        r#"
[topology]
listen = "127.0.0.1:0"

[[cells]]
id = 1
listen = "127.0.0.1:0"
session_prefix = "cell-1"
routes = ["gitlab-org"]

[[cells]]
id = 2
listen = "127.0.0.1:0"
registry_address = "127.0.0.1:5002"
routes = ["acme"]

[[cells]]
id = 3
address = "127.0.0.1:1"
"#,
    );
    let p = Proc::start(&["up", "--config", cfg.to_str().unwrap()], 3);
    assert_eq!(p.ready[2]["ready"], "topology");
    let topo: SocketAddr = p.ready_of("topology", None)["addr"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let cell2 = p.ready_of("cell", Some("2"))["addr"]
        .as_str()
        .unwrap()
        .to_string();

    let r = classify(topo, &json!({"claims": [{"route": "acme/widgets"}]})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["proxy"]["address"], cell2.as_str());
    let r = classify(topo, &json!({"type": "CELL_ID", "value": "3"})).await;
    assert_eq!(r.json()["proxy"]["address"], "127.0.0.1:1");

    // The classified address really is the demo cell.
    let r = get(cell2.parse().unwrap(), "/acme/widgets").await;
    assert_eq!(r.json()["cell"], "2");

    // SIGTERM stops it promptly with exit 0.
    let mut p = p;
    sigterm(p.pid());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            assert_eq!(status.code(), Some(0));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "devstack up did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(cfg);
}

#[tokio::test]
async fn up_with_shipped_config_is_valid() {
    // The shipped config must load for `up` (without binding its fixed
    // ports, which a developer's running stack may hold): check by running
    // `topology` on port 0 and classifying each cell.
    let p = topology();
    for id in ["1", "2", "3"] {
        let r = classify(p.addr(), &json!({"type": "CELL_ID", "value": id})).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["proxy"]["address"], format!("127.0.0.1:910{id}"));
        assert_eq!(
            r.json()["proxy"]["registryAddress"],
            format!("127.0.0.1:500{id}")
        );
        let r = classify(
            p.addr(),
            &json!({"type": "SESSION_PREFIX", "value": format!("cell-{id}")}),
        )
        .await;
        assert_eq!(r.status, 200);
    }
}
