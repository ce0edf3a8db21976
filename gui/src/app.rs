//! The window: a top bar (open, view options, help), the message bar, the side panel and the
//! timeline, over one recording, two compared, or the nodes of one run on the wall clock.

use crate::axis::AxisTime;
use crate::details::details_ui;
use crate::flame::Icicle;
use crate::fmt::Nanos;
use crate::loaded::{
    DiffError, DiffState, LoadedTrace, Locked, TraceSlot, hosts_differ, shared_extent,
};
use crate::panel::{common_phases, side_panel_ui};
use crate::stats::{SelectionStats, selection_stats};
use crate::timeline::timeline_ui;
use crate::view::{FlamePick, Input, Settings, TimeView, TrackStyle, ViewState};
use cufall_analysis::diff::build_diff;
use cufall_analysis::report::ReportOptions;
use cufall_analysis::select::PhaseSelect;
use eframe::egui::{self, Ui};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// The `--align` value that places every recording on the shared wall clock.
pub const ALIGN_WALL: &str = "wall";

/// What a flame graph was built for: the selection, whose samples, and whether the
/// recording's tables were read.
type FlameKey = (AxisTime, AxisTime, FlamePick, bool);

/// The details pane's smallest height with a selection (its tabs and a few rows, or a flame
/// graph several frames deep).
const DETAILS_MIN_H: f32 = 180.0;

/// The details pane without a selection: its tabs and the hint.
const DETAILS_CLOSED_H: f32 = 34.0;

/// Key of the settings in eframe's storage.
pub const SETTINGS_KEY: &str = "cufall-gui-settings";

/// The application: the open recordings, the settings and the view state.
pub struct GuiApp {
    pub slots: Vec<TraceSlot>,
    pub settings: Settings,
    pub st: ViewState,
    ctx: egui::Context,
    sel: Option<SelectionStats>,
    /// The flame graph of the selection, with what it was built for.
    flame: Option<(FlameKey, Icicle)>,
    diff: DiffState,
    /// The alignment the offsets were computed for (phase, wall clock), and whether both
    /// sides had their tables.
    aligned: Option<(Option<String>, bool, bool)>,
    /// Which NVTX ranges are phases, in every recording opened.
    phases: PhaseSelect,
    /// Whether the GPU groups were per node last frame: when the alignment changes that, the
    /// timeline decides the folds again for the new groups.
    groups_per_node: bool,
}

impl GuiApp {
    /// Opens `traces` with `align` as the phase to align B at, or [`ALIGN_WALL`], and `phases`
    /// choosing the NVTX ranges that are phases. Two recordings are A and B; more are the
    /// nodes of one run, always on the wall clock.
    pub fn new(
        ctx: &egui::Context,
        traces: &[PathBuf],
        align: Option<String>,
        phases: PhaseSelect,
        settings: Settings,
    ) -> GuiApp {
        let mut app = GuiApp {
            slots: Vec::new(),
            settings,
            st: ViewState::default(),
            ctx: ctx.clone(),
            sel: None,
            flame: None,
            diff: DiffState::None,
            aligned: None,
            phases,
            groups_per_node: false,
        };
        // `wall` is the shared wall clock (recordings of one run on several hosts), not a phase.
        if align.as_deref() == Some(ALIGN_WALL) {
            app.st.align_wall = true;
        } else {
            app.st.align_phase = align;
        }
        // Names come from the profiled program: a character no font has is drawn as a box,
        // never a failure.
        ctx.set_missing_glyph_policy(egui::MissingGlyphPolicy::Tofu);
        if traces.len() > 2 && !app.st.align_wall {
            let asked = app
                .st
                .align_phase
                .take()
                .map_or(String::new(), |p| format!(" (--align {p} aligns two)"));
            app.st.say(
                false,
                format!(
                    "{} recordings given: shown as the nodes of one run, on the wall clock{asked}; compare two recordings with `cufall gui A B`",
                    traces.len()
                ),
            );
            app.st.align_wall = true;
        }
        for p in traces {
            app.open(p);
        }
        app
    }

