//! The state of the window apart from drawing: the visible time window, the selection, the
//! settings that persist between runs, and every change the views make to them as one enum,
//! [`Input`], that [`ViewState::apply`] alone acts on. The views read the state and turn egui's
//! pointer, keys and clicks into inputs (`crate::timeline::input`, the side panel, the details
//! pane, the top bar) that they return; the window applies them as each view returns, so that
//! what is drawn after it in the frame shows the change, and a test drives the state with
//! inputs, without drawing. The window's own bookkeeping (the fit to the run as recordings
//! load, the alignment, a recording opened) and the settings the top bar's toggles edit are
//! outside it.
//!
//! Times on the shared axis are [`AxisTime`]s: nanoseconds on the clock of the first recording; a
//! second recording is shifted onto it by its alignment offset
//! ([`crate::loaded::TraceSlot::offset_ns`]).

pub use crate::axis::AxisTime;
use cufall_trace::model::DeviceId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// How a metric track is drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TrackStyle {
    /// One colour per pixel column (the column's time-weighted mean on the Turbo map).
    Heat,
    /// An area chart: the mean as a line with the area under it filled, over a band from the
    /// column's minimum to its maximum.
    #[default]
    Line,
}

/// Settings kept between runs (eframe's storage). New fields take their defaults when an older
/// file lacks them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub style: TrackStyle,
    pub show_nvml: bool,
    pub show_kernels: bool,
    pub show_nvtx: bool,
    pub show_gaps: bool,
    pub side_panel: bool,
    /// The details pane along the bottom (the selection's statistics, tables and flame graph).
    pub details: bool,
    /// The height the user gave the details pane by dragging its top edge; `None`: it takes
    /// the height the tracks leave.
    pub details_h: Option<f32>,
    /// cufall's own threads in the profiled process (`cufall-*`: its sampler, CUPTI and
    /// capture threads) among the host threads.
    pub show_cufall_threads: bool,
    /// Heights the user gave tracks by dragging their bottom edge, in points, by the track's
    /// key (`timeline::Row::resize_key`: the metric, so one height for its tracks on every
    /// GPU); other tracks share the timeline's height.
    pub track_heights: BTreeMap<String, f32>,
    /// Memory for raw samples kept per recording, in MiB.
    pub raw_budget_mib: usize,
    /// Recordings opened recently, newest first.
    pub recent: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            style: TrackStyle::Line,
            show_nvml: true,
            show_kernels: true,
            show_nvtx: true,
            show_gaps: true,
            side_panel: true,
            details: true,
            details_h: None,
            show_cufall_threads: false,
            track_heights: BTreeMap::new(),
            raw_budget_mib: crate::tiles::DEFAULT_RAW_BUDGET_BYTES >> 20,
            recent: Vec::new(),
        }
    }
}

impl Settings {
    pub fn remember(&mut self, path: &str) {
        self.recent.retain(|p| p != path);
        self.recent.insert(0, path.to_string());
        self.recent.truncate(10);
    }
}

/// Shortest window the view zooms to.
pub const MIN_SPAN_NS: f64 = 200.0;

/// How far past the data's ends the window may go, as a share of the run's length: the margin
/// of a fit of the whole run.
pub const DATA_MARGIN: f64 = 0.01;

/// The visible time window `[t0, t1)` of the shared axis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeView {
    pub t0: AxisTime,
    pub t1: AxisTime,
}

impl TimeView {
    pub fn new(t0: i64, t1: i64) -> TimeView {
        TimeView {
            t0: AxisTime::new(t0 as f64),
            t1: AxisTime::new((t1 as f64).max(t0 as f64 + MIN_SPAN_NS)),
        }
    }

    /// The window's length in nanoseconds.
    pub fn span(&self) -> f64 {
        self.t1 - self.t0
    }

    /// Time at fraction `f` (0 = left edge, 1 = right edge).
    pub fn at(&self, f: f64) -> AxisTime {
        self.t0 + f * self.span()
    }

    /// Zooms by `factor` (above 1: in) keeping the time at fraction `anchor` where it is on
    /// screen; the span stays between [`MIN_SPAN_NS`] and `max_span_ns`.
    pub fn zoom_at(&mut self, anchor: f64, factor: f64, max_span_ns: f64) {
        if !(factor.is_finite() && factor > 0.0) {
            return;
        }
        let anchor = anchor.clamp(0.0, 1.0);
        let t = self.at(anchor);
        let span = (self.span() / factor).clamp(MIN_SPAN_NS, max_span_ns.max(MIN_SPAN_NS));
        self.t0 = t - anchor * span;
        self.t1 = self.t0 + span;
    }

