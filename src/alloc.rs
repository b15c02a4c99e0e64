//! The worker's global allocator: small blocks recycled by size class in
//! front of talc.
//!
//! A routed request makes some thirty small allocations (the request's
//! parts, the trace ids, the plan and its encoding, the log line) and frees
//! them all before the next one. Talc's general search took ~200 wasm
//! instructions per allocate-and-free pair (6 k of a passthrough request's
//! 37 k, docs/benchmark.md); a freed small block goes instead onto its size
//! class's list and the next allocation of that class takes it back, a few
//! instructions each way (blocks up to 2 KiB: the log line and the encoded
//! plan are 0.5–1 KiB). Blocks on the lists are never handed back to talc:
//! the lists hold at most what the isolate once had in use at a time.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::ptr;

/// Every block's alignment, and the step between the small classes.
const GRANULE: usize = 16;
/// Small classes: 16, 32, …, 256 bytes.
const SMALL: usize = 256;
/// The step between the larger classes: 384, 512, …, 2048 bytes (a
/// request's log line and encoded plan). Larger blocks go straight to the
/// inner allocator.
const STEP: usize = 128;
const LARGEST: usize = 2048;
const CLASSES: usize = SMALL / GRANULE + (LARGEST - SMALL) / STEP;

/// `inner` with a free list per small size class. Only for a single
/// thread (the worker's wasm has no threads): the lists are not locked.
pub struct SizeClassCache<A> {
    inner: A,
    /// Each list's head; a free block's first word points to the next.
    free: UnsafeCell<[*mut u8; CLASSES]>,
}

// SAFETY: wasm32-unknown-unknown without the atomics feature runs one
// thread, so the lists are never touched from two at once.
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
unsafe impl<A: Sync> Sync for SizeClassCache<A> {}

impl<A> SizeClassCache<A> {
    pub const fn new(inner: A) -> Self {
        SizeClassCache {
            inner,
            free: UnsafeCell::new([ptr::null_mut(); CLASSES]),
        }
    }
}

/// The size class of `layout`, if it has one.
fn class_of(layout: Layout) -> Option<usize> {
    let size = layout.size();
    if layout.align() > GRANULE {
        None
    } else if size <= SMALL {
        Some(size.saturating_sub(1) / GRANULE)
    } else if size <= LARGEST {
        Some(SMALL / GRANULE + (size - SMALL - 1) / STEP)
    } else {
        None
    }
}

/// What a block of size class `class` is allocated as.
fn class_layout(class: usize) -> Layout {
    let size = if class < SMALL / GRANULE {
        (class + 1) * GRANULE
    } else {
        SMALL + (class + 1 - SMALL / GRANULE) * STEP
    };
    // SAFETY: a non-zero multiple of a power-of-two alignment, far below isize::MAX.
    unsafe { Layout::from_size_align_unchecked(size, GRANULE) }
}

