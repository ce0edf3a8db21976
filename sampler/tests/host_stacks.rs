//! Host stacks of a real Python process, read with py-spy's library through the same sampler
//! and sink as `cufall record`, written to a trace and read back.
//!
//! Skips (saying why) only where this machine does not let a process read its child's memory
//! (ptrace permission); CI runs as root, so it runs there.

use cufall_sampler::hoststacks::{
    AttachError, HostStacks, Options, ProcFs, PySpySource, StackSource, event, native, procs,
};
use cufall_sampler::sink::{SinkMsg, SinkShared, sink_main};
use cufall_trace::model::{CaptureEventKind, FrameKind, Gil, HostFrames, HostStacksMeta, Manifest};
use cufall_trace::{Trace, TraceWriter, WriterOptions};
use std::collections::HashSet;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PROGRAM: &str = r#"
import sys, threading, time

def spin_here():
    x = 0
    while True:
        x += 1

def nap():
    while True:
        time.sleep(0.01)

threading.Thread(target=nap, name="napper", daemon=True).start()
print("ready", flush=True)
spin_here()
"#;

/// Runs the program and waits until it says it is ready (its interpreter is up).
fn start_python(dir: &std::path::Path) -> Child {
    let script = dir.join("spin.py");
    std::fs::write(&script, PROGRAM).expect("script");
    let mut child = Command::new("python3")
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs here (CI installs it)");
    let out = child.stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufReader::new(out)
        .read_line(&mut line)
        .expect("ready line");
    assert_eq!(line.trim(), "ready");
    child
}

/// The pids of `root` and its descendants, and the OS thread ids of each (`/proc/PID/task`).
fn os_threads(root: u32) -> HashSet<(u32, u32)> {
    let mut t = ProcFs::default();
    let mut out = HashSet::new();
    for p in procs::ProcessTable::tree(&mut t, root) {
        if let Ok(dir) = std::fs::read_dir(format!("/proc/{}/task", p.pid)) {
            for e in dir.flatten() {
                if let Some(tid) = e.file_name().to_str().and_then(|s| s.parse().ok()) {
                    out.insert((p.pid, tid));
                }
            }
        }
    }
    out
}

/// Whether this machine lets us read the child's memory; prints the reason when not.
fn permitted(child: &Child) -> bool {
    let mut t = ProcFs::default();
    // `python3` may be a shim that execs the interpreter: wait for the one that maps Python.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        for p in procs::ProcessTable::tree(&mut t, child.id()) {
            match PySpySource::default().attach(p.pid) {
                Ok(_) => return true,
                Err(AttachError::NoPermission { source, .. }) => {
                    println!(
                        "skipped: this machine does not let a process read its child's memory ({source}); run as root or allow ptrace"
                    );
                    return false;
                }
                Err(_) => {}
            }
        }
        assert!(
            Instant::now() < deadline,
            "python3 (process {}) never became readable, and not for want of permission",
            child.id()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_real_python_function_its_file_line_and_thread_are_in_the_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = start_python(dir.path());
    if !permitted(&child) {
        let _ = child.kill();
        let _ = child.wait();
        return;
    }
    let path = dir.path().join("host.cufall");
    let writer = TraceWriter::create(
        &path,
        Manifest::new("test", cufall_sampler::now_unix_ns()),
        WriterOptions::default(),
    )
    .expect("writer");
    let (tx, rx) = std::sync::mpsc::channel::<SinkMsg>();
    let shared = Arc::new(SinkShared::default());
    let sink = std::thread::spawn(move || sink_main(rx, Some(writer), None, shared, None));
    let host = HostStacks::start(
        child.id(),
        tx,
        Box::new(PySpySource::default()),
        Box::new(ProcFs::default()),
        Options::at(Duration::from_millis(1)),
    )
    .expect("sampler thread");
    std::thread::sleep(Duration::from_millis(500));
    let threads = os_threads(child.id());
    let summary = host.stop();
    let _ = child.kill();
    let _ = child.wait();
    let writer = sink.join().expect("sink").writer.expect("writer back");
    writer
        .finish(cufall_sampler::now_unix_ns())
        .expect("finish");

    let trace = Trace::open(&path).expect("open");
    let samples = trace.host_samples().expect("host samples");
    let stacks = trace.stacks().expect("stacks");
    // A debug build on a loaded 2-core machine reads far slower than 1 kHz; what is not read is
    // counted as missed, which is checked here rather than a rate.
    assert!(
        samples.len() >= 10,
        "{} samples in 0.5 s at 1 kHz: {summary:#?}",
        samples.len()
    );
    let asked = summary.samples + summary.missed;
    assert!(
        asked >= 100,
        "samples and missed account for the run's rounds: {summary:#?}"
    );
    assert_eq!(samples.len() as u64, summary.samples);
    // The main thread is in spin_here, at a line of its loop, in the script.
    let spin_ids: HashSet<u64> = stacks
        .iter()
        .filter(|f| f.depth == 0 && f.function == "spin_here")
        .inspect(|f| {
            assert!(f.file.ends_with("spin.py"), "{f:?}");
            assert!(matches!(f.line, Some(6 | 7)), "the loop's lines: {f:?}");
            assert_eq!(f.kind, FrameKind::Python);
            assert_eq!(f.module, "spin");
        })
        .map(|f| f.stack_id)
        .collect();
    assert!(!spin_ids.is_empty(), "no stack runs spin_here: {stacks:#?}");
    let in_spin: Vec<_> = samples
        .iter()
        .filter(|s| spin_ids.contains(&s.stack_id))
        .collect();
    assert!(
        in_spin.len() * 2 >= samples.len() / 2,
        "most main-thread samples spin"
    );
    for s in &in_spin {
        assert!(
            threads.contains(&(s.pid, s.tid)),
            "sample thread {}/{} is not an OS thread of the program: {threads:?}",
            s.pid,
            s.tid
        );
        assert_eq!(s.thread_name, "MainThread");
    }
    assert!(in_spin.iter().any(|s| s.gil == Gil::Held));
    // The napping thread is sampled too, under its name, in `nap`.
    let nap_ids: HashSet<u64> = stacks
        .iter()
        .filter(|f| f.function == "nap")
        .map(|f| f.stack_id)
        .collect();
    assert!(
        samples
            .iter()
            .any(|s| s.thread_name == "napper" && nap_ids.contains(&s.stack_id)),
        "the napper thread"
    );
    // Every stack a sample names is in the stacks table.
    let known: HashSet<u64> = stacks.iter().map(|f| f.stack_id).collect();
    assert!(samples.iter().all(|s| known.contains(&s.stack_id)));
    // The process's account is in the capture table.
    let events = trace.capture_events().expect("capture");
    assert!(
        events
            .iter()
            .any(|e| e.is(CaptureEventKind::HostStacks) && e.detail.contains("python 3.")),
        "{events:?}"
    );
}

