//! The runtime control document at the edge (router_core::control): read
//! from the `ROUTER_CONTROL` KV namespace at most once per interval per
//! isolate, by the one request that finds it due, and applied to the
//! isolate (disabled rules, purge generation, passthrough, log override).

use std::cell::RefCell;

use router_core::control::{Control, ControlState, Mode, ReadOutcome, CONTROL_KEY};
use router_core::ruleset::Ruleset;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::EdgeResolver;

/// The KV binding's name (`kv_namespaces` in wrangler.toml).
pub const BINDING: &str = "ROUTER_CONTROL";

/// A KV read that takes longer is abandoned (the last document stays).
const READ_TIMEOUT_MS: u64 = 1_000;

/// How long a request waits for another request's first read of the
/// document (the isolate's first), polling every few ms.
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
    /// or the isolate has never read the document).
    pub fn needs_read(&self, now: u64) -> bool {
        let state = self.state.borrow();
        state.must_wait() || state.due(now)
    }

    pub fn mode(&self) -> Mode {
        self.state.borrow().current().mode
    }

    pub fn request_log(&self) -> Option<router_core::config::RequestLogging> {
        self.state.borrow().current().request_log
    }

    /// Reads the document if it is due and applies it; otherwise, until
    /// the isolate's first read has finished, waits for it.
    pub async fn refresh(&self, ruleset: Option<&Ruleset>, resolver: Option<&EdgeResolver>) {
        let now = now_ms();
        if self.state.borrow().due(now) {
            self.state.borrow_mut().begin_read(now);
            let outcome = read(&self.binding).await;
            let applied = self.state.borrow_mut().finish_read(outcome, now_ms());
            if let Some(problem) = &applied.problem {
                crate::log_error("control", problem);
            }
            if applied.changed {
                let state = self.state.borrow();
                apply(state.current(), applied.purged, ruleset, resolver);
            }
            return;
        }
        let mut waited = 0;
        while self.state.borrow().must_wait() && waited < READ_TIMEOUT_MS + 100 {
            router_core::resolve::Platform::sleep(&crate::io::JsPlatform, FIRST_READ_POLL_MS).await;
            waited += u64::from(FIRST_READ_POLL_MS);
        }
    }
}

fn apply(
    control: &Control,
    purged: bool,
    ruleset: Option<&Ruleset>,
    resolver: Option<&EdgeResolver>,
) {
    let line = serde_json::json!({
        "level": "info",
        "scope": "control",
        "message": format!("control document applied: {}", control.summary()),
    });
    web_sys::console::log_1(&line.to_string().into());
    if let Some(rules) = ruleset {
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
    if purged {
        if let Some(resolver) = resolver {
            resolver.purge(control.purge_generation);
        }
    }
}

fn now_ms() -> u64 {
    js_sys::Date::now() as u64
}

/// One read of the document: `binding.get(CONTROL_KEY)`, bounded in time.
async fn read(binding: &JsValue) -> ReadOutcome {
    let get = js_sys::Reflect::get(binding, &"get".into())
        .ok()
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok());
    let Some(get) = get else {
        return ReadOutcome::Failed(format!("{BINDING} is not a KV namespace"));
    };
    let promise = match get.call1(binding, &CONTROL_KEY.into()) {
        Ok(p) => p,
        Err(e) => return ReadOutcome::Failed(describe(&e)),
    };
    let Ok(promise) = promise.dyn_into::<js_sys::Promise>() else {
        return ReadOutcome::Failed(format!("{BINDING}.get did not return a promise"));
    };
    // Raced against a timer in JS: the read is abandoned after the limit.
    let timer = js_sys::Promise::new(&mut |resolve, _| {
        let set_timeout = js_sys::Reflect::get(&js_sys::global(), &"setTimeout".into())
            .ok()
            .and_then(|f| f.dyn_into::<js_sys::Function>().ok());
        if let Some(set_timeout) = set_timeout {
            let _ = set_timeout.call3(
                &JsValue::UNDEFINED,
                &resolve,
                &JsValue::from_f64(READ_TIMEOUT_MS as f64),
                &TIMED_OUT.into(),
            );
        }
    });
    let race = js_sys::Promise::race(&js_sys::Array::of2(&promise, &timer));
    match JsFuture::from(race).await {
        Ok(value) if value.as_string().as_deref() == Some(TIMED_OUT) => {
            ReadOutcome::Failed(format!("no answer within {READ_TIMEOUT_MS} ms"))
        }
        Ok(value) if value.is_null() || value.is_undefined() => ReadOutcome::Absent,
        Ok(value) => match value.as_string() {
            Some(text) => ReadOutcome::Text(text),
            None => ReadOutcome::Failed("the value is not text".into()),
        },
        Err(e) => ReadOutcome::Failed(describe(&e)),
    }
}

/// What the timer resolves with; a document can never be this text (it is
/// not a JSON object).
const TIMED_OUT: &str = "\u{0}timed out";

fn describe(error: &JsValue) -> String {
    error
        .dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| error.as_string())
        .unwrap_or_else(|| "KV error".into())
}
