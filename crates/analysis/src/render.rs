//! Plain-text tables for reports and diffs.

use crate::capture::{self, CaptureLine, Severity};
use crate::report::{Note, PhaseDomains, PhaseReport, Report, Verdict};
use crate::samples::FullScaleSource;
use crate::select::{DomainCount, ranges_text};
use cufall_trace::model::Nanos;

/// A duration for people: `850 ns`, `12.3 µs`, `4.56 ms`, `1.234 s` (the one spelling,
/// [`Nanos`]' `Display`).
pub fn fmt_ns(ns: impl Into<Nanos>) -> String {
    ns.into().to_string()
}

/// A number in at most about 4 significant digits, `-` for none.
pub fn fmt_num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if !v.is_finite() => "-".into(),
        Some(v) => {
            let a = v.abs();
            if a == 0.0 {
                "0".into()
            } else if a >= 1e6 {
                format!("{v:.3e}")
            } else if a >= 100.0 {
                format!("{v:.0}")
            } else if a >= 1.0 {
                format!("{v:.2}")
            } else if a >= 0.001 {
                format!("{v:.4}")
            } else {
                format!("{v:.2e}")
            }
        }
    }
}

pub fn fmt_pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.1}%", v * 100.0))
}

/// A table with a header row, columns left-aligned (first) or right-aligned (others).
pub struct TextTable {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl TextTable {
    pub fn new(header: &[&str]) -> Self {
        TextTable {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row. Cells are text for a terminal: escaped, and cut to
    /// [`cufall_text::NAME_WIDTH`] columns (names from a recording can be any length).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(
            cells
                .iter()
                .map(|c| cufall_text::name(c).into_owned())
                .collect(),
        );
    }

    pub fn render(&self, indent: &str) -> String {
        let n = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| cufall_text::width(h)).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                widths[i] = widths[i].max(cufall_text::width(c));
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::from(indent);
            for (i, c) in cells.iter().enumerate().take(n) {
                let pad = widths[i].saturating_sub(cufall_text::width(c));
                if i == 0 {
                    s.push_str(c);
                    s.push_str(&" ".repeat(pad));
                } else {
                    s.push_str("  ");
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                }
            }
            s.trim_end().to_string() + "\n"
        };
        let mut out = line(&self.header);
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }
}

fn phase_label(p: &PhaseReport) -> String {
    format!("{}{}", "  ".repeat(p.depth), p.name)
}

/// How many individual gaps the text report lists.
pub const LONGEST_GAPS_SHOWN: usize = 10;

/// The text form of a report, naming the command `cufall`.
pub fn report_text(r: &Report) -> String {
    report_text_for(r, "cufall")
}

/// A verdict in plain words.
pub fn verdict_text(v: &Verdict) -> String {
    let head = |idle: f64| {
        let pct = idle * 100.0;
        if idle >= 0.5 {
            format!("mostly idle ({pct:.0}% of the time)")
        } else {
            format!("idle {pct:.0}% of the time")
        }
    };
    match v {
        Verdict::NotMeasured => {
            "GPU counters were not recorded: idle time cannot be measured".into()
        }
        Verdict::NoSamples => "no samples fall in this phase".into(),
        Verdict::ValuesUnknown => {
            "its samples lack the values the idle test needs (null in the trace): idle time \
             unknown"
                .into()
        }
        Verdict::Busy { idle_fraction } => {
            format!("busy: idle only {:.0}% of the time", idle_fraction * 100.0)
        }
        Verdict::ShortStalls {
            idle_fraction,
            min_gap_ns,
        } => format!(
            "{}, in stretches shorter than {}: short stalls between or inside kernels",
            head(*idle_fraction),
            fmt_ns(*min_gap_ns)
        ),
        Verdict::CauseUnknown { idle_fraction } => format!(
            "{}; kernels were not captured, so launch gaps and latency-bound kernels cannot be told apart",
            head(*idle_fraction)
        ),
        Verdict::HostBound {
            idle_fraction,
            no_kernel_fraction,
            host,
        } => {
            let detail = match host {
                Some(h) => format!(
                    "the host was in CUDA synchronisation {:.0}%, in launches and copies {:.0}%, outside CUDA (CPU work) {:.0}% of it",
                    h.in_sync * 100.0,
                    h.in_launch * 100.0,
                    h.outside_cuda * 100.0
                ),
                None => "launch gaps, host work, synchronisation".to_string(),
            };
            format!(
                "{}; host-bound: no kernel resident during {:.0}% of its gap time ({detail})",
                head(*idle_fraction),
                no_kernel_fraction * 100.0
            )
        }
        Verdict::LatencyBound {
            idle_fraction,
            kernel_resident_fraction,
        } => format!(
            "{}; latency-bound: kernels resident but counters idle during {:.0}% of its gap time",
            head(*idle_fraction),
            kernel_resident_fraction * 100.0
        ),
        Verdict::Mixed {
            idle_fraction,
            no_kernel_fraction,
        } => format!(
            "{}; mixed: {:.0}% of its gap time with no kernel resident, the rest with kernels resident but idle",
            head(*idle_fraction),
            no_kernel_fraction * 100.0
        ),
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&verdict_text(self))
    }
}

