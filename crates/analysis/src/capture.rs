//! What went wrong while the program was captured, read back from the trace's `capture` table:
//! one [`CaptureLine`] per kind of event, with its processes and, for the kinds known, what it
//! means and what to do. `cufall info` and `cufall report` show them, so that a recording whose
//! kernels are missing says why long after the recording ended.
//!
//! The event names are [`CaptureEventKind`]'s (written by the capture library, the recorder
//! and host stacks; listed in `docs/trace-format.md`). Routine events are not shown; an event
//! this version does not know (a newer recorder's) is shown with the detail the recorder wrote.

use cufall_trace::model::event::names_a_cost;
use cufall_trace::model::{CaptureEvent, CaptureEventKind};
use serde::Serialize;
use std::collections::BTreeMap;

/// How much a kind of capture event matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Records are missing from the trace, or capture did not run as asked.
    Problem,
    /// Worth knowing, nothing is missing.
    Info,
    /// Not known to this version: shown with the recorder's detail.
    Unknown,
}

/// One kind of capture event in a trace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaptureLine {
    /// The event's name in the `capture` table.
    pub event: String,
    pub severity: Severity,
    /// Rows of this event.
    pub rows: u64,
    /// Their counts summed (records dropped, ranges left open, ...; 0 where the event has none).
    pub count: u64,
    /// The processes they came from (pid 0, the recorder itself, left out).
    pub pids: Vec<u32>,
    /// The first row's detail, as the recorder or the capture library wrote it.
    pub detail: String,
    /// What it means, for the kinds known.
    pub meaning: Option<String>,
    /// What to do about it, for the kinds known.
    pub fix: Option<&'static str>,
}

/// Events that say capture ran as it should: never shown (`graph_contents` is shown with the
/// graph launches it describes, in the report's kernel tables).
const ROUTINE: &[CaptureEventKind] = &[
    CaptureEventKind::CudaAttached,
    CaptureEventKind::NvtxAttached,
    CaptureEventKind::Forked,
    CaptureEventKind::GraphContents,
    // One per process whose host stacks were read (`record --host-stacks`).
    CaptureEventKind::HostStacks,
];

/// What a CUDA graph runs, as the recorder learnt it when the graph was instantiated (a
/// `graph_contents` row): its launches are the `graph ID` rows of the kernels table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GraphContents {
    /// The id its launches carry (the instantiated graph's).
    pub graph_id: u32,
    /// The id of the graph it was instantiated from.
    pub from_graph: Option<u32>,
    pub pid: u32,
    pub nodes: u64,
    /// Kernels by node count, most first, with their full names.
    pub kernels: Vec<(String, u32)>,
}

/// The graphs a trace's `graph_contents` rows describe (rows the recorder wrote as
/// `graph G (instantiated as E): N nodes, K kernels: 24 × name; ...`; a row that does not read
/// so is left out).
pub fn graph_contents(events: &[CaptureEvent]) -> Vec<GraphContents> {
    events
        .iter()
        .filter(|e| e.is(CaptureEventKind::GraphContents))
        .filter_map(|e| parse_graph_contents(e.pid, e.count, &e.detail))
        .collect()
}

fn parse_graph_contents(pid: u32, nodes: u64, detail: &str) -> Option<GraphContents> {
    let rest = detail.strip_prefix("graph ")?;
    let (head, list) = rest.split_once(": ")?;
    let (graph, exec) = match head.split_once(" (instantiated as ") {
        Some((g, e)) => (g, e.split_once(')')?.0),
        None => (head, head),
    };
    let from: u32 = graph.trim().parse().ok()?;
    let launched: u32 = exec.trim().parse().ok()?;
    let kernels = list
        .split_once(" kernels: ")
        .map(|(_, k)| k)
        .unwrap_or_default()
        .split("; ")
        .filter_map(|k| {
            let (count, name) = k.split_once(" × ")?;
            Some((name.to_string(), count.trim().parse().ok()?))
        })
        .collect();
    Some(GraphContents {
        // 0: the instantiated graph's id was unknown; its launches carry the graph's own.
        graph_id: if launched == 0 { from } else { launched },
        from_graph: (launched != 0 && launched != from).then_some(from),
        pid,
        nodes,
        kernels,
    })
}

