//! The `cufall view` and `cufall replay` subcommands: their arguments and what they run over
//! the terminal viewer (`cufall_viewer`); the look flags they share with the live view are
//! [`crate::args::look`].

use crate::args::look::{DisplayArgs, LookArgs};
use anyhow::{Context, Result, bail};
use cufall_analysis::AnalysisError;
use cufall_analysis::select::{PhaseSelect, domain_counts};
use cufall_live::feed;
use cufall_trace::model::Nanos;
use cufall_trace::{Table, Trace};
use cufall_viewer::app;
use cufall_viewer::draw;
use cufall_viewer::input::Input;
use cufall_viewer::print;
use cufall_viewer::replay::{self, Recording};
use cufall_viewer::state::{GapMark, HeatmapState, Mode, PendingGaps};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// `cufall view TRACE`: browse a recording.
#[derive(clap::Args, Debug)]
pub struct ViewArgs {
    /// The trace folder (as written by `cufall record -o NAME.cufall`).
    pub trace: PathBuf,
    #[command(flatten)]
    pub display: DisplayArgs,
}

/// `cufall replay TRACE`: play a recording through the live view.
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The trace folder (as written by `cufall record -o NAME.cufall`).
    pub trace: PathBuf,
    /// Playback speed: 1 is real time, 10 ten times faster.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    #[command(flatten)]
    pub display: DisplayArgs,
}

fn open(path: &PathBuf, display: &DisplayArgs) -> Result<Recording> {
    let trace = Trace::open(path)?;
    // The view reads neither API calls nor capture rows, but a damaged segment of any table is
    // refused as `info` and `report` refuse it; so are rows of the tables `report` reads and the
    // view does not (a host sample's `gil` of no known kind).
    trace.check()?;
    for table in [Table::Api, Table::Stacks, Table::HostSamples] {
        trace.check_rows(table)?;
    }
    let mut names: Vec<&str> = display
        .heatmaps
        .metrics
        .iter()
        .map(String::as_str)
        .collect();
    if let Some(d) = display.heatmaps.denominator.as_deref() {
        names.push(d);
    }
    trace.check_metrics(&names)?;
    let mut rec = Recording::load(&trace)?;
    sanitise(&trace, &mut rec)?;
    // The phase lane shows the chosen phases only: library ranges are not the program's phases.
    let select = display.phases.select();
    select
        .check_domains(&domain_counts(&rec.nvtx))
        .map_err(AnalysisError::UnknownDomains)?;
    rec.nvtx = select.apply(&rec.nvtx);
    Ok(rec)
}

/// The most gaps the terminal views take from the analysis.
const VIEW_GAPS: usize = 100_000;

/// The recording's idle gaps for the views' `x` / `X` (the first [`VIEW_GAPS`] by device and
/// time): each stretch's pieces (cut where phases begin and end, one place each), each with its
/// status line: GPU, place, length, the share without a kernel resident, and where the host's
/// stacks were. None where the analysis cannot run on the recording (no
/// counters, say): the keys then select nothing.
pub fn gap_marks(path: &std::path::Path, phases: &PhaseSelect) -> Vec<GapMark> {
    let Ok(trace) = Trace::open(path) else {
        return Vec::new();
    };
    let opts = cufall_analysis::report::ReportOptions {
        phases: phases.clone(),
        gap_rows: Some(0),
        kernel_rows: Some(0),
        ..Default::default()
    };
    let mut marks = Vec::new();
    let built = cufall_analysis::report::build_report_with(
        &trace,
        &opts,
        &mut |g| {
            for (k, p) in g.pieces.iter().enumerate() {
                if marks.len() < VIEW_GAPS {
                    marks.push(gap_mark(g, k, p));
                }
            }
        },
        &mut |_, _| {},
    );
    if built.is_err() {
        return Vec::new();
    }
    marks
}

/// [`gap_marks`] on a thread of its own, so that the view opens at once: a long recording's
/// analysis takes as long as `cufall report` of it.
fn gaps_in_background(path: PathBuf, phases: PhaseSelect) -> PendingGaps {
    let pending = PendingGaps::default();
    let slot = Arc::clone(&pending.0);
    // A thread that cannot start leaves the keys without gaps, and the view as it was.
    let _ = std::thread::Builder::new()
        .name("cufall-gaps".into())
        .spawn(move || {
            let _ = slot.set(gap_marks(&path, &phases));
        });
    pending
}

