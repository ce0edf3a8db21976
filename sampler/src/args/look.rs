//! The look flags of the terminal heatmap, which `view`, `replay` and the live view share: which
//! heatmaps, how they look, the window and the frame size, and the live view's options from
//! them.

use crate::args::analysis::PhasesArg;
use crate::args::duration::parse_offset_ns;
use anyhow::{Result, bail};
use cufall_analysis::select::PhaseSelect;
use cufall_trace::model::Nanos;
use cufall_trace::model::NvtxRange;
use cufall_viewer::app::ViewSetup;
use cufall_viewer::bucket::Agg;
use cufall_viewer::color::Palette;
use cufall_viewer::live;
use cufall_viewer::state::{HeatmapState, ViewOptions};
use cufall_viewer::store::HeatmapOverrides;
use cufall_viewer::store::NvtxFilter;
use std::sync::Arc;

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
