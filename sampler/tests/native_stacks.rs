//! Native frames of a real C program (built here with frame pointers, `cufall_testkit::cprogram`)
//! through the built `cufall probe-host-stacks` and `report` (the `cufall-hoststacks` crate's
//! own tests read them with the native reader and the round loop).
//!
//! Skips, saying why, only where this machine refuses perf events (`perf_event_paranoid`
//! above 2 for a user without CAP_PERFMON, a seccomp filter) or offers no software task clock;
//! CI runs as root with `perf_event_paranoid` 2, so it runs there.

use cufall_hoststacks::{AttachError, NativeSource, StackSource};
use cufall_testkit::cprogram::{Killed, build_program};
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether the native reader may attach to `pid` here (printing why not).
fn perf_allowed(pid: u32) -> bool {
    let mut source = NativeSource::new(Duration::from_millis(1));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match source.attach(pid) {
            Ok(_) => return true,
            Err(AttachError::NativeUnavailable { detail, .. }) => {
                println!("skipped: perf events cannot sample a child here: {detail}");
                return false;
            }
            Err(e) => {
                assert!(Instant::now() < deadline, "attach kept failing: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn probe_host_stacks_and_report_show_a_native_program_s_frames() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_program(dir.path());
    {
        let child = Killed(Command::new(&exe).spawn().expect("runs"));
        if !perf_allowed(child.0.id()) {
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
