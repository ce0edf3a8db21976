//! The report and its settings: what `--json` serialises, `render` words and `diff` compares.

use crate::capture::{CaptureLine, GraphContents};
use crate::gaps::{GapPart, HostTime};
use crate::host::HostReport;
use crate::kernels::KernelTable;
use crate::samples::{self, Activity};
use crate::select::{DomainCount, PhaseSelect};
use cufall_trace::model::{DeviceId, Nanos};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Settings of a report.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportOptions {
    /// Activity metric; default: the first heatmap of the recording, else the first metric.
    pub metric: Option<String>,
    /// Value meaning "fully busy"; default: the heatmap's, 1 for ratios, 100 for `%`, else the
    /// peak in the trace.
    pub full_scale: Option<f64>,
    /// Idle means below this fraction of the full scale.
    pub idle_below: f64,
    /// Shortest idle interval reported as a gap; default: [`DEFAULT_GAP_INTERVALS`] sampling
    /// intervals.
    pub min_gap_ns: Option<Nanos>,
    /// Other metrics that must also be low for a sample to be idle. `None`: every other
    /// recorded percentage metric when `metric` is not given, none when it is.
    pub also_low: Option<Vec<String>>,
    /// How many gaps [`Report::gaps`] lists, longest first; `None`: every gap. The totals
    /// (phases, places, [`Report::gap_count`]) always count every gap.
    pub gap_rows: Option<usize>,
    /// How many kernels [`Report::kernels`] lists per phase and device, by GPU time; `None`:
    /// every kernel name; `Some(0)`: the kernels are not tabled at all (nothing is folded).
    pub kernel_rows: Option<usize>,
    /// Samples per time window of the scan ([`samples::SAMPLES_PER_WINDOW`] by default): fewer
    /// hold less memory at once and take longer (figures in `docs/benchmarks-analysis.md`).
    pub window_samples: u64,
    /// Which NVTX ranges are phases; by default the program's own.
    pub phases: PhaseSelect,
}

/// Default idle threshold: below 5 % of full scale.
pub const DEFAULT_IDLE_BELOW: f64 = 0.05;
/// Default minimum gap, in sampling intervals.
pub const DEFAULT_GAP_INTERVALS: i64 = 5;

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            metric: None,
            full_scale: None,
            idle_below: DEFAULT_IDLE_BELOW,
            min_gap_ns: None,
            also_low: None,
            gap_rows: None,
            kernel_rows: None,
            window_samples: samples::SAMPLES_PER_WINDOW,
            phases: PhaseSelect::default(),
        }
    }
}

/// A GPU of the recording.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuInfo {
    pub device: DeviceId,
    pub name: String,
    pub chip: String,
}

/// Mean and peak of a value over a set of samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stat {
    pub name: String,
    pub mean: Option<f64>,
    pub peak: Option<f64>,
}

/// Gap time of a phase on a device.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GapTotals {
    pub count: u64,
    pub total_ns: Nanos,
    /// `None` where kernels were not captured.
    pub no_kernel_ns: Option<Nanos>,
    pub kernel_resident_ns: Option<Nanos>,
    /// Gap time the host spent in CUDA calls; `None` where they were not captured.
    pub host: Option<HostTime>,
}

impl GapTotals {
    /// Adds the time of part or piece `p`; `new_gap`: it starts a gap of this class (else it
    /// continues the one the previous part counted).
    pub(super) fn add(&mut self, p: &GapPart, new_gap: bool) {
        self.count += u64::from(new_gap);
        self.total_ns += Nanos(p.duration_ns());
        if let Some(k) = p.kernel_resident_ns {
            *self.kernel_resident_ns.get_or_insert(Nanos::ZERO) += Nanos(k);
            *self.no_kernel_ns.get_or_insert(Nanos::ZERO) += Nanos(p.duration_ns()) - Nanos(k);
        }
        if let Some(h) = &p.host {
            self.host.get_or_insert_with(HostTime::default).add(h);
        }
    }

