//! `cufall`: the command-line entry point. Each subcommand lives in its own module, named after
//! it: the library's `cufall_sampler::commands`, or the binary's own [`commands`] (the live view
//! and `gui`, which the library never uses); this file only parses arguments, dispatches, and
//! turns every failure into one clear message and a non-zero exit.
// Truncating casts on the data path (tests aside) are errors in CI: convert with `try_from`, or
// say why not.
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]

mod commands;

use clap::{Parser, Subcommand};
use commands::live;
use cufall_sampler::commands::{
    control, diff, export, info, metrics, probe, record, report, serve, view,
};
use cufall_sampler::hint;
use std::process::ExitCode;

/// High-frequency GPU counter sampler and timeline viewer for NVIDIA GPUs.
#[derive(Parser, Debug)]
#[command(name = "cufall", version, about, long_about = None)]
#[command(args_conflicts_with_subcommands = true)]
#[command(after_help = "Examples:
  cufall --color                                   live heatmap of every GPU
  cufall --color -- python train.py                the same, with the program's NVTX phases
  cufall record -o run.cufall -- ./my_app          record counters, NVTX ranges and kernels
  cufall report run.cufall                         idle gaps and counters per phase
  cufall replay examples/h200-matmul-copy.cufall   a real recording, no GPU needed

Durations: a number with a unit (10us, 2.5ms, 30s, 5m, 1m30s) or a bare number of seconds.")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Without a subcommand: the live terminal heatmap of every selected GPU.
    #[command(flatten)]
    live: live::LiveArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Summarise a recorded trace: devices, metrics, duration, samples, drops, NVTX ranges.
    #[command(after_help = "Example:\n  cufall info examples/h200-matmul-copy.cufall")]
    Info(info::InfoArgs),
    /// Record GPU counters (PM sampling) and NVML into a trace, optionally while running a program.
    #[command(after_help = "Examples:
  cufall record -o decode.cufall -- ./target/release/specdec --context 65536
  cufall record -o idle.cufall --duration 10s --interval 50us
  cufall record -o calls.cufall --capture all -- python serve.py")]
    Record(Box<record::RecordArgs>),
    /// Open or close the capture window of a running `record --capture-range signal`; pause or
    /// resume the GPU counters of a running `record` or `serve` (for ncu, Nsight, DCGM).
    #[command(after_help = "Examples:
  cufall record -o serve.cufall --capture-range signal -- python serve.py   (terminal 1)
  cufall control start; sleep 10; cufall control stop                       (terminal 2)
  cufall control pause --for 10m      release the counters; sampling resumes by itself
  cufall control resume               sample them again now")]
    Control(control::ControlArgs),
    /// Export every GPU's counters to Prometheus (GET /metrics), with a flight recorder of the
    /// last minutes (POST /dump writes it to a trace).
    #[command(
        after_help = "Without --interval, serve samples at the finest interval the cost model keeps
within about 0.3 of a core per GPU (200us for the default pair, 50us for the DRAM metric
alone on an H200), not record's one core: it runs for weeks beside the node's work.

