//! `cufall report`: per-phase statistics per device, idle gaps with their places and causes,
//! drops, and a verdict per phase. [`build_report`] computes a [`Report`] (serialisable, for
//! `--json` and for `diff`); [`crate::render`] prints it as text.

use crate::capcost;
use crate::capture::{self, CaptureLine, GraphContents};
use crate::error::{AnalysisError, Result};
use crate::gaps::{self, Gap, GapPart, HostCoverage, HostTime, KernelCoverage};
use crate::host::{self, HostFold, HostIndexBuilder, HostReport, HostSide, Launchers};
use crate::kernels::{KernelFold, KernelTable};
use crate::phases::{self, Phases, Place, SegPhases, slot_paths, slots_of};
use crate::samples::{self, Activity, FullScaleSource, SegAgg};
use crate::select::{self, DomainCount, PhaseSelect};
use cufall_trace::Trace;
use cufall_trace::model::{DeviceId, DropRecord, KernelRecord, NvmlRow, NvtxRange};
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
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
    pub min_gap_ns: Option<i64>,
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
    pub total_ns: i64,
    /// `None` where kernels were not captured.
    pub no_kernel_ns: Option<i64>,
    pub kernel_resident_ns: Option<i64>,
    /// Gap time the host spent in CUDA calls; `None` where they were not captured.
    pub host: Option<HostTime>,
}

impl GapTotals {
    /// Adds the time of part or piece `p`; `new_gap`: it starts a gap of this class (else it
    /// continues the one the previous part counted).
    fn add(&mut self, p: &GapPart, new_gap: bool) {
        self.count += u64::from(new_gap);
        self.total_ns = self.total_ns.saturating_add(p.duration_ns());
        if let Some(k) = p.kernel_resident_ns {
            let resident = self.kernel_resident_ns.get_or_insert(0);
            *resident = resident.saturating_add(k);
            let none = self.no_kernel_ns.get_or_insert(0);
            *none = none.saturating_add(p.duration_ns().saturating_sub(k));
        }
        if let Some(h) = &p.host {
            self.host.get_or_insert_with(HostTime::default).add(h);
        }
    }