/// The problems and notes of a trace's capture events, problems first, then by event name.
pub fn capture_lines(events: &[CaptureEvent]) -> Vec<CaptureLine> {
    let mut by: BTreeMap<&str, Vec<&CaptureEvent>> = BTreeMap::new();
    for e in events {
        // Capture's cost rows are the report's CAPTURE COST section (`crate::capcost`).
        let routine = e.kind().is_some_and(|k| ROUTINE.contains(&k));
        if !routine && !names_a_cost(&e.event) {
            by.entry(e.event.as_str()).or_default().push(e);
        }
    }
    let mut out: Vec<CaptureLine> = by
        .into_iter()
        .map(|(event, rows)| {
            let count: u64 = rows.iter().map(|e| e.count).sum();
            let mut pids: Vec<u32> = rows.iter().map(|e| e.pid).filter(|p| *p != 0).collect();
            pids.sort_unstable();
            pids.dedup();
            let (severity, meaning, fix) = known(event, count, pids.len());
            CaptureLine {
                event: event.to_string(),
                severity,
                rows: rows.len() as u64,
                count,
                pids,
                detail: rows.first().map(|e| e.detail.clone()).unwrap_or_default(),
                meaning,
                fix,
            }
        })
        .collect();
    // One process's own windows are the windows themselves: said only for several.
    out.retain(|l| l.event != CaptureEventKind::ProcessWindow.as_str() || l.pids.len() > 1);
    out.sort_by(|a, b| a.severity.cmp(&b.severity).then(a.event.cmp(&b.event)));
    out
}

/// Severity, meaning and fix of the event kinds this version knows.
fn known(
    event: &str,
    count: u64,
    processes: usize,
) -> (Severity, Option<String>, Option<&'static str>) {
    let Some(kind) = CaptureEventKind::parse(event) else {
        return (Severity::Unknown, None, None);
    };
    if let Some(k) = known_window(kind, count, processes) {
        return k;
    }
    let problem =
        |meaning: String, fix: &'static str| (Severity::Problem, Some(meaning), Some(fix));
    match kind {
        CaptureEventKind::NoActivity => problem(
            format!(
                "kernel capture was set up in {} but no kernel or copy records arrived",
                processes_text(processes)
            ),
            "another CUPTI client in the program (torch.profiler, Nsight Systems, another tracer) \
             took CUPTI's activity buffers, which CUPTI gives to one client only, or the process \
             ran no GPU work: record without the other profiler",
        ),
        CaptureEventKind::CuptiDropped => problem(
            format!("CUPTI dropped {count} activity record(s): kernels or copies are missing"),
            "record fewer kinds (`--capture nvtx,kernels`) or a shorter run",
        ),
        CaptureEventKind::NoGoodbye => problem(
            format!(
                "{} ended without flushing capture (killed, crashed, _exit, or still running when \
                 the recording closed)",
                processes_text(processes.max(usize::try_from(count).unwrap_or(usize::MAX)))
            ),
            "records of its last flush period (about 100 ms) may be missing; let the program \
             exit normally before the recording ends",
        ),
        CaptureEventKind::OpenRanges => problem(
            format!("{count} NVTX range(s) were still open when their process exited"),
            "they are not in the trace (never invented): pop every push and end every start \
             before the program exits",
        ),
        CaptureEventKind::UnmatchedPops => problem(
            format!("{count} NVTX pop(s) had no matching push"),
            "the program pops more ranges than it pushes: phases around them may be cut short",
        ),
        CaptureEventKind::NotInjected => problem(
            "the program was started without part of capture".to_string(),
            "unset the other tool's injection variable named below to capture everything",
        ),
        CaptureEventKind::CuptiUnavailable => problem(
            "kernel, copy or API capture was asked for but CUPTI could not be used: only NVTX \
             ranges were captured"
                .to_string(),
            "kernel capture needs CUDA 13's CUPTI in the program (docs/capture.md)",
        ),
        CaptureEventKind::NoCuda => problem(
            "no process of the program initialised CUDA or called NVTX: nothing was captured"
                .to_string(),
            "check that the program uses the GPU, and that the capture library loads in it \
             (docs/troubleshooting.md)",
        ),
        CaptureEventKind::NoWindow => problem(
            "a capture range was asked for and no window opened: the trace holds no samples"
                .to_string(),
            "the program must call cudaProfilerStart (torch.cuda.profiler.start()) or begin the \
             named NVTX range; or record with --capture-range signal and open the window with \
             `cufall control start` (docs/server.md)",
        ),
        CaptureEventKind::BrokenStream => problem(
            format!(
                "{} sent bytes that are not capture's wire format, or beyond its bounds: the \
                 connection was closed and its later records are missing",
                processes_text(processes)
            ),
            "use the capture library of the same build as cufall (docs/capture.md)",
        ),
        CaptureEventKind::CallbacksUnavailable => problem(
            format!(
                "capture could not subscribe to CUPTI's callbacks in {}: no cudaProfilerStart \
                 windows and no graph contents there",
                processes_text(processes)
            ),
            "another CUPTI tool in the program holds CUPTI's one callback subscriber: run \
             without it",
        ),
        CaptureEventKind::HostStacksUnavailable => problem(
            format!(
                "the host stacks of {} could not be read: the host's share of their gaps is \
                 unknown",
                processes_text(processes)
            ),
            "reading another process's memory needs the same user and ptrace permission: run \
             as root with CAP_SYS_PTRACE (docker: --cap-add SYS_PTRACE), or set \
             kernel.yama.ptrace_scope to 0 (docs/host-stacks.md)",
        ),
        _ => match known_info(kind, count) {
            Some(meaning) => (Severity::Info, Some(meaning), None),
            None => (Severity::Unknown, None, None),
        },
    }
}

