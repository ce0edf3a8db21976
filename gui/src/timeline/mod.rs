//! The timeline: an overview strip, the time axis and one row per track, drawn from the shared
//! state of each open recording, and the navigation input on it.
//!
//! - [`rows`](mod@rows): which rows there are, in order (per GPU a group that folds), and how
//!   each may be sized;
//! - [`layout`]: the rows share the timeline's height ([`layout::share_heights`]);
//! - [`input`]: the pointer and keys on the timeline, as [`crate::view::Input`]s that the view
//!   state applies;
//! - `tracks`: what each row draws and the tooltip under the pointer, `hostlane` the rows of
//!   sampled host threads; `paint`: colour maps, meshes, hatching and group titles; [`geom`]:
//!   time ↔ x ([`Geom`]) and what is under the pointer ([`Hit`]), which the others share;
//! - here: the frame's layout (overview, axis, rows, overlays), group titles and the handles
//!   that resize tracks.
//!
//! Imports flow one way inside the module too: this root uses the others, they use `geom`
//! (and `tracks` uses `rows`, `hostlane` and `paint`; `hostlane` uses `rows` and `paint`), never
//! the root.
//!
//! Metric tracks are drawn from the level-of-detail pyramid, one summary per point column, or
//! from raw samples when single samples are wider than a column.

pub mod geom;
mod hostlane;
pub mod input;
pub mod layout;
mod paint;
pub mod rows;
mod tracks;

pub use geom::{Geom, Hit};
pub use paint::{name_color, turbo};
pub use rows::{NvmlField, Row, rows};
pub use tracks::full_scale;

use crate::axis::AxisTime;
use crate::fmt::round_ns;
use crate::loaded::{Locked, shared_extent};
use crate::view::{Drag, Input, Settings, TimeView, ViewState};
use cufall_trace::model::DeviceId;
use eframe::egui::{
    self, Align2, Color32, CursorIcon, FontId, Pos2, Rect, Sense, Stroke, StrokeKind, Ui, Vec2,
};
use layout::fill_heights;
use paint::heat_mesh;
use std::collections::BTreeSet;
use tracks::draw_row;

/// Width of the label column (narrower in a narrow window: at most 30 % of it).
pub const LABEL_W: f32 = 210.0;
const OVERVIEW_H: f32 = 34.0;
const AXIS_H: f32 = 22.0;
/// The line saying what a recording lacks.
const ABSENT_H: f32 = 16.0;
/// Space between rows.
const ROW_GAP: f32 = 2.0;
/// How far above and below a track's bottom edge the pointer grabs it to resize.
const GRAB: f32 = 3.0;
/// Of the window's height, what the top bar, the overview, the axis and the details pane take
/// at least, when deciding which GPU groups start folded.
const FOLD_RESERVE_H: f32 = 260.0;
/// Below this height the overview strip is left out: the axis and the tracks come first.
const OVERVIEW_FROM_H: f32 = 260.0;

