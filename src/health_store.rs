//! Where the scheduled probe's record is kept for every isolate: the
//! deployment's KV namespace.

use router_core::resolve::cells::HealthRecord;
use wasm_bindgen::JsValue;

use crate::{kv, log};

/// The scheduled probe's record ([`HealthRecord`]) in the deployment's own
/// KV namespace (`ROUTER_CONTROL`), under [`HEALTH_KEY`]: only this
/// deployment's Worker can write there (the zone-wide Cache API, where it
/// lived before, is writable by any Worker on the zone), and KV carries it
/// to every isolate, in every location.
pub struct HealthStore {
    binding: JsValue,
}

/// The probe record's key.
pub use router_core::resolve::cells::HEALTH_KEY;

/// The largest probe record read (a line per cell: 1,000 cells fit).
const HEALTH_MAX_BYTES: usize = 256 * 1024;

/// A KV read of the record that takes longer is abandoned.
const HEALTH_READ_TIMEOUT_MS: u32 = 1_000;

impl HealthStore {
    pub fn new(binding: JsValue) -> HealthStore {
        HealthStore { binding }
    }

    pub async fn get(&self) -> Option<HealthRecord> {
        match kv::get_bounded(
            &self.binding,
            HEALTH_KEY,
            HEALTH_MAX_BYTES,
            HEALTH_READ_TIMEOUT_MS,
        )
        .await
        {
            kv::Read::Text(text) => HealthRecord::decode(&text),
            _ => None,
        }
    }

    /// Stores `record` for `ttl_secs`; a failure only costs isolates the
    /// record (they then rely on their own circuits), and is logged.
    pub async fn put(&self, record: &HealthRecord, ttl_secs: u32) {
        if let Err(e) = kv::put(&self.binding, HEALTH_KEY, &record.encode(), ttl_secs).await {
            log::error(
                "cell-health",
                &format!("storing the probe record failed: {e}"),
            );
        }
    }
}
