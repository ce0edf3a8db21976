//! The few POSIX calls the recorder needs and std does not offer: catching Ctrl-C (through
//! signal-hook), signalling the child, and reading this process's CPU time.
// Signals and getrusage are libc calls; each unsafe block states why it is sound.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

static INTERRUPTED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// Routes SIGINT and SIGTERM to a flag instead of killing the process, so the trace is closed.
pub fn catch_interrupts() {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registration fails only for signals that may not be caught; these two may.
        let _ = signal_hook::flag::register(sig, Arc::clone(&INTERRUPTED));
    }
}

/// SIGUSR1 and SIGUSR2 (`cufall control start` / `stop`) as flags the record loop takes.
pub fn catch_window_signals() -> (Arc<AtomicBool>, Arc<AtomicBool>) {
    let (open, close) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    // Both may be caught; registration cannot fail for them.
    let _ = signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&open));
    let _ = signal_hook::flag::register(signal_hook::consts::SIGUSR2, Arc::clone(&close));
    (open, close)
}

/// The user id of this process (for the per-user control folder).
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Whether process `pid` exists (signal 0 checks without sending anything).
pub fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) with signal 0 only checks that the process exists and may be signalled.
    unsafe { libc::kill(pid, 0) == 0 }
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

pub use libc::{SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
