//! Building a report: the trace read once (samples, NVML, drops, kernels, API calls, host
//! samples), folded per device and phase as it is read, and put together.

use super::cells::Cells;
use super::gap_fold::GapFold;
use super::types::{
    DEFAULT_GAP_INTERVALS, DeviceDrops, GapRow, GpuInfo, PhaseDomains, PhaseReport, Report,
    ReportOptions,
};
use super::verdict::Ctx;
use crate::capcost;
use crate::capture;
use crate::error::{AnalysisError, Result};
use crate::gaps::{self, HostCoverage, KernelCoverage};
use crate::host::{self, HostIndexBuilder, HostSide, Launchers};
use crate::kernels::KernelFold;
use crate::phases::{self, Phases, slots_of};
use crate::samples::{self, Activity, FullScaleSource, SegAgg};
use crate::select::{self, PhaseSelect};
use cufall_trace::Trace;
use cufall_trace::model::{DeviceId, DropRecord, KernelRecord, Nanos, NvtxRange};
use std::collections::BTreeMap;

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
    if let Some(g) = opts.min_gap_ns.map(Nanos::get).filter(|g| *g <= 0) {
        return Err(AnalysisError::MinGapNotPositive(g));
    }
    Ok(opts
        .min_gap_ns
        .map(Nanos::get)
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
    let interval_ns = checked.interval_ns.0;
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
                min_gap_ns: Nanos(min_gap_ns),
                hole_ns: Nanos(hole_ns),
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
    let merged = gaps::merge_fragments(fragments, &drops, Nanos(min_gap_ns), Nanos(hole_ns));

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
        interval_ns: Nanos(interval_ns),
        start_ns,
        end_ns,
        idle_threshold: activity.as_ref().map(Activity::threshold),
        activity,
        min_gap_ns: Nanos(min_gap_ns),
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
        .map(|p| p.total_ns.get())
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
        e.dropped_ns += Nanos(ns);
        e.lost_samples += d.lost_samples.unwrap_or(0);
        let r = e
            .by_reason
            .entry(d.reason.as_str().to_string())
            .or_default();
        r.count += 1;
        r.dropped_ns += Nanos(ns);
    }
    by.into_values().collect()
}
