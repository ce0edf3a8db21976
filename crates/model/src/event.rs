//! The names of the capture table's events ([`crate::CaptureEvent`]'s `event` column), the
//! one place their text is spelt: the capture library sends them, the recorder and host stacks
//! write them, analysis reads them (listed in `docs/trace-format.md`).
//!
//! On disk an event is its name as a string, so a newer writer may write names this version
//! does not know: [`CaptureEventKind::parse`] gives `None` for them, and readers show them with
//! the detail the writer wrote rather than refusing the trace.

use std::fmt;

/// A kind of event of which capture measured (or could not measure) what it adds to the
/// program's host time: the `capture_cost_<kind>` rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CostKind {
    /// An NVTX range (a push/pop pair, a start/end pair) or a mark.
    Nvtx,
    /// A kernel launch.
    Kernel,
    /// A copy or memset.
    Memcpy,
    /// A whole CUDA graph launch.
    Graph,
    /// A kernel of a graph traced node by node (`--capture graph-nodes`).
    GraphNode,
}

impl CostKind {
    /// Every kind, in the order cost rows list them.
    pub const ALL: [CostKind; 5] = [
        CostKind::Nvtx,
        CostKind::Kernel,
        CostKind::Memcpy,
        CostKind::Graph,
        CostKind::GraphNode,
    ];

    /// The kind's part of the row name (`nvtx` in `capture_cost_nvtx`).
    pub fn as_str(self) -> &'static str {
        match self {
            CostKind::Nvtx => "nvtx",
            CostKind::Kernel => "kernel",
            CostKind::Memcpy => "memcpy",
            CostKind::Graph => "graph",
            CostKind::GraphNode => "graph_node",
        }
    }
}

/// The event names of the `capture` table (schema 1.1 on). The text of each is
/// [`CaptureEventKind::as_str`]; a name this version does not know parses to `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CaptureEventKind {
    /// CUDA called the library's `InitializeInjection`. The count is the number of CUPTI
    /// activity kinds captured (0: NVTX only, CUPTI not used).
    CudaAttached,
    /// An NVTX copy in the process handed its calls to the library.
    NvtxAttached,
    /// Kernel, copy or API capture was asked for but CUPTI could not be used.
    CuptiUnavailable,
    /// CUPTI reported activity records it had to drop (count = records).
    CuptiDropped,
    /// Push/pop or start/end ranges never closed when the process exited (count = ranges).
    OpenRanges,
    /// Pops without a matching push (count = pops).
    UnmatchedPops,
    /// The process forked; the child reports on its own connection.
    Forked,
    /// The recorder wrote this: the process ended without saying goodbye.
    NoGoodbye,
    /// The recorder wrote this: the process sent bytes that are not the capture wire format,
    /// or more than the recorder bounds; its connection was closed, the recording went on.
    BrokenStream,
    /// The recorder wrote this: kernel capture was set up in a process that then delivered no
    /// activity (no GPU work, or another CUPTI client took CUPTI's buffers).
    NoActivity,
    /// The recorder wrote this: the program was started without capture, and why.
    NotInjected,
    /// The recorder wrote this: no process of the program loaded the capture library.
    NoCuda,
    /// The recorder wrote this (routine): processes of the program that never did GPU work nor
    /// sent a record (compile workers, data loaders, tokenizer pools); count = processes. They
    /// get no warning of their own.
    Quiet,
    /// The recorder wrote this: one capture window (`--capture-range`, `--delay`, a signal);
    /// `t_ns` is its start, `count` its length in nanoseconds, `detail` what opened and
    /// closed it. Only what falls inside windows is in the trace.
    Window,
    /// The recorder wrote this: a capture range was asked for and no window opened.
    NoWindow,
    /// The recorder wrote this: one window of one process (`pid`), from its first open to its
    /// last close; `t_ns` its start, `count` its length in nanoseconds, `detail` what opened
    /// and closed it. The trace keeps the union of all processes' windows ([`Self::Window`]).
    ProcessWindow,
    /// The recorder wrote this: the process exited with its capture window open (a
    /// `cudaProfilerStart` without its `cudaProfilerStop`); the window was closed at its exit.
    WindowOpenAtExit,
    /// The recorder wrote this: records CUPTI delivered without timestamps (start 0, or an end
    /// before the start), left out of the trace; count = records.
    Untimed,
    /// The library could not subscribe to CUPTI's callbacks in this process (another tool
    /// holds CUPTI's one subscriber): no `--capture-range cuda-profiler-api` trigger and no
    /// graph contents there.
    CallbacksUnavailable,
    /// The recorder wrote this, once per CUDA graph a process instantiated: `count` is the
    /// graph's node count, `detail` its id and kernels (`graph 12: 48 nodes; 24 × gemm, ...`).
    GraphContents,
    /// The library could not read graphs' kernels (libcuda lacks the graph functions).
    GraphContentsUnavailable,
    /// What capture adds to the program's host time per event of a kind, measured once at
    /// capture start in the process: `count` is nanoseconds per event (at least 1), `detail`
    /// how it was measured. Not `measured`: the kind could not be measured, `count` is 0 and
    /// means nothing, `detail` says why; a reader must show such a cost as unknown, never as 0.
    Cost { kind: CostKind, measured: bool },
    /// Host stacks, one per process whose stacks were read: count = samples written; detail =
    /// the interpreter (or `native (perf task-clock)`), threads, samples and missed.
    HostStacks,
    /// Host stacks, one per process that missed samples: count = samples missed.
    HostSamplesMissed,
    /// Host stacks, one per process that runs Python but could not be read: detail = why and
    /// the fix.
    HostStacksUnavailable,
    /// Host stacks, one per recording (pid 0): count = processes of the program that run no
    /// Python and whose native frames could not be read either (they got no stacks at all).
    HostStacksNotPython,
}

