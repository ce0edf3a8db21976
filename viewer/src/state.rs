//! The state of a heatmap view: its data ([`Store`]), the time window, zoom, selection and
//! display options. Drawing (`crate::draw`) only reads it; [`HeatmapState::update`] is the only
//! way it changes.

use crate::bucket::{Agg, Summary};
use crate::color::Palette;
use crate::input::Input;
use crate::store::Store;

/// Where the data comes from, which decides what "now" means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The sampler, live.
    Live,
    /// A recording played back through the live feed.
    Replay,
    /// A recording loaded whole, browsed.
    Browse,
}

/// Display options chosen on the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewOptions {
    pub agg: Agg,
    pub palette: Palette,
    /// Split each band into the max/avg/min-across-SMs rows when they were recorded.
    pub spread: bool,
}

impl Default for ViewOptions {
    fn default() -> Self {
        ViewOptions {
            agg: Agg::Mean,
            palette: Palette::Mono,
            spread: true,
        }
    }
}

/// Fixed widths of the screen layout, shared by state (how many columns a window has) and draw.
pub mod layout {
    /// Left label column: `GPU7 max`.
    pub const LABEL_W: u16 = 9;
    /// Right panel: current value and the NVML line.
    pub const PANEL_W: u16 = 33;
    /// Most heatmap columns (bounded so that live rings always hold a full window).
    pub const MAX_COLS: u16 = 1200;

    /// Width of the right panel for a terminal `width` wide (none on narrow terminals).
    pub fn panel_w(width: u16) -> u16 {
        if width >= 80 { PANEL_W } else { 0 }
    }

    /// Heatmap columns for a terminal `width` wide.
    pub fn heat_cols(width: u16) -> u16 {
        width
            .saturating_sub(LABEL_W + panel_w(width))
            .clamp(1, MAX_COLS)
    }
}

/// Which metrics are on screen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricView {
    /// All heatmaps stacked (when they fit).
    All,
    One(usize),
}

/// One idle gap of a recording, as the analysis found it, with the line the status bar shows
/// while it is selected (the place, its length, where the host was: made safe for a terminal
/// by whoever made it).
#[derive(Clone, Debug, PartialEq)]
pub struct GapMark {
    pub start_ns: i64,
    pub end_ns: i64,
    pub text: String,
}

/// Gaps being found on another thread (finding them reads the whole recording): set once, when
/// they are ready.
#[derive(Clone, Debug, Default)]
pub struct PendingGaps(pub std::sync::Arc<std::sync::OnceLock<Vec<GapMark>>>);

/// The whole view state.
#[derive(Clone, Debug)]
pub struct HeatmapState {
    pub store: Store,
    pub mode: Mode,
    /// Shown in the title bar after the mode: the trace path, empty for the live view.
    pub source: String,
    pub options: ViewOptions,
    pub paused: bool,
    /// Right edge of the window follows the newest data.
    pub follow: bool,
    /// Right edge of the window (exclusive), when not following.
    pub end_ns: i64,
    /// Zoom step: column width is [`HeatmapState::col_ns`].
    pub zoom: u32,
    pub metric_view: MetricView,
    pub show_help: bool,
    pub quit: bool,
    pub width: u16,
    pub height: u16,
    /// Where relative times count from (the first data seen).
    pub origin_ns: Option<i64>,
    /// The recording's idle gaps, by start (empty in the live view, or when not computed).
    pub gaps: Vec<GapMark>,
    /// The selected gap (`x` / `X`), an index into [`HeatmapState::gaps`].
    pub gap_cursor: Option<usize>,
    /// Gaps still being found; [`HeatmapState::take_ready_gaps`] takes them when ready.
    pub pending_gaps: Option<PendingGaps>,
}