    pub(super) fn merge(&mut self, o: &GapTotals) {
        self.count += o.count;
        self.total_ns += o.total_ns;
        if let Some(h) = &o.host {
            self.host.get_or_insert_with(HostTime::default).add(h);
        }
        if let Some(k) = o.kernel_resident_ns {
            *self.kernel_resident_ns.get_or_insert(Nanos::ZERO) += k;
        }
        if let Some(k) = o.no_kernel_ns {
            *self.no_kernel_ns.get_or_insert(Nanos::ZERO) += k;
        }
    }
}

/// One phase on one device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseDevice {
    pub device: DeviceId,
    pub samples: u64,
    /// Time covered by samples whose idle test could be made (drops and unknown samples
    /// excluded).
    pub sampled_ns: Nanos,
    /// Sampled time with the activity value under the idle threshold.
    pub idle_ns: Nanos,
    /// Time of samples lacking a value the idle test needs (null in the trace): neither idle
    /// nor busy, not in `sampled_ns`.
    pub unknown_ns: Nanos,
    /// `idle_ns / sampled_ns`; `None` without samples whose idle test could be made.
    pub idle_fraction: Option<f64>,
    /// Time of the phase without samples (drops): never counted as idle.
    pub dropped_ns: Nanos,
    pub activity: Stat,
    pub metrics: Vec<Stat>,
    /// NVML means over the phase (`None` without NVML readings in it).
    pub power_w: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
    pub mem_clock_mhz: Option<f64>,
    /// NVML "GPU utilization", what nvidia-smi shows, for comparison.
    pub nvml_gpu_util_pct: Option<f64>,
    /// The gaps' time inside this phase's ranges (for a parent phase, this includes the gaps
    /// between its children): never more than the phase's time. `count`: the gaps with time in
    /// it, a stretch that leaves and comes back counted at each return.
    pub gaps: GapTotals,
}

/// One phase (an NVTX range path) over all devices.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseReport {
    pub path: String,
    pub name: String,
    pub depth: usize,
    /// Number of ranges.
    pub count: u64,
    /// Summed range durations (host-side NVTX times).
    pub total_ns: Nanos,
    pub p50_ns: Nanos,
    pub p99_ns: Nanos,
    pub devices: Vec<PhaseDevice>,
    /// Idle time over sampled time, all devices together.
    pub idle_fraction: Option<f64>,
    pub verdict: Verdict,
}

/// What a phase's numbers say, as data (`--json` gives these fields; `render` words them).
/// Fractions are of 1: `idle_fraction` of the sampled time, the others of the phase's gap time.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// The recording has no GPU counters: idle time cannot be measured.
    NotMeasured,
    /// No sample falls in the phase.
    NoSamples,
    /// Samples fall in the phase, but none has every value the idle test needs (null in the
    /// trace).
    ValuesUnknown,
    /// Idle less than [`BUSY_BELOW`] of the time.
    Busy { idle_fraction: f64 },
    /// Idle, but only in stretches shorter than the minimum gap: stalls between or in kernels.
    ShortStalls {
        idle_fraction: f64,
        min_gap_ns: Nanos,
    },
    /// Idle in gaps, but kernels were not captured, so their cause cannot be told.
    CauseUnknown { idle_fraction: f64 },
    /// No kernel resident during at least [`HOST_BOUND_FROM`] of the gap time; with the CUDA
    /// calls captured, where the host was meanwhile.
    HostBound {
        idle_fraction: f64,
        no_kernel_fraction: f64,
        host: Option<HostShares>,
    },
    /// Kernels resident but counters idle during most of the gap time.
    LatencyBound {
        idle_fraction: f64,
        kernel_resident_fraction: f64,
    },
    /// Neither cause dominates.
    Mixed {
        idle_fraction: f64,
        no_kernel_fraction: f64,
    },
}

