//! `cufall export TRACE --format parquet|csv|perfetto`: a recording as tables or a Perfetto
//! trace.

use super::io_err;
use crate::args::analysis::AnalysisArgs;
use anyhow::Result;
use cufall_analysis::export::{self, DEFAULT_MAX_COUNTER_POINTS, ExportOptions, Format};
use cufall_analysis::render::fmt_ns;
use cufall_trace::Trace;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

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

/// `cufall export`, its summary on stdout.
pub fn run(args: &ExportArgs) -> Result<ExitCode> {
    export_to(args, &mut std::io::stdout().lock())
}
