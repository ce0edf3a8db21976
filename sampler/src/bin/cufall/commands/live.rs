//! The bare `cufall` command: a live terminal heatmap of every selected GPU. The sampling
//! session (`cufall_sampler::session`) feeds the viewer (`cufall_viewer::live`) through a
//! `cufall_live` feed; nothing is written to disk.

use anyhow::{Result, anyhow};
use cufall_live::{LiveEvent, LiveReceiver, LiveSender};
use cufall_sampler::args::capture::CaptureRequest;
use cufall_sampler::args::duration::parse_positive_duration;
use cufall_sampler::args::look::{LookArgs, live_options};
use cufall_sampler::args::selection::SelectionArgs;
use cufall_sampler::program::{exit_code, stop_child};
use cufall_sampler::session::Prepared;
use cufall_sampler::session::{self, CounterPolicy};
use cufall_viewer::state::Mode;
use std::process::{Command, ExitCode};
use std::time::Duration;

/// Flags of the live view (used when no subcommand is given).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LiveArgs {
    #[command(flatten)]
    pub selection: SelectionArgs,
    #[command(flatten)]
    pub look: LookArgs,
    /// With --print: how long to sample before printing the frame (with a program: at most
    /// this long; the frame is printed when the program exits).
    #[arg(long, value_name = "TIME", default_value = "2s", value_parser = parse_positive_duration, requires = "print")]
    pub print_after: Duration,
    /// What to capture from the program (nvtx, kernels, memcpy, api, graphs, graph-nodes, all,
    /// none): its NVTX ranges become the view's phase lane.
    #[arg(
        long,
        value_name = "KINDS",
        default_value = "nvtx,kernels,memcpy,graphs"
    )]
    pub capture: String,
    /// A program to run and watch (after `--`): the view shows its phases and ends when it
    /// exits; its exit code becomes cufall's.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// How long the live view waits for the program's processes after it exits (`record` has
/// `--capture-wait`).
const DEFAULT_CAPTURE_WAIT: Duration = Duration::from_secs(10);

/// Events the feed holds for a view that falls behind: a few seconds of 8 GPUs.
const FEED_CAPACITY: usize = 8192;

pub fn run(args: &LiveArgs) -> Result<ExitCode> {
    let (cfg, selection) = args.selection.to_config(CounterPolicy::BestEffort)?;
    if let Some(program) = args.command.first()
        && cufall_sampler::program::which(program).is_none()
    {
        anyhow::bail!(
            "cannot run `{program}`: no such program (not a file, and not found on PATH)"
        );
    }
    let capture = CaptureRequest::from_flags(&args.capture, DEFAULT_CAPTURE_WAIT, &args.command)?;
    let prepared = session::prepare(&cfg)?;
    let (heatmaps, relative) = prepared.heatmaps_for(&selection);
    for line in relative {
        eprintln!("cufall: {line}");
    }
    let (tx, rx) = cufall_live::feed(prepared.feed_info(heatmaps), FEED_CAPACITY);
    if !args.command.is_empty() {
        return run_program(args, prepared, capture, tx, rx);
    }
    let handle = prepared.start(Some(tx), None)?;
    let shown = show(args, rx, false);
    let failed = handle.error();
    drop(handle.stop());
    shown?;
    if let Some(e) = failed {
        return Err(anyhow!("sampling stopped with an error: {e}"));
    }
    Ok(ExitCode::SUCCESS)
}

/// `cufall [flags] -- CMD`: the live view of a program under capture. A watcher thread owns the
/// program and the session: when the program exits it waits for the program's processes to
/// finish sending, then stops the session, whose end ends the view; when the user quits the
/// view first, it stops the program.
fn run_program(
    args: &LiveArgs,
    prepared: Prepared,
    capture: CaptureRequest,
    tx: LiveSender,
    rx: LiveReceiver,
) -> Result<ExitCode> {
    let recorder = match &capture.library {
        Some(lib) => Some(prepared.start_capture(capture.kinds, None, lib.clone())?),
        None => None,
    };
    let watch = tx.clone();
    let handle = prepared.start(Some(tx), None)?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| anyhow!("no program to run"))?;
    let mut child = match Command::new(program)
        .args(rest)
        .envs(recorder.as_ref().map(|r| r.child_env()).unwrap_or_default())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            drop(handle.stop());
            anyhow::bail!("cannot run `{program}`: {e}");
        }
    };
    let name = program.clone();
    let wait = capture.wait;
    let watcher = std::thread::spawn(move || {
        let mut status = None;
        while status.is_none() {
            if watch.is_closed() {
                status = stop_child(&mut child);
                break;
            }
            status = child.try_wait().ok().flatten();
            std::thread::sleep(Duration::from_millis(25));
        }
        let code = status.map(exit_code);
        watch.send(LiveEvent::Message(match code {
            Some(c) => format!("{name} exited with code {c}"),
            None => format!("{name} ended"),
        }));
        if let Some(r) = recorder {
            r.wait_for_processes(wait);
            drop(r.finish());
        }
        let failed = handle.error();
        drop(handle.stop());
        (code, failed)
    });
    let shown = show(args, rx, true);
    let (code, failed) = watcher
        .join()
        .map_err(|_| anyhow!("the thread watching the program failed"))?;
    shown?;
    if let Some(e) = failed {
        return Err(anyhow!("sampling stopped with an error: {e}"));
    }
    Ok(ExitCode::from(
        u8::try_from(code.unwrap_or(1).clamp(0, 255)).unwrap_or(1),
    ))
}

/// Runs the view on the feed: one printed frame with `--print`, else the interactive view
/// (which, with `end_with_feed`, also ends when the session does).
fn show(args: &LiveArgs, rx: LiveReceiver, end_with_feed: bool) -> Result<()> {
    let options = live_options(&args.look);
    if args.look.print {
        let after = args.print_after;
        let frame = cufall_viewer::live::print_after(
            &rx,
            &options.setup,
            Mode::Live,
            after,
            args.look.width,
            args.look.height.unwrap_or(0),
        )?;
        cufall_sampler::commands::print(&frame)
    } else if end_with_feed {
        Ok(cufall_viewer::live::run_until_end(rx, options)?)
    } else {
        Ok(cufall_viewer::live::run(rx, options)?)
    }
}
