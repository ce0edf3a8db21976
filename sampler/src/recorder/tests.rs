use super::*;
use crate::sink::window::Edge;
use cufall_capture::fixtures::{encoded, hello, kernel, push_pop};
use cufall_capture::{CostKind, Frame, Name, Payload};

const NVTX_COST: CaptureEventKind = CaptureEventKind::Cost {
    kind: CostKind::Nvtx,
    measured: true,
};
use cufall_trace::model::{KernelRecord, NvtxRange, RangeKind};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{Receiver, channel};

/// A binary of this workspace's build (`scripts/check.sh` builds them before the tests).
fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let p = profile_dir.join(name);
    assert!(
        p.is_file(),
        "{} is missing: run `cargo build --workspace` before the tests (scripts/check.sh does)",
        p.display()
    );
    p
}

fn drain(rx: &Receiver<SinkMsg>) -> (Vec<NvtxRange>, Vec<KernelRecord>, Vec<CaptureEvent>) {
    let (mut n, mut k, mut c) = (Vec::new(), Vec::new(), Vec::new());
    while let Ok(m) = rx.try_recv() {
        match m {
            SinkMsg::Nvtx(r) => n.extend(r),
            SinkMsg::Kernels(r) => k.extend(r),
            SinkMsg::Capture(r) => c.extend(r),
            _ => {}
        }
    }
    (n, k, c)
}

fn run_under_capture(
    kinds: Kinds,
    program: &Path,
    args: &[&str],
) -> (
    Vec<NvtxRange>,
    Vec<KernelRecord>,
    Vec<CaptureEvent>,
    CaptureSummary,
) {
    let (tx, rx) = channel();
    let (n, k, c, summary) = run_under_capture_to(kinds, None, program, args, tx);
    let (mut n2, mut k2, mut c2) = drain(&rx);
    n2.extend(n);
    k2.extend(k);
    c2.extend(c);
    (n2, k2, c2, summary)
}

/// Runs a program under capture, its messages to `tx`.
fn run_under_capture_to(
    kinds: Kinds,
    range: Option<RangeTrigger>,
    program: &Path,
    args: &[&str],
    tx: std::sync::mpsc::Sender<SinkMsg>,
) -> (
    Vec<NvtxRange>,
    Vec<KernelRecord>,
    Vec<CaptureEvent>,
    CaptureSummary,
) {
    let lib = built(cufall_capture::LIBRARY_FILE);
    check_library(&lib).unwrap();
    let rec = Recorder::start(kinds, range, lib, &[], tx).unwrap();
    let status = std::process::Command::new(program)
        .args(args)
        .envs(rec.child_env_given(|_| None))
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    rec.wait_for_processes(Duration::from_secs(10));
    let summary = rec.finish();
    (Vec::new(), Vec::new(), Vec::new(), summary)
}

/// `--capture-range nvtx:prefill` inside a real program: the capture library sees the
/// range begin and end and sends both edges at those instants.
#[test]
fn an_nvtx_range_opens_and_closes_a_window() {
    let specdec = built("specdec");
    let args = [
        "--preset",
        "tiny",
        "--backend",
        "cpu",
        "--context",
        "32",
        "--new-tokens",
        "4",
    ];
    let (tx, rx) = channel();
    let range = Some(RangeTrigger::Nvtx("prefill".into()));
    run_under_capture_to(Kinds::NVTX, range, &specdec, &args, tx);
    let msgs: Vec<SinkMsg> = rx.try_iter().collect();
    let edges: Vec<&Edge> = msgs
        .iter()
        .filter_map(|m| match m {
            SinkMsg::Window(e) => Some(e),
            _ => None,
        })
        .collect();
    let prefill: Vec<&NvtxRange> = msgs
        .iter()
        .filter_map(|m| match m {
            SinkMsg::Nvtx(r) => Some(r),
            _ => None,
        })
        .flatten()
        .filter(|r| r.name == "prefill")
        .collect();
    assert_eq!(prefill.len(), 1);
    assert_eq!(edges.len(), 2, "{edges:?}");
    assert!(edges[0].open && !edges[1].open);
    assert_eq!(
        (edges[0].t_ns, edges[1].t_ns),
        (prefill[0].start_ns, prefill[0].end_ns)
    );
    assert!(
        edges[0]
            .why
            .starts_with("the start of NVTX range `prefill` in process"),
        "{}",
        edges[0].why
    );
}