    fn merge(&mut self, o: &GapTotals) {
        self.count += o.count;
        self.total_ns = self.total_ns.saturating_add(o.total_ns);
        if let Some(h) = &o.host {
            self.host.get_or_insert_with(HostTime::default).add(h);
        }
        if let Some(k) = o.kernel_resident_ns {
            let resident = self.kernel_resident_ns.get_or_insert(0);
            *resident = resident.saturating_add(k);
        }
        if let Some(k) = o.no_kernel_ns {
            let none = self.no_kernel_ns.get_or_insert(0);
            *none = none.saturating_add(k);
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
    pub sampled_ns: i64,
    /// Sampled time with the activity value under the idle threshold.
    pub idle_ns: i64,
    /// Time of samples lacking a value the idle test needs (null in the trace): neither idle
    /// nor busy, not in `sampled_ns`.
    pub unknown_ns: i64,
    /// `idle_ns / sampled_ns`; `None` without samples whose idle test could be made.
    pub idle_fraction: Option<f64>,
    /// Time of the phase without samples (drops): never counted as idle.
    pub dropped_ns: i64,
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
    pub total_ns: i64,
    pub p50_ns: i64,
    pub p99_ns: i64,
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
    ShortStalls { idle_fraction: f64, min_gap_ns: i64 },
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
    Drops { count: u64, dropped_ns: i64 },
    /// The phases of several processes overlap in time (`overlap_ns` in all): there a gap
    /// piece has one place (the deepest, latest-starting range), the others' left out; it still
    /// counts in the gap time of every phase covering it.
    OverlappingProcesses {
        processes: Vec<u32>,
        overlap_ns: i64,
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
        unknown_ns: i64,
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
    pub mean_ns: i64,
    pub max_ns: i64,
    pub devices: Vec<DeviceId>,
}

/// One idle stretch, whole, with the pieces it is cut into at the phases' edges.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GapRow {
    pub device: DeviceId,
    pub start_ns: i64,
    pub end_ns: i64,
    /// Start relative to the first sample of the trace.
    pub offset_ns: i64,
    pub duration_ns: i64,
    /// The places it crosses, in time order, as [`GapGroup::place`] spells them, joined by
    /// ` + ` (one place: shared with the other gaps of that place).
    pub place: Arc<str>,
    pub no_kernel_ns: Option<i64>,
    pub kernel_resident_ns: Option<i64>,
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
    pub duration_ns: i64,
    /// As [`GapGroup::place`] spells it.
    pub place: Arc<str>,
    pub no_kernel_ns: Option<i64>,
    pub kernel_resident_ns: Option<i64>,
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
    pub dropped_ns: i64,
    pub lost_samples: u64,
    /// Drops and their time, by reason.
    pub by_reason: BTreeMap<String, ReasonTotals>,
}

/// Drops of one reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReasonTotals {
    pub count: u64,
    pub dropped_ns: i64,
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
    fn of(sel: &PhaseSelect, recorded: Vec<DomainCount>) -> PhaseDomains {
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
    pub interval_ns: i64,
    /// First sample start and last sample end.
    pub start_ns: i64,
    pub end_ns: i64,
    /// `None` when the recording has no GPU counters (NVML only).
    pub activity: Option<Activity>,
    pub idle_threshold: Option<f64>,
    pub min_gap_ns: i64,
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

/// Chooses the activity value and threshold for a trace; `None` for a recording without GPU
/// counters (NVML only), where idle time cannot be measured.
pub fn resolve_activity(trace: &Trace, opts: &ReportOptions) -> Result<Option<Activity>> {
    let m = trace.manifest();
    let names = m.metric_names();
    if names.is_empty() {
        if let Some(name) = &opts.metric {
            trace.check_metrics(&[name.as_str()])?;
        }
        return Ok(None);
    }
    if !(opts.idle_below.is_finite() && opts.idle_below > 0.0) {
        return Err(AnalysisError::IdleBelowOutOfRange(opts.idle_below));
    }
    let heatmap = match &opts.metric {
        Some(name) => {
            trace.check_metrics(&[name.as_str()])?;
            m.heatmaps.iter().find(|h| &h.metric == name)
        }
        None => m
            .heatmaps
            .iter()
            .find(|h| names.contains(&h.metric.as_str())),
    };
    let metric = match (&opts.metric, heatmap) {
        (Some(name), _) => name.clone(),
        (None, Some(h)) => h.metric.clone(),
        (None, None) => names[0].to_string(),
    };
    let denominator = heatmap
        .and_then(|h| h.denominator.clone())
        .filter(|d| names.contains(&d.as_str()));
    let unit = m
        .sampling
        .iter()
        .flat_map(|s| s.metrics.iter())
        .find(|x| x.name == metric)
        .map(|x| x.unit.clone())
        .unwrap_or_default();
    let mut activity = Activity {
        metric,
        denominator,
        full_scale: 1.0,
        full_scale_source: FullScaleSource::default(),
        idle_below: opts.idle_below,
        also_low: Vec::new(),
    };
    let (full_scale, source) = if let Some(f) = opts.full_scale {
        (f, FullScaleSource::Given)
    } else if let Some(f) = crate::manifest::usable_full_scale(heatmap.and_then(|h| h.full_scale)) {
        (f, FullScaleSource::Heatmap)
    } else if activity.denominator.is_some() {
        (1.0, FullScaleSource::Ratio)
    } else if unit == "%" || activity.metric.contains("pct") {
        (100.0, FullScaleSource::Percent)
    } else {
        let peak = samples::metric_peak(trace, &activity)?;
        (peak, FullScaleSource::PeakInTrace)
    };
    if let Some(list) = &opts.also_low {
        let names: Vec<&str> = list.iter().map(String::as_str).collect();
        trace.check_metrics(&names)?;
        activity.also_low = list.clone();
    } else if opts.metric.is_none() {
        // Without a chosen metric, idle means the GPU did nothing: every recorded percentage
        // counter low, not only the heatmap's (a memory-bound step has idle tensor pipes).
        let chosen = [Some(&activity.metric), activity.denominator.as_ref()];
        activity.also_low = m
            .sampling
            .iter()
            .flat_map(|s| s.metrics.iter())
            .filter(|x| x.unit == "%" || x.name.contains("pct_of_peak"))
            .map(|x| x.name.clone())
            .filter(|n| !chosen.contains(&Some(n)))
            .collect();
    }
    if !(full_scale.is_finite() && full_scale > 0.0) {
        activity.full_scale = 1.0;
        activity.full_scale_source = FullScaleSource::NeverAboveZero;
    } else {
        activity.full_scale = full_scale;
        activity.full_scale_source = source;
    }
    Ok(Some(activity))
}

struct NvmlAgg {
    power: (f64, u64),
    sm: (f64, u64),
    mem: (f64, u64),
    util: (f64, u64),
}

impl NvmlAgg {
    fn new() -> Self {
        NvmlAgg {
            power: (0.0, 0),
            sm: (0.0, 0),
            mem: (0.0, 0),
            util: (0.0, 0),
        }
    }
    fn push(&mut self, r: &NvmlRow) {
        let add = |slot: &mut (f64, u64), v: Option<f64>| {
            if let Some(v) = v {
                slot.0 += v;
                slot.1 += 1;
            }
        };
        add(&mut self.power, r.power_w.map(f64::from));
        add(&mut self.sm, r.sm_clock_mhz.map(f64::from));
        add(&mut self.mem, r.mem_clock_mhz.map(f64::from));
        add(&mut self.util, r.gpu_util_pct.map(f64::from));
    }
}

fn mean(slot: (f64, u64)) -> Option<f64> {
    (slot.1 > 0).then(|| slot.0 / slot.1 as f64)
}

/// Per device, the inputs of the statistics of each phase and of the whole run (the last slot):
/// sample totals, NVML readings and dropped time, folded in segment by segment as they are read,
/// so that memory follows devices × phases, not the number of segments.
struct Cells {
    index: SegPhases,
    /// Phases, plus one for the whole run.
    slots: usize,
    samples: BTreeMap<DeviceId, Vec<SegAgg>>,
    nvml: BTreeMap<DeviceId, Vec<NvmlAgg>>,
    dropped: BTreeMap<DeviceId, Vec<i64>>,
}

impl Cells {
    fn new(phases: &Phases) -> Cells {
        Cells {
            index: SegPhases::build(phases),
            slots: phases.phases.len() + 1,
            samples: BTreeMap::new(),
            nvml: BTreeMap::new(),
            dropped: BTreeMap::new(),
        }
    }

    /// The slot of the whole run.
    fn whole_run(&self) -> usize {
        self.slots - 1
    }

    fn add_samples(&mut self, d: DeviceId, s: usize, agg: &SegAgg) {
        let n = self.slots;
        let cells = self
            .samples
            .entry(d)
            .or_insert_with(|| vec![SegAgg::default(); n]);
        for slot in slots_of(&self.index, s, n) {
            cells[slot].add(agg);
        }
    }

    /// Places NVML readings in the phases of their segments.
    fn add_nvml(&mut self, phases: &Phases, nvml: &[NvmlRow]) {
        let n = self.slots;
        for r in nvml {
            let s = phases.segment_of(r.t_ns);
            let cells = self
                .nvml
                .entry(r.device)
                .or_insert_with(|| (0..n).map(|_| NvmlAgg::new()).collect());
            for slot in slots_of(&self.index, s, n) {
                cells[slot].push(r);
            }
        }
    }

    /// Places dropped time in the phases of the segments it spans.
    fn add_drops(&mut self, phases: &Phases, drops: &[DropRecord]) {
        let n = self.slots;
        for dr in drops {
            let lo = phases.segment_of(dr.start_ns);
            let hi = phases.segment_of((dr.end_ns - 1).max(dr.start_ns));
            let cells = self.dropped.entry(dr.device).or_insert_with(|| vec![0; n]);
            for s in lo..=hi {
                let (a, b) = phases.segment_bounds(s, dr.start_ns, dr.end_ns);
                let part = (b.min(dr.end_ns) - a.max(dr.start_ns)).max(0);
                for slot in slots_of(&self.index, s, n) {
                    cells[slot] += part;
                }
            }
        }
    }

    /// The whole run's totals of device `d`.
    fn run_of(&self, d: &DeviceId) -> Option<&SegAgg> {
        self.samples.get(d).map(|c| &c[self.slots - 1])
    }
}

/// Computes the report of the trace at `trace`.
pub fn build_report(trace: &Trace, opts: &ReportOptions) -> Result<Report> {
    build_report_with(trace, opts, &mut |_| {}, &mut |_, _| {})
}

/// The trace's NVTX ranges, and those [`ReportOptions::phases`] makes phases; with
/// `check_domains`, a domain it names that the trace does not record is an error.
pub(crate) fn chosen_ranges(
    trace: &Trace,
    sel: &PhaseSelect,
    check_domains: bool,
) -> Result<(Vec<NvtxRange>, Vec<NvtxRange>, PhaseDomains)> {
    let nvtx = trace.nvtx()?;
    let recorded = select::domain_counts(&nvtx);
    if check_domains {
        sel.check_domains(&recorded)
            .map_err(AnalysisError::UnknownDomains)?;
    }
    let chosen = sel.apply(&nvtx);
    Ok((nvtx, chosen, PhaseDomains::of(sel, recorded)))
}

/// [`build_report`], handing every gap to `each_gap` as it is found (by device, then time),
/// whatever [`ReportOptions::gap_rows`] keeps in the report: a viewer that draws every gap keeps
/// them in a form of its own, and no list of every gap is held here. `each_window(done, total)`
/// is called as each time window of the samples table has been scanned (the longest step), with
/// the window's decoded columns already freed.
pub fn build_report_with(
    trace: &Trace,
    opts: &ReportOptions,
    each_gap: &mut dyn FnMut(&GapRow),
    each_window: &mut dyn FnMut(usize, usize),
) -> Result<Report> {
    build_report_checked(trace, opts, true, each_gap, each_window)
}

/// The shortest idle stretch that is a gap: `--min-gap`, or a few sampling intervals.
fn min_gap_ns(opts: &ReportOptions, interval_ns: i64) -> Result<i64> {
    if let Some(g) = opts.min_gap_ns.filter(|g| *g <= 0) {
        return Err(AnalysisError::MinGapNotPositive(g));
    }
    Ok(opts
        .min_gap_ns
        .unwrap_or(DEFAULT_GAP_INTERVALS.saturating_mul(interval_ns))
        .max(1))
}

/// Per slot, how many kernels each process launched there.
type KernelPids = Vec<BTreeMap<u32, u64>>;

/// Which kernels ran in each phase (when `by_phase`), folded in as the kernels are read for
/// the coverage of the gaps; and per slot of `cells`, how many kernels each process launched
/// there (for the launching thread where no launch call or range names one).
fn fold_kernels<'a>(
    trace: &Trace,
    phases: &'a Phases,
    cells: &Cells,
    by_phase: bool,
    nvtx: &[NvtxRange],
) -> Result<(
    Option<KernelFold<'a>>,
    Option<KernelCoverage>,
    KernelPids,
    capcost::Counts,
)> {
    let mut kernel_fold = by_phase.then(|| KernelFold::new(phases));
    let mut pids: KernelPids = vec![BTreeMap::new(); cells.slots];
    // The events capture's cost is counted for, per slot (`crate::capcost`).
    let slots = |t| slots_of(&cells.index, phases.segment_of(t), cells.slots);
    let mut events = capcost::Counts::new(cells.slots);
    for r in nvtx {
        events.add_range(r, slots);
    }
    let coverage = kernel_coverage(trace, &mut |ks| {
        for k in ks.iter() {
            events.add_activity(k, slots);
        }
        for k in ks.iter().filter(|k| gaps::keeps_gpu_busy(k.kind)) {
            for slot in slots_of(&cells.index, phases.segment_of(k.start_ns), cells.slots) {
                *pids[slot].entry(k.pid).or_default() += 1;
            }
        }
        if let Some(fold) = &mut kernel_fold {
            fold.add_all(ks);
        }
    })?;
    Ok((kernel_fold, coverage, pids, events))
}

/// The reader's warnings (rows that cannot be true among them, counted as they were read) and
/// the manifest's absurd values.
fn report_warnings(trace: &Trace, manifest: Vec<String>) -> Vec<String> {
    let mut warnings = trace.warnings();
    warnings.extend(manifest);
    warnings
}

/// NVML readings a segment at a time, placed in their phases as they are read; the span they
/// cover.
fn add_nvml(trace: &Trace, phases: &Phases, cells: &mut Cells) -> Result<Option<(i64, i64)>> {
    let mut nvml_span: Option<(i64, i64)> = None;
    trace.nvml_by_segment(|rows| {
        for r in &rows {
            let (lo, hi) = nvml_span.get_or_insert((r.t_ns, r.t_ns));
            (*lo, *hi) = ((*lo).min(r.t_ns), (*hi).max(r.t_ns));
        }
        cells.add_nvml(phases, &rows);
    })?;
    Ok(nvml_span)
}

/// The capture table's problems and graph contents. It only adds to the report: one that
/// cannot be read is a warning.
fn capture_tables(
    trace: &Trace,
    warnings: &mut Vec<String>,
) -> (
    Vec<capture::CaptureLine>,
    Vec<capture::GraphContents>,
    Vec<capcost::KindCost>,
) {
    match trace.capture_events() {
        Ok(events) => (
            capture::capture_lines(&events),
            capture::graph_contents(&events),
            capcost::kind_costs(&events),
        ),
        Err(e) => {
            warnings.push(format!("the capture table could not be read: {e}"));
            (Vec::new(), Vec::new(), Vec::new())
        }
    }
}

/// Each GPU's name and chip from the manifest (empty for one it leaves out).
fn gpu_infos(m: &cufall_trace::model::Manifest, devices: &[DeviceId]) -> Vec<GpuInfo> {
    devices
        .iter()
        .map(|d| {
            let info = m.devices.iter().find(|x| x.id == *d);
            GpuInfo {
                device: *d,
                name: info.map(|i| i.name.clone()).unwrap_or_default(),
                chip: info.map(|i| i.chip.clone()).unwrap_or_default(),
            }
        })
        .collect()
}

/// [`build_report_with`]; without `check_domains`, domains named in the phase selection that
/// the trace does not record choose nothing (`diff` checks them against both traces).
pub(crate) fn build_report_checked(
    trace: &Trace,
    opts: &ReportOptions,
    check_domains: bool,
    each_gap: &mut dyn FnMut(&GapRow),
    each_window: &mut dyn FnMut(usize, usize),
) -> Result<Report> {
    // A damaged segment of any table is refused as every command refuses it
    // (`docs/trace-format.md`, Crash tolerance), before the long scan.
    trace.check()?;
    let m = trace.manifest();
    let activity = resolve_activity(trace, opts)?;
    let metrics: Vec<String> = m.metric_names().into_iter().map(str::to_string).collect();
    let checked = crate::manifest::check(trace)?;
    let interval_ns = checked.interval_ns;
    let min_gap_ns = min_gap_ns(opts, interval_ns)?;
    // Samples closer than half an interval are contiguous; further apart, a hole.
    let hole_ns = (interval_ns / 2).max(1);

    let (nvtx, chosen, phase_domains) = chosen_ranges(trace, &opts.phases, check_domains)?;
    let phases = Phases::build(&chosen);
    let mut cells = Cells::new(&phases);
    let api = trace.api_calls()?;
    let mut host_side = host_side(trace, &phases, &cells, &api, &chosen)?;
    let overlap = phases::cross_process_overlap(&chosen);
    drop(chosen);
    let fragments = match &activity {
        Some(activity) => scan(
            trace,
            &samples::ScanSpec {
                phases: &phases,
                activity,
                metrics: &metrics,
                min_gap_ns,
                hole_ns,
                samples_per_window: opts.window_samples,
            },
            &mut cells,
            each_window,
        )?,
        None => Vec::new(),
    };
    let nvml_span = add_nvml(trace, &phases, &mut cells)?;
    let drops = trace.drops()?;
    cells.add_drops(&phases, &drops);
    let (kernel_fold, coverage, kernel_pids, events) =
        fold_kernels(trace, &phases, &cells, opts.kernel_rows != Some(0), &nvtx)?;
    let host = HostCoverage::build(&api);
    let merged = gaps::merge_fragments(fragments, &drops, min_gap_ns, hole_ns);

    let devices = devices_of(m, &cells);

    let run @ (start_ns, end_ns) = extent(&devices, &cells, nvml_span, &nvtx, m.created_unix_ns);
    let kernels_captured = coverage.is_some();
    let (index, pids) = (&cells.index, &kernel_pids);
    // Samples outside the recording were left out by the trace reader (`cufall_trace::plausible`).
    host_side
        .iter_mut()
        .for_each(|h| h.prepare(&phases, index, pids, &api));
    let mut fold = GapFold::new(&phases, &cells.index, cells.slots, start_ns, opts.gap_rows);
    fold.host = host_side.as_ref().map(|h| h.fold(cells.slots));
    gaps::gaps_of(merged, &phases, coverage.as_ref(), host.as_ref())
        .for_each(|g| fold.add(&g, each_gap));
    let (gap_count, folded) = (fold.count, fold.finish());
    let ctx = Ctx {
        devices: &devices,
        cells: &cells,
        gaps: &folded.totals,
        metrics: &metrics,
        activity: activity.as_ref(),
        kernels_captured,
        min_gap_ns,
    };
    let whole_run = ctx.whole_run_report(end_ns - start_ns);
    let phase_reports = ctx.phase_reports(&phases);
    let times_ns = slot_times(&phase_reports, &whole_run);
    let host = host_side.map(|h| h.report(&phases, &times_ns, folded.host, run));
    let drop_reports = drop_summary(&drops);
    // The capture table only adds to the report: one that cannot be read is a warning.
    let mut warnings = report_warnings(trace, checked.warnings);
    let (capture, graphs, costs) = capture_tables(trace, &mut warnings);
    let capture_cost = capture_cost(costs, &events, &phase_reports, &whole_run);
    let chosen_by = (!nvtx.is_empty()).then_some(&opts.phases);
    let notes = ctx.notes(&phases, chosen_by, m, &drops, overlap);
    Ok(Report {
        trace: trace.path().display().to_string(),
        gpus: gpu_infos(m, &devices),
        metrics,
        interval_ns,
        start_ns,
        end_ns,
        idle_threshold: activity.as_ref().map(Activity::threshold),
        activity,
        min_gap_ns,
        nvtx_captured: !nvtx.is_empty(),
        phase_domains,
        capture,
        graphs,
        kernels_captured,
        nvml_captured: nvml_span.is_some(),
        whole_run,
        phases: phase_reports,
        gap_groups: folded.groups,
        gap_count,
        gaps: folded.rows,
        drops: drop_reports,
        kernels: kernel_fold
            .map(|f| f.finish(opts.kernel_rows))
            .unwrap_or_default(),
        notes,
        warnings,
        host,
        capture_cost,
        host_stacks_off: host::stacks_off(m),
    })
}

/// Every slot's whole time: the phases' in tree order, then the whole run's.
fn slot_times(phases: &[PhaseReport], whole_run: &PhaseReport) -> Vec<i64> {
    phases
        .iter()
        .chain([whole_run])
        .map(|p| p.total_ns)
        .collect()
}

/// A phase's steps, for what capture cost in it.
fn steps(p: &PhaseReport) -> capcost::PhaseSteps<'_> {
    capcost::PhaseSteps {
        path: &p.path,
        count: p.count,
        total_ns: p.total_ns,
    }
}

/// What capture added in each phase and the whole run ([`capcost::build`]).
fn capture_cost(
    costs: Vec<capcost::KindCost>,
    counts: &capcost::Counts,
    phases: &[PhaseReport],
    whole_run: &PhaseReport,
) -> Option<capcost::CaptureCost> {
    let slots: Vec<_> = phases.iter().map(steps).collect();
    capcost::build(costs, counts, &slots, &steps(whole_run))
}

/// The note on what bad input left out: phases of several processes that overlap.
fn overlap_note(overlap: Option<(i64, Vec<u32>)>) -> Option<Note> {
    overlap.map(|(overlap_ns, processes)| Note::OverlappingProcesses {
        processes,
        overlap_ns,
    })
}

/// The one pass over the samples: their totals into `cells` per device and segment; the idle
/// fragments.
fn scan(
    trace: &Trace,
    spec: &samples::ScanSpec,
    cells: &mut Cells,
    each_window: &mut dyn FnMut(usize, usize),
) -> Result<Vec<samples::Fragment>> {
    samples::scan_samples_into(trace, spec, each_window, &mut |(d, s), agg| {
        cells.add_samples(d, s as usize, agg);
    })
}

/// Every GPU the manifest lists or the samples hold.
fn devices_of(m: &cufall_trace::model::Manifest, cells: &Cells) -> Vec<DeviceId> {
    let mut devices: Vec<DeviceId> = m.devices.iter().map(|d| d.id).collect();
    devices.extend(cells.samples.keys().copied());
    devices.sort_unstable();
    devices.dedup();
    devices
}

/// The host samples and the launching threads, where the trace has host samples.
fn host_side(
    trace: &Trace,
    phases: &Phases,
    cells: &Cells,
    api: &[cufall_trace::model::ApiCall],
    chosen: &[NvtxRange],
) -> Result<Option<HostSide>> {
    // The samples a segment at a time: only their compact form is kept (see
    // `HostIndexBuilder`); the stacks table is read whole, it is interned and small.
    let mut b = HostIndexBuilder::new(&trace.stacks()?);
    trace.host_samples_by_segment(|rows| b.add(&rows))?;
    let ix = b.finish(host::asked_interval_ns(trace.manifest()));
    Ok(ix.map(|ix| HostSide {
        ix,
        launchers: Launchers::build(phases, &cells.index, cells.slots, api, chosen),
    }))
}

/// The kernels' busy intervals, read a segment at a time (only the intervals are kept); `None`
/// when the trace has no kernel records (kernels were not captured). Each segment's records are
/// then handed to `each`.
fn kernel_coverage(
    trace: &Trace,
    each: &mut dyn FnMut(Vec<KernelRecord>),
) -> Result<Option<KernelCoverage>> {
    let mut builder = gaps::CoverageBuilder::default();
    let mut any_kernels = false;
    trace.kernels_by_segment(|ks| {
        any_kernels |= !ks.is_empty();
        for k in ks.iter().filter(|k| gaps::keeps_gpu_busy(k.kind)) {
            builder.add(k.device, k.start_ns, k.end_ns);
        }
        each(ks);
    })?;
    Ok(any_kernels.then(|| builder.finish()))
}

/// The sampled extent (first sample start, last sample end); without samples, that of the NVML
/// readings and NVTX ranges; without those, the recording's creation time.
fn extent(
    devices: &[DeviceId],
    cells: &Cells,
    nvml_span: Option<(i64, i64)>,
    nvtx: &[NvtxRange],
    created_ns: i64,
) -> (i64, i64) {
    let runs: Vec<&SegAgg> = devices
        .iter()
        .filter_map(|d| cells.run_of(d))
        .filter(|a| a.samples > 0)
        .collect();
    let start_ns = runs
        .iter()
        .map(|a| a.first_start_ns)
        .min()
        .or_else(|| {
            nvml_span
                .map(|s| s.0)
                .into_iter()
                .chain(nvtx.iter().map(|r| r.start_ns))
                .min()
        })
        .unwrap_or(created_ns);
    let end_ns = runs
        .iter()
        .map(|a| a.last_end_ns)
        .max()
        .or_else(|| {
            nvml_span
                .map(|s| s.1)
                .into_iter()
                .chain(nvtx.iter().map(|r| r.end_ns))
                .max()
        })
        .unwrap_or(start_ns);
    (start_ns, end_ns)
}

/// The order of [`Report::gaps`]: longest first, then by start and device (a total order: a
/// device's gaps never share a start).
fn longest_first(a: &GapRow, b: &GapRow) -> Ordering {
    b.duration_ns
        .cmp(&a.duration_ns)
        .then(a.start_ns.cmp(&b.start_ns))
        .then(a.device.cmp(&b.device))
}

/// A row in a heap of the longest gaps: the greatest is the one to give up first.
struct Longest(GapRow);

impl PartialEq for Longest {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Longest {}
impl PartialOrd for Longest {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Longest {
    fn cmp(&self, o: &Self) -> Ordering {
        longest_first(&self.0, &o.0)
    }
}

/// The rows a report lists: every gap, or the `n` longest.
enum KeptRows {
    Every(Vec<GapRow>),
    Longest(usize, BinaryHeap<Longest>),
}

impl KeptRows {
    fn keep(&mut self, row: GapRow) {
        match self {
            KeptRows::Every(v) => v.push(row),
            KeptRows::Longest(n, heap) => {
                if heap.len() < *n {
                    heap.push(Longest(row));
                } else if heap
                    .peek()
                    .is_some_and(|worst| longest_first(&row, &worst.0) == Ordering::Less)
                {
                    heap.pop();
                    heap.push(Longest(row));
                }
            }
        }
    }