/// The known events without the cost rows (those are [`CaptureEventKind::Cost`] of each
/// [`CostKind`], measured or not).
const PLAIN: [CaptureEventKind; 25] = {
    use CaptureEventKind::*;
    [
        CudaAttached,
        NvtxAttached,
        CuptiUnavailable,
        CuptiDropped,
        OpenRanges,
        UnmatchedPops,
        Forked,
        NoGoodbye,
        BrokenStream,
        NoActivity,
        NotInjected,
        NoCuda,
        Quiet,
        Window,
        NoWindow,
        ProcessWindow,
        WindowOpenAtExit,
        Untimed,
        CallbacksUnavailable,
        GraphContents,
        GraphContentsUnavailable,
        HostStacks,
        HostSamplesMissed,
        HostStacksUnavailable,
        HostStacksNotPython,
    ]
};

impl CaptureEventKind {
    /// Every event this version knows, the cost rows of every kind included.
    pub fn all() -> impl Iterator<Item = CaptureEventKind> {
        let costs = CostKind::ALL.into_iter().flat_map(|kind| {
            [true, false].map(|measured| CaptureEventKind::Cost { kind, measured })
        });
        PLAIN.into_iter().chain(costs)
    }

    /// The name in the trace (and on the capture wire).
    pub fn as_str(self) -> &'static str {
        use CaptureEventKind::*;
        match self {
            CudaAttached => "cuda_attached",
            NvtxAttached => "nvtx_attached",
            CuptiUnavailable => "cupti_unavailable",
            CuptiDropped => "cupti_records_dropped",
            OpenRanges => "open_ranges_at_exit",
            UnmatchedPops => "unmatched_pops",
            Forked => "forked",
            NoGoodbye => "ended_without_goodbye",
            BrokenStream => "broken_capture_stream",
            NoActivity => "no_activity_records",
            NotInjected => "not_injected",
            NoCuda => "no_cuda_seen",
            Quiet => "quiet_processes",
            Window => "capture_window",
            NoWindow => "no_capture_window",
            ProcessWindow => "process_window",
            WindowOpenAtExit => "window_open_at_exit",
            Untimed => "untimed_records",
            CallbacksUnavailable => "cupti_callbacks_unavailable",
            GraphContents => "graph_contents",
            GraphContentsUnavailable => "graph_contents_unavailable",
            Cost { kind, measured } => cost_name(kind, measured),
            HostStacks => "host_stacks",
            HostSamplesMissed => "host_samples_missed",
            HostStacksUnavailable => "host_stacks_unavailable",
            HostStacksNotPython => "host_stacks_not_python",
        }
    }

    /// The event named `name`; `None` for a name this version does not know (a newer
    /// writer's), which a reader shows as it was written.
    pub fn parse(name: &str) -> Option<Self> {
        Self::all().find(|k| k.as_str() == name)
    }

    /// Whether host-stack sampling writes this event (`record --host-stacks`).
    pub fn is_host_stacks(self) -> bool {
        use CaptureEventKind::*;
        matches!(
            self,
            HostStacks | HostSamplesMissed | HostStacksUnavailable | HostStacksNotPython
        )
    }
}

