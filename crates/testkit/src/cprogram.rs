//! One small C program built here with frame pointers, for the host-stack tests on real
//! processes: run as a program, its native frames are read with perf events; built as a shared
//! library, Python calls into it through ctypes and its frame shows under the Python caller.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// `spin_here(seconds)` spins (its callers visible through frame pointers). As a program the
/// main thread spins in it; a second thread (started after 100 ms, so after a reader attached,
/// and named `napper` once it runs) sleeps in `nanosleep`; a third lives 50 ms and exits. With
/// an argument, the program ends after that many seconds.
pub const SOURCE: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) void spin_here(double seconds) {
    double end = now() + seconds;
    while (now() < end)
        for (int i = 0; i < 100000; i++) sink += i;
}

__attribute__((noinline)) void *nap(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "napper");
    for (;;) {
        struct timespec d = {0, 10 * 1000 * 1000};
        nanosleep(&d, 0);
    }
    return 0;
}

__attribute__((noinline)) void *brief(void *arg) {
    (void)arg;
    spin_here(0.05);
    return 0;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1e9;
    pthread_t a, b;
    spin_here(0.1);
    pthread_create(&a, 0, nap, 0);
    pthread_create(&b, 0, brief, 0);
    spin_here(seconds);
    return 0;
}
"#;

/// Builds the program `dir/spin`.
pub fn build_program(dir: &Path) -> PathBuf {
    build(dir, "spin", &[])
}

/// Builds the shared library `dir/libspin.so` (its `spin_here` is what ctypes calls).
pub fn build_library(dir: &Path) -> PathBuf {
    build(dir, "libspin.so", &["-shared", "-fPIC"])
}

fn build(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join("spin.c");
    let out = dir.join(name);
    std::fs::write(&src, SOURCE).expect("source");
    let cc = Command::new("cc")
        .args(["-O1", "-fno-omit-frame-pointer", "-pthread"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .expect("a C compiler (cc) runs here: Rust links with it");
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    out
}

/// A child process, killed and reaped when dropped (a failed assertion leaves none behind).
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
