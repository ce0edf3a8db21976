//! `cufall diff A B`, or `cufall diff A1 A2 --vs B1 B2` for runs of several nodes: two
//! recordings compared phase by phase.

use super::{io_err, json_err};
use crate::args::analysis::AnalysisArgs;
use crate::argv0::command_name;
use anyhow::Result;
use cufall_analysis::diff::{build_diff, diff_text_for};
use cufall_analysis::report::ReportOptions;
use cufall_trace::Trace;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

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

/// `cufall diff` on stdout.
pub fn run(args: &DiffArgs) -> Result<ExitCode> {
    diff_to(args, &mut std::io::stdout().lock())
}
