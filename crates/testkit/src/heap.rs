//! A global allocator for tests that bound memory per case (the fuzz tests): the system
//! allocator, counting the bytes in use and their peak, and refusing an allocation past a hard
//! ceiling (the test process then aborts, failing the test, rather than the machine running
//! out of memory). A test binary installs it with
//! `#[global_allocator] static HEAP: Counting = Counting;` and reads [`in_use`] and [`peak`].
#![allow(
    unsafe_code,
    reason = "a global allocator is an unsafe trait; this one only counts"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Past this much heap in use, allocations fail.
pub const HARD_CEILING: usize = 3 << 30;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The counting allocator.
pub struct Counting;

// SAFETY: every call goes to `System` with the caller's arguments unchanged; the counters never
// touch the memory, and a refused allocation returns null as `GlobalAlloc` allows.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        if now > HARD_CEILING {
            IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Bytes of heap in use now (0 where [`Counting`] is not the global allocator).
pub fn in_use() -> usize {
    IN_USE.load(Ordering::Relaxed)
}

/// The most bytes in use since [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new peak from what is in use now; returns that.
pub fn reset_peak() -> usize {
    let now = in_use();
    PEAK.store(now, Ordering::Relaxed);
    now
}
