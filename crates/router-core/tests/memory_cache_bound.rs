//! What the resolver's memory cache costs at its bounds:
//! heap bytes held by a resolver whose cache is full, counted by a
//! counting allocator (this test binary's only test, so nothing else
//! allocates meanwhile), for typical keys (the entry bound binds) and for
//! the longest the router asks about (the byte budget binds). Native
//! 64-bit pointers: an upper bound for wasm32's.
//! `cargo test -p router-core --test memory_cache_bound -- --nocapture`
//! prints the figures (docs/soak.md, "Memory at the bound").

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use router_core::question::{ClassifyKind, ClassifyRequest, Target, MAX_CLASSIFY_VALUE_BYTES};
use router_core::resolve::topology::CachePolicy;
use router_core::resolve::{ClientPolicy, Resolver, MEMORY_CACHE_BUDGET_BYTES};
use router_core::testutil::{FakePlatform, KnownAnswers, NoSharedCache};

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

/// A `ROUTE` claim as the `cells` ruleset's path rules ask it, for a typical
/// group path of ~20 characters.
fn question(i: usize) -> ClassifyRequest {
    claim(format!("some-group-{i:08}/project"))
}

fn claim(value: String) -> ClassifyRequest {
    ClassifyRequest {
        kind: ClassifyKind::Claim(0),
        value: Some(value),
        method: None,
        target: Target::Web,
    }
}

/// A `ROUTE` claim as long as the router asks ([`MAX_CLASSIFY_VALUE_BYTES`]):
/// a path (`some-group-<n>/a/a/…`), or every other one made of a byte JSON
/// escapes as six (`\u0001`: the longest key a value of that length makes).
fn longest_question(i: usize) -> ClassifyRequest {
    let head = format!("some-group-{i:08}/");
    let fill = if i.is_multiple_of(2) { "a/" } else { "\u{1}" };
    let mut value = head;
    while value.len() + fill.len() <= MAX_CLASSIFY_VALUE_BYTES {
        value.push_str(fill);
    }
    assert!(value.len() > MAX_CLASSIFY_VALUE_BYTES - 2);
    claim(value)
}

fn resolver(entries: usize) -> Resolver<KnownAnswers, NoSharedCache, FakePlatform> {
    Resolver::new(
        // A production-sized cell address for every question.
        KnownAnswers::always("cell-2.gitlab.com:443"),
        NoSharedCache,
        FakePlatform::at(1_000_000),
        CachePolicy::default(),
        ClientPolicy {
            memory_entries: entries,
            ..ClientPolicy::default()
        },
    )
}

/// Asks `resolver` the questions `ask(n)` for `n` in `keys` and returns
/// the heap bytes held since `before`.
fn fill(
    resolver: &Resolver<KnownAnswers, NoSharedCache, FakePlatform>,
    keys: std::ops::Range<usize>,
    ask: impl Fn(usize) -> ClassifyRequest,
    before: isize,
) -> isize {
    for n in keys {
        futures_executor::block_on(resolver.resolve(&ask(n)));
    }
    HELD.load(Ordering::Relaxed) - before
}

/// One test (the allocator counts the whole process): typical entries,
/// then the longest.
#[test]
fn a_full_memory_cache_holds_a_bounded_few_hundred_bytes_an_entry_and_at_most_its_budget() {
    const ENTRIES: usize = 10_000;
    let before = HELD.load(Ordering::Relaxed);
    let typical = resolver(ENTRIES);
    let full = fill(&typical, 0..ENTRIES, question, before);
    let three_times = fill(&typical, ENTRIES..3 * ENTRIES, question, before);
    assert_eq!(typical.memory_len(), ENTRIES);
    let per_entry = full / ENTRIES as isize;
    eprintln!(
        "memory cache: {ENTRIES} entries hold {full} bytes ({per_entry} an entry; counted {}); after {} keys {three_times} bytes",
        typical.memory_bytes(),
        3 * ENTRIES
    );
    assert!(per_entry < 1024, "{per_entry} bytes an entry");
    // Bounded: three times the keys, the same memory (give or take the
    // hash map's and the queue's slack).
    assert!(
        (three_times - full).abs() < full / 4,
        "{full} bytes full, {three_times} after three times the keys"
    );
    drop(typical);

    // The longest values the router asks about: the byte budget binds
    // long before the entry bound (at ~2,000 entries), and holds.
    let before = HELD.load(Ordering::Relaxed);
    let longest = resolver(ENTRIES);
    let budget = MEMORY_CACHE_BUDGET_BYTES as isize;
    let mut peak = 0;
    const LONG_KEYS: usize = ENTRIES / 2;
    for round in 0..10 {
        let keys = round * LONG_KEYS / 10..(round + 1) * LONG_KEYS / 10;
        let held = fill(&longest, keys, longest_question, before);
        let counted = longest.memory_bytes() as isize;
        assert!(held <= budget, "{held} bytes held, over {budget}");
        // What the cache counts is what it holds (the rest: the resolver's
        // own few allocations).
        assert!(
            (held - counted).abs() < held / 50,
            "counted {counted}, held {held}"
        );
        peak = peak.max(held);
    }
    let entries = longest.memory_len();
    eprintln!(
        "memory cache at the cap ({MAX_CLASSIFY_VALUE_BYTES}-byte values): {} keys asked, {entries} entries kept, {} bytes counted, at most {peak} bytes held (budget {budget})",
        LONG_KEYS,
        longest.memory_bytes()
    );
    assert!(
        entries < ENTRIES,
        "{entries} entries: the budget never bound"
    );
    assert!(
        peak > budget * 9 / 10,
        "{peak} bytes: the budget was not used"
    );
}
