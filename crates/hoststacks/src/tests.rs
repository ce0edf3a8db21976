//! The round loop driven by a fake process table and a fake stack reader: what it writes, what
//! it counts, and what it says, for each way a process can be or stop being readable.

use super::procs::{Proc, ProcessTable};
use super::report::{HostSummary, PERMISSION_FIX, ProcessReport, Unread};
use super::sampler::HostMsg;
use super::sampler::{ATTACH_TRIES, REATTACH_AFTER, Sampler};
use super::source::{
    AttachError, Frame, NativeChains, ReadError, StackReader, StackSource, ThreadStack,
};
use super::{HostStacks, Options};
use cufall_model::{
    CaptureEvent, CaptureEventKind, FrameKind, Gil, HostFrames, HostSample, HostStacksMeta,
    HostState, StackFrame,
};
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Python,
    NotPython,
    NoPermission,
    Unsupported,
    /// Attach fails this many times ("interpreter starting"), then works.
    Starting(u32),
}

#[derive(Default)]
struct World {
    tree: Vec<Proc>,
    alive: HashSet<u32>,
    kinds: HashMap<String, Kind>,
    threads: HashMap<u32, Vec<ThreadStack>>,
    failing_reads: HashMap<u32, u32>,
    attaches: Vec<u32>,
    read_delay: Duration,
    /// Reads of these pids are refused from now on.
    denied: HashSet<u32>,
}

type Shared = Arc<Mutex<World>>;

struct FakeTable(Shared);
impl ProcessTable for FakeTable {
    fn tree(&mut self, _root: u32) -> Vec<Proc> {
        self.0.lock().expect("world").tree.clone()
    }
    fn alive(&self, pid: u32) -> bool {
        self.0.lock().expect("world").alive.contains(&pid)
    }
}

struct FakeSource(Shared);
impl StackSource for FakeSource {
    fn attach(&mut self, pid: u32) -> Result<Box<dyn StackReader>, AttachError> {
        let mut w = self.0.lock().expect("world");
        w.attaches.push(pid);
        if !w.alive.contains(&pid) {
            return Err(AttachError::Gone { pid });
        }
        let image = w
            .tree
            .iter()
            .find(|p| p.pid == pid)
            .map(|p| p.image.clone())
            .unwrap_or_default();
        match w.kinds.get(&image).copied().unwrap_or(Kind::NotPython) {
            Kind::Python => Ok(Box::new(FakeReader(Arc::clone(&self.0), pid))),
            Kind::NotPython => Err(AttachError::NotPython { pid }),
            Kind::NoPermission => Err(AttachError::NoPermission {
                pid,
                source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
            }),
            Kind::Unsupported => Err(AttachError::UnsupportedPython {
                pid,
                detail: "Unsupported version of Python: 4.0.0".into(),
            }),
            Kind::Starting(n) => {
                let left = n.saturating_sub(1);
                w.kinds.insert(
                    image,
                    if n <= 1 {
                        Kind::Python
                    } else {
                        Kind::Starting(left)
                    },
                );
                Err(AttachError::Other {
                    pid,
                    detail: "Failed to find python version from target process".into(),
                })
            }
        }
    }
    fn frames_kind(&self) -> &'static str {
        "python frames"
    }
    fn frames(&self) -> HostFrames {
        HostFrames::Python
    }
}

struct FakeReader(Shared, u32);
impl StackReader for FakeReader {
    fn describe(&self) -> String {
        "python 3.11.7".into()
    }
    fn sample(&mut self) -> Result<Vec<ThreadStack>, ReadError> {
        let delay = self.0.lock().expect("world").read_delay;
        std::thread::sleep(delay);
        let mut w = self.0.lock().expect("world");
        if !w.alive.contains(&self.1) {
            return Err(ReadError::Gone);
        }
        if w.denied.contains(&self.1) {
            return Err(ReadError::Denied);
        }
        if let Some(n) = w.failing_reads.get_mut(&self.1).filter(|n| **n > 0) {
            *n -= 1;
            return Err(ReadError::Failed("Failed to copy PyThreadState".into()));
        }
        Ok(w.threads.get(&self.1).cloned().unwrap_or_default())
    }
}

