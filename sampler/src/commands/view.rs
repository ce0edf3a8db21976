//! The `cufall view` and `cufall replay` subcommands: their arguments and what they run over
//! the terminal viewer (`cufall_viewer`); the live view shares the look flags.

use crate::args::analysis::PhasesArg;
use crate::args::duration::parse_offset_ns;
use anyhow::{Context, Result, bail};
use cufall_analysis::AnalysisError;
use cufall_analysis::select::{PhaseSelect, domain_counts};
use cufall_live::feed;
use cufall_trace::model::Nanos;
use cufall_trace::model::NvtxRange;
use cufall_trace::{Table, Trace};
use cufall_viewer::app::{self, ViewSetup};
use cufall_viewer::bucket::Agg;
use cufall_viewer::color::Palette;
use cufall_viewer::draw;
use cufall_viewer::input::Input;
use cufall_viewer::live;
use cufall_viewer::print;
use cufall_viewer::replay::{self, Recording};
use cufall_viewer::state::{GapMark, HeatmapState, Mode, PendingGaps, ViewOptions};
use cufall_viewer::store::HeatmapOverrides;
use cufall_viewer::store::NvtxFilter;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Which heatmaps a recording shows (the live command takes these from the sampler's flags).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct HeatmapArgs {
    /// Show this metric (repeat for several heatmaps); default: the heatmaps of the recording.
    #[arg(long = "metric", value_name = "METRIC")]
    pub metrics: Vec<String>,
    /// Divide every sample by this metric (shown as a percentage).
    #[arg(long, value_name = "METRIC", conflicts_with = "no_denominator")]
    pub denominator: Option<String>,
    /// Show raw values, ignoring the recording's denominator.
    #[arg(long)]
    pub no_denominator: bool,
    /// The value at the top of the colour scale (default: 100% for ratios and percentages, the
    /// largest value in view otherwise).
    #[arg(long, value_name = "X", value_parser = crate::args::number::parse_full_scale)]
    pub full_scale: Option<f64>,
}

/// How the heatmap looks and where it goes; shared by the live view, `replay` and `view`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LookArgs {
    /// Colour (else shade glyphs that work on any terminal; NO_COLOR turns colour off).
    #[arg(long)]
    pub color: bool,
    /// Force a palette instead of detecting it from COLORTERM/TERM.
    #[arg(long, value_enum, value_name = "PALETTE")]
    pub palette: Option<Palette>,
    /// What each cell shows of the samples in its time bucket.
    #[arg(long, value_enum, default_value_t = Agg::Mean)]
    pub agg: Agg,
    /// Do not split GPU bands into max/avg/min-across-SMs rows.
    #[arg(long)]
    pub no_spread: bool,
    /// Write one frame to stdout instead of opening the interactive view.
    #[arg(long)]
    pub print: bool,
    /// Width of the printed frame, in columns.
    #[arg(long, default_value_t = 120, requires = "print")]
    pub width: u16,
    /// Height of the printed frame (default: enough for every GPU band).
    #[arg(long, requires = "print")]
    pub height: Option<u16>,
    /// Start of the window, from the start of the data (`1.5s`, `200ms`, `50us`; a bare number
    /// is seconds).
    #[arg(long, value_name = "TIME", value_parser = parse_offset_ns)]
    pub from: Option<i64>,
    /// End of the window, from the start of the data.
    #[arg(long, value_name = "TIME", value_parser = parse_offset_ns)]
    pub to: Option<i64>,
}

impl LookArgs {
    pub fn view_options(&self) -> ViewOptions {
        ViewOptions {
            agg: self.agg,
            palette: Palette::from_env(self.color, self.palette),
            spread: !self.no_spread,
        }
    }
}

/// Everything `view` and `replay` take about the picture.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DisplayArgs {
    #[command(flatten)]
    pub heatmaps: HeatmapArgs,
    #[command(flatten)]
    pub look: LookArgs,
    /// The NVTX ranges the phase lane shows.
    #[command(flatten)]
    pub phases: PhasesArg,
}

impl DisplayArgs {
    pub fn setup(&self, source: String) -> ViewSetup {
        let h = &self.heatmaps;
        ViewSetup {
            view: self.look.view_options(),
            overrides: HeatmapOverrides {
                metrics: h.metrics.clone(),
                denominator: h.denominator.clone(),
                no_denominator: h.no_denominator,
                full_scale: h.full_scale,
            },
            source,
            // `open` already keeps the chosen phases of the recording only.
            phases: None,
        }
    }
}

/// The smallest frame the view draws (below it, the screen says "too small").
pub use cufall_viewer::draw::{MAX_HEIGHT, MAX_WIDTH, MIN_HEIGHT, MIN_WIDTH};