/// The column width of zoom step `z`: 1, 2, 3, 4, 6, 8, 12, 16, ... base bins, so that each
/// column is one or three bins of some pyramid level (exact and cheap queries).
pub fn col_ns_for(base_ns: i64, z: u32) -> i64 {
    let z = z.min(2 * crate::bucket::LEVELS as u32 - 2);
    // Saturating: the base of a recording that spans centuries is large (a damaged trace).
    if z == 0 {
        base_ns
    } else if z % 2 == 1 {
        base_ns.saturating_mul(1 << z.div_ceil(2))
    } else {
        base_ns.saturating_mul(3).saturating_mul(1 << ((z - 2) / 2))
    }
}

/// The bin width that window edges must be multiples of at zoom `z`.
pub fn align_ns_for(base_ns: i64, z: u32) -> i64 {
    let c = col_ns_for(base_ns, z);
    if c % (3 * base_ns) == 0 && (c / 3).count_ones() == 1 {
        c / 3
    } else {
        c
    }
}

impl HeatmapState {
    pub fn new(store: Store, mode: Mode, source: String, options: ViewOptions) -> Self {
        let mut s = HeatmapState {
            store,
            mode,
            source,
            options,
            paused: false,
            follow: mode != Mode::Browse,
            end_ns: 0,
            zoom: 0,
            metric_view: MetricView::All,
            show_help: false,
            quit: false,
            width: 120,
            height: 30,
            origin_ns: None,
            gaps: Vec::new(),
            gap_cursor: None,
            pending_gaps: None,
        };
        s.origin_ns = s.store.first_ns;
        if mode == Mode::Browse {
            s.fit_all();
        } else {
            // Live: about 16 ms per column, ~5 s on a 300-column screen.
            s.zoom = s.zoom_for(16_000_000, 1);
        }
        s
    }

    pub fn cols(&self) -> usize {
        usize::from(layout::heat_cols(self.width))
    }

    pub fn col_ns(&self) -> i64 {
        col_ns_for(self.store.base_ns, self.zoom)
    }

    /// The smallest zoom whose `cols` columns cover `span_ns`.
    fn zoom_for(&self, span_ns: i64, cols: usize) -> u32 {
        let cols = cols.max(1) as i64;
        (0..2 * crate::bucket::LEVELS as u32 - 2)
            .find(|&z| col_ns_for(self.store.base_ns, z).saturating_mul(cols) >= span_ns)
            .unwrap_or(2 * crate::bucket::LEVELS as u32 - 3)
    }

    fn align(&self, t: i64) -> i64 {
        let a = align_ns_for(self.store.base_ns, self.zoom);
        t.div_euclid(a) * a
    }

    /// Shows the whole recording.
    pub fn fit_all(&mut self) {
        if let (Some(a), Some(b)) = (self.store.first_ns, self.store.last_ns) {
            self.set_window(a, b);
        }
    }

    /// Shows at least `[from_ns, to_ns)`: the zoom whose columns cover it, starting at `from_ns`
    /// rounded down to the bin grid.
    pub fn set_window(&mut self, from_ns: i64, to_ns: i64) {
        self.follow = false;
        self.zoom = self.zoom_for(to_ns.saturating_sub(from_ns).max(1), self.cols());
        let start = self.align(from_ns);
        self.end_ns = start.saturating_add(self.span_ns());
    }

    /// `[t0, t1)` of the window on screen.
    pub fn window(&self) -> (i64, i64) {
        let span = self.span_ns();
        let end = if self.follow {
            let c = self.col_ns();
            let last = self.store.last_ns.unwrap_or(0);
            (last.div_euclid(c) + 1).saturating_mul(c)
        } else {
            self.end_ns
        };
        // Saturating: a damaged trace may hold timestamps near the ends of i64.
        (end.saturating_sub(span), end)
    }

    /// The time the columns on screen cover.
    fn span_ns(&self) -> i64 {
        self.col_ns().saturating_mul(self.cols() as i64)
    }

    /// The value shown for a bin of heatmap `h`.
    pub fn value(&self, bin: &Summary) -> Option<f64> {
        self.options.agg.of(bin)
    }