/// The line of piece `k` of stretch `g`: `GPU0 draft → verify 2.03 ms, no kernel 100% · host:
/// thread 571 in main (torch_phases.py:64) 87% waiting`; a stretch of several pieces adds which
/// piece and the stretch's length (`piece 2/3 of 6.20 s`).
fn gap_mark(
    g: &cufall_analysis::report::GapRow,
    k: usize,
    p: &cufall_analysis::report::GapPiece,
) -> GapMark {
    use cufall_analysis::render::{fmt_ns, gap_host_text};
    let mut text = format!(
        "GPU{} {} {}",
        g.device.0,
        cufall_text::name(&p.place),
        fmt_ns(p.duration_ns)
    );
    if g.pieces.len() > 1 {
        text.push_str(&format!(
            " (piece {}/{} of {})",
            k + 1,
            g.pieces.len(),
            fmt_ns(g.duration_ns)
        ));
    }
    if let Some(n) = p.no_kernel_ns.filter(|_| p.duration_ns > Nanos::ZERO) {
        text.push_str(&format!(
            ", no kernel {:.0}%",
            100.0 * n.as_f64() / p.duration_ns.as_f64()
        ));
    }
    match &p.host_frames {
        Some(h) => text.push_str(&format!(" · host: {}", gap_host_text(h))),
        None => text.push_str(" · host: no host samples"),
    }
    GapMark {
        start_ns: p.start_ns,
        end_ns: p.end_ns,
        text,
    }
}

/// Applies what `report` takes from the manifest to the view: an absurd sampling interval or
/// heatmap full scale is replaced by what the samples show, and each is a warning
/// ([`cufall_analysis::manifest`]). Samples that cannot be true the reader left out.
fn sanitise(trace: &Trace, rec: &mut Recording) -> Result<()> {
    let checked = cufall_analysis::manifest::check(trace)?;
    rec.info.interval_ns = checked.interval_ns;
    for h in &mut rec.info.heatmaps {
        h.full_scale = cufall_analysis::manifest::usable_full_scale(h.full_scale);
    }
    rec.warnings.extend(checked.warnings);
    Ok(())
}

/// One frame of `state` as `--print` writes it (the window from `--from/--to` if given).
pub fn frame_text(state: &HeatmapState, display: &LookArgs) -> Result<String> {
    let h = display
        .height
        .unwrap_or_else(|| print::natural_height(state));
    let min = draw::min_height(state);
    if h < min {
        bail!(
            "--height {h} is too low for this trace: its frame needs at least {min} rows (title, \
             legend, one GPU row{}{}, time axis, status, keys); try --height {min}",
            if state.store.devices.len() > 1 {
                ", a line counting the GPUs not shown"
            } else {
                ""
            },
            if state.store.nvtx.is_empty() {
                ""
            } else {
                ", phase lane"
            },
        );
    }
    let mut state = state.clone();
    state.update(Input::Resize(display.width, h));
    if state.mode == Mode::Browse {
        state.fit_all();
    }
    if let Some(note) = display.apply_window(&mut state)? {
        eprintln!("cufall: note: {note}");
    }
    let buf = print::render(&state, display.width, h);
    Ok(if state.options.palette.is_color() {
        print::to_ansi(&buf)
    } else {
        print::to_text(&buf)
    })
}

/// Says on stderr what the reader found wrong with the trace (the interactive view shows it in
/// its status line; a printed frame has none).
fn warn_stderr(rec: &Recording) {
    for w in &rec.warnings {
        eprintln!("cufall: warning: {}", cufall_text::escape(w));
    }
}

/// What `cufall view TRACE --print` writes.
pub fn view_text(args: &ViewArgs) -> Result<String> {
    args.display.look.check()?;
    let rec = open(&args.trace, &args.display)?;
    warn_stderr(&rec);
    let setup = args.display.setup(args.trace.display().to_string());
    let state = app::browse_state(rec, &setup)?;
    args.display.look.check_window(&state)?;
    frame_text(&state, &args.display.look)
}