fn proc(pid: u32, image: &str) -> Proc {
    Proc {
        pid,
        start_ticks: 100,
        image: image.into(),
    }
}

fn thread(tid: u32, function: &str, line: u32) -> ThreadStack {
    ThreadStack {
        tid,
        name: format!("t{tid}"),
        state: HostState::Running,
        gil: Gil::Held,
        frames: vec![
            Frame {
                function: function.into(),
                file: "/app/work.py".into(),
                line: Some(line),
                module: "work".into(),
                kind: FrameKind::Python,
            },
            Frame {
                function: "<module>".into(),
                file: "/app/main.py".into(),
                line: Some(1),
                module: "main".into(),
                kind: FrameKind::Python,
            },
        ],
    }
}

/// A world with one Python process 10 (one thread) and the loop over it.
fn setup() -> (Shared, Sampler, Receiver<HostMsg>) {
    let w: Shared = Arc::default();
    {
        let mut g = w.lock().expect("world");
        g.tree = vec![proc(10, "/usr/bin/python3")];
        g.alive.insert(10);
        g.kinds.insert("/usr/bin/python3".into(), Kind::Python);
        g.kinds.insert("/bin/sh".into(), Kind::NotPython);
        g.threads.insert(10, vec![thread(11, "spin_here", 3)]);
    }
    let (tx, rx) = channel();
    let s = Sampler::new(
        10,
        tx,
        Box::new(FakeSource(Arc::clone(&w))),
        Box::new(FakeTable(Arc::clone(&w))),
        Options::at(Duration::from_millis(1)),
    );
    (w, s, rx)
}

/// Everything the loop sent, in order: stacks and samples per message, and capture events.
#[derive(Default)]
struct Sent {
    batches: Vec<(Vec<StackFrame>, Vec<HostSample>)>,
    events: Vec<CaptureEvent>,
}

impl Sent {
    fn samples(&self) -> Vec<&HostSample> {
        self.batches.iter().flat_map(|(_, s)| s).collect()
    }
    fn stacks(&self) -> Vec<&StackFrame> {
        self.batches.iter().flat_map(|(s, _)| s).collect()
    }
    fn event(&self, kind: CaptureEventKind, pid: u32) -> Option<&CaptureEvent> {
        self.events.iter().find(|e| e.is(kind) && e.pid == pid)
    }
}

/// The summary's account of process `pid`.
fn report_of(summary: &HostSummary, pid: u32) -> &ProcessReport {
    summary
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .expect("reported")
}

fn sent(rx: &Receiver<HostMsg>) -> Sent {
    let mut out = Sent::default();
    for m in rx.try_iter() {
        match m {
            HostMsg::Stacks { stacks, samples } => out.batches.push((stacks, samples)),
            HostMsg::Events(e) => out.events.extend(e),
        }
    }
    out
}

#[test]
fn samples_name_stacks_sent_no_later_than_themselves() {
    let (w, mut s, rx) = setup();
    s.discover();
    for n in 0..5 {
        // The thread moves to another line in the third round.
        if n == 2 {
            w.lock()
                .expect("world")
                .threads
                .insert(10, vec![thread(11, "spin_here", 4)]);
        }
        s.round();
        s.flush();
    }
    let summary = s.finish();
    let out = sent(&rx);
    let mut known = HashSet::new();
    for (stacks, samples) in &out.batches {
        known.extend(stacks.iter().map(|f| f.stack_id));
        for x in samples {
            assert!(
                known.contains(&x.stack_id),
                "stack {} named before it was sent",
                x.stack_id
            );
        }
    }
    let samples = out.samples();
    assert_eq!(samples.len(), 5);
    assert!(
        samples
            .iter()
            .all(|x| x.pid == 10 && x.tid == 11 && x.thread_name == "t11")
    );
    // Two distinct stacks of two frames each, each sent once.
    assert_eq!(out.stacks().len(), 4);
    assert_eq!(summary.stacks, 2);
    assert_eq!((summary.samples, summary.missed), (5, 0));
    let e = out
        .event(CaptureEventKind::HostStacks, 10)
        .expect("a host_stacks row for the process");
    assert_eq!(e.count, 5);
    assert!(e.detail.contains("python 3.11.7"), "{}", e.detail);
    assert!(
        summary
            .manifest_text()
            .starts_with("on: every 1ms (1000 Hz)")
    );
    assert_eq!(
        summary.manifest_meta(),
        HostStacksMeta {
            interval_ns: 1_000_000,
            frames: HostFrames::Python,
            off_reason: None,
        }
    );
}

