//! `cufall diff A B`: two reports side by side, phases matched by path and gap places by label,
//! biggest changes first. B is analysed with A's activity metric, full scale and minimum gap so
//! that idle time means the same on both sides. [`crate::nodes_diff`] compares two runs of
//! several nodes each with the same pieces (a phase's sides, the PHASES table's rows).

use crate::error::{AnalysisError, Result};
use crate::host::{HostClass, HostScope};
use crate::kernels::KernelScope;
use crate::render::{TextTable, fmt_ns, fmt_num, fmt_pct, note_text};
use crate::report::{PhaseReport, Report, ReportOptions, build_report_checked};
use crate::select::{DomainCount, domain_label, ranges_text};
use cufall_trace::model::{FrameKind, Nanos};
use cufall_trace::{Trace, TraceError};
use serde::Serialize;
use std::collections::BTreeMap;

/// One side of a phase comparison (all devices together).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseSide {
    pub count: u64,
    pub total_ns: Nanos,
    pub p50_ns: Nanos,
    pub p99_ns: Nanos,
    pub idle_fraction: Option<f64>,
    /// Sample-weighted mean over devices.
    pub activity_mean: Option<f64>,
    /// Mean of each metric, sample-weighted over devices.
    pub metric_means: BTreeMap<String, Option<f64>>,
    pub power_w: Option<f64>,
}

/// A phase in A and/or B.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseDiff {
    pub path: String,
    pub a: Option<PhaseSide>,
    pub b: Option<PhaseSide>,
    /// B minus A (a missing side counts as zero).
    pub delta_total_ns: Nanos,
    /// B minus A, in fractions (0.1 = 10 percentage points).
    pub delta_idle: Option<f64>,
}

/// How many times a thing (a gap place, a kernel name) occurred in A and in B, and for how long.
/// A side without it counts zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AbTotals {
    pub count_a: u64,
    pub count_b: u64,
    pub total_a_ns: Nanos,
    pub total_b_ns: Nanos,
    /// B minus A.
    pub delta_total_ns: Nanos,
}

impl AbTotals {
    /// Adds `count` occurrences of `total_ns` to side A (`is_a`) or B.
    fn add(&mut self, is_a: bool, count: u64, total_ns: Nanos) {
        if is_a {
            self.count_a += count;
            self.total_a_ns += total_ns;
        } else {
            self.count_b += count;
            self.total_b_ns += total_ns;
        }
        self.delta_total_ns = self.total_b_ns - self.total_a_ns;
    }

    /// The row of a table of changes: `name`, the counts and total times in A and B, B minus A.
    fn row(&self, name: &str) -> Vec<String> {
        vec![
            name.to_string(),
            self.count_a.to_string(),
            self.count_b.to_string(),
            fmt_ns(self.total_a_ns),
            fmt_ns(self.total_b_ns),
            signed_ns(self.delta_total_ns),
        ]
    }
}

/// A gap place in A and/or B.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GapDiff {
    pub place: String,
    #[serde(flatten)]
    pub totals: AbTotals,
}

/// A kernel name's GPU time over the whole run (all devices) in A and/or B.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KernelDiff {
    pub name: String,
    pub short_name: String,
    #[serde(flatten)]
    pub totals: AbTotals,
}

/// How many kernels the text of a diff lists.
pub const KERNEL_CHANGES_SHOWN: usize = 10;

/// The comparison of two traces.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffReport {
    pub a: Report,
    pub b: Report,
    pub warnings: Vec<String>,
    pub whole_run: PhaseDiff,
    pub phases: Vec<PhaseDiff>,
    pub gaps: Vec<GapDiff>,
    /// Kernels by the change of their whole-run GPU time, biggest first (complete when the
    /// reports list every kernel, [`ReportOptions::kernel_rows`] `None`).
    pub kernels: Vec<KernelDiff>,
    /// Host frames whose share grew or shrank, per class present in both traces' host samples,
    /// biggest change first; absent when either trace has no host samples.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host_frames: Vec<HostFrameDiff>,
}

