//! The state every part of the window shares, below all of them: what the loader fills in for
//! an open recording ([`Shared`], behind [`LoadedTrace`]), where a recording sits on the shared
//! time axis ([`TraceSlot`]), a recording locked for one frame ([`Locked`]), the analysis report
//! and the comparison as states ([`ReportState`], [`DiffState`]).
//!
//! Dependencies flow one way: this module ← the loader ([`crate::data`]) and the statistics of
//! a selection ([`crate::stats`]) ← the views ([`crate::timeline`], [`crate::panel`]) ← the
//! window ([`crate::app`]). The loader writes into [`Shared`]; the views read it once a frame.

use crate::axis::AxisTime;
use crate::gaps::DeviceGaps;
use crate::lod::DevicePyramid;
use crate::tables::Tables;
use crate::tiles::TileCache;
use cufall_analysis::diff::DiffReport;
use cufall_analysis::report::Report;
use cufall_analysis::samples::Activity;
use cufall_trace::Trace;
use cufall_trace::model::DeviceId;
use cufall_trace::model::{Manifest, MetricInfo};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, mpsc};

/// How many of the longest gaps the side panel lists (the loader asks the report to keep as
/// many).
pub const GAPS_LISTED: usize = 60;

/// A stretch of time on the trace's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeSpan {
    pub start_ns: i64,
    pub end_ns: i64,
}

/// Something the loader can be asked for.
pub(crate) enum Request {
    /// The raw samples of a tile.
    Tile(i64),
}

/// The analysis report of a recording (per-phase statistics and gaps), as the side panel and
/// the gap overlay see it.
#[derive(Debug)]
pub enum ReportState {
    /// Being computed: windows of the samples table scanned, of how many, once known.
    Computing {
        scanned: Option<(usize, usize)>,
    },
    /// The recording has no GPU counters (NVML only): there are no per-phase statistics and
    /// no gaps, and nothing went wrong.
    NvmlOnly,
    /// The report could not be computed: why.
    Failed(String),
    Ready(Box<Report>),
}

impl ReportState {
    /// Whether the loader is done with the report (whatever came of it).
    pub fn is_done(&self) -> bool {
        !matches!(self, ReportState::Computing { .. })
    }

    /// The report, once computed.
    pub fn ready(&self) -> Option<&Report> {
        match self {
            ReportState::Ready(r) => Some(r),
            _ => None,
        }
    }
}

/// What the worker shares with the UI.
#[derive(Debug)]
pub struct Shared {
    pub tables: Option<Tables>,
    /// Per device, one series per metric and, when the trace has counters, a last series that is
    /// 1 while the GPU is idle and 0 otherwise (its mean over a range is the idle fraction).
    pub pyramids: BTreeMap<DeviceId, DevicePyramid>,
    pub activity: Option<Activity>,
    /// First sample start and last sample end (the manifest's times until samples are read).
    pub extent: TimeSpan,
    /// Samples are in the pyramids up to here.
    pub loaded_until_ns: i64,
    pub samples_done: bool,
    pub tiles: TileCache,
    pub report: ReportState,
    /// Per device, the report's gaps by start time: a device's gaps never overlap, so the
    /// visible ones, and runs of them narrower than a pixel, are found by binary search.
    pub gaps_by_device: BTreeMap<DeviceId, DeviceGaps>,
    /// Errors met while loading (a damaged table, a failed query), for the window and stderr.
    pub problems: Vec<String>,
    /// The trace's own warnings (unfinished recording, skipped truncated segment, ...).
    pub warnings: Vec<String>,
    /// The worker has nothing left to do.
    pub idle: bool,
}

/// An open recording: the handle the views hold. [`crate::data`] opens it (`LoadedTrace::open`)
/// and its worker fills the [`Shared`] state behind it.
pub struct LoadedTrace {
    pub path: PathBuf,
    /// Short name for titles: the folder name.
    pub name: String,
    pub manifest: Manifest,
    pub metrics: Vec<MetricInfo>,
    pub devices: Vec<DeviceId>,
    pub interval_ns: i64,
    pub trace: Arc<Trace>,
    pub(crate) shared: Arc<Mutex<Shared>>,
    pub(crate) requests: mpsc::Sender<Request>,
}

impl std::fmt::Debug for LoadedTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedTrace")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl LoadedTrace {
    /// The shared state, locked for this frame.
    pub fn lock(&self) -> MutexGuard<'_, Shared> {
        lock(&self.shared)
    }

    /// Asks for the raw-sample tiles of `[t0, t1)` that are neither held nor asked for.
    pub fn request_tiles(&self, shared: &mut Shared, t0: i64, t1: i64) {
        if !shared.samples_done {
            return;
        }
        for k in shared.tiles.missing(t0, t1) {
            shared.tiles.pending.insert(k);
            shared.idle = false;
            // A closed channel means the worker is gone; the view keeps its summaries.
            let _ = self.requests.send(Request::Tile(k));
        }
    }
}