    fn center(&self) -> i64 {
        let (a, b) = self.window();
        a + b.saturating_sub(a) / 2
    }

    fn center_on(&mut self, t: i64) {
        let span = self.span_ns();
        self.follow = false;
        self.end_ns = self.align(t.saturating_add(span / 2));
    }

    fn pan(&mut self, by_ns: i64) {
        let (_, end) = self.window();
        self.follow = false;
        self.end_ns = self.align(end.saturating_add(by_ns));
        // Panning right past the newest data of a live feed resumes following it.
        if self.mode != Mode::Browse
            && let Some(last) = self.store.last_ns
            && self.end_ns > last
        {
            self.follow = true;
        }
    }

    fn zoom_by(&mut self, steps: i32) {
        let c = self.center();
        let max = 2 * crate::bucket::LEVELS as i32 - 3;
        self.zoom = (self.zoom as i32 + steps).clamp(0, max) as u32;
        if !self.follow {
            self.center_on(c);
        }
    }

    /// Start times of the NVTX ranges used as phases (the outermost depth recorded).
    fn phase_starts(&self) -> Vec<i64> {
        let depth = self.store.nvtx.iter().map(|r| r.depth).min().unwrap_or(0);
        let mut v: Vec<i64> = self
            .store
            .nvtx
            .iter()
            .filter(|r| r.depth == depth)
            .map(|r| r.start_ns)
            .collect();
        v.sort_unstable();
        v
    }

    fn drop_starts(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self
            .store
            .devices
            .iter()
            .flat_map(|d| d.drops.iter().map(|r| r.start_ns))
            .collect();
        v.sort_unstable();
        v
    }

    fn jump(&mut self, times: Vec<i64>, forward: bool) {
        let c = self.center();
        let slack = self.col_ns();
        let target = if forward {
            times.into_iter().find(|&t| t > c + slack)
        } else {
            times.into_iter().rev().find(|&t| t < c - slack)
        };
        if let Some(t) = target {
            self.center_on(t);
        }
    }

    /// Gives the view the recording's idle gaps (any order), for `x` / `X`.
    pub fn set_gaps(&mut self, mut gaps: Vec<GapMark>) {
        gaps.sort_by_key(|g| (g.start_ns, g.end_ns));
        self.gaps = gaps;
        self.gap_cursor = None;
    }

    /// Takes the gaps being found elsewhere once they are ready.
    pub fn take_ready_gaps(&mut self) {
        if let Some(gaps) = self.pending_gaps.as_ref().and_then(|p| p.0.get()) {
            let gaps = gaps.clone();
            self.pending_gaps = None;
            self.set_gaps(gaps);
        }
    }

    /// The selected gap, if any.
    pub fn selected_gap(&self) -> Option<(usize, &GapMark)> {
        let i = self.gap_cursor?;
        self.gaps.get(i).map(|g| (i, g))
    }

    /// Selects the gap after (before) the selected one, or after (before) the window's centre
    /// when none is, and brings it into view: centred, the window widened to hold it.
    fn jump_gap(&mut self, forward: bool) {
        self.take_ready_gaps();
        if self.gaps.is_empty() && self.pending_gaps.is_some() {
            self.store.messages.push_back(
                "idle gaps: still being found in the recording; press x again shortly".into(),
            );
            return;
        }
        let n = self.gaps.len();
        let next = match self.gap_cursor {
            Some(i) if forward => (i + 1 < n).then_some(i + 1),
            Some(i) => i.checked_sub(1),
            None => {
                let c = self.center();
                if forward {
                    self.gaps.iter().position(|g| g.start_ns > c)
                } else {
                    self.gaps.iter().rposition(|g| g.start_ns < c)
                }
            }
        };
        let Some(i) = next else { return };
        self.gap_cursor = Some(i);
        let (a, b) = (self.gaps[i].start_ns, self.gaps[i].end_ns);
        let len = b.saturating_sub(a).max(1);
        if len.saturating_mul(2) > self.span_ns() {
            let pad = len / 2;
            self.set_window(a.saturating_sub(pad), b.saturating_add(pad));
        }
        self.center_on(a.saturating_add(len / 2));
    }