    /// Moves the window by `frac` of its span (positive: later).
    pub fn pan(&mut self, frac: f64) {
        let d = frac * self.span();
        self.t0 += d;
        self.t1 += d;
    }

    /// Shows `[a, b)` with a margin of `margin` of its length on each side.
    pub fn fit(&mut self, a: AxisTime, b: AxisTime, margin: f64) {
        let (a, b) = if a <= b { (a, b) } else { (b, a) };
        let len = (b - a).max(MIN_SPAN_NS);
        let mid = AxisTime::mid(a, b);
        let span = len * (1.0 + 2.0 * margin);
        self.t0 = mid - span / 2.0;
        self.t1 = mid + span / 2.0;
    }

    /// Keeps the window on the data `[lo, hi)`: no longer than it (with a margin of
    /// [`DATA_MARGIN`] of its length on each side), and never past its edges by more than that
    /// margin, so zooming out stops at the whole run and panning at its ends.
    pub fn clamp_to(&mut self, lo: AxisTime, hi: AxisTime) {
        if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
            return;
        }
        let margin = (hi - lo) * DATA_MARGIN;
        let (lo, hi) = (lo - margin, hi + margin);
        let span = self.span().min(hi - lo).max(MIN_SPAN_NS);
        if span >= hi - lo {
            let mid = AxisTime::mid(lo, hi);
            self.t0 = mid - span / 2.0;
        } else if self.t0 < lo {
            self.t0 = lo;
        } else if self.t0 + span > hi {
            self.t0 = hi - span;
        }
        self.t1 = self.t0 + span;
    }
}

/// A drag in progress on the timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Drag {
    /// Moving the window: the view and pointer x when the drag began.
    Pan { view: TimeView, x: f32 },
    /// Shift+drag: selecting from this time.
    Select { from: AxisTime },
    /// Right drag or Ctrl+drag: zooming to the dragged range on release.
    BoxZoom { from: AxisTime },
}

/// Which drag a press on the timeline starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DragKind {
    Pan,
    Select,
    BoxZoom,
}

/// Everything navigation can do to the view, in times of the shared axis (and, for a drag that
/// pans, the pointer's x in points, as [`Drag::Pan`] keeps it). [`ViewState::apply`] is the
/// only place that acts on them. The side panel and the details pane hand theirs back to the
/// window, which applies them as each returns.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// Zooms by `factor` (above 1: in), keeping the time at fraction `anchor` of the window where
    /// it is (Ctrl + wheel, W / S).
    Zoom {
        anchor: f64,
        factor: f64,
    },
    /// Moves the window by a fraction of its span, positive: later (horizontal wheel, A / D).
    Pan(f64),
    /// Shows `[a, b)` with a margin of `margin` of its length on each side (box zoom, a
    /// double-click, Fit, a phase or gap in the side panel).
    Fit {
        a: AxisTime,
        b: AxisTime,
        margin: f64,
    },
    /// F: fits the selection, or the whole run without one.
    FitSelection,
    /// Centres the window at a time, keeping its span (the overview strip).
    CenterAt(AxisTime),
    /// A drag began at time `t`, pointer x `x`.
    DragStart {
        kind: DragKind,
        t: AxisTime,
        x: f32,
    },
    /// The drag went on to time `t`, pointer x `x`, over a data area `w` points wide.
    DragTo {
        t: AxisTime,
        x: f32,
        w: f32,
    },
    DragEnd,
    /// Selects `[a, b)` (a click on a range, kernel or gap).
    Select {
        a: AxisTime,
        b: AxisTime,
    },
    /// Esc: clears the selection and the drag, closes the help.
    Clear,
    ToggleHelp,
    /// Folds a GPU's group of tracks into one row, or unfolds it (a click on its title).
    ToggleGroup(GpuGroup),
    /// Folds or unfolds a recording's host threads (a click on their title).
    ToggleHostGroup(usize),
    /// Opens a host thread (recording, pid, tid) as a flame chart, or closes it into one lane
    /// (a click on its label).
    ToggleThread(usize, u32, u32),
    /// Shows a tab of the side panel.
    ShowSideTab(SideTab),
    /// Shows a tab of the details pane.
    ShowDetailsTab(DetailsTab),
    /// Sorts the table of details tab `tab` by column `col`, largest first or not (a click on
    /// the column's title).
    SortDetails {
        tab: DetailsTab,
        col: usize,
        desc: bool,
    },
    /// Whose host samples the flame graph shows.
    PickFlame(FlamePick),
    /// A click on a phase in the side panel: fits and selects the next of its `ranges` (on the
    /// shared axis) in turn, the first click the first, and remembers which is selected.
    NextPhaseRange {
        path: String,
        ranges: Vec<(AxisTime, AxisTime)>,
    },
    /// Places B at the first range of this phase (`None`: at the start of the run), off the
    /// wall clock.
    AlignAt(Option<String>),
    /// Places every recording on its own wall clock.
    AlignWall,
    /// The folds the timeline decided once the recordings' tables were read: the GPU groups
    /// and recordings' host threads folded, and (where none were chosen yet) the host threads
    /// open as flame charts.
    DecideFolds {
        folded: BTreeSet<GpuGroup>,
        host_folded: BTreeSet<usize>,
        host_open: Option<BTreeSet<(usize, u32, u32)>>,
    },
    /// Where the timeline drew the rows' data area this frame.
    DrawnAt(eframe::egui::Rect),
    /// The text of the "open" field as the user left it.
    EditOpenPath(String),
    /// The folder browser as the user left it; `None`: closed.
    Browser(Option<crate::browse::Browser>),
    /// The message bar's `x` on message `i`.
    Dismiss(usize),
    /// The help window's own close button.
    CloseHelp,
}