    fn into_sorted(self) -> Vec<GapRow> {
        let mut rows = match self {
            KeptRows::Every(v) => v,
            KeptRows::Longest(_, heap) => heap.into_iter().map(|l| l.0).collect(),
        };
        rows.sort_unstable_by(longest_first);
        rows
    }
}

/// The gaps of one place, as they are folded in.
struct PlaceFold {
    label: Arc<str>,
    totals: GapTotals,
    max_ns: i64,
    devices: Vec<DeviceId>,
}

/// What [`GapFold`] ends with.
struct FoldedGaps {
    /// Per device, the totals of each slot (phases, then the whole run).
    totals: BTreeMap<DeviceId, Vec<GapTotals>>,
    /// Largest total first.
    groups: Vec<GapGroup>,
    rows: Vec<GapRow>,
    /// The host's frames per gap class, where the trace has host samples.
    host: Option<Vec<host::HostClass>>,
}

/// The gaps folded in one at a time, so that no list of every gap is held: totals per device and
/// slot (phases, then the whole run, as in [`Cells`]), totals per place, and the listed rows.
struct GapFold<'a> {
    phases: &'a Phases,
    index: &'a SegPhases,
    slots: usize,
    start_ns: i64,
    count: u64,
    totals: BTreeMap<DeviceId, Vec<GapTotals>>,
    places: BTreeMap<Place, PlaceFold>,
    rows: KeptRows,
    /// The host samples of the gaps, where the trace has them.
    host: Option<HostFold<'a>>,
}

impl<'a> GapFold<'a> {
    fn new(
        phases: &'a Phases,
        index: &'a SegPhases,
        slots: usize,
        start_ns: i64,
        keep: Option<usize>,
    ) -> GapFold<'a> {
        GapFold {
            phases,
            index,
            slots,
            start_ns,
            count: 0,
            totals: BTreeMap::new(),
            places: BTreeMap::new(),
            rows: match keep {
                None => KeptRows::Every(Vec::new()),
                Some(n) => KeptRows::Longest(n, BinaryHeap::with_capacity(n.min(1 << 16) + 1)),
            },
            host: None,
        }
    }