/// The real capture library inside a real program: the engine's CPU backend emits NVTX
/// phases (prefill, then draft / verify / accept per step, each with the step as payload).
#[test]
fn the_engine_nvtx_phases_arrive_whole() {
    let specdec = built("specdec");
    let args = [
        "--preset",
        "tiny",
        "--backend",
        "cpu",
        "--context",
        "32",
        "--new-tokens",
        "8",
    ];
    let (ranges, kernels, events, summary) = run_under_capture(Kinds::NVTX, &specdec, &args);
    assert!(kernels.is_empty());
    let count = |n: &str| ranges.iter().filter(|r| r.name == n).count();
    assert_eq!(count("prefill"), 1, "{ranges:#?}");
    assert!(count("draft") >= 1 && count("verify") >= 1 && count("accept") >= 1);
    assert_eq!(count("draft"), count("accept"));
    for r in &ranges {
        assert_eq!(r.kind, RangeKind::PushPop);
        assert!(r.end_ns >= r.start_ns);
        assert!(
            r.start_ns > 1_600_000_000_000_000_000,
            "Unix-epoch nanoseconds"
        );
        assert!(r.pid > 0 && r.tid > 0);
    }
    let steps: Vec<i64> = ranges
        .iter()
        .filter(|r| r.name == "draft")
        .filter_map(|r| r.payload_int)
        .collect();
    assert_eq!(steps.len(), count("draft"), "every draft carries its step");
    assert!(events.iter().any(|e| e.is(CaptureEventKind::NvtxAttached)));
    assert_eq!(summary.processes.len(), 1);
    assert!(summary.processes[0].said_goodbye);
    assert_eq!(summary.nvtx_ranges as usize, ranges.len());
}

/// Several processes (a shell starting two engines): one connection each, all captured,
/// and the recorder waits for both.
#[test]
fn every_process_of_the_program_is_captured() {
    let specdec = built("specdec");
    let cmd = format!(
        "{s} --preset tiny --backend cpu --context 16 --new-tokens 4 & {s} --preset tiny --backend cpu --context 16 --new-tokens 4 --seed 2; wait",
        s = specdec.display()
    );
    let (ranges, _, _, summary) =
        run_under_capture(Kinds::DEFAULT, Path::new("/bin/sh"), &["-c", &cmd]);
    let pids: std::collections::BTreeSet<u32> = ranges.iter().map(|r| r.pid).collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert_eq!(summary.processes.len(), 2);
    assert!(ranges.iter().filter(|r| r.name == "prefill").count() == 2);
}

/// A process that forks: the child's ranges come on a connection of its own, the parent's
/// exactly once (the child never re-sends what the parent had buffered).
#[test]
fn a_forked_child_reports_on_its_own_connection() {
    let program = built("examples/nvtx_fork");
    let (ranges, _, events, summary) = run_under_capture(Kinds::NVTX, &program, &[]);
    let by_name = |n: &str| ranges.iter().filter(|r| r.name == n).collect::<Vec<_>>();
    let (parent, child) = (by_name("parent"), by_name("child"));
    assert_eq!((parent.len(), child.len()), (1, 1), "{ranges:#?}");
    assert_ne!(parent[0].pid, child[0].pid);
    assert_eq!(by_name("parent-run").len(), 1);
    assert_eq!(by_name("parent-run")[0].kind, RangeKind::StartEnd);
    let mark = by_name("before-fork");
    assert_eq!(mark.len(), 1);
    assert_eq!(
        (mark[0].kind, mark[0].start_ns),
        (RangeKind::Mark, mark[0].end_ns)
    );
    assert!(
        events
            .iter()
            .any(|e| e.is(CaptureEventKind::Forked) && e.pid == child[0].pid)
    );
    assert_eq!(summary.processes.len(), 2);
    assert!(summary.processes.iter().all(|p| p.said_goodbye));
}

/// A program that never touches CUDA or NVTX: the trace says so instead of staying silent.
#[test]
fn a_program_without_cuda_is_reported() {
    let (ranges, _, events, summary) =
        run_under_capture(Kinds::DEFAULT, Path::new("/bin/true"), &[]);
    assert!(ranges.is_empty());
    assert!(summary.processes.is_empty());
    assert!(
        events.iter().any(|e| e.is(CaptureEventKind::NoCuda)),
        "{events:?}"
    );
}

