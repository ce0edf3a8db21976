//! Arguments and entry points of `cufall report`, `cufall diff` and `cufall export`, over the
//! analysis crate (`cufall_analysis`).

use super::number::{parse_fraction, parse_full_scale};
use crate::argv0::command_name;
use crate::duration::parse_positive_ns;
use anyhow::Result;
use cufall_analysis::diff::{build_diff, diff_text_for};
use cufall_analysis::export::{self, DEFAULT_MAX_COUNTER_POINTS, ExportOptions, Format};
use cufall_analysis::kernels::KERNEL_ROWS_SHOWN;
use cufall_analysis::render::{LONGEST_GAPS_SHOWN, fmt_ns, report_text_with};
use cufall_analysis::report::{DEFAULT_IDLE_BELOW, ReportOptions, build_report};
use cufall_analysis::select::PhaseSelect;
use cufall_trace::Trace;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// How idle time is measured; shared by report, diff and export.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct AnalysisArgs {
    /// Activity metric whose low stretches count as idle. Default: the recording's first
    /// heatmap (with its denominator and full scale), else its first metric.
    #[arg(long)]
    pub metric: Option<String>,
    /// Idle means below this fraction of the metric's full scale (0.05 = 5 %).
    #[arg(long, default_value_t = DEFAULT_IDLE_BELOW, value_name = "FRACTION", value_parser = parse_fraction)]
    pub idle_below: f64,
    /// The activity value that means fully busy. Default: the heatmap's; 1 for a ratio; 100
    /// for a percentage; else the peak in the trace.
    #[arg(long, value_name = "VALUE", value_parser = parse_full_scale)]
    pub full_scale: Option<f64>,
    /// Shortest idle interval reported as a gap, e.g. `50us`, `1ms`. Default: 5 sampling
    /// intervals.
    #[arg(long, value_parser = parse_positive_ns, value_name = "DURATION")]
    pub min_gap: Option<i64>,
    #[command(flatten)]
    pub phases: PhasesArg,
}

/// Which NVTX ranges are phases; shared by report, diff, export, view, replay and gui.
#[derive(clap::Args, Debug, Clone, PartialEq, Default)]
pub struct PhasesArg {
    /// Which NVTX ranges are phases: comma-separated `program` (the program's own domains: the
    /// default), `all`, `domain:NAME` (`domain:default` for the unnamed domain), `name:PATTERN`
    /// (`*` matches anything), `depth:N`. Library domains (CCCL, TSL, NCCL, ...) are phases only
    /// when named, e.g. `--phases program,domain:CCCL`.
    #[arg(long = "phases", value_name = "SELECTION", value_parser = parse_phases)]
    pub phases: Option<PhaseSelect>,
}

impl PhasesArg {
    /// The selection given, or the program's own ranges.
    pub fn select(&self) -> PhaseSelect {
        self.phases.clone().unwrap_or_default()
    }
}

fn parse_phases(s: &str) -> Result<PhaseSelect, String> {
    s.parse::<PhaseSelect>().map_err(|e| e.to_string())
}

/// A fraction strictly between 0 and 1: `--idle-below 5` is a mistake for 0.05, not 500 %.
impl AnalysisArgs {
    pub fn options(&self) -> ReportOptions {
        ReportOptions {
            metric: self.metric.clone(),
            full_scale: self.full_scale,
            idle_below: self.idle_below,
            min_gap_ns: self.min_gap,
            also_low: None,
            gap_rows: None,
            phases: self.phases.select(),
            ..ReportOptions::default()
        }
    }
}

/// `cufall report TRACE`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct ReportArgs {
    /// The trace folder (as written by `cufall record -o NAME.cufall`).
    pub trace: PathBuf,
    /// More recordings of the same run, made on other nodes (one `cufall record` per node):
    /// read together, each GPU as host:GPU n, on the hosts' wall clocks, with each phase's
    /// times per node and the node whose phases end last.
    #[arg(value_name = "NODE_TRACE")]
    pub nodes: Vec<PathBuf>,
    #[command(flatten)]
    pub analysis: AnalysisArgs,
    /// Print JSON instead of text tables.
    #[arg(long)]
    pub json: bool,
    /// Kernels listed per phase and GPU, by GPU time. Default: 5 in text, every kernel in
    /// --json; 0 leaves the kernels out.
    #[arg(long, value_name = "N")]
    pub kernels: Option<usize>,
    /// HOST sections: name each function's source lines after it (`main (app.py) 82% [:64 70%,
    /// :66 12%]`); --json always has them.
    #[arg(long)]
    pub lines: bool,
}