/// Locks a recording's shared state.
pub(crate) fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic while holding the lock leaves consistent-enough data for viewing.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An open recording and where it sits on the shared axis.
#[derive(Debug)]
pub struct TraceSlot {
    pub data: LoadedTrace,
    /// Added to the recording's times to place them on the shared axis (0 for the first).
    pub offset_ns: i64,
}

impl TraceSlot {
    /// A time of this recording on the shared axis.
    pub fn disp(&self, t_ns: i64) -> AxisTime {
        AxisTime::new(t_ns.saturating_add(self.offset_ns) as f64)
    }

    /// A time of the shared axis on this recording's clock.
    pub fn local(&self, d: AxisTime) -> i64 {
        (d.ns.round() as i64).saturating_sub(self.offset_ns)
    }
}

/// A recording with its shared state locked for this frame.
pub struct Locked<'a> {
    pub slot: &'a TraceSlot,
    pub s: MutexGuard<'a, Shared>,
}

impl<'a> Locked<'a> {
    /// Locks `slot`'s shared state.
    pub fn new(slot: &'a TraceSlot) -> Locked<'a> {
        Locked {
            slot,
            s: slot.data.lock(),
        }
    }
}

/// The whole extent of all recordings on the shared axis.
pub fn shared_extent(traces: &[Locked<'_>]) -> (AxisTime, AxisTime) {
    let mut lo = AxisTime::new(f64::INFINITY);
    let mut hi = AxisTime::new(f64::NEG_INFINITY);
    for t in traces {
        lo = lo.min(t.slot.disp(t.s.extent.start_ns));
        hi = hi.max(t.slot.disp(t.s.extent.end_ns));
    }
    if lo.is_finite() && hi > lo {
        (lo, hi)
    } else {
        (AxisTime::new(0.0), AxisTime::new(1e9))
    }
}

/// The comparison of two recordings, computed off the UI thread.
#[derive(Debug, Default)]
pub enum DiffState {
    #[default]
    None,
    Computing(mpsc::Receiver<Result<DiffReport, DiffError>>),
    Done(Box<Result<DiffReport, DiffError>>),
}

/// Why the comparison has no result; the panel shows the message.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// The comparison itself failed (a recording unreadable, metrics that do not match, ...).
    #[error(transparent)]
    Failed(#[from] cufall_analysis::AnalysisError),
    /// Its thread could not be started.
    #[error("cannot start the comparison: {0}")]
    Spawn(#[source] std::io::Error),
    /// Its thread ended without sending a result (it panicked).
    #[error("the comparison stopped unexpectedly")]
    Stopped,
}

/// The host a recording was made on, `?` where its manifest names none.
pub fn host_of(t: &Locked<'_>) -> String {
    let h = t.slot.data.manifest.hostname.trim();
    if h.is_empty() {
        "?".into()
    } else {
        crate::host_threads::clean_text(h)
    }
}

/// Whether the open recordings were made on different hosts (the nodes of one run): their
/// GPUs are then named `host:GPU n`, as `cufall report A B` names them.
pub fn hosts_differ(traces: &[Locked<'_>]) -> bool {
    traces
        .iter()
        .any(|t| t.slot.data.manifest.hostname != traces[0].slot.data.manifest.hostname)
}

/// A GPU of recording `ti` as labels name it: `GPU n`, or `host:GPU n` where the recordings
/// come from different hosts.
pub fn gpu_label(traces: &[Locked<'_>], ti: usize, dev: DeviceId) -> String {
    match traces.get(ti) {
        Some(t) if hosts_differ(traces) => format!("{}:{dev}", host_of(t)),
        _ => dev.to_string(),
    }
}

/// A GPU of recording `ti` alone (a group of its own, the nodes of one run): `host:GPU n`, or
/// with recordings of one host its recording's letter, `B GPU n`.
pub fn node_gpu_label(traces: &[Locked<'_>], ti: usize, dev: DeviceId) -> String {
    if hosts_differ(traces) {
        gpu_label(traces, ti, dev)
    } else {
        format!("{}{dev}", trace_tag(traces.len(), ti))
    }
}

/// The tag of recording `ti` of `n` in labels: nothing for one recording, else its letter and
/// a space (`A `, `B `, `C `, ...; `#27 ` past `Z`).
pub fn trace_tag(n: usize, ti: usize) -> String {
    if n <= 1 {
        return String::new();
    }
    match u8::try_from(ti).ok().filter(|i| *i < 26) {
        Some(i) => format!("{} ", char::from(b'A' + i)),
        None => format!("#{} ", ti + 1),
    }
}