#[test]
fn no_permission_is_reported_with_the_fix_and_the_recording_goes_on() {
    let (w, mut s, rx) = setup();
    w.lock()
        .expect("world")
        .kinds
        .insert("/usr/bin/python3".into(), Kind::NoPermission);
    for _ in 0..3 {
        s.discover();
        s.round();
    }
    let summary = s.finish();
    let out = sent(&rx);
    assert!(out.samples().is_empty());
    assert_eq!(
        w.lock().expect("world").attaches,
        vec![10],
        "a refusal is not asked again every scan"
    );
    let p = &summary.processes[0];
    assert_eq!(p.unread, Some(Unread::NoPermission));
    let e = out
        .event(CaptureEventKind::HostStacksUnavailable, 10)
        .expect("unavailable row");
    assert!(e.detail.contains(PERMISSION_FIX), "{}", e.detail);
    let m = summary.manifest_text();
    assert!(
        m.starts_with("off: no permission to read the memory of process 10"),
        "{m}"
    );
    assert!(
        m.contains("SYS_PTRACE") && m.contains("ptrace_scope"),
        "{m}"
    );
    assert!(summary.lines().iter().any(|l| l.contains("not read")));
    // The words' reason, as a value.
    let meta = summary.manifest_meta();
    assert_eq!(meta.off_reason.as_deref(), m.strip_prefix("off: "));
    assert_eq!(meta.interval_ns, 1_000_000);
}

#[test]
fn a_process_that_exits_is_retired_with_its_account_and_nothing_crashes() {
    let (w, mut s, rx) = setup();
    s.discover();
    s.round();
    s.round();
    {
        let mut g = w.lock().expect("world");
        g.alive.remove(&10);
        g.tree.clear();
    }
    // The read sees it gone first; the scan finds nothing more.
    s.round();
    s.discover();
    s.round();
    s.flush();
    let out = sent(&rx);
    let e = out
        .event(CaptureEventKind::HostStacks, 10)
        .expect("written when it ended");
    assert_eq!(e.count, 2);
    let summary = s.finish();
    assert_eq!(summary.processes.len(), 1);
    assert_eq!(summary.missed, 0, "an exit is not a missed sample");
}

#[test]
fn a_process_that_execs_is_attached_again() {
    let (w, mut s, rx) = setup();
    {
        let mut g = w.lock().expect("world");
        g.tree = vec![proc(10, "/bin/sh")];
    }
    s.discover();
    s.round();
    // sh execs python.
    w.lock().expect("world").tree = vec![proc(10, "/usr/bin/python3")];
    s.discover();
    s.round();
    let summary = s.finish();
    let out = sent(&rx);
    assert_eq!(w.lock().expect("world").attaches, vec![10, 10]);
    assert_eq!(out.samples().len(), 1);
    let p = &summary.processes[0];
    assert_eq!((p.execs, p.unread.as_ref()), (1, None));
    assert!(
        out.event(CaptureEventKind::HostStacksNotPython, 0)
            .is_none(),
        "it runs Python now"
    );
}