/// `cufall diff A B`, or `cufall diff A1 A2 ... --vs B1 B2 ...` for runs of several nodes.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct DiffArgs {
    /// The first trace (the baseline), then the second, compared with it. With --vs: every
    /// node's recording of the baseline run.
    #[arg(value_name = "TRACE", required = true)]
    pub traces: Vec<PathBuf>,
    /// The recordings of the run compared with the baseline, one per node (`cufall diff A1 A2
    /// --vs B1 B2`): each side read as `cufall report` reads the nodes of one run, then phases
    /// compared over all nodes and per node (paired by host, or in the order given where the
    /// sides name other hosts), with each side's lagging node.
    #[arg(long = "vs", value_name = "TRACE", num_args = 1..)]
    pub vs: Vec<PathBuf>,
    #[command(flatten)]
    pub analysis: AnalysisArgs,
    /// Print JSON instead of text tables.
    #[arg(long)]
    pub json: bool,
}

/// `cufall export TRACE --format parquet|csv|perfetto`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct ExportArgs {
    /// The trace folder.
    pub trace: PathBuf,
    /// parquet and csv: one file per table (samples, drops, nvml, nvtx, kernels, api, capture,
    /// phases, gaps) in a folder; perfetto: one JSON file that opens in ui.perfetto.dev.
    #[arg(long, value_enum)]
    pub format: Format,
    /// Output folder (parquet, csv) or file (perfetto). Default: next to the trace,
    /// `NAME-parquet/`, `NAME-csv/` or `NAME.perfetto.json`.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Replace existing output files.
    #[arg(long)]
    pub force: bool,
    /// Perfetto: most counter points per GPU and metric (at least 1); denser samples are
    /// averaged.
    #[arg(
        long,
        default_value_t = DEFAULT_MAX_COUNTER_POINTS,
        value_name = "N",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    pub max_counter_points: usize,
    #[command(flatten)]
    pub analysis: AnalysisArgs,
}

use super::output_err as io_err;

/// JSON goes straight to the output; serde_json's failures there are the writer's.
fn json_err(e: serde_json::Error) -> anyhow::Error {
    io_err(std::io::Error::from(e))
}