    /// Opens a recording as A; when A is open, as B (replacing B), or on the wall clock (the
    /// nodes of one run) as one more node.
    pub fn open(&mut self, path: &Path) {
        let path = trace_root(path);
        let ctx = self.ctx.clone();
        let budget = self.settings.raw_budget_mib.max(16) << 20;
        match LoadedTrace::open(&path, budget, &self.phases, move || ctx.request_repaint()) {
            Ok(data) => {
                self.settings.remember(&path.display().to_string());
                if self.slots.len() >= 2 && !self.st.align_wall {
                    self.slots.truncate(1);
                }
                // Times on the shared axis count from A's creation: small numbers keep f64
                // exact to far below a nanosecond.
                let offset_ns = match self.slots.first() {
                    Some(a) => a.offset_ns,
                    None => -data.manifest.created_unix_ns,
                };
                self.slots.push(TraceSlot { data, offset_ns });
                self.aligned = None;
                self.diff = DiffState::None;
                self.sel = None;
                // The timeline decides again which GPU groups start folded, with the new rows.
                self.st.folded = None;
                self.st.host_folded = None;
                self.st.flame_pick = FlamePick::default();
                self.flame = None;
                if self.slots.len() == 1 {
                    self.st.fitted = None;
                }
            }
            Err(e) => self.st.say(true, e.to_string()),
        }
    }

    /// The statistics of the selection, once computed.
    pub fn selection_stats(&self) -> Option<&SelectionStats> {
        self.sel.as_ref()
    }

    /// Whether every recording is loaded and nothing is being computed (tests and benchmarks
    /// wait for this).
    pub fn is_idle(&self) -> bool {
        self.slots.iter().all(|s| s.data.lock().idle)
            && !matches!(self.diff, DiffState::Computing(_))
    }

    /// The whole window inside `ui`.
    pub fn ui_root(&mut self, ui: &mut Ui) {
        self.take_dropped_files(ui);
        self.poll_diff();
        if self.slots.len() == 2 && matches!(self.diff, DiffState::None) {
            self.start_diff();
        }
        self.place_recordings();
        let mut locked: Vec<Locked<'_>> = self.slots.iter().map(Locked::new).collect();
        for t in &locked {
            for p in t.s.problems.iter() {
                self.st.say(true, p.clone());
            }
            for w in t.s.warnings.iter() {
                self.st.say(false, format!("{}: {w}", t.slot.data.name));
            }
        }
        // Fit the whole run once the extents are known, and again when every recording is
        // read (extents final, B aligned) unless the view was moved in between.
        let known = !locked.is_empty() && locked.iter().all(|t| t.s.tiles.count > 0);
        // B's offset must come from the same finished state: the loader may finish between
        // the alignment above and these locks, and a final fit made before B's final offset
        // would leave the view off by the shift.
        let aligned_final = locked.len() < 2 || self.aligned.as_ref().is_some_and(|(_, _, r)| *r);
        let done = known
            && aligned_final
            && locked
                .iter()
                .all(|t| t.s.samples_done && t.s.tables.is_some());
        let untouched = self.st.fitted.is_none_or(|(v, _)| v == self.st.view);
        let final_fit = self.st.fitted.is_some_and(|(_, f)| f);
        if known && untouched && !final_fit {
            let (a, b) = shared_extent(&locked);
            self.st.view.fit(a, b, 0.01);
            self.st.fitted = Some((self.st.view, done));
        }
        let mut open_request = None;
        let inputs = top_bar_ui(ui, &self.st, &mut self.settings, &locked, &mut open_request);
        apply_all(&mut self.st, inputs, &locked);
        let inputs = messages_ui(ui, &self.st);
        apply_all(&mut self.st, inputs, &locked);
        update_selection(&mut self.sel, &mut self.st, &mut locked);
        update_flame(&mut self.flame, &self.st, &locked);
        let sel = (self.sel.as_ref(), self.flame.as_ref().map(|f| &f.1));
        panels_ui(
            ui,
            &locked,
            sel,
            (&mut self.st, &mut self.settings),
            &self.diff,
        );
        egui::CentralPanel::default().show(ui, |ui| {
            if locked.is_empty() {
                empty_ui(ui);
            } else {
                let inputs = timeline_ui(ui, &mut locked, &self.st, &mut self.settings);
                self.st.apply_frame(inputs, shared_extent(&locked));
                request_visible_tiles(&mut locked, &self.st.view);
            }
        });
        let extent = shared_extent(&locked);
        drop(locked);
        if self.st.show_help {
            let mut open = true;
            help_ui(ui.ctx(), &mut open);
            if !open {
                self.st.apply(Input::CloseHelp, extent);
            }
        }
        if let Some(shown) = &self.st.browser {
            let mut b = shown.clone();
            let mut keep = true;
            let picked = b.ui(ui.ctx(), &mut keep);
            if picked.is_some() || !keep {
                self.st.apply(Input::Browser(None), extent);
            } else if b != *shown {
                self.st.apply(Input::Browser(Some(b)), extent);
            }
            if picked.is_some() {
                open_request = picked;
            }
        }
        if let Some(p) = open_request {
            self.open(&p);
        }
    }