impl LookArgs {
    /// Checks the flags that need no data: a window that ends after it starts, a printable size.
    pub fn check(&self) -> Result<()> {
        if let Some(b) = self.to
            && b <= self.from.unwrap_or(0)
        {
            match self.from {
                Some(a) => bail!(
                    "--to ({}) must be later than --from ({})",
                    Nanos(b).compact(),
                    Nanos(a).compact()
                ),
                None => bail!(
                    "--to ({}) must be later than the start of the data: give the end of the \
                     window as a time from the start, e.g. --to 2s",
                    Nanos(b).compact()
                ),
            }
        }
        if self.print && self.width < MIN_WIDTH {
            bail!(
                "--width {} is too narrow: a frame needs at least {MIN_WIDTH} columns",
                self.width
            );
        }
        if let Some(h) = self.height.filter(|h| *h < MIN_HEIGHT) {
            bail!("--height {h} is too low: a frame needs at least {MIN_HEIGHT} rows");
        }
        if self.print && self.width > MAX_WIDTH {
            bail!(
                "--width {} is too wide: a printed frame has at most {MAX_WIDTH} columns",
                self.width
            );
        }
        if let Some(h) = self.height.filter(|h| *h > MAX_HEIGHT) {
            bail!("--height {h} is too tall: a printed frame has at most {MAX_HEIGHT} rows");
        }
        Ok(())
    }

    /// Checks `--from` against the data: a window that starts after the end shows nothing.
    pub fn check_window(&self, state: &HeatmapState) -> Result<()> {
        self.check_extent(state.store.first_ns.zip(state.store.last_ns))
    }

    /// [`LookArgs::check_window`] against a recording's first and last timestamps.
    pub fn check_extent(&self, extent: Option<(i64, i64)>) -> Result<()> {
        if let (Some(from), Some((first, last))) = (self.from, extent)
            && from >= last - first
        {
            bail!(
                "--from {} is past the end: the recording lasts {}",
                Nanos(from).compact(),
                Nanos(last - first).compact()
            );
        }
        Ok(())
    }

    /// Applies `--from/--to` to a view whose origin is the start of the data. A window shorter
    /// than one column at the finest zoom (the recording's bin) is refused; otherwise returns
    /// what the view shows instead of what was asked, if it differs: a `--to` past the end of
    /// the data stops at the end, and the view's zoom steps cover the window with whole columns.
    pub fn apply_window(&self, state: &mut HeatmapState) -> Result<Option<String>> {
        if self.from.is_none() && self.to.is_none() {
            return Ok(None);
        }
        let (Some(first), Some(last)) = (state.store.first_ns, state.store.last_ns) else {
            return Ok(None);
        };
        let length = last.saturating_sub(first);
        let from = self.from.unwrap_or(0);
        let asked_to = self.to.unwrap_or(length);
        let to = asked_to.min(length.max(from.saturating_add(1)));
        let bin = state.store.base_ns;
        if to - from < bin {
            bail!(
                "the window {} – {} is {}, shorter than one column of the view at its finest \
                 zoom ({}, the recording's time bin): give a window of at least {}",
                Nanos(from).compact(),
                Nanos(asked_to).compact(),
                Nanos(asked_to - from).compact(),
                Nanos(bin).compact(),
                Nanos(bin).compact()
            );
        }
        state.set_window(first.saturating_add(from), first.saturating_add(to));
        let mut notes = Vec::new();
        if asked_to > length {
            notes.push(format!(
                "--to {} is past the end of the data (it lasts {}): the window ends there",
                Nanos(asked_to).compact(),
                Nanos(length).compact()
            ));
        }
        let (a, b) = state.window();
        let (a, b) = (a - first, b - first);
        if (a, b) != (from, to) {
            notes.push(format!(
                "the view shows {} – {} for the window {} – {}: its zoom steps fit the window \
                 in whole columns of {}",
                Nanos(a).compact(),
                Nanos(b).compact(),
                Nanos(from).compact(),
                Nanos(to).compact(),
                Nanos(state.col_ns()).compact()
            ));
        }
        Ok((!notes.is_empty()).then(|| notes.join("; ")))
    }
}

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
    if let Some(n) = p.no_kernel_ns.filter(|_| p.duration_ns > 0) {
        text.push_str(&format!(
            ", no kernel {:.0}%",
            100.0 * n as f64 / p.duration_ns as f64
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
    replay::play(rec, f64::INFINITY, REPLAY_CHUNK_NS, &tx);
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
const REPLAY_CHUNK_NS: i64 = 10_000_000;

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
        .spawn(move || replay::play(rec, speed, REPLAY_CHUNK_NS, &tx))
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

/// The live view's options from the look flags (the heatmaps come with the sampler's feed). Its
/// phase lane shows the program's own ranges, as ranges arrive: those of libraries' NVTX domains
/// (CUB's `CCCL`, XLA's `TSL`, ...) are not phases.
pub fn live_options(look: &LookArgs) -> live::LiveOptions {
    let program = PhaseSelect::default();
    live::LiveOptions {
        setup: ViewSetup {
            view: look.view_options(),
            overrides: HeatmapOverrides::default(),
            source: String::new(),
            phases: Some(NvtxFilter(Arc::new(move |r: &NvtxRange| {
                program.keeps(&r.domain, &r.name)
            }))),
        },
        fps: 30,
    }
}
