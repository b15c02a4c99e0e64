//! The fakes router-core's tests share: a platform whose clock and draws
//! the test sets, a gate that holds service calls and sleeps so concurrent
//! requests overlap, a Topology Service that knows some questions, and a
//! shared cache that keeps nothing. Built for the crate's own tests, and
//! for its integration tests under the `testutil` feature.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;
use std::task::{Poll, Waker};

use crate::platform::Platform;
use crate::resolve::{CachedAnswer, RawAnswer, SharedCache, TopologyTransport, TransportError};
use crate::trace::Trace;

/// Time and randomness the test sets: a clock that sleeping advances at
/// once (while the gate is open), a draw (0.5 unless set), CSPRNG bytes of
/// 0xab, and the warnings logged.
pub struct FakePlatform {
    pub now: Cell<u64>,
    pub random: Cell<f64>,
    pub warnings: RefCell<Vec<String>>,
    /// While closed, sleeping waits: time stands still.
    pub gate: Rc<Gate>,
}

impl FakePlatform {
    /// A platform whose clock reads `now_ms`.
    pub fn at(now_ms: u64) -> FakePlatform {
        FakePlatform {
            now: Cell::new(now_ms),
            random: Cell::new(0.5),
            warnings: RefCell::new(Vec::new()),
            gate: Rc::new(Gate::default()),
        }
    }

    /// Moves the clock `ms` on.
    pub fn advance(&self, ms: u64) {
        self.now.set(self.now.get() + ms);
    }
}

impl Default for FakePlatform {
    fn default() -> Self {
        FakePlatform::at(0)
    }
}

impl Platform for FakePlatform {
    fn now_ms(&self) -> u64 {
        self.now.get()
    }
    fn random(&self) -> f64 {
        self.random.get()
    }
    fn random_bytes(&self, out: &mut [u8]) {
        out.fill(0xab);
    }
    async fn sleep(&self, ms: u32) {
        self.gate.wait().await;
        self.advance(u64::from(ms));
    }
    fn warn(&self, message: &str) {
        self.warnings.borrow_mut().push(message.to_string());
    }
}

/// The platform shared by a resolver and the test that drives it.
macro_rules! shared_platform {
    ($($shared:ty),*) => {$(
        impl Platform for $shared {
            fn now_ms(&self) -> u64 {
                (**self).now_ms()
            }
            fn random(&self) -> f64 {
                (**self).random()
            }
            fn random_bytes(&self, out: &mut [u8]) {
                (**self).random_bytes(out);
            }
            async fn sleep(&self, ms: u32) {
                (**self).sleep(ms).await;
            }
            fn warn(&self, message: &str) {
                (**self).warn(message);
            }
        }
    )*};
}

shared_platform!(Rc<FakePlatform>, &FakePlatform);

/// Holds whoever waits on it while closed.
#[derive(Default)]
pub struct Gate {
    closed: Cell<bool>,
    waiters: RefCell<Vec<Waker>>,
}

impl Gate {
    pub fn close(&self) {
        self.closed.set(true);
    }

    pub fn open(&self) {
        self.closed.set(false);
        for waker in self.waiters.borrow_mut().drain(..) {
            waker.wake();
        }
    }

    pub fn wait(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.closed.get() {
                self.waiters.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
    }
}

/// A Topology Service that knows some classify bodies (each to a cell's
/// address, else `otherwise`'s, else a 404) and counts every call.
#[derive(Default)]
pub struct KnownAnswers {
    pub known: HashMap<String, String>,
    pub otherwise: Option<String>,
    pub calls: Cell<u32>,
}

impl KnownAnswers {
    /// A service that answers every question with `address`.
    pub fn always(address: &str) -> KnownAnswers {
        KnownAnswers {
            otherwise: Some(address.to_string()),
            ..Default::default()
        }
    }

    fn answer(&self, body: &str) -> RawAnswer {
        self.calls.set(self.calls.get() + 1);
        match self.known.get(body).or(self.otherwise.as_ref()) {
            Some(address) => cell_answer(address, "max-age=60"),
            None => RawAnswer {
                status: 404,
                body: r#"{"code":5}"#.into(),
                cache_control: Some("max-age=10".into()),
                cache_tag: None,
            },
        }
    }
}

impl TopologyTransport for KnownAnswers {
    async fn classify(&self, body: &str, _: u32, _: &Trace) -> Result<RawAnswer, TransportError> {
        Ok(self.answer(body))
    }
}

impl TopologyTransport for &KnownAnswers {
    async fn classify(&self, body: &str, _: u32, _: &Trace) -> Result<RawAnswer, TransportError> {
        Ok(self.answer(body))
    }
}

/// The Topology Service's 200 for a cell at `address`.
pub fn cell_answer(address: &str, cache_control: &str) -> RawAnswer {
    RawAnswer {
        status: 200,
        body: format!(r#"{{"action":"PROXY","proxy":{{"address":"{address}"}}}}"#),
        cache_control: Some(cache_control.into()),
        cache_tag: None,
    }
}

/// A shared cache that keeps nothing: only the memory cache is at work.
pub struct NoSharedCache;

impl SharedCache for NoSharedCache {
    async fn get(&self, _: &str) -> Option<CachedAnswer> {
        None
    }
    fn put(&self, _: &str, _: &CachedAnswer, _: u32) {}
}