/// A GPU's group of tracks: the GPU in every recording (`ti` `None`: two recordings compared,
/// A's track right above B's), or in recording `ti` alone (the nodes of one run on the wall
/// clock: each node's GPUs are groups of their own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuGroup {
    pub ti: Option<usize>,
    pub dev: DeviceId,
}

impl GpuGroup {
    /// The group of `dev` in every recording.
    pub fn all(dev: DeviceId) -> GpuGroup {
        GpuGroup { ti: None, dev }
    }

    /// Whether recording `ti`'s GPU belongs to this group.
    pub fn holds(&self, ti: usize) -> bool {
        self.ti.is_none_or(|g| g == ti)
    }
}

/// Which page the side panel (navigation) shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SideTab {
    #[default]
    Phases,
    Gaps,
    Compare,
}

/// Which page the details pane shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum DetailsTab {
    /// The figures per GPU and metric.
    #[default]
    Summary,
    /// The flame graph (icicle) of the host stacks.
    Flame,
    Kernels,
    Ranges,
    Gaps,
    /// Host frames by function.
    Frames,
}

impl DetailsTab {
    pub const ALL: [(DetailsTab, &'static str); 6] = [
        (DetailsTab::Summary, "Summary"),
        (DetailsTab::Flame, "Flame graph"),
        (DetailsTab::Kernels, "Kernels"),
        (DetailsTab::Ranges, "Ranges"),
        (DetailsTab::Gaps, "Gaps"),
        (DetailsTab::Frames, "Host frames"),
    ];
}

/// A line for the message bar (and stderr).
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub error: bool,
    pub text: String,
}

/// Transient state of the window.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewState {
    pub view: TimeView,
    pub selection: Option<(AxisTime, AxisTime)>,
    pub drag: Option<Drag>,
    pub show_help: bool,
    pub side_tab: SideTab,
    pub details_tab: DetailsTab,
    /// The details table's order: its tab, the column, descending; `None`: each table's own.
    pub details_sort: Option<(DetailsTab, usize, bool)>,
    /// The phase whose range is selected (a click in the side panel): its path and which of
    /// its ranges (0: the first), so that each recording's own range of it is the selection's
    /// window in the details (with two recordings, B's range differs from A's).
    pub selected_phase: Option<(String, usize)>,
    /// Per phase path, which of its ranges a click on it zooms to next.
    pub phase_cursor: std::collections::HashMap<String, usize>,
    /// The phase the second recording is aligned at; `None`: aligned at their starts.
    pub align_phase: Option<String>,
    pub messages: Vec<Message>,
    /// The text of the "open" field.
    pub open_path: String,
    /// The folder browser, while it is open.
    pub browser: Option<crate::browse::Browser>,
    /// The view as last fitted to the whole run, and whether that fit was the final one (every
    /// recording read); `None` before the first fit.
    pub fitted: Option<(TimeView, bool)>,
    /// Where the rows' data area was drawn last frame (for tests and benchmarks that point at
    /// times).
    pub last_data_rect: Option<eframe::egui::Rect>,
    /// The GPU groups that are folded; `None` until the timeline decides, once the
    /// recordings' tables are read (every group open if all fit the window at their smallest,
    /// else every group folded); from then on only the user folds and unfolds.
    pub folded: Option<BTreeSet<GpuGroup>>,
    /// The recordings (0: A, 1: B, ...) whose host threads are folded into their title row;
    /// decided with [`ViewState::folded`] (folded where there are many threads).
    pub host_folded: Option<BTreeSet<usize>>,
    /// The host threads (recording, pid, tid) drawn as flame charts; decided with
    /// [`ViewState::folded`] (the busiest threads open), then the user's.
    pub host_open: Option<BTreeSet<(usize, u32, u32)>>,
    /// Every recording is placed on the shared wall clock (the nodes of one run): no shift,
    /// each node's GPUs in groups of their own; overrides [`ViewState::align_phase`].
    pub align_wall: bool,
    /// Whose host samples the flame graph of the selection shows.
    pub flame_pick: FlamePick,
}

