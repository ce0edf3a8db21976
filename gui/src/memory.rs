//! Giving freed memory back to the system. glibc's allocator keeps what a thread freed in that
//! thread's arena for reuse; after loading a large trace (tiles and the report are decoded on worker
//! threads) hundreds of MB can stay resident that nothing uses. The loader calls [`give_back`] after each
//! large transient phase (the pyramid, the report), so that resident memory is what the window
//! holds (the figures are in `docs/benchmarks.md`).
#![allow(unsafe_code)]

/// Returns free pages of every arena to the system (`malloc_trim(0)`); nothing elsewhere.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory the allocator holds free; it reads and writes no
    // memory of the caller and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
