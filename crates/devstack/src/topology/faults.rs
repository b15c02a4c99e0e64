//! Fault injection (`/_faults`, `--faults`) and the classify statistics
//! (`/_stats`) of the local Topology Service.

use std::collections::{BTreeMap, VecDeque};

use hyper::header::HeaderValue;
use serde::Serialize;
use serde_json::{json, Value};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Faults {
    pub latency_ms: u64,
    pub error_rate: f64,
    pub error_status: u16,
    pub fail_next: u64,
    pub not_found_all: bool,
    pub refuse_connections: bool,
    pub cache_control: Option<String>,
    /// Answer every classify call with `307 Temporary Redirect` to this URL
    /// (a router must not follow it).
    pub redirect_to: Option<String>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            latency_ms: 0,
            error_rate: 0.0,
            error_status: 503,
            fail_next: 0,
            not_found_all: false,
            refuse_connections: false,
            cache_control: None,
            redirect_to: None,
        }
    }
}

impl Faults {
    /// Applies a partial update: only the given fields change. All-or-nothing.
    pub fn apply(&mut self, patch: &Value) -> Result<(), String> {
        let obj = patch.as_object().ok_or("faults must be a JSON object")?;
        let mut next = self.clone();
        for (key, v) in obj {
            let bad = || format!("bad value for {key}: {v}");
            match key.as_str() {
                "latency_ms" => next.latency_ms = v.as_u64().ok_or_else(bad)?,
                "error_rate" => {
                    let r = v.as_f64().ok_or_else(bad)?;
                    if !(0.0..=1.0).contains(&r) {
                        return Err(format!("error_rate must be within 0..=1, got {r}"));
                    }
                    next.error_rate = r;
                }
                "error_status" => {
                    let s = v
                        .as_u64()
                        .filter(|s| (200..=599).contains(s))
                        .ok_or_else(bad)?;
                    next.error_status = s as u16;
                }
                "fail_next" => next.fail_next = v.as_u64().ok_or_else(bad)?,
                "not_found_all" => next.not_found_all = v.as_bool().ok_or_else(bad)?,
                "refuse_connections" => next.refuse_connections = v.as_bool().ok_or_else(bad)?,
                "cache_control" => {
                    next.cache_control = match v {
                        Value::Null => None,
                        Value::String(s) => {
                            HeaderValue::from_str(s).map_err(|_| bad())?;
                            Some(s.clone())
                        }
                        _ => return Err(bad()),
                    }
                }
                "redirect_to" => {
                    next.redirect_to = match v {
                        Value::Null => None,
                        Value::String(s) => {
                            HeaderValue::from_str(s).map_err(|_| bad())?;
                            Some(s.clone())
                        }
                        _ => return Err(bad()),
                    }
                }
                other => return Err(format!("unknown fault {other:?}")),
            }
        }
        *self = next;
        Ok(())
    }
}

#[derive(Default)]
/// What `/_stats` reports: classify calls, by type, and the last requests.
pub(super) struct Stats {
    pub(super) classify_calls: u64,
    pub(super) by_type: BTreeMap<String, u64>,
    pub(super) last_requests: VecDeque<Value>,
}

impl Stats {
    pub(super) fn to_json(&self) -> Value {
        json!({
            "classify_calls": self.classify_calls,
            "by_type": self.by_type,
            "last_requests": self.last_requests,
        })
    }
}

/// The current faults plus the random state `error_rate` draws from.
pub(super) struct FaultState {
    pub(super) faults: Faults,
    pub(super) rng: u64,
}

impl FaultState {
    fn next_unit(&mut self) -> f64 {
        // xorshift64*: plenty for a fault probability.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Returns the status of an injected failure for this call, if any
    /// (`fail_next` first, then `error_rate`).
    pub(super) fn injected_failure(&mut self) -> Option<(u16, &'static str)> {
        if self.faults.fail_next > 0 {
            self.faults.fail_next -= 1;
            return Some((self.faults.error_status, "fail_next"));
        }
        let rate = self.faults.error_rate;
        if rate > 0.0 && self.next_unit() < rate {
            return Some((self.faults.error_status, "error_rate"));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_patch() {
        let mut f = Faults::default();
        f.apply(&json!({"latency_ms": 5, "cache_control": "no-store"}))
            .unwrap();
        assert_eq!(f.latency_ms, 5);
        assert_eq!(f.error_status, 503);
        f.apply(&json!({"cache_control": null})).unwrap();
        assert_eq!(f.cache_control, None);
        assert!(f.apply(&json!({"error_rate": 2.0})).is_err());
        assert!(f.apply(&json!({"latency_ms": 1, "bogus": 1})).is_err());
        assert_eq!(f.latency_ms, 5);
    }
}