/// The start of every cost row's name, a newer writer's kinds' too.
macro_rules! cost_prefix {
    () => {
        "capture_cost_"
    };
}

fn cost_name(kind: CostKind, measured: bool) -> &'static str {
    match (kind, measured) {
        (CostKind::Nvtx, true) => concat!(cost_prefix!(), "nvtx"),
        (CostKind::Nvtx, false) => concat!(cost_prefix!(), "nvtx_unknown"),
        (CostKind::Kernel, true) => concat!(cost_prefix!(), "kernel"),
        (CostKind::Kernel, false) => concat!(cost_prefix!(), "kernel_unknown"),
        (CostKind::Memcpy, true) => concat!(cost_prefix!(), "memcpy"),
        (CostKind::Memcpy, false) => concat!(cost_prefix!(), "memcpy_unknown"),
        (CostKind::Graph, true) => concat!(cost_prefix!(), "graph"),
        (CostKind::Graph, false) => concat!(cost_prefix!(), "graph_unknown"),
        (CostKind::GraphNode, true) => concat!(cost_prefix!(), "graph_node"),
        (CostKind::GraphNode, false) => concat!(cost_prefix!(), "graph_node_unknown"),
    }
}

/// Whether `name` is a cost row's, of a kind this version knows or of a newer writer's
/// (`capture_cost_<kind>`): those are read as costs, never shown as unknown events.
pub fn names_a_cost(name: &str) -> bool {
    name.starts_with(cost_prefix!())
}

impl fmt::Display for CaptureEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<CaptureEventKind> for String {
    fn from(k: CaptureEventKind) -> String {
        k.as_str().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_event_and_names_differ() {
        let all: Vec<_> = CaptureEventKind::all().collect();
        assert_eq!(all.len(), 25 + 10);
        let mut names: Vec<&str> = all.iter().map(|k| k.as_str()).collect();
        for k in &all {
            assert_eq!(CaptureEventKind::parse(k.as_str()), Some(*k));
            assert_eq!(k.to_string(), k.as_str());
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "two events share a name");
    }

    #[test]
    fn the_names_are_those_traces_hold() {
        // The on-disk text: changing one would make older traces unreadable by name.
        use CaptureEventKind::*;
        assert_eq!(CuptiDropped.as_str(), "cupti_records_dropped");
        assert_eq!(NoGoodbye.as_str(), "ended_without_goodbye");
        assert_eq!(HostStacks.as_str(), "host_stacks");
        let cost = |kind, measured| Cost { kind, measured }.as_str();
        assert_eq!(cost(CostKind::Nvtx, true), "capture_cost_nvtx");
        assert_eq!(cost(CostKind::Graph, false), "capture_cost_graph_unknown");
        for kind in CostKind::ALL {
            assert_eq!(cost(kind, true), format!("capture_cost_{}", kind.as_str()));
            assert_eq!(cost(kind, false), format!("{}_unknown", cost(kind, true)));
        }
    }

    #[test]
    fn a_newer_writers_name_is_unknown_not_an_error() {
        for name in [
            "",
            "capture_cost_",
            "capture_cost_tpu",
            "Forked",
            "forked ",
            "gpu_lost",
        ] {
            assert_eq!(CaptureEventKind::parse(name), None, "{name:?}");
        }
        assert!(names_a_cost("capture_cost_tpu") && names_a_cost("capture_cost_nvtx"));
        assert!(!names_a_cost("cuda_attached"));
        assert!(CaptureEventKind::HostSamplesMissed.is_host_stacks());
        assert!(!CaptureEventKind::Forked.is_host_stacks());
    }
}
