//! The few POSIX calls the recorder needs and std does not offer: catching Ctrl-C, signalling
//! the child, and reading this process's CPU time.
// Signals and getrusage are libc calls; each unsafe block states why it is sound.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work: two atomic stores.
    LAST_SIGNAL.store(sig, Ordering::SeqCst);
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Routes SIGINT and SIGTERM to a flag instead of killing the process, so the trace is closed.
pub fn catch_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `sa` is fully initialised (zeroed, then the handler and an empty mask are set);
        // the handler only stores atomics, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Whether Ctrl-C (or SIGTERM) arrived since [`catch_interrupts`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Sends `sig` to process `pid`. Errors (the process is gone) are ignored.
pub fn send_signal(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) with a positive pid only signals that process.
    unsafe {
        libc::kill(pid, sig);
    }
}

fn rusage() -> Option<libc::rusage> {
    // SAFETY: `ru` is a plain struct that getrusage fills; zeroed is a valid initial value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid out-pointer.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    (r == 0).then_some(ru)
}

/// CPU seconds (user + system, all threads) this process has used.
pub fn cpu_seconds() -> f64 {
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    rusage().map_or(0.0, |ru| tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// Peak resident memory of this process so far, in bytes.
pub fn peak_rss_bytes() -> u64 {
    // Linux reports ru_maxrss in KiB.
    rusage().map_or(0, |ru| u64::try_from(ru.ru_maxrss).unwrap_or(0) * 1024)
}

pub use libc::{SIGINT, SIGTERM};