/// Runs `cufall report`, writing to `out`.
pub fn report_to(args: &ReportArgs, out: &mut dyn Write) -> Result<ExitCode> {
    if !args.nodes.is_empty() {
        return nodes_report_to(args, out);
    }
    let trace = Trace::open(&args.trace)?;
    // The text lists the longest gaps only; JSON lists every gap.
    let opts = ReportOptions {
        gap_rows: (!args.json).then_some(LONGEST_GAPS_SHOWN),
        kernel_rows: args.kernels.or((!args.json).then_some(KERNEL_ROWS_SHOWN)),
        ..args.analysis.options()
    };
    let report = build_report(&trace, &opts)?;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report).map_err(json_err)?;
        writeln!(out).map_err(io_err)?;
    } else {
        out.write_all(report_text_with(&report, &command_name(), args.lines).as_bytes())
            .map_err(io_err)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `cufall report A B ...`: several nodes' recordings of one run, read together.
fn nodes_report_to(args: &ReportArgs, out: &mut dyn Write) -> Result<ExitCode> {
    let mut traces = Vec::with_capacity(1 + args.nodes.len());
    for p in std::iter::once(&args.trace).chain(&args.nodes) {
        traces.push(Trace::open(p)?);
    }
    let refs: Vec<&Trace> = traces.iter().collect();
    let opts = ReportOptions {
        gap_rows: Some(0),
        kernel_rows: Some(0),
        ..args.analysis.options()
    };
    let report = cufall_analysis::nodes::build_nodes(&refs, &opts)?;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report).map_err(json_err)?;
        writeln!(out).map_err(io_err)?;
    } else {
        out.write_all(cufall_analysis::nodes::nodes_text(&report).as_bytes())
            .map_err(io_err)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The two sides of `cufall diff`: the positional traces, or with `--vs` the positional ones
/// against those after it.
fn diff_sides(args: &DiffArgs) -> Result<(&[PathBuf], &[PathBuf])> {
    if !args.vs.is_empty() {
        return Ok((&args.traces, &args.vs));
    }
    match args.traces.as_slice() {
        [a, b] => Ok((std::slice::from_ref(a), std::slice::from_ref(b))),
        [_] => anyhow::bail!(
            "cufall diff compares two recordings: give the second too (`{cmd} diff A B`), or the other run's nodes after --vs (`{cmd} diff A1 A2 --vs B1 B2`)",
            cmd = command_name()
        ),
        more => anyhow::bail!(
            "{} recordings given without --vs: to compare two runs of several nodes, put the second run's recordings after --vs (`{cmd} diff A1 A2 --vs B1 B2`)",
            more.len(),
            cmd = command_name()
        ),
    }
}

/// Runs `cufall diff`, writing to `out`.
pub fn diff_to(args: &DiffArgs, out: &mut dyn Write) -> Result<ExitCode> {
    let (side_a, side_b) = diff_sides(args)?;
    let (a, b) = match (side_a, side_b) {
        ([a], [b]) => (Trace::open(a)?, Trace::open(b)?),
        _ => return nodes_diff_to(side_a, side_b, args, out),
    };
    // The text compares gap totals, not single gaps; JSON keeps both reports whole.
    let opts = ReportOptions {
        gap_rows: (!args.json).then_some(0),
        ..args.analysis.options()
    };
    let d = build_diff(&a, &b, &opts)?;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &d).map_err(json_err)?;
        writeln!(out).map_err(io_err)?;
    } else {
        out.write_all(diff_text_for(&d, &command_name()).as_bytes())
            .map_err(io_err)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `cufall diff A1 A2 --vs B1 B2`: two runs of several nodes each.
fn nodes_diff_to(
    side_a: &[PathBuf],
    side_b: &[PathBuf],
    args: &DiffArgs,
    out: &mut dyn Write,
) -> Result<ExitCode> {
    let open = |paths: &[PathBuf]| -> Result<Vec<Trace>> {
        paths.iter().map(|p| Ok(Trace::open(p)?)).collect()
    };
    let (a, b) = (open(side_a)?, open(side_b)?);
    // Per-phase figures and lags only: no gap is listed and no kernel is tabled.
    let opts = ReportOptions {
        gap_rows: Some(0),
        kernel_rows: Some(0),
        ..args.analysis.options()
    };
    let (ra, rb): (Vec<&Trace>, Vec<&Trace>) = (a.iter().collect(), b.iter().collect());
    let d = cufall_analysis::nodes_diff::build_nodes_diff(&ra, &rb, &opts)?;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &d).map_err(json_err)?;
        writeln!(out).map_err(io_err)?;
    } else {
        out.write_all(cufall_analysis::nodes_diff::nodes_diff_text(&d).as_bytes())
            .map_err(io_err)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `cufall export`, writing a summary to `out`.
pub fn export_to(args: &ExportArgs, out: &mut dyn Write) -> Result<ExitCode> {
    let trace = Trace::open(&args.trace)?;
    let opts = ExportOptions {
        format: args.format,
        output: args.output.clone(),
        force: args.force,
        max_counter_points: args.max_counter_points,
        report: args.analysis.options(),
    };
    let summary = export::export(&trace, &opts)?;
    for w in &summary.warnings {
        eprintln!("cufall: warning: {}", cufall_text::escape(w));
    }
    for f in &summary.files {
        // The output is named after the trace folder, whose name may hold anything.
        writeln!(
            out,
            "wrote {}",
            cufall_text::escape(&f.display().to_string())
        )
        .map_err(io_err)?;
    }
    if let Some(b) = summary.counter_bucket_ns {
        writeln!(
            out,
            "counters averaged over {} buckets (at most {} points per GPU and metric; raise with --max-counter-points)",
            fmt_ns(b),
            args.max_counter_points
        )
        .map_err(io_err)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `cufall report` on stdout.
pub fn run_report(args: &ReportArgs) -> Result<ExitCode> {
    report_to(args, &mut std::io::stdout().lock())
}

/// `cufall diff` on stdout.
pub fn run_diff(args: &DiffArgs) -> Result<ExitCode> {
    diff_to(args, &mut std::io::stdout().lock())
}

/// `cufall export`, its summary on stdout.
pub fn run_export(args: &ExportArgs) -> Result<ExitCode> {
    export_to(args, &mut std::io::stdout().lock())
}
