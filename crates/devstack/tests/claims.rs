//! The Topology Service accepts exactly the core's claim list
//! (`router_core::question::CLAIM_TYPES`), over real HTTP.

mod common;

use common::*;
use router_core::question::CLAIM_TYPES;
use serde_json::json;

/// `organizationPath` → `classify-claim-organization-path`.
fn tag(key: &str) -> String {
    let mut out = String::from("classify-claim-");
    for ch in key.chars() {
        if ch.is_ascii_uppercase() {
            out.push('-');
        }
        out.push(ch.to_ascii_lowercase());
    }
    out
}

fn topology() -> Proc {
    let cfg = shipped_config();
    Proc::start(
        &["topology", "--config", &cfg, "--listen", "127.0.0.1:0"],
        1,
    )
}

#[tokio::test]
async fn every_core_claim_key_is_accepted() {
    let p = topology();
    assert!(!CLAIM_TYPES.is_empty());
    for (upper, key) in CLAIM_TYPES {
        // A value the shipped topology knows where it has data, else any.
        let value = if key.ends_with("Id") {
            json!("1")
        } else {
            json!("root")
        };
        let r = classify(p.addr(), &json!({"claims": [{*key: value}]})).await;
        match r.status.as_u16() {
            200 => {
                assert_eq!(r.json()["matchedClaim"], json!({*key: value}), "{upper}");
                assert_eq!(
                    r.header("cache-tag").unwrap().split(',').nth(1),
                    Some(tag(key).as_str()),
                    "{upper}"
                );
            }
            404 => {
                assert_eq!(r.json()["code"], 5, "{upper}");
                assert_eq!(r.header("cache-tag"), Some(tag(key).as_str()), "{upper}");
            }
            other => panic!("{upper} ({key}): {other} {:?}", r.json()),
        }
    }
    // Ids are numeric; keys outside the list are rejected.
    for bad in [
        json!({"claims": [{"userId": "me"}]}),
        json!({"claims": [{"groupId": "1"}]}),
        json!({"claims": [{"runnerId": "1"}]}),
    ] {
        let r = classify(p.addr(), &bad).await;
        assert_eq!(r.status, 400, "{bad}");
    }
}

#[tokio::test]
async fn new_claim_data_of_the_shipped_topology() {
    let p = topology();
    for (claim, addr) in [
        (json!({"userId": 1}), Some("127.0.0.1:9101")),
        (json!({"userId": "20"}), Some("127.0.0.1:9102")),
        (json!({"userId": "30"}), Some("127.0.0.1:9103")),
        (json!({"userId": "2"}), None),
        (json!({"snippetId": "1"}), Some("127.0.0.1:9101")),
        (json!({"snippetId": "200"}), Some("127.0.0.1:9102")),
        (json!({"snippetId": 300}), Some("127.0.0.1:9103")),
        (json!({"snippetId": "20"}), None),
        (
            json!({"redirectRoute": "cell2-old-group/app"}),
            Some("127.0.0.1:9102"),
        ),
        (json!({"redirectRoute": "cell2-group"}), None),
        (json!({"email": "root@example.com"}), None),
    ] {
        let r = classify(p.addr(), &json!({"claims": [claim.clone()]})).await;
        match addr {
            Some(addr) => {
                assert_eq!(r.status, 200, "{claim}");
                assert_eq!(r.json()["proxy"]["address"], addr, "{claim}");
            }
            None => assert_eq!(r.status, 404, "{claim}"),
        }
    }
}
