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