#[test]
fn threads_that_appear_mid_run_are_sampled_and_counted() {
    let (w, mut s, rx) = setup();
    s.discover();
    s.round();
    w.lock().expect("world").threads.insert(
        10,
        vec![thread(11, "spin_here", 3), thread(12, "worker", 9)],
    );
    s.round();
    let summary = s.finish();
    let out = sent(&rx);
    let tids: Vec<u32> = out.samples().iter().map(|x| x.tid).collect();
    assert_eq!(tids, vec![11, 11, 12]);
    assert_eq!(summary.processes[0].threads, 2);
}

#[test]
fn failed_reads_are_missed_samples_and_many_in_a_row_attach_again() {
    let (w, mut s, rx) = setup();
    w.lock()
        .expect("world")
        .threads
        .insert(10, vec![thread(11, "a", 1), thread(12, "b", 2)]);
    s.discover();
    s.round();
    w.lock().expect("world").failing_reads.insert(10, 3);
    for _ in 0..4 {
        s.round();
    }
    let summary = s.finish();
    let p = &summary.processes[0];
    assert_eq!(p.failed_reads, 3);
    assert_eq!(p.missed, 6, "each failed read misses both threads");
    assert_eq!(p.samples, 4);
    let out = sent(&rx);
    let e = out
        .event(CaptureEventKind::HostSamplesMissed, 10)
        .expect("missed row");
    assert_eq!(e.count, 6);
    assert!(e.detail.contains("3 read(s) failed"), "{}", e.detail);

    // Reads that keep failing: the process is attached again, and the rounds until then count.
    let (w, mut s, _rx) = setup();
    s.discover();
    s.round();
    w.lock()
        .expect("world")
        .failing_reads
        .insert(10, REATTACH_AFTER);
    for _ in 0..REATTACH_AFTER + 5 {
        s.round();
    }
    s.discover();
    s.round();
    let summary = s.finish();
    assert_eq!(w.lock().expect("world").attaches, vec![10, 10]);
    let p = &summary.processes[0];
    assert_eq!(p.missed, u64::from(REATTACH_AFTER) + 5);
    assert_eq!(p.samples, 2);
}

#[test]
fn processes_without_python_are_counted_once_with_no_stacks() {
    let (w, mut s, rx) = setup();
    {
        let mut g = w.lock().expect("world");
        g.tree.push(proc(20, "/bin/sh"));
        g.tree.push(proc(21, "/bin/sh"));
        g.tree.push(proc(22, "/usr/bin/nvcc"));
        g.alive.extend([20, 21, 22]);
    }
    for _ in 0..4 {
        s.discover();
        s.round();
    }
    let summary = s.finish();
    let out = sent(&rx);
    let attaches = w.lock().expect("world").attaches.clone();
    assert_eq!(attaches.iter().filter(|p| **p == 20).count(), 1);
    let e = out
        .event(CaptureEventKind::HostStacksNotPython, 0)
        .expect("one row for them");
    assert_eq!(e.count, 3);
    assert!(e.detail.contains("nvcc, sh"), "{}", e.detail);
    assert_eq!(
        out.events
            .iter()
            .filter(|e| e.is(CaptureEventKind::HostStacksNotPython))
            .count(),
        1
    );
    assert!(out.samples().iter().all(|x| x.pid == 10));
    assert!(
        summary
            .lines()
            .iter()
            .any(|l| l.contains("3 process(es) of the program run no Python"))
    );
}

