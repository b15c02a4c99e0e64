//! What the core asks of the platform it runs on: time, randomness,
//! timers and a place to report what an operator should see. The edge
//! implements it with JS (`Date.now`, `crypto.getRandomValues`, timers,
//! `console`); tests with fakes whose clock they move.

/// Time and randomness, which the edge takes from JS.
#[allow(async_fn_in_trait)]
pub trait Platform {
    fn now_ms(&self) -> u64;
    /// Uniform in `[0, 1)`: back-off jitter, spread, log sampling, the 404
    /// deadline.
    fn random(&self) -> f64;
    /// Fills `out` with bytes from a CSPRNG: request, trace and signature
    /// ids. By default from [`Platform::random`] (tests).
    fn random_bytes(&self, out: &mut [u8]) {
        for b in out.iter_mut() {
            *b = (self.random() * 256.0) as u8;
        }
    }
    async fn sleep(&self, ms: u32);
    /// Reports something an operator should see (one log line); nothing by
    /// default.
    fn warn(&self, _message: &str) {}
}