/// Which host samples the flame graph shows: recording `ti`'s, of every thread or of one
/// (pid, tid).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlamePick {
    pub ti: usize,
    pub thread: Option<(u32, u32)>,
}

impl Default for ViewState {
    fn default() -> Self {
        ViewState {
            view: TimeView::new(0, 1_000_000_000),
            selection: None,
            drag: None,
            show_help: false,
            side_tab: SideTab::Phases,
            details_tab: DetailsTab::Summary,
            details_sort: None,
            selected_phase: None,
            phase_cursor: Default::default(),
            align_phase: None,
            messages: Vec::new(),
            open_path: String::new(),
            browser: None,
            fitted: None,
            last_data_rect: None,
            folded: None,
            host_folded: None,
            host_open: None,
            align_wall: false,
            flame_pick: FlamePick::default(),
        }
    }
}

impl ViewState {
    /// Whether the `n` open recordings are shown as the nodes of one run, each node's GPUs in
    /// groups of their own: on the wall clock, more than one.
    pub fn nodes_apart(&self, n: usize) -> bool {
        self.align_wall && n > 1
    }

    /// Records a message for the window, and writes it to stderr.
    pub fn say(&mut self, error: bool, text: impl Into<String>) {
        let text = text.into();
        if self.messages.iter().any(|m| m.text == text) {
            return;
        }
        eprintln!("cufall gui: {}{text}", if error { "error: " } else { "" });
        self.messages.push(Message { error, text });
    }

    /// Applies one input; `extent` is the whole run on the shared axis (the view zooms out to
    /// the whole run at most and stays on it, [`TimeView::clamp_to`]; F without a selection
    /// fits it).
    pub fn apply(&mut self, input: Input, extent: (AxisTime, AxisTime)) {
        // Inputs that leave the time window alone leave it unclamped too (a fit made while
        // recordings load stays as made); a phase's range is fitted and selected as those
        // inputs are; navigation moves the window and keeps it on the run.
        match input {
            Input::ShowSideTab(tab) => self.side_tab = tab,
            Input::ShowDetailsTab(tab) => self.details_tab = tab,
            Input::SortDetails { tab, col, desc } => self.details_sort = Some((tab, col, desc)),
            Input::PickFlame(pick) => self.flame_pick = pick,
            Input::AlignAt(phase) => (self.align_wall, self.align_phase) = (false, phase),
            Input::AlignWall => self.align_wall = true,
            Input::DecideFolds {
                folded,
                host_folded,
                host_open,
            } => {
                self.folded = Some(folded);
                self.host_folded = Some(host_folded);
                if host_open.is_some() {
                    self.host_open = host_open;
                }
            }
            Input::DrawnAt(rect) => self.last_data_rect = Some(rect),
            Input::EditOpenPath(text) => self.open_path = text,
            Input::Browser(b) => self.browser = b,
            Input::Dismiss(i) => {
                if i < self.messages.len() {
                    self.messages.remove(i);
                }
            }
            Input::CloseHelp => self.show_help = false,
            Input::NextPhaseRange { path, ranges } => {
                if ranges.is_empty() {
                    return;
                }
                let cursor = self.phase_cursor.entry(path.clone()).or_insert(0);
                let which = *cursor % ranges.len();
                *cursor += 1;
                let (a, b) = ranges[which];
                self.apply(Input::Fit { a, b, margin: 0.1 }, extent);
                self.apply(Input::Select { a, b }, extent);
                // After the selection (which forgets any phase): each recording's own range of
                // it.
                self.selected_phase = Some((path, which));
            }
            input => {
                self.apply_unclamped(input, extent);
                self.view.clamp_to(extent.0, extent.1);
            }
        }
    }