    /// Places the recordings after A on the shared axis as the alignment says, and has the
    /// timeline decide the folds again when the GPU groups change (per node or per GPU).
    fn place_recordings(&mut self) {
        if let Some(offset) = align_offset(&self.slots, &mut self.st, &mut self.aligned) {
            for s in self.slots.iter_mut().skip(1) {
                s.offset_ns = offset;
            }
        }
        let per_node = self.st.nodes_apart(self.slots.len());
        if per_node != self.groups_per_node {
            self.groups_per_node = per_node;
            self.st.folded = None;
        }
    }

    fn start_diff(&mut self) {
        let (Some(a), Some(b)) = (self.slots.first(), self.slots.get(1)) else {
            return;
        };
        let (ta, tb) = (a.data.trace.clone(), b.data.trace.clone());
        let phases = self.phases.clone();
        let (tx, rx) = mpsc::channel();
        let ctx = self.ctx.clone();
        let spawned = std::thread::Builder::new()
            .name("cufall-gui-diff".into())
            .spawn(move || {
                // The panel compares phases and gap totals by place: no single gap is kept, and
                // no kernel is tabled.
                let opts = ReportOptions {
                    kernel_rows: Some(0),
                    gap_rows: Some(0),
                    phases,
                    ..ReportOptions::default()
                };
                let r = build_diff(&ta, &tb, &opts).map_err(DiffError::from);
                let _ = tx.send(r);
                ctx.request_repaint();
            });
        self.diff = match spawned {
            Ok(_) => DiffState::Computing(rx),
            Err(e) => DiffState::Done(Box::new(Err(DiffError::Spawn(e)))),
        };
    }

    fn poll_diff(&mut self) {
        if let DiffState::Computing(rx) = &self.diff {
            match rx.try_recv() {
                Ok(r) => self.diff = DiffState::Done(Box::new(r)),
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.diff = DiffState::Done(Box::new(Err(DiffError::Stopped)))
                }
            }
        }
    }

    fn take_dropped_files(&mut self, ui: &Ui) {
        let dropped: Vec<PathBuf> = ui.input(|i| {
            i.raw
                .dropped_files
                .iter()
                .map(|f| f.path().to_path_buf())
                .collect()
        });
        for p in dropped {
            self.open(&p);
        }
    }
}

impl eframe::App for GuiApp {
    fn ui(&mut self, ui: &mut Ui, _frame: &mut eframe::Frame) {
        self.ui_root(ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, SETTINGS_KEY, &self.settings);
    }
}

/// The folder of a trace from a path inside it (a dropped `manifest.json` or segment).
pub fn trace_root(path: &Path) -> PathBuf {
    let mut p = path;
    loop {
        if p.join(cufall_trace::MANIFEST_FILE).is_file() {
            return p.to_path_buf();
        }
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent,
            _ => return path.to_path_buf(),
        }
    }
}