/// A note in plain words, naming the command `cufall`.
impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&note_text(self, "cufall"))
    }
}

/// A note in plain words; `cmd` is the command as the user runs it.
pub fn note_text(n: &Note, cmd: &str) -> String {
    match n {
        Note::NoNvtx => format!(
            "NVTX ranges were not captured in this trace: the whole run is reported as one phase. \
             Record a program that emits NVTX ranges with `{cmd} record -o NAME.cufall -- PROGRAM` \
             to see its phases."
        ),
        Note::NoCounters { why } => format!(
            "GPU counters were not recorded{}: idle time and gaps cannot be measured; phases show \
             NVTX durations and NVML readings only.",
            why.as_ref()
                // Recordings before 0.1 said it twice: "GPU counters were not recorded: NVML-only…".
                .map(|w| w
                    .strip_prefix("GPU counters were not recorded: ")
                    .unwrap_or(w))
                .map(|w| format!(" ({w})"))
                .unwrap_or_default()
        ),
        Note::NoPhasesChosen { phases } => format!(
            "no NVTX range is a phase with `--phases {phases}`: the whole run is reported as one \
             phase. `{cmd} info TRACE` lists the NVTX domains recorded; `--phases all` makes every \
             range a phase."
        ),
        Note::RawCounter {
            metric,
            denominator,
        } => {
            let over = denominator
                .as_ref()
                .map(|d| {
                    format!(
                        " (its ratio to {d} is not one either: the two may count different clocks)"
                    )
                })
                .unwrap_or_default();
            format!(
                "{metric} is shown as it counts, not as a percentage of its peak{over}: this \
                 recording holds no {} of it (recorded with --raw, or before cufall recorded \
                 one), and the peak cannot be rebuilt from what it stored. Record again without \
                 --raw for % of peak.",
                cufall_trace::model::peak::percent_column(metric)
            )
        }
        Note::NoKernels => format!(
            "kernel activity was not captured: gaps are not split into host-bound (no kernel \
             resident) and latency-bound (kernel resident, counters idle). Record with \
             `{cmd} record -- PROGRAM` to capture kernels."
        ),
        Note::Drops { count, dropped_ns } => format!(
            "{count} drop(s), {} without samples in all: excluded from idle time and gaps, never counted as idle.",
            fmt_ns(*dropped_ns)
        ),
        Note::OverlappingProcesses {
            processes,
            overlap_ns,
        } => format!(
            "the phases of {} processes (pid {}) overlap in time, {} in all: there a gap piece is \
             placed in one range, the deepest and latest-starting, and the others' places are \
             left out; it still counts in the gap time of every phase covering it.",
            processes.len(),
            processes
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            fmt_ns(*overlap_ns)
        ),
        Note::UnknownValues {
            samples,
            unknown_ns,
            metrics,
        } => format!(
            "{samples} sample(s), {} in all, lack a value the idle test needs (null in the trace, \
             of {}): neither idle nor busy, excluded from idle time and gaps.",
            fmt_ns(*unknown_ns),
            metrics.join(", ")
        ),
    }
}

