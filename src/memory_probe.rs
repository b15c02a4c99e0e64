//! Test builds only (feature `memory-probe`, tests/e2e/memory.test.mjs):
//! `GET /__memory_probe__` answers, as JSON, the isolate's wasm memory
//! (it never shrinks) and its memory cache's entries, counted bytes and
//! byte budget.

use router_core::resolve::MEMORY_CACHE_BUDGET_BYTES;
use router_core::wire::{self, Plan};

use crate::isolate::Isolate;

pub const PATH: &str = "/__memory_probe__";

pub fn answer(iso: &Isolate) -> Plan<'static> {
    #[cfg(target_arch = "wasm32")]
    let wasm_bytes = core::arch::wasm32::memory_size(0).saturating_mul(65_536);
    #[cfg(not(target_arch = "wasm32"))]
    let wasm_bytes = 0usize;
    let (entries, bytes) = iso
        .resolver
        .as_ref()
        .map_or((0, 0), |r| (r.memory_len(), r.memory_bytes()));
    let body = format!(
        r#"{{"wasm_bytes":{wasm_bytes},"cache_entries":{entries},"cache_bytes":{bytes},"cache_budget_bytes":{MEMORY_CACHE_BUDGET_BYTES}}}"#
    );
    Plan::Answer {
        answer: wire::Answer::text(200, body),
        log: None,
    }
}
