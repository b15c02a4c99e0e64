//! What the resolver's memory cache costs at its bound (issue 40): heap
//! bytes held by a resolver whose cache is full, counted by a counting
//! allocator (this test binary's only test, so nothing else allocates
//! meanwhile). Native 64-bit pointers: an upper bound for wasm32's.
//! `cargo test -p router-core --test memory_cache_bound -- --nocapture`
//! prints the figures (docs/soak.md, "Memory at the bound").

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

use router_core::question::{ClassifyKind, ClassifyRequest, Target};
use router_core::resolve::topology::CachePolicy;
use router_core::resolve::{
    CachedAnswer, ClientPolicy, Platform, RawAnswer, Resolver, SharedCache, TopologyTransport,
    TransportError,
};
use router_core::trace::Trace;

struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size() as isize, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HELD.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Answers every question with a production-sized cell address.
struct Service;

impl TopologyTransport for Service {
    async fn classify(&self, _: &str, _: u32, _: &Trace) -> Result<RawAnswer, TransportError> {
        Ok(RawAnswer {
            status: 200,
            body: r#"{"action":"PROXY","proxy":{"address":"cell-2.gitlab.com:443"}}"#.into(),
            cache_control: Some("max-age=60".into()),
            cache_tag: None,
        })
    }
}

/// Keeps nothing: only the memory cache is measured.
struct NoShared;

impl SharedCache for NoShared {
    async fn get(&self, _: &str) -> Option<CachedAnswer> {
        None
    }
    fn put(&self, _: &str, _: &CachedAnswer, _: u32) {}
}

struct Clock(Cell<u64>);

impl Platform for Clock {
    fn now_ms(&self) -> u64 {
        self.0.get()
    }
    fn random(&self) -> f64 {
        0.5
    }
    async fn sleep(&self, ms: u32) {
        self.0.set(self.0.get() + u64::from(ms));
    }
}

/// A `ROUTE` claim as the `cells` ruleset's path rules ask it, for a typical
/// group path of ~20 characters.
fn question(i: usize) -> ClassifyRequest {
    ClassifyRequest {
        kind: ClassifyKind::Claim(0),
        value: Some(format!("some-group-{i:08}/project")),
        method: None,
        target: Target::Web,
    }
}

#[test]
fn a_full_memory_cache_holds_a_bounded_few_hundred_bytes_an_entry() {
    const ENTRIES: usize = 10_000;
    let before = HELD.load(Ordering::Relaxed);
    let resolver = Resolver::new(
        Service,
        NoShared,
        Clock(Cell::new(1_000_000)),
        CachePolicy::default(),
        ClientPolicy {
            memory_entries: ENTRIES,
            ..ClientPolicy::default()
        },
    );
    let mut asked = 0;
    let mut held_at = |keys: usize| {
        while asked < keys {
            futures_executor::block_on(resolver.resolve(&question(asked)));
            asked += 1;
        }
        HELD.load(Ordering::Relaxed) - before
    };
    let full = held_at(ENTRIES);
    let three_times = held_at(3 * ENTRIES);
    assert_eq!(resolver.memory_len(), ENTRIES);
    let per_entry = full / ENTRIES as isize;
    eprintln!(
        "memory cache: {ENTRIES} entries hold {full} bytes ({per_entry} an entry); after {} keys {three_times} bytes",
        3 * ENTRIES
    );
    assert!(per_entry < 1024, "{per_entry} bytes an entry");
    // Bounded: three times the keys, the same memory (give or take the
    // hash map's and the queue's slack).
    assert!(
        (three_times - full).abs() < full / 4,
        "{full} bytes full, {three_times} after three times the keys"
    );
}