    fn apply_unclamped(&mut self, input: Input, extent: (AxisTime, AxisTime)) {
        let max_span_ns = (extent.1 - extent.0) * (1.0 + 2.0 * DATA_MARGIN);
        match input {
            Input::Zoom { anchor, factor } => self.view.zoom_at(anchor, factor, max_span_ns),
            Input::Pan(frac) => self.view.pan(frac),
            Input::Fit { a, b, margin } => self.view.fit(a, b, margin),
            Input::FitSelection => match self.selection() {
                Some((a, b)) => self.view.fit(a, b, 0.02),
                None => self.view.fit(extent.0, extent.1, DATA_MARGIN),
            },
            Input::CenterAt(t) => {
                let span = self.view.span();
                self.view.t0 = t - span / 2.0;
                self.view.t1 = t + span / 2.0;
            }
            Input::DragStart { kind, t, x } => {
                self.drag = Some(match kind {
                    DragKind::BoxZoom => Drag::BoxZoom { from: t },
                    DragKind::Select => Drag::Select { from: t },
                    DragKind::Pan => Drag::Pan { view: self.view, x },
                });
            }
            Input::DragTo { t, x, w } => match self.drag {
                Some(Drag::Pan { view, x: x0 }) => {
                    let mut v = view;
                    v.pan(-f64::from((x - x0) / w));
                    self.view = v;
                }
                Some(Drag::Select { from }) => {
                    self.selection = Some((from, t));
                    self.selected_phase = None;
                }
                Some(Drag::BoxZoom { .. }) | None => {}
            },
            Input::DragEnd => self.drag = None,
            Input::Select { a, b } => {
                self.selection = Some((a, b));
                self.selected_phase = None;
            }
            Input::Clear => {
                self.selection = None;
                self.selected_phase = None;
                self.drag = None;
                self.show_help = false;
            }
            Input::ToggleHelp => self.show_help = !self.show_help,
            Input::ToggleGroup(group) => {
                let folded = self.folded.get_or_insert_with(BTreeSet::new);
                if !folded.remove(&group) {
                    folded.insert(group);
                }
            }
            Input::ToggleHostGroup(ti) => {
                let folded = self.host_folded.get_or_insert_with(BTreeSet::new);
                if !folded.remove(&ti) {
                    folded.insert(ti);
                }
            }
            Input::ToggleThread(ti, pid, tid) => {
                let open = self.host_open.get_or_insert_with(BTreeSet::new);
                if !open.remove(&(ti, pid, tid)) {
                    open.insert((ti, pid, tid));
                }
            }
            // Applied by `apply`, which never hands them here.
            Input::ShowSideTab(_)
            | Input::ShowDetailsTab(_)
            | Input::SortDetails { .. }
            | Input::PickFlame(_)
            | Input::NextPhaseRange { .. }
            | Input::AlignAt(_)
            | Input::AlignWall
            | Input::DecideFolds { .. }
            | Input::DrawnAt(_)
            | Input::EditOpenPath(_)
            | Input::Browser(_)
            | Input::Dismiss(_)
            | Input::CloseHelp => {}
        }
    }

    /// Applies a frame's inputs from the timeline in order, then keeps the window on the run,
    /// whatever moved it this frame (the window's own fit to the run included).
    pub fn apply_frame(&mut self, inputs: Vec<Input>, extent: (AxisTime, AxisTime)) {
        for input in inputs {
            self.apply(input, extent);
        }
        self.view.clamp_to(extent.0, extent.1);
    }

    /// The drag once `inputs` are applied: what a frame that has read them so far sees.
    pub fn drag_after(&self, inputs: &[Input], extent: (AxisTime, AxisTime)) -> Option<Drag> {
        let mut now = ViewState {
            view: self.view,
            drag: self.drag,
            ..ViewState::default()
        };
        for input in inputs {
            now.apply(input.clone(), extent);
        }
        now.drag
    }