    /// Counts `g`: each part in the phases covering it and in the whole run, each piece in its
    /// place, and the stretch among the rows.
    fn add(&mut self, g: &Gap, each: &mut dyn FnMut(&GapRow)) {
        self.count += 1;
        let (slots, index) = (self.slots, self.index);
        let cells = self
            .totals
            .entry(g.device)
            .or_insert_with(|| vec![GapTotals::default(); slots]);
        // A slot's gap goes on while the parts stay in it: counted once, at its first part.
        let mut before: Vec<usize> = Vec::new();
        for part in &g.parts {
            let now: Vec<usize> = slots_of(index, part.segment, slots).collect();
            for slot in &now {
                let new_gap = !before.contains(slot);
                cells[*slot].add(part, new_gap);
                if let Some(h) = &mut self.host {
                    h.add_slot(*slot, part, new_gap);
                }
            }
            before = now;
        }
        let phases = self.phases;
        let mut pieces = Vec::with_capacity(1);
        for piece in g.pieces() {
            let place = self
                .places
                .entry(piece.place.clone())
                .or_insert_with(|| PlaceFold {
                    label: phases.label(&piece.place).into(),
                    totals: GapTotals::default(),
                    max_ns: 0,
                    devices: Vec::new(),
                });
            place.totals.add(&piece, true);
            place.max_ns = place.max_ns.max(piece.duration_ns());
            if !place.devices.contains(&g.device) {
                place.devices.push(g.device);
            }
            if let Some(h) = &mut self.host {
                h.add_place(&piece, &place.label);
            }
            let host_frames = self
                .host
                .as_ref()
                .and_then(|h| h.gap_host(&piece.place, piece.start_ns, piece.end_ns));
            pieces.push(GapPiece {
                start_ns: piece.start_ns,
                end_ns: piece.end_ns,
                duration_ns: piece.duration_ns(),
                place: place.label.clone(),
                no_kernel_ns: piece.no_kernel_ns(),
                kernel_resident_ns: piece.kernel_resident_ns,
                host: piece.host,
                host_frames,
            });
        }
        let place: Arc<str> = match pieces.as_slice() {
            [one] => one.place.clone(),
            many => many
                .iter()
                .map(|p| &*p.place)
                .collect::<Vec<&str>>()
                .join(" + ")
                .into(),
        };
        // The stretch's host: the launching thread of the place where most of it lies.
        let longest = g
            .pieces()
            .into_iter()
            .max_by_key(|p| p.duration_ns())
            .map(|p| p.place);
        let host_frames = self
            .host
            .as_ref()
            .and_then(|h| longest.and_then(|p| h.gap_host(&p, g.start_ns, g.end_ns)));
        let kernel_resident_ns = g.kernel_resident_ns();
        let row = GapRow {
            device: g.device,
            start_ns: g.start_ns,
            end_ns: g.end_ns,
            offset_ns: g.start_ns.saturating_sub(self.start_ns),
            duration_ns: g.duration_ns(),
            place,
            no_kernel_ns: kernel_resident_ns.map(|k| g.duration_ns().saturating_sub(k)),
            kernel_resident_ns,
            host: g.host(),
            host_frames,
            pieces,
        };
        each(&row);
        self.rows.keep(row);
    }

