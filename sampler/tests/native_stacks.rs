//! Native frames of a real C program (built here with frame pointers), read with perf events:
//! by the native reader itself, through the round loop with the composite source `record`
//! uses, and through the built `cufall probe-host-stacks` and `report`.
//!
//! Skips, saying why, only where this machine refuses perf events (`perf_event_paranoid`
//! above 2 for a user without CAP_PERFMON, a seccomp filter) or offers no software task clock;
//! CI runs as root with `perf_event_paranoid` 2, so it runs there.

use cufall_sampler::hoststacks::{
    AttachError, HostSource, HostStacks, NativeSource, Options, ProcFs, StackReader, StackSource,
    ThreadStack, native,
};
use cufall_trace::model::{FrameKind, Gil, HostState};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Spins in `spin_here` on the main thread; a second thread (started after 100 ms, so after
/// the reader attached, and named `napper` once it runs) sleeps in `nanosleep`; a third lives 50 ms and exits. With an argument,
/// it ends after that many seconds.
const PROGRAM: &str = r#"
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

/// Builds the program into `dir`.
fn build(dir: &Path) -> PathBuf {
    let src = dir.join("spin.c");
    let exe = dir.join("spin");
    std::fs::write(&src, PROGRAM).expect("source");
    let out = Command::new("cc")
        .args(["-O1", "-fno-omit-frame-pointer", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("a C compiler (cc) runs here: Rust links with it");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Attaches the native reader to `pid`; None (printing why) where perf events are refused or
/// absent here.
fn attach(source: &mut NativeSource, pid: u32) -> Option<Box<dyn StackReader>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match source.attach(pid) {
            Ok(r) => return Some(r),
            Err(AttachError::NativeUnavailable { detail, .. }) => {
                println!("skipped: perf events cannot sample a child here: {detail}");
                return None;
            }
            Err(e) => {
                assert!(Instant::now() < deadline, "attach kept failing: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn top(t: &ThreadStack) -> &str {
    t.frames.first().map_or("", |f| f.function.as_str())
}

#[test]
fn the_native_reader_sees_spin_here_running_and_the_sleeper_idle_in_its_syscall() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build(dir.path());
    let child = Killed(Command::new(&exe).spawn().expect("runs"));
    let pid = child.0.id();
    let mut source = NativeSource::new(Duration::from_millis(1));
    let Some(mut reader) = attach(&mut source, pid) else {
        return;
    };
    assert_eq!(reader.describe(), native::DESCRIBE);
    let exe_path = std::fs::canonicalize(&exe).expect("exe");
    let (mut spinning, mut sleeping, mut rounds) = (None, None, 0);
    let mut tids = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while (spinning.is_none() || sleeping.is_none()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
        let threads = reader.sample().expect("a read of a live process");
        rounds += 1;
        for t in threads {
            assert_eq!(t.gil, Gil::Unknown);
            assert!(!t.frames.is_empty(), "a native thread has a frame: {t:?}");
            assert!(t.frames.iter().all(|f| f.kind == FrameKind::Native));
            tids.insert(t.tid);
            if t.tid == pid && t.state == HostState::Running && top(&t) == "spin_here" {
                spinning = Some(t);
            } else if t.name == "napper"
                && t.state == HostState::Idle
                && ["nanosleep", "clock_nanosleep"].contains(&top(&t))
            {
                sleeping = Some(t);
            }
        }
    }
    let spinning = spinning.unwrap_or_else(|| panic!("spin_here never seen in {rounds} rounds"));
    let f = &spinning.frames[0];
    assert_eq!(f.file, exe_path.display().to_string());
    assert_eq!((f.module.as_str(), f.line), ("spin", None));
    // Built with frame pointers: its caller is there too.
    assert!(
        spinning.frames.iter().any(|f| f.function == "main"),
        "{spinning:#?}"
    );
    assert_eq!(spinning.name, "spin");
    // Found, idle in its system call, under the name it gave itself after it started.
    let sleeping =
        sleeping.unwrap_or_else(|| panic!("the napper thread never seen idle in {rounds} rounds"));
    assert_eq!(sleeping.frames.len(), 1, "one frame: the system call");
    assert!(
        sleeping.frames[0].module.starts_with("libc"),
        "{sleeping:#?}"
    );
    // The threads started after attaching were found.
    assert!(tids.len() >= 2, "{tids:?}");
    // Reads go on after the brief thread ended.
    std::thread::sleep(Duration::from_millis(100));
    let threads = reader.sample().expect("still readable");
    assert!(threads.iter().any(|t| t.tid == pid));
    drop(child);
    // Once the process is gone, reads say so.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match reader.sample() {
            Err(cufall_sampler::hoststacks::ReadError::Gone) => break,
            other => assert!(
                Instant::now() < deadline,
                "reads of an ended process: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn record_s_source_reads_a_native_program_natively_through_the_round_loop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build(dir.path());
    let child = Killed(Command::new(&exe).spawn().expect("runs"));
    let pid = child.0.id();
    if attach(&mut NativeSource::new(Duration::from_millis(1)), pid).is_none() {
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let host = HostStacks::start(
        pid,
        tx,
        Box::new(HostSource::new(Duration::from_millis(1))),
        Box::new(ProcFs::default()),
        Options::at(Duration::from_millis(1)),
    )
    .expect("sampler thread");
    std::thread::sleep(Duration::from_millis(700));
    let summary = host.stop();
    drop(child);
    let p = summary
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .unwrap_or_else(|| panic!("{summary:#?}"));
    assert_eq!(p.interpreter, native::DESCRIBE);
    assert!(p.samples > 0 && p.unread.is_none(), "{summary:#?}");
    let mut spin = false;
    for m in rx.try_iter() {
        if let cufall_sampler::pipeline::SinkMsg::Host { stacks, .. } = m {
            spin |= stacks
                .iter()
                .any(|f| f.depth == 0 && f.function == "spin_here");
        }
    }
    assert!(spin, "a stack with spin_here innermost was sent");
    assert!(
        summary
            .manifest_text()
            .contains("native frames (perf task-clock"),
        "{}",
        summary.manifest_text()
    );
}

#[test]
fn probe_host_stacks_and_report_show_a_native_program_s_frames() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build(dir.path());
    {
        let child = Killed(Command::new(&exe).spawn().expect("runs"));
        if attach(
            &mut NativeSource::new(Duration::from_millis(1)),
            child.0.id(),
        )
        .is_none()
        {
            return;
        }
    }
    let trace = dir.path().join("n.cufall");
    let out = assert_cmd::Command::cargo_bin("cufall")
        .expect("cufall")
        .args(["probe-host-stacks", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .arg("1.5")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("(0 python, 1 native)"), "{stderr}");
    let report = assert_cmd::Command::cargo_bin("cufall")
        .expect("cufall")
        .arg("report")
        .arg(&trace)
        .output()
        .expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("spin_here (spin)"), "{text}");
    assert!(text.contains("nanosleep (libc.so"), "{text}");
}