/// Where the host was during a phase's gap time (`--capture api`), as fractions of it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct HostShares {
    pub in_sync: f64,
    pub in_launch: f64,
    pub outside_cuda: f64,
}

pub use crate::thresholds::{BUSY_BELOW, HOST_BOUND_FROM};

/// A remark about the whole report, as data.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Note {
    /// No NVTX ranges: the whole run is one phase.
    NoNvtx,
    /// NVTX ranges, but none chosen as phases: the whole run is one phase.
    NoPhasesChosen { phases: String },
    /// No GPU counters, with the reason the recorder wrote, if any.
    NoCounters { why: Option<String> },
    /// No kernel activity: gaps are not split by cause.
    NoKernels,
    /// Drops: excluded from idle time and gaps.
    Drops { count: u64, dropped_ns: Nanos },
    /// The phases of several processes overlap in time (`overlap_ns` in all): there a gap
    /// piece has one place (the deepest, latest-starting range), the others' left out; it still
    /// counts in the gap time of every phase covering it.
    OverlappingProcesses {
        processes: Vec<u32>,
        overlap_ns: Nanos,
    },
    /// The activity metric is a bare counter (cycles, bytes) recorded without its percentage of
    /// peak (`--raw`, or a recording made before cufall recorded one): its values are counts,
    /// and its peak cannot be rebuilt from what the recording holds.
    RawCounter {
        metric: String,
        denominator: Option<String>,
    },
    /// Samples lacking a value the idle test needs (null in the trace): neither idle nor busy,
    /// excluded from idle time and gaps. `metrics` are those the idle test reads.
    UnknownValues {
        samples: u64,
        unknown_ns: Nanos,
        metrics: Vec<String>,
    },
}

/// Where a group of gaps falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaceKind {
    /// Inside a phase.
    In,
    /// Between two phases (or between a phase and the run's start or end).
    Between,
    /// A recording without phases.
    WholeRun,
}

/// Gaps grouped by where they fall: the pieces of the idle stretches (cut at the phases' edges)
/// that fall in one place. The groups' totals add up to the gaps' total.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GapGroup {
    /// `step/draft` or `verify → draft`.
    pub place: String,
    /// In a phase, between two, or a whole run without phases.
    pub kind: PlaceKind,
    /// For `between`: the phase before and after (full paths; empty at the run's start/end).
    pub before: Option<String>,
    pub after: Option<String>,
    pub totals: GapTotals,
    pub mean_ns: Nanos,
    pub max_ns: Nanos,
    pub devices: Vec<DeviceId>,
}

/// One idle stretch, whole, with the pieces it is cut into at the phases' edges.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GapRow {
    pub device: DeviceId,
    pub start_ns: i64,
    pub end_ns: i64,
    /// Start relative to the first sample of the trace.
    pub offset_ns: Nanos,
    pub duration_ns: Nanos,
    /// The places it crosses, in time order, as [`GapGroup::place`] spells them, joined by
    /// ` + ` (one place: shared with the other gaps of that place).
    pub place: Arc<str>,
    pub no_kernel_ns: Option<Nanos>,
    pub kernel_resident_ns: Option<Nanos>,
    /// Gap time the host spent in CUDA calls (`--capture api`).
    pub host: Option<HostTime>,
    /// Where the host's stacks were during the stretch, for the launching thread of its
    /// longest piece's place (absent without host samples in it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_frames: Option<crate::host::GapHost>,
    /// The stretch cut where phases begin and end, consecutive parts of one place merged, in
    /// time order, end to end: one piece for a stretch inside one place.
    pub pieces: Vec<GapPiece>,
}

/// The part of an idle stretch in one place.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GapPiece {
    pub start_ns: i64,
    pub end_ns: i64,
    pub duration_ns: Nanos,
    /// As [`GapGroup::place`] spells it.
    pub place: Arc<str>,
    pub no_kernel_ns: Option<Nanos>,
    pub kernel_resident_ns: Option<Nanos>,
    pub host: Option<HostTime>,
    /// Where the host's stacks were during the piece (absent without host samples in it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_frames: Option<crate::host::GapHost>,
}

