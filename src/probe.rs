//! The scheduled health probe: a `GET` of every listed cell's health URL,
//! at once.

use router_core::resolve::cells::{CellList, HealthRecord, ProbeResult};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::Response;

use crate::clock;
use crate::transport::{global_fetch, Outgoing};

/// Probes every listed cell's health URL at once (`GET
/// <scheme>://<address><health_path>`, no redirects followed, abandoned
/// after `timeout_ms`); what each answer means is
/// [`router_core::resolve::cells::Verdict`]'s.
pub async fn probe_cells(list: &CellList, scheme: &str, timeout_ms: u32) -> HealthRecord {
    let started = clock::now();
    // Every fetch is started before any is awaited: they run together.
    let pending: Vec<(u64, Result<js_sys::Promise, JsValue>)> = list
        .cells()
        .iter()
        .map(|cell| {
            let url = format!("{scheme}://{}{}", cell.address, cell.health_path);
            (cell.id, probe(&url, timeout_ms))
        })
        .collect();
    let mut cells = Vec::with_capacity(pending.len());
    for (id, promise) in pending {
        let outcome = match promise {
            Ok(p) => JsFuture::from(p).await,
            Err(e) => Err(e),
        };
        let ms = (clock::now() - started).max(0.0) as u64;
        cells.push(match outcome {
            Ok(response) => {
                let response = response.unchecked_into::<Response>();
                if let Some(body) = response.body() {
                    let _ = body.cancel();
                }
                ProbeResult {
                    id,
                    status: response.status(),
                    ms,
                    error: None,
                }
            }
            Err(e) => ProbeResult {
                id,
                status: 0,
                ms,
                error: Some(
                    js_sys::Reflect::get(&e, &"message".into())
                        .ok()
                        .and_then(|m| m.as_string())
                        .unwrap_or_else(|| "fetch failed".to_string()),
                ),
            },
        });
    }
    HealthRecord {
        checked_at_ms: clock::now() as u64,
        cells,
    }
}

/// Starts one probe's `GET`.
fn probe(url: &str, timeout_ms: u32) -> Result<js_sys::Promise, JsValue> {
    let request = Outgoing {
        method: "GET",
        url,
        headers: vec![("user-agent", "gitlab-http-router-health-probe")],
        body: None,
        timeout_ms,
    }
    .request()?;
    Ok(global_fetch(&request))
}
