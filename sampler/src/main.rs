//! `cufall`: the command-line entry point. Each subcommand lives in its own module (or crate) and
//! this file only parses arguments, dispatches, and turns every failure into one clear message
//! and a non-zero exit.

mod info;
mod live_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// High-frequency GPU counter sampler and timeline viewer for NVIDIA GPUs.
#[derive(Parser, Debug)]
#[command(name = "cufall", version, about, long_about = None)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Without a subcommand: the live terminal heatmap of every selected GPU.
    #[command(flatten)]
    live: live_cmd::LiveArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Summarise a recorded trace: devices, metrics, duration, samples, drops, NVTX ranges.
    Info(info::InfoArgs),
    /// Record GPU counters (PM sampling) and NVML into a trace, optionally while running a program.
    Record(Box<cufall_sampler::record::RecordArgs>),
    /// List the metrics PM sampling offers on a GPU, with units and sub-metrics.
    Metrics(cufall_sampler::metrics_cmd::MetricsArgs),
    /// Measure PM-sampling facts of this GPU (for the docs); prints JSON.
    #[command(hide = true)]
    ProbeSampler(cufall_sampler::probe::ProbeArgs),
    /// Browse a recording in the terminal heatmap (zoom, pan, jump between phases and drops).
    View(cufall_viewer::cli::ViewArgs),
    /// Play a recording through the live terminal heatmap, in real time or faster.
    Replay(cufall_viewer::cli::ReplayArgs),
    /// Per-phase counters, idle gaps and their causes in a recorded trace.
    Report(cufall_analysis::cli::ReportArgs),
    /// Compare two recordings phase by phase, biggest changes first.
    Diff(cufall_analysis::cli::DiffArgs),
    /// Export a recording as Parquet or CSV tables, or as a Perfetto trace.
    Export(cufall_analysis::cli::ExportArgs),
}

fn main() -> ExitCode {
    install_panic_hook();
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        // The bare command: the live view.
        return match live_cmd::run(&cli.live) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("cufall: {e:#}");
                ExitCode::FAILURE
            }
        };
    };
    let result = match command {
        Command::Info(args) => info::run(&args),
        Command::Record(args) => cufall_sampler::exit_code(cufall_sampler::record::run(&args)),
        Command::Metrics(args) => {
            cufall_sampler::exit_code(cufall_sampler::metrics_cmd::run(&args))
        }
        Command::ProbeSampler(args) => cufall_sampler::exit_code(cufall_sampler::probe::run(&args)),
        Command::View(args) => cufall_viewer::cli::run_view(&args),
        Command::Replay(args) => cufall_viewer::cli::run_replay(&args),
        Command::Report(args) => cufall_analysis::cli::run_report(&args).map_err(Into::into),
        Command::Diff(args) => cufall_analysis::cli::run_diff(&args).map_err(Into::into),
        Command::Export(args) => cufall_analysis::cli::run_export(&args).map_err(Into::into),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cufall: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A panic is a bug in cufall: say so in one line, without a backtrace, and point to the report.
/// Panics that libraries raise and catch themselves (the trace reader guards its decoder this
/// way) are not shown.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown cause".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        // Write nothing for caught panics on worker threads; the main thread reports failures.
        if std::thread::current().name() == Some("main") && !cufall_trace::in_guarded_decode() {
            eprintln!(
                "cufall: internal error ({msg}{at}). This is a bug in cufall; please report it with the command you ran."
            );
        }
    }));
}
