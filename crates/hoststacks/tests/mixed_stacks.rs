//! Mixed stacks of a real Python process: a C function it calls through ctypes (from a shared
//! library built here with frame pointers) appears as one native frame under the Python frame
//! that called it, and a thread sleeping in `libc.usleep` shows its system call; read through
//! the round loop with the source `record` uses, without pausing the program.
//!
//! Skips, saying why, where this machine lets a process neither read its child's memory
//! (ptrace permission) nor sample it with perf events; CI runs as root with
//! `perf_event_paranoid` 2, so it runs there.

use cufall_hoststacks::{
    AttachError, HostMsg, HostSource, HostStacks, NativeSource, Options, ProcFs, PySpySource,
    StackSource, procs,
};
use cufall_model::{FrameKind, HostSample, StackFrame};
use cufall_testkit::cprogram::{self, Killed};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PROGRAM: &str = r#"
import ctypes, sys, threading

spin = ctypes.CDLL(sys.argv[1])
spin.spin_here.argtypes = [ctypes.c_double]
libc = ctypes.CDLL(None)

def nap_c():
    while True:
        libc.usleep(10000)

def call_spin():
    while True:
        spin.spin_here(0.05)

threading.Thread(target=nap_c, name="napper", daemon=True).start()
print("ready", flush=True)
call_spin()
"#;

/// Builds the library and starts the program; it has said it is ready.
fn start(dir: &Path) -> Killed {
    let lib = cprogram::build_library(dir);
    let script = dir.join("mixed.py");
    std::fs::write(&script, PROGRAM).expect("script");
    let mut child = Command::new("python3")
        .arg(&script)
        .arg(&lib)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs here (CI installs it)");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("ready line");
    assert_eq!(line.trim(), "ready");
    Killed(child)
}

/// The pid of the interpreter under `root` (a `python3` shim may exec it), once py-spy and
/// perf events can both read it; None, printing why, where either is refused.
fn readable(root: u32) -> Option<u32> {
    let mut table = ProcFs::default();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        for p in procs::ProcessTable::tree(&mut table, root) {
            match PySpySource::default().attach(p.pid) {
                Ok(_) => {
                    let mut native = NativeSource::new(Duration::from_millis(1));
                    return match native.chains(p.pid) {
                        Some(Ok(_)) => Some(p.pid),
                        Some(Err(e)) => {
                            println!("skipped: perf events cannot sample a child here: {e}");
                            None
                        }
                        None => panic!("the native source reads call chains"),
                    };
                }
                Err(AttachError::NoPermission { source, .. }) => {
                    println!("skipped: no permission to read a child's memory here ({source})");
                    return None;
                }
                Err(_) => {}
            }
        }
        assert!(Instant::now() < deadline, "python3 never became readable");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Each stack's frames, innermost first, as `function (module)`.
fn stacks_of(frames: &[StackFrame]) -> HashMap<u64, Vec<(String, FrameKind)>> {
    let mut sorted: Vec<&StackFrame> = frames.iter().collect();
    sorted.sort_by_key(|f| (f.stack_id, f.depth));
    let mut out: HashMap<u64, Vec<(String, FrameKind)>> = HashMap::new();
    for f in sorted {
        out.entry(f.stack_id)
            .or_default()
            .push((format!("{} ({})", f.function, f.module), f.kind));
    }
    out
}

#[test]
fn a_c_function_called_through_ctypes_is_appended_under_its_python_caller() {
    let dir = tempfile::tempdir().expect("tempdir");
    let child = start(dir.path());
    let Some(pid) = readable(child.0.id()) else {
        return;
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let host = HostStacks::start(
        child.0.id(),
        tx,
        Box::new(HostSource::new(Duration::from_millis(1))),
        Box::new(ProcFs::default()),
        Options::at(Duration::from_millis(1)),
    )
    .expect("sampler thread");
    std::thread::sleep(Duration::from_millis(1500));
    let summary = host.stop();
    drop(child);
    let (mut frames, mut samples): (Vec<StackFrame>, Vec<HostSample>) = (Vec::new(), Vec::new());
    for m in rx.try_iter() {
        if let HostMsg::Stacks { stacks, samples: s } = m {
            frames.extend(stacks);
            samples.extend(s);
        }
    }
    let stacks = stacks_of(&frames);
    let main: Vec<&Vec<(String, FrameKind)>> = samples
        .iter()
        .filter(|s| s.pid == pid && s.thread_name == "MainThread")
        .filter_map(|s| stacks.get(&s.stack_id))
        .collect();
    assert!(!main.is_empty(), "{summary:#?}");
    // The main thread is in spin_here nearly all the time: its native frame, under call_spin.
    let spinning = main
        .iter()
        .filter(|st| {
            st.first().map(|(n, k)| (n.as_str(), *k))
                == Some(("spin_here (libspin.so)", FrameKind::Native))
        })
        .inspect(|st| {
            assert_eq!(
                st[1],
                ("call_spin (mixed)".to_string(), FrameKind::Python),
                "{st:?}"
            );
            assert!(
                st[1..].iter().all(|(_, k)| *k == FrameKind::Python),
                "{st:?}"
            );
        })
        .count();
    assert!(
        spinning * 2 >= main.len(),
        "{spinning} of {} main-thread samples in spin_here: {main:#?}",
        main.len()
    );
    // The napper sleeps in usleep: its system call, innermost, under nap_c.
    let napping = samples
        .iter()
        .filter(|s| s.pid == pid && s.thread_name == "napper")
        .filter_map(|s| stacks.get(&s.stack_id))
        .filter(|st| {
            st.first().is_some_and(|(n, _)| {
                n.starts_with("clock_nanosleep") || n.starts_with("nanosleep")
            }) && st.iter().any(|(n, _)| n == "nap_c (mixed)")
        })
        .count();
    assert!(napping > 0, "the napper in its sleep: {stacks:#?}");
    assert!(
        !summary
            .lines()
            .iter()
            .any(|l| l.contains("could not be read")),
        "{:?}",
        summary.lines()
    );
}