/// A host frame's self share (innermost frame, of the class's time) in A and in B.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostFrameDiff {
    pub scope: HostScope,
    /// The place label or phase path.
    pub class: String,
    /// `true`: the launching thread's shares (both traces name one); else all threads'.
    pub launching: bool,
    pub function: String,
    pub file: String,
    pub line: Option<u32>,
    /// The native frame's library; empty for a Python frame.
    pub module: String,
    pub kind: FrameKind,
    /// 0 where the side has no sample with the frame innermost.
    pub share_a: f64,
    pub share_b: f64,
    /// B minus A, in fractions (0.1 = 10 percentage points).
    pub delta: f64,
}

/// Changes smaller than this (of the class's time) are not listed.
pub const HOST_CHANGE_FROM: f64 = 0.01;
/// How many host frame changes the text of a diff lists.
pub const HOST_CHANGES_SHOWN: usize = 10;

/// The self shares of the classes both reports have, compared frame by frame.
fn host_frame_diffs(ra: &Report, rb: &Report) -> Vec<HostFrameDiff> {
    let (Some(ha), Some(hb)) = (&ra.host, &rb.host) else {
        return Vec::new();
    };
    host_reports_diff(ha, hb)
}

/// [`host_frame_diffs`] of two host reports.
fn host_reports_diff(
    ha: &crate::host::HostReport,
    hb: &crate::host::HostReport,
) -> Vec<HostFrameDiff> {
    let classes = |h: &'_ crate::host::HostReport| -> Vec<HostClass> {
        h.gap_classes
            .iter()
            .chain(h.phases.iter())
            .cloned()
            .collect()
    };
    let (ca, cb) = (classes(ha), classes(hb));
    let mut out = Vec::new();
    for a in &ca {
        let Some(b) = cb.iter().find(|b| b.scope == a.scope && b.name == a.name) else {
            continue;
        };
        let (va, vb, launching) = match (&a.launching, &b.launching) {
            (Some(x), Some(y)) => (x, y, true),
            _ => (&a.all, &b.all, false),
        };
        if va.samples == 0 || vb.samples == 0 {
            continue;
        }
        // Every frame of both sides (not the kept few: a frame cut on one side would read 0),
        // keyed by the whole frame so that frames differing only in module or kind stay apart.
        let key = |f: &'_ crate::host::FrameShare| {
            (
                f.function.clone(),
                f.file.clone(),
                f.line,
                f.module.clone(),
                f.kind.as_str(),
            )
        };
        let mut shares: BTreeMap<_, (f64, f64, FrameKind)> = BTreeMap::new();
        for f in &va.all_self_frames {
            let e = shares.entry(key(f)).or_insert((0.0, 0.0, f.kind));
            e.0 += f.share;
        }
        for f in &vb.all_self_frames {
            let e = shares.entry(key(f)).or_insert((0.0, 0.0, f.kind));
            e.1 += f.share;
        }
        for ((function, file, line, module, _), (sa, sb, kind)) in shares {
            if (sb - sa).abs() >= HOST_CHANGE_FROM {
                out.push(HostFrameDiff {
                    scope: a.scope,
                    class: a.name.clone(),
                    launching,
                    function,
                    file,
                    line,
                    module,
                    kind,
                    share_a: sa,
                    share_b: sb,
                    delta: sb - sa,
                });
            }
        }
    }
    out.sort_by(|x, y| {
        y.delta
            .abs()
            .total_cmp(&x.delta.abs())
            .then_with(|| x.class.cmp(&y.class))
            .then_with(|| x.function.cmp(&y.function))
            .then_with(|| x.file.cmp(&y.file))
            .then(x.line.cmp(&y.line))
            .then_with(|| x.module.cmp(&y.module))
    });
    out
}