/// Drops of one device.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DeviceDrops {
    pub device: DeviceId,
    pub count: u64,
    pub dropped_ns: Nanos,
    pub lost_samples: u64,
    /// Drops and their time, by reason.
    pub by_reason: BTreeMap<String, ReasonTotals>,
}

/// Drops of one reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReasonTotals {
    pub count: u64,
    pub dropped_ns: Nanos,
}

/// Which NVTX domains made the phases, and which were left out.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PhaseDomains {
    /// The selection, as `--phases` spells it.
    pub phases: String,
    /// Recorded domains whose ranges can be phases (name and depth terms may narrow them),
    /// with their range counts.
    pub used: Vec<DomainCount>,
    /// Recorded domains whose ranges are not phases.
    pub left_out: Vec<DomainCount>,
    /// The selection that adds the left-out domains (`None` when none was left out).
    pub include_left_out: Option<String>,
}

impl PhaseDomains {
    pub(super) fn of(sel: &PhaseSelect, recorded: Vec<DomainCount>) -> PhaseDomains {
        let (used, left_out): (Vec<DomainCount>, Vec<DomainCount>) = recorded
            .into_iter()
            .partition(|d| sel.keeps_domain(&d.domain));
        let include_left_out = (!left_out.is_empty()).then(|| {
            sel.with_domains(left_out.iter().map(|d| d.domain.as_str()))
                .to_string()
        });
        PhaseDomains {
            phases: sel.to_string(),
            used,
            left_out,
            include_left_out,
        }
    }
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub trace: String,
    pub gpus: Vec<GpuInfo>,
    pub metrics: Vec<String>,
    pub interval_ns: Nanos,
    /// First sample start and last sample end.
    pub start_ns: i64,
    pub end_ns: i64,
    /// `None` when the recording has no GPU counters (NVML only).
    pub activity: Option<Activity>,
    pub idle_threshold: Option<f64>,
    pub min_gap_ns: Nanos,
    /// The trace has NVTX ranges (of any domain).
    pub nvtx_captured: bool,
    /// The NVTX domains of the trace: which made the phases.
    pub phase_domains: PhaseDomains,
    /// Problems the recorder wrote in the trace's `capture` table, one line per kind.
    pub capture: Vec<CaptureLine>,
    /// What each CUDA graph runs (`graph_contents` rows), for its `graph ID` kernel rows.
    pub graphs: Vec<GraphContents>,
    pub kernels_captured: bool,
    pub nvml_captured: bool,
    /// Every device over the whole recording.
    pub whole_run: PhaseReport,
    /// Phases in tree order (parents before children).
    pub phases: Vec<PhaseReport>,
    /// Gap groups, largest total first.
    pub gap_groups: Vec<GapGroup>,
    /// How many idle stretches the recording has (each whole, however many places it crosses).
    pub gap_count: u64,
    /// The longest stretches, longest first: every one, or as many as
    /// [`ReportOptions::gap_rows`] asks for.
    pub gaps: Vec<GapRow>,
    pub drops: Vec<DeviceDrops>,
    /// Which kernels took each phase's GPU time, per device: the whole run, the phases in tree
    /// order, then the time outside every phase ([`crate::kernels`]); empty without kernels.
    pub kernels: Vec<KernelTable>,
    pub notes: Vec<Note>,
    pub warnings: Vec<String>,
    /// Where the host was during the gaps and the phases (`--host-stacks`); absent for a
    /// recording without host samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostReport>,
    /// What capture itself added to each phase's host time ([`crate::capcost`]); absent for a
    /// recording without captured events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_cost: Option<crate::capcost::CaptureCost>,
    /// Why the recording has no host stacks, as the recorder wrote it
    /// (`manifest.extra.host_stacks` = `off: <why>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_stacks_off: Option<String>,
}