Examples:
  cufall serve                                     every GPU, http://0.0.0.0:9401/metrics
  cufall serve --listen 127.0.0.1:9401 --keep 10m --dump-dir /var/lib/cufall
  curl -X POST http://127.0.0.1:9401/dump          write the last minutes to a trace"
    )]
    Serve(Box<serve::ServeArgs>),
    /// List the metrics PM sampling offers on a GPU, with units and sub-metrics.
    #[command(after_help = "Examples:\n  cufall metrics\n  cufall metrics --filter tensor")]
    Metrics(metrics::MetricsArgs),
    /// Measure PM-sampling facts of this GPU (for the docs); prints JSON.
    #[command(hide = true)]
    ProbeSampler(probe::ProbeArgs),
    /// Run a program and sample its host stacks into a trace, no GPU part (benchmarks).
    #[command(hide = true)]
    ProbeHostStacks(cufall_sampler::hoststacks::probe::ProbeHostArgs),
    /// Time what capture's CUDA tracing adds per launch (`record` starts it after the program).
    #[command(hide = true)]
    CalibrateCapture(cufall_sampler::capcal::ChildArgs),
    /// Browse a recording in the terminal heatmap (zoom, pan, jump between phases and drops).
    #[command(after_help = "Examples:
  cufall view examples/h200-matmul-copy.cufall --color
  cufall view run.cufall --print --from 1s --to 1.5s --width 160")]
    View(view::ViewArgs),
    /// Play a recording through the live terminal heatmap, in real time or faster.
    #[command(after_help = "Examples:
  cufall replay examples/h200-matmul-copy.cufall --color
  cufall replay run.cufall --speed 10")]
    Replay(view::ReplayArgs),
    /// Per-phase counters, idle gaps and their causes in a recorded trace.
    #[command(after_help = "Examples:
  cufall report examples/h200-specdec-0.5b-graphs-off.cufall
  cufall report run.cufall --metric sm__pipe_tensor_cycles_active.avg --min-gap 100us --json")]
    Report(report::ReportArgs),
    /// Compare two recordings phase by phase, biggest changes first (two runs of several nodes:
    /// each node's recording, the second run's after --vs).
    #[command(after_help = "Examples:
  cufall diff before.cufall after.cufall
  cd examples && cufall diff h200-specdec-0.5b-graphs-off.cufall h200-specdec-0.5b-graphs-on.cufall
  cufall diff before-node-a.cufall before-node-b.cufall --vs after-node-a.cufall after-node-b.cufall")]
    Diff(diff::DiffArgs),
    /// Export a recording as Parquet or CSV tables, or as a Perfetto trace.
    #[command(after_help = "Examples:
  cufall export run.cufall --format perfetto        then open run.perfetto.json in ui.perfetto.dev
  cufall export run.cufall --format csv -o run-csv --force")]
    Export(export::ExportArgs),
    /// Open recordings in a desktop timeline window (two: compared, aligned at a phase; the
    /// nodes of one run: on the wall clock).
    #[cfg(feature = "gui")]
    #[command(after_help = "Examples:
  cufall gui examples/h200-specdec-0.5b-graphs-off.cufall
  cufall gui before.cufall after.cufall --align verify
  cufall gui run-node-a.cufall run-node-b.cufall run-node-c.cufall --align wall")]
    Gui(commands::gui::GuiArgs),
}

/// The command line, with a `--version` that names the trace formats this cufall reads and
/// writes (a user with an old recording learns at once whether it opens).
fn parse_cli() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    use cufall_trace::model::{SCHEMA_FIRST, SCHEMA_MAJOR, SCHEMA_MINOR};
    let version = format!(
        "{} (writes trace format {SCHEMA_MAJOR}.{SCHEMA_MINOR}; reads {SCHEMA_FIRST} to \
         {SCHEMA_MAJOR}.{SCHEMA_MINOR}, and newer {SCHEMA_MAJOR}.x with a warning)",
        env!("CARGO_PKG_VERSION")
    );
    // `--version` (not `-V`) also says where the capture library is, which `record -- CMD`
    // loads into the program: an installation can be checked without a GPU or a program.
    let long = if std::env::args_os().any(|a| a == "--version") {
        match cufall_sampler::recorder::find_library() {
            Ok(path) => format!("{version}\ncapture library: {}", path.display()),
            Err(e) => format!("{version}\ncapture library: {e}"),
        }
    } else {
        version.clone()
    };
    // Made once per process; clap keeps them for the life of the command.
    let version: &'static str = Box::leak(version.into_boxed_str());
    let long: &'static str = Box::leak(long.into_boxed_str());
    let matches = Cli::command()
        .version(version)
        .long_version(long)
        .get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    install_panic_hook();
    let cli = parse_cli();
    let Some(command) = cli.command else {
        // The bare command: the live view; on a machine without a GPU, in a terminal, the
        // bundled recording instead.
        let result = live::run(&cli.live);
        if let Err(e) = &result
            && hint::is_no_gpu(e)
            && let Some(demo) = no_gpu_replay(&cli.live, e)
        {
            return finish(demo);
        }
        return finish(result);
    };
    let result = match command {
        Command::Info(args) => info::run(&args),
        Command::Record(args) => cufall_sampler::exit_code(record::run(&args)),
        Command::Serve(args) => cufall_sampler::exit_code(serve::run(&args)),
        Command::Control(args) => control::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Metrics(args) => cufall_sampler::exit_code(metrics::run(&args)),
        Command::ProbeSampler(args) => cufall_sampler::exit_code(probe::run(&args)),
        Command::ProbeHostStacks(args) => {
            cufall_sampler::exit_code(cufall_sampler::hoststacks::probe::run(&args))
        }
        Command::CalibrateCapture(args) => {
            cufall_sampler::capcal::child_main(&args).map(|()| ExitCode::SUCCESS)
        }
        Command::View(args) => view::run_view(&args),
        Command::Replay(args) => view::run_replay(&args),
        Command::Report(args) => report::run(&args),
        Command::Diff(args) => diff::run(&args),
        Command::Export(args) => export::run(&args),
        #[cfg(feature = "gui")]
        Command::Gui(args) => commands::gui::run(args),
    };
    finish(result)
}

