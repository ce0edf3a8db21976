//! `cufall report TRACE [NODE_TRACE ...]`: per-phase counters, idle gaps and their causes, over
//! the analysis crate (`cufall_analysis`).

use super::{io_err, json_err};
use crate::args::analysis::AnalysisArgs;
use crate::argv0::command_name;
use anyhow::Result;
use cufall_analysis::kernels::KERNEL_ROWS_SHOWN;
use cufall_analysis::render::{LONGEST_GAPS_SHOWN, report_text_with};
use cufall_analysis::report::{ReportOptions, build_report};
use cufall_trace::Trace;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

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

/// `cufall report` on stdout.
pub fn run(args: &ReportArgs) -> Result<ExitCode> {
    report_to(args, &mut std::io::stdout().lock())
}