/// The statistics of the selection, recomputed while they are not exact (edge tiles
/// loading); a new selection starts the flame graph with the thread that launched its work.
fn update_selection(
    sel: &mut Option<SelectionStats>,
    st: &mut ViewState,
    locked: &mut [Locked<'_>],
) {
    // Selection statistics, recomputed while they are not exact (edge tiles loading).
    let selection = st.selection();
    let stale = match (&*sel, selection) {
        (Some(s), Some((a, b))) => s.a != a || s.b != b || !s.exact,
        (None, Some(_)) => true,
        (_, None) => false,
    };
    if selection.is_none() {
        *sel = None;
    }
    if stale && let Some((a, b)) = selection {
        let phase = st.selected_phase.as_ref().map(|(p, n)| (p.as_str(), *n));
        let (stats, wanted) = selection_stats(locked, a, b, phase);
        for (t, want) in locked.iter_mut().zip(wanted) {
            for (x, y) in want {
                t.slot.data.request_tiles(&mut t.s, x, y);
            }
        }
        if sel.as_ref().is_none_or(|s| s.a != a || s.b != b) {
            // The flame graph starts with the thread that launched the work: the one that
            // pushed the NVTX ranges in the selection, else the busiest.
            let ti = st.flame_pick.ti.min(locked.len().saturating_sub(1));
            if let (Some(t), Some(w)) = (locked.get(ti), stats.windows.get(ti)) {
                st.flame_pick = FlamePick {
                    ti,
                    thread: launching_thread(t, w.0, w.1),
                };
            }
        }
        *sel = Some(stats);
    }
}

/// The details pane along the bottom and the side panel (navigation), where the window has
/// room for them.
fn panels_ui(
    ui: &mut Ui,
    locked: &[Locked<'_>],
    sel: (Option<&SelectionStats>, Option<&Icicle>),
    (st, settings): (&mut ViewState, &mut Settings),
    diff: &DiffState,
) {
    let window = ui.available_rect_before_wrap();
    // A small window keeps the axis and the tracks: the pane and the panel step aside.
    let room_for_details = window.height() >= 420.0;
    let room_for_panel = window.width() >= 720.0;
    if settings.details && room_for_details && !locked.is_empty() {
        let pref = crate::timeline::preferred_height(locked, st, settings);
        let auto = (window.height() - pref).clamp(DETAILS_MIN_H, window.height() * 0.6);
        let h = settings
            .details_h
            .unwrap_or(auto)
            .clamp(DETAILS_MIN_H, (window.height() - 200.0).max(DETAILS_MIN_H));
        // Without a selection the pane is its tab bar and a hint; the tracks take the rest.
        let h = if sel.0.is_some() { h } else { DETAILS_CLOSED_H };
        egui::Panel::bottom("details")
            .resizable(false)
            .exact_size(h)
            .show(ui, |ui| {
                if sel.0.is_some() {
                    details_resize_ui(ui, settings, h);
                }
                let inputs = details_ui(ui, locked, st, sel);
                apply_all(st, inputs, locked);
            });
    }
    if settings.side_panel && room_for_panel && !locked.is_empty() {
        egui::Panel::right("side")
            .resizable(true)
            .default_size(330.0)
            .max_size(560.0)
            .show(ui, |ui| {
                let inputs = side_panel_ui(ui, locked, st, diff);
                apply_all(st, inputs, locked);
            });
    }
}

/// Applies what the user did in a pane, in order, as the pane returns: what is drawn after it
/// this frame (the timeline) shows the change.
fn apply_all(st: &mut ViewState, inputs: Vec<Input>, locked: &[Locked<'_>]) {
    if inputs.is_empty() {
        return;
    }
    let extent = shared_extent(locked);
    for input in inputs {
        st.apply(input, extent);
    }
}

/// The details pane's top edge: a drag sets its height (kept in the settings), a double-click
/// gives it back the height the tracks leave.
fn details_resize_ui(ui: &Ui, settings: &mut Settings, h: f32) {
    let top = ui.max_rect().top() - 4.0;
    let r = egui::Rect::from_x_y_ranges(ui.max_rect().x_range(), top - 3.0..=top + 3.0);
    let resp = ui
        .interact(
            r,
            egui::Id::unique("cufall-details-edge"),
            egui::Sense::click_and_drag(),
        )
        .on_hover_cursor(egui::CursorIcon::ResizeVertical);
    resp.widget_info(|| {
        egui::WidgetInfo::labeled(egui::Role::Splitter, true, "resize the details pane")
    });
    if resp.double_clicked() {
        settings.details_h = None;
    } else if resp.dragged() {
        settings.details_h = Some((h - resp.drag_delta().y).max(DETAILS_MIN_H));
    }
}

/// The thread that launched the work of `[t0, t1)` (recording `t`'s clock): the one that pushed
/// most of the NVTX ranges meeting it, if it was sampled; else the thread running in most of
/// the samples there; `None` (every thread) without host samples.
fn launching_thread(t: &Locked<'_>, t0: i64, t1: i64) -> Option<(u32, u32)> {
    let tb = t.s.tables.as_ref()?;
    if tb.host.is_empty() {
        return None;
    }
    let mut counts: std::collections::HashMap<(u32, u32), usize> = Default::default();
    for r in &tb.nvtx {
        if r.start_ns < t1 && r.end_ns > t0 {
            *counts.entry((r.pid, r.tid)).or_default() += 1;
        }
    }
    let sampled = |k: &(u32, u32)| tb.host.threads.iter().any(|th| (th.pid, th.tid) == *k);
    let by_ranges = counts
        .into_iter()
        .filter(|(k, _)| sampled(k))
        .max_by_key(|(k, n)| (*n, std::cmp::Reverse(*k)))
        .map(|(k, _)| k);
    by_ranges.or_else(|| {
        tb.host
            .threads
            .iter()
            .map(|th| {
                let running = th
                    .between(t0, t1)
                    .filter(|i| th.state[*i] == cufall_trace::model::HostState::Running)
                    .count();
                (running, (th.pid, th.tid))
            })
            .filter(|(n, _)| *n > 0)
            .max_by_key(|(n, k)| (*n, std::cmp::Reverse(*k)))
            .map(|(_, k)| k)
    })
}

/// Builds the flame graph of the selection again when the selection, the threads chosen or
/// the recording's tables changed.
fn update_flame(flame: &mut Option<(FlameKey, Icicle)>, st: &ViewState, locked: &[Locked<'_>]) {
    let Some((a, b)) = st.selection() else {
        *flame = None;
        return;
    };
    let pick = st.flame_pick;
    let Some(t) = locked.get(pick.ti) else {
        *flame = None;
        return;
    };
    let key = (a, b, pick, t.s.tables.is_some());
    if flame.as_ref().is_some_and(|(k, _)| *k == key) {
        return;
    }
    let icicle = t.s.tables.as_ref().map_or_else(Icicle::default, |tb| {
        let threads = tb.host.threads.iter().filter(|th| {
            pick.thread
                .is_none_or(|(pid, tid)| (th.pid, th.tid) == (pid, tid))
        });
        Icicle::build(&tb.host, threads, t.slot.local(a), t.slot.local(b))
    });
    *flame = Some((key, icicle));
}

/// Places B on the shared axis: the first range of the chosen phase in B starts where the first
/// in A does; without a chosen phase, their first samples line up; on the wall clock, every
/// recording after A takes A's offset. Returns the offset of the recordings after A, or `None`
/// when nothing changed since `aligned`.
fn align_offset(
    slots: &[TraceSlot],
    st: &mut ViewState,
    aligned: &mut Option<(Option<String>, bool, bool)>,
) -> Option<i64> {
    if slots.len() < 2 {
        return None;
    }
    let locked: Vec<Locked<'_>> = slots.iter().map(Locked::new).collect();
    let ready = locked
        .iter()
        .all(|t| t.s.tables.is_some() && t.s.samples_done);
    if aligned
        .as_ref()
        .is_some_and(|(p, w, r)| *p == st.align_phase && *w == st.align_wall && *r == ready)
    {
        return None;
    }
    let base = locked[0].slot.offset_ns;
    if st.align_wall
        && ready
        && let Some(why) = wall_aligns_nothing(&locked)
    {
        st.say(false, why);
        st.align_wall = false;
    }
    if st.align_wall {
        // Every trace's clock is its host's wall clock: each takes A's offset, unshifted.
        *aligned = Some((st.align_phase.clone(), true, ready));
        return Some(base);
    }
    let mut offset = base + locked[0].s.extent.start_ns - locked[1].s.extent.start_ns;
    if let Some(phase) = st.align_phase.clone() {
        let first_of = |t: &Locked<'_>| -> Option<i64> {
            let tb = t.s.tables.as_ref()?;
            let idx = tb.phases.phases.iter().position(|p| p.path == phase)?;
            tb.phases
                .ranges
                .iter()
                .filter(|r| r.phase == idx)
                .map(|r| r.start_ns)
                .min()
        };
        match (first_of(&locked[0]), first_of(&locked[1])) {
            (Some(a), Some(b)) => offset = base + a - b,
            _ if ready => {
                let common = common_phases(&locked);
                st.say(
                    true,
                    if common.is_empty() {
                        format!(
                            "cannot align at phase {phase:?}: the recordings have no NVTX phase in common; aligned at their first samples"
                        )
                    } else {
                        format!(
                            "cannot align at phase {phase:?}: it is not in both recordings (common phases: {}); aligned at their first samples",
                            common.join(", ")
                        )
                    },
                );
                st.align_phase = None;
            }
            _ => {}
        }
    }
    *aligned = Some((st.align_phase.clone(), false, ready));
    Some(offset)
}

/// Why the wall clock lines up nothing for these recordings, if it does not: recordings of one
/// host share one clock, so on it they fall where they were recorded; when none overlaps
/// another in time (one program recorded twice), they would sit side by side with nothing to
/// compare. `None` where the hosts differ (the nodes of one run) or the recordings overlap.
pub fn wall_aligns_nothing(locked: &[Locked<'_>]) -> Option<String> {
    if locked.len() < 2 || hosts_differ(locked) {
        return None;
    }
    let spans: Vec<(i64, i64)> = locked
        .iter()
        .map(|t| (t.s.extent.start_ns, t.s.extent.end_ns))
        .collect();
    let overlap = spans
        .iter()
        .enumerate()
        .any(|(i, a)| spans.iter().skip(i + 1).any(|b| a.0 < b.1 && b.0 < a.1));
    if overlap {
        return None;
    }
    let host = crate::loaded::host_of(&locked[0]);
    let (a, b) = (spans[0], spans[1]);
    let apart = if b.0 >= a.1 {
        format!("B starts {} after A ends", Nanos(b.0 - a.1))
    } else {
        format!("B ends {} before A starts", Nanos(a.0 - b.1))
    };
    Some(format!(
        "--align wall lines up nothing here: the recordings come from one host ({host}), whose clock          they share, and do not overlap in time ({apart}). The wall clock is for the nodes of one          run; they are aligned at their first samples instead (--align PHASE aligns them at a          phase)."
    ))
}

fn request_visible_tiles(locked: &mut [Locked<'_>], view: &TimeView) {
    for t in locked.iter_mut() {
        let px = view.span() / 1500.0;
        let need = t.s.pyramids.values().any(|p| p.level_for(px).is_none());
        if need {
            let (a, b) = (t.slot.local(view.t0), t.slot.local(view.t1));
            t.slot.data.request_tiles(&mut t.s, a, b);
        }
    }
}

/// The bar along the top; returns what the user did to the view's state in it, for
/// [`ViewState::apply`] (the settings it changes in place).
fn top_bar_ui(
    ui: &mut Ui,
    st: &ViewState,
    settings: &mut Settings,
    locked: &[Locked<'_>],
    open: &mut Option<PathBuf>,
) -> Vec<Input> {
    let mut out = Vec::new();
    egui::Panel::top("top").show(ui, |ui| {
        // One line whatever the width: the controls first, the recordings' names last, cut to
        // the room left (the full path on hover).
        ui.horizontal(|ui| {
            ui.strong("cufall");
            let mut path = st.open_path.clone();
            let resp = ui.add(
                egui::TextEdit::singleline(&mut path)
                    .hint_text("path to a .cufall recording")
                    .desired_width(150.0),
            );
            let enter = resp.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            if (ui.button("Open").clicked() || enter) && !path.trim().is_empty() {
                *open = Some(PathBuf::from(path.trim()));
                path.clear();
            }
            if path != st.open_path {
                out.push(Input::EditOpenPath(path));
            }
            if ui
                .button("Browse…")
                .on_hover_text("pick a recording folder")
                .clicked()
            {
                let start = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
                out.push(Input::Browser(Some(crate::browse::Browser::at(start))));
            }
            if !settings.recent.is_empty() {
                ui.menu_button("Recent", |ui| {
                    for p in settings.recent.clone() {
                        if ui.button(&p).clicked() {
                            *open = Some(PathBuf::from(&p));
                            ui.close();
                        }
                    }
                });
            }
            ui.separator();
            ui.selectable_value(&mut settings.style, TrackStyle::Heat, "heat");
            ui.selectable_value(&mut settings.style, TrackStyle::Line, "line");
            ui.checkbox(&mut settings.show_nvtx, "NVTX");
            ui.checkbox(&mut settings.show_kernels, "kernels");
            ui.checkbox(&mut settings.show_nvml, "NVML");
            ui.checkbox(&mut settings.show_gaps, "gaps")
                .on_hover_text("idle gaps: a hatched band under each GPU's first track");
            ui.checkbox(&mut settings.show_cufall_threads, "cufall threads")
                .on_hover_text("cufall's own threads in the profiled process (cufall-*)");
            ui.checkbox(&mut settings.side_panel, "panel")
                .on_hover_text("the side panel: phases, gaps, comparison");
            ui.checkbox(&mut settings.details, "details")
                .on_hover_text("the details pane: the selection's figures, flame graph and tables");
            if ui.button("Fit").on_hover_text("F").clicked() {
                let (a, b) = shared_extent(locked);
                out.push(Input::Fit { a, b, margin: 0.01 });
            }
            if ui.button("?").on_hover_text("controls").clicked() {
                out.push(Input::ToggleHelp);
            }
            ui.separator();
            let room = ui.available_width() / locked.len().max(1) as f32;
            for (i, t) in locked.iter().enumerate() {
                // `A: `, `B: `, ... with several recordings.
                let tag = crate::loaded::trace_tag(locked.len(), i).replace(' ', ": ");
                if !t.s.idle {
                    ui.spinner();
                }
                ui.scope(|ui| {
                    ui.set_max_width((room - 24.0).max(20.0));
                    ui.add(egui::Label::new(format!("{tag}{}", t.slot.data.name)).truncate())
                        .on_hover_text(t.slot.data.path.display().to_string());
                });
            }
        });
    });
    out
}

/// The message bar; returns the message dismissed, if one was.
fn messages_ui(ui: &mut Ui, st: &ViewState) -> Vec<Input> {
    let mut out = Vec::new();
    if st.messages.is_empty() {
        return out;
    }
    egui::Panel::top("messages").show(ui, |ui| {
        let mut dismiss = None;
        for (i, m) in st.messages.iter().enumerate().take(6) {
            ui.horizontal(|ui| {
                if ui.small_button("x").clicked() {
                    dismiss = Some(i);
                }
                let color = if m.error {
                    ui.visuals().error_fg_color
                } else {
                    ui.visuals().warn_fg_color
                };
                ui.colored_label(color, &m.text);
            });
        }
        if st.messages.len() > 6 {
            ui.label(format!("… {} more (also on stderr)", st.messages.len() - 6));
        }
        out.extend(dismiss.map(Input::Dismiss));
    });
    out
}

fn empty_ui(ui: &mut Ui) {
    ui.vertical_centered(|ui| {
        ui.add_space(80.0);
        ui.heading("No recording open");
        ui.label("Drop a .cufall folder here, or type its path above and press Open.");
        ui.label("Record one with: cufall record -o run.cufall -- ./my_program");
    });
}

/// The controls, as a window.
pub fn help_ui(ctx: &egui::Context, open: &mut bool) {
    egui::Window::new("Controls")
        .open(open)
        .resizable(false)
        .show(ctx, |ui| {
            egui::Grid::new("help").num_columns(2).show(ui, |ui| {
                for (k, what) in HELP {
                    ui.strong(*k);
                    ui.label(*what);
                    ui.end_row();
                }
            });
        });
}

/// Every control of the timeline.
pub const HELP: &[(&str, &str)] = &[
    ("Ctrl + wheel", "zoom at the cursor"),
    ("drag", "pan"),
    ("horizontal wheel", "pan"),
    ("W / S", "zoom in / out (at the cursor)"),
    ("A / D", "pan left / right"),
    ("Shift + drag", "select a time range"),
    ("right drag, Ctrl + drag", "box zoom"),
    ("click", "select the range, kernel or gap under the cursor"),
    (
        "double-click",
        "fit the range, kernel or gap under the cursor (on a counter: the gap or phase there)",
    ),
    ("F", "fit the selection (or the whole run)"),
    ("Esc", "clear the selection"),
    ("overview strip", "click or drag to move the window"),
    ("click a GPU's title", "fold or open its tracks"),
    (
        "click a host thread's label",
        "open it as a flame chart, or close it to one lane",
    ),
    (
        "drag a track's bottom edge (labels)",
        "resize it (double-click the edge: shared height)",
    ),
    ("side panel", "click a phase or gap to zoom there"),
    ("?", "this help"),
];
