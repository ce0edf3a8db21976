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

/// What the kernel says of this host's clock (`adjtimex` without changing anything): the most
/// it may be off true time and its estimate, in microseconds, and whether it counts the clock
/// synchronised (NTP or PTP disciplines it). `None` where the call fails.
pub fn clock_error() -> Option<(i64, i64, bool)> {
    // SAFETY: timex is plain data; all zeros (modes = 0) asks for the state and changes nothing.
    let mut t: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is a valid, writable timex for the call's duration.
    let state = unsafe { libc::adjtimex(&mut t) };
    if state < 0 {
        return None;
    }
    let synchronised = state != libc::TIME_ERROR && t.status & libc::STA_UNSYNC == 0;
    // `c_long` is i64 here but i32 on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let (max, est) = (i64::from(t.maxerror), i64::from(t.esterror));
    Some((max, est, synchronised))
}

/// Keeps thread `tid` (of any process the caller may change) to the CPUs in `cpus`; CPUs past
/// what the kernel's affinity mask can hold are left out.
pub fn set_thread_affinity(
    tid: i32,
    cpus: &std::collections::BTreeSet<usize>,
) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array, for which all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let max = usize::try_from(libc::CPU_SETSIZE).unwrap_or(0);
    for &cpu in cpus.iter().filter(|&&c| c < max) {
        // SAFETY: `cpu` is below CPU_SETSIZE, so the bit lies inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: the set is initialised and its size is passed with it.
    let r = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// This machine's host name (empty when the kernel does not say).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    /// Asking the kernel about its clock changes nothing and answers with errors that are not
    /// negative.
    #[test]
    fn the_clock_error_is_read_without_changing_the_clock() {
        let Some((max_us, est_us, synced)) = super::clock_error() else {
            panic!("adjtimex(modes = 0) failed");
        };
        eprintln!("clock: max error {max_us} µs, estimated {est_us} µs, synchronised: {synced}");
        assert!(max_us >= 0 && est_us >= 0);
    }
}