/// The recording a replay plays, its `--from` checked against its length; with `trim`, only
/// the part in `--from/--to` (times from its start).
fn replay_recording(args: &ReplayArgs, trim: bool) -> Result<Recording> {
    let look = &args.display.look;
    look.check()?;
    let mut rec = open(&args.trace, &args.display)?;
    let extent = rec.extent();
    look.check_extent(extent)?;
    if let (Some((first, last)), true) =
        (extent, trim && (look.from.is_some() || look.to.is_some()))
    {
        let lo = first.saturating_add(look.from.unwrap_or(0));
        let hi = look
            .to
            .map_or(last.saturating_add(1), |t| first.saturating_add(t));
        rec.keep_between(lo, hi);
    }
    Ok(rec)
}

/// What `cufall replay TRACE --print` writes: the last frame after the whole recording went
/// through the live feed (as fast as it goes), showing the `--from/--to` window if given.
pub fn replay_text(args: &ReplayArgs) -> Result<String> {
    let rec = replay_recording(args, false)?;
    warn_stderr(&rec);
    let setup = args.display.setup(args.trace.display().to_string());
    let (tx, rx) = feed(rec.info.clone(), usize::MAX / 2);
    replay::play(rec, f64::INFINITY, REPLAY_CHUNK, &tx);
    let mut state = app::live_state(&rx, &setup, Mode::Replay)?;
    for ev in rx.drain(Duration::ZERO) {
        state.update(Input::Feed(ev));
    }
    frame_text(&state, &args.display.look)
}

pub fn run_view(args: &ViewArgs) -> Result<ExitCode> {
    if args.display.look.print {
        super::print(&view_text(args)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    args.display.look.check()?;
    let rec = open(&args.trace, &args.display)?;
    let setup = args.display.setup(args.trace.display().to_string());
    let mut state = app::browse_state(rec, &setup)?;
    args.display.look.check_window(&state)?;
    state.pending_gaps = Some(gaps_in_background(
        args.trace.clone(),
        args.display.phases.select(),
    ));
    if let Some((w, h)) = app::terminal_size() {
        state.update(Input::Resize(w, h));
    }
    state.fit_all();
    // The status line shows the window the view shows.
    args.display.look.apply_window(&mut state)?;
    app::interactive(state, None, 30)?;
    Ok(ExitCode::SUCCESS)
}

/// Feed capacity for replays: a few seconds of 10 ms chunks for 8 GPUs.
const REPLAY_CAPACITY: usize = 8192;
const REPLAY_CHUNK: Nanos = Nanos(10_000_000);

pub fn run_replay(args: &ReplayArgs) -> Result<ExitCode> {
    run_replay_titled(args, None)
}

/// [`run_replay`] with `title` in place of the trace's path in the title row (the banner of
/// the replay that a machine without a GPU gets).
pub fn run_replay_titled(args: &ReplayArgs, title: Option<String>) -> Result<ExitCode> {
    if args.speed.is_nan() || args.speed <= 0.0 || !args.speed.is_finite() {
        bail!(
            "--speed must be a positive number (1 = real time), not {}",
            args.speed
        );
    }
    if args.display.look.print {
        super::print(&replay_text(args)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    // Interactively, the replay plays only the part in `--from/--to`.
    let rec = replay_recording(args, true)?;
    let setup = args
        .display
        .setup(title.unwrap_or_else(|| args.trace.display().to_string()));
    let info = rec.info.clone();
    let (tx, rx) = feed(info, REPLAY_CAPACITY);
    let speed = args.speed;
    let producer = std::thread::Builder::new()
        .name("cufall-replay".into())
        .spawn(move || replay::play(rec, speed, REPLAY_CHUNK, &tx))
        .context("could not start the replay thread")?;
    let mut state = app::live_state(&rx, &setup, Mode::Replay)?;
    state.pending_gaps = Some(gaps_in_background(
        args.trace.clone(),
        args.display.phases.select(),
    ));
    let result = app::interactive(state, Some(&rx), 30);
    rx.close();
    let _ = producer.join();
    result?;
    Ok(ExitCode::SUCCESS)
}
