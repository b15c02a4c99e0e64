//! The edge's one clock: `Date.now()`, held for the length of a
//! synchronous call.

use std::cell::Cell;

/// The clock as [`now`] reads it.
#[derive(Clone, Copy)]
enum Clock {
    /// Read on every call.
    Live,
    /// A [`HeldClock`] lives and the clock has not been read yet.
    Held,
    /// A [`HeldClock`] lives: this reading stands.
    HeldAt(f64),
}

thread_local! {
    static CLOCK: Cell<Clock> = const { Cell::new(Clock::Live) };
}

/// `Date.now()`, read at most once per [`HeldClock`]: workerd moves the
/// clock only between I/O events, never while code runs, so a second read
/// inside one synchronous call would return the same value and only cost
/// another call out of wasm.
pub fn now() -> f64 {
    CLOCK.with(|clock| match clock.get() {
        Clock::HeldAt(now) => now,
        Clock::Held => {
            let now = js_sys::Date::now();
            clock.set(Clock::HeldAt(now));
            now
        }
        Clock::Live => js_sys::Date::now(),
    })
}

/// [`now`] in whole milliseconds since the epoch.
pub fn now_ms() -> u64 {
    now() as u64
}

/// While alive, [`now`] reads the clock once and returns that reading.
/// Only for a synchronous call into wasm (an `await` lets time pass).
pub struct HeldClock;

impl HeldClock {
    pub fn hold() -> HeldClock {
        CLOCK.with(|clock| clock.set(Clock::Held));
        HeldClock
    }
}

impl Drop for HeldClock {
    fn drop(&mut self) {
        CLOCK.with(|clock| clock.set(Clock::Live));
    }
}