    /// Applies one input.
    pub fn update(&mut self, input: Input) {
        let span = self.span_ns();
        match input {
            Input::Quit => self.quit = true,
            Input::Back if self.show_help => self.show_help = false,
            Input::Back if self.gap_cursor.is_some() => self.gap_cursor = None,
            Input::Back => self.quit = true,
            Input::ToggleHelp => self.show_help = !self.show_help,
            Input::TogglePause => {
                self.paused = !self.paused;
                if self.paused && self.follow {
                    // Freeze the window where it is; data keeps arriving underneath.
                    self.end_ns = self.window().1;
                    self.follow = false;
                } else if !self.paused && self.mode != Mode::Browse {
                    self.follow = true;
                }
            }
            Input::ZoomIn => self.zoom_by(-1),
            Input::ZoomOut => self.zoom_by(1),
            Input::PanLeft => self.pan(-span / 8),
            Input::PanRight => self.pan(span / 8),
            Input::PageLeft => self.pan(-span),
            Input::PageRight => self.pan(span),
            Input::Home => {
                if let Some(f) = self.store.first_ns {
                    self.follow = false;
                    self.end_ns = self.align(f) + span;
                }
            }
            Input::End => {
                if self.mode == Mode::Browse {
                    if let Some(l) = self.store.last_ns {
                        self.end_ns = self.align(l) + self.col_ns();
                    }
                } else {
                    self.follow = true;
                    self.paused = false;
                }
            }
            Input::NextPhase => self.jump(self.phase_starts(), true),
            Input::PrevPhase => self.jump(self.phase_starts(), false),
            Input::NextDrop => self.jump(self.drop_starts(), true),
            Input::PrevDrop => self.jump(self.drop_starts(), false),
            Input::NextGap => self.jump_gap(true),
            Input::PrevGap => self.jump_gap(false),
            Input::NextMetric => {
                let n = self.store.heatmaps.len();
                self.metric_view = match self.metric_view {
                    _ if n <= 1 => MetricView::All,
                    MetricView::All => MetricView::One(0),
                    MetricView::One(i) if i + 1 < n => MetricView::One(i + 1),
                    MetricView::One(_) => MetricView::All,
                };
            }
            Input::ToggleSpread => self.options.spread = !self.options.spread,
            Input::ToggleAgg => {
                self.options.agg = match self.options.agg {
                    Agg::Mean => Agg::Max,
                    Agg::Max => Agg::Mean,
                }
            }
            Input::Resize(w, h) => {
                let c = self.center();
                self.width = w;
                self.height = h;
                if !self.follow {
                    self.center_on(c);
                }
            }
            Input::Feed(ev) => {
                self.store.ingest(ev);
                if self.origin_ns.is_none() {
                    self.origin_ns = self.store.first_ns;
                }
            }
        }
    }

    /// Heatmaps on screen, in order.
    pub fn visible_heatmaps(&self) -> Vec<usize> {
        match self.metric_view {
            MetricView::All => (0..self.store.heatmaps.len()).collect(),
            MetricView::One(i) => vec![i.min(self.store.heatmaps.len().saturating_sub(1))],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zoom_steps_are_one_or_three_aligned_bins() {
        let b = 1024;
        let widths: Vec<i64> = (0..8).map(|z| col_ns_for(b, z) / b).collect();
        assert_eq!(widths, [1, 2, 3, 4, 6, 8, 12, 16]);
        for z in 0..40 {
            let c = col_ns_for(b, z);
            let a = align_ns_for(b, z);
            assert_eq!(c % a, 0);
            assert!(c / a == 1 || c / a == 3, "z {z}: {c} / {a}");
            assert_eq!((a / b).count_ones(), 1);
        }
    }
}