unsafe impl<A: GlobalAlloc> GlobalAlloc for SizeClassCache<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(class) = class_of(layout) else {
            return self.inner.alloc(layout);
        };
        let head = &mut (*self.free.get())[class];
        if head.is_null() {
            return self.inner.alloc(class_layout(class));
        }
        let block = *head;
        // SAFETY: a listed block is free, GRANULE-aligned and holds the next link.
        *head = block.cast::<*mut u8>().read();
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let Some(class) = class_of(layout) else {
            return self.inner.dealloc(block, layout);
        };
        let head = &mut (*self.free.get())[class];
        // SAFETY: the block is at least GRANULE bytes, GRANULE-aligned, and now ours.
        block.cast::<*mut u8>().write(*head);
        *head = block;
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match class_of(layout) {
            Some(_) => {
                let block = self.alloc(layout);
                if !block.is_null() {
                    block.write_bytes(0, layout.size());
                }
                block
            }
            // Larger blocks: the inner allocator zeroes them itself.
            None => self.inner.alloc_zeroed(layout),
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY (as GlobalAlloc::realloc requires of the caller): new_size
        // with this alignment does not overflow isize.
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        match (class_of(layout), class_of(new_layout)) {
            // The block already has room (its class's size).
            (Some(old), Some(new)) if old == new => block,
            (None, None) => self.inner.realloc(block, layout, new_size),
            _ => {
                let moved = self.alloc(new_layout);
                if !moved.is_null() {
                    ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                    self.dealloc(block, layout);
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn sizes_map_to_classes_of_16_bytes_to_256_then_of_128_to_2048() {
        assert_eq!(class_of(layout(1, 1)), Some(0));
        assert_eq!(class_of(layout(16, 8)), Some(0));
        assert_eq!(class_of(layout(17, 1)), Some(1));
        assert_eq!(class_of(layout(256, 16)), Some(15));
        assert_eq!(class_of(layout(257, 1)), Some(16));
        assert_eq!(class_of(layout(384, 1)), Some(16));
        assert_eq!(class_of(layout(385, 1)), Some(17));
        assert_eq!(class_of(layout(2048, 8)), Some(CLASSES - 1));
        assert_eq!(class_of(layout(2049, 1)), None);
        assert_eq!(class_of(layout(8, 32)), None);
        // Every size fits its class's block, and the class below would not hold it.
        for size in 1..=LARGEST {
            let class = class_of(layout(size, 1)).unwrap();
            assert!(class_layout(class).size() >= size, "{size}");
            assert!(
                class == 0 || class_layout(class - 1).size() < size,
                "{size}"
            );
        }
        assert_eq!(class_layout(CLASSES - 1).size(), LARGEST);
    }

    #[test]
    fn a_freed_block_is_reused_by_the_next_allocation_of_its_class_only() {
        let cache = SizeClassCache::new(System);
        unsafe {
            let a = cache.alloc(layout(20, 4));
            cache.dealloc(a, layout(20, 4));
            // Another class does not take it.
            let b = cache.alloc(layout(40, 8));
            assert_ne!(a, b);
            // Same class (17..=32 bytes): the same block, most recently freed first.
            let c = cache.alloc(layout(32, 8));
            assert_eq!(a, c);
            let d = cache.alloc(layout(24, 8));
            assert_ne!(c, d);
            for (p, l) in [(b, layout(40, 8)), (c, layout(32, 8)), (d, layout(24, 8))] {
                cache.dealloc(p, l);
            }
        }
    }

    #[test]
    fn realloc_keeps_the_contents_across_classes_and_into_large_blocks() {
        let cache = SizeClassCache::new(System);
        unsafe {
            let mut size = 3;
            let mut block = cache.alloc(layout(size, 1));
            block.copy_from_nonoverlapping(b"abc".as_ptr(), 3);
            // Within its class: the same block.
            let same = cache.realloc(block, layout(size, 1), 16);
            assert_eq!(same, block);
            size = 16;
            for new_size in [17, 100, 256, 300, 383, 384, 1000, 5000, 40, 2] {
                block = cache.realloc(block, layout(size, 1), new_size);
                assert_eq!(std::slice::from_raw_parts(block, 2), b"ab");
                if new_size >= 3 {
                    assert_eq!(block.add(2).read(), b'c');
                }
                size = new_size;
            }
            cache.dealloc(block, layout(size, 1));
            let zeroed = cache.alloc_zeroed(layout(200, 8));
            assert!(std::slice::from_raw_parts(zeroed, 200)
                .iter()
                .all(|&b| b == 0));
            cache.dealloc(zeroed, layout(200, 8));
        }
    }

    /// Many live blocks of mixed sizes, freed and allocated in a shuffled
    /// order: no two live blocks overlap and none is changed by another's use.
    #[test]
    fn live_blocks_never_overlap() {
        let cache = SizeClassCache::new(System);
        let mut live: Vec<(*mut u8, Layout, u8)> = Vec::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        unsafe {
            for round in 0..20_000u32 {
                let r = next();
                if live.len() < 64 && (r % 3 != 0 || live.is_empty()) {
                    let size = 1 + (r >> 8) as usize % 3000;
                    let align = 1 << ((r >> 20) % 6);
                    let l = layout(size, align);
                    let p = cache.alloc(l);
                    assert_eq!(p as usize % align, 0);
                    let tag = round as u8;
                    p.write_bytes(tag, size);
                    live.push((p, l, tag));
                } else {
                    let (p, l, tag) = live.swap_remove((r >> 8) as usize % live.len());
                    let bytes = std::slice::from_raw_parts(p, l.size());
                    assert!(
                        bytes.iter().all(|&b| b == tag),
                        "a live block was overwritten"
                    );
                    cache.dealloc(p, l);
                }
            }
            for (p, l, tag) in live {
                assert!(std::slice::from_raw_parts(p, l.size())
                    .iter()
                    .all(|&b| b == tag));
                cache.dealloc(p, l);
            }
        }
    }
}