    fn finish(self) -> FoldedGaps {
        let phases = self.phases;
        let path = |p: Option<usize>| p.map(|p| phases.phases[p].path.clone());
        let mut groups: Vec<GapGroup> = self
            .places
            .into_iter()
            .map(|(place, f)| {
                let mut devices = f.devices;
                devices.sort_unstable();
                let (kind, before, after) = match place {
                    Place::WholeRun => (PlaceKind::WholeRun, None, None),
                    Place::In(_) => (PlaceKind::In, None, None),
                    Place::Between(a, b) => (PlaceKind::Between, path(a), path(b)),
                };
                GapGroup {
                    place: f.label.to_string(),
                    kind,
                    before,
                    after,
                    mean_ns: f.totals.total_ns / f.totals.count.max(1) as i64,
                    max_ns: f.max_ns,
                    totals: f.totals,
                    devices,
                }
            })
            .collect();
        groups.sort_by(|a, b| {
            b.totals
                .total_ns
                .cmp(&a.totals.total_ns)
                .then(a.place.cmp(&b.place))
        });
        FoldedGaps {
            totals: self.totals,
            groups,
            rows: self.rows.into_sorted(),
            host: self.host.map(|h| h.finish(&slot_paths(phases))),
        }
    }
}

struct Ctx<'a> {
    devices: &'a [DeviceId],
    cells: &'a Cells,
    /// Gap totals per device and slot.
    gaps: &'a BTreeMap<DeviceId, Vec<GapTotals>>,
    metrics: &'a [String],
    activity: Option<&'a Activity>,
    kernels_captured: bool,
    min_gap_ns: i64,
}