#[test]
fn an_unsupported_python_and_an_interpreter_that_never_starts_are_reported() {
    let (w, mut s, rx) = setup();
    {
        let mut g = w.lock().expect("world");
        g.tree.push(proc(30, "/opt/python4"));
        g.tree.push(proc(31, "/opt/slow-python"));
        g.tree.push(proc(32, "/opt/broken-python"));
        g.alive.extend([30, 31, 32]);
        g.kinds.insert("/opt/python4".into(), Kind::Unsupported);
        g.kinds.insert("/opt/slow-python".into(), Kind::Starting(3));
        g.kinds.insert(
            "/opt/broken-python".into(),
            Kind::Starting(ATTACH_TRIES + 5),
        );
        g.threads.insert(31, vec![thread(33, "main", 1)]);
    }
    for _ in 0..ATTACH_TRIES + 2 {
        s.discover();
        s.round();
    }
    let summary = s.finish();
    let out = sent(&rx);
    let by_pid = |pid| report_of(&summary, pid);
    assert_eq!(by_pid(30).unread, Some(Unread::UnsupportedPython));
    assert_eq!(by_pid(31).unread, None, "a slow start is waited for");
    assert!(by_pid(31).samples > 0);
    assert_eq!(by_pid(32).unread, Some(Unread::Failed));
    assert!(
        out.event(CaptureEventKind::HostStacksUnavailable, 30)
            .is_some()
    );
    assert!(
        out.event(CaptureEventKind::HostStacksUnavailable, 32)
            .is_some()
    );
    let attaches = w.lock().expect("world").attaches.clone();
    assert_eq!(
        attaches.iter().filter(|p| **p == 32).count(),
        ATTACH_TRIES as usize,
        "given up after its tries"
    );
}

#[test]
fn rounds_that_run_late_are_counted_as_missed() {
    let (w, _s, _rx) = setup();
    // Each read takes 3 ms at a 1 ms interval: about two rounds in three are skipped.
    w.lock().expect("world").read_delay = Duration::from_millis(3);
    let (tx, rx) = channel();
    let h = HostStacks::start(
        10,
        tx,
        Box::new(FakeSource(Arc::clone(&w))),
        Box::new(FakeTable(Arc::clone(&w))),
        Options::at(Duration::from_millis(1)),
    )
    .expect("thread");
    std::thread::sleep(Duration::from_millis(150));
    let summary = h.stop();
    let out = sent(&rx);
    assert!(summary.late_rounds > 0, "{summary:?}");
    let p = &summary.processes[0];
    assert_eq!(
        p.missed, p.late_rounds,
        "one thread: one missed sample per skipped round"
    );
    assert_eq!(out.samples().len() as u64, summary.samples);
    // Kept plus missed accounts for the grid of the run (give or take the last round).
    let grid = (summary.wall_s * 1000.0) as u64;
    let asked = summary.samples + summary.missed;
    assert!(
        asked + 5 >= grid && asked <= grid + 5,
        "asked {asked}, grid {grid}"
    );
}

#[test]
fn a_process_that_stops_being_readable_is_attached_again_and_named() {
    let (w, mut s, rx) = setup();
    s.discover();
    s.round();
    {
        let mut g = w.lock().expect("world");
        g.denied.insert(10);
        g.kinds
            .insert("/usr/bin/python3".into(), Kind::NoPermission);
    }
    s.round();
    s.round();
    s.discover();
    s.round();
    let summary = s.finish();
    let p = &summary.processes[0];
    assert_eq!(p.samples, 1);
    assert_eq!(
        p.missed, 2,
        "the refused read and the round before the next scan"
    );
    assert_eq!(p.unread, Some(Unread::NoPermission));
    assert_eq!(w.lock().expect("world").attaches, vec![10, 10]);
    assert!(
        sent(&rx)
            .event(CaptureEventKind::HostStacksUnavailable, 10)
            .is_some()
    );
    assert!(
        summary.manifest_text().starts_with("on:"),
        "it was read for a while"
    );
}

/// The native half of the composite source: reads every process it is asked for, or refuses
/// them all the way a machine without perf events does.
struct FakeNative {
    world: Shared,
    refuse: bool,
}

impl StackSource for FakeNative {
    fn attach(&mut self, pid: u32) -> Result<Box<dyn StackReader>, AttachError> {
        if self.refuse {
            return Err(AttachError::NativeUnavailable {
                pid,
                detail: "perf_event_open was refused (Permission denied); to allow it: ...".into(),
            });
        }
        Ok(Box::new(FakeNativeReader(Arc::clone(&self.world), pid)))
    }
    fn frames_kind(&self) -> &'static str {
        "native frames"
    }
    fn frames(&self) -> HostFrames {
        HostFrames::Native
    }
    fn chains(&mut self, pid: u32) -> Option<Result<Box<dyn NativeChains>, AttachError>> {
        Some(if self.refuse {
            Err(AttachError::NativeUnavailable {
                pid,
                detail: "perf_event_open was refused (Permission denied); to allow it: ...".into(),
            })
        } else {
            Ok(Box::new(FakeChains))
        })
    }
}

