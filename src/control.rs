//! The runtime control document at the edge (router_core::control): read
//! from the `ROUTER_CONTROL` KV namespace at most once per interval per
//! isolate, in the background of the one request that finds it due
//! (`ctx.waitUntil`: no request waits for it), and applied to the isolate
//! (disabled rules, purge generation, passthrough, log override). Only an
//! isolate's first requests wait for its first read, and for at most
//! `router_core::control::FIRST_READ_WAIT_MS`.

use std::cell::RefCell;
use std::rc::Rc;

use router_core::control::{
    Control, ControlState, Mode, ReadOutcome, CONTROL_KEY, MAX_DOCUMENT_BYTES, READ_TIMEOUT_MS,
};
use wasm_bindgen::JsValue;

use crate::isolate::Isolate;

/// The KV binding's name (`kv_namespaces` in wrangler.toml).
pub const BINDING: &str = "ROUTER_CONTROL";

/// How often a request waiting for the isolate's first read looks for it.
const FIRST_READ_POLL_MS: u32 = 5;

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

    /// Starts a read in the background of this request (`ctx`) if one is
    /// due; then, until the isolate's first read has finished (and for at
    /// most `FIRST_READ_WAIT_MS`), waits for it.
    pub async fn refresh(iso: &Rc<Isolate>, ctx: &worker::worker_sys::Context) {
        let Some(controls) = &iso.controls else {
            return;
        };
        let now = now_ms();
        if controls.state.borrow().due(now) {
            controls.state.borrow_mut().begin_read(now);
            let iso = Rc::clone(iso);
            let read = wasm_bindgen_futures::future_to_promise(async move {
                if let Some(controls) = &iso.controls {
                    let outcome = read(&controls.binding).await;
                    controls.finish_read(&iso, outcome);
                }
                Ok(JsValue::UNDEFINED)
            });
            let _ = ctx.wait_until(&read);
        }
        while controls.state.borrow().must_wait(now_ms()) {
            router_core::resolve::Platform::sleep(&crate::io::JsPlatform, FIRST_READ_POLL_MS).await;
        }
    }

    fn finish_read(&self, iso: &Isolate, outcome: ReadOutcome) {
        let applied = self.state.borrow_mut().finish_read(outcome, now_ms());
        if let Some(problem) = &applied.problem {
            crate::log_error("control", problem);
        }
        for warning in &applied.warnings {
            crate::log_warn("control", warning);
        }
        let known = self.state.borrow().is_known();
        if let Some(resolver) = &iso.resolver {
            resolver.set_shared_usable(known);
        }
        if applied.changed {
            let state = self.state.borrow();
            apply(state.current(), applied.purged, iso);
        }
    }
}

fn apply(control: &Control, purged: bool, iso: &Isolate) {
    crate::log_line(
        "info",
        "control",
        &format!("control document applied: {}", control.summary()),
    );
    if let Some(rules) = &iso.state.ruleset {
        let unknown = rules.set_disabled(&control.disabled_rules);
        if !unknown.is_empty() {
            crate::log_error(
                "control",
                &format!(
                    "disabled_rules names no rule of ruleset {}: {}",
                    rules.name(),
                    unknown.join(", ")
                ),
            );
        }
    }
    if let Some(resolver) = &iso.resolver {
        if purged {
            resolver.purge(control.purge_generation);
        }
        // Once per control read that changed the document, never per
        // request: the list is indexed and the memory entries it names
        // are dropped now.
        let (in_force, dropped) = resolver.invalidate(&control.invalidations);
        if in_force > 0 || !control.invalidations.is_empty() {
            crate::log_line(
                "info",
                "control",
                &format!(
                    "invalidations applied: {in_force} in force ({} in the document), {dropped} memory entries dropped",
                    control.invalidations.len()
                ),
            );
        }
    }
}

fn now_ms() -> u64 {
    js_sys::Date::now() as u64
}

/// One read of the document: `binding.get(CONTROL_KEY)` as a stream, at
/// most [`MAX_DOCUMENT_BYTES`] of it, bounded in time.
async fn read(binding: &JsValue) -> ReadOutcome {
    // Abandoned a little before the state gives the read up.
    let timeout = (READ_TIMEOUT_MS - 500) as u32;
    match crate::kv::get_bounded(binding, CONTROL_KEY, MAX_DOCUMENT_BYTES, timeout).await {
        crate::kv::Read::Text(text) => ReadOutcome::Text(text),
        crate::kv::Read::Absent => ReadOutcome::Absent,
        crate::kv::Read::Failed(why) => ReadOutcome::Failed(why),
    }
}