impl Ctx<'_> {
    /// The whole run as one phase of `duration_ns`.
    fn whole_run_report(&self, duration_ns: i64) -> PhaseReport {
        self.phase_report(
            "(whole run)",
            "(whole run)",
            0,
            &[duration_ns.max(0)],
            self.cells.whole_run(),
        )
    }

    /// One report per phase, in tree order.
    fn phase_reports(&self, phases: &Phases) -> Vec<PhaseReport> {
        phases
            .phases
            .iter()
            .enumerate()
            .map(|(slot, p)| self.phase_report(&p.path, &p.name, p.depth, &p.durations_ns, slot))
            .collect()
    }

    fn phase_report(
        &self,
        path: &str,
        name: &str,
        depth: usize,
        durations: &[i64],
        slot: usize,
    ) -> PhaseReport {
        let mut devs = Vec::with_capacity(self.devices.len());
        let (mut idle_all, mut sampled_all) = (0i64, 0i64);
        let mut gaps_all = GapTotals::default();
        for d in self.devices {
            let empty = SegAgg::default();
            let agg = self.cells.samples.get(d).map_or(&empty, |c| &c[slot]);
            let nv = self.cells.nvml.get(d).map(|c| &c[slot]);
            let dropped = self.cells.dropped.get(d).map_or(0, |c| c[slot]);
            let n = agg.samples;
            let stat = |i: usize, name: &str| Stat {
                name: name.to_string(),
                mean: agg.mean(i),
                peak: agg.peak(i),
            };
            let metrics: Vec<Stat> = self
                .metrics
                .iter()
                .enumerate()
                .map(|(i, m)| stat(i, m))
                .collect();
            let label = self
                .activity
                .map_or("activity".to_string(), Activity::label);
            let activity = stat(self.metrics.len(), &label);
            let mut gaps = GapTotals::default();
            if self.kernels_captured {
                gaps.no_kernel_ns = Some(0);
                gaps.kernel_resident_ns = Some(0);
            }
            if let Some(t) = self.gaps.get(d).and_then(|t| t.get(slot)) {
                gaps.merge(t);
            }
            idle_all += agg.idle_ns;
            sampled_all += agg.sampled_ns;
            gaps_all.merge(&gaps);
            devs.push(PhaseDevice {
                device: *d,
                samples: n,
                sampled_ns: agg.sampled_ns,
                idle_ns: agg.idle_ns,
                unknown_ns: agg.unknown_ns,
                idle_fraction: (agg.sampled_ns > 0)
                    .then(|| agg.idle_ns as f64 / agg.sampled_ns as f64),
                dropped_ns: dropped,
                activity,
                metrics,
                power_w: nv.and_then(|n| mean(n.power)),
                sm_clock_mhz: nv.and_then(|n| mean(n.sm)),
                mem_clock_mhz: nv.and_then(|n| mean(n.mem)),
                nvml_gpu_util_pct: nv.and_then(|n| mean(n.util)),
                gaps,
            });
        }
        let idle_fraction = (sampled_all > 0).then(|| idle_all as f64 / sampled_all as f64);
        let all_unknown = sampled_all == 0 && devs.iter().any(|d| d.unknown_ns > 0);
        PhaseReport {
            path: path.to_string(),
            name: name.to_string(),
            depth,
            count: durations.len() as u64,
            total_ns: durations.iter().sum(),
            p50_ns: phases::percentile(durations, 0.5),
            p99_ns: phases::percentile(durations, 0.99),
            devices: devs,
            idle_fraction,
            verdict: if self.activity.is_none() {
                Verdict::NotMeasured
            } else if all_unknown {
                Verdict::ValuesUnknown
            } else {
                verdict(
                    idle_fraction,
                    &gaps_all,
                    self.kernels_captured,
                    self.min_gap_ns,
                )
            },
        }
    }
}