/// The windows of single processes (a server's workers each opening their own).
fn known_window(
    kind: CaptureEventKind,
    count: u64,
    processes: usize,
) -> Option<(Severity, Option<String>, Option<&'static str>)> {
    Some(match kind {
        CaptureEventKind::WindowOpenAtExit => (
            Severity::Problem,
            Some(format!(
                "{} exited with its capture window open (a cudaProfilerStart without its \
                 cudaProfilerStop, or the NVTX range never ended): the window was closed at the \
                 exit",
                processes_text(processes)
            )),
            Some(
                "stop profiling before the process exits (cudaProfilerStop; a server's \
                 /stop_profile): the trace holds that process's window only up to its exit",
            ),
        ),
        CaptureEventKind::ProcessWindow => (
            Severity::Info,
            Some(format!(
                "{} opened capture windows of their own ({:.3} s in all); the trace keeps \
                 their union",
                processes_text(processes),
                count as f64 / 1e9
            )),
            None,
        ),
        _ => return None,
    })
}

/// The meaning of the informational event kinds this version knows.
fn known_info(kind: CaptureEventKind, count: u64) -> Option<String> {
    Some(match kind {
        CaptureEventKind::Window => format!(
            "the recording kept capture windows only, {:.3} s in all: nothing outside them is in \
             the trace",
            count as f64 / 1e9
        ),
        CaptureEventKind::Untimed => format!(
            "CUPTI delivered {count} kernel, copy or call record(s) without timestamps; they are \
             left out"
        ),
        CaptureEventKind::HostSamplesMissed => format!(
            "{count} host stack sample(s) were missed (late rounds, unreadable threads): the \
             host's shares count that time as unsampled"
        ),
        CaptureEventKind::HostStacksNotPython => format!(
            "{} of the program run no Python and got no host stacks (their native frames were \
             not read; `cufall info` and the capture table's detail say why)",
            processes_text(usize::try_from(count).unwrap_or(usize::MAX))
        ),
        CaptureEventKind::GraphContentsUnavailable => {
            "graph launches are recorded without their kernels' names".to_string()
        }
        CaptureEventKind::Quiet => format!(
            "{} of the program never started GPU work or sent records (helpers such as \
             data-loader workers)",
            processes_text(usize::try_from(count).unwrap_or(usize::MAX))
        ),
        _ => return None,
    })
}