    /// Normalised selection `(start, end)` with start ≤ end.
    pub fn selection(&self) -> Option<(AxisTime, AxisTime)> {
        self.selection
            .map(|(a, b)| if a <= b { (a, b) } else { (b, a) })
            .filter(|(a, b)| b > a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ns: f64) -> AxisTime {
        AxisTime::new(ns)
    }

    /// A view whose window lies outside the run: an input that clamped it would move it.
    fn off_the_run() -> (ViewState, (AxisTime, AxisTime)) {
        let mut st = ViewState::default();
        st.view.t0 = at(5e9);
        st.view.t1 = at(6e9);
        (st, (at(0.0), at(1e9)))
    }

    #[test]
    fn the_panes_choices_change_their_fields_and_leave_the_window_alone() {
        let (mut st, extent) = off_the_run();
        let view = st.view;
        st.apply(Input::ShowSideTab(SideTab::Gaps), extent);
        st.apply(Input::ShowDetailsTab(DetailsTab::Kernels), extent);
        let (tab, col, desc) = (DetailsTab::Kernels, 2, false);
        st.apply(Input::SortDetails { tab, col, desc }, extent);
        let pick = FlamePick {
            ti: 1,
            thread: Some((7, 8)),
        };
        st.apply(Input::PickFlame(pick), extent);
        assert_eq!(st.side_tab, SideTab::Gaps);
        assert_eq!(st.details_tab, DetailsTab::Kernels);
        assert_eq!(st.details_sort, Some((DetailsTab::Kernels, 2, false)));
        assert_eq!(st.flame_pick, pick);
        assert_eq!(st.view, view, "not clamped to the run");
    }

    #[test]
    fn aligning_at_a_phase_leaves_the_wall_clock_and_the_wall_clock_keeps_the_phase() {
        let (mut st, extent) = off_the_run();
        st.apply(Input::AlignWall, extent);
        assert!(st.align_wall);
        st.apply(Input::AlignAt(Some("verify".into())), extent);
        assert_eq!(
            (st.align_wall, st.align_phase.as_deref()),
            (false, Some("verify"))
        );
        st.apply(Input::AlignWall, extent);
        assert_eq!(
            (st.align_wall, st.align_phase.as_deref()),
            (true, Some("verify"))
        );
        st.apply(Input::AlignAt(None), extent);
        assert_eq!((st.align_wall, st.align_phase), (false, None));
    }

    #[test]
    fn a_phase_clicked_again_selects_its_next_range_and_comes_round() {
        let extent = (at(0.0), at(1e9));
        let mut st = ViewState::default();
        let ranges = vec![(at(1e8), at(2e8)), (at(5e8), at(6e8))];
        let click = |st: &mut ViewState| {
            let path = "step/fwd".to_string();
            let ranges = ranges.clone();
            st.apply(Input::NextPhaseRange { path, ranges }, extent);
        };
        for which in [0, 1, 0] {
            click(&mut st);
            let (a, b) = ranges[which];
            assert_eq!(st.selection(), Some((a, b)));
            assert_eq!(st.selected_phase, Some(("step/fwd".into(), which)));
            // Fitted with a tenth of the range's length on each side.
            let pad = (b - a) * 0.1;
            assert!((st.view.t0 - (a - pad)).abs() < 1.0, "{:?}", st.view);
            assert!((st.view.t1 - (b + pad)).abs() < 1.0, "{:?}", st.view);
        }
        // A phase without ranges in the recording: nothing changes, its turn included.
        let before = st.clone();
        let path = "gone".to_string();
        st.apply(
            Input::NextPhaseRange {
                path,
                ranges: vec![],
            },
            extent,
        );
        assert_eq!(st, before);
    }

    #[test]
    fn folds_decided_once_keep_the_threads_the_user_opened() {
        let (mut st, extent) = off_the_run();
        let view = st.view;
        let group = GpuGroup::all(DeviceId(1));
        st.apply(
            Input::DecideFolds {
                folded: [group].into(),
                host_folded: [1].into(),
                host_open: Some([(0, 10, 11)].into()),
            },
            extent,
        );
        assert_eq!(st.folded, Some([group].into()));
        assert_eq!(st.host_folded, Some([1].into()));
        assert_eq!(st.host_open, Some([(0, 10, 11)].into()));
        // Decided again (the GPU groups changed): the open threads were chosen already.
        st.apply(
            Input::DecideFolds {
                folded: BTreeSet::new(),
                host_folded: BTreeSet::new(),
                host_open: None,
            },
            extent,
        );
        assert_eq!(st.folded, Some(BTreeSet::new()));
        assert_eq!(st.host_open, Some([(0, 10, 11)].into()));
        assert_eq!(st.view, view);
    }

    #[test]
    fn the_top_bar_messages_help_and_browser_change_only_their_fields() {
        let (mut st, extent) = off_the_run();
        let view = st.view;
        st.apply(Input::EditOpenPath("/tmp/run.cufall".into()), extent);
        assert_eq!(st.open_path, "/tmp/run.cufall");
        st.say(false, "one");
        st.say(true, "two");
        st.apply(Input::Dismiss(0), extent);
        assert_eq!(st.messages.len(), 1);
        assert_eq!(st.messages[0].text, "two");
        // A message gone already (dismissed twice in one frame) is no panic.
        st.apply(Input::Dismiss(5), extent);
        assert_eq!(st.messages.len(), 1);
        st.apply(Input::ToggleHelp, (at(4e9), at(7e9)));
        assert!(st.show_help);
        st.apply(Input::CloseHelp, extent);
        assert!(!st.show_help);
        let b = crate::browse::Browser::at(std::env::temp_dir());
        st.apply(Input::Browser(Some(b.clone())), extent);
        assert_eq!(st.browser, Some(b));
        st.apply(Input::Browser(None), extent);
        assert_eq!(st.browser, None);
        let r = eframe::egui::Rect::from_min_max((10.0, 20.0).into(), (110.0, 220.0).into());
        st.apply(Input::DrawnAt(r), extent);
        assert_eq!(st.last_data_rect, Some(r));
        assert_eq!(st.view, view);
    }

    #[test]
    fn a_frame_of_inputs_applies_in_order_and_ends_on_the_run() {
        let (mut st, extent) = off_the_run();
        // A drag that starts in the frame that zooms starts from the zoomed window.
        let inputs = vec![
            Input::Zoom {
                anchor: 0.5,
                factor: 2.0,
            },
            Input::DragStart {
                kind: DragKind::Pan,
                t: at(4e8),
                x: 100.0,
            },
        ];
        assert!(matches!(
            st.drag_after(&inputs, extent),
            Some(Drag::Pan { .. })
        ));
        assert_eq!(st.drag, None, "drag_after changes nothing");
        st.apply_frame(inputs, extent);
        let Some(Drag::Pan { view, .. }) = st.drag else {
            panic!("{:?}", st.drag);
        };
        assert_eq!(view, st.view);
        assert!(
            st.view.t0 >= at(-1e7) && st.view.t1 <= at(1.01e9),
            "{:?}",
            st.view
        );
        // Without inputs the window is still brought back onto the run.
        let (mut st, extent) = off_the_run();
        st.apply_frame(Vec::new(), extent);
        assert!(st.view.t1 <= at(1.01e9), "{:?}", st.view);
        let ends = vec![Input::DragEnd];
        st.drag = Some(Drag::Select { from: at(1.0) });
        assert_eq!(st.drag_after(&ends, extent), None);
    }

    #[test]
    fn another_selection_forgets_the_phase_range() {
        let extent = (at(0.0), at(1e9));
        let mut st = ViewState::default();
        let (path, ranges) = ("p".to_string(), vec![(at(1e8), at(2e8))]);
        st.apply(Input::NextPhaseRange { path, ranges }, extent);
        assert!(st.selected_phase.is_some());
        st.apply(
            Input::Select {
                a: at(3e8),
                b: at(4e8),
            },
            extent,
        );
        assert_eq!(st.selected_phase, None);
    }

    #[test]
    fn zoom_keeps_the_anchor_in_place() {
        let mut v = TimeView::new(0, 1000);
        let t = v.at(0.25);
        v.zoom_at(0.25, 4.0, 1e12);
        assert!((v.at(0.25) - t).abs() < 1e-9);
        assert!((v.span() - 250.0).abs() < 1e-9);
        v.zoom_at(0.25, 0.5, 1e12);
        assert!((v.span() - 500.0).abs() < 1e-9);
        assert!((v.at(0.25) - t).abs() < 1e-9);
    }

    #[test]
    fn zoom_is_bounded() {
        let mut v = TimeView::new(0, 1000);
        v.zoom_at(0.5, 1e9, 1e12);
        assert_eq!(v.span(), MIN_SPAN_NS);
        v.zoom_at(0.5, 1e-9, 5000.0);
        assert_eq!(v.span(), 5000.0);
    }

    #[test]
    fn a_pan_drag_moves_the_window_from_where_it_began() {
        let mut st = ViewState::default();
        // A run longer than the window, so that it can move.
        let extent = (at(-1e10), at(1e10));
        st.apply(
            Input::DragStart {
                kind: DragKind::Pan,
                t: at(5e8),
                x: 100.0,
            },
            extent,
        );
        let start = st.view;
        // Two moves in one drag: the second is measured from the start, not from the first.
        for x in [150.0, 200.0] {
            st.apply(
                Input::DragTo {
                    t: at(0.0),
                    x,
                    w: 1000.0,
                },
                extent,
            );
        }
        // 100 points of 1000 is a tenth of the span (to f32's precision).
        assert!((st.view.t0 - (start.t0 - 0.1 * start.span())).abs() < start.span() * 1e-6);
        assert_eq!(st.view.span(), start.span());
        st.apply(Input::DragEnd, extent);
        assert_eq!(st.drag, None);
    }

    #[test]
    fn a_select_drag_selects_and_esc_clears() {
        let mut st = ViewState::default();
        let extent = (at(0.0), at(1e9));
        let start = Input::DragStart {
            kind: DragKind::Select,
            t: at(300.0),
            x: 0.0,
        };
        st.apply(start, extent);
        st.apply(
            Input::DragTo {
                t: at(100.0),
                x: 0.0,
                w: 1.0,
            },
            extent,
        );
        assert_eq!(st.selection(), Some((at(100.0), at(300.0))));
        st.apply(Input::FitSelection, extent);
        assert!(st.view.t0 < at(100.0) && st.view.t1 > at(300.0) && st.view.span() < 1000.0);
        st.show_help = true;
        st.apply(Input::Clear, extent);
        assert_eq!((st.selection, st.drag, st.show_help), (None, None, false));
        // Without a selection, F fits the whole run.
        st.apply(Input::FitSelection, extent);
        assert!(st.view.t0 < at(0.0) && st.view.t1 > at(1e9));
    }

    #[test]
    fn zoom_and_pan_stop_at_the_data() {
        let mut st = ViewState::default();
        let extent = (at(0.0), at(1e9));
        st.apply(Input::FitSelection, extent);
        let whole = st.view;
        // Zooming out past the whole run leaves it as it is.
        for _ in 0..20 {
            st.apply(
                Input::Zoom {
                    anchor: 0.1,
                    factor: 0.5,
                },
                extent,
            );
        }
        assert!((st.view.span() - whole.span()).abs() < 1.0, "{:?}", st.view);
        assert!(st.view.t0 >= at(-1e7 - 1.0) && st.view.t1 <= at(1e9 + 1e7 + 1.0));
        // Panning stops at the ends, the span kept.
        st.apply(
            Input::Fit {
                a: at(4e8),
                b: at(5e8),
                margin: 0.0,
            },
            extent,
        );
        for _ in 0..50 {
            st.apply(Input::Pan(-0.5), extent);
        }
        assert!((st.view.span() - 1e8).abs() < 1.0);
        assert!((st.view.t0 - at(-1e7)).abs() < 1.0, "{:?}", st.view);
        for _ in 0..50 {
            st.apply(Input::Pan(0.5), extent);
        }
        assert!((st.view.t1 - at(1e9 + 1e7)).abs() < 1.0, "{:?}", st.view);
    }

    #[test]
    fn settings_read_older_files() {
        let s: Settings = serde_json::from_str(r#"{"show_nvml": false}"#).expect("parse");
        assert!(!s.show_nvml);
        assert_eq!(s.style, TrackStyle::Line);
        assert!(!s.show_cufall_threads && s.details);
        assert!(s.show_kernels);
        assert!(s.track_heights.is_empty());
        // A file from before tracks could be resized, with the fixed height it had then.
        let s: Settings =
            serde_json::from_str(r#"{"track_height": 26.0, "style": "Line"}"#).expect("parse");
        assert_eq!(s.style, TrackStyle::Line);
        assert!(s.track_heights.is_empty());
    }

    #[test]
    fn track_heights_persist() {
        let mut s = Settings::default();
        s.track_heights
            .insert("metric dram__bytes.sum".into(), 90.0);
        let back: Settings =
            serde_json::from_str(&serde_json::to_string(&s).expect("write")).expect("parse");
        assert_eq!(
            back.track_heights.get("metric dram__bytes.sum"),
            Some(&90.0)
        );
    }

    #[test]
    fn a_click_on_a_group_title_folds_and_unfolds_it() {
        let mut st = ViewState::default();
        let extent = (at(0.0), at(1e9));
        let g = |dev| GpuGroup::all(DeviceId(dev));
        st.folded = Some([g(1)].into());
        st.apply(Input::ToggleGroup(g(0)), extent);
        assert_eq!(st.folded, Some([g(0), g(1)].into()));
        st.apply(Input::ToggleGroup(g(1)), extent);
        assert_eq!(st.folded, Some([g(0)].into()));
        // Before the timeline decided, a click decides for that group.
        let mut st = ViewState::default();
        st.apply(Input::ToggleGroup(g(2)), extent);
        assert_eq!(st.folded, Some([g(2)].into()));
        // A node's GPU folds apart from the same GPU of another node.
        let node = |ti| GpuGroup {
            ti: Some(ti),
            dev: DeviceId(0),
        };
        st.apply(Input::ToggleGroup(node(1)), extent);
        assert_eq!(st.folded, Some([g(2), node(1)].into()));
    }
}