/// The verdict of a phase from its idle fraction and gap totals.
fn verdict(idle: Option<f64>, gaps: &GapTotals, kernels: bool, min_gap_ns: i64) -> Verdict {
    let Some(idle_fraction) = idle else {
        return Verdict::NoSamples;
    };
    if idle_fraction < BUSY_BELOW {
        return Verdict::Busy { idle_fraction };
    }
    if gaps.total_ns == 0 {
        return Verdict::ShortStalls {
            idle_fraction,
            min_gap_ns,
        };
    }
    if !kernels {
        return Verdict::CauseUnknown { idle_fraction };
    }
    let total = gaps.total_ns as f64;
    let no_kernel_fraction = gaps.no_kernel_ns.unwrap_or(0) as f64 / total;
    if no_kernel_fraction >= HOST_BOUND_FROM {
        let host = gaps.host.map(|h| HostShares {
            in_sync: h.in_sync_ns as f64 / total,
            in_launch: h.in_launch_ns as f64 / total,
            outside_cuda: (gaps.total_ns - h.in_sync_ns - h.in_launch_ns).max(0) as f64 / total,
        });
        Verdict::HostBound {
            idle_fraction,
            no_kernel_fraction,
            host,
        }
    } else if no_kernel_fraction <= 1.0 - HOST_BOUND_FROM {
        Verdict::LatencyBound {
            idle_fraction,
            kernel_resident_fraction: 1.0 - no_kernel_fraction,
        }
    } else {
        Verdict::Mixed {
            idle_fraction,
            no_kernel_fraction,
        }
    }
}