/// The HOST FRAMES section of a diff; left out where either trace has no host samples.
fn host_diff_text(d: &DiffReport) -> String {
    if d.a.host.is_none() || d.b.host.is_none() {
        return String::new();
    }
    let mut o = String::from(
        "\nHOST FRAMES (innermost frame's share of the time, launching thread where both name one; \
         biggest change first)\n",
    );
    if d.host_frames.is_empty() {
        o.push_str("  no frame's share changed by 1 point or more\n");
        return o;
    }
    let mut t = TextTable::new(&["where", "frame", "A", "B", "Δ"]);
    for f in d.host_frames.iter().take(HOST_CHANGES_SHOWN) {
        let scope = match f.scope {
            HostScope::Place => "gaps",
            HostScope::PhaseGaps => "gaps of",
            HostScope::Phase => "all of",
        };
        t.row(vec![
            format!("{scope} {}", f.class),
            crate::host::frame_label(&f.function, &f.file, f.line),
            fmt_pct(Some(f.share_a)),
            fmt_pct(Some(f.share_b)),
            format!("{:+.1} pp", f.delta * 100.0),
        ]);
    }
    o.push_str(&t.render("  "));
    let rest = d.host_frames.len().saturating_sub(HOST_CHANGES_SHOWN);
    if rest > 0 {
        o.push_str(&format!("  … {rest} more change(s)\n"));
    }
    o
}

fn side(p: &PhaseReport) -> PhaseSide {
    let n: u64 = p.devices.iter().map(|d| d.samples).sum();
    let weighted = |f: &dyn Fn(&crate::report::PhaseDevice) -> Option<f64>| -> Option<f64> {
        if n == 0 {
            return None;
        }
        let mut acc = 0.0;
        let mut w = 0u64;
        for d in &p.devices {
            if let Some(v) = f(d) {
                acc += v * d.samples as f64;
                w += d.samples;
            }
        }
        (w > 0).then(|| acc / w as f64)
    };
    let mut metric_means = BTreeMap::new();
    if let Some(first) = p.devices.first() {
        // By name: merged nodes' devices may list their metrics in other orders.
        for m in &first.metrics {
            metric_means.insert(
                m.name.clone(),
                weighted(&|d| {
                    d.metrics
                        .iter()
                        .find(|s| s.name == m.name)
                        .and_then(|s| s.mean)
                }),
            );
        }
    }
    let powers: Vec<f64> = p.devices.iter().filter_map(|d| d.power_w).collect();
    PhaseSide {
        count: p.count,
        total_ns: p.total_ns,
        p50_ns: p.p50_ns,
        p99_ns: p.p99_ns,
        idle_fraction: p.idle_fraction,
        activity_mean: weighted(&|d| d.activity.mean),
        metric_means,
        power_w: (!powers.is_empty()).then(|| powers.iter().sum::<f64>() / powers.len() as f64),
    }
}

pub(crate) fn phase_diff(
    path: &str,
    a: Option<&PhaseReport>,
    b: Option<&PhaseReport>,
) -> PhaseDiff {
    let a = a.map(side);
    let b = b.map(side);
    let total = |s: &Option<PhaseSide>| s.as_ref().map_or(Nanos::ZERO, |s| s.total_ns);
    let idle = |s: &Option<PhaseSide>| s.as_ref().and_then(|s| s.idle_fraction);
    PhaseDiff {
        path: path.to_string(),
        delta_total_ns: total(&b) - total(&a),
        delta_idle: match (idle(&a), idle(&b)) {
            (Some(x), Some(y)) => Some(y - x),
            _ => None,
        },
        a,
        b,
    }
}

/// The NVTX domains recorded in any of the reports' traces, with their ranges in all together.
pub(crate) fn recorded_in_any(reports: &[&Report]) -> Vec<DomainCount> {
    let mut out: Vec<DomainCount> = Vec::new();
    for r in reports {
        let d = &r.phase_domains;
        for c in d.used.iter().chain(d.left_out.iter()) {
            match out.iter_mut().find(|x| x.domain == c.domain) {
                Some(x) => x.ranges += c.ranges,
                None => out.push(c.clone()),
            }
        }
    }
    out
}