/// The height the timeline's rows would take at their preferred (largest) sizes, with the
/// overview and the axis: the app gives the details pane what is left of the window.
pub fn preferred_height(traces: &[Locked<'_>], st: &ViewState, settings: &Settings) -> f32 {
    let no_folds = BTreeSet::new();
    let no_threads = BTreeSet::new();
    let rows = rows(
        traces,
        settings,
        (
            st.folded.as_ref().unwrap_or(&no_folds),
            (
                st.host_folded.as_ref().unwrap_or(&no_folds_usize()),
                st.host_open.as_ref().unwrap_or(&no_threads),
            ),
        ),
        st.nodes_apart(traces.len()),
    );
    let rows_h: f32 = rows
        .iter()
        .map(|r| {
            let f = r.fit(traces, settings);
            f.max.max(f.min) + ROW_GAP
        })
        .sum();
    let absent = if absent_line(traces).is_some() {
        ABSENT_H
    } else {
        0.0
    };
    OVERVIEW_H + AXIS_H + absent + rows_h + 8.0
}

fn no_folds_usize() -> BTreeSet<usize> {
    BTreeSet::new()
}

/// Draws the overview strip, the axis and the rows, and returns navigation input, for
/// [`ViewState::apply_frame`]; a drag on a track's bottom edge (in the label column) resizes it
/// (kept in `settings`).
pub fn timeline_ui(
    ui: &mut Ui,
    traces: &mut [Locked<'_>],
    st: &ViewState,
    settings: &mut Settings,
) -> Vec<Input> {
    let mut out = Vec::new();
    let extent = shared_extent(traces);
    let full = ui.available_rect_before_wrap();
    let label_w = LABEL_W.min((full.width() * 0.3).max(60.0));
    let data_x0 = full.left() + label_w;
    let data_w = (full.width() - label_w - 4.0).max(50.0);

    let geom = Geom {
        x0: data_x0,
        w: data_w,
        view: st.view,
    };
    let axis_rect = header_ui(ui, traces, st, settings, (&geom, full), &mut out);
    let avail_h = ui.available_height();
    // Folds are decided for the window, not for what the details pane leaves this frame (it
    // sizes itself by the rows, which the folds decide): the window less the bars and the
    // pane's smallest height.
    let window_h = ui.ctx().content_rect().height() - FOLD_RESERVE_H;
    let decided = decide_folds(traces, settings, st, avail_h.max(window_h));
    let rows = folded_rows(traces, settings, st, decided.as_ref());
    out.extend(decided);
    let heights = row_heights(&rows, traces, settings, avail_h);
    let total_h: f32 = heights.iter().map(|h| h + ROW_GAP).sum();
    let mut hit: Option<Hit> = None;
    let mut data_rect = Rect::NOTHING;
    // The pointer over any row's data: each track shows its value at that time.
    let cursor_x = ui
        .input(|i| i.pointer.hover_pos())
        .filter(|p| {
            p.x >= data_x0
                && p.x <= data_x0 + data_w
                && p.y > axis_rect.top()
                && p.y < full.bottom()
        })
        .map(|p| p.x);
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show(ui, |ui| {
            let (rect, _) =
                ui.allocate_exact_size(Vec2::new(full.width(), total_h), Sense::hover());
            data_rect = Rect::from_min_max(
                Pos2::new(data_x0, rect.top()),
                Pos2::new(data_x0 + data_w, rect.bottom()),
            );
            let resp = ui.interact(
                data_rect,
                egui::Id::unique("cufall-timeline"),
                Sense::click_and_drag(),
            );
            let pointer = resp.hover_pos();
            let painter = ui.painter_at(rect);
            let clip = ui.clip_rect();
            let mut y = rect.top();
            for (i, (row, &h)) in rows.iter().zip(&heights).enumerate() {
                let row_rect =
                    Rect::from_min_size(Pos2::new(rect.left(), y), Vec2::new(full.width(), h));
                y += h + ROW_GAP;
                if !row_rect.intersects(clip) {
                    continue;
                }
                let label_rect =
                    Rect::from_min_max(row_rect.min, Pos2::new(data_x0 - 6.0, row_rect.bottom()));
                let area = Rect::from_min_max(
                    Pos2::new(data_x0, row_rect.top()),
                    Pos2::new(data_x0 + data_w, row_rect.bottom()),
                );
                let hovered = pointer.filter(|p| area.contains(*p));
                metric_label_ui(ui, row, label_rect, traces);
                group_title_ui(ui, row, label_rect, traces, &mut out);
                let h = draw_row(
                    ui,
                    &painter,
                    *row,
                    (label_rect, area),
                    traces,
                    &geom,
                    settings,
                    (hovered, cursor_x),
                );
                if h.is_some() {
                    hit = h;
                }
                resize_handle_ui(ui, i, row, label_rect, traces, settings);
            }
            overlays(&painter, st, &geom, data_rect, pointer);
            let phase = |x: f32| phase_span_at(traces, geom.t(x));
            let at = (st, extent);
            input::pointer_input(ui, &resp, &geom, at, hit.as_ref(), &phase, &mut out);
            if let Some(h) = &hit
                && st.drag_after(&out, extent).is_none()
            {
                resp.on_hover_text_at_pointer(h.text.clone());
            }
        });
    out.push(Input::DrawnAt(data_rect.intersect(ui.clip_rect())));
    input::key_input(ui, &geom, &mut out);
    out
}

/// The rows as folded: by the folds `decided` this frame (drawn this frame), else the state's.
fn folded_rows(
    traces: &[Locked<'_>],
    settings: &Settings,
    st: &ViewState,
    decided: Option<&Input>,
) -> Vec<Row> {
    let (folded, host_folded, host_open) = match decided {
        Some(Input::DecideFolds {
            folded,
            host_folded,
            host_open,
        }) => (
            Some(folded),
            Some(host_folded),
            host_open.as_ref().or(st.host_open.as_ref()),
        ),
        _ => (
            st.folded.as_ref(),
            st.host_folded.as_ref(),
            st.host_open.as_ref(),
        ),
    };
    let no_folds = BTreeSet::new();
    let no_threads = BTreeSet::new();
    let no_host_folds = BTreeSet::new();
    rows(
        traces,
        settings,
        (
            folded.unwrap_or(&no_folds),
            (
                host_folded.unwrap_or(&no_host_folds),
                host_open.unwrap_or(&no_threads),
            ),
        ),
        st.nodes_apart(traces.len()),
    )
}

/// The overview strip (left out in a small window), the axis with its hover, and the line of
/// what the recordings lack; returns the axis' rectangle.
fn header_ui(
    ui: &mut Ui,
    traces: &[Locked<'_>],
    st: &ViewState,
    settings: &Settings,
    (geom, full): (&Geom, Rect),
    out: &mut Vec<Input>,
) -> Rect {
    let extent = shared_extent(traces);
    let origin = extent.0;
    let (data_x0, data_w) = (geom.x0, geom.w);
    // Overview of the whole run, with the visible window; left out in a small window.
    if full.height() >= OVERVIEW_FROM_H {
        let (ov_rect, ov_resp) =
            ui.allocate_exact_size(Vec2::new(full.width(), OVERVIEW_H), Sense::click_and_drag());
        let center_at = overview_ui(ui, ov_rect, traces, st, extent, data_x0, data_w, &ov_resp);
        out.extend(center_at);
    }

    let (axis_rect, axis_resp) =
        ui.allocate_exact_size(Vec2::new(full.width(), AXIS_H), Sense::hover());
    axis_ui(ui, axis_rect, geom, origin, settings.show_gaps);
    if let Some(p) = axis_resp.hover_pos()
        && p.x >= data_x0
        && let Some(a) = traces.first()
    {
        let t = geom.t(p.x);
        axis_resp.on_hover_text_at_pointer(format!(
            "{} from the start\nwall clock {} (A's host)",
            crate::axis::fmt_axis(t - origin, geom.px_ns() * 10.0),
            crate::axis::fmt_wall_clock(a.slot.local(t)),
        ));
    }
    if let Some(line) = absent_line(traces) {
        let (r, _) = ui.allocate_exact_size(Vec2::new(full.width(), ABSENT_H), Sense::hover());
        ui.painter_at(r).text(
            Pos2::new(r.left() + 6.0, r.center().y),
            Align2::LEFT_CENTER,
            line,
            FontId::proportional(12.0),
            ui.visuals().warn_fg_color,
        );
    }

    axis_rect
}

/// One line naming what the recordings lack (counters, kernels, host samples), so that a
/// missing track reads as absent from the recording, not as a fault of the window; `None` when
/// nothing is missing or the tables are not read yet.
pub fn absent_line(traces: &[Locked<'_>]) -> Option<String> {
    // What each recording lacks, and which recordings lack it.
    let mut lacking: Vec<(&str, Vec<String>)> = Vec::new();
    for (ti, t) in traces.iter().enumerate() {
        let Some(tb) = t.s.tables.as_ref() else {
            continue;
        };
        let missing = [
            (t.slot.data.metrics.is_empty(), "no GPU counters"),
            (tb.kernels.is_empty(), "no kernels"),
            (
                tb.host.is_empty(),
                "no host samples (record with --host-stacks)",
            ),
        ];
        for (absent, what) in missing {
            if !absent {
                continue;
            }
            let tag = crate::loaded::trace_tag(traces.len(), ti)
                .trim_end()
                .to_string();
            match lacking.iter_mut().find(|(w, _)| *w == what) {
                Some((_, who)) => who.push(tag),
                None => lacking.push((what, vec![tag])),
            }
        }
    }
    if lacking.is_empty() {
        return None;
    }
    // What the same recordings lack, said once: `B: no GPU counters, no kernels`.
    let mut by_who: Vec<(Vec<String>, Vec<&str>)> = Vec::new();
    for (what, who) in lacking {
        match by_who.iter_mut().find(|(w, _)| *w == who) {
            Some((_, whats)) => whats.push(what),
            None => by_who.push((who, vec![what])),
        }
    }
    let parts: Vec<String> = by_who
        .into_iter()
        .map(|(who, whats)| {
            if traces.len() > 1 {
                format!("{}: {}", who.join(", "), whats.join(", "))
            } else {
                whats.join(", ")
            }
        })
        .collect();
    Some(if traces.len() > 1 {
        format!("{}.", parts.join("; "))
    } else {
        format!("This recording has {}.", parts.join(", "))
    })
}

/// The innermost NVTX phase range of any recording at time `t`, on the shared axis: what a
/// double-click on a counter track fits when no gap is under the pointer.
fn phase_span_at(traces: &[Locked<'_>], t: AxisTime) -> Option<(AxisTime, AxisTime)> {
    traces
        .iter()
        .filter_map(|tr| {
            let tb = tr.s.tables.as_ref()?;
            let at = tr.slot.local(t);
            tb.phases
                .ranges
                .iter()
                .filter(|r| r.start_ns <= at && at < r.end_ns)
                .min_by_key(|r| r.end_ns - r.start_ns)
                .map(|r| (tr.slot.disp(r.start_ns), tr.slot.disp(r.end_ns)))
        })
        .min_by(|a, b| (a.1 - a.0).total_cmp(&(b.1 - b.0)))
}

/// The rows' heights: the height below the axis, less the space between rows, shared by
/// [`fill_heights`]: nothing is left blank below the last row.
fn row_heights(rows: &[Row], traces: &[Locked<'_>], settings: &Settings, avail_h: f32) -> Vec<f32> {
    let fits: Vec<layout::Fit> = rows.iter().map(|r| r.fit(traces, settings)).collect();
    let gaps = ROW_GAP * rows.len() as f32;
    fill_heights(&fits, avail_h - gaps)
}

/// Decides once which groups start folded, when the recordings' tables are read (before, the
/// lanes they add are not known): all open if every row fits the height at its smallest, else
/// all folded, so that many GPUs start as one row each rather than a long scroll. The busiest
/// host threads (running in at least a tenth of their samples, three per recording at most)
/// start as flame charts, the others as one lane each. The decision is an
/// [`Input::DecideFolds`]; `None` once decided or while tables are still read.
fn decide_folds(
    traces: &[Locked<'_>],
    settings: &Settings,
    st: &ViewState,
    avail_h: f32,
) -> Option<Input> {
    let read = traces.iter().all(|t| t.s.tables.is_some() || t.s.idle);
    if st.folded.is_some() || traces.is_empty() || !read {
        return None;
    }
    // Many host threads start folded whatever the height: each is a lane of its own.
    let host_folded: BTreeSet<usize> = (0..traces.len())
        .filter(|ti| rows::shown_threads(traces, *ti, settings).0.len() > rows::HOST_OPEN_MAX)
        .collect();
    let mut decided_open = None;
    if st.host_open.is_none() {
        let mut open = BTreeSet::new();
        for (ti, t) in traces.iter().enumerate() {
            let Some(tb) = t.s.tables.as_ref() else {
                continue;
            };
            let mut busy: Vec<&crate::host_threads::HostThread> =
                rows::shown_threads(traces, ti, settings)
                    .0
                    .into_iter()
                    .map(|i| &tb.host.threads[i])
                    .filter(|th| th.running * 10 >= th.len().max(1))
                    .collect();
            busy.sort_by_key(|th| std::cmp::Reverse(th.running));
            open.extend(busy.iter().take(3).map(|th| (ti, th.pid, th.tid)));
        }
        decided_open = Some(open);
    }
    let no_threads = BTreeSet::new();
    let host_open = decided_open
        .as_ref()
        .or(st.host_open.as_ref())
        .unwrap_or(&no_threads);
    let per_node = st.nodes_apart(traces.len());
    let open = rows(
        traces,
        settings,
        (&BTreeSet::new(), (&host_folded, host_open)),
        per_node,
    );
    let smallest: f32 = open
        .iter()
        .map(|r| r.fit(traces, settings).min + ROW_GAP)
        .sum();
    let folded = if smallest > avail_h {
        rows::groups(traces, per_node).into_iter().collect()
    } else {
        BTreeSet::new()
    };
    Some(Input::DecideFolds {
        folded,
        host_folded,
        host_open: decided_open,
    })
}

/// A click on a group's title folds or unfolds the group.
fn group_title_ui(
    ui: &Ui,
    row: &Row,
    label_rect: Rect,
    traces: &[Locked<'_>],
    out: &mut Vec<Input>,
) {
    let (id, folded, (what, tracks), input) = match *row {
        Row::Device { group, folded } => {
            let DeviceId(n) = group.dev;
            let what = match group.ti {
                Some(ti) => crate::loaded::node_gpu_label(traces, ti, group.dev),
                None => group.dev.to_string(),
            };
            (
                egui::Id::unique(("cufall-group", group.ti, n)),
                folded,
                (what, "this GPU's tracks"),
                Input::ToggleGroup(group),
            )
        }
        Row::HostTitle { ti, folded } => (
            egui::Id::unique(("cufall-host-group", ti)),
            folded,
            (format!("host threads {ti}"), "the host threads' lanes"),
            Input::ToggleHostGroup(ti),
        ),
        Row::Host { ti, thread, open } => {
            let Some(th) = traces[ti]
                .s
                .tables
                .as_ref()
                .and_then(|tb| tb.host.threads.get(thread))
            else {
                return;
            };
            (
                egui::Id::unique(("cufall-host-thread", ti, th.pid, th.tid)),
                !open,
                (
                    format!("thread {} {}", th.tid, th.name),
                    "its stacks as a flame chart (a level per stack depth)",
                ),
                Input::ToggleThread(ti, th.pid, th.tid),
            )
        }
        _ => return,
    };
    let resp = ui
        .interact(label_rect, id, Sense::click())
        .on_hover_cursor(CursorIcon::PointingHand)
        .on_hover_text(if folded {
            format!("click: show {tracks}")
        } else {
            format!("click: fold {tracks} into one row")
        });
    let verb = if folded { "unfold" } else { "fold" };
    resp.widget_info(|| {
        egui::WidgetInfo::labeled(egui::Role::Button, true, format!("{verb} {what}"))
    });
    if resp.clicked() {
        out.push(input);
    }
}

/// A drag on a track's bottom edge in the label column sets its height (for its metric on
/// every GPU, see [`Row::resize_key`]); a double-click there gives it back to the shared
/// layout. Only the label column: over the data, a drag pans, and the edge there stays the
/// timeline's.
fn resize_handle_ui(
    ui: &Ui,
    index: usize,
    row: &Row,
    label_rect: Rect,
    traces: &[Locked<'_>],
    settings: &mut Settings,
) {
    let Some(key) = row.resize_key(traces) else {
        return;
    };
    let edge = label_rect.bottom() + ROW_GAP / 2.0;
    let grab = Rect::from_x_y_ranges(label_rect.x_range(), edge - GRAB..=edge + GRAB);
    // The row's place in the list, not its y, names the handle: the y moves while it is dragged.
    let resp = ui
        .interact(
            grab,
            egui::Id::unique(("cufall-resize", index)),
            Sense::click_and_drag(),
        )
        .on_hover_cursor(CursorIcon::ResizeVertical);
    resp.widget_info(|| {
        egui::WidgetInfo::labeled(egui::Role::Splitter, true, format!("resize {key}"))
    });
    if resp.double_clicked() {
        settings.track_heights.remove(&key);
    } else if resp.dragged() {
        let min = row.base_fit(settings).min;
        let now = settings
            .track_heights
            .get(&key)
            .copied()
            .unwrap_or(label_rect.height());
        let h = (now + resp.drag_delta().y).clamp(min, rows::RESIZE_MAX);
        settings.track_heights.insert(key, h);
    }
}

/// A metric row's label tells the metric's full name, unit and description on hover.
fn metric_label_ui(ui: &Ui, row: &Row, label_rect: Rect, traces: &[Locked<'_>]) {
    if let Row::Metric { ti, m, .. } = row
        && let Some(info) = traces[*ti].slot.data.metrics.get(*m)
    {
        let id = egui::Id::unique(("cufall-metric-label", *ti, *m, label_rect.top() as i32));
        let unit = if info.unit.is_empty() {
            String::new()
        } else {
            format!(" ({})", info.unit)
        };
        ui.interact(label_rect, id, Sense::hover())
            .on_hover_text(format!("{}{unit}\n{}", info.name, info.description));
    }
}

/// The selection, the box being dragged to zoom and the pointer's time line, over every row.
fn overlays(
    painter: &egui::Painter,
    st: &ViewState,
    geom: &Geom,
    data_rect: Rect,
    pointer: Option<Pos2>,
) {
    let ys = data_rect.y_range();
    if let Some((a, b)) = st.selection() {
        let r = Rect::from_x_y_ranges(geom.x(a)..=geom.x(b), ys);
        painter.rect_filled(r, 0.0, Color32::from_rgba_unmultiplied(120, 170, 255, 40));
        painter.vline(r.left(), ys, Stroke::new(1.0, Color32::LIGHT_BLUE));
        painter.vline(r.right(), ys, Stroke::new(1.0, Color32::LIGHT_BLUE));
    }
    if let (Some(Drag::BoxZoom { from }), Some(p)) = (st.drag, pointer) {
        let r = Rect::from_x_y_ranges(geom.x(from)..=p.x, ys);
        painter.rect_stroke(
            r,
            0.0,
            Stroke::new(1.5, Color32::YELLOW),
            StrokeKind::Inside,
        );
    }
    if let Some(p) = pointer {
        painter.vline(p.x, ys, Stroke::new(1.0, Color32::from_gray(160)));
    }
}

#[allow(clippy::too_many_arguments)]
fn overview_ui(
    ui: &Ui,
    rect: Rect,
    traces: &[Locked<'_>],
    st: &ViewState,
    extent: (AxisTime, AxisTime),
    data_x0: f32,
    data_w: f32,
    resp: &egui::Response,
) -> Option<Input> {
    let painter = ui.painter_at(rect);
    // How much of the run is in view, where the overview shows which part.
    painter
        .with_clip_rect(Rect::from_x_y_ranges(
            rect.left()..=data_x0 - 6.0,
            rect.y_range(),
        ))
        .text(
            Pos2::new(rect.left() + 4.0, rect.center().y),
            Align2::LEFT_CENTER,
            format!(
                "window {} · run {}",
                round_ns(st.view.span()),
                round_ns(extent.1 - extent.0)
            ),
            FontId::proportional(12.0),
            ui.visuals().weak_text_color(),
        );
    let area = Rect::from_min_max(
        Pos2::new(data_x0, rect.top() + 4.0),
        Pos2::new(data_x0 + data_w, rect.bottom() - 4.0),
    );
    painter.rect_filled(area, 0.0, ui.visuals().extreme_bg_color);
    let whole = Geom {
        x0: data_x0,
        w: data_w,
        view: TimeView {
            t0: extent.0,
            t1: extent.1,
        },
    };
    if let Some(t) = traces.first()
        && let Some((_, p)) = t.s.pyramids.iter().next()
        && !t.slot.data.metrics.is_empty()
    {
        let scale = full_scale(t, 0);
        let cols = p.columns(
            0,
            t.slot.local(whole.view.t0),
            whole.px_ns(),
            data_w as usize,
            None,
        );
        heat_mesh(&painter, area, &cols, scale);
    }

    let v = Rect::from_x_y_ranges(
        whole.x(st.view.t0).max(area.left())..=whole.x(st.view.t1).min(area.right()),
        area.y_range(),
    );
    painter.rect_stroke(v, 0.0, Stroke::new(1.5, Color32::WHITE), StrokeKind::Inside);
    let p = resp.interact_pointer_pos();
    p.filter(|_| resp.dragged() || resp.clicked())
        .map(|p| Input::CenterAt(whole.t(p.x)))
}

/// The time axis: ticks from the recordings' start in units that suit the zoom, labels that never
/// overlap and never run past the right edge; in the label column the legend of the marks drawn
/// on the tracks (idle gaps, missing data).
fn axis_ui(ui: &Ui, rect: Rect, geom: &Geom, origin: AxisTime, gaps: bool) {
    let painter = ui.painter_at(rect);
    let color = ui.visuals().text_color();
    let font = FontId::monospace(11.0);
    let measure = |s: &str| {
        painter
            .layout_no_wrap(s.to_string(), font.clone(), color)
            .size()
            .x
    };
    let ticks = crate::axis::ticks((geom.view.t0, geom.view.t1), origin, geom.w, &measure);
    let right = geom.x0 + geom.w;
    for tick in ticks {
        let x = geom.x(tick.t);
        painter.vline(
            x,
            rect.bottom() - 6.0..=rect.bottom(),
            Stroke::new(1.0, color),
        );
        // A label that would run past the data's right edge is left out, not clipped.
        if x + 2.0 + measure(&tick.label) <= right {
            painter.text(
                Pos2::new(x + 2.0, rect.center().y - 2.0),
                Align2::LEFT_CENTER,
                tick.label,
                font.clone(),
                color,
            );
        }
    }
    legend(
        &painter,
        rect,
        geom.x0 - 6.0,
        gaps,
        ui.visuals().weak_text_color(),
    );
}

/// The legend of the hatched marks: idle gaps (the band under each GPU's first track) and
/// missing data.
fn legend(painter: &egui::Painter, rect: Rect, right: f32, gaps: bool, text: Color32) {
    let mut x = rect.left() + 6.0;
    let items: &[(&str, Color32, Color32)] = if gaps {
        &[
            ("idle gap", paint::GAP_FILL, paint::GAP_HATCH),
            ("no data", paint::DROP_FILL, paint::DROP_HATCH),
        ]
    } else {
        &[("no data", paint::DROP_FILL, paint::DROP_HATCH)]
    };
    for (name, fill, lines) in items {
        let galley = painter.layout_no_wrap(name.to_string(), FontId::proportional(11.0), text);
        let sw = Rect::from_min_size(Pos2::new(x, rect.center().y - 5.0), Vec2::new(16.0, 10.0));
        // Whole items only, inside the label column.
        if sw.right() + 4.0 + galley.size().x > right {
            return;
        }
        painter.rect_filled(sw, 0.0, *fill);
        paint::hatch(painter, sw, *lines);
        let at = Pos2::new(sw.right() + 4.0, rect.center().y - galley.size().y / 2.0);
        x = at.x + galley.size().x + 10.0;
        painter.galley(at, galley, text);
    }
}
