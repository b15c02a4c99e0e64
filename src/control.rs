//! The runtime control document at the edge (router_core::control): read
//! from the `ROUTER_CONTROL` KV namespace at most once per interval per
//! isolate, in the background of the one request that finds it due
//! (`ctx.waitUntil`: no request waits for it), and applied to the isolate
//! (`Isolate::apply_control`: disabled rules, purge generation,
//! passthrough, log and shadow sample overrides). Only an
//! isolate's first requests wait for its first read, and for at most
//! `router_core::control::FIRST_READ_WAIT_MS`.

use std::cell::{Ref, RefCell};

use router_core::control::{
    Applied, Control, ControlState, Mode, ReadOutcome, CONTROL_KEY, MAX_DOCUMENT_BYTES,
    READ_TIMEOUT_MS,
};
use wasm_bindgen::JsValue;

use crate::{kv, log};

/// The KV binding's name (`kv_namespaces` in wrangler.toml).
pub const BINDING: &str = "ROUTER_CONTROL";

/// The isolate's control state, present when the binding is.
pub struct Controls {
    binding: JsValue,
    state: RefCell<ControlState>,
}

impl Controls {
    /// `binding`: the KV namespace, when the environment has one.
    pub fn new(binding: JsValue, refresh_secs: u32) -> Option<Controls> {
        binding.is_object().then(|| Controls {
            binding,
            state: RefCell::new(ControlState::new(u64::from(refresh_secs) * 1000)),
        })
    }

    /// Whether a request must go the asynchronous way first (a read is due,
    /// or the isolate's first read is under way).
    pub fn needs_read(&self, now: u64) -> bool {
        let state = self.state.borrow();
        state.must_wait(now) || state.due(now)
    }

    pub fn mode(&self) -> Mode {
        self.state.borrow().current().mode
    }

    pub fn request_log(&self) -> Option<router_core::log::RequestLogging> {
        self.state.borrow().current().request_log
    }

    /// The document's `shadow_sample` override, in millionths.
    pub fn shadow_per_million(&self) -> Option<u32> {
        self.state.borrow().current().shadow_per_million
    }

    /// The document in force.
    pub fn current(&self) -> Ref<'_, Control> {
        Ref::map(self.state.borrow(), ControlState::current)
    }

    /// Whether the document's purge generation is known (a read finished).
    pub fn is_known(&self) -> bool {
        self.state.borrow().is_known()
    }

    /// Whether a read is due at `now`; if so it is taken as begun.
    pub fn begin_read_if_due(&self, now: u64) -> bool {
        let due = self.state.borrow().due(now);
        if due {
            self.state.borrow_mut().begin_read(now);
        }
        due
    }

    /// Whether requests at `now` wait for the isolate's first read.
    pub fn must_wait(&self, now: u64) -> bool {
        self.state.borrow().must_wait(now)
    }

    /// One read of the document: `binding.get(CONTROL_KEY)` as a stream, at
    /// most [`MAX_DOCUMENT_BYTES`] of it, bounded in time.
    pub async fn read(&self) -> ReadOutcome {
        // Abandoned a little before the state gives the read up.
        let timeout = (READ_TIMEOUT_MS - 500) as u32;
        match kv::get_bounded(&self.binding, CONTROL_KEY, MAX_DOCUMENT_BYTES, timeout).await {
            kv::Read::Text(text) => ReadOutcome::Text(text),
            kv::Read::Absent => ReadOutcome::Absent,
            kv::Read::Failed(why) => ReadOutcome::Failed(why),
        }
    }

    /// Takes a read's `outcome` at `now`, with what is wrong in it logged.
    pub fn finish_read(&self, outcome: ReadOutcome, now: u64) -> Applied {
        let applied = self.state.borrow_mut().finish_read(outcome, now);
        if let Some(problem) = &applied.problem {
            log::error("control", problem);
        }
        for warning in &applied.warnings {
            log::warn("control", warning);
        }
        applied
    }
}