/// The recorder's socket, as a process of the program finds it in its environment.
pub(super) fn socket_of(rec: &Recorder) -> PathBuf {
    rec.child_env()
        .into_iter()
        .find(|(k, _)| k == cufall_capture::ENV_SOCKET)
        .map(|(_, v)| PathBuf::from(v))
        .expect("the recorder's socket is in the program's environment")
}

/// A connection to the recorder's socket, as a process of the program would open.
fn connect_like_a_process(rec: &Recorder) -> UnixStream {
    UnixStream::connect(socket_of(rec)).unwrap()
}

/// A recorder of the default kinds, without the capture library (the tests play the
/// program's processes) nor devices, sending to `tx`.
pub(super) fn start_recorder(
    range: Option<RangeTrigger>,
    tx: std::sync::mpsc::Sender<SinkMsg>,
) -> Recorder {
    Recorder::start(
        Kinds::DEFAULT,
        range,
        PathBuf::from("/nonexistent"),
        &[],
        tx,
    )
    .expect("the recorder starts")
}

/// A process's stream whose range, kernel and domain names come after their first use, with a
/// device known by UUID only (`[0x11; 16]`), and no goodbye.
fn late_names_stream() -> Vec<u8> {
    encoded([
        hello(77),
        Frame::Status {
            t_ns: 1,
            event: CaptureEventKind::CudaAttached.as_str().into(),
            count: 1,
            detail: "libcupti.so.13 (CUPTI API 130001): kernels".into(),
        },
        Frame::Device {
            id: 0,
            uuid: [0x11u8; 16],
        },
        Frame::Range(cufall_capture::Range {
            tid: 5,
            domain: 2,
            category: 4,
            color: Some(0xff00ff00),
            payload: Payload::UInt(u64::MAX),
            ..cufall_capture::fixtures::range(Name::Registered(1), 10, 20)
        }),
        Frame::Activity(kernel(3, 12, 18)),
        Frame::String {
            id: 1,
            text: "verify".into(),
        },
        Frame::String {
            id: 2,
            text: "engine".into(),
        },
        Frame::String {
            id: 3,
            text: "_Z12empty_kernelv".into(),
        },
    ])
}

/// Names defined after their first use, a kernel name to demangle, a device mapped by UUID,
/// and a process that ends without a goodbye (killed): every record arrives, the end is
/// reported.
#[test]
fn late_names_devices_and_a_missing_goodbye() {
    let (tx, rx) = channel();
    let uuid = [0x11u8; 16];
    let devices = vec![DeviceInfo {
        id: DeviceId(3),
        name: "GPU".into(),
        chip: String::new(),
        uuid: cufall_capture::uuid_string(&uuid),
        pci_bus_id: String::new(),
        sm_count: None,
        memory_total_bytes: None,
    }];
    let rec = Recorder::start(
        Kinds::DEFAULT,
        None,
        PathBuf::from("/nonexistent"),
        &devices,
        tx,
    )
    .unwrap();
    let mut c = connect_like_a_process(&rec);
    let bytes = late_names_stream();
    // Split the stream mid-frame, as a socket may.
    let cut = bytes.len() / 2;
    c.write_all(&bytes[..cut]).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    c.write_all(&bytes[cut..]).unwrap();
    drop(c);
    rec.wait_for_processes(Duration::from_secs(5));
    let summary = rec.finish();
    let (ranges, kernels, events) = drain(&rx);
    assert_eq!(ranges.len(), 1);
    let r = &ranges[0];
    assert_eq!(
        (r.name.as_str(), r.domain.as_str(), r.pid),
        ("verify", "engine", 77)
    );
    assert_eq!((r.category, r.color), (4, Some(0xff00ff00)));
    assert_eq!(
        (r.payload_int, r.payload_float),
        (None, Some(u64::MAX as f64))
    );
    assert_eq!(kernels.len(), 1);
    let k = &kernels[0];
    assert_eq!((k.name.as_str(), k.device), ("empty_kernel", DeviceId(3)));
    assert_eq!((k.grid, k.block), (Some([4, 1, 1]), Some([128, 1, 1])));
    assert!(
        events
            .iter()
            .any(|e| e.is(CaptureEventKind::NoGoodbye) && e.pid == 77)
    );
    assert!(!summary.processes[0].said_goodbye);
    assert!(
        summary
            .problems
            .iter()
            .any(|p| p.contains("ended without flushing"))
    );
}