const FAMILY: &str = r#"
import multiprocessing as mp, subprocess, time

def child_work():
    # Long enough to be found, attached and read on a loaded machine.
    end = time.time() + 2.5
    while time.time() < end:
        sum(i for i in range(1000))

if __name__ == "__main__":
    p = mp.get_context("spawn").Process(target=child_work)
    p.start()
    subprocess.run(["sh", "-c", "sleep 1"])
    p.join()
"#;

/// The built `cufall` samples a program's family: a spawned Python worker is read, a shell is
/// read natively (or, where perf events are refused, counted as no Python), and `info` gives
/// the account.
#[test]
fn probe_host_stacks_samples_every_python_process_of_the_program_and_info_tells() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = start_python(dir.path());
    let allowed = permitted(&child);
    let _ = child.kill();
    let _ = child.wait();
    if !allowed {
        return;
    }
    let script = dir.path().join("family.py");
    std::fs::write(&script, FAMILY).expect("script");
    let trace = dir.path().join("family.cufall");
    let stats = dir.path().join("stats.json");
    let out = assert_cmd::Command::cargo_bin("cufall")
        .expect("cufall")
        .args(["probe-host-stacks", "--host-interval", "2ms", "-o"])
        .arg(&trace)
        .arg("--stats-json")
        .arg(&stats)
        .arg("--")
        .arg("python3")
        .arg(&script)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("host stacks: "), "{stderr}");
    let t = Trace::open(&trace).expect("open");
    let samples = t.host_samples().expect("samples");
    let pids: HashSet<u32> = samples.iter().map(|s| s.pid).collect();
    assert!(
        pids.len() >= 2,
        "the program and its spawned worker: {pids:?}\n{stderr}"
    );
    let stacks = t.stacks().expect("stacks");
    assert!(
        stacks.iter().any(|f| f.function == "child_work"),
        "the worker's function"
    );
    let events = t.capture_events().expect("events");
    // The shell (or the sleep it runs) runs no Python: it is read natively where perf events
    // are allowed, else counted as not sampled.
    let native = events
        .iter()
        .find(|e| e.is(CaptureEventKind::HostStacks) && e.detail.starts_with(native::DESCRIBE));
    let not_python = events
        .iter()
        .find(|e| e.is(CaptureEventKind::HostStacksNotPython));
    match (native, not_python) {
        (Some(e), _) => assert!(
            e.detail.contains("sh") || e.detail.contains("sleep"),
            "{}",
            e.detail
        ),
        (None, Some(e)) => assert!(e.detail.contains("sh"), "{}", e.detail),
        (None, None) => panic!("the shell is read or counted: {events:?}"),
    }
    let setting = &t.manifest().extra[event::MANIFEST_KEY];
    assert_eq!(
        setting,
        &format!(
            "on: every 2ms (500 Hz), {}",
            cufall_sampler::hoststacks::composite::FRAMES
        )
    );
    // The same as values (trace format 1.4).
    assert_eq!(
        t.manifest().host_stacks,
        Some(HostStacksMeta {
            interval_ns: 2_000_000,
            frames: HostFrames::Mixed,
            off_reason: None,
        })
    );
    let info = assert_cmd::Command::cargo_bin("cufall")
        .expect("cufall")
        .arg("info")
        .arg(&trace)
        .output()
        .expect("info");
    let text = String::from_utf8_lossy(&info.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("host stacks"))
        .unwrap_or_else(|| panic!("no host stacks line:\n{text}"));
    assert!(
        line.contains(&format!("{} samples", samples.len())) && line.contains("500 Hz"),
        "{line}"
    );
    assert!(native.is_some() || text.contains("run no Python"), "{text}");
    assert!(
        !text.contains("capture event: host_"),
        "told once, in its own line:\n{text}"
    );
}