impl Ctx<'_> {
    /// The remarks about the whole report: [`notes`], then samples lacking a value and phases of
    /// several processes that overlap.
    fn notes(
        &self,
        phases: &Phases,
        nvtx_chosen_by: Option<&PhaseSelect>,
        m: &cufall_trace::model::Manifest,
        drops: &[DropRecord],
        overlap: Option<(i64, Vec<u32>)>,
    ) -> Vec<Note> {
        let no_counters = self
            .activity
            .is_none()
            .then(|| m.counters_unavailable.clone());
        notes(
            phases,
            nvtx_chosen_by,
            no_counters,
            self.kernels_captured,
            drops,
        )
        .into_iter()
        .chain(raw_counter(self.activity, m))
        .chain(unknown_values(self.devices, self.cells, self.activity))
        .chain(overlap_note(overlap))
        .collect()
    }
}

/// The remarks about the whole report; `no_counters` holds the recorder's reason when the
/// recording has no GPU counters.
fn notes(
    phases: &Phases,
    nvtx_chosen_by: Option<&PhaseSelect>,
    no_counters: Option<Option<String>>,
    kernels_captured: bool,
    drops: &[DropRecord],
) -> Vec<Note> {
    let mut notes = Vec::new();
    if phases.is_empty() {
        notes.push(match nvtx_chosen_by {
            None => Note::NoNvtx,
            Some(sel) => Note::NoPhasesChosen {
                phases: sel.to_string(),
            },
        });
    }
    if let Some(why) = no_counters {
        notes.push(Note::NoCounters { why });
    }
    if !kernels_captured {
        notes.push(Note::NoKernels);
    }
    if !drops.is_empty() {
        notes.push(Note::Drops {
            count: drops.len() as u64,
            dropped_ns: drops.iter().map(|d| (d.end_ns - d.start_ns).max(0)).sum(),
        });
    }
    notes
}

/// The note on an activity metric that is a bare counter recorded without its percentage of
/// peak, if it is one.
fn raw_counter(activity: Option<&Activity>, m: &cufall_trace::model::Manifest) -> Option<Note> {
    let a = activity?;
    let recorded = |name: &str| {
        m.sampling
            .as_ref()
            .is_some_and(|s| s.metrics.iter().any(|i| i.name == name))
    };
    (cufall_trace::model::peak::is_bare_counter(&a.metric)
        && !recorded(&cufall_trace::model::peak::percent_column(&a.metric)))
    .then(|| Note::RawCounter {
        metric: a.metric.clone(),
        denominator: a.denominator.clone(),
    })
}

/// The note on samples lacking a value the idle test needs, if any has.
fn unknown_values(
    devices: &[DeviceId],
    cells: &Cells,
    activity: Option<&Activity>,
) -> Option<Note> {
    let (unknown, unknown_ns) = devices
        .iter()
        .filter_map(|d| cells.run_of(d))
        .fold((0, 0), |(n, t), a| (n + a.unknown, t + a.unknown_ns));
    let a = activity.filter(|_| unknown > 0)?;
    Some(Note::UnknownValues {
        samples: unknown,
        unknown_ns,
        metrics: std::iter::once(&a.metric)
            .chain(&a.denominator)
            .chain(&a.also_low)
            .cloned()
            .collect(),
    })
}

fn drop_summary(drops: &[DropRecord]) -> Vec<DeviceDrops> {
    let mut by: BTreeMap<DeviceId, DeviceDrops> = BTreeMap::new();
    for d in drops {
        let dev = d.device;
        let e = by.entry(dev).or_insert_with(|| DeviceDrops {
            device: dev,
            ..Default::default()
        });
        let ns = (d.end_ns - d.start_ns).max(0);
        e.count += 1;
        e.dropped_ns += ns;
        e.lost_samples += d.lost_samples.unwrap_or(0);
        let r = e
            .by_reason
            .entry(d.reason.as_str().to_string())
            .or_default();
        r.count += 1;
        r.dropped_ns += ns;
    }
    by.into_values().collect()
}