/// The live view on a machine without an NVIDIA GPU, run by a person at a terminal: the
/// bundled recording plays at once under a title that says it is a recording, and the reason
/// is printed when it ends. `None` (the error stands, with its hint and exit code) for a
/// program to run, `--print`, no terminal, or no bundled recording.
fn no_gpu_replay(live: &live::LiveArgs, why: &anyhow::Error) -> Option<anyhow::Result<ExitCode>> {
    use std::io::IsTerminal;
    if !live.command.is_empty()
        || live.look.print
        || !std::io::stdin().is_terminal()
        || !std::io::stdout().is_terminal()
    {
        return None;
    }
    let recording = hint::bundled_recording()?;
    #[derive(clap::Parser)]
    struct Replay {
        #[command(flatten)]
        args: view::ReplayArgs,
    }
    let mut args = match <Replay as clap::Parser>::try_parse_from([
        std::ffi::OsStr::new("cufall"),
        recording.as_os_str(),
    ]) {
        Ok(r) => r.args,
        Err(e) => return Some(Err(e.into())),
    };
    args.display.look = live.look.clone();
    let title = format!(
        "NO NVIDIA GPU FOUND: a recording made on an H200 ({}), not this machine",
        recording.display()
    );
    let result = view::run_replay_titled(&args, Some(title));
    let cmd = cufall_sampler::argv0::command_name();
    eprintln!(
        "cufall: {}",
        cufall_text::escape_lines(&format!(
            "{}. That was the bundled recording {}; `{cmd} replay {}` plays it again.",
            hint::message_without_advice(why).trim_end_matches('.'),
            recording.display(),
            recording.display()
        ))
    );
    Some(result)
}

/// The exit code, or one line on stderr saying what went wrong and what to do. Output cut off
/// by its reader (`cufall report --json | head`) ends quietly, as other command-line tools do.
fn finish(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) if hint::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // A message may quote a name from a trace; it reaches the terminal escaped.
            let msg = hint::message(&e, &cufall_sampler::argv0::command_name());
            eprintln!("cufall: {}", cufall_text::escape_lines(&msg));
            ExitCode::FAILURE
        }
    }
}

/// The most columns of a panic's message shown.
const PANIC_MESSAGE_WIDTH: usize = 300;

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
            eprintln!("{}", panic_line(&msg, &at));
        }
    }));
}

/// The line a panic prints. The message may quote text from a recording (a slice of a name):
/// escaped and cut like any name, so that a panic cannot reach the terminal raw or print
/// megabytes.
fn panic_line(msg: &str, at: &str) -> String {
    format!(
        "cufall: internal error ({}{at}). This is a bug in cufall; please report it with the command you ran.",
        cufall_text::fit(msg, PANIC_MESSAGE_WIDTH)
    )
}

#[cfg(test)]
mod tests {
    use super::panic_line;

    #[test]
    fn a_panic_line_escapes_and_cuts_what_it_quotes() {
        let name = format!("k\u{1b}[2J\u{202e}{}", "é".repeat(100_000));
        let line = panic_line(
            &format!("byte index 3 is not a char boundary of `{name}`"),
            "",
        );
        assert!(
            !line.contains('\u{1b}') && !line.contains('\u{202e}'),
            "{line}"
        );
        assert!(line.contains("\\e[2J"), "{line}");
        assert!(line.len() < 1_000, "{} bytes", line.len());
    }
}