/// Sends `frames` on one connection, as a process would, and returns what the recorder
/// made of them.
fn one_process(
    range: Option<RangeTrigger>,
    frames: Vec<Frame<'static>>,
) -> (Vec<SinkMsg>, CaptureSummary) {
    let (tx, rx) = channel();
    let rec = start_recorder(range, tx);
    let mut c = connect_like_a_process(&rec);
    c.write_all(&encoded(frames)).unwrap();
    drop(c);
    rec.wait_for_processes(Duration::from_secs(5));
    let summary = rec.finish();
    (rx.try_iter().collect(), summary)
}

fn attached() -> Frame<'static> {
    Frame::Status {
        t_ns: 1,
        event: CaptureEventKind::CudaAttached.as_str().into(),
        count: 1,
        detail: "libcupti.so.13 (CUPTI API 130001): kernels, memcpy, memset".into(),
    }
}

fn events_of(msgs: &[SinkMsg]) -> Vec<CaptureEvent> {
    msgs.iter()
        .filter_map(|m| match m {
            SinkMsg::Capture(e) => Some(e.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// A CUDA context, then no kernel record: another CUPTI client (torch.profiler) took the
/// buffers, or the process launched nothing. The user is told which.
#[test]
fn kernel_capture_that_delivers_nothing_is_reported() {
    let (msgs, summary) = one_process(
        None,
        vec![
            hello(88),
            attached(),
            Frame::Context {
                device: 0,
                context: 1,
            },
            Frame::Bye { t_ns: 2 },
        ],
    );
    let events = events_of(&msgs);
    assert!(
        events
            .iter()
            .any(|e| e.is(CaptureEventKind::NoActivity) && e.pid == 88)
    );
    assert!(
        summary
            .problems
            .iter()
            .any(|p| p.contains("torch.profiler"))
    );
}

/// A compile worker: CUDA initialised (CUPTI attached), no context, no record, and `_exit`
/// (no goodbye). Nothing could be missing, so no warning; one summary row counts it.
#[test]
fn a_process_that_never_touched_the_gpu_gets_no_warning() {
    let (msgs, summary) = one_process(None, vec![hello(91), attached()]);
    let events = events_of(&msgs);
    assert!(
        !events
            .iter()
            .any(|e| e.is(CaptureEventKind::NoGoodbye) || e.is(CaptureEventKind::NoActivity)),
        "{events:?}"
    );
    assert!(summary.problems.is_empty(), "{:?}", summary.problems);
    assert_eq!(summary.quiet.len(), 1);
    let quiet = events
        .iter()
        .find(|e| e.is(CaptureEventKind::Quiet))
        .unwrap();
    assert_eq!(quiet.count, 1);
    assert!(quiet.detail.contains("91 (python3)"), "{}", quiet.detail);
}

/// A process that did GPU work and was killed: the warning says how much may be missing,
/// counted from its last delivered record.
#[test]
fn a_killed_process_is_told_from_its_last_record() {
    let now = crate::now_unix_ns();
    let kernel = Frame::Activity(cufall_capture::Activity {
        kind: cufall_capture::WireActivityKind::Memcpy,
        grid: [0; 3],
        block: [0; 3],
        bytes: 64,
        copy_kind: 1,
        ..kernel(0, now - 2_000_000, now - 1_000_000)
    });
    let (msgs, summary) = one_process(
        None,
        vec![
            hello(92),
            attached(),
            Frame::Context {
                device: 0,
                context: 1,
            },
            kernel,
        ],
    );
    let events = events_of(&msgs);
    let warn = events
        .iter()
        .find(|e| e.is(CaptureEventKind::NoGoodbye) && e.pid == 92)
        .expect("warned");
    assert!(
        warn.detail.contains("after the last one delivered"),
        "{}",
        warn.detail
    );
    assert!(summary.quiet.is_empty());
}

/// A graph's contents, learnt once when it is instantiated: one capture row naming its
/// kernels, demangled, most nodes first (names defined after their use included).
#[test]
fn graph_contents_become_one_row_per_graph() {
    let (msgs, _) = one_process(
        None,
        vec![
            hello(96),
            Frame::String {
                id: 1,
                text: "_Z4gemmv".into(),
            },
            Frame::Graph {
                graph_id: 12,
                exec_id: 13,
                nodes: 30,
                kernels: vec![
                    cufall_capture::GraphKernel { name: 2, count: 4 },
                    cufall_capture::GraphKernel { name: 1, count: 24 },
                ],
            },
            Frame::String {
                id: 2,
                text: "rmsnorm".into(),
            },
            Frame::Bye { t_ns: 2 },
        ],
    );
    let events = events_of(&msgs);
    let g = events
        .iter()
        .find(|e| e.is(CaptureEventKind::GraphContents))
        .expect("a row per graph");
    assert_eq!((g.pid, g.count), (96, 30));
    assert!(
        g.detail
            .starts_with("graph 12 (instantiated as 13): 30 nodes, 28 kernels: 24 × gemm; 4 × "),
        "{}",
        g.detail
    );
}

/// Window edges of a process reach the sink, and a window the process leaves open is
/// closed when its connection ends.
#[test]
fn window_edges_are_forwarded_and_closed_at_exit() {
    let (msgs, _) = one_process(
        Some(RangeTrigger::ProfilerApi),
        vec![
            hello(93),
            Frame::Window {
                t_ns: 10,
                open: true,
            },
            Frame::Window {
                t_ns: 20,
                open: false,
            },
            Frame::Window {
                t_ns: 30,
                open: true,
            },
        ],
    );
    let edges: Vec<(i64, bool, u32)> = msgs
        .iter()
        .filter_map(|m| match m {
            SinkMsg::Window(e) => Some((e.t_ns, e.open, e.source)),
            _ => None,
        })
        .collect();
    assert_eq!(edges.len(), 4, "{edges:?}");
    assert_eq!(
        &edges[..3],
        &[(10, true, 93), (20, false, 93), (30, true, 93)]
    );
    assert!(!edges[3].1 && edges[3].0 > 30, "closed at the exit");
    let why: Vec<String> = msgs
        .iter()
        .filter_map(|m| match m {
            SinkMsg::Window(e) => Some(e.why.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(why[0], "cudaProfilerStart in process 93");
    assert_eq!(why[1], "cudaProfilerStop in process 93");
    assert!(why[3].contains("exit of process 93"), "{why:?}");
    let open_at_exit: Vec<CaptureEvent> = events_of(&msgs)
        .into_iter()
        .filter(|e| e.is(CaptureEventKind::WindowOpenAtExit))
        .collect();
    assert_eq!(open_at_exit.len(), 1, "{open_at_exit:?}");
    assert_eq!((open_at_exit[0].pid, open_at_exit[0].count), (93, 1));
    assert_eq!(
        open_at_exit[0].detail,
        "process 93 exited with its capture window open (cudaProfilerStart without cudaProfilerStop): the window was closed at its exit"
    );
}

fn edges_of(msgs: &[SinkMsg]) -> Vec<(i64, bool)> {
    msgs.iter()
        .filter_map(|m| match m {
            SinkMsg::Window(e) => Some((e.t_ns, e.open)),
            _ => None,
        })
        .collect()
}

/// `cudaProfilerStart` is not counted (a second start changes nothing, one stop ends the
/// window); NVTX ranges of the trigger's name nest, and a window left open ends at the
/// process's goodbye, its exit.
#[test]
fn profiler_starts_do_not_nest_nvtx_windows_do_and_an_open_one_ends_at_the_goodbye() {
    let window = |t_ns, open| Frame::Window { t_ns, open };
    let frames = vec![
        hello(94),
        window(10, true),
        window(20, true),
        window(30, false),
        Frame::Bye { t_ns: 50 },
    ];
    let (msgs, summary) = one_process(Some(RangeTrigger::ProfilerApi), frames.clone());
    assert_eq!(edges_of(&msgs), [(10, true), (30, false)]);
    assert!(summary.problems.is_empty(), "{:?}", summary.problems);
    let (msgs, summary) = one_process(Some(RangeTrigger::Nvtx("w".into())), frames);
    assert_eq!(
        edges_of(&msgs),
        [(10, true), (20, true), (30, false), (50, false)]
    );
    assert!(
        summary.problems.iter().any(|p| p
            .contains("process 94 exited with its capture window open")
            && p.contains("the start of NVTX range `w` without the end of NVTX range `w`")),
        "{:?}",
        summary.problems
    );
}

/// Garbage on a connection closes it with a row in the capture table; the recorder goes on
/// taking other processes.
#[test]
fn a_connection_sending_garbage_is_closed_and_the_recording_goes_on() {
    let (tx, rx) = channel();
    let rec = start_recorder(None, tx);
    let mut bad = connect_like_a_process(&rec);
    let mut bytes = encoded([hello(94)]);
    // A frame whose string claims more bytes than any name may have.
    let mut body = vec![2u8];
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
    bytes.extend_from_slice(&body);
    bad.write_all(&bytes).unwrap();
    let mut good = connect_like_a_process(&rec);
    let ok = encoded([hello(95), push_pop("step", 1, 2), Frame::Bye { t_ns: 3 }]);
    good.write_all(&ok).unwrap();
    drop(good);
    rec.wait_for_processes(Duration::from_secs(2));
    drop(bad);
    let summary = rec.finish();
    let (ranges, _, events) = drain(&rx);
    assert_eq!(ranges.len(), 1, "the other process is recorded");
    let broken = events
        .iter()
        .find(|e| e.is(CaptureEventKind::BrokenStream))
        .expect("a row says so");
    assert_eq!(broken.pid, 94);
    assert!(broken.detail.contains("longer than"), "{}", broken.detail);
    assert_eq!(summary.protocol_errors.len(), 1);
}

#[test]
fn another_tools_injection_is_left_alone_and_reported() {
    let (tx, rx) = channel();
    let rec =
        Recorder::start(Kinds::DEFAULT, None, PathBuf::from("/lib/ours.so"), &[], tx).unwrap();
    let env = rec.child_env_given(|v| {
        (v == "CUDA_INJECTION64_PATH").then(|| OsString::from("/opt/other/libtool.so"))
    });
    assert!(!env.iter().any(|(k, _)| k == "CUDA_INJECTION64_PATH"));
    assert!(
        env.iter()
            .any(|(k, v)| k == "NVTX_INJECTION64_PATH" && v == "/lib/ours.so")
    );
    let _ = rec.finish();
    let (_, _, events) = drain(&rx);
    assert!(
        events
            .iter()
            .any(|e| e.is(CaptureEventKind::NotInjected)
                && e.detail.contains("/opt/other/libtool.so"))
    );
}

#[test]
fn kernel_names_are_demangled_without_parameters() {
    assert_eq!(demangle("_Z12empty_kernelv"), "empty_kernel");
    assert_eq!(
        demangle("_ZN2at6native18elementwise_kernelILi128ELi2EEEviT1_"),
        "at::native::elementwise_kernel<128, 2>"
    );
    assert_eq!(demangle("plain_c_kernel"), "plain_c_kernel");
}

#[test]
fn a_library_without_the_entry_points_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("lib.so");
    std::fs::write(&p, b"not an elf").unwrap();
    assert!(matches!(
        check_library(&p),
        Err(CaptureError::LibraryUnusable { .. })
    ));
    let mut elf = vec![0u8; 64];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2;
    elf[16] = 3;
    std::fs::write(&p, &elf).unwrap();
    let e = check_library(&p).unwrap_err().to_string();
    assert!(e.contains("does not export InitializeInjection"), "{e}");
    elf.extend_from_slice(b"InitializeInjection\0InitializeInjectionNvtx2\0");
    std::fs::write(&p, &elf).unwrap();
    assert!(check_library(&p).is_ok());
}

/// A captured program killed mid-run (SIGKILL, as the OOM killer does): what it sent before
/// is in the trace, and the warning says how long before its end its last record was.
#[test]
fn a_program_killed_mid_run_keeps_what_it_sent() {
    let specdec = built("specdec");
    let (tx, rx) = channel();
    let lib = built(cufall_capture::LIBRARY_FILE);
    let rec = Recorder::start(Kinds::NVTX, None, lib, &[], tx).unwrap();
    let mut child = std::process::Command::new(&specdec)
        .args([
            "--preset",
            "tiny",
            "--backend",
            "cpu",
            "--context",
            "32",
            "--new-tokens",
            "100000",
        ])
        .envs(rec.child_env_given(|_| None))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    let _ = child.wait();
    rec.wait_for_processes(Duration::from_secs(10));
    let summary = rec.finish();
    let (ranges, _, events) = drain(&rx);
    assert!(
        ranges.iter().any(|r| r.name == "draft"),
        "the ranges sent before the kill are kept: {}",
        ranges.len()
    );
    let pid = child.id();
    let warn = events
        .iter()
        .find(|e| e.is(CaptureEventKind::NoGoodbye) && e.pid == pid)
        .unwrap_or_else(|| panic!("warned: {events:?}"));
    assert!(warn.detail.contains("may be missing"), "{}", warn.detail);
    assert!(
        summary.quiet.is_empty(),
        "a process that sent ranges is not quiet"
    );
}

/// A close that arrives before its open (the two edges travelled in different threads'
/// buffers) still makes the window, at the right times.
#[test]
fn a_close_before_its_open_still_makes_the_window() {
    let (msgs, _) = one_process(
        Some(RangeTrigger::Nvtx("w".into())),
        vec![
            hello(97),
            Frame::Window {
                t_ns: 20,
                open: false,
            },
            Frame::Window {
                t_ns: 10,
                open: true,
            },
        ],
    );
    let edges: Vec<(i64, bool)> = msgs
        .iter()
        .filter_map(|m| match m {
            SinkMsg::Window(e) => Some((e.t_ns, e.open)),
            _ => None,
        })
        .collect();
    assert_eq!(edges, [(10, true), (20, false)]);
}

/// Another protocol version, or a second hello, closes the connection at once.
#[test]
fn a_connection_of_another_version_is_closed() {
    for frames in [
        vec![Frame::Hello {
            version: cufall_capture::PROTOCOL_VERSION + 1,
            pid: 98,
            ppid: 1,
            kinds: Kinds::DEFAULT,
            exe: "x".into(),
        }],
        vec![hello(99), hello(0)],
    ] {
        let (msgs, summary) = one_process(None, frames);
        assert!(
            events_of(&msgs)
                .iter()
                .any(|e| e.is(CaptureEventKind::BrokenStream)),
            "{:?}",
            summary.protocol_errors
        );
    }
}

/// The NVTX calibration runs in the program at its first NVTX call: its cost row reaches the
/// capture table, measured (never 0), and its own ranges never reach the trace.
#[test]
fn the_nvtx_calibration_is_a_cost_row_and_no_range() {
    let program = built("examples/nvtx_fork");
    let (ranges, _, events, _) = run_under_capture(Kinds::NVTX, &program, &[]);
    let parent = ranges.iter().find(|r| r.name == "parent").unwrap().pid;
    let cost: Vec<&CaptureEvent> = events.iter().filter(|e| e.is(NVTX_COST)).collect();
    assert_eq!(cost.len(), 1, "{events:#?}");
    assert_eq!(cost[0].pid, parent);
    assert!(cost[0].count >= 1, "{cost:?}");
    assert!(cost[0].detail.contains("ns per NVTX range"), "{cost:?}");
    assert!(ranges.iter().all(|r| !r.name.contains("calibration")));
    // NVTX only: no CUDA kind is enabled, so none is reported unknown.
    assert!(!events.iter().any(|e| e.event.ends_with("_unknown")));
}

/// Bounds on the capture hot path, per NVTX range and per encoded record, as the program sees
/// them (`inject/examples/capture_bench.rs`). The bounds are about 6 times the debug build's
/// figures in this test on a two-core machine (`docs/benchmarks.md`: 6.5 to 8.7 µs per range,
/// 1.1 to 1.3 µs per record): a regression of 10 times fails, a loaded machine does not.
#[test]
fn the_capture_hot_path_stays_within_its_bound() {
    const MAX_NS_PER_RANGE: f64 = 45_000.0;
    const MAX_NS_PER_RECORD: f64 = 8_000.0;
    let program = built("examples/capture_bench");
    let lib = built(cufall_capture::LIBRARY_FILE);
    let (tx, rx) = channel();
    let rec = Recorder::start(Kinds::NVTX, None, lib, &[], tx).unwrap();
    let out = std::process::Command::new(&program)
        .arg("20000")
        .envs(rec.child_env_given(|_| None))
        .output()
        .unwrap();
    assert!(out.status.success());
    rec.wait_for_processes(Duration::from_secs(10));
    rec.finish();
    let (ranges, _, events) = drain(&rx);
    let line = String::from_utf8(out.stdout).unwrap();
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    let per_range = v["ns_per_range"].as_f64().unwrap();
    let per_record = v["ns_per_record"].as_f64().unwrap();
    eprintln!("capture hot path: {line}");
    // Every timed pair was captured: the figure is the handlers', not NVTX's empty call.
    assert!(ranges.len() >= 5 * 20_000, "{}", ranges.len());
    assert!(per_range < MAX_NS_PER_RANGE, "{line}");
    assert!(per_record < MAX_NS_PER_RECORD, "{line}");
    let cost = events.iter().find(|e| e.is(NVTX_COST)).unwrap();
    eprintln!("calibrated: {} ns per range", cost.count);
    assert!((cost.count as f64) < MAX_NS_PER_RANGE, "{cost:?}");
}

/// After a program that delivered GPU activity, the recorder runs the calibration process
/// (here a script standing in for `cufall calibrate-capture`) and writes its costs as
/// `capture_cost_*` rows of process 0, with a line for the summary; the measured rows are no
/// problem to warn about.
#[test]
fn the_cuda_kinds_cost_comes_from_the_calibration_process_after_the_program() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("cufall");
    let line = r#"{"kind":"graph","measured":{"ns":7900.2,"low_ns":7000,"high_ns":9000,"bare_ns":3000,"rounds":15,"launches":200,"graph_nodes":8}}"#;
    std::fs::write(
        &exe,
        format!(
            "#!/bin/sh\n[ \"$1\" = calibrate-capture ] || exit 9\n[ \"$CUFALL_CAPTURE_CALIBRATE\" = 1 ] || exit 8\necho '{line}'\necho '{{\"kind\":\"kernel\",\"error\":\"cuInit failed\"}}'\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (tx, rx) = channel();
    let rec = start_recorder(None, tx);
    let mut c = connect_like_a_process(&rec);
    c.write_all(&encoded([
        hello(93),
        attached(),
        Frame::Activity(kernel(0, 10, 20)),
        Frame::Bye { t_ns: 30 },
    ]))
    .unwrap();
    drop(c);
    rec.wait_for_processes(Duration::from_secs(5));
    rec.calibrate(&exe);
    let summary = rec.finish();
    let events = events_of(&rx.try_iter().collect::<Vec<_>>());
    let graph = events
        .iter()
        .find(|e| {
            e.is(CaptureEventKind::Cost {
                kind: CostKind::Graph,
                measured: true,
            })
        })
        .expect("a graph cost row");
    assert_eq!((graph.count, graph.pid), (7_900, 0));
    let kernel_row = events
        .iter()
        .find(|e| {
            e.is(CaptureEventKind::Cost {
                kind: CostKind::Kernel,
                measured: false,
            })
        })
        .expect("an unknown kernel cost row");
    assert_eq!(kernel_row.detail, "not measured: cuInit failed");
    // The default kinds also copy: the process said nothing of copies.
    assert!(events.iter().any(|e| e.is(CaptureEventKind::Cost {
        kind: CostKind::Memcpy,
        measured: false,
    })));
    let line = summary.calibration.expect("a summary line");
    assert!(line.contains("graph launch 7.9 µs"), "{line}");
    assert!(
        line.contains("kernel launch unknown (cuInit failed)"),
        "{line}"
    );
    assert!(
        !summary
            .problems
            .iter()
            .any(|p| p.contains("capture_cost_graph")),
        "{:?}",
        summary.problems
    );
}

/// A program that did no GPU work has no CUDA kind to calibrate: no process is started.
#[test]
fn no_calibration_without_gpu_activity() {
    let (tx, rx) = channel();
    let rec = start_recorder(None, tx);
    let mut c = connect_like_a_process(&rec);
    c.write_all(&encoded([hello(94), attached(), Frame::Bye { t_ns: 3 }]))
        .unwrap();
    drop(c);
    rec.wait_for_processes(Duration::from_secs(5));
    rec.calibrate(Path::new("/nonexistent/cufall"));
    let summary = rec.finish();
    let events = events_of(&rx.try_iter().collect::<Vec<_>>());
    assert!(!events.iter().any(|e| e.event.starts_with("capture_cost_")));
    assert_eq!(summary.calibration, None);
}