fn processes_text(n: usize) -> String {
    if n == 1 {
        "1 process".into()
    } else {
        format!("{n} processes")
    }
}

/// One line for people: what happened, in which processes, what to do, and the recorder's
/// detail where it adds to the meaning.
pub fn line_text(l: &CaptureLine) -> String {
    let pids = match l.pids.len() {
        0 => String::new(),
        1..=4 => format!(
            " (pid {})",
            l.pids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        n => format!(" ({n} processes, pid {} ...)", l.pids[0]),
    };
    match (&l.meaning, l.fix) {
        (Some(m), Some(fix)) => {
            let shows_detail = matches!(
                CaptureEventKind::parse(&l.event),
                Some(CaptureEventKind::NotInjected | CaptureEventKind::CuptiUnavailable)
            );
            let detail = if shows_detail {
                format!(" [{}]", l.detail)
            } else {
                String::new()
            };
            format!("{}: {m}{pids}: {fix}{detail}", l.event)
        }
        (Some(m), None) => format!("{}: {m}{pids}", l.event),
        _ => {
            let count = if l.count > 0 {
                format!(", count {}", l.count)
            } else {
                String::new()
            };
            format!("{}: {} row(s){count}{pids}: {}", l.event, l.rows, l.detail)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_contents_rows_read_back_with_the_id_launches_carry() {
        let rows = [
            ev(
                7,
                "graph_contents",
                24,
                "graph 4 (instantiated as 5): 24 nodes, 24 kernels: 12 × nvjet_a; 11 × triton_b; 1 × c",
            ),
            ev(
                7,
                "graph_contents",
                0,
                "graph 1 (instantiated as 0): 0 nodes, 0 kernels: ",
            ),
            ev(7, "graph_contents", 3, "not a graph row"),
        ];
        let g = graph_contents(&rows);
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].graph_id, g[0].from_graph, g[0].nodes),
            (5, Some(4), 24)
        );
        assert_eq!(g[0].kernels[0], ("nvjet_a".to_string(), 12));
        assert_eq!(g[0].kernels.len(), 3);
        assert_eq!((g[1].graph_id, g[1].from_graph), (1, None));
        assert!(g[1].kernels.is_empty());
        assert!(
            capture_lines(&rows).is_empty(),
            "routine rows are not shown"
        );
    }

    #[test]
    fn window_rows_are_told_and_a_missing_window_is_a_problem() {
        let l = capture_lines(&[
            ev(
                0,
                "capture_window",
                121_398_262,
                "opened by cudaProfilerStart in process 9",
            ),
            ev(
                0,
                "no_capture_window",
                0,
                "the program never called cudaProfilerStart",
            ),
        ]);
        assert_eq!(l[0].event, "no_capture_window");
        assert_eq!(l[0].severity, Severity::Problem);
        assert_eq!(l[1].severity, Severity::Info);
        assert!(
            line_text(&l[1]).contains("0.121 s in all"),
            "{}",
            line_text(&l[1])
        );
    }

    /// Windows of several processes are told with their processes; a window left open at a
    /// process's exit is a problem naming that process.
    #[test]
    fn process_windows_are_told_and_a_window_open_at_exit_is_a_problem() {
        let l = capture_lines(&[
            ev(
                0,
                "capture_window",
                900_000_000,
                "opened by cudaProfilerStart in process 11",
            ),
            ev(
                11,
                "process_window",
                300_000_000,
                "opened by cudaProfilerStart in process 11",
            ),
            ev(
                12,
                "process_window",
                300_000_000,
                "opened by cudaProfilerStart in process 12",
            ),
            ev(
                12,
                "process_window",
                300_000_000,
                "opened by cudaProfilerStart in process 12",
            ),
            ev(
                13,
                "window_open_at_exit",
                1,
                "process 13 exited with its capture window open (cudaProfilerStart without cudaProfilerStop): the window was closed at its exit",
            ),
        ]);
        let names: Vec<&str> = l.iter().map(|x| x.event.as_str()).collect();
        assert_eq!(
            names,
            ["window_open_at_exit", "capture_window", "process_window"]
        );
        assert_eq!(l[0].severity, Severity::Problem);
        let text = line_text(&l[0]);
        assert!(text.contains("(pid 13)"), "{text}");
        assert!(
            text.contains("1 process exited with its capture window open"),
            "{text}"
        );
        assert!(text.contains("/stop_profile"), "{text}");
        let text = line_text(&l[2]);
        assert_eq!(l[2].rows, 3);
        assert!(
            text.contains("2 processes opened capture windows of their own (0.900 s in all)"),
            "{text}"
        );
        assert!(text.contains("(pid 11, 12)"), "{text}");
        let one = capture_lines(&[ev(11, "process_window", 300_000_000, "")]);
        assert!(one.is_empty(), "{one:?}");
    }

    fn ev(pid: u32, event: &str, count: u64, detail: &str) -> CaptureEvent {
        CaptureEvent {
            t_ns: 0,
            pid,
            event: event.into(),
            count,
            detail: detail.into(),
        }
    }

    #[test]
    fn routine_events_are_not_shown_and_kinds_are_grouped() {
        let lines = capture_lines(&[
            ev(10, "cuda_attached", 3, "kernels"),
            ev(10, "nvtx_attached", 0, ""),
            ev(10, "no_activity_records", 0, "process 10 had ..."),
            ev(11, "no_activity_records", 0, "process 11 had ..."),
            ev(11, "cupti_records_dropped", 40, "dropped"),
            ev(12, "cupti_records_dropped", 2, "dropped"),
            ev(0, "quiet_processes", 3, "3 processes"),
            ev(0, "brand_new_event", 5, "something new"),
        ]);
        let names: Vec<&str> = lines.iter().map(|l| l.event.as_str()).collect();
        assert_eq!(
            names,
            [
                "cupti_records_dropped",
                "no_activity_records",
                "quiet_processes",
                "brand_new_event"
            ]
        );
        assert_eq!(lines[0].count, 42);
        assert_eq!(lines[0].pids, [11, 12]);
        assert_eq!(lines[1].pids, [10, 11]);
        let text = line_text(&lines[1]);
        assert!(text.contains("2 processes"), "{text}");
        assert!(text.contains("torch.profiler"), "{text}");
        assert!(text.contains("(pid 10, 11)"), "{text}");
        assert_eq!(lines[2].severity, Severity::Info);
        assert!(line_text(&lines[2]).contains("3 processes"));
        assert_eq!(lines[3].severity, Severity::Unknown);
        assert_eq!(
            line_text(&lines[3]),
            "brand_new_event: 1 row(s), count 5: something new"
        );
    }

    /// What host-stack sampling writes is known: a process read is routine, a process that
    /// could not be read is a problem with the fix, missed samples and non-Python processes
    /// are said.
    #[test]
    fn host_stack_events_are_known() {
        let lines = capture_lines(&[
            ev(10, "host_stacks", 900, "CPython 3.11"),
            ev(10, "host_samples_missed", 12, ""),
            ev(11, "host_stacks_unavailable", 0, "permission denied"),
            ev(0, "host_stacks_not_python", 2, ""),
        ]);
        let names: Vec<&str> = lines.iter().map(|l| l.event.as_str()).collect();
        assert_eq!(
            names,
            [
                "host_stacks_unavailable",
                "host_samples_missed",
                "host_stacks_not_python"
            ]
        );
        assert_eq!(lines[0].severity, Severity::Problem);
        assert!(line_text(&lines[0]).contains("CAP_SYS_PTRACE"));
        assert!(line_text(&lines[1]).contains("12 host stack sample(s) were missed"));
        assert!(line_text(&lines[2]).contains("2 processes of the program run no Python"));
    }

    #[test]
    fn nothing_to_show_for_a_clean_capture() {
        assert!(capture_lines(&[ev(1, "cuda_attached", 3, ""), ev(2, "forked", 0, "")]).is_empty());
    }
}
