//! What the recorder and its connections share: the summary of what capture delivered, and the
//! state every connection's thread updates.

use crate::sink::SinkMsg;
use cufall_capture::{CaptureEventKind, RangeTrigger};
use cufall_trace::model::{CaptureEvent, DeviceId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One process of the program, as the recorder saw it.
#[derive(Clone, Debug, Default)]
pub struct ProcessSummary {
    pub pid: u32,
    pub exe: String,
    pub said_goodbye: bool,
    pub nvtx_ranges: u64,
    pub activities: u64,
    pub api_calls: u64,
    /// CUDA contexts it created (CUPTI's context records): it did GPU work.
    pub contexts: u64,
}

impl ProcessSummary {
    /// Whether the process did anything capture records: GPU work or NVTX ranges. A process
    /// that did neither (a compile worker, a data loader) has nothing that could be missing.
    pub fn touched_gpu_or_nvtx(&self) -> bool {
        self.contexts > 0 || self.activities > 0 || self.nvtx_ranges > 0 || self.api_calls > 0
    }
}

/// What capture delivered, for the summary.
#[derive(Clone, Debug, Default)]
pub struct CaptureSummary {
    pub processes: Vec<ProcessSummary>,
    pub nvtx_ranges: u64,
    pub activities: u64,
    pub api_calls: u64,
    pub cupti_dropped: u64,
    /// Every event from the capture table worth telling the user, in arrival order.
    pub problems: Vec<String>,
    /// Connections still open when the recorder stopped.
    pub stragglers: usize,
    pub protocol_errors: Vec<String>,
    /// Processes that never did GPU work nor sent a record (no warnings of their own).
    pub quiet: Vec<ProcessSummary>,
    /// What the capture calibration measured per launch, for the summary (`None`: not run).
    pub calibration: Option<String>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) open: usize,
    pub(super) last_change: Option<Instant>,
    pub(super) summary: CaptureSummary,
}

/// What every connection's thread shares.
pub(super) struct Shared {
    pub(super) tx: Sender<SinkMsg>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) state: Arc<Mutex<State>>,
    pub(super) rows: Arc<AtomicU64>,
    pub(super) uuids: Arc<HashMap<String, DeviceId>>,
    /// How a process's window edges are named and counted (empty: no capture range).
    pub(super) trigger: Arc<WindowTrigger>,
}

/// What a process's window edges are, for the recorder.
#[derive(Debug, Default)]
pub(super) struct WindowTrigger {
    /// How the opening and the closing edge are named in the trace (empty: no capture range).
    pub(super) open: String,
    pub(super) close: String,
    /// Opens nest and each needs its close (NVTX ranges of one name inside each other).
    /// `cudaProfilerStart` does not: a second start while profiling has no effect and one
    /// stop ends it (CUDA's profiler control is not counted).
    pub(super) nests: bool,
}

impl WindowTrigger {
    pub(super) fn of(range: Option<&RangeTrigger>) -> WindowTrigger {
        match range {
            Some(RangeTrigger::ProfilerApi) => WindowTrigger {
                open: "cudaProfilerStart".into(),
                close: "cudaProfilerStop".into(),
                nests: false,
            },
            Some(RangeTrigger::Nvtx(n)) => WindowTrigger {
                open: format!("the start of NVTX range `{n}`"),
                close: format!("the end of NVTX range `{n}`"),
                nests: true,
            },
            None => WindowTrigger::default(),
        }
    }
}

/// What the user should read about a capture event, or `None` for routine ones.
pub(super) fn problem_text(e: &CaptureEvent) -> Option<String> {
    use CaptureEventKind::*;
    match e.kind() {
        Some(CudaAttached | NvtxAttached | Forked | Quiet | Window | GraphContents) => None,
        Some(Cost { measured: true, .. }) => None,
        _ => Some(format!("process {}: {} ({})", e.pid, e.detail, e.event)),
    }
}