/// The GPUs of one side (one report, or each node's), counted by name: `2× NVIDIA H200`.
pub(crate) fn gpu_summary(reports: &[&Report]) -> String {
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for g in reports.iter().flat_map(|r| &r.gpus) {
        *names
            .entry(if g.name.is_empty() {
                "unnamed GPU".into()
            } else {
                g.name.clone()
            })
            .or_default() += 1;
    }
    names
        .iter()
        .map(|(n, c)| format!("{c}× {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What makes A and B less comparable: each reader's warnings, then different GPUs, intervals
/// or activity values.
fn comparability_warnings(ra: &Report, rb: &Report) -> Vec<String> {
    // What each trace's reader found (a cut segment, an unfinished recording) comes first.
    let mut warnings: Vec<String> = (ra.warnings.iter().map(|w| format!("A: {w}")))
        .chain(rb.warnings.iter().map(|w| format!("B: {w}")))
        .collect();
    warnings.extend(setup_warnings(&[ra], &[rb]));
    warnings
}

/// Different GPUs, intervals or activity values on the two sides, each side one report or
/// one per node (the intervals and activity values of each side's first).
pub(crate) fn setup_warnings(a: &[&Report], b: &[&Report]) -> Vec<String> {
    let mut warnings = Vec::new();
    let (Some(ra), Some(rb)) = (a.first(), b.first()) else {
        return warnings;
    };
    let ga = gpu_summary(a);
    let gb = gpu_summary(b);
    let chips = |side: &[&Report]| {
        let mut v: Vec<String> = side
            .iter()
            .flat_map(|r| &r.gpus)
            .map(|g| g.chip.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    };
    if ga != gb || chips(a) != chips(b) {
        warnings.push(format!(
            "the traces come from different GPUs (A: {ga}; B: {gb}): compared anyway, but counters and timings may not be comparable"
        ));
    }
    if ra.interval_ns != rb.interval_ns {
        warnings.push(format!(
            "the sampling intervals differ (A: {}, B: {}): idle stretches shorter than the longer interval are seen only in one trace",
            fmt_ns(ra.interval_ns),
            fmt_ns(rb.interval_ns)
        ));
    }
    let denominator = |r: &Report| r.activity.as_ref().map(|a| a.denominator.clone());
    if ra.activity.is_some() != rb.activity.is_some() {
        warnings.push(
            "only one of the traces has GPU counters: idle time is compared where both have it"
                .into(),
        );
    } else if denominator(ra) != denominator(rb) {
        warnings
            .push("the activity value is computed differently in B (another denominator)".into());
    }
    warnings
}

/// Every phase of A or B (A's order, then B's new ones), biggest change of time first.
fn phase_diffs(ra: &Report, rb: &Report) -> Vec<PhaseDiff> {
    let mut paths: Vec<&str> = ra.phases.iter().map(|p| p.path.as_str()).collect();
    for p in &rb.phases {
        if !paths.contains(&p.path.as_str()) {
            paths.push(&p.path);
        }
    }
    let mut phases: Vec<PhaseDiff> = paths
        .iter()
        .map(|path| {
            phase_diff(
                path,
                ra.phases.iter().find(|p| p.path == *path),
                rb.phases.iter().find(|p| p.path == *path),
            )
        })
        .collect();
    biggest_phase_change_first(&mut phases, |p| p);
    phases
}

/// Sorts rows of phases by the change of their total time, then of their idle share, largest
/// first, ties by path.
pub(crate) fn biggest_phase_change_first<T>(rows: &mut [T], diff: impl Fn(&T) -> &PhaseDiff) {
    rows.sort_by(|x, y| {
        let (x, y) = (diff(x), diff(y));
        y.delta_total_ns
            .get()
            .unsigned_abs()
            .cmp(&x.delta_total_ns.get().unsigned_abs())
            .then_with(|| {
                let ix = x.delta_idle.map_or(0.0, f64::abs);
                let iy = y.delta_idle.map_or(0.0, f64::abs);
                iy.total_cmp(&ix)
            })
            .then(x.path.cmp(&y.path))
    });
}

/// Gaps by place in A and B, biggest change of time first.
fn gap_diffs(ra: &Report, rb: &Report) -> Vec<GapDiff> {
    let mut places: BTreeMap<String, GapDiff> = BTreeMap::new();
    for (is_a, r) in [(true, ra), (false, rb)] {
        for g in &r.gap_groups {
            let e = places.entry(g.place.clone()).or_insert_with(|| GapDiff {
                place: g.place.clone(),
                totals: AbTotals::default(),
            });
            e.totals.add(is_a, g.totals.count, g.totals.total_ns);
        }
    }
    let mut gaps: Vec<GapDiff> = places.into_values().collect();
    biggest_change_first(&mut gaps, |g| (g.totals.delta_total_ns, &g.place));
    gaps
}

/// Compares traces `a` and `b`, choosing the phases of both with [`ReportOptions::phases`]: a
/// domain it names must be recorded in at least one of them.
pub fn build_diff(a: &Trace, b: &Trace, opts: &ReportOptions) -> Result<DiffReport> {
    let ra = build_report_checked(a, opts, false, &mut |_| {}, &mut |_, _| {})?;
    let opts_b = options_like(&ra, opts);
    let rb = build_report_checked(b, &opts_b, false, &mut |_| {}, &mut |_, _| {})
        .map_err(|e| metric_not_in_b(b, e))?;
    opts.phases
        .check_domains(&recorded_in_any(&[&ra, &rb]))
        .map_err(AnalysisError::UnknownDomains)?;
    let warnings = comparability_warnings(&ra, &rb);
    let whole_run = phase_diff("(whole run)", Some(&ra.whole_run), Some(&rb.whole_run));
    let phases = phase_diffs(&ra, &rb);
    let gaps = gap_diffs(&ra, &rb);
    let kernels = kernel_diffs(&ra, &rb);
    let host_frames = host_frame_diffs(&ra, &rb);
    Ok(DiffReport {
        a: ra,
        b: rb,
        warnings,
        whole_run,
        phases,
        gaps,
        kernels,
        host_frames,
    })
}

/// The options B is analysed with: A's activity metric, full scale and minimum gap (as A's
/// report `ra` chose them), so that idle time means the same on both sides.
pub(crate) fn options_like(ra: &Report, opts: &ReportOptions) -> ReportOptions {
    ReportOptions {
        metric: ra.activity.as_ref().map(|a| a.metric.clone()),
        full_scale: ra.activity.as_ref().map(|a| a.full_scale),
        idle_below: opts.idle_below,
        min_gap_ns: Some(ra.min_gap_ns),
        also_low: Some(
            ra.activity
                .as_ref()
                .map(|a| a.also_low.clone())
                .unwrap_or_default(),
        ),
        gap_rows: opts.gap_rows,
        kernel_rows: opts.kernel_rows,
        window_samples: opts.window_samples,
        phases: opts.phases.clone(),
    }
}

/// A's metric missing from trace `b` of side B, said as such; other errors unchanged.
pub(crate) fn metric_not_in_b(b: &Trace, e: AnalysisError) -> AnalysisError {
    match e {
        AnalysisError::Trace(source @ TraceError::UnknownMetric { .. }) => {
            AnalysisError::MetricNotInB {
                path: b.path().to_path_buf(),
                source,
            }
        }
        other => other,
    }
}

/// The whole-run kernel rows of A and B matched by name (devices summed), biggest change first.
fn kernel_diffs(ra: &Report, rb: &Report) -> Vec<KernelDiff> {
    let mut by_name: BTreeMap<&str, KernelDiff> = BTreeMap::new();
    for (is_a, r) in [(true, ra), (false, rb)] {
        let whole = r
            .kernels
            .iter()
            .filter(|t| t.scope == KernelScope::WholeRun);
        for row in whole.flat_map(|t| t.rows.iter()) {
            let e = by_name.entry(&row.name).or_insert_with(|| KernelDiff {
                name: row.name.clone(),
                short_name: row.short_name.clone(),
                totals: AbTotals::default(),
            });
            e.totals.add(is_a, row.count, row.total_ns);
        }
    }
    let mut out: Vec<KernelDiff> = by_name.into_values().collect();
    biggest_change_first(&mut out, |k| (k.totals.delta_total_ns, &k.name));
    out
}

/// Sorts rows by the size of their change, largest first, ties by name.
fn biggest_change_first<T, K: Ord + ?Sized>(rows: &mut [T], key: impl Fn(&T) -> (Nanos, &K)) {
    rows.sort_by(|x, y| {
        let ((dx, nx), (dy, ny)) = (key(x), key(y));
        dy.get()
            .unsigned_abs()
            .cmp(&dx.get().unsigned_abs())
            .then(nx.cmp(ny))
    });
}

pub(crate) fn signed_ns(ns: impl Into<Nanos>) -> String {
    let ns = ns.into();
    if ns > Nanos::ZERO {
        format!("+{}", fmt_ns(ns))
    } else {
        fmt_ns(ns)
    }
}

/// The text form of a diff.
pub fn diff_text(d: &DiffReport) -> String {
    diff_text_for(d, "cufall")
}

/// The PHASES table of a diff: the whole run, then each phase, biggest change first.
fn phase_diff_text(d: &DiffReport) -> String {
    let mut o = String::from("\nPHASES (biggest change in total time first)\n");
    let mut t = TextTable::new(&phase_columns(false, &[]));
    for p in std::iter::once(&d.whole_run).chain(d.phases.iter()) {
        t.row(phase_cells(p, false));
    }
    o.push_str(&t.render("  "));
    o
}

/// The columns of a PHASES table, with the p99 columns or not, and `more` at the end.
pub(crate) fn phase_columns<'a>(p99: bool, more: &[&'a str]) -> Vec<&'a str> {
    let mut c = vec![
        "phase", "count A", "count B", "total A", "total B", "Δ total", "p50 A", "p50 B",
    ];
    if p99 {
        c.extend(["p99 A", "p99 B"]);
    }
    c.extend(["idle A", "idle B", "Δ idle", "activity A", "activity B"]);
    c.extend_from_slice(more);
    c
}

/// A phase's row of a PHASES table ([`phase_columns`] without `more`).
pub(crate) fn phase_cells(p: &PhaseDiff, p99: bool) -> Vec<String> {
    let get = |s: &Option<PhaseSide>, f: &dyn Fn(&PhaseSide) -> String| {
        s.as_ref().map_or("-".to_string(), f)
    };
    let mut row = vec![
        p.path.clone(),
        get(&p.a, &|s| s.count.to_string()),
        get(&p.b, &|s| s.count.to_string()),
        get(&p.a, &|s| fmt_ns(s.total_ns)),
        get(&p.b, &|s| fmt_ns(s.total_ns)),
        signed_ns(p.delta_total_ns),
        get(&p.a, &|s| fmt_ns(s.p50_ns)),
        get(&p.b, &|s| fmt_ns(s.p50_ns)),
    ];
    if p99 {
        row.push(get(&p.a, &|s| fmt_ns(s.p99_ns)));
        row.push(get(&p.b, &|s| fmt_ns(s.p99_ns)));
    }
    row.extend([
        get(&p.a, &|s| fmt_pct(s.idle_fraction)),
        get(&p.b, &|s| fmt_pct(s.idle_fraction)),
        p.delta_idle
            .map_or("-".into(), |v| format!("{:+.1} pp", v * 100.0)),
        get(&p.a, &|s| fmt_num(s.activity_mean)),
        get(&p.b, &|s| fmt_num(s.activity_mean)),
    ]);
    row
}

/// How idle is measured on both sides: A's activity value and threshold, and the shortest gap.
pub(crate) fn idle_line(
    activity: Option<&crate::samples::Activity>,
    threshold: Option<f64>,
    min_gap_ns: Nanos,
) -> String {
    match activity {
        Some(a) => format!(
            "  idle = {} below {}{}; gaps of at least {}\n",
            a.label(),
            fmt_num(threshold),
            a.also_low_clause(),
            fmt_ns(min_gap_ns)
        ),
        None => "  idle: not measured (no GPU counters in A)\n".to_string(),
    }
}

/// The text form of a diff; `cmd` is the command as the user runs it (for the notes).
pub fn diff_text_for(d: &DiffReport, cmd: &str) -> String {
    let mut o = String::new();
    o.push_str(&format!(
        "cufall diff: A = {}, B = {}\n",
        d.a.trace, d.b.trace
    ));
    for (tag, r) in [("A", &d.a), ("B", &d.b)] {
        o.push_str(&format!(
            "  {tag}: {}, {}, idle {}\n",
            gpu_summary(&[r]),
            fmt_ns(r.end_ns - r.start_ns),
            fmt_pct(r.whole_run.idle_fraction)
        ));
    }
    o.push_str(&idle_line(
        d.a.activity.as_ref(),
        d.a.idle_threshold,
        d.a.min_gap_ns,
    ));
    for w in &d.warnings {
        o.push_str(&format!("  warning: {w}\n"));
    }
    // Library domains left out of either side's phases, with the value that adds them.
    for (tag, r) in [("A", &d.a), ("B", &d.b)] {
        if let Some(include) = &r.phase_domains.include_left_out {
            let left: Vec<String> = r
                .phase_domains
                .left_out
                .iter()
                .map(|c| format!("{} ({})", domain_label(&c.domain), ranges_text(c.ranges)))
                .collect();
            o.push_str(&format!(
                "  not phases ({tag}): {}; make them phases with `--phases {include}`\n",
                left.join(", ")
            ));
        }
    }
    for n in
        d.a.notes
            .iter()
            .map(|n| ("A", n))
            .chain(d.b.notes.iter().map(|n| ("B", n)))
    {
        o.push_str(&format!("  note ({}): {}\n", n.0, note_text(n.1, cmd)));
    }
    o.push_str(&phase_diff_text(d));
    o.push_str("\nIDLE GAPS (biggest change in total time first)\n");
    if d.gaps.is_empty() {
        o.push_str("  none in either trace\n");
    } else {
        let mut t = TextTable::new(&["where", "gaps A", "gaps B", "total A", "total B", "Δ total"]);
        for g in &d.gaps {
            t.row(g.totals.row(&g.place));
        }
        o.push_str(&t.render("  "));
    }
    o.push_str(&kernel_diff_text(d));
    o.push_str(&host_diff_text(d));
    // Names from the recordings reach the terminal only escaped.
    cufall_text::escape_lines(&o).into_owned()
}

/// The KERNELS section of a diff: the biggest changes of whole-run GPU time; left out where
/// neither trace has kernels (or they were not tabled).
fn kernel_diff_text(d: &DiffReport) -> String {
    if d.kernels.is_empty() {
        return String::new();
    }
    let mut o = String::from("\nKERNELS (whole run, all GPUs; biggest change in GPU time first)\n");
    let busy = |r: &Report| -> Nanos {
        r.kernels
            .iter()
            .filter(|t| t.scope == KernelScope::WholeRun)
            .map(|t| t.busy_ns)
            .sum()
    };
    let (busy_a, busy_b) = (busy(&d.a), busy(&d.b));
    o.push_str(&format!(
        "  GPU-busy time (kernels, copies, graphs): A {}, B {}, {}\n",
        fmt_ns(busy_a),
        fmt_ns(busy_b),
        signed_ns(busy_b - busy_a)
    ));
    let mut t = TextTable::new(&[
        "kernel", "count A", "count B", "total A", "total B", "Δ total",
    ]);
    for k in d.kernels.iter().take(KERNEL_CHANGES_SHOWN) {
        t.row(k.totals.row(&k.short_name));
    }
    o.push_str(&t.render("  "));
    let rest = d.kernels.len().saturating_sub(KERNEL_CHANGES_SHOWN);
    if rest > 0 {
        let moved: Nanos = d.kernels[KERNEL_CHANGES_SHOWN..]
            .iter()
            .map(|k| k.totals.delta_total_ns)
            .sum();
        o.push_str(&format!(
            "  … {rest} more kernel(s), {} change in all\n",
            signed_ns(moved)
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{FrameShare, HostReport, HostView, IntervalSource, LaunchingFrom};

    fn share(function: &str, module: &str, kind: FrameKind, share: f64) -> FrameShare {
        FrameShare {
            function: function.into(),
            file: String::new(),
            line: None,
            module: module.into(),
            kind,
            samples: 1,
            idle_samples: 0,
            share,
        }
    }

    /// A host report of one class whose `all` view has `frames`, of which only the first
    /// `kept` are in the kept list (as after the report's cut).
    fn report(frames: Vec<FrameShare>, kept: usize) -> HostReport {
        let all = HostView {
            thread: None,
            threads: 1,
            samples: 100,
            expected_samples: 100.0,
            sampled: 1.0,
            idle: 0.0,
            gil_held: None,
            no_frames: 0,
            self_frames: frames.iter().take(kept).cloned().collect(),
            all_self_frames: frames,
            inclusive_frames: Vec::new(),
            self_functions: Vec::new(),
            inclusive_functions: Vec::new(),
            causes: Default::default(),
        };
        HostReport {
            interval_ns: Nanos(1_000_000),
            interval_source: IntervalSource::Asked,
            samples: 100,
            threads: 1,
            processes: 1,
            launching_from: LaunchingFrom::Unknown,
            gap_classes: vec![HostClass {
                scope: HostScope::Place,
                name: "a → b".into(),
                time_ns: Nanos(100_000_000),
                gaps: 1,
                host_bound: true,
                launching: None,
                all,
            }],
            phases: Vec::new(),
        }
    }

    /// A frame cut from A's kept list still has its real share in A, and frames that differ
    /// only in module stay apart instead of overwriting each other.
    #[test]
    fn frames_are_compared_untruncated_by_their_whole_key() {
        let py = FrameKind::Python;
        let native = FrameKind::Native;
        let a = report(
            vec![
                share("busy", "", py, 0.5),
                share("sync", "libA.so", native, 0.2),
                share("late", "", py, 0.05),
            ],
            2,
        );
        let b = report(
            vec![
                share("busy", "", py, 0.5),
                share("sync", "libB.so", native, 0.3),
                share("sync", "libA.so", native, 0.2),
                share("late", "", py, 0.1),
            ],
            4,
        );
        let d = host_reports_diff(&a, &b);
        let row = |f: &str, m: &str| d.iter().find(|x| x.function == f && x.module == m);
        let late = row("late", "").expect("late changed");
        assert_eq!((late.share_a, late.share_b), (0.05, 0.1));
        let lib_b = row("sync", "libB.so").expect("libB grew");
        assert_eq!((lib_b.share_a, lib_b.share_b), (0.0, 0.3));
        assert_eq!(lib_b.kind, native);
        assert!(row("sync", "libA.so").is_none(), "{d:?}");
        assert!(row("busy", "").is_none(), "{d:?}");
        assert_eq!(d.len(), 2);
    }
}
