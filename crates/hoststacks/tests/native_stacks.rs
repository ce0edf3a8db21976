//! Native frames of a real C program (built here with frame pointers, `cufall_testkit::cprogram`),
//! read with perf events: by the native reader itself, and through the round loop with the
//! composite source `record` uses (`sampler/tests/native_stacks.rs` reads it through the built
//! `cufall probe-host-stacks` and `report`).
//!
//! Skips, saying why, only where this machine refuses perf events (`perf_event_paranoid`
//! above 2 for a user without CAP_PERFMON, a seccomp filter) or offers no software task clock;
//! CI runs as root with `perf_event_paranoid` 2, so it runs there.

use cufall_hoststacks::{
    AttachError, HostMsg, HostSource, HostStacks, NativeSource, Options, ProcFs, ReadError,
    StackReader, StackSource, ThreadStack, native,
};
use cufall_model::{FrameKind, Gil, HostState};
use cufall_testkit::cprogram::{Killed, build_program};
use std::process::Command;
use std::time::{Duration, Instant};

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
    let exe = build_program(dir.path());
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
            Err(ReadError::Gone) => break,
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
    let exe = build_program(dir.path());
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
        if let HostMsg::Stacks { stacks, .. } = m {
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