/// Every thread asked for is in `cudaStreamSynchronize`, called from the interpreter.
struct FakeChains;
impl NativeChains for FakeChains {
    fn chain(&mut self, _tid: u32) -> Option<Vec<Frame>> {
        let native = |function: &str, module: &str| Frame {
            function: function.into(),
            file: format!("/usr/lib/{module}"),
            line: None,
            module: module.into(),
            kind: FrameKind::Native,
        };
        Some(vec![
            native("0x1d2e", "libcuda.so.1"),
            native("cudaStreamSynchronize", "libcudart.so.12"),
            native("_PyEval_EvalFrameDefault", "libpython3.11.so.1.0"),
        ])
    }
    fn end_round(&mut self) {}
}

struct FakeNativeReader(Shared, u32);
impl StackReader for FakeNativeReader {
    fn describe(&self) -> String {
        super::native::DESCRIBE.into()
    }
    fn sample(&mut self) -> Result<Vec<ThreadStack>, ReadError> {
        if !self.0.lock().expect("world").alive.contains(&self.1) {
            return Err(ReadError::Gone);
        }
        Ok(vec![ThreadStack {
            tid: self.1,
            name: "sh".into(),
            state: HostState::Idle,
            gil: Gil::Unknown,
            frames: vec![Frame {
                function: "wait4".into(),
                file: "/usr/lib/libc.so.6".into(),
                line: None,
                module: "libc.so.6".into(),
                kind: FrameKind::Native,
            }],
        }])
    }
}

/// The loop over world `w` with the composite source: Python through the fake py-spy, the rest
/// through the fake native reader.
fn composite(w: &Shared, refuse: bool) -> (Sampler, Receiver<HostMsg>) {
    let (tx, rx) = channel();
    let source = super::HostSource::with(
        Box::new(FakeSource(Arc::clone(w))),
        Box::new(FakeNative {
            world: Arc::clone(w),
            refuse,
        }),
    );
    let s = Sampler::new(
        10,
        tx,
        Box::new(source),
        Box::new(FakeTable(Arc::clone(w))),
        Options::at(Duration::from_millis(1)),
    );
    (s, rx)
}

#[test]
fn processes_without_python_are_read_natively_and_python_ones_get_their_native_leaf() {
    let (w, _s, _rx) = setup();
    {
        let mut g = w.lock().expect("world");
        g.tree.push(proc(20, "/bin/sh"));
        g.tree.push(proc(21, "/usr/bin/no-perms"));
        g.alive.extend([20, 21]);
        g.kinds
            .insert("/usr/bin/no-perms".into(), Kind::NoPermission);
    }
    let (mut s, rx) = composite(&w, false);
    for _ in 0..3 {
        s.discover();
        s.round();
    }
    let summary = s.finish();
    let out = sent(&rx);
    let by_pid = |pid| report_of(&summary, pid);
    assert_eq!(by_pid(10).interpreter, "python 3.11.7");
    assert_eq!(by_pid(20).interpreter, super::native::DESCRIBE);
    assert_eq!(by_pid(20).samples, 3);
    // A refusal of py-spy is not a reason to read the process natively.
    assert_eq!(by_pid(21).unread, Some(Unread::NoPermission));
    let stacks = out.stacks();
    let python: Vec<&HostSample> = out.samples().into_iter().filter(|x| x.pid == 10).collect();
    assert_eq!(python.len(), 3);
    for x in &python {
        let mut frames: Vec<&StackFrame> = stacks
            .iter()
            .filter(|f| f.stack_id == x.stack_id)
            .copied()
            .collect();
        frames.sort_by_key(|f| f.depth);
        let named: Vec<(&str, FrameKind)> = frames
            .iter()
            .map(|f| (f.function.as_str(), f.kind))
            .collect();
        assert_eq!(
            named,
            [
                ("cudaStreamSynchronize", FrameKind::Native),
                ("spin_here", FrameKind::Python),
                ("<module>", FrameKind::Python)
            ],
            "one native frame under the innermost Python frame"
        );
    }
    assert!(report_of(&summary, 10).native_refused.is_empty());
    let native: Vec<&HostSample> = out.samples().into_iter().filter(|x| x.pid == 20).collect();
    assert_eq!(native.len(), 3);
    assert!(native.iter().all(|x| x.gil == Gil::Unknown));
    assert!(
        out.event(CaptureEventKind::HostStacksNotPython, 0)
            .is_none(),
        "a process read natively got stacks: it is not counted as unsampled"
    );
    let e = out
        .event(CaptureEventKind::HostStacks, 20)
        .expect("a host_stacks row");
    assert!(
        e.detail.starts_with("native (perf task-clock) (sh)"),
        "{}",
        e.detail
    );
    assert!(
        summary.lines()[0].contains("in 2 process(es) (1 python, 1 native)"),
        "{:?}",
        summary.lines()
    );
    assert_eq!(
        summary.manifest_text(),
        format!("on: every 1ms (1000 Hz), {}", super::composite::FRAMES)
    );
}

