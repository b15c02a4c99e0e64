//! Futures kept out of their caller's code. An `async fn` awaited inside
//! another is compiled into the caller's state machine, and V8 compiles a
//! wasm function whole on its first call: a fresh isolate's first request
//! would compile every branch of the machine, the ones it never takes (a
//! retry's sleep, route learning's call, a Cache API hit) included. Behind
//! a vtable, a branch's code is a function of its own, compiled only when
//! first polled (docs/performance-ledger.md, "Ruleset loading and the
//! first request").

use std::future::Future;
use std::pin::Pin;

/// A future polled through a vtable.
pub type OutOfLine<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// `future`, boxed behind a vtable. Never inlined, so the caller cannot
/// see which vtable it gets and call the future's poll directly.
#[inline(never)]
pub fn out_of_line<'a, T>(future: impl Future<Output = T> + 'a) -> OutOfLine<'a, T> {
    Box::pin(future)
}
