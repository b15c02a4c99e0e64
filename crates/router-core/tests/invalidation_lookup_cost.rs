//! What one lookup in the targeted invalidations' index costs
//! (`Index::invalidated_at`, run for every Cache API hit and every answer
//! about to be cached while an invalidation is in force): bytes allocated,
//! counted by a counting allocator (this test binary's only test, so
//! nothing else allocates meanwhile). A route claim is looked up with all
//! its ancestors; copying each of them made a lookup quadratic in the
//! route's length.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use router_core::resolve::cells::CellList;
use router_core::resolve::invalidate::{parse_claim, Index, Invalidation, Subject};
use router_core::resolve::topology::{CellAnswer, Classification};

struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn a_route_lookup_allocates_at_most_one_copy_of_the_route() {
    let cells = CellList::default();
    let list = [
        Invalidation::from_value(&serde_json::json!({"at_ms": 1_000, "claim": "route=acme"}))
            .unwrap(),
        Invalidation::from_value(&serde_json::json!({"at_ms": 2_000, "claim": "route=other"}))
            .unwrap(),
    ];
    let index = Index::default().rebuild(&list, &cells, 1_000, 60_000);
    let answer = Classification::Cell(CellAnswer {
        address: "cell-2.example".into(),
        registry_address: None,
    });
    // 4,000 segments under acme: 8 KiB, 4,001 ancestors.
    let route = format!("acme/{}", "a/".repeat(4_000));
    let Subject::Claim(kind, _) = parse_claim("route=acme").unwrap() else {
        unreachable!()
    };
    let before = ALLOCATED.load(Ordering::Relaxed);
    let at = index.invalidated_at(Some((kind, &route)), [], &answer);
    let allocated = ALLOCATED.load(Ordering::Relaxed) - before;
    println!(
        "one lookup of a {}-byte route: {allocated} bytes allocated",
        route.len()
    );
    assert_eq!(at, Some(1_000), "matched by its ancestor acme");
    assert!(
        allocated <= 2 * route.len(),
        "{allocated} bytes allocated for a {}-byte route: its ancestors were copied",
        route.len()
    );
}