#[test]
fn host_flags_are_checked_before_anything_starts() {
    let run = |args: &[&str]| {
        let out = assert_cmd::Command::cargo_bin("cufall")
            .expect("cufall")
            .args(args)
            .output()
            .expect("runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&[
        "record",
        "-o",
        "x.cufall",
        "--host-interval",
        "10us",
        "--",
        "true",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("give 100us or more"), "{err}");
    let (code, err) = run(&[
        "record",
        "-o",
        "x.cufall",
        "--host-stacks",
        "maybe",
        "--",
        "true",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("on") && err.contains("off"), "{err}");
    // Turned off: nothing sampled, nothing said, and the manifest says why.
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("off.cufall");
    let trace_arg = trace.to_str().expect("utf-8 path");
    let (code, err) = run(&[
        "probe-host-stacks",
        "--host-stacks",
        "off",
        "-o",
        trace_arg,
        "--",
        "true",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("host stacks"), "{err}");
    let t = Trace::open(&trace).expect("trace");
    assert_eq!(
        t.manifest().extra[event::MANIFEST_KEY],
        "off: --host-stacks off"
    );
    let meta = t.manifest().host_stacks.as_ref().expect("the typed field");
    assert_eq!(meta.off_reason.as_deref(), Some("--host-stacks off"));
    assert!(t.host_samples().expect("rows").is_empty());
}

const UNDUMPABLE: &str = r#"
import ctypes, time
# PR_SET_DUMPABLE 0: only a process with CAP_SYS_PTRACE may read this one's memory now.
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
def spin_here():
    end = time.time() + 1.5
    while time.time() < end:
        pass
spin_here()
"#;

/// A program cufall may not read (it makes itself undumpable, and cufall runs without
/// CAP_SYS_PTRACE): the recording goes on without its stacks, and the trace and `info` say why
/// and how to allow it.
#[test]
fn a_program_cufall_may_not_read_is_recorded_without_stacks_and_info_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("undumpable.py");
    std::fs::write(&script, UNDUMPABLE).expect("script");
    let trace = dir.path().join("denied.cufall");
    let cufall = assert_cmd::cargo::cargo_bin("cufall");
    let python = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3");
    let python = String::from_utf8_lossy(&python.stdout).trim().to_string();
    // As root, drop the capability that would let cufall read it anyway.
    let mut cmd = if nix_root() {
        let mut c = Command::new("setpriv");
        c.args(["--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace", "--"]);
        c.arg(&cufall);
        c
    } else {
        Command::new(&cufall)
    };
    cmd.args(["probe-host-stacks", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&python)
        .arg(&script);
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => {
            println!("skipped: cannot run setpriv to drop CAP_SYS_PTRACE ({e})");
            return;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the program's own exit code: {stderr}"
    );
    assert!(stderr.contains("not read: no permission"), "{stderr}");
    let t = Trace::open(&trace).expect("a complete trace");
    let events = t.capture_events().expect("events");
    let e = events
        .iter()
        .find(|e| e.is(CaptureEventKind::HostStacksUnavailable))
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(
        e.detail.contains("no permission") && e.detail.contains("SYS_PTRACE"),
        "{}",
        e.detail
    );
    let info = assert_cmd::Command::new(&cufall)
        .arg("info")
        .arg(&trace)
        .output()
        .expect("info");
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(text.contains("ptrace_scope"), "{text}");
}

fn nix_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}
