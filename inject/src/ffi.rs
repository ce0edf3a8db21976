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

/// Writes all of `buf` to a connected socket with `MSG_NOSIGNAL`: a recorder that went away
/// (the end of a capture window) must not kill the program with SIGPIPE, whatever the
/// program does with that signal.
pub fn send_all(sock: &std::os::unix::net::UnixStream, mut buf: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for `buf.len()` bytes; the descriptor belongs to `sock`.
        let n = unsafe {
            libc::send(
                sock.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = usize::try_from(n).unwrap_or(0);
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n.min(buf.len())..];
    }
    Ok(())
}