#[test]
fn processes_whose_native_frames_are_refused_are_counted_once_with_why() {
    let (w, _s, _rx) = setup();
    {
        let mut g = w.lock().expect("world");
        g.tree = vec![proc(20, "/bin/sh"), proc(21, "/usr/bin/nvcc")];
        g.alive.extend([20, 21]);
    }
    let (mut s, rx) = composite(&w, true);
    for _ in 0..3 {
        s.discover();
        s.round();
    }
    let summary = s.finish();
    let out = sent(&rx);
    assert!(out.samples().is_empty());
    let e = out
        .event(CaptureEventKind::HostStacksNotPython, 0)
        .expect("one row for them");
    assert_eq!(e.count, 2);
    assert!(
        e.detail.contains("native frames could not be read") && e.detail.contains("refused"),
        "{}",
        e.detail
    );
    assert!(
        out.event(CaptureEventKind::HostStacksUnavailable, 20)
            .is_none(),
        "told once, not per process"
    );
    let m = summary.manifest_text();
    assert!(
        m.starts_with("off: no process of the program runs Python, and native frames could not be read: perf_event_open was refused"),
        "{m}"
    );
    assert_eq!(
        summary.manifest_meta().off_reason.as_deref(),
        m.strip_prefix("off: ")
    );
    assert!(
        summary.lines().iter().any(|l| l.contains(
            "2 process(es) of the program run no Python and their native frames could not be read"
        )),
        "{:?}",
        summary.lines()
    );
}

#[test]
fn python_processes_whose_native_frames_are_refused_keep_their_python_stacks_and_say_so_once() {
    let (w, _s, _rx) = setup();
    {
        let mut g = w.lock().expect("world");
        g.tree.push(proc(12, "/usr/bin/python3"));
        g.alive.insert(12);
        g.threads.insert(12, vec![thread(13, "serve", 7)]);
    }
    let (mut s, rx) = composite(&w, true);
    for _ in 0..3 {
        s.discover();
        s.round();
    }
    let summary = s.finish();
    let out = sent(&rx);
    assert_eq!(out.samples().len(), 6, "both processes sampled");
    assert!(
        out.stacks().iter().all(|f| f.kind == FrameKind::Python),
        "no native frame without perf events"
    );
    assert!(report_of(&summary, 10).native_refused.contains("refused"));
    let lines = summary.lines();
    let said: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("native frames of the Python threads"))
        .collect();
    assert_eq!(said.len(), 1, "{lines:?}");
    assert!(
        said[0].contains("of 2 process(es) could not be read (perf_event_open was refused"),
        "{}",
        said[0]
    );
    assert_eq!(report_of(&summary, 10).unread, None);
}
