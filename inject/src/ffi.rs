//! The few libc calls capture needs, each behind a safe function.
#![allow(unsafe_code)]

/// The calling thread's system thread id (what CUPTI's SYSTEM thread ids are).
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    u32::try_from(tid).unwrap_or(0)
}

/// Runs `exit` from `atexit` and `child` in the child after every `fork`.
pub fn register_process_hooks(exit: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: both are plain `extern "C" fn()` that never unwind (their bodies catch panics).
    unsafe {
        libc::atexit(exit);
        libc::pthread_atfork(None, None, Some(child));
    }
}

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME), straight from the vDSO: the clock of
/// CUPTI's records and of the counter samples, read twice per NVTX range.
pub fn realtime_ns() -> i64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut t) };
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}
