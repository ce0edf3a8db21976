//! A test program for capture across `fork` (no GPU needed): the parent starts a start/end
//! range and a push/pop range and marks a moment, then forks; the child records a range of its
//! own and exits normally; the parent waits for it and closes its ranges. `sampler`'s capture
//! tests run it under the capture library and check that each process's ranges arrive on its
//! own connection, and the parent's never twice.
#![allow(unsafe_code, reason = "fork and waitpid are the point of this program")]

fn main() {
    let whole = nvtx::Range::new(c"parent-run");
    let outer = nvtx::LocalRange::new(c"parent");
    nvtx::mark(c"before-fork");
    // SAFETY: the child only makes NVTX calls and exits; it touches no lock another thread of
    // the parent could hold (this program has one thread, and the capture library gives the
    // child a fresh state after fork).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        {
            let _r = nvtx::LocalRange::new(c"child");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // `exit` runs the atexit hooks: the child's capture is flushed.
        std::process::exit(0);
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked; `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    drop(outer);
    drop(whole);
    println!("{{\"parent\":{},\"child\":{pid}}}", std::process::id());
}
