//! The core's [`Platform`]: time, randomness, timers and the resolver's
//! warnings, from JS.

use std::time::Duration;

use router_core::platform::Platform;

use crate::{clock, log, random};

/// Time, randomness and timers from JS.
pub struct JsPlatform;

impl Platform for JsPlatform {
    fn now_ms(&self) -> u64 {
        clock::now_ms()
    }

    fn random(&self) -> f64 {
        js_sys::Math::random()
    }

    fn random_bytes(&self, out: &mut [u8]) {
        random::random_bytes(out);
    }

    async fn sleep(&self, ms: u32) {
        worker::Delay::from(Duration::from_millis(u64::from(ms))).await;
    }

    fn warn(&self, message: &str) {
        log::warn("resolver", message);
    }
}