/// Where a full scale came from, in the report's words.
pub fn full_scale_source_text(s: FullScaleSource) -> &'static str {
    match s {
        FullScaleSource::Given => "--full-scale",
        FullScaleSource::Heatmap => "the recording's heatmap",
        FullScaleSource::Ratio => "ratio",
        FullScaleSource::Percent => "percent",
        FullScaleSource::PeakInTrace => "peak in this trace",
        FullScaleSource::NeverAboveZero => "default (the metric is never above 0)",
    }
}

/// The text form of a report; `cmd` is the command as the user runs it (for the notes).
pub fn report_text_for(r: &Report, cmd: &str) -> String {
    report_text_with(r, cmd, false)
}

/// [`report_text_for`]; with `lines`, the HOST sections name each function's lines after it.
pub fn report_text_with(r: &Report, cmd: &str, lines: bool) -> String {
    let mut o = String::new();
    o.push_str(&format!("cufall report: {}\n", r.trace));
    for g in &r.gpus {
        let chip = if g.chip.is_empty() {
            String::new()
        } else {
            format!(" ({})", g.chip)
        };
        let name = cufall_text::name(&g.name);
        o.push_str(&format!("  GPU {}: {name}{chip}\n", g.device.0));
    }
    if r.metrics.is_empty() {
        o.push_str(&format!(
            "  duration {}, NVML only (no GPU counters sampled)\n",
            fmt_ns(r.end_ns - r.start_ns)
        ));
    } else {
        o.push_str(&format!(
            "  duration {}, sampling interval {}, metrics: {}\n",
            fmt_ns(r.end_ns - r.start_ns),
            fmt_ns(r.interval_ns),
            r.metrics.join(", ")
        ));
    }
    match &r.activity {
        Some(a) => o.push_str(&format!(
            "  idle = {} below {} ({:.0}% of full scale {}, from {}){}; gaps: idle for at least {}\n",
            a.label(),
            fmt_num(r.idle_threshold),
            a.idle_below * 100.0,
            fmt_num(Some(a.full_scale)),
            full_scale_source_text(a.full_scale_source),
            a.also_low_clause(),
            fmt_ns(r.min_gap_ns)
        )),
        None => o.push_str("  idle: not measured (no GPU counters in this recording)\n"),
    }
    if r.nvtx_captured {
        o.push_str(&phase_domains_text(&r.phase_domains));
    }
    for n in &r.notes {
        o.push_str(&format!("  note: {}\n", note_text(n, cmd)));
    }
    o.push_str(&capture_text(&r.capture));
    for w in &r.warnings {
        o.push_str(&format!("  warning: {w}\n"));
    }

    let all: Vec<&PhaseReport> = std::iter::once(&r.whole_run)
        .chain(r.phases.iter())
        .collect();
    o.push_str("\nPHASES (NVTX ranges, host-side durations)\n");
    let mut t = TextTable::new(&["phase", "count", "total", "p50", "p99", "idle"]);
    for p in &all {
        t.row(vec![
            phase_label(p),
            p.count.to_string(),
            fmt_ns(p.total_ns),
            fmt_ns(p.p50_ns),
            fmt_ns(p.p99_ns),
            fmt_pct(p.idle_fraction),
        ]);
    }
    o.push_str(&t.render("  "));

    o.push_str(&per_device_text(r, &all));
    o.push_str(&kernels_text(r));
    if let Some(c) = &r.capture_cost {
        o.push_str(&capture_cost_text(c));
    }
    o.push_str(&gaps_text(r));
    o.push_str(&host_text(r, cmd, lines));

    o.push_str("\nDROPS (time without samples, never counted as idle)\n");
    if r.drops.is_empty() {
        o.push_str("  none\n");
    } else {
        let mut t = TextTable::new(&["gpu", "drops", "time", "lost samples", "reasons"]);
        for d in &r.drops {
            t.row(vec![
                d.device.0.to_string(),
                d.count.to_string(),
                fmt_ns(d.dropped_ns),
                d.lost_samples.to_string(),
                d.by_reason
                    .iter()
                    .map(|(k, r)| format!("{k} ×{} ({})", r.count, fmt_ns(r.dropped_ns)))
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
        }
        o.push_str(&t.render("  "));
    }

    o.push_str("\nVERDICT\n");
    for p in &all {
        let path = cufall_text::name(&p.path);
        o.push_str(&format!("  {path}: {}\n", verdict_text(&p.verdict)));
    }
    o.push_str(&host_verdict_text(r));
    // Names from the recording reach the terminal only escaped.
    cufall_text::escape_lines(&o).into_owned()
}

fn domains_list(ds: &[DomainCount]) -> String {
    ds.iter()
        .map(|d| {
            let lib = d.library.map_or(String::new(), |l| format!(", {l}"));
            let name = if d.domain.is_empty() {
                "the default domain"
            } else {
                d.domain.as_str()
            };
            format!("{name} ({}{lib})", ranges_text(d.ranges))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which NVTX domains made the phases and which were left out, with the `--phases` value that
/// adds them: one or two lines.
pub fn phase_domains_text(d: &PhaseDomains) -> String {
    let used = if d.used.is_empty() {
        "none recorded".to_string()
    } else {
        domains_list(&d.used)
    };
    let mut o = if d.phases == crate::select::PhaseSelect::default().to_string() {
        format!("  phases: the program's NVTX ranges: {used}\n")
    } else {
        format!(
            "  phases: NVTX ranges chosen by `--phases {}`: {used}\n",
            d.phases
        )
    };
    if let Some(include) = &d.include_left_out {
        o.push_str(&format!(
            "  not phases: {}; make them phases with `--phases {include}`\n",
            domains_list(&d.left_out)
        ));
    }
    o
}

/// The trace's capture problems, one line per kind (nothing for a clean capture).
pub fn capture_text(lines: &[CaptureLine]) -> String {
    let mut o = String::new();
    for l in lines {
        let head = match l.severity {
            Severity::Problem => "capture problem",
            Severity::Info => "capture",
            Severity::Unknown => "capture event",
        };
        o.push_str(&format!("  {head}: {}\n", capture::line_text(l)));
    }
    o
}

/// The PER DEVICE table: every phase on every device.
fn per_device_text(r: &Report, all: &[&PhaseReport]) -> String {
    let mut o = String::new();
    o.push_str("\nPER DEVICE (metric columns: mean / peak)\n");
    let mut header: Vec<String> = vec![
        "phase".into(),
        "gpu".into(),
        "idle".into(),
        "dropped".into(),
        "activity".into(),
    ];
    header.extend(r.metrics.iter().cloned());
    if r.nvml_captured {
        header.extend(["power W", "SM MHz", "mem MHz", "nvidia-smi util"].map(String::from));
    }
    let hdr: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = TextTable::new(&hdr);
    let mean_peak = |s: &crate::report::Stat| format!("{} / {}", fmt_num(s.mean), fmt_num(s.peak));
    for p in all {
        for d in &p.devices {
            let mut row = vec![
                phase_label(p),
                d.device.0.to_string(),
                fmt_pct(d.idle_fraction),
                fmt_ns(d.dropped_ns),
                mean_peak(&d.activity),
            ];
            row.extend(d.metrics.iter().map(mean_peak));
            if r.nvml_captured {
                row.push(fmt_num(d.power_w));
                row.push(fmt_num(d.sm_clock_mhz));
                row.push(fmt_num(d.mem_clock_mhz));
                row.push(
                    d.nvml_gpu_util_pct
                        .map_or("-".into(), |v| format!("{v:.0}%")),
                );
            }
            t.row(row);
        }
    }
    o.push_str(&t.render("  "));
    o
}

/// The IDLE GAPS section: gaps by place, then the longest.
fn gaps_text(r: &Report) -> String {
    let mut o = String::new();
    let total: Nanos = r.gap_groups.iter().map(|g| g.totals.total_ns).sum();
    let count: u64 = r.gap_groups.iter().map(|g| g.totals.count).sum();
    if r.activity.is_none() {
        o.push_str("\nIDLE GAPS: not measured (no GPU counters in this recording)\n");
    } else {
        // A stretch that crosses a phase's edge is cut there: each piece is a gap of its place.
        let cut = if count == r.gap_count {
            String::new()
        } else {
            format!(
                " in {} idle stretch(es) cut where phases begin and end (a piece may be shorter \
                 than the minimum)",
                r.gap_count
            )
        };
        o.push_str(&format!(
            "\nIDLE GAPS of at least {}: {} gap(s){cut}, {} in all (drops excluded)\n",
            fmt_ns(r.min_gap_ns),
            count,
            fmt_ns(total),
        ));
    }
    if r.gap_groups.is_empty() {
        o.push_str("  none\n");
    } else {
        let mut t = TextTable::new(&[
            "where",
            "gaps",
            "total",
            "mean",
            "max",
            "no kernel",
            "kernel resident",
            "gpus",
        ]);
        for g in &r.gap_groups {
            t.row(vec![
                g.place.clone(),
                g.totals.count.to_string(),
                fmt_ns(g.totals.total_ns),
                fmt_ns(g.mean_ns),
                fmt_ns(g.max_ns),
                g.totals.no_kernel_ns.map_or("-".into(), fmt_ns),
                g.totals.kernel_resident_ns.map_or("-".into(), fmt_ns),
                g.devices
                    .iter()
                    .map(|d| d.0.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ]);
        }
        o.push_str(&t.render("  "));
        let whole = if count == r.gap_count {
            " gap(s)"
        } else {
            " idle stretch(es), whole, with the places they cross"
        };
        o.push_str(&format!(
            "\n  longest {}{whole} (at: time since the first sample)\n",
            r.gaps.len().min(LONGEST_GAPS_SHOWN),
        ));
        let mut t = TextTable::new(&[
            "gpu",
            "at",
            "duration",
            "where",
            "no kernel",
            "kernel resident",
        ]);
        for g in r.gaps.iter().take(LONGEST_GAPS_SHOWN) {
            t.row(vec![
                g.device.0.to_string(),
                fmt_ns(g.offset_ns),
                fmt_ns(g.duration_ns),
                g.place.to_string(),
                g.no_kernel_ns.map_or("-".into(), fmt_ns),
                g.kernel_resident_ns.map_or("-".into(), fmt_ns),
            ]);
        }
        o.push_str(&t.render("  "));
    }
    o
}

/// The KERNELS section: per phase and device, the kernels by GPU time inside the phase.
/// Left out where kernels were not captured, or not tabled (`--kernels 0`).
fn kernels_text(r: &Report) -> String {
    if r.kernels.is_empty() {
        return String::new();
    }
    let mut o = String::new();
    o.push_str(
        "\nKERNELS by GPU time in each phase (time inside the phase; share of its GPU-busy time; \
         mean, p50, max of whole launches)\n",
    );
    for t in &r.kernels {
        o.push_str(&kernel_table_text(t));
        o.push_str(&graph_lines(t, &r.graphs));
    }
    o
}

/// Under a kernel table, what each CUDA graph listed in it runs (learnt when it was
/// instantiated): `graph 5 = 24 nodes: 12 × nvjet_..., 11 × triton_..., ...`.
fn graph_lines(
    k: &crate::kernels::KernelTable,
    graphs: &[crate::capture::GraphContents],
) -> String {
    let mut o = String::new();
    for row in &k.rows {
        let Some(id) = row
            .name
            .strip_prefix("graph ")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(g) = graphs.iter().find(|g| g.graph_id == id) else {
            continue;
        };
        let mut kernels: Vec<String> = g
            .kernels
            .iter()
            .take(3)
            .map(|(name, n)| format!("{n} × {}", crate::names::short_kernel_name(name)))
            .collect();
        if g.kernels.len() > 3 {
            kernels.push(format!("{} more", g.kernels.len() - 3));
        }
        o.push_str(&format!(
            "    graph {id} = {} nodes: {}\n",
            g.nodes,
            kernels.join(", ")
        ));
    }
    o
}

fn kernel_table_text(k: &crate::kernels::KernelTable) -> String {
    let mut o = format!(
        "  {}, GPU {}: busy {}, {} launch(es) of {} kernel(s)\n",
        cufall_text::name(&k.phase),
        k.device.0,
        fmt_ns(k.busy_ns),
        k.count,
        k.names
    );
    let mut t = TextTable::new(&["kernel", "count", "total", "share", "mean", "p50", "max"]);
    for row in &k.rows {
        t.row(vec![
            row.short_name.clone(),
            row.count.to_string(),
            fmt_ns(row.total_ns),
            fmt_pct(row.share),
            fmt_ns(row.mean_ns),
            fmt_ns(row.p50_ns),
            fmt_ns(row.max_ns),
        ]);
    }
    if !k.rows.is_empty() {
        o.push_str(&t.render("    "));
    }
    let rest = k.names.saturating_sub(k.rows.len() as u64);
    if rest > 0 {
        let listed: Nanos = k.rows.iter().map(|r| r.total_ns).sum();
        o.push_str(&format!(
            "    … {rest} more kernel(s), {} in all\n",
            fmt_ns(k.total_ns - listed)
        ));
    }
    o
}

/// How many frames a line of the HOST sections names.
pub const HOST_FRAMES_SHOWN: usize = 3;

/// A frame as the report names it: `function (file:line)`, escaped and cut to
/// [`cufall_text::NAME_WIDTH`] (names come from the profiled program).
pub fn frame_text(f: &crate::host::FrameShare) -> String {
    cufall_text::name(&crate::host::frame_label(&f.function, &f.file, f.line)).into_owned()
}

/// One gap's host as a line: `thread 571 (MainThread) in main (torch_phases.py) 87% waiting`.
pub fn gap_host_text(h: &crate::host::GapHost) -> String {
    let who = h.thread.as_ref().map_or("all threads".into(), thread_who);
    format!("{who} in {}", functions_text(&h.functions, false))
}

/// A function as the report names it: `function (file)`, escaped and cut like a frame.
pub fn function_text(f: &crate::host::FunctionShare) -> String {
    cufall_text::name(&crate::host::frame_label(&f.function, &f.file, None)).into_owned()
}

/// `build_tree (tree.py) 41%, synchronize (torch/cuda/__init__.py) 22% waiting`: the first
/// functions of a list with their shares; with `lines`, each function's lines after it
/// (`[:88 30%, :90 11%]`).
fn functions_text(fns: &[crate::host::FunctionShare], lines: bool) -> String {
    if fns.is_empty() {
        return "no frames".into();
    }
    fns.iter()
        .take(HOST_FRAMES_SHOWN)
        .map(|f| {
            let waiting = f.samples > 0
                && f.idle_samples as f64 >= crate::host::WAITING_FROM * f.samples as f64;
            let under = if lines && !f.lines.is_empty() {
                let ls: Vec<String> = f
                    .lines
                    .iter()
                    .take(HOST_FRAMES_SHOWN)
                    .map(|l| {
                        let at = l.line.map_or("?".into(), |n| n.to_string());
                        format!(":{at} {:.0}%", l.share * 100.0)
                    })
                    .collect();
                format!(" [{}]", ls.join(", "))
            } else {
                String::new()
            };
            format!(
                "{} {:.0}%{}{under}",
                function_text(f),
                f.share * 100.0,
                if waiting { " waiting" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `thread 1234 (MainThread)`, or `thread 1234` for a thread without a name.
fn thread_who(t: &crate::host::HostThread) -> String {
    if t.name.is_empty() {
        format!("thread {}", t.tid)
    } else {
        format!("thread {} ({})", t.tid, cufall_text::name(&t.name))
    }
}

/// Who a view is: `thread 1234 (MainThread)` or `all 3 threads`.
fn view_who(v: &crate::host::HostView) -> String {
    match &v.thread {
        Some(t) => thread_who(t),
        None => format!("all {} thread(s)", v.threads),
    }
}

/// The remarks after a view's frames: GIL, samples missed, stacks without frames.
fn view_tail(v: &crate::host::HostView) -> String {
    let mut o = String::new();
    if v.samples == 0 {
        return "; no sample in this time".into();
    }
    if let Some(g) = v.gil_held {
        o.push_str(&format!("; GIL held {:.0}%", g * 100.0));
    }
    if v.idle > 0.0 {
        o.push_str(&format!("; idle {:.0}%", v.idle * 100.0));
    }
    if v.sampled < 0.95 {
        o.push_str(&format!("; sampled {:.0}%", v.sampled * 100.0));
    }
    if v.no_frames > 0 {
        o.push_str(&format!("; {} sample(s) without frames", v.no_frames));
    }
    o
}

/// The lines of one class: the launching thread (else all threads) in its innermost frames,
/// its inclusive frames, and all threads when there is a launching thread and others.
fn host_class_text(c: &crate::host::HostClass, with_inclusive: bool, lines: bool) -> String {
    let main = c.launching.as_ref().unwrap_or(&c.all);
    let gaps = if c.gaps > 0 {
        format!("{} gap(s), ", c.gaps)
    } else {
        String::new()
    };
    let mut o = format!(
        "  {} ({gaps}{}): {} in {}{}\n",
        cufall_text::name(&c.name),
        fmt_ns(c.time_ns),
        view_who(main),
        functions_text(&main.self_functions, lines),
        view_tail(main)
    );
    if with_inclusive && main.samples > 0 {
        o.push_str(&format!(
            "      inclusive: {}\n",
            functions_text(&main.inclusive_functions, lines)
        ));
    }
    if c.launching.is_some() && c.all.threads > 1 {
        o.push_str(&format!(
            "      {} in {}{}\n",
            view_who(&c.all),
            functions_text(&c.all.self_functions, lines),
            view_tail(&c.all)
        ));
    }
    o
}

/// Under the verdicts, one line per host-bound place and phase's gaps, from the host samples:
/// what the launching thread (all threads where there is none) was doing in the gap time.
fn host_verdict_text(r: &Report) -> String {
    let Some(h) = &r.host else {
        return String::new();
    };
    let bound: Vec<&crate::host::HostClass> =
        h.gap_classes.iter().filter(|c| c.host_bound).collect();
    if bound.is_empty() {
        return String::new();
    }
    let mut o = String::from(
        "  where the host was in the host-bound gaps (the launching thread; shares of the gap \
         time):\n",
    );
    for c in bound {
        let of = match c.scope {
            crate::host::HostScope::PhaseGaps => " (its gaps)",
            _ => "",
        };
        o.push_str(&format!(
            "    {}{of}: {}\n",
            cufall_text::name(&c.name),
            host_causes_text(c)
        ));
    }
    o
}

/// `2.72 s of gaps: host computing 62% (build_tree 41%), waiting on a thread, a lock or a sleep
/// 14% (wait in schedule), launching 3%, unsampled 10%`: causes under half a percent left out.
pub fn host_causes_text(c: &crate::host::HostClass) -> String {
    let v = c.launching.as_ref().unwrap_or(&c.all);
    let mut parts: Vec<String> = Vec::new();
    for s in &v.causes.causes {
        if s.share < 0.005 {
            continue;
        }
        let names = if s.cause == crate::causes::HostCause::Computing {
            2
        } else {
            1
        };
        let named: Vec<String> = s
            .top
            .iter()
            .take(names)
            .filter(|n| n.share >= 0.005)
            .map(|n| {
                if s.cause == crate::causes::HostCause::Computing {
                    format!("{} {:.0}%", cufall_text::name(&n.name), n.share * 100.0)
                } else {
                    cufall_text::name(&n.name).into_owned()
                }
            })
            .collect();
        let named = if named.is_empty() {
            String::new()
        } else {
            format!(" ({})", named.join(", "))
        };
        parts.push(format!(
            "{} {:.0}%{named}",
            s.cause.words(),
            s.share * 100.0
        ));
    }
    parts.push(format!("unsampled {:.0}%", v.causes.unsampled * 100.0));
    format!("{} of gaps: {}", fmt_ns(c.time_ns), parts.join(", "))
}

/// The HOST sections: where the host was during each class of gaps with a host-bound share, and
/// during each phase; or why the recording has no host stacks.
fn host_text(r: &Report, cmd: &str, lines: bool) -> String {
    let Some(h) = &r.host else {
        return match &r.host_stacks_off {
            Some(why) => format!(
                "\nHOST: no host stacks in this recording ({why}): where the host was during \
                 the gaps is not known; `{cmd} record` samples them where it may read the \
                 program's memory\n"
            ),
            None => String::new(),
        };
    };
    let from = match h.launching_from {
        crate::host::LaunchingFrom::ApiCalls => "the thread with the most kernel launches",
        crate::host::LaunchingFrom::NvtxRanges => "the thread of the phase's NVTX ranges",
        crate::host::LaunchingFrom::KernelProcess => {
            "the thread with the most running samples in the process that launched most of the \
             phase's kernels"
        }
        crate::host::LaunchingFrom::RunningSamples => {
            "the thread with the most running samples in the phase"
        }
        crate::host::LaunchingFrom::Unknown => {
            "unknown (no API calls, NVTX ranges or running samples)"
        }
    };
    let rate = match h.interval_source {
        crate::host::IntervalSource::Asked => "",
        crate::host::IntervalSource::Observed => " (as observed)",
    };
    let mut o = format!(
        "\nHOST during the gaps (places and phases whose gaps have time without a kernel \
         resident)\n  host stacks: {} sample(s) of {} thread(s) in {} process(es), one every {}{rate}; a \
         share is the samples in the gaps over the samples expected there; launching thread: \
         {from}\n",
        h.samples,
        h.threads,
        h.processes,
        fmt_ns(h.interval_ns)
    );
    let (places, phase_gaps): (Vec<_>, Vec<_>) = h
        .gap_classes
        .iter()
        .partition(|c| c.scope == crate::host::HostScope::Place);
    if places.is_empty() {
        o.push_str("  none\n");
    }
    for c in places {
        o.push_str(&host_class_text(c, true, lines));
    }
    if !phase_gaps.is_empty() {
        o.push_str("\n  the gaps of each phase\n");
        for c in phase_gaps {
            o.push_str(&host_class_text(c, false, lines));
        }
    }
    o.push_str("\nHOST per phase (all of the phase's time)\n");
    for c in &h.phases {
        o.push_str(&host_class_text(c, false, lines));
    }
    o
}

/// Phases the text lists; `--json` has them all.
const PHASES_SHOWN: usize = 12;

#[allow(
    clippy::cast_possible_truncation,
    reason = "a duration in ns, rounded: far inside i64"
)]
fn whole_ns(v: f64) -> i64 {
    v.round() as i64
}

fn kinds_text(kinds: &[crate::capcost::EventKind]) -> String {
    let words: Vec<&str> = kinds.iter().map(|k| k.plural()).collect();
    words.join(", ")
}

/// The CAPTURE COST section of `cufall report`.
pub fn capture_cost_text(c: &crate::capcost::CaptureCost) -> String {
    let mut o = String::from(
        "\nCAPTURE COST (host time cufall's capture added, from its cost per event measured in \
         the program and after it)\n",
    );
    if !c.calibrated {
        o.push_str(
            "  capture cost unknown: this recording holds no measurement of capture's cost \
             (made before cufall measured it)\n",
        );
        return o;
    }
    for p in c.phases.iter().take(PHASES_SHOWN) {
        let path = cufall_text::name(&p.path);
        let line = match (p.added_ns, p.per_step_ns) {
            (Some(_), Some(step)) => format!(
                "capture added about {} per step ({} of host time); gaps shorter than that may \
                 be cufall's own",
                fmt_ns(whole_ns(step)),
                fmt_pct(p.host_fraction)
            ),
            (Some(added), None) => format!(
                "capture added about {} in all ({} of the run)",
                fmt_ns(whole_ns(added)),
                fmt_pct(p.host_fraction)
            ),
            (None, _) => {
                let part = if p.known_ns > 0.0 && p.steps > 0 {
                    format!(
                        "; the measured kinds alone add about {} per step",
                        fmt_ns(whole_ns(p.known_ns / p.steps as f64))
                    )
                } else {
                    String::new()
                };
                format!(
                    "capture cost unknown: {} have no measured cost{part}",
                    kinds_text(&p.unknown)
                )
            }
        };
        o.push_str(&format!("  {path}: {line}\n"));
    }
    if c.phases.len() > PHASES_SHOWN {
        o.push_str(&format!(
            "  ... {} more phase(s) in `--json` (capture_cost)\n",
            c.phases.len() - PHASES_SHOWN
        ));
    }
    let per: Vec<String> = c
        .kinds
        .iter()
        .map(|k| match k.ns_per_event {
            Some(ns) => format!("{} {}", k.kind.plural(), fmt_ns(whole_ns(ns))),
            None => format!("{} unknown", k.kind.plural()),
        })
        .collect();
    o.push_str(&format!("  cost per event: {}\n", per.join("; ")));
    o
}
